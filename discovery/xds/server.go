// The server: the model's rebuild and translation and each proxy's
// snapshot, under one lock (the ADS streams' own state is streams.go's).

package xds

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/mtls"
)

// Defaults of Options.
const (
	DefaultDebounce         = 100 * time.Millisecond
	DefaultMaxDebounceDelay = time.Second
)

// Options configure a Server.
type Options struct {
	// Debounce is the quiet time after a change before snapshots are
	// rebuilt, so that a burst of changes becomes one new version per
	// sidecar (DefaultDebounce).
	Debounce time.Duration
	// MaxDebounceDelay bounds how long a steady stream of changes can
	// hold a rebuild back (DefaultMaxDebounceDelay).
	MaxDebounceDelay time.Duration
	// Authenticator identifies every stream; nil accepts all.
	Authenticator Authenticator
	// ClusterDomain defaults to DefaultClusterDomain.
	ClusterDomain string
	// TrustDomain of the SPIFFE IDs given to meshed endpoints
	// (spiffe://<trust domain>/ns/<namespace>/sa/<service account>);
	// default mtls.DefaultTrustDomain.
	TrustDomain string
	// RootNamespace is where PeerAuthentications and
	// AuthorizationPolicies without a selector apply mesh-wide (default
	// DefaultRootNamespace, Istio's).
	RootNamespace string
	// MTLSMode is the inbound mTLS mode of workloads no PeerAuthentication
	// or annotation sets: STRICT, PERMISSIVE or DISABLE; empty means
	// PERMISSIVE (the injector's -mtls-mode).
	MTLSMode string
	// RecheckKinds is how often the informers ask the API server's
	// discovery again for an optional kind (Gateway API routes, Istio's
	// policies) it did not serve: once its CRD is installed the kind is
	// watched, without a restart. Default DefaultRecheckKinds.
	RecheckKinds time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// DefaultRecheckKinds is Options.RecheckKinds' default.
const DefaultRecheckKinds = 10 * time.Second

// ProxyInfo is what the control plane knows about a sidecar besides what
// the sidecar says in its xDS node.
type ProxyInfo struct {
	// LocalService is the Service of the sidecar's pod, whose endpoints
	// become its meshmeta.LocalClusterName; zero: none. When the stream
	// is authenticated, its namespace must be the stream's.
	LocalService types.NamespacedName
	// Locality, when set, replaces the locality the sidecar reports (the
	// control plane knows it from the pod's Node).
	Locality *lb.Locality
}

// Stats are a Server's counters.
type Stats struct {
	// Rebuilds counts debounced rebuilds, Snapshots the snapshots set
	// for sidecars (one per sidecar whose resources changed).
	Rebuilds, Snapshots int
	// Proxies are the sidecars known, Streams the open streams.
	Proxies, Streams int
	// NACKs counts rejected responses; Unauthenticated the streams
	// refused for want of an identity, Denied those whose identity does
	// not match the node's Service.
	NACKs, Unauthenticated, Denied int
	// ServiceErrors is the number of Services left out because they do
	// not translate (see ServiceError).
	ServiceErrors int
	// Changes counts the model changes that scheduled a rebuild, and
	// Debounced the debounce periods that ended: each in a rebuild or,
	// before SetSynced, in nothing. Together they tell what a change did
	// or did not cause.
	Changes, Debounced int
}

// Server is the ADS server of the control plane. It reads the cluster
// from listers: the informers' (RunInformers), or stores of its own that
// UpsertService, UpsertEndpointSlice, UpsertNode, UpsertPod and their
// deletions fill. Changes only mark what they touch; after a debounce it
// translates the changed Services with TranslateService, reading them
// from the listers, and queues every sidecar (xDS node id) whose snapshot
// may have changed. Publishing workers then give each sidecar a snapshot
// of every cluster, its load assignments with failover priorities for
// the sidecar's locality, and its local cluster; the snapshot is chosen
// under the model lock and set after it is released, so a slow publish
// or many sidecars never hold up the model. Sidecars with the same
// locality and Service (and namespace, when it has consumer routes) share
// one snapshot, which carries the RouteConfigurations of the HTTPRoutes
// and GRPCRoutes attached to Services (UpsertHTTPRoute, UpsertGRPCRoute, or
// RunInformersWithRoutes' informers) beside the clusters. It serves the state-of-the-world
// and delta ADS through go-control-plane's snapshot cache.
type Server struct {
	opts  Options
	log   *slog.Logger
	cache cachev3.SnapshotCache
	xds   serverv3.Server
	ctx   context.Context
	stop  context.CancelFunc
	kick  chan struct{}
	// publish holds the node ids whose snapshot may be out of date; a node
	// is never published by two workers at once, so its snapshots are set
	// in order.
	publish workqueue.TypedRateLimitingInterface[string]
	// own are the stores the Upsert and Delete methods fill.
	own ownStores

	mu  sync.Mutex // guards the model below; src's listers need no lock
	src sources
	// syncing is set by SetSynced; synced once a rebuild has translated
	// what the informers delivered, and snapshots may go out.
	syncing, synced bool
	dirty           map[types.NamespacedName]bool
	allDirty        bool
	results         map[types.NamespacedName]*translatedService
	gen             *generation
	proxies         map[string]*proxyState
	stats           Stats

	// routeDirty are parent Services whose routes changed, routeSvcDirty
	// Services that changed (as parents or backends); routeResults the
	// parents' RouteConfigurations; consumerNS the client namespaces
	// with consumer routes, which get groups of their own.
	routeDirty, routeSvcDirty map[types.NamespacedName]bool
	routeResults              map[types.NamespacedName]*parentRoutes
	consumerNS                map[string]bool

	// policies are the translated security policies by the key of what
	// selects them (inboundPolicyLocked); policiesDirty drops them at
	// the next rebuild.
	policies      map[string]*workloadPolicies
	policiesDirty bool

	smu     sync.Mutex // guards streams
	streams map[streamKey]*streamState

	// changedAt is when the first change since the last rebuild came
	// (zero: none); the rebuild hands it to the sidecars it queues.
	changedAt time.Time
	metrics   *metrics
}

// publishWorkers set snapshots in parallel, so that a slow publish holds
// one worker and not every other sidecar's update.
const publishWorkers = 4

// proxyState is one sidecar.
type proxyState struct {
	info       ProxyInfo
	registered bool        // by SetProxy
	reported   lb.Locality // from its xDS node
	streams    int
	published  string // the group version it was last given
	// pendingSince is the first change not yet in a snapshot the
	// sidecar was given (pilot_proxy_convergence_time).
	pendingSince time.Time
}

// NewServer returns a server; Register it on a gRPC server and Run it.
func NewServer(opts Options) *Server {
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.TrustDomain == "" {
		opts.TrustDomain = mtls.DefaultTrustDomain
	}
	if opts.RecheckKinds <= 0 {
		opts.RecheckKinds = DefaultRecheckKinds
	}
	if opts.MaxDebounceDelay < opts.Debounce {
		opts.MaxDebounceDelay = max(DefaultMaxDebounceDelay, opts.Debounce)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		opts:  opts,
		log:   log.With("component", "xds"),
		cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		kick:  make(chan struct{}, 1),
		publish: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "meshlet_xds_publish"}),
		own:     newOwnStores(),
		dirty:   map[types.NamespacedName]bool{},
		results: map[types.NamespacedName]*translatedService{},
		gen:     newGeneration(nil),
		proxies: map[string]*proxyState{},
		streams: map[streamKey]*streamState{},

		routeDirty: map[types.NamespacedName]bool{}, routeSvcDirty: map[types.NamespacedName]bool{},
		routeResults: map[types.NamespacedName]*parentRoutes{}, consumerNS: map[string]bool{},
		metrics: newMetrics(),
	}
	s.src = s.own.sources()
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.xds = serverv3.NewServer(s.ctx, s.cache, s.callbacks())
	return s
}

// Register adds the aggregated discovery service (ADS, state of the world
// and delta) to g.
func (s *Server) Register(g *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
}

// Run rebuilds snapshots after changes, and publishes them, until ctx is
// done; then the server's streams end and Run returns nil.
func (s *Server) Run(ctx context.Context) error {
	var workers sync.WaitGroup
	defer func() {
		s.stop() // first: it ends a publish waiting on a stream
		s.publish.ShutDown()
		workers.Wait()
	}()
	for range publishWorkers {
		workers.Go(func() {
			for s.publishNext() {
			}
		})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		}
		start := time.Now()
		t := time.NewTimer(s.opts.Debounce)
	quiet:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-s.kick:
				if left := s.opts.MaxDebounceDelay - time.Since(start); left > 0 {
					t.Reset(min(s.opts.Debounce, left))
				}
			case <-t.C:
				break quiet
			}
		}
		s.rebuild()
	}
}

// SetSynced tells the server its informers have synced. Until then it
// answers no sidecar, so that a new sidecar waits for the mesh rather
// than becoming ready on an empty one.
func (s *Server) SetSynced() {
	s.mu.Lock()
	s.syncing = true
	s.mu.Unlock()
	s.changed()
}

// changed schedules a rebuild.
func (s *Server) changed() {
	s.mu.Lock()
	s.stats.Changes++
	if s.changedAt.IsZero() {
		s.changedAt = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// localityLocked is the locality a sidecar's priorities are computed for:
// SetProxy's, else its pod's node's, else the one it reports. A sidecar
// whose xDS node id is <pod>.<namespace> (what the injected sidecar
// sends) gets its locality from its pod's node's topology labels, over
// the one it reports, as Istio derives a proxy's locality from its pod's
// node: failover priorities then follow where the pod really runs.
func (s *Server) localityLocked(nodeID string, p *proxyState) lb.Locality {
	if p.info.Locality != nil {
		return *p.info.Locality
	}
	if pod, ok := podOfNode(nodeID); ok {
		if po, err := s.src.pods.Pods(pod.Namespace).Get(pod.Name); err == nil && po.Spec.NodeName != "" {
			if n, err := s.src.nodes.Get(po.Spec.NodeName); err == nil {
				if l := nodeLocality(n); l != (lb.Locality{}) {
					return l
				}
			}
		}
	}
	return p.reported
}

// podOfNode is the pod an xDS node id <pod>.<namespace> names.
func podOfNode(nodeID string) (types.NamespacedName, bool) {
	i := strings.LastIndexByte(nodeID, '.')
	if i <= 0 {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: nodeID[i+1:], Name: nodeID[:i]}, true
}

// SetProxy records what the control plane knows of a sidecar; it applies
// at once, connected or not.
func (s *Server) SetProxy(nodeID string, info ProxyInfo) {
	s.mu.Lock()
	p := s.proxy(nodeID)
	p.info, p.registered = info, true
	s.mu.Unlock()
	s.publish.Add(nodeID)
}

// RemoveProxy forgets what SetProxy recorded.
func (s *Server) RemoveProxy(nodeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.proxies[nodeID]
	if !ok {
		return
	}
	p.info, p.registered = ProxyInfo{}, false
	if p.streams == 0 {
		s.forgetLocked(nodeID)
		return
	}
	s.publish.Add(nodeID)
}

// ServiceError returns why a Service is left out, or nil.
func (s *Server) ServiceError(key types.NamespacedName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.results[key]; t != nil {
		return t.err
	}
	return nil
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	st.Proxies = len(s.proxies)
	st.ServiceErrors = 0
	for _, t := range s.results {
		if t.err != nil {
			st.ServiceErrors++
		}
	}
	s.mu.Unlock()
	s.smu.Lock()
	st.Streams = len(s.streams)
	s.smu.Unlock()
	return st
}

// rebuild translates the changed Services and queues every sidecar for
// publishing; the snapshots are set by the publishing workers, after the
// model lock is released.
func (s *Server) rebuild() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Debounced++ // seen with the pass's outcome: both under mu
	if !s.syncing {
		return
	}
	dirty := s.dirty
	if s.allDirty {
		dirty = maps.Clone(s.dirty)
		for key := range s.results {
			dirty[key] = true
		}
		if svcs, err := s.src.services.List(labels.Everything()); err == nil {
			for _, svc := range svcs {
				dirty[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = true
			}
		}
	}
	s.dirty, s.allDirty = map[types.NamespacedName]bool{}, false
	if len(dirty) > 0 {
		s.translateLocked(dirty)
	}
	policies := s.policiesDirty
	if policies {
		s.policies, s.policiesDirty = map[string]*workloadPolicies{}, false
	}
	if routed := s.translateRoutesLocked(); len(dirty) > 0 || routed || policies {
		s.gen = newGeneration(s.gen)
	}
	s.synced = true
	s.stats.Rebuilds++
	since := s.changedAt
	s.changedAt = time.Time{}
	for id, p := range s.proxies {
		if p.pendingSince.IsZero() && p.published != "" {
			p.pendingSince = since
		}
		s.publish.Add(id)
	}
}

// translateLocked translates the given Services from the listers.
func (s *Server) translateLocked(keys map[types.NamespacedName]bool) {
	var plaintext func(types.NamespacedName, uint16) bool
	if s.disableInUseLocked() {
		plaintext = s.plaintextLocked()
	}
	for key := range keys {
		svc, err := s.src.services.Services(key.Namespace).Get(key.Name)
		if err != nil {
			delete(s.results, key) // deleted (listers fail only with NotFound)
			continue
		}
		objs, err := s.src.slices.ByIndex(sliceServiceIndex, key.String())
		if err != nil {
			s.log.Error("endpointslices of a service", "service", key.String(), "error", err)
		}
		slices := make([]*discoveryv1.EndpointSlice, 0, len(objs))
		for _, o := range objs {
			slices = append(slices, o.(*discoveryv1.EndpointSlice))
		}
		nodes, meshed := s.endpointRefs(slices)
		scs, err := TranslateService(ServiceInput{Service: svc, Slices: slices, Nodes: nodes,
			MeshedPods: meshed, Plaintext: plaintext, ClusterDomain: s.opts.ClusterDomain})
		if err != nil {
			s.log.Error("service left out of xDS", "service", key.String(), "error", err)
		}
		s.results[key] = newTranslatedService(scs, err)
	}
}

// endpointRefs looks up, in the listers, the Nodes and the meshed pods the
// endpoints of slices name, as TranslateService takes them.
func (s *Server) endpointRefs(slices []*discoveryv1.EndpointSlice) (map[string]*corev1.Node, map[types.NamespacedName]string) {
	nodes := map[string]*corev1.Node{}
	meshed := map[types.NamespacedName]string{}
	for _, es := range slices {
		for _, e := range es.Endpoints {
			if e.NodeName != nil && *e.NodeName != "" {
				if _, seen := nodes[*e.NodeName]; !seen {
					if n, err := s.src.nodes.Get(*e.NodeName); err == nil {
						nodes[n.Name] = n
					}
				}
			}
			ref := e.TargetRef
			if ref == nil || (ref.Kind != "" && ref.Kind != "Pod") {
				continue
			}
			key := types.NamespacedName{Namespace: cmp.Or(ref.Namespace, es.Namespace), Name: ref.Name}
			if p, err := s.src.pods.Pods(key.Namespace).Get(key.Name); err == nil {
				if id, ok := s.podIdentity(p); ok {
					meshed[key] = id
				}
			}
		}
	}
	return nodes, meshed
}

// proxy returns the state of a sidecar, creating it.
func (s *Server) proxy(nodeID string) *proxyState {
	p, ok := s.proxies[nodeID]
	if !ok {
		p = &proxyState{}
		s.proxies[nodeID] = p
	}
	return p
}

// publishNext publishes one queued sidecar; false once the queue is shut
// down.
func (s *Server) publishNext() bool {
	id, quit := s.publish.Get()
	if quit {
		return false
	}
	defer s.publish.Done(id)
	if err := s.syncProxy(id); err != nil {
		if s.ctx.Err() == nil {
			s.log.Error("set snapshot", "node", id, "error", err)
			s.publish.AddRateLimited(id)
		}
		return true
	}
	s.publish.Forget(id)
	return true
}

// syncProxy makes the snapshot cache hold what sidecar nodeID should have
// now: its group's snapshot, or none once it is forgotten. The snapshot
// is chosen under the model lock and set after it is released. It is
// idempotent, and a change made meanwhile queues the sidecar again.
func (s *Server) syncProxy(nodeID string) error {
	s.mu.Lock()
	p, ok := s.proxies[nodeID]
	if !ok {
		s.mu.Unlock()
		s.cache.ClearSnapshot(nodeID)
		return nil
	}
	if !s.synced {
		s.mu.Unlock()
		return nil
	}
	policy, wp := s.inboundPolicyLocked(nodeID)
	key := groupKey{locality: s.localityLocked(nodeID, p), local: p.info.LocalService,
		consumerNS: s.consumerNamespaceLocked(nodeID, p), policy: policy}
	g := s.gen.buildGroup(key, s.results, s.routeResults, wp.ext)
	if p.published == g.version {
		p.pendingSince = time.Time{} // the change did not touch it
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if err := s.cache.SetSnapshot(s.ctx, nodeID, g.snap); err != nil {
		return err
	}
	s.mu.Lock()
	p.published = g.version
	since := p.pendingSince
	p.pendingSince = time.Time{}
	s.stats.Snapshots++
	s.mu.Unlock()
	s.metrics.observeConvergence(since)
	return nil
}

// forgetLocked drops a sidecar that has no stream and no SetProxy. Its
// snapshot is cleared at once, and again by the queue, after a publish
// that may be under way.
func (s *Server) forgetLocked(nodeID string) {
	delete(s.proxies, nodeID)
	s.cache.ClearSnapshot(nodeID)
	s.publish.Add(nodeID)
}
