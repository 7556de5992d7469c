package dataplane

import (
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/meshlet-dev/meshlet/config"
)

// DefaultMaxDownstreamConnections is the cap on downstream connections
// (config.Config.GlobalDownstreamMaxConnections) when the configuration
// sets none, for a process whose file descriptor limit is nofile: a third
// of what is left after a reserve of min(1024, nofile/4) descriptors for
// the listening sockets, upstream connection pools, health checks, the
// control plane and the access log. A proxied connection holds two
// sockets, downstream and upstream, and the TCP proxy holds a pipe only
// while bytes are in flight (pipePool); the third descriptor per
// connection is room for those. Envoy has no default (unlimited, with a
// warning), which leaves an accept storm to exhaust the descriptors
// instead.
func DefaultMaxDownstreamConnections(nofile uint64) int64 {
	nofile = min(nofile, 1<<40) // RLIM_INFINITY
	reserve := min(1024, nofile/4)
	return int64(max(1, (nofile-reserve)/3))
}

// fileLimit is the process's soft RLIMIT_NOFILE (the Go runtime raises it
// to the hard limit at start-up), or 1024 when it cannot be read.
func fileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return rl.Cur
}

// maxDownstream is the connection cap cfgMax asks for (0: the default).
func maxDownstream(cfgMax int64) int64 {
	if cfgMax > 0 {
		return cfgMax
	}
	return DefaultMaxDownstreamConnections(fileLimit())
}

// listenerStats are one listener address's statistics, Envoy's
// listener.<address>.* (kept across reloads, as cluster stats are). They
// change once per connection, not per request, so the workers share them.
type listenerStats struct {
	cxTotal, cxDestroy, globalCxOverflow, preCxTimeout atomic.Uint64
	cxActive                                           atomic.Int64
}

// listenerStatsFor returns the statistics of the listener at addr,
// creating them on first use.
func (s *Server) listenerStatsFor(addr string) *listenerStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	ls := s.lstats[addr]
	if ls == nil {
		ls = &listenerStats{}
		s.lstats[addr] = ls
	}
	return ls
}

// admit counts a connection just accepted on a listener, or refuses it
// when the sidecar already has its maximum of downstream connections (the
// caller closes it): as with Envoy's global connection limit, excess
// connections are accepted and closed at once, which keeps the listen
// queue moving and the descriptors the open connections need.
func (s *Server) admit(ls *listenerStats) bool {
	limit := s.state.Load().maxDownstream
	if s.downstreamActive.Add(1) > limit {
		s.downstreamActive.Add(-1)
		ls.globalCxOverflow.Add(1)
		s.warnOverflow(limit)
		return false
	}
	ls.cxTotal.Add(1)
	ls.cxActive.Add(1)
	return true
}

// downstreamClosed ends a connection admit counted.
func (s *Server) downstreamClosed(ls *listenerStats) {
	s.downstreamActive.Add(-1)
	ls.cxActive.Add(-1)
	ls.cxDestroy.Add(1)
}

// overflowWarnEvery spaces the warnings about refused connections: a
// storm refuses thousands a second.
const overflowWarnEvery = 10 * time.Second

// warnOverflow logs that connections are being refused, at most once per
// overflowWarnEvery.
func (s *Server) warnOverflow(limit int64) {
	now := time.Now().UnixNano()
	last := s.lastOverflowWarn.Load()
	if now-last < int64(overflowWarnEvery) || !s.lastOverflowWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("downstream connection limit reached: refusing new connections (global_downstream_max_connections)",
		"limit", limit, "refused_total", s.refusedTotal())
}

// refusedTotal is the number of connections every listener refused.
func (s *Server) refusedTotal() uint64 {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	var n uint64
	for _, ls := range s.lstats {
		n += ls.globalCxOverflow.Load()
	}
	return n
}

// envoyListenerAddress is how Envoy writes a listener address in stat
// names: "127.0.0.1_15001", "[__1]_15001".
func envoyListenerAddress(addr string) string { return strings.ReplaceAll(addr, ":", "_") }

// logConnectionLimit says which downstream connection cap applies and
// warns when a configured one leaves the open connections short of file
// descriptors (as Envoy warns about having none).
func (s *Server) logConnectionLimit(cfg *config.Config, limit int64) {
	nofile := fileLimit()
	safe := DefaultMaxDownstreamConnections(nofile)
	if cfg.GlobalDownstreamMaxConnections > safe {
		s.log.Warn("global_downstream_max_connections is above what the file descriptor limit allows for; an accept storm can exhaust the descriptors",
			"limit", limit, "nofile", nofile, "safe_limit", safe)
		return
	}
	s.log.Debug("downstream connection limit", "limit", limit, "nofile", nofile, "configured", cfg.GlobalDownstreamMaxConnections > 0)
}
