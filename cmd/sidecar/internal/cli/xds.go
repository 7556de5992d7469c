package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/discovery/adsclient"
	"github.com/meshlet-dev/meshlet/discovery/meshmeta"
)

// xdsSource merges the control plane's clusters and routes into the static
// config (which keeps the listeners, ports and access log) and reloads the
// data plane with each complete update.
type xdsSource struct {
	// self is the pod's own address (POD_IP in -pod mode), whose
	// endpoints mergeXDS dials without mTLS.
	self   netip.Addr
	base   *config.Config
	srv    *dataplane.Server
	log    *slog.Logger
	mu     sync.Mutex
	routes []config.Route
	// inbound is the inbound security policy (nil before the first).
	inbound *adsclient.Inbound
	last    []config.Cluster // the last complete xDS set
	conn    *grpc.ClientConn
	client  *adsclient.Client
}

// xdsDial says how to reach the control plane: TLS verified against caFile
// (the mesh root the injector mounts) with the ServiceAccount token in
// tokenFile as a bearer token; both empty: plaintext (tests, static mode).
type xdsDial struct {
	caFile, tokenFile string
	// sotw selects the state-of-the-world protocol instead of delta.
	sotw bool
}

func (d xdsDial) options(addr string) ([]grpc.DialOption, error) {
	if d.caFile == "" {
		if d.tokenFile != "" {
			return nil, fmt.Errorf("run: -xds-token needs -xds-ca (a token is never sent in plaintext)")
		}
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	cfg, err := controlPlaneTLS("xds", addr, d.caFile)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if d.tokenFile != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{path: d.tokenFile}))
	}
	return opts, nil
}

// tokenCreds sends the projected ServiceAccount token, re-read on every
// stream (the kubelet rotates it).
type tokenCreds struct{ path string }

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		return nil, fmt.Errorf("xds token: %w", err)
	}
	return map[string]string{"authorization": "Bearer " + strings.TrimSpace(string(b))}, nil
}

func (tokenCreds) RequireTransportSecurity() bool { return true }

// startXDS dials addr and runs the ADS client until ctx ends.
func startXDS(ctx context.Context, addr, nodeID string, self netip.Addr, dial xdsDial, base *config.Config, srv *dataplane.Server, log *slog.Logger, ready func()) (*xdsSource, error) {
	opts, err := dial.options(addr)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("run: -xds %q: %w", addr, err)
	}
	x := &xdsSource{self: self, base: base, srv: srv, log: log, conn: conn}
	loc := base.Node.Locality
	x.client, err = adsclient.New(adsclient.Options{
		Conn: conn,
		Node: &corev3.Node{Id: nodeID, Cluster: base.Node.Cluster,
			Locality: &corev3.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone}},
		OnRoutes:   func(r []config.Route) { x.mu.Lock(); x.routes = r; x.mu.Unlock() },
		Extensions: meshmeta.InboundExtensionNames,
		OnInbound:  func(in adsclient.Inbound) { x.mu.Lock(); x.inbound = &in; x.mu.Unlock() },
		OnClusters: x.apply,
		Delta:      !dial.sotw,
		Logger:     log,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	go func() { _ = x.client.Run(ctx) }()
	go func() {
		select {
		case <-x.client.Ready():
			ready()
		case <-ctx.Done():
		}
	}()
	return x, nil
}

// apply merges one complete set of clusters (and the routes delivered just
// before) into the static config and reloads. A merge the data plane
// refuses is logged and the running config stays.
func (x *xdsSource) apply(clusters []config.Cluster) {
	x.mu.Lock()
	routes, base, inbound := x.routes, x.base, x.inbound
	x.last = clusters
	x.mu.Unlock()
	cfg, err := mergeXDS(base, selfPlain(clusters, x.self), routes, inbound)
	if err == nil {
		err = x.srv.Reload(cfg)
	}
	if err != nil {
		x.log.Error("xds update refused; keeping the running config", "err", err)
		return
	}
	releaseMemory.kick()
}

// mergeXDS adds xDS clusters to the static ones (a static cluster wins a
// name clash) and xDS routes to the first outbound listener of each
// address family, after its static routes but before a static catch-all;
// the control plane's local cluster becomes the zone-aware local cluster
// unless the static file names one. The inbound policy (nil: none yet)
// goes to every inbound listener: its RBAC filters, and its mTLS modes
// over the static ones (which the pod's environment set), keeping the
// static allow lists.
func mergeXDS(base *config.Config, clusters []config.Cluster, routes []config.Route, inbound *adsclient.Inbound) (*config.Config, error) {
	cfg := *base
	cfg.Clusters = append([]config.Cluster(nil), base.Clusters...)
	have := map[string]bool{}
	for _, c := range base.Clusters {
		have[c.Name] = true
	}
	for _, c := range clusters {
		if have[c.Name] {
			continue
		}
		cfg.Clusters = append(cfg.Clusters, c)
		if c.Name == meshmeta.LocalClusterName && cfg.LocalCluster == "" {
			cfg.LocalCluster = c.Name
		}
	}
	// The routes go to the first outbound listener of each address family
	// (the eBPF redirect's targets: 127.0.0.1:15001 and [::1]:15001).
	cfg.Listeners = append([]config.Listener(nil), base.Listeners...)
	done := map[bool]bool{} // by "is IPv6"
	for i := range cfg.Listeners {
		l := &cfg.Listeners[i]
		if l.Direction != config.Outbound {
			continue
		}
		ap, err := netip.ParseAddrPort(l.Address)
		v6 := err == nil && ap.Addr().Is6() && !ap.Addr().Is4In6()
		if done[v6] {
			continue
		}
		done[v6] = true
		// A static catch-all (no destination, no host: the passthrough)
		// goes after the Services' routes, which it would otherwise hide.
		var specific, catchAll []config.Route
		for _, r := range l.Routes {
			if r.Destination == "" && len(r.Hosts) == 0 {
				catchAll = append(catchAll, r)
			} else {
				specific = append(specific, r)
			}
		}
		l.Routes = append(append(specific, routes...), catchAll...)
	}
	if inbound != nil {
		for i := range cfg.Listeners {
			if l := &cfg.Listeners[i]; l.Direction == config.Inbound {
				l.Authz = inbound.Authz
				l.MTLS = overlayModes(l.MTLS, inbound.MTLS)
			}
		}
	}
	return &cfg, cfg.Validate()
}

// setBase replaces the static part (a reloaded config file) and re-applies
// the last xDS data on top, so a file reload never drops what the control
// plane sent.
func (x *xdsSource) setBase(cfg *config.Config) error {
	x.mu.Lock()
	x.base = cfg
	clusters, routes, inbound := x.last, x.routes, x.inbound
	x.mu.Unlock()
	merged, err := mergeXDS(cfg, selfPlain(clusters, x.self), routes, inbound)
	if err != nil {
		return err
	}
	return x.srv.Reload(merged)
}

func (x *xdsSource) close() {
	if x != nil {
		x.conn.Close()
	}
}

// controlPlaneTLS is the TLS config for dialling the control plane at addr
// (host:port) for flag -<what>: its certificate must chain to the PEM root
// in caFile and name the host.
func controlPlaneTLS(what, addr, caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("run: -%s-ca: %w", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("run: -%s-ca %s: no PEM certificate", what, caFile)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("run: -%s %q: %w", what, addr, err)
	}
	return &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}, nil
}

// selfPlain returns clusters with the pod's own endpoints (address self)
// no longer meshed: a request the sidecar sends its own pod goes to the
// app in plaintext, as the app's own connection to itself would, for
// sk_lookup leaves connections from the pod to its own address to the
// app, which speaks no mTLS. (Istio's iptables send them through the
// inbound listener instead.) The clusters are copied only where an
// endpoint changes.
func selfPlain(clusters []config.Cluster, self netip.Addr) []config.Cluster {
	if !self.IsValid() {
		return clusters
	}
	var out []config.Cluster
	for i := range clusters {
		for j, ep := range clusters[i].Endpoints {
			ap, err := netip.ParseAddrPort(ep.Address)
			if err != nil || ap.Addr().Unmap() != self || ep.Metadata[config.MetadataMeshed] != "true" {
				continue
			}
			if out == nil {
				out = slices.Clone(clusters)
			}
			if &out[i].Endpoints[0] == &clusters[i].Endpoints[0] {
				out[i].Endpoints = slices.Clone(clusters[i].Endpoints)
			}
			md := maps.Clone(ep.Metadata)
			delete(md, config.MetadataMeshed)
			delete(md, config.MetadataIdentity)
			out[i].Endpoints[j].Metadata = md
		}
	}
	if out == nil {
		return clusters
	}
	return out
}

// overlayModes returns static with the modes of policy (nil: static as
// it is): the default mode, and each port's, a port's allow lists kept
// from the static port entry or the default.
func overlayModes(static, policy *config.InboundMTLS) *config.InboundMTLS {
	if policy == nil {
		return static
	}
	out := &config.InboundMTLS{}
	if static != nil {
		out.PeerAuthorization = static.PeerAuthorization
		if len(static.Ports) > 0 {
			out.Ports = maps.Clone(static.Ports)
		}
	}
	out.Mode = policy.Mode
	for port, pa := range out.Ports {
		if _, set := policy.Ports[port]; !set {
			pa.Mode = policy.Mode
			out.Ports[port] = pa
		}
	}
	for port, pp := range policy.Ports {
		pa, ok := out.Ports[port]
		if !ok {
			pa = out.PeerAuthorization
		}
		pa.Mode = pp.Mode
		if out.Ports == nil {
			out.Ports = map[uint16]config.PeerAuthorization{}
		}
		out.Ports[port] = pa
	}
	return out
}
