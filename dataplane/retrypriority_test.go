package dataplane

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/lb/retry"
)

// A retry leaves a priority whose hosts all still look healthy when the
// route has the previous_priorities retry priority: P0's two hosts answer
// 503 but stay healthy (no outlier detection), so the load keeps P0 at
// 100 %. Without the plugin the retry goes to P0's other host (previous
// hosts) and fails too; with it, the retry's load excludes P0 and P1's host
// answers.
func TestHTTPRetryPriorityLeavesAttemptedPriority(t *testing.T) {
	var p0Hits atomic.Int64
	failing := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p0Hits.Add(1)
		w.WriteHeader(503)
	})
	a := endpoint(upstream(t, "127.0.0.11", failing), "a")
	b := endpoint(upstream(t, "127.0.0.12", failing), "a")
	backup := endpoint(upstream(t, "127.0.0.21", named("backup")), "b")
	backup.Priority = 1
	for _, tt := range []struct {
		updateFrequency uint32
		wantCode        int
		wantBody        string
	}{
		{0, 503, ""},
		{1, 200, "backup"},
	} {
		policy := retry.Policy{RetryOn: retry.On5xx, NumRetries: 1, BaseInterval: time.Millisecond, MaxInterval: 2 * time.Millisecond,
			RetryPriorityUpdateFrequency: tt.updateFrequency}.WithDefaults()
		s, _ := startServer(t, testConfig(policy, testCluster("echo", a, b, backup)))
		p0Hits.Store(0)
		for i := range 4 {
			code, body, _ := get(t, http.DefaultClient, s, "/")
			if code != tt.wantCode || (tt.wantBody != "" && body != tt.wantBody) {
				t.Fatalf("update_frequency %d, request %d: got %d %q, want %d %q", tt.updateFrequency, i, code, body, tt.wantCode, tt.wantBody)
			}
		}
		// Each request's first attempt went to P0; only without the plugin
		// did its retry go there too.
		want := int64(4)
		if tt.updateFrequency == 0 {
			want = 8
		}
		if got := p0Hits.Load(); got != want {
			t.Errorf("update_frequency %d: P0 hosts answered %d attempts, want %d", tt.updateFrequency, got, want)
		}
	}
}
