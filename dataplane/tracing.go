package dataplane

import (
	"math"
	"net/http"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/meshlet-dev/meshlet/config"
	"github.com/meshlet-dev/meshlet/dataplane/internal/h1"
	"github.com/meshlet-dev/meshlet/dataplane/internal/spans"
	"github.com/meshlet-dev/meshlet/dataplane/internal/tracectx"
)

// traceState is one request's span in this sidecar (activeStream.trace):
// its ids, whether it is sampled, and the buffers the rewritten trace
// headers' values live in (so that propagating a context, sampled or
// not, allocates no header value).
type traceState struct {
	on, sampled bool
	sampling    tracectx.Sampling // what goes downstream
	short       bool              // a 64-bit B3 trace id
	traceID     tracectx.TraceID
	spanID      tracectx.SpanID // this sidecar's span
	parentID    tracectx.SpanID // the caller's (zero: a root span)
	tp          [55]byte
	b3          [32 + 1 + 16 + 2 + 1 + 16]byte
	tid         [32]byte
	sid, pid    [16]byte
	logID       [32]byte
	vals        [6][1]string
}

// samplingThreshold is a percentage as a bound on a uniform 64-bit draw.
func samplingThreshold(pct float64) uint64 {
	switch {
	case pct <= 0:
		return 0
	case pct >= 100:
		return math.MaxUint64
	}
	return uint64(pct / 100 * (1 << 63) * 2)
}

// startTrace joins the request's trace context, or starts a trace, for
// this sidecar's span, and rewrites the trace headers for the next hop:
// traceparent always, tracestate kept only with the traceparent it
// belongs to, and the B3 forms the request carried (Envoy's Zipkin
// tracer writes B3 too: apps that forward only x-b3-* stay joined). The
// caller's sampling decision is honoured; a request without one is
// sampled with the configured percentage, and the decision goes
// downstream either way, so that the next sidecar neither samples a trace
// this one dropped nor drops one it keeps.
func (w *worker) startTrace(st *state, req *http.Request, ts *traceState) {
	*ts = traceState{on: true}
	p, ok := tracectx.Extract(req.Header)
	w.mu.Lock()
	if ok && p.HasIDs() {
		ts.traceID, ts.parentID, ts.short = p.TraceID, p.SpanID, p.Short
	} else {
		for ts.traceID.IsZero() {
			putUint64(ts.traceID[:8], w.rnd.Uint64())
			putUint64(ts.traceID[8:], w.rnd.Uint64())
		}
	}
	for ts.spanID.IsZero() {
		putUint64(ts.spanID[:], w.rnd.Uint64())
	}
	draw := w.rnd.Uint64()
	w.mu.Unlock()
	switch {
	case ok && p.Sampling != tracectx.Deferred:
		ts.sampling = p.Sampling
	case st.traceThreshold == math.MaxUint64 || draw < st.traceThreshold:
		ts.sampling = tracectx.Sampled
	default:
		ts.sampling = tracectx.NotSampled
	}
	ts.sampled = ts.sampling == tracectx.Sampled || ts.sampling == tracectx.Debug

	h := req.Header
	set := func(i int, key string, b []byte) {
		ts.vals[i][0] = unsafe.String(&b[0], len(b))
		h[key] = ts.vals[i][:]
	}
	set(0, tracectx.HeaderTraceparent, tracectx.AppendTraceparent(ts.tp[:0], ts.traceID, ts.spanID, ts.sampled))
	if p.From != tracectx.W3C || !tracectx.TracestateOK(h[tracectx.HeaderTracestate]) {
		// It belonged to no valid traceparent, or is over what W3C
		// asks vendors to carry.
		delete(h, tracectx.HeaderTracestate)
	}
	if p.Carried&tracectx.B3Single != 0 {
		set(1, tracectx.HeaderB3, tracectx.AppendB3Single(ts.b3[:0], ts.traceID, ts.short, ts.spanID, ts.sampling, ts.parentID))
	}
	if p.Carried&tracectx.B3Multi != 0 {
		set(2, tracectx.HeaderB3TraceID, tracectx.AppendB3TraceID(ts.tid[:0], ts.traceID, ts.short))
		set(3, tracectx.HeaderB3SpanID, tracectx.AppendHex(ts.sid[:0], ts.spanID[:]))
		if ts.parentID.IsZero() {
			delete(h, tracectx.HeaderB3ParentSpan)
		} else {
			set(4, tracectx.HeaderB3ParentSpan, tracectx.AppendHex(ts.pid[:0], ts.parentID[:]))
		}
		// B3: debug is X-B3-Flags: 1, which implies sampled.
		key, v := tracectx.HeaderB3Sampled, "0"
		switch {
		case ts.sampling == tracectx.Debug:
			key, v = tracectx.HeaderB3Flags, "1"
			delete(h, tracectx.HeaderB3Sampled)
		case ts.sampled:
			v = "1"
			fallthrough
		default:
			delete(h, tracectx.HeaderB3Flags)
		}
		ts.vals[5][0] = v
		h[key] = ts.vals[5][:]
	}
}

func putUint64(b []byte, v uint64) {
	_ = b[7]
	for i := range 8 {
		b[i] = byte(v >> (56 - 8*i))
	}
}

// logTraceID is %TRACE_ID% of the request's access-log line ("" without
// tracing), in the state's buffer: the log copies it before the buffer
// is reused.
func (ts *traceState) logTraceID() string {
	if !ts.on {
		return ""
	}
	b := tracectx.AppendHex(ts.logID[:0], ts.traceID[:])
	return unsafe.String(&b[0], len(b))
}

// endTrace hands a sampled request's span to the exporter.
func (w *worker) endTrace(st *state, info connInfo, req *http.Request, sw *statusWriter, rx uint64, ex *activeStream, start time.Time, end time.Time) {
	ts := &ex.trace
	exp := w.s.tracer.Load()
	if !ts.sampled || exp == nil {
		return
	}
	path := ex.origPath
	if path == "" {
		path = ex.requestTarget(req)
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	ls := st.listeners[info.listener]
	r := &spans.Record{TraceID: ts.traceID, SpanID: ts.spanID, ParentID: ts.parentID, Start: start, End: end,
		Method: req.Method, Path: path, Authority: req.Host, Protocol: req.Proto, UserAgent: h1.Get(req.Header, "User-Agent"),
		// Cloned: a generated id is a view of the request's scratch,
		// which the connection's next request reuses.
		RequestID: strings.Clone(h1.Get(req.Header, "X-Request-Id")), Code: sw.code, Flags: ex.flags.Short(), Cluster: ex.clusterName(),
		BytesReceived: rx, BytesSent: sw.bytes.Load()}
	own := ""
	if id := w.s.opts.Identity; id != nil {
		if snap := id.Current(); snap.Ready() {
			own = snap.ID.String()
		}
	}
	zone := st.cfg.Node.Locality.Zone
	if ls != nil && ls.cfg.Direction == config.Inbound {
		r.Server = true
		r.Peer = info.src
		r.SourcePrincipal, r.DestinationPrincipal = info.peer, own
		r.DestinationZone = zone
	} else {
		r.Peer = ex.host
		r.SourcePrincipal, r.DestinationPrincipal = own, ex.upstreamPeer
		r.SourceZone, r.DestinationZone = zone, ex.hostZone
	}
	exp.Enqueue(r)
}

// tracingResource is the spans' resource: the service and the instance
// setTracer starts the span exporter of cfg, replacing old's when the
// collector or the resource changed (the old one uploads what it holds
// in the background), and stops it when tracing was turned off.
func (s *Server) setTracer(old, cfg *config.Config) {
	if old != nil && old.Tracing != nil && cfg.Tracing != nil && old.Tracing.Endpoint == cfg.Tracing.Endpoint &&
		reflect.DeepEqual(tracingResource(old), tracingResource(cfg)) {
		return
	}
	var next *spans.Exporter
	if cfg.Tracing != nil {
		next = spans.New(spans.Options{Endpoint: cfg.Tracing.Endpoint, Resource: tracingResource(cfg), Logger: s.log,
			Interval: s.opts.TraceFlushInterval, Counters: &s.spanCounts})
	}
	if prev := s.tracer.Swap(next); prev != nil {
		go prev.Close()
	}
}

// (the node id: pod.namespace in a pod), and the zone where known.
func tracingResource(cfg *config.Config) map[string]string {
	m := map[string]string{"service.name": cfg.Tracing.ServiceName, "telemetry.sdk.name": "meshlet", "telemetry.sdk.language": "go"}
	if cfg.Node.ID != "" {
		m["service.instance.id"] = cfg.Node.ID
	}
	if z := cfg.Node.Locality.Zone; z != "" {
		m["cloud.availability_zone"] = z
	}
	if r := cfg.Node.Locality.Region; r != "" {
		m["cloud.region"] = r
	}
	return m
}
