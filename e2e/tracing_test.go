//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshlet-dev/meshlet/internal/testtool"
	"github.com/meshlet-dev/meshlet/webhook"
)

// checkTracing: one request of the client app (through /fetch) to the
// echo Service yields one trace in the real Jaeger: the client sidecar's
// CLIENT span, parent of the echo sidecar's SERVER span, which is the
// parent the echo app sees in its traceparent. The trace is found by the
// trace id of the client sidecar's access-log line. The client pod traces
// every request (meshlet.io/trace-sampling: 100); the echo pods, at the
// mesh's 1 %, honour its decision.
func checkTracing(t *testing.T, c *Cluster, client corev1.Pod, vip string, j *testtool.JaegerServer) {
	t.Helper()
	path := fmt.Sprintf("/headers?probe=trace-%d", time.Now().UnixNano())
	out := httpGet(t, "http://"+client.Status.PodIP+":8080/fetch?url="+url.QueryEscape("http://"+vip+path))
	var fetched struct {
		Results []peerResult `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &fetched); err != nil || len(fetched.Results) != 1 || fetched.Results[0].Code != 200 {
		t.Fatalf("GET %s from the client: %v %s", path, err, out)
	}
	var seen struct {
		Pod     string              `json:"pod"`
		Headers map[string][]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(fetched.Results[0].Body), &seen); err != nil {
		t.Fatalf("the echo app's /headers: %v: %s", err, fetched.Results[0].Body)
	}
	tp := strings.Join(seen.Headers["Traceparent"], ",")
	t.Logf("the echo app %s saw traceparent %q", seen.Pod, tp)

	// The client sidecar's access-log line of that request ends with its
	// trace id (%TRACE_ID%).
	var id string
	for deadline := time.Now().Add(30 * time.Second); id == ""; time.Sleep(500 * time.Millisecond) {
		for _, line := range strings.Split(c.podLog(t, client, webhook.ProxyContainer), "\n") {
			if strings.Contains(line, path) && strings.Contains(line, `" 200 `) {
				f := strings.Fields(line)
				id = f[len(f)-1]
			}
		}
		if id == "" && time.Now().After(deadline) {
			t.Fatalf("no access-log line of %s in the client sidecar's log:\n%s", path, c.podLog(t, client, webhook.ProxyContainer))
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("the client sidecar logged trace id %q for %s", id, path)
	}
	spans := j.WaitTrace(t, id, 2)
	var cs, ss *testtool.JaegerSpan
	for i := range spans {
		switch spans[i].Tag("span.kind") {
		case "client":
			cs = &spans[i]
		case "server":
			ss = &spans[i]
		}
	}
	if len(spans) != 2 || cs == nil || ss == nil {
		t.Fatalf("trace %s: want one client and one server span, got %+v", id, spans)
	}
	if cs.Parent() != "" || ss.Parent() != cs.SpanID {
		t.Errorf("trace %s: client span's parent %q (want none), server span's %q (want %s)", id, cs.Parent(), ss.Parent(), cs.SpanID)
	}
	if want := "00-" + id + "-" + ss.SpanID + "-01"; tp != want {
		t.Errorf("the echo app saw traceparent %q, want %q (the server span its parent)", tp, want)
	}
	if cs.Service != "client.shop" || ss.Service != "echo.shop" {
		t.Errorf("services %q and %q, want client.shop and echo.shop", cs.Service, ss.Service)
	}
	for _, c := range []struct {
		s          *testtool.JaegerSpan
		key, value string
	}{
		{cs, "source.principal", "spiffe://cluster.local/ns/shop/sa/default"}, {cs, "destination.principal", "spiffe://cluster.local/ns/shop/sa/default"},
		{cs, "source.zone", "zone-a"}, {cs, "url.path", "/headers"}, {cs, "http.response.status_code", "200"},
		{ss, "source.principal", "spiffe://cluster.local/ns/shop/sa/default"}, {ss, "http.response.status_code", "200"},
	} {
		if got := c.s.Tag(c.key); got != c.value {
			t.Errorf("%s span %s = %q, want %q", c.s.Tag("span.kind"), c.key, got, c.value)
		}
	}
	if z := cs.Tag("destination.zone"); z == "" || z != ss.Tag("destination.zone") {
		t.Errorf("zones: the client span's destination %q, the server span's own %q", z, ss.Tag("destination.zone"))
	}
	t.Logf("trace %s in Jaeger: %s span %s (%s, zone %s -> %s, cluster %s) parent of %s span %s (%s, zone %s); the echo app's parent is %s",
		id, cs.Service, cs.SpanID, cs.OperationName, cs.Tag("source.zone"), cs.Tag("destination.zone"), cs.Tag("upstream_cluster"),
		ss.Service, ss.SpanID, ss.OperationName, ss.Tag("destination.zone"), ss.SpanID)
}

var zoneRequestLine = regexp.MustCompile(`^meshlet_zone_requests_total\{cross_zone="(?:true|false)",destination_zone="([^"]*)",source_zone="([^"]*)",upstream_cluster="([^"]*)"\} (\S+)$`)

// zoneRequests reads the client sidecar's meshlet_zone_requests_total
// from its zone to each zone, for the echo Service's cluster.
func zoneRequests(t *testing.T, ip, srcZone string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, line := range strings.Split(httpGet(t, "http://"+ip+":15090/stats/prometheus"), "\n") {
		m := zoneRequestLine.FindStringSubmatch(line)
		if m == nil || m[2] != srcZone || !strings.Contains(m[3], "echo.shop") {
			continue
		}
		v, _ := strconv.ParseFloat(m[4], 64)
		out[m[1]] += int(v)
	}
	return out
}

// checkZoneWindow counts the client's answers over one window of a
// failover phase against the zone counters' growth: the requests the
// client sent (within one, a request in flight at either end) went to
// zones allowed only.
func checkZoneWindow(t *testing.T, what, ip string, answers func(time.Time) ([]string, int), allowed ...string) {
	t.Helper()
	before := zoneRequests(t, ip, "zone-a")
	t0 := time.Now()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if names, _ := answers(t0); len(names) >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than 5 answers in 30 s", what)
		}
	}
	after := zoneRequests(t, ip, "zone-a")
	names, _ := answers(t0)
	sent, other := 0, 0
	for z, n := range after {
		d := n - before[z]
		allowedZone := false
		for _, a := range allowed {
			allowedZone = allowedZone || a == z
		}
		if allowedZone {
			sent += d
		} else {
			other += d
		}
	}
	if other != 0 || sent < len(names)-1 || sent > len(names)+1 {
		t.Errorf("%s: the client sent %d requests in the window; zone counters grew by %d to %v and %d elsewhere (before %v, after %v)",
			what, len(names), sent, allowed, other, before, after)
		return
	}
	t.Logf("%s: %d requests sent, meshlet_zone_requests_total from zone-a grew by %d to %v and 0 elsewhere (now %v)", what, len(names), sent, allowed, after)
}
