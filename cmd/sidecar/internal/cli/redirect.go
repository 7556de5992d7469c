package cli

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"unicode"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshlet-dev/meshlet/bpf"
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
)

// redirect is the sidecar's eBPF traffic capture: loaded and attached to
// the pod before the data plane opens its listeners (the sidecar's own
// sockets are exempt by its cgroup), then fed the listeners' sockets.
type redirect struct {
	objs     *bpf.Objects
	att      *bpf.Attachment
	workers  *bpf.WorkerGroup
	workers6 *bpf.WorkerGroup
	outbound string // config address of the IPv4 outbound listener
	// outbound6 is the IPv6 outbound listener ("" none: IPv6 connects are
	// then not redirected, see setupRedirect).
	outbound6 string
	inbound   string // config address of the inbound listener ("" none)
}

// setupRedirect loads the programs and attaches them to the pod: its
// cgroup is podCgroup, else MESHLET_POD_CGROUP, else the one named after
// POD_UID under the host hierarchy at MESHLET_HOST_CGROUP (what the
// injector mounts), else the parent of the sidecar's own cgroup; its network
// namespace is the sidecar's own. Exclusions come from the injector's
// MESHLET_EXCLUDE_* variables. accelerate turns the sk_msg loopback
// short-circuit on.
func setupRedirect(cfg *config.Config, podCgroup string, accelerate bool, proxyUID int) (*redirect, error) {
	r := &redirect{}
	opts := bpf.Options{Accelerate: accelerate, ProxyUID: proxyUID}
	if proxyUID == 0 {
		opts.ProxyUID = -1 // the sidecar stays root: no uid to exempt
	}
	for _, l := range cfg.Listeners {
		switch {
		case l.Direction == config.Outbound:
			ap, err := netip.ParseAddrPort(l.Address)
			if err != nil || ap.Addr().IsUnspecified() {
				return nil, fmt.Errorf("redirect: outbound listener %q must be a specific address:port", l.Address)
			}
			switch {
			case ap.Addr().Is4() && r.outbound == "":
				r.outbound, opts.OutboundIPv4 = l.Address, ap
			case ap.Addr().Is6() && r.outbound6 == "":
				r.outbound6, opts.OutboundIPv6 = l.Address, ap
			}
		case l.Direction == config.Inbound && r.inbound == "":
			r.inbound = l.Address
		}
	}
	if r.outbound == "" {
		return nil, fmt.Errorf("redirect: the config has no IPv4 outbound listener to redirect to")
	}
	// Without an IPv6 outbound listener (no IPv6 loopback in the pod),
	// connect6 still serves dual-stack sockets dialling IPv4 (sent to
	// OutboundIPv4); native IPv6 connects go to bpf's default [::1]:15001,
	// which cannot exist there either.
	if podCgroup == "" {
		var err error
		if podCgroup, err = podCgroupFromEnv(os.Getenv); err != nil {
			return nil, fmt.Errorf("redirect: %w", err)
		}
	}
	if podCgroup == "" {
		own, err := bpf.CurrentCgroup()
		if err != nil {
			return nil, fmt.Errorf("redirect: %w", err)
		}
		podCgroup = filepath.Dir(own)
	}
	ex, err := exclusionsFromEnv()
	if err != nil {
		return nil, err
	}
	if r.objs, err = bpf.Load(opts); err != nil {
		return nil, fmt.Errorf("redirect: %w", err)
	}
	if err := r.objs.SetExclusions(ex); err != nil {
		r.objs.Close()
		return nil, fmt.Errorf("redirect: %w", err)
	}
	if r.att, err = r.objs.Attach(bpf.Pod{Cgroup: podCgroup, Netns: "/proc/self/ns/net"}); err != nil {
		r.objs.Close()
		return nil, fmt.Errorf("redirect: %w", err)
	}
	return r, nil
}

// probe uses the maps the way the running sidecar does (counters, sockhash
// lookups), for dropPrivileges.
func (r *redirect) probe() error {
	_, err := r.objs.Counters()
	return err
}

// originalDst is the data plane's hook: SO_ORIGINAL_DST, answered by the
// cgroup/getsockopt program.
func originalDst(c *net.TCPConn) (netip.AddrPort, bool) {
	d, err := bpf.OriginalDst(c)
	return d, err == nil
}

// registerSockets hands the running data plane's sockets to the programs:
// the outbound workers' group for per-CPU steering, and the inbound socket
// for sk_lookup.
func (r *redirect) registerSockets(srv *dataplane.Server) error {
	var err error
	if r.workers, err = r.objs.RegisterWorkers(srv.ListenerSockets(r.outbound)); err != nil {
		return fmt.Errorf("redirect: %w", err)
	}
	if r.outbound6 != "" {
		if r.workers6, err = r.objs.RegisterWorkers(srv.ListenerSockets(r.outbound6)); err != nil {
			return fmt.Errorf("redirect: %w", err)
		}
	}
	if r.inbound != "" {
		if socks := srv.ListenerSockets(r.inbound); len(socks) > 0 {
			if err := r.objs.SetInboundListener(socks[0]); err != nil {
				return fmt.Errorf("redirect: %w", err)
			}
		}
	}
	return nil
}

func (r *redirect) close() {
	if r == nil {
		return
	}
	if r.workers != nil {
		r.workers.Close()
	}
	if r.workers6 != nil {
		r.workers6.Close()
	}
	r.att.Close()
	r.objs.Close()
}

func exclusionsFromEnv() (bpf.Exclusions, error) {
	var ex bpf.Exclusions
	ports := func(env string) ([]uint16, error) {
		var out []uint16
		for _, f := range strings.Split(os.Getenv(env), ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			p, err := strconv.ParseUint(f, 10, 16)
			if err != nil || p == 0 {
				return nil, fmt.Errorf("redirect: %s: %q is not a port", env, f)
			}
			out = append(out, uint16(p))
		}
		return out, nil
	}
	var err error
	if ex.OutboundPorts, err = ports("MESHLET_EXCLUDE_OUTBOUND_PORTS"); err != nil {
		return ex, err
	}
	if ex.InboundPorts, err = ports("MESHLET_EXCLUDE_INBOUND_PORTS"); err != nil {
		return ex, err
	}
	for _, f := range strings.Split(os.Getenv("MESHLET_EXCLUDE_OUTBOUND_CIDRS"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return ex, fmt.Errorf("redirect: MESHLET_EXCLUDE_OUTBOUND_CIDRS: %q: %v", f, err)
		}
		ex.OutboundCIDRs = append(ex.OutboundCIDRs, p)
	}
	return ex, nil
}

// redirectCollector serves the programs' counters and map fill as
// Prometheus metrics: meshlet_redirect_events_total{event},
// meshlet_redirect_map_entries{map} and meshlet_redirect_map_capacity.
type redirectCollector struct{ objs *bpf.Objects }

var (
	redirectEventsDesc = prometheus.NewDesc("meshlet_redirect_events_total",
		"eBPF redirect events since the programs were loaded (connects seen, redirected, bypassed by reason, original destinations answered, sk_lookup steering, per-CPU worker selection, sk_msg).",
		[]string{"event"}, nil)
	redirectMapDesc = prometheus.NewDesc("meshlet_redirect_map_entries",
		"Entries in the eBPF redirect's connection maps.", []string{"map"}, nil)
	redirectCapDesc = prometheus.NewDesc("meshlet_redirect_map_capacity",
		"Entries each eBPF connection map holds at most.", nil, nil)
)

func (c redirectCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- redirectEventsDesc
	ch <- redirectMapDesc
	ch <- redirectCapDesc
}

func (c redirectCollector) Collect(ch chan<- prometheus.Metric) {
	if n, err := c.objs.Counters(); err == nil {
		v := reflect.ValueOf(n)
		for i := range v.NumField() {
			ch <- prometheus.MustNewConstMetric(redirectEventsDesc, prometheus.CounterValue, float64(v.Field(i).Uint()), snakeCase(v.Type().Field(i).Name))
		}
	} else {
		ch <- prometheus.NewInvalidMetric(redirectEventsDesc, err)
	}
	if f, err := c.objs.MapFill(); err == nil {
		for name, n := range map[string]int{"orig_by_cookie": f.OrigByCookie, "orig_by_peer": f.OrigByPeer, "sock_pairs": f.SockPairs} {
			ch <- prometheus.MustNewConstMetric(redirectMapDesc, prometheus.GaugeValue, float64(n), name)
		}
		ch <- prometheus.MustNewConstMetric(redirectCapDesc, prometheus.GaugeValue, float64(f.Capacity))
	} else {
		ch <- prometheus.NewInvalidMetric(redirectMapDesc, err)
	}
}

// snakeCase turns a Go field name (BypassProxyCgroup) into bypass_proxy_cgroup.
func snakeCase(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 && !unicode.IsUpper(rune(s[i-1])) {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
