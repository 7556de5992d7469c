// Package spans exports the sidecar's finished spans over OTLP/gRPC. The
// request path hands over a Record of plain values and never waits: the
// queue is bounded, a full one drops the span and counts it, and one
// goroutine batches the queue into OTLP ResourceSpans that the
// OpenTelemetry exporter's gRPC client (otlptracegrpc) uploads. Spans are
// built here rather than through the OpenTelemetry SDK's tracer, whose
// per-span objects cost more than the record (bench/RESULTS.md, tracing).
package spans

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet-dev/meshlet/dataplane/internal/tracectx"
)

// Defaults of the OpenTelemetry SDK's batch span processor.
const (
	DefaultQueueSize = 2048
	DefaultBatchSize = 512
	DefaultInterval  = 5 * time.Second
	exportTimeout    = 10 * time.Second
)

// Record is one finished span of a request: what the sidecar saw, with
// the names of OpenTelemetry's HTTP semantic conventions given at export.
type Record struct {
	TraceID          tracectx.TraceID
	SpanID, ParentID tracectx.SpanID // ParentID zero: a root span
	// Server: the inbound sidecar's span (kind SERVER); else the
	// outbound one's (CLIENT).
	Server     bool
	Start, End time.Time
	Method     string
	// Path is the request's path without its query.
	Path, Authority, Protocol, UserAgent, RequestID string
	// Code is the response status (0: none was sent).
	Code int
	// Flags are Envoy's response flags ("-": none).
	Flags, Cluster string
	// Peer is the address at the other end: the upstream host of a
	// client span, the downstream's of a server span.
	Peer string
	// SourcePrincipal and DestinationPrincipal are the SPIFFE IDs of the
	// two sides, where mutual TLS proved them.
	SourcePrincipal, DestinationPrincipal string
	// SourceZone and DestinationZone are the zones of the two sides where
	// known (the outbound sidecar knows its own and the endpoint's).
	SourceZone, DestinationZone string
	BytesReceived, BytesSent    uint64
}

// Options configure an Exporter.
type Options struct {
	// Endpoint is the collector's host:port (OTLP/gRPC, plaintext).
	Endpoint string
	// Resource are the resource attributes (service.name, ...).
	Resource map[string]string
	// QueueSize, BatchSize and Interval default to the SDK's batch
	// processor's (DefaultQueueSize, DefaultBatchSize, DefaultInterval).
	QueueSize, BatchSize int
	Interval             time.Duration
	Logger               *slog.Logger
	// Client replaces the OTLP/gRPC client (tests of failures).
	Client otlptrace.Client
	// Counters, when set, receive the exporter's counts: an owner that
	// replaces exporters on reload keeps one set across them.
	Counters *Counters
}

// Counters count spans uploaded (Exported), dropped because the queue was
// full or the exporter closed (Dropped), and lost to a failed upload
// (Failed).
type Counters struct {
	Exported, Dropped, Failed atomic.Uint64
}

// Exporter batches Records and uploads them.
type Exporter struct {
	opts     Options
	client   otlptrace.Client
	resource *resourcepb.Resource
	queue    chan *Record
	flush    chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once
	n        *Counters
}

// New starts an exporter to o.Endpoint. The gRPC connection is made in
// the background: a collector that is down costs dropped spans, never a
// blocked request.
func New(o Options) *Exporter {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Counters == nil {
		o.Counters = &Counters{}
	}
	e := &Exporter{opts: o, client: o.Client, queue: make(chan *Record, o.QueueSize), flush: make(chan chan struct{}),
		stop: make(chan struct{}), done: make(chan struct{}), n: o.Counters}
	if e.client == nil {
		// Every setting explicit: the OTEL_EXPORTER_OTLP_* environment an
		// app's container may carry must not turn on TLS, add headers or
		// compression, or point elsewhere.
		e.client = otlptracegrpc.NewClient(otlptracegrpc.WithEndpoint(o.Endpoint), otlptracegrpc.WithInsecure(),
			otlptracegrpc.WithDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
			otlptracegrpc.WithHeaders(map[string]string{}), otlptracegrpc.WithCompressor("none"),
			otlptracegrpc.WithTimeout(exportTimeout))
	}
	res := &resourcepb.Resource{}
	for _, k := range slices.Sorted(maps.Keys(o.Resource)) {
		res.Attributes = append(res.Attributes, str(k, o.Resource[k]))
	}
	e.resource = res
	go e.run()
	return e
}

// Enqueue hands r over; false when the queue is full (r is dropped and
// counted) or the exporter is closed.
func (e *Exporter) Enqueue(r *Record) bool {
	select {
	case <-e.stop:
		e.n.Dropped.Add(1)
		return false
	default:
	}
	select {
	case e.queue <- r:
		return true
	default:
		e.n.Dropped.Add(1)
		return false
	}
}

// Flush uploads what is queued now and returns once that is done (tests;
// shutdown).
func (e *Exporter) Flush() {
	ch := make(chan struct{})
	select {
	case e.flush <- ch:
		<-ch
	case <-e.done:
	}
}

// Close uploads what is queued (for at most 2 s: a sidecar's shutdown
// must not wait on a collector that is down) and stops.
func (e *Exporter) Close() {
	e.once.Do(func() { close(e.stop) })
	<-e.done
}

// Exported, Dropped and Failed read the exporter's Counters.
func (e *Exporter) Exported() uint64 { return e.n.Exported.Load() }

// Dropped: see Exported.
func (e *Exporter) Dropped() uint64 { return e.n.Dropped.Load() }

// Failed: see Exported.
func (e *Exporter) Failed() uint64 { return e.n.Failed.Load() }

func (e *Exporter) run() {
	defer close(e.done)
	// Uploads (an upload in flight included) get 2 s from Close.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-e.stop:
			time.AfterFunc(2*time.Second, cancel)
		case <-ctx.Done():
		}
	}()
	if err := e.client.Start(ctx); err != nil {
		e.opts.Logger.Warn("tracing: OTLP client start failed", "endpoint", e.opts.Endpoint, "err", err)
	}
	t := time.NewTicker(e.opts.Interval)
	defer t.Stop()
	batch := make([]*Record, 0, e.opts.BatchSize)
	upload := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		err := e.client.UploadTraces(ctx, []*tracepb.ResourceSpans{e.build(batch)})
		if err != nil {
			e.n.Failed.Add(uint64(len(batch)))
			e.opts.Logger.Warn("tracing: span upload failed", "endpoint", e.opts.Endpoint, "spans", len(batch), "err", err)
		} else {
			e.n.Exported.Add(uint64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
	drain := func(ctx context.Context) {
		for {
			select {
			case r := <-e.queue:
				if batch = append(batch, r); len(batch) == e.opts.BatchSize {
					upload(ctx)
				}
			default:
				upload(ctx)
				return
			}
		}
	}
	for {
		select {
		case r := <-e.queue:
			if batch = append(batch, r); len(batch) == e.opts.BatchSize {
				upload(ctx)
			}
		case <-t.C:
			upload(ctx)
		case ch := <-e.flush:
			drain(ctx)
			close(ch)
		case <-e.stop:
			drain(ctx)
			_ = e.client.Stop(ctx)
			return
		}
	}
}

// build turns a batch into one ResourceSpans.
func (e *Exporter) build(batch []*Record) *tracepb.ResourceSpans {
	ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "github.com/meshlet-dev/meshlet"}, Spans: make([]*tracepb.Span, 0, len(batch))}
	for _, r := range batch {
		ss.Spans = append(ss.Spans, span(r))
	}
	return &tracepb.ResourceSpans{Resource: e.resource, ScopeSpans: []*tracepb.ScopeSpans{ss}}
}

// span renders r with OpenTelemetry's HTTP semantic conventions (span
// name the method, as they say where no route template is known) and
// Envoy's own tags (upstream_cluster, response_flags, guid:x-request-id).
func span(r *Record) *tracepb.Span {
	s := &tracepb.Span{TraceId: r.TraceID[:], SpanId: r.SpanID[:], Name: r.Method, Kind: tracepb.Span_SPAN_KIND_CLIENT,
		StartTimeUnixNano: uint64(r.Start.UnixNano()), EndTimeUnixNano: uint64(r.End.UnixNano())}
	if r.Server {
		s.Kind = tracepb.Span_SPAN_KIND_SERVER
	}
	if !r.ParentID.IsZero() {
		s.ParentSpanId = r.ParentID[:]
	}
	a := make([]*commonpb.KeyValue, 0, 20)
	a = append(a, str("http.request.method", r.Method), str("url.path", r.Path), str("url.scheme", "http"))
	if host, port := splitHostPort(r.Authority); host != "" {
		a = append(a, str("server.address", host))
		if port > 0 {
			a = append(a, num("server.port", int64(port)))
		}
	}
	a = append(a, str("network.protocol.name", "http"), str("network.protocol.version", protocolVersion(r.Protocol)))
	if host, port := splitHostPort(r.Peer); host != "" {
		a = append(a, str("network.peer.address", host))
		if port > 0 {
			a = append(a, num("network.peer.port", int64(port)))
		}
	}
	if r.UserAgent != "" {
		a = append(a, str("user_agent.original", r.UserAgent))
	}
	if r.Code > 0 {
		a = append(a, num("http.response.status_code", int64(r.Code)))
	}
	a = append(a, num("http.request.body.size", int64(r.BytesReceived)), num("http.response.body.size", int64(r.BytesSent)))
	a = append(a, str("upstream_cluster", r.Cluster), str("response_flags", r.Flags))
	if r.RequestID != "" {
		a = append(a, str("guid:x-request-id", r.RequestID))
	}
	for _, kv := range [...][2]string{{"source.principal", r.SourcePrincipal}, {"destination.principal", r.DestinationPrincipal},
		{"source.zone", r.SourceZone}, {"destination.zone", r.DestinationZone}} {
		if kv[1] != "" {
			a = append(a, str(kv[0], kv[1]))
		}
	}
	// Errors as the conventions say: no response or a 5xx on both sides,
	// a 4xx on the client's too.
	if r.Code == 0 || r.Code >= 500 || (!r.Server && r.Code >= 400) {
		typ := strconv.Itoa(r.Code)
		if r.Code == 0 {
			typ = r.Flags
		}
		a = append(a, str("error.type", typ))
		s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
	}
	s.Attributes = a
	return s
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func num(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

// protocolVersion is network.protocol.version: "1.1", "2".
func protocolVersion(proto string) string {
	switch proto {
	case "HTTP/2.0", "HTTP/2":
		return "2"
	case "HTTP/1.0":
		return "1.0"
	}
	return "1.1"
}

// splitHostPort splits "host:port" or "[v6]:port"; anything else is a
// host without a port.
func splitHostPort(s string) (string, int) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return s, 0
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return host, 0
	}
	return host, int(p)
}
