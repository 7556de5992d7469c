// The ADS streams: each stream's state (its node, identity, and per
// resource type what was sent and acknowledged), go-control-plane's
// callbacks that keep it, and /debug/syncz, which reports it.

package xds

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meshlet-dev/meshlet/discovery/syncz"
	"github.com/meshlet-dev/meshlet/lb"
)

// streamState is one xDS stream.
type streamState struct {
	namespace, serviceAccount string
	authenticated             bool
	node                      string
	delta                     bool
	opened                    time.Time
	types                     map[string]*typeState // by type URL
	lastNACK                  *syncz.NACK
}

// streamKey names a stream: go-control-plane numbers its state-of-the-
// world and its delta streams each from 1, so an id alone is ambiguous.
type streamKey struct {
	delta bool
	id    int64
}

// callbacks hook the server into go-control-plane's stream handling.
func (s *Server) callbacks() serverv3.Callbacks {
	return serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			return s.streamOpen(ctx, streamKey{false, id})
		},
		DeltaStreamOpenFunc: func(ctx context.Context, id int64, typeURL string) error {
			return s.streamOpen(ctx, streamKey{true, id})
		},
		StreamClosedFunc: func(id int64, _ *corev3.Node) { s.streamClosed(streamKey{false, id}) },
		DeltaStreamClosedFunc: func(id int64, _ *corev3.Node) {
			s.streamClosed(streamKey{true, id})
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			if err := s.streamRequest(streamKey{false, id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetVersionInfo(), req.GetErrorDetail()); err != nil {
				return err
			}
			if req.GetErrorDetail() != nil {
				s.parkNACK(streamKey{false, id}, req)
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			s.metrics.push(resp.GetTypeUrl())
			s.responded(streamKey{false, id}, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
		},
		StreamDeltaRequestFunc: func(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
			return s.streamRequest(streamKey{true, id}, req.GetNode(), req.GetTypeUrl(), req.GetResponseNonce(), "", req.GetErrorDetail())
		},
		StreamDeltaResponseFunc: func(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
			s.metrics.push(resp.GetTypeUrl())
			s.responded(streamKey{true, id}, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce())
		},
	}
}

// responded records a response sent on stream id (Syncz).
func (s *Server) responded(id streamKey, typeURL, version, nonce string) {
	s.smu.Lock()
	if st := s.streams[id]; st != nil {
		st.responded(typeURL, version, nonce)
	}
	s.smu.Unlock()
}

// streamOpen authenticates a stream.
func (s *Server) streamOpen(ctx context.Context, id streamKey) error {
	st := &streamState{types: map[string]*typeState{}, delta: id.delta, opened: time.Now()}
	if a := s.opts.Authenticator; a != nil {
		ns, sa, err := a.Authenticate(ctx)
		if err != nil {
			s.mu.Lock()
			s.stats.Unauthenticated++
			s.mu.Unlock()
			s.log.Warn("xds stream refused", "stream", id.id, "delta", id.delta, "error", err)
			return status.Errorf(codes.Unauthenticated, "xds: stream refused: %v", err)
		}
		st.namespace, st.serviceAccount, st.authenticated = ns, sa, true
	}
	s.smu.Lock()
	s.streams[id] = st
	s.smu.Unlock()
	return nil
}

// streamRequest binds a stream to its node on the first request and
// registers the sidecar; it records ACKs and NACKs of the response with
// nonce (Syncz) and logs NACKs.
func (s *Server) streamRequest(id streamKey, node *corev3.Node, typeURL, nonce, version string, nack *rpcstatus.Status) error {
	s.smu.Lock()
	st := s.streams[id]
	if st == nil {
		s.smu.Unlock()
		return status.Error(codes.Internal, "xds: unknown stream")
	}
	first := st.node == ""
	if first {
		if node.GetId() == "" {
			s.smu.Unlock()
			return status.Error(codes.InvalidArgument, "xds: the first request must carry node.id")
		}
		st.node = node.GetId()
	} else if node.GetId() != "" && node.GetId() != st.node {
		s.smu.Unlock()
		return status.Errorf(codes.InvalidArgument, "xds: node id changed from %q to %q on one stream", st.node, node.GetId())
	}
	if nack != nil {
		msg := nack.GetMessage()
		st.requested(typeURL, nonce, version, &msg, time.Now())
	} else {
		st.requested(typeURL, nonce, version, nil, time.Now())
	}
	nodeID, ns, authn := st.node, st.namespace, st.authenticated
	s.smu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	if nack != nil {
		s.stats.NACKs++
		s.metrics.reject(typeURL)
		s.log.Warn("sidecar rejected a response", "node", nodeID, "type", typeURL, "error", nack.GetMessage())
	}
	if !first {
		return nil
	}
	p := s.proxy(nodeID)
	if authn && p.info.LocalService.Namespace != "" && p.info.LocalService.Namespace != ns {
		s.stats.Denied++
		if p.streams == 0 && !p.registered {
			delete(s.proxies, nodeID)
		}
		s.smu.Lock()
		st.node = "" // not counted in streamClosed
		s.smu.Unlock()
		return status.Errorf(codes.PermissionDenied, "xds: node %q belongs to namespace %q, stream authenticated for %q",
			nodeID, p.info.LocalService.Namespace, ns)
	}
	p.streams++
	if l := node.GetLocality(); l != nil {
		p.reported = lb.Locality{Region: l.GetRegion(), Zone: l.GetZone(), SubZone: l.GetSubZone()}
	}
	s.publish.Add(nodeID)
	return nil
}

// parkNACK makes a state-of-the-world NACK of the latest response wait
// for the next snapshot: go-control-plane would otherwise answer the
// NACK (which restates the last accepted version) with the rejected
// version again, and again.
func (s *Server) parkNACK(id streamKey, req *discoveryv3.DiscoveryRequest) {
	s.smu.Lock()
	defer s.smu.Unlock()
	st := s.streams[id]
	if st == nil {
		return
	}
	if last := st.types[req.GetTypeUrl()]; last != nil && last.nonce != "" && last.nonce == req.GetResponseNonce() {
		req.VersionInfo = last.sent
	}
}

// streamClosed forgets a stream, and its sidecar when nothing else holds it.
func (s *Server) streamClosed(id streamKey) {
	s.smu.Lock()
	st := s.streams[id]
	delete(s.streams, id)
	s.smu.Unlock()
	if st == nil || st.node == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.proxies[st.node]
	if !ok {
		return
	}
	if p.streams--; p.streams <= 0 && !p.registered {
		s.forgetLocked(st.node)
	}
}

// typeState is what a stream knows of one resource type.
type typeState struct {
	sent, nonce, acked string
	nacked             bool // the last response was rejected
}

// requested records a request of typeURL on stream st carrying nonce
// (and, in state of the world, version, the version the sidecar runs): an
// ACK, a NACK, or a subscription change. Called under smu. In state of
// the world every request after a response carries its nonce, a
// subscription change too, so only a request without an error that
// restates the version sent acknowledges it; a delta request carries a
// nonce only to acknowledge or reject.
func (st *streamState) requested(typeURL, nonce, version string, nackMsg *string, now time.Time) {
	ts := st.typeState(typeURL)
	if ts == nil {
		return
	}
	if nonce == "" {
		return // a subscription
	}
	if nackMsg != nil {
		n := &syncz.NACK{Type: shortType(typeURL), Message: *nackMsg, At: now}
		if nonce == ts.nonce {
			ts.nacked, n.Version = true, ts.sent
		} else {
			n.Superseded = true // a rejection of an older response
		}
		st.lastNACK = n
		return
	}
	if nonce != ts.nonce || (!st.delta && version != ts.sent) {
		return // about an older response, or still running an older version
	}
	ts.nacked, ts.acked = false, ts.sent
}

// maxStreamTypes bounds the resource types a stream's state keeps: a
// sidecar asks for a handful, a hostile peer for any number of names.
const maxStreamTypes = 16

// typeState is the state of typeURL on st, made on first use; nil once
// st holds maxStreamTypes others.
func (st *streamState) typeState(typeURL string) *typeState {
	ts := st.types[typeURL]
	if ts == nil && len(st.types) < maxStreamTypes {
		ts = &typeState{}
		st.types[typeURL] = ts
	}
	return ts
}

// responded records a response sent on stream st. Called under smu.
func (st *streamState) responded(typeURL, version, nonce string) {
	ts := st.typeState(typeURL)
	if ts == nil {
		return
	}
	ts.sent, ts.nonce, ts.nacked = version, nonce, false
}

// Syncz reports every open stream bound to a sidecar, sorted by proxy.
func (s *Server) Syncz() []syncz.ProxySync {
	// Copied under the lock every stream callback takes; sorted after.
	s.smu.Lock()
	out := make([]syncz.ProxySync, 0, len(s.streams))
	for _, st := range s.streams {
		if st.node == "" {
			continue
		}
		p := syncz.ProxySync{Proxy: st.node, Namespace: st.namespace, ServiceAccount: st.serviceAccount, Delta: st.delta,
			Connected: st.opened, ControlPlaneVersion: controlPlaneVersion, State: syncz.Connected}
		if st.lastNACK != nil {
			n := *st.lastNACK
			p.LastNACK = &n
		}
		for url, ts := range st.types {
			t := syncz.TypeSync{Type: shortType(url), Sent: ts.sent, Acked: ts.acked, Nonce: ts.nonce}
			switch {
			case ts.nonce == "":
				t.Status = syncz.NotSent
			case ts.nacked:
				t.Status = syncz.NACKed
			case ts.acked == ts.sent:
				t.Status = syncz.Synced
			default:
				t.Status = syncz.Stale
			}
			p.Types = append(p.Types, t)
		}
		out = append(out, p)
	}
	s.smu.Unlock()
	for i := range out {
		slices.SortFunc(out[i].Types, func(a, b syncz.TypeSync) int { return strings.Compare(a.Type, b.Type) })
	}
	slices.SortFunc(out, func(a, b syncz.ProxySync) int {
		if c := strings.Compare(a.Proxy, b.Proxy); c != 0 {
			return c
		}
		return a.Connected.Compare(b.Connected)
	})
	return out
}

// controlPlaneVersion is this build's module version, else its VCS
// revision, else "meshlet" (a test binary).
var controlPlaneVersion = func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "meshlet"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	return "meshlet"
}()

// SynczHandler serves Syncz as JSON at /debug/syncz on the control
// plane's loopback debug port (what meshletctl proxy-status reads through
// a port-forward; the name is istiod's, the shape meshlet's).
func (s *Server) SynczHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Syncz())
	})
}
