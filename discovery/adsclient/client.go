package adsclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/meshlet-dev/meshlet/config"
)

// Defaults of Options.InitialBackoff and Options.MaxBackoff.
const (
	defaultInitialBackoff = 250 * time.Millisecond
	defaultMaxBackoff     = 30 * time.Second
)

// Options configure a Client.
type Options struct {
	// Conn is the connection to the control plane. Transport security and
	// the ServiceAccount token (per-RPC credentials) are the caller's.
	Conn grpc.ClientConnInterface
	// Node identifies the sidecar to the control plane; Node.Id is
	// required. Locality is the sidecar's own, if it knows it.
	Node *corev3.Node
	// Delta selects the incremental protocol (DeltaAggregatedResources)
	// instead of the state of the world (StreamAggregatedResources).
	Delta bool
	// OnClusters receives every new complete set of clusters: each CDS
	// cluster with the endpoints of its EDS assignment, sorted by name,
	// including meshmeta.LocalClusterName when the control plane sends
	// one. It is called from Run's goroutine and should not block for
	// long; the slice is the callee's.
	OnClusters func([]config.Cluster)
	// OnRoutes, if set, receives the outbound routes of the same set (see
	// discovery.ServiceRoutes), just before OnClusters.
	OnRoutes func([]config.Route)
	// Extensions are the extension configurations (ECDS) to subscribe to
	// by name: meshmeta.InboundExtensionNames for the inbound security
	// policies, or none. With any, nothing is delivered (nor Ready) before
	// all of them have arrived.
	Extensions []string
	// OnInbound, if set, receives the inbound policy those make, just
	// before OnClusters.
	OnInbound func(Inbound)
	// InitialBackoff and MaxBackoff bound the jittered exponential
	// back-off between streams (default 250 ms and 30 s). A stream that
	// received a response resets it.
	InitialBackoff, MaxBackoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Stats are a Client's counters.
type Stats struct {
	// Streams counts streams opened, Connected says whether the current
	// one has received a response.
	Streams   int
	Connected bool
	// Updates counts complete sets delivered to OnClusters.
	Updates int
	// ACKs and NACKs count responses accepted and rejected; LastNACK is
	// the error_detail message of the last rejection.
	ACKs, NACKs int
	LastNACK    string
}

// Client is the sidecar's ADS client. It subscribes to all clusters (CDS)
// and to the load assignments (EDS) they name, translates them with
// discovery.TranslateEDSCluster, discovery.ServiceRoutes and
// discovery.TranslateEDSLoadAssignment, ACKs what translates and NACKs
// (with error_detail naming the failing field) a response that does not,
// keeping what it had. Once every cluster has its assignment, the complete
// set goes to OnClusters. It keeps the last good configuration while the
// control plane is away and reconnects with jittered back-off. Create it
// with New, then call Run.
type Client struct {
	opts  Options
	log   *slog.Logger
	ready chan struct{}

	mu       sync.Mutex // guards the fields below, read by other goroutines
	stats    Stats
	clusters []config.Cluster
	routes   []config.Route
	extGen   int // of the last delivery

	st adsState // owned by Run's goroutine
}

// New checks opts and returns a client; Run starts it.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Conn == nil:
		return nil, errors.New("adsclient: no connection")
	case opts.Node.GetId() == "":
		return nil, errors.New("adsclient: node id required")
	}
	if opts.InitialBackoff <= 0 {
		opts.InitialBackoff = defaultInitialBackoff
	}
	if opts.MaxBackoff < opts.InitialBackoff {
		opts.MaxBackoff = max(defaultMaxBackoff, opts.InitialBackoff)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	st := newADSState()
	st.extensions = slices.Sorted(slices.Values(opts.Extensions))
	return &Client{
		opts:  opts,
		log:   log.With("component", "ads", "node", opts.Node.GetId()),
		ready: make(chan struct{}),
		st:    st,
	}, nil
}

// Ready is closed once the first complete configuration has been
// delivered: the sidecar's readiness.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Clusters returns a copy of the last complete set of clusters delivered
// (nil before the first).
func (c *Client) Clusters() []config.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cloneSlice(c.clusters)
}

// Routes returns a copy of the routes of the last complete set.
func (c *Client) Routes() []config.Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cloneSlice(c.routes)
}

// Stats returns a copy of the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Run keeps a stream to the control plane open until ctx is done, then
// returns nil. Call it once.
func (c *Client) Run(ctx context.Context) error {
	bo := backoff{min: c.opts.InitialBackoff, max: c.opts.MaxBackoff}
	for {
		responded, err := c.runStream(ctx)
		c.update(func(s *Stats) { s.Connected = false })
		if ctx.Err() != nil {
			return nil
		}
		if responded {
			bo.reset()
		}
		d := bo.next()
		c.log.Warn("ads stream ended; reconnecting", "error", err, "after", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Client) update(f func(*Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

// adsStream is what runStream needs of either protocol's stream.
type adsStream interface {
	// subscribe sends the current subscriptions, first thing on a stream.
	subscribe() error
	// recv returns the next response.
	recv() (any, error)
	// handle applies a response and returns the ACK or NACK to send and
	// what it rejected (nil when it was accepted).
	handle(resp any) (request any, typeURL string, rejected error)
	// send sends a request on the stream.
	send(req any) error
	// syncNames sends the EDS and RDS subscription changes the clusters need.
	syncNames() error
}

// runStream runs one stream until it fails or ctx is done; responded says
// whether any response arrived.
func (c *Client) runStream(ctx context.Context) (responded bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ads := discoveryv3.NewAggregatedDiscoveryServiceClient(c.opts.Conn)
	var s adsStream
	if c.opts.Delta {
		str, err := ads.DeltaAggregatedResources(sctx)
		if err != nil {
			return false, fmt.Errorf("adsclient: open delta stream: %w", err)
		}
		s = &deltaStream{c: c, str: str, subscribed: map[string]map[string]bool{}}
	} else {
		str, err := ads.StreamAggregatedResources(sctx)
		if err != nil {
			return false, fmt.Errorf("adsclient: open stream: %w", err)
		}
		s = &sotwStream{c: c, str: str, nonces: map[string]string{}, sent: map[string][]string{}}
	}
	c.update(func(st *Stats) { st.Streams++ })
	if err := s.subscribe(); err != nil {
		return false, err
	}

	type received struct {
		resp any
		err  error
	}
	recvCh := make(chan received, 1)
	go func() {
		for {
			resp, err := s.recv()
			select {
			case recvCh <- received{resp, err}:
			case <-sctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	// A NACK repeated for the same type is delayed, doubling, so that a
	// server that resends a rejected response does not spin. The server
	// waits for the NACK before it answers that type again; other types
	// go on meanwhile.
	nacks := map[string]int{}
	pending := map[string]any{}
	fire := make(chan string)
	for {
		select {
		case <-ctx.Done():
			return responded, nil
		case t := <-fire:
			if req, ok := pending[t]; ok {
				delete(pending, t)
				if err := s.send(req); err != nil {
					return responded, err
				}
			}
		case r := <-recvCh:
			if r.err != nil {
				return responded, fmt.Errorf("adsclient: receive: %w", r.err)
			}
			if !responded {
				responded = true
				c.update(func(st *Stats) { st.Connected = true })
			}
			req, typeURL, rejected := s.handle(r.resp)
			if req == nil {
				continue // a type we never asked for
			}
			delete(pending, typeURL) // superseded by this response
			if rejected == nil {
				delete(nacks, typeURL)
				c.update(func(st *Stats) { st.ACKs++ })
				if err := s.send(req); err != nil {
					return responded, err
				}
				if err := s.syncNames(); err != nil {
					return responded, err
				}
				c.publish()
				continue
			}
			nacks[typeURL]++
			c.update(func(st *Stats) { st.NACKs++; st.LastNACK = rejected.Error() })
			c.log.Error("ads: rejected response", "type", typeURL, "error", rejected)
			if n := nacks[typeURL]; n > 1 {
				pending[typeURL] = req
				d := min(c.opts.InitialBackoff<<min(n-2, 16), c.opts.MaxBackoff)
				time.AfterFunc(d, func() {
					select {
					case fire <- typeURL:
					case <-sctx.Done():
					}
				})
				continue
			}
			if err := s.send(req); err != nil {
				return responded, err
			}
			// A rejected CDS response still leaves the clusters we hold,
			// whose assignments this stream may not have asked for yet.
			if err := s.syncNames(); err != nil {
				return responded, err
			}
		}
	}
}

// publish delivers the state if it is complete and differs from the last
// delivery.
func (c *Client) publish() {
	clusters, routes, ok := c.st.assemble()
	if !ok {
		return
	}
	inbound, ok := c.st.inbound()
	if !ok {
		return
	}
	c.mu.Lock()
	same := c.stats.Updates > 0 && equalConfig(c.clusters, clusters) && equalConfig(c.routes, routes) && c.extGen == c.st.extGen
	if !same {
		c.clusters, c.routes, c.extGen = clusters, routes, c.st.extGen
		c.stats.Updates++
	}
	c.mu.Unlock()
	if same {
		return
	}
	if c.opts.OnInbound != nil && len(c.st.extensions) > 0 {
		c.opts.OnInbound(inbound)
	}
	if c.opts.OnRoutes != nil {
		c.opts.OnRoutes(cloneSlice(routes))
	}
	if c.opts.OnClusters != nil {
		c.opts.OnClusters(cloneSlice(clusters))
	}
	select {
	case <-c.ready:
		c.log.Debug("ads: configuration updated", "clusters", len(clusters), "routes", len(routes))
	default:
		c.log.Info("ads: first complete configuration", "clusters", len(clusters), "routes", len(routes))
		close(c.ready)
	}
}

// nackStatus is the error_detail of a NACK.
func nackStatus(err error) *statuspb.Status {
	return &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
}

// backoff is a jittered exponential back-off: each delay is drawn from
// [d/2, d) where d doubles from min to max.
type backoff struct {
	min, max, cur time.Duration
}

func (b *backoff) reset() { b.cur = 0 }

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	half := b.cur / 2
	return half + rand.N(half+1)
}
