package cli

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet-dev/meshlet/dataplane"
	"github.com/meshlet-dev/meshlet/dataplane/config"
	"github.com/meshlet-dev/meshlet/discovery"
)

// xdsSource merges the control plane's clusters and routes into the static
// config (which keeps the listeners, ports and access log) and reloads the
// data plane with each complete update.
type xdsSource struct {
	base   *config.Config
	srv    *dataplane.Server
	log    *slog.Logger
	mu     sync.Mutex
	routes []config.Route
	conn   *grpc.ClientConn
	client *discovery.ADSClient
}

// startXDS dials addr (plaintext here; mTLS with the SDS identity comes
// with the mTLS work) and runs the ADS client until ctx ends.
func startXDS(ctx context.Context, addr, nodeID string, base *config.Config, srv *dataplane.Server, log *slog.Logger) (*xdsSource, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("run: -xds %q: %w", addr, err)
	}
	x := &xdsSource{base: base, srv: srv, log: log, conn: conn}
	loc := base.Node.Locality
	x.client, err = discovery.NewADSClient(discovery.ADSOptions{
		Conn: conn,
		Node: &corev3.Node{Id: nodeID, Cluster: base.Node.Cluster,
			Locality: &corev3.Locality{Region: loc.Region, Zone: loc.Zone, SubZone: loc.SubZone}},
		OnRoutes:   func(r []config.Route) { x.mu.Lock(); x.routes = r; x.mu.Unlock() },
		OnClusters: x.apply,
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
			srv.SetReady(true)
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
	routes := x.routes
	x.mu.Unlock()
	cfg, err := mergeXDS(x.base, clusters, routes)
	if err == nil {
		err = x.srv.Reload(cfg)
	}
	if err != nil {
		x.log.Error("xds update refused; keeping the running config", "err", err)
	}
}

// mergeXDS adds xDS clusters to the static ones (a static cluster wins a
// name clash) and xDS routes to the first outbound listener, after its
// static routes; the control plane's local cluster becomes the zone-aware
// local cluster unless the static file names one.
func mergeXDS(base *config.Config, clusters []config.Cluster, routes []config.Route) (*config.Config, error) {
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
		if c.Name == discovery.LocalClusterName && cfg.LocalCluster == "" {
			cfg.LocalCluster = c.Name
		}
	}
	cfg.Listeners = append([]config.Listener(nil), base.Listeners...)
	for i := range cfg.Listeners {
		if cfg.Listeners[i].Direction != config.Outbound {
			continue
		}
		l := &cfg.Listeners[i]
		l.Routes = append(append([]config.Route(nil), l.Routes...), routes...)
		break
	}
	return &cfg, cfg.Validate()
}

func (x *xdsSource) close() {
	if x != nil {
		x.conn.Close()
	}
}
