package dataplane

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// The health port runs the app's rewritten probes against the app on
// loopback: HTTP (status rule, Host header), TCP.
func TestAppHealthProbes(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	app := upstream(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/live" && healthy.Load() && r.Host == "web.local" && r.Header.Get("X-Probe") == "1" {
			return
		}
		w.WriteHeader(500)
	}))
	_, port, _ := net.SplitHostPort(app)
	probers, err := ParseAppProbers(fmt.Sprintf(`{
		"/app-health/web/livez": {"httpGet": {"path": "/live", "port": %s, "httpHeaders": [{"name": "Host", "value": "web.local"}, {"name": "X-Probe", "value": "1"}]}},
		"/app-health/web/readyz": {"tcpSocket": {"port": %s}},
		"/app-health/web/startupz": {"tcpSocket": {"port": 1}}}`, port, port))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(noRetry, testCluster("echo", endpoint(app, "a")))
	cfg.Health = "127.0.0.1:0"
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, AccessLog: &logBuffer{}, Workers: 1, AppProbers: probers})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	probe := func(path string) int {
		resp, err := http.Get("http://" + s.AdminAddrs()["health"] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := probe("/app-health/web/livez"); c != 200 {
		t.Errorf("healthy HTTP probe: %d", c)
	}
	if c := probe("/app-health/web/readyz"); c != 200 {
		t.Errorf("TCP probe: %d", c)
	}
	if c := probe("/app-health/web/startupz"); c != 503 {
		t.Errorf("TCP probe to a closed port: %d", c)
	}
	healthy.Store(false)
	if c := probe("/app-health/web/livez"); c != 503 {
		t.Errorf("failing HTTP probe: %d", c)
	}
	if c := probe("/app-health/nope/livez"); c != 404 {
		t.Errorf("unknown probe: %d", c)
	}
	for _, bad := range []string{`{"/x": {"tcpSocket": {"port": 1}}}`, `{"/app-health/a/b": {}}`, `[1]`} {
		if _, err := ParseAppProbers(bad); err == nil || !strings.Contains(err.Error(), "app probers") {
			t.Errorf("ParseAppProbers(%s): %v", bad, err)
		}
	}
}
