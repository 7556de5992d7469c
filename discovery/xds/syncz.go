package xds

import (
	"encoding/json"
	"net/http"
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

// requested records a request of typeURL on stream st: an ACK or a NACK
// of the response with nonce, or a first subscription. Called under smu.
func (st *streamState) requested(typeURL, nonce string, nackMsg *string, now time.Time) {
	ts := st.types[typeURL]
	if ts == nil {
		ts = &typeState{}
		st.types[typeURL] = ts
	}
	if nonce == "" || nonce != ts.nonce {
		return // a subscription, or about an older response
	}
	if nackMsg != nil {
		ts.nacked = true
		st.lastNACK = &syncz.NACK{Type: shortType(typeURL), Version: ts.sent, Message: *nackMsg, At: now}
		return
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
	s.smu.Lock()
	defer s.smu.Unlock()
	out := make([]syncz.ProxySync, 0, len(s.streams))
	for _, st := range s.streams {
		if st.node == "" {
			continue
		}
		p := syncz.ProxySync{Proxy: st.node, Namespace: st.namespace, ServiceAccount: st.serviceAccount, Delta: st.delta,
			Connected: st.opened, ControlPlaneVersion: "meshlet"}
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
		slices.SortFunc(p.Types, func(a, b syncz.TypeSync) int { return strings.Compare(a.Type, b.Type) })
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b syncz.ProxySync) int {
		if c := strings.Compare(a.Proxy, b.Proxy); c != 0 {
			return c
		}
		return a.Connected.Compare(b.Connected)
	})
	return out
}

// SynczHandler serves Syncz as JSON, istiod's /debug/syncz on its
// monitoring port (what meshletctl proxy-status reads).
func (s *Server) SynczHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Syncz())
	})
}
