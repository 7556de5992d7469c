package dataplane

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/lb"
)

func needBinary(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (Debian package prometheus; .ci/run installs it): %v", name, err)
	}
	return p
}

func scrape(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.AdminAddrs()["prometheus"] + "/stats/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func promServer(t *testing.T) *Server {
	t.Helper()
	a := upstream(t, "127.0.0.11", named("a1"))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(a, "a")))
	cfg.Prometheus = "127.0.0.1:0"
	s, _ := startServer(t, cfg)
	for range 3 {
		get(t, http.DefaultClient, s, "/")
	}
	return s
}

// The exposition has Envoy's cluster stats and Istio's request metrics, and
// promtool accepts it.
func TestPrometheusExposition(t *testing.T) {
	promtool := needBinary(t, "promtool")
	s := promServer(t)
	text := scrape(t, s)
	for _, want := range []string{
		`envoy_cluster_upstream_rq_total{envoy_cluster_name="echo"} 3`,
		`envoy_cluster_upstream_rq_xx{envoy_cluster_name="echo",envoy_response_code_class="2"} 3`,
		`envoy_cluster_upstream_cx_active{envoy_cluster_name="echo"}`,
		`envoy_cluster_lb_zone_routing_all_directly{envoy_cluster_name="echo"} 0`,
		`envoy_cluster_membership_healthy{envoy_cluster_name="echo"} 1`,
		`istio_requests_total{connection_security_policy="none",destination_principal="unknown",destination_service="echo",destination_service_name="echo",reporter="source",request_protocol="http",response_code="200",response_flags="-",source_principal="unknown",source_workload="client",upstream_cluster="echo"} 3`,
		`istio_request_duration_seconds_bucket{`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %s", want)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// A real Prometheus server scrapes :15090 and its query API returns the
// request counter.
func TestPrometheusServerScrapes(t *testing.T) {
	bin := needBinary(t, "prometheus")
	s := promServer(t)
	dir := t.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	web := l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf("global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: sidecar\n    metrics_path: /stats/prometheus\n    static_configs: [{targets: [%q]}]\n", s.AdminAddrs()["prometheus"])
	os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644)
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + web + `/api/v1/query?query=istio_requests_total{response_code="200"}`)
		if err == nil {
			var r struct {
				Data struct {
					Result []struct {
						Value [2]any `json:"value"`
					} `json:"result"`
				} `json:"data"`
			}
			json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if len(r.Data.Result) == 1 && r.Data.Result[0].Value[1] == "3" {
				return
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("Prometheus never returned istio_requests_total = 3; its log:\n%s", out.String())
}

// Response flags reach the request metrics: every failure kind is a
// label value operators can alert on.
func TestResponseFlagsInMetrics(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a1"))
	down := lb.Endpoint{Address: a, Locality: lb.Locality{Zone: "a"}, Health: lb.EDSUnhealthy}
	dead := testCluster("dead", endpoint(closedAddr(t, "127.0.0.12"), "a"))
	sick := testCluster("sick", down)
	sick.LB.PanicThreshold = 0
	cfg := testConfig(noRetry, testCluster("echo", endpoint(a, "a")), dead, sick)
	cfg.Listeners[0].Routes = append(cfg.Listeners[0].Routes,
		config.Route{Name: "dead", Hosts: []string{"dead"}, Cluster: "dead", Timeout: time.Second},
		config.Route{Name: "sick", Hosts: []string{"sick"}, Cluster: "sick", Timeout: time.Second})
	cfg.Prometheus = "127.0.0.1:0"
	s, _ := startServer(t, cfg)
	for _, host := range []string{"dead", "sick", "nowhere"} {
		req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	text := scrape(t, s)
	for _, want := range []string{`response_code="503",response_flags="UF"`, `response_code="503",response_flags="UH"`, `response_code="404",response_flags="NR"`} {
		if !strings.Contains(text, want) {
			t.Errorf("istio_requests_total lacks %s", want)
		}
	}
}

// Cluster names with dots (Istio's outbound|80||echo.default.svc.cluster.local)
// stay whole in the envoy_cluster_name label.
func TestPrometheusDottedClusterName(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a1"))
	const name = "outbound|80||echo.default.svc.cluster.local"
	cfg := testConfig(noRetry, testCluster(name, endpoint(a, "a")))
	cfg.Listeners[0].Routes[0].Cluster = name
	cfg.Prometheus = "127.0.0.1:0"
	s, _ := startServer(t, cfg)
	get(t, http.DefaultClient, s, "/")
	text := scrape(t, s)
	for _, want := range []string{
		`envoy_cluster_upstream_rq_total{envoy_cluster_name="` + name + `"} 1`,
		`envoy_cluster_upstream_rq_xx{envoy_cluster_name="` + name + `",envoy_response_code_class="2"} 1`,
		`envoy_tcp_idle_timeout{envoy_tcp_prefix="` + name + `"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %s", want)
		}
	}
	if strings.Contains(text, `envoy_cluster_name="outbound|80||echo"`) {
		t.Error("a cluster name was cut at its first dot")
	}
}
