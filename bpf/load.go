package bpf

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Defaults for Options.
var (
	// DefaultOutboundIPv4 is where IPv4 connects are redirected.
	DefaultOutboundIPv4 = netip.MustParseAddrPort("127.0.0.1:15001")
	// DefaultOutboundIPv6 is where IPv6 connects are redirected.
	DefaultOutboundIPv6 = netip.MustParseAddrPort("[::1]:15001")
	// DefaultProxyPorts are the sidecar's own ports (admin, outbound,
	// inbound, health, Prometheus), which inbound steering leaves alone.
	DefaultProxyPorts = []uint16{15000, 15001, 15006, 15021, 15090}
)

// DefaultProxyUID is the uid whose connects are never redirected (Istio's).
const DefaultProxyUID = 1337

// Options configure Load. The zero value is the sidecar's usual setup.
type Options struct {
	// OutboundIPv4 is the sidecar's outbound listener for IPv4 connects
	// (also those made on dual-stack sockets). Default DefaultOutboundIPv4.
	OutboundIPv4 netip.AddrPort
	// OutboundIPv6 is the listener for IPv6 connects (the sidecar must
	// listen there too, or IPv6 connects are refused). Default
	// DefaultOutboundIPv6.
	OutboundIPv6 netip.AddrPort
	// ProxyCgroup is the cgroup v2 directory the sidecar's tasks run in;
	// connects they make are never redirected. Default: the caller's
	// cgroup (CurrentCgroup) at Load time.
	ProxyCgroup string
	// ProxyUID is a uid whose connects are never redirected either, a second
	// guard should the sidecar run outside ProxyCgroup. 0 means
	// DefaultProxyUID; a negative value turns the guard off.
	ProxyUID int
	// ProxyPorts are the sidecar's own listening ports: inbound steering
	// leaves connections to them alone, in addition to the excluded inbound
	// ports. Nil means DefaultProxyPorts; the outbound ports are always added.
	ProxyPorts []uint16
	// Accelerate turns loopback acceleration (sockops + sk_msg) on from the
	// start; see SetAcceleration.
	Accelerate bool
}

// Objects are the programs and maps of one sidecar, loaded into the kernel.
// The maps are shared by every attachment made from them. Methods are safe
// for concurrent use.
type Objects struct {
	opts Options

	// Programs, one object file each (see gen.go).
	connect     connectPrograms
	sockops     sockopsPrograms
	getsockopt  getsockoptPrograms
	getpeername getpeernamePrograms
	release     releasePrograms
	skmsg       skmsgPrograms
	sklookup    sklookupPrograms
	reuseport   reuseportPrograms

	maps   sharedMaps
	skMsg  io.Closer // the sk_msg attachment to maps.sockPairs
	mu     sync.Mutex
	closed bool
	excl   Exclusions
	slots  [maxWorkerSlots]bool // worker slots in use
	owned  map[io.Closer]struct{}
}

// sharedMaps are created once and given to every object file.
type sharedMaps struct {
	origByCookie, origByPeer, sockPairs          *ebpf.Map
	outExcludedPorts, outExcludedCIDRs, inBypass *ebpf.Map
	inboundSockets, workers, workerGroups        *ebpf.Map
	settings, counters                           *ebpf.Map
}

// Sizes from include/meshlet.h.
const (
	maxConns       = 65536
	maxExclusions  = 1024
	maxWorkerSlots = 1024
)

func (m *sharedMaps) byName() map[string]**ebpf.Map {
	return map[string]**ebpf.Map{
		"orig_by_cookie":     &m.origByCookie,
		"orig_by_peer":       &m.origByPeer,
		"sock_pairs":         &m.sockPairs,
		"out_excluded_ports": &m.outExcludedPorts,
		"out_excluded_cidrs": &m.outExcludedCIDRs,
		"in_bypass_ports":    &m.inBypass,
		"inbound_sockets":    &m.inboundSockets,
		"workers":            &m.workers,
		"worker_groups":      &m.workerGroups,
		"settings":           &m.settings,
		"counters":           &m.counters,
	}
}

// Load loads every program into the kernel with the given options. It needs
// root; the result must be closed.
func Load(opts Options) (*Objects, error) {
	o := &Objects{owned: map[io.Closer]struct{}{}}
	vars, err := o.resolve(opts)
	if err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("bpf: load: lift the memlock limit: %w", err)
	}

	ok := false
	defer func() {
		if !ok {
			o.closeAll()
		}
	}()

	objects := []struct {
		name string
		load func() (*ebpf.CollectionSpec, error)
		dst  any
	}{
		{"connect", loadConnect, &o.connect},
		{"sockops", loadSockops, &o.sockops},
		{"getsockopt", loadGetsockopt, &o.getsockopt},
		{"getpeername", loadGetpeername, &o.getpeername},
		{"release", loadRelease, &o.release},
		{"skmsg", loadSkmsg, &o.skmsg},
		{"sklookup", loadSklookup, &o.sklookup},
		{"reuseport", loadReuseport, &o.reuseport},
	}
	cache := btf.NewCache()
	var replacements map[string]*ebpf.Map
	for _, obj := range objects {
		spec, err := obj.load()
		if err != nil {
			return nil, fmt.Errorf("bpf: load %s: %w", obj.name, err)
		}
		for name, v := range vars {
			vs, found := spec.Variables[name]
			if !found {
				return nil, fmt.Errorf("bpf: load %s: no variable %s", obj.name, name)
			}
			if err := vs.Set(v); err != nil {
				return nil, fmt.Errorf("bpf: load %s: set %s: %w", obj.name, name, err)
			}
		}
		if replacements == nil {
			if replacements, err = o.createMaps(spec); err != nil {
				return nil, err
			}
		}
		for name := range spec.Maps {
			if _, shared := replacements[name]; !shared && !strings.HasPrefix(name, ".") {
				return nil, fmt.Errorf("bpf: load %s: map %s is not one of the shared maps", obj.name, name)
			}
		}
		err = spec.LoadAndAssign(obj.dst, &ebpf.CollectionOptions{MapReplacements: replacements, Cache: cache})
		if err != nil {
			var verr *ebpf.VerifierError
			if errors.As(err, &verr) {
				return nil, fmt.Errorf("bpf: load %s: %+v", obj.name, verr)
			}
			return nil, fmt.Errorf("bpf: load %s: %w", obj.name, err)
		}
	}

	if err := o.SetAcceleration(opts.Accelerate); err != nil {
		return nil, err
	}
	if err := o.writeInboundBypass(Exclusions{}); err != nil {
		return nil, err
	}
	if o.skMsg, err = attachSkMsg(o.maps.sockPairs, o.skmsg.MeshSkMsg); err != nil {
		return nil, err
	}
	ok = true
	return o, nil
}

// resolve fills in defaults and returns the programs' load-time variables.
func (o *Objects) resolve(opts Options) (map[string]any, error) {
	if !opts.OutboundIPv4.IsValid() {
		opts.OutboundIPv4 = DefaultOutboundIPv4
	}
	if !opts.OutboundIPv6.IsValid() {
		opts.OutboundIPv6 = DefaultOutboundIPv6
	}
	if !opts.OutboundIPv4.Addr().Unmap().Is4() || opts.OutboundIPv4.Port() == 0 {
		return nil, fmt.Errorf("bpf: load: OutboundIPv4 %s is not an IPv4 address and port", opts.OutboundIPv4)
	}
	if !opts.OutboundIPv6.Addr().Is6() || opts.OutboundIPv6.Addr().Is4In6() || opts.OutboundIPv6.Port() == 0 {
		return nil, fmt.Errorf("bpf: load: OutboundIPv6 %s is not an IPv6 address and port", opts.OutboundIPv6)
	}
	opts.OutboundIPv4 = netip.AddrPortFrom(opts.OutboundIPv4.Addr().Unmap(), opts.OutboundIPv4.Port())
	if opts.ProxyCgroup == "" {
		cg, err := CurrentCgroup()
		if err != nil {
			return nil, fmt.Errorf("bpf: load: the sidecar's cgroup: %w", err)
		}
		opts.ProxyCgroup = cg
	}
	cgid, err := cgroupID(opts.ProxyCgroup)
	if err != nil {
		return nil, fmt.Errorf("bpf: load: ProxyCgroup: %w", err)
	}
	if opts.ProxyUID == 0 {
		opts.ProxyUID = DefaultProxyUID
	}
	if opts.ProxyPorts == nil {
		opts.ProxyPorts = DefaultProxyPorts
	}
	opts.ProxyPorts = slices.Clone(opts.ProxyPorts)
	opts.ProxyPorts = append(opts.ProxyPorts, opts.OutboundIPv4.Port(), opts.OutboundIPv6.Port())
	o.opts = opts

	var uid, uidSet uint32
	if opts.ProxyUID > 0 {
		uid, uidSet = uint32(opts.ProxyUID), 1
	}
	return map[string]any{
		"cfg_out4_ip":       opts.OutboundIPv4.Addr().As4(), // network byte order in memory
		"cfg_out4_port":     uint32(opts.OutboundIPv4.Port()),
		"cfg_out6_ip":       opts.OutboundIPv6.Addr().As16(),
		"cfg_out6_port":     uint32(opts.OutboundIPv6.Port()),
		"cfg_proxy_cgroup":  cgid,
		"cfg_proxy_uid":     uid,
		"cfg_proxy_uid_set": uidSet,
	}, nil
}

// createMaps creates the shared maps from one object's definitions (they are
// the same in every object: include/meshlet.h).
func (o *Objects) createMaps(spec *ebpf.CollectionSpec) (map[string]*ebpf.Map, error) {
	out := map[string]*ebpf.Map{}
	for name, dst := range o.maps.byName() {
		ms, found := spec.Maps[name]
		if !found {
			return nil, fmt.Errorf("bpf: load: no map %s in the objects", name)
		}
		m, err := ebpf.NewMap(ms)
		if err != nil {
			if errors.Is(err, unix.EPERM) {
				return nil, fmt.Errorf("bpf: create map %s: %w (needs root: CAP_BPF and CAP_SYS_ADMIN)", name, err)
			}
			return nil, fmt.Errorf("bpf: create map %s: %w", name, err)
		}
		*dst = m
		out[name] = m
	}
	if n := o.maps.counters.MaxEntries(); int(n) != numCounters {
		return nil, fmt.Errorf("bpf: load: the programs have %d counters, Counters has %d fields", n, numCounters)
	}
	return out, nil
}

// attachSkMsg attaches the sk_msg program to the sockhash with a bpf_link
// (Linux 6.10+), or the map attach before that; both go with the map.
func attachSkMsg(sockPairs *ebpf.Map, prog *ebpf.Program) (io.Closer, error) {
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: sockPairs.FD(), Program: prog, Attach: ebpf.AttachSkMsgVerdict})
	if err == nil {
		return l, nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, ebpf.ErrNotSupported) {
		return nil, fmt.Errorf("bpf: attach sk_msg to sock_pairs: %w", err)
	}
	opts := link.RawAttachProgramOptions{Target: sockPairs.FD(), Program: prog, Attach: ebpf.AttachSkMsgVerdict}
	if err := link.RawAttachProgram(opts); err != nil {
		return nil, fmt.Errorf("bpf: attach sk_msg to sock_pairs: %w", err)
	}
	return closerFunc(func() error {
		return link.RawDetachProgram(link.RawDetachProgramOptions{Target: opts.Target, Program: prog, Attach: opts.Attach})
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Close detaches every attachment and worker group still open and releases
// the programs and maps.
func (o *Objects) Close() error {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return nil
	}
	o.closed = true
	owned := make([]io.Closer, 0, len(o.owned))
	for c := range o.owned {
		owned = append(owned, c)
	}
	o.mu.Unlock()
	var errs []error
	for _, c := range owned {
		errs = append(errs, c.Close())
	}
	errs = append(errs, o.closeAll())
	return errors.Join(errs...)
}

func (o *Objects) closeAll() error {
	var errs []error
	if o.skMsg != nil {
		errs = append(errs, o.skMsg.Close())
	}
	for _, c := range []io.Closer{&o.connect, &o.sockops, &o.getsockopt, &o.getpeername,
		&o.release, &o.skmsg, &o.sklookup, &o.reuseport} {
		errs = append(errs, c.Close())
	}
	for _, m := range o.maps.byName() {
		if *m != nil {
			errs = append(errs, (*m).Close())
		}
	}
	return errors.Join(errs...)
}

// own records c as open (Close closes it); it fails once o is closed.
func (o *Objects) own(c io.Closer) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return errors.New("bpf: objects are closed")
	}
	o.owned[c] = struct{}{}
	return nil
}

func (o *Objects) disown(c io.Closer) {
	o.mu.Lock()
	delete(o.owned, c)
	o.mu.Unlock()
}

// SetAcceleration turns loopback acceleration on or off for connections
// established from now on. A connection keeps the mode it started with:
// switching a live connection between the redirect and TCP could reorder its
// bytes.
func (o *Objects) SetAcceleration(on bool) error {
	var v uint32
	if on {
		v = 1
	}
	if err := o.maps.settings.Put(uint32(0), settingsValue{Accelerate: v}); err != nil {
		return fmt.Errorf("bpf: set acceleration %v: %w", on, err)
	}
	return nil
}
