package xds

import (
	"encoding/json"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/meshlet-dev/meshlet/discovery/syncz"
)

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
	ts := st.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		st.types[typeURL] = ts
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

// responded records a response sent on stream st. Called under smu.
func (st *streamState) responded(typeURL, version, nonce string) {
	ts := st.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		st.types[typeURL] = ts
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
