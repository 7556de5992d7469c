package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
)

// demoFlags defines the flags of `sidecar demo`: the failover story of
// docs/design.md, live. It starts the embedded example's upstreams on loopback in
// three zones, the sidecar with that config and a load generator, then
// kills an upstream, drains zone a and brings everything back, printing
// each second where traffic went (per zone) and with which response flags.
func demoFlags(fs *flag.FlagSet, _ func(string) string) func(io.Writer) error {
	phase := fs.Duration("phase", 4*time.Second, "`DURATION` of each of the four phases: steady, an upstream killed, zone a drained, all restored.")
	rate := fs.Int("rps", 200, "`N` requests per second from the load generator.")
	return func(out io.Writer) error { return demo(*phase, *rate, out) }
}

func demo(phase time.Duration, rate int, out io.Writer) error {
	cfg, err := loadConfig("")
	if err != nil {
		return err
	}
	cfg.AccessLog.Path = "off"
	echo := cfg.ClusterByName("echo")
	if echo == nil || len(echo.HealthChecks) == 0 {
		return fmt.Errorf("demo: the embedded config has no health-checked cluster echo")
	}
	// Check fast enough for phases of a few seconds.
	for i := range echo.HealthChecks {
		hc := &echo.HealthChecks[i].HealthCheckConfig
		fast := 200 * time.Millisecond
		hc.Interval, hc.NoTrafficInterval, hc.NoTrafficHealthyInterval = fast, fast, fast
		hc.UnhealthyInterval, hc.UnhealthyEdgeInterval, hc.HealthyEdgeInterval = fast, fast, fast
		hc.UnhealthyThreshold, hc.HealthyThreshold = 2, 1
	}
	if tcp := cfg.ClusterByName("echo-tcp"); tcp != nil {
		tcp.HealthChecks = nil // the demo runs no TCP upstreams
	}
	// Every port is the kernel's choice (the example's IPs are kept), so
	// two demos, or a demo and a sidecar, on one host never collide; the
	// addresses are printed. Only the HTTP listener is needed.
	cfg.Admin, cfg.Prometheus, cfg.Health = "127.0.0.1:0", "127.0.0.1:0", ""
	cfg.Listeners = cfg.Listeners[:1]
	if cfg.Listeners[0].Address, err = anyPort(cfg.Listeners[0].Address); err != nil {
		return fmt.Errorf("demo: listener: %w", err)
	}
	// ups is keyed by the example's address (the phases name them); each
	// upstream listens on its IP at a port of the kernel's choice, which
	// the cluster's endpoint then names.
	ups := map[string]*demoUpstream{}
	for i, ep := range echo.Endpoints {
		addr, err := anyPort(ep.Address)
		if err == nil {
			var u *demoUpstream
			if u, err = startDemoUpstream(addr, ep.Locality.Zone); err == nil {
				ups[ep.Address] = u
				echo.Endpoints[i].Address = u.addr
			}
		}
		if err != nil {
			for _, u := range ups {
				u.stop()
			}
			return fmt.Errorf("demo: upstream %s: %w", ep.Address, err)
		}
	}
	defer func() {
		for _, u := range ups {
			u.stop()
		}
	}()
	srv, err := dataplane.New(cfg, dataplane.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Workers: resolveWorkers(0)})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Shutdown()
	target := "http://" + srv.ListenerAddrs()[cfg.Listeners[0].Address] + "/"

	var mu sync.Mutex
	zones := map[string]int{}
	flags := map[string]int{}
	total := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		t := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				zone, flag := "-", "-"
				resp, err := client.Get(target)
				switch {
				case err != nil:
					flag = "client error"
				case resp.StatusCode != 200:
					flag = fmt.Sprint(resp.StatusCode)
					b, _ := io.ReadAll(resp.Body)
					if f := flagOf(string(b)); f != "" {
						flag += " " + f
					}
					resp.Body.Close()
				default:
					b, _ := io.ReadAll(resp.Body)
					zone = strings.TrimSpace(string(b))
					resp.Body.Close()
				}
				mu.Lock()
				zones[zone]++
				flags[flag]++
				total++
				mu.Unlock()
			}()
		}
	}()

	fmt.Fprintf(out, "meshlet demo: sidecar in zone a, upstreams %s, load %d rps on %s\n", demoHosts(echo), rate, target)
	fmt.Fprintf(out, "clients run 60/20/20 %% in zones a/b/c and echo has 50/25/25 %% of its hosts there: zone-aware routing keeps ~83 %% in a\n")
	fmt.Fprintf(out, "while it runs: curl http://%s/clusters   curl http://%s/stats/prometheus\n\n", srv.AdminAddrs()["admin"], srv.AdminAddrs()["prometheus"])
	fmt.Fprintf(out, "%-6s %-42s %5s %7s %7s %7s  %-9s %-18s %7s  %s\n", "time", "phase", "req", "zone a", "zone b", "zone c", "failures", "zone routing", "retries", "healthy hosts")
	start := time.Now()
	var lastRetries int64
	phases := []struct {
		name string
		act  func()
	}{
		{"steady: all 4 upstreams healthy", nil},
		{"killed 127.0.0.11 (zone a)", func() { ups["127.0.0.11:8080"].stop() }},
		{"drained zone a (127.0.0.12 fails /healthz)", func() { ups["127.0.0.12:8080"].sick.Store(true) }},
		{"restored 127.0.0.11 and 127.0.0.12", func() {
			// Back on the port the cluster names.
			if u, err := startDemoUpstream(ups["127.0.0.11:8080"].addr, "a"); err == nil {
				ups["127.0.0.11:8080"] = u
			}
			ups["127.0.0.12:8080"].sick.Store(false)
		}},
	}
	for _, p := range phases {
		if p.act != nil {
			p.act()
		}
		end := time.Now().Add(phase)
		for time.Now().Before(end) {
			time.Sleep(min(time.Second, time.Until(end)))
			mu.Lock()
			line := demoLine(time.Since(start), p.name, total, zones, flags)
			clear(zones)
			clear(flags)
			total = 0
			mu.Unlock()
			stats := srv.Stats()
			retries := stats["cluster.echo.upstream_rq_retry"]
			state, healthy := "", 0
			for _, c := range srv.Clusters() {
				if c.Name == "echo" {
					state = c.ZoneRouting
					for _, h := range c.Hosts {
						if h.HealthFlags == "healthy" {
							healthy++
						}
					}
				}
			}
			fmt.Fprintf(out, "%s %-18s %7d  %d of %d\n", line, state, retries-lastRetries, healthy, len(echo.Endpoints))
			lastRetries = retries
		}
	}
	close(stop)
	wg.Wait()
	return nil
}

func demoHosts(c *config.Cluster) string {
	var hs []string
	for _, ep := range c.Endpoints {
		hs = append(hs, ep.Address+"("+ep.Locality.Zone+")")
	}
	return strings.Join(hs, " ")
}

// flagOf pulls a response flag hint out of a local reply body.
func flagOf(body string) string {
	switch {
	case strings.Contains(body, "no healthy upstream"):
		return "UH"
	case strings.Contains(body, "connection failure"):
		return "UF"
	case strings.Contains(body, "overflow"):
		return "UO"
	case strings.Contains(body, "timeout"):
		return "UT"
	}
	return ""
}

func demoLine(t time.Duration, phase string, total int, zones, flags map[string]int) string {
	pct := func(n int) string {
		if total == 0 {
			return "-"
		}
		return fmt.Sprintf("%5.1f%%", 100*float64(n)/float64(total))
	}
	var fails []string
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if k != "-" {
			fails = append(fails, fmt.Sprintf("%s x%d", k, flags[k]))
		}
	}
	if len(fails) == 0 {
		fails = []string{"none"}
	}
	return fmt.Sprintf("%5.0fs %-42s %5d %7s %7s %7s  %-9s", t.Seconds(), phase, total, pct(zones["a"]), pct(zones["b"]), pct(zones["c"]), strings.Join(fails, ", "))
}

// anyPort returns addr's host with port 0.
func anyPort(addr string) (string, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, "0"), nil
}

// demoUpstream answers its zone name, and /healthz (503 when sick).
type demoUpstream struct {
	addr string // where it listens
	srv  *http.Server
	sick atomic.Bool
	once sync.Once
}

func startDemoUpstream(addr, zone string) (*demoUpstream, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	u := &demoUpstream{addr: l.Addr().String()}
	u.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && u.sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, zone)
	})}
	go func() { _ = u.srv.Serve(l) }()
	return u, nil
}

func (u *demoUpstream) stop() { u.once.Do(func() { u.srv.Close() }) }
