package dataplane

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/config"
)

// Reloading under load drops no request; an invalid config is refused with
// the reason and the running one keeps serving.
func TestReloadUnderLoad(t *testing.T) {
	a := upstream(t, "127.0.0.11", named("a"))
	b := upstream(t, "127.0.0.12", named("b"))
	c := upstream(t, "127.0.0.13", named("c"))
	cfg := testConfig(noRetry, testCluster("echo", endpoint(a, "a"), endpoint(b, "a")))
	s, _ := startServer(t, cfg)

	var ok, failed atomic.Int64
	var seenC atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, proxyURL(s)+"/", nil)
				req.Host = "echo"
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					if resp != nil {
						resp.Body.Close()
					}
					continue
				}
				var buf [8]byte
				n, _ := resp.Body.Read(buf[:])
				resp.Body.Close()
				if string(buf[:n]) == "c" {
					seenC.Store(true)
				}
				ok.Add(1)
			}
		}()
	}
	waitFor(t, "traffic before the reload", func() bool { return ok.Load() >= 20 })

	// A valid change: a third host and a new route timeout.
	next := *cfg
	next.Clusters = []config.Cluster{testCluster("echo", endpoint(a, "a"), endpoint(b, "a"), endpoint(c, "a"))}
	next.Listeners = append(next.Listeners[:0:0], cfg.Listeners...)
	next.Listeners[0].Routes = append(next.Listeners[0].Routes[:0:0], cfg.Listeners[0].Routes...)
	next.Listeners[0].Routes[0].Timeout = 3 * time.Second
	if err := s.Reload(&next); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	// An invalid one: a route to a cluster that does not exist.
	bad := next
	bad.Listeners = append(bad.Listeners[:0:0], next.Listeners...)
	bad.Listeners[0].Routes = append(bad.Listeners[0].Routes[:0:0], next.Listeners[0].Routes...)
	bad.Listeners[0].Routes[0].Cluster = "nope"
	err := s.Reload(&bad)
	if err == nil || !strings.Contains(err.Error(), `listeners[0].routes[0].cluster: no cluster "nope"`) {
		t.Errorf("invalid reload: %v", err)
	}
	// Traffic goes on after both reloads, and reaches the added host.
	after := ok.Load()
	waitFor(t, "traffic after the reloads, to the added host too", func() bool { return seenC.Load() && ok.Load() >= after+20 })
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed across reloads", failed.Load(), failed.Load()+ok.Load())
	}
	if !seenC.Load() {
		t.Error("the host added by the reload never got traffic")
	}
	if got := s.Config().Listeners[0].Routes[0].Timeout; got != 3*time.Second {
		t.Errorf("running route timeout %v, want the valid reload's 3s", got)
	}
	t.Logf("%d requests across two reloads, none failed", ok.Load())
}

// A reload compares the access log's resolved settings (defaults filled
// in, as the running config has them): an unchanged file log keeps its
// writer, a changed one gets a new writer.
func TestReloadKeepsAnUnchangedAccessLog(t *testing.T) {
	cfg := testConfig(noRetry, testCluster("echo", endpoint(upstream(t, "127.0.0.11", named("a")), "a")))
	cfg.AccessLog = config.AccessLog{Path: filepath.Join(t.TempDir(), "access.log")}
	s, err := New(cfg, Options{HTTP1Server: testHTTP1Server, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	before := s.access.Load()
	if err := s.Reload(cfg); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if s.access.Load() != before {
		t.Error("a reload with the same access log replaced its writer")
	}
	changed := *cfg
	changed.AccessLog.Format = config.AccessLogJSON
	if err := s.Reload(&changed); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if s.access.Load() == before {
		t.Error("a reload to the JSON format kept the text writer")
	}
}
