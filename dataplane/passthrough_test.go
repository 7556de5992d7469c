package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

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

// TestGRPCToAnHTTP1Cluster: a gRPC request to a cluster configured for
// HTTP/1.1 (the sidecar's inbound clusters, which know nothing of the
// app's protocol) goes upstream as h2c, since gRPC is HTTP/2 only, as
// Envoy's inbound clusters follow the downstream protocol; other
// requests keep HTTP/1.1.
func TestGRPCToAnHTTP1Cluster(t *testing.T) {
	app := upstream(t, "127.0.0.1", h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
		if r.Header.Get("Content-Type") == "application/grpc" {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Trailer", "Grpc-Status")
			w.WriteHeader(200)
			w.Header().Set("Grpc-Status", "0")
			return
		}
		fmt.Fprint(w, "plain")
	}), &http2.Server{}))
	s, _ := startServer(t, testConfig(noRetry, testCluster("echo", endpoint(app, "a")))) // UpstreamHTTP1
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	req, _ := http.NewRequest(http.MethodPost, proxyURL(s)+"/svc.Echo/Call", strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Host = "echo"
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Proto") != "HTTP/2.0" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Fatalf("gRPC through an HTTP/1.1 cluster: %d, upstream saw %q, grpc-status %q", resp.StatusCode, resp.Header.Get("X-Proto"), resp.Trailer.Get("Grpc-Status"))
	}
	if code, body, h := get(t, &http.Client{}, s, "/"); code != 200 || body != "plain" || h.Get("X-Proto") != "HTTP/1.1" {
		t.Fatalf("plain HTTP/1.1 through the same cluster: %d %q over %q", code, body, h.Get("X-Proto"))
	}
}
