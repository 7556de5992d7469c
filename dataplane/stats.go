package dataplane

import (
	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/stats"
)

// principals fills the identity labels of a request's metrics (Istio's
// source_principal, destination_principal, connection_security_policy):
// inbound, the mTLS peer and this sidecar; outbound, this sidecar and the
// upstream's verified identity.
func (w *worker) principals(k *stats.RequestKey, ls *listenerState, info *connInfo, upMTLS bool, upstreamPeer string) {
	self := ""
	if w.s.opts.Identity != nil {
		self = w.s.opts.Identity.Current().ID.String()
	}
	k.Reporter, k.Security = "source", "none"
	k.SourcePrincipal, k.DestPrincipal = self, upstreamPeer
	if upMTLS {
		k.Security = "mutual_tls"
	}
	if ls != nil && ls.cfg.Direction == config.Inbound {
		k.Reporter = "destination"
		k.SourcePrincipal, k.DestPrincipal = info.peer, self
		k.Security = "none"
		if info.mtls {
			k.Security = "mutual_tls"
		}
	}
}

// httpStatsFor returns the statistics of the listener named name.
func (s *Server) httpStatsFor(name string) *stats.HTTP {
	if v, ok := s.httpStats.Load(name); ok {
		return v.(*stats.HTTP)
	}
	v, _ := s.httpStats.LoadOrStore(name, new(stats.HTTP))
	return v.(*stats.HTTP)
}

// countProtocolError counts a downstream protocol error on the listener
// of info.
func (s *Server) countProtocolError(st *state, info connInfo) {
	s.listenerHTTPStats(st, info).DownstreamCxProtocolError.Add(1)
}

// countStreamIdleTimeout counts a request ended by the stream idle timeout
// on the listener of info.
func (s *Server) countStreamIdleTimeout(st *state, info connInfo) {
	s.listenerHTTPStats(st, info).DownstreamRqIdleTimeout.Add(1)
}

// listenerHTTPStats are the HTTP statistics of the listener of info.
func (s *Server) listenerHTTPStats(st *state, info connInfo) *stats.HTTP {
	name := info.listener
	if ls := st.listeners[info.listener]; ls != nil {
		name = ls.cfg.Name
	}
	return s.httpStatsFor(name)
}
