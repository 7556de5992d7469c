package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshlet-dev/meshlet/config"
)

// TestPassthroughEndpoint: an endpoint at port config.PassthroughPort
// (127.0.0.1:0) is dialled at the original destination's port, for HTTP
// and for opaque TCP, and one at config.PassthroughAddress at the
// original destination, as Istio's InboundPassthroughCluster reaches a
// port the pod does not declare.
func TestPassthroughEndpoint(t *testing.T) {
	app := upstream(t, "127.0.0.1", named("app"))
	cfg := testConfig(noRetry, testCluster("pass", endpoint(fmt.Sprintf("127.0.0.1:%d", config.PassthroughPort), "a")))
	l := &cfg.Listeners[0]
	l.OriginalDestination = app
	l.Routes = []config.Route{{Name: "pass", Cluster: "pass"}}
	s, logs := startServer(t, cfg)
	code, body, _ := get(t, &http.Client{}, s, "/")
	if code != 200 || body != "app" {
		t.Fatalf("HTTP through the passthrough: %d %q", code, body)
	}
	logs.waitLine(t, "GET / ", " 200 ", `"`+app+`"`)

	// The whole original destination (config.PassthroughAddress).
	other := upstream(t, "127.0.0.2", named("other"))
	cfg3 := testConfig(noRetry, testCluster("any", endpoint(config.PassthroughAddress, "a")))
	cfg3.Listeners[0].OriginalDestination = other
	cfg3.Listeners[0].Routes = []config.Route{{Name: "any", Cluster: "any"}}
	s3, _ := startServer(t, cfg3)
	if code, body, _ := get(t, &http.Client{}, s3, "/"); code != 200 || body != "other" {
		t.Fatalf("HTTP through the whole-destination passthrough: %d %q", code, body)
	}

	// Opaque TCP: a server-first-free echo at another port.
	echo := serveTCP(t, "127.0.0.1", func(c net.Conn) { io.Copy(c, c) })
	cfg2 := testConfig(noRetry, testCluster("pass", endpoint("127.0.0.1:0", "a")))
	cfg2.Listeners[0].OriginalDestination, cfg2.Listeners[0].Protocol = echo, config.ProtocolTCP
	cfg2.Listeners[0].Routes = []config.Route{{Name: "pass", Cluster: "pass"}}
	s2, _ := startServer(t, cfg2)
	conn := dialProxy(t, s2)
	fmt.Fprint(conn, "ping\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ping" {
		t.Fatalf("TCP through the passthrough: %q, %v", line, err)
	}
}
