package dataplane

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
	"github.com/meshlet-dev/meshlet/lb"
)

// healthResult is what one checker's goroutine reports about one host: the
// state its lb.HostHealthCheck machine is in after the latest probe.
type healthResult struct {
	checker  int
	healthy  bool
	degraded bool
}

// healthChecker runs a cluster's active health checks: one goroutine per
// (host, checker) probing on Envoy's schedule and keeping that pair's
// state machine; the main loop combines the checkers into host flags.
type healthChecker struct {
	s     *Server
	c     *cluster
	hosts map[string]*hostHealth // main loop only
}

type hostHealth struct {
	failed, degraded []bool
}

func newHealthChecker(s *Server, c *cluster) *healthChecker {
	h := &healthChecker{s: s, c: c, hosts: map[string]*hostHealth{}}
	for _, host := range c.lbc.Hosts() {
		n := len(c.cfg.HealthChecks)
		hh := &hostHealth{failed: make([]bool, n), degraded: make([]bool, n)}
		// Hosts start failed until their first check, unless a reload
		// carried a verdict over.
		failed := host.Flags&lb.FailedActiveHC != 0
		for i := range hh.failed {
			hh.failed[i] = failed
		}
		h.hosts[host.Address] = hh
	}
	return h
}

func (h *healthChecker) start() {
	for addr := range h.hosts {
		for i := range h.c.cfg.HealthChecks {
			go h.probeLoop(addr, i)
		}
	}
}

// hadTraffic is Envoy's "the cluster has opened an upstream connection",
// which switches probing from no_traffic_interval to interval.
func (h *healthChecker) hadTraffic() bool {
	for _, st := range h.c.stats {
		if st.Get(stats.UpstreamCxTotal) > 0 {
			return true
		}
	}
	return false
}

func (h *healthChecker) probeLoop(addr string, idx int) {
	cfg := h.c.cfg.HealthChecks[idx]
	hcfg := cfg.HealthCheckConfig.WithDefaults()
	rnd := newRandom()
	state := lb.NewHostHealthCheck()
	p := newProber(cfg, addr, h.c.name)
	defer p.close()
	delay := lb.FirstCheckDelay(hcfg, rnd)
	for {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-h.c.stopped:
			t.Stop()
			return
		case <-h.s.ctx.Done():
			t.Stop()
			return
		}
		ctx, cancel := context.WithTimeout(h.s.ctx, hcfg.Timeout)
		ok, degraded, failure := p.probe(ctx)
		cancel()
		var tr lb.HealthTransition
		result := lb.CheckHealthy
		if ok {
			tr = state.OnSuccess(degraded, hcfg)
		} else {
			tr = state.OnFailure(failure, hcfg)
			result = lb.CheckUnhealthy
		}
		h.s.report(event{kind: evHealthResult, cluster: h.c, addr: addr,
			hc: healthResult{checker: idx, healthy: state.Healthy(), degraded: state.Degraded()}})
		delay = lb.NextCheckInterval(hcfg, result, tr, h.hadTraffic(), rnd)
	}
}

// apply folds one checker's report into the host's flags (main loop);
// it reports whether the host's flags changed. A host that becomes healthy
// is also un-ejected by outlier detection, as Envoy does by default.
func (h *healthChecker) apply(addr string, r healthResult, now time.Time, outlier func([]lb.OutlierEvent)) bool {
	hh := h.hosts[addr]
	if hh == nil || r.checker >= len(hh.failed) {
		return false
	}
	hh.failed[r.checker], hh.degraded[r.checker] = !r.healthy, r.degraded
	anyFailed, anyDegraded := false, false
	for i := range hh.failed {
		anyFailed = anyFailed || hh.failed[i]
		anyDegraded = anyDegraded || hh.degraded[i]
	}
	was := h.c.lbc.Host(addr)
	if was == nil {
		return false
	}
	const hcFlags = lb.FailedActiveHC | lb.PendingActiveHC | lb.DegradedActiveHC
	want := was.Flags &^ hcFlags
	if anyFailed {
		want |= lb.FailedActiveHC
	}
	if anyDegraded {
		want |= lb.DegradedActiveHC
	}
	changed := want != was.Flags
	if changed {
		h.c.lbc.SetFlags(addr, hcFlags, false)
		h.c.lbc.SetFlags(addr, want&hcFlags, true)
		h.s.log.Info("health check changed host", "cluster", h.c.name, "host", addr, "healthy", !anyFailed, "degraded", anyDegraded)
	}
	if !anyFailed && was.Flags&lb.FailedActiveHC != 0 && h.c.outlier != nil && h.c.cfg.Outlier.SuccessfulActiveHealthCheckUnejectHost {
		if cur := h.c.lbc.Host(addr); cur != nil {
			outlier(h.c.outlier.OnActiveHealthCheckSuccess(cur.ID, now))
		}
	}
	return changed
}

// prober performs one kind of check against one host.
type prober interface {
	probe(ctx context.Context) (ok, degraded bool, failure lb.CheckFailure)
	close()
}

func newProber(cfg config.HealthCheck, addr, cluster string) prober {
	switch cfg.Kind {
	case config.HealthCheckTCP:
		return &tcpProber{addr: addr, send: cfg.Send, receive: cfg.Receive}
	case config.HealthCheckGRPC:
		return &grpcProber{addr: addr, service: cfg.GRPCService}
	}
	host := cfg.Host
	if host == "" {
		host = cluster
	}
	statuses := cfg.ExpectedStatuses
	if len(statuses) == 0 {
		statuses = [][2]uint32{{200, 201}}
	}
	d := &net.Dialer{}
	d.SetMultipathTCP(false)
	return &httpProber{url: "http://" + addr + cfg.Path, host: host, statuses: statuses,
		client: &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, DisableCompression: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type httpProber struct {
	url, host string
	statuses  [][2]uint32
	client    *http.Client
}

func (p *httpProber) probe(ctx context.Context) (bool, bool, lb.CheckFailure) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return false, false, lb.FailureActive
	}
	req.Host = p.host
	req.Header.Set("User-Agent", "Envoy/HC")
	resp, err := p.client.Do(req)
	if err != nil {
		return false, false, lb.FailureNetwork
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	for _, r := range p.statuses {
		if uint32(resp.StatusCode) >= r[0] && uint32(resp.StatusCode) < r[1] {
			return true, resp.Header.Get("X-Envoy-Degraded") != "", 0
		}
	}
	return false, false, lb.FailureActive
}

func (p *httpProber) close() { p.client.CloseIdleConnections() }

type tcpProber struct {
	addr          string
	send, receive []byte
}

func (p *tcpProber) probe(ctx context.Context) (bool, bool, lb.CheckFailure) {
	var d net.Dialer
	d.SetMultipathTCP(false)
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return false, false, lb.FailureNetwork
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if len(p.send) > 0 {
		if _, err := c.Write(p.send); err != nil {
			return false, false, lb.FailureNetwork
		}
	}
	if len(p.receive) > 0 {
		buf := make([]byte, 0, 2*len(p.receive))
		tmp := make([]byte, 512)
		for !bytes.Contains(buf, p.receive) {
			n, err := c.Read(tmp)
			buf = append(buf, tmp[:n]...)
			if err != nil {
				return false, false, lb.FailureNetwork
			}
			if len(buf) > 64<<10 {
				return false, false, lb.FailureActive
			}
		}
	}
	return true, false, 0
}

func (p *tcpProber) close() {}

type grpcProber struct {
	addr, service string
	conn          *grpc.ClientConn
}

func (p *grpcProber) probe(ctx context.Context) (bool, bool, lb.CheckFailure) {
	if p.conn == nil {
		c, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, false, lb.FailureNetwork
		}
		p.conn = c
	}
	resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: p.service})
	if err != nil {
		return false, false, lb.FailureNetwork
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return false, false, lb.FailureActive
	}
	return true, false, 0
}

func (p *grpcProber) close() {
	if p.conn != nil {
		_ = p.conn.Close()
	}
}
