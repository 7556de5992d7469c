package dataplane

import (
	"net"
	"sync/atomic"
	"time"
)

// Envoy's defence against HTTP/2 rapid reset (CVE-2023-44487), its
// overload runtime keys overload.premature_reset_min_stream_lifetime_seconds
// and overload.premature_reset_total_stream_count at their defaults: a
// stream the client resets before it got a response, and within its first
// second (compared in whole seconds, as Envoy does), is a premature reset;
// a connection is closed once half of prematureResetTotal streams were, or
// once it has had prematureResetTotal streams and half of them were.
const (
	prematureResetMinLifetime = 2 * time.Second // lifetimes of 0 s and 1 s in whole seconds
	prematureResetTotal       = 500
)

// h2Conn is one downstream HTTP/2 connection's account of how its streams
// ended (its requests share it through connInfo).
type h2Conn struct {
	conn      net.Conn
	closed    atomic.Uint64 // streams that ended
	premature atomic.Uint64 // of those, premature resets
	aborted   atomic.Bool
}

// streamEnded counts a stream that ended; it reports whether the
// connection must now be closed for too many premature resets (true once).
func (h *h2Conn) streamEnded(premature bool) bool {
	total := h.closed.Add(1)
	if !premature {
		return false
	}
	bad := h.premature.Add(1)
	limit := uint64(prematureResetTotal)
	if total < limit && bad*2 < limit || total >= limit && bad*2 < total {
		return false
	}
	return h.aborted.CompareAndSwap(false, true)
}

// endStream accounts for an HTTP/2 request as it ends: reset by the client
// (its stream's context ended) before any response, within
// prematureResetMinLifetime. An abusive connection is closed at once
// (Envoy aborts it), which ends every stream on it.
func (w *worker) endStream(st *state, info connInfo, streamDone bool, responded bool, lifetime time.Duration) {
	premature := streamDone && !responded && lifetime < prematureResetMinLifetime
	if !info.h2.streamEnded(premature) {
		return
	}
	w.s.listenerHTTPStats(st, info).DownstreamRqTooManyPrematureResets.Add(1)
	w.s.log.Debug("closing an HTTP/2 connection: too many premature stream resets", "peer", info.src,
		"streams", info.h2.closed.Load(), "premature_resets", info.h2.premature.Load())
	_ = info.h2.conn.Close()
}
