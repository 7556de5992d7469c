package spans

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// countingClient is an OTLP client that takes every upload and counts
// its spans: the collector's network half left out, so that both
// benchmarks measure span building and batching only.
type countingClient struct{ n atomic.Int64 }

func (c *countingClient) Start(context.Context) error { return nil }
func (c *countingClient) Stop(context.Context) error  { return nil }
func (c *countingClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	for _, r := range rs {
		for _, s := range r.ScopeSpans {
			c.n.Add(int64(len(s.Spans)))
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSpanCost is one sampled request's span, from the request path
// to the OTLP protos handed to the client, two ways: meshlet's Record
// through this package's exporter, and the OpenTelemetry SDK's tracer
// (span started and ended with the same attributes, its batch span
// processor and OTLP exporter). cpu-us/op counts the batching goroutine
// too; allocs/op the request path and the batch. bench/tracing.sh writes
// the table.
func BenchmarkSpanCost(b *testing.B) {
	b.Run("meshlet-record", func(b *testing.B) {
		c := &countingClient{}
		e := New(Options{Client: c})
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			r := &Record{Method: "GET", Path: "/api/items", Authority: "echo.shop:80", Protocol: "HTTP/1.1", UserAgent: "curl/8",
				RequestID: "2b1f7c0e-6a1d-4f55-9a54-1c2b8f0d9e77", Code: 200, Flags: "-", Cluster: "outbound|80||echo.shop.svc.cluster.local",
				Peer: "10.244.1.7:8080", SourcePrincipal: "spiffe://cluster.local/ns/shop/sa/client", DestinationPrincipal: "spiffe://cluster.local/ns/shop/sa/echo",
				SourceZone: "zone-a", DestinationZone: "zone-b", Start: time.Now(), End: time.Now()}
			r.TraceID[15], r.SpanID[7] = 1, 1
			for !e.Enqueue(r) {
				e.Flush()
			}
		}
		e.Flush()
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		e.Close()
	})
	b.Run("otel-sdk", func(b *testing.B) {
		c := &countingClient{}
		exp, err := otlptrace.New(context.Background(), c)
		if err != nil {
			b.Fatal(err)
		}
		bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking()) // no span dropped, as meshlet-record waits too
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bsp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		tr := tp.Tracer("bench")
		ctx := context.Background()
		b.ReportAllocs()
		cpu0 := cpuTime()
		for b.Loop() {
			_, s := tr.Start(ctx, "GET", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(time.Now()))
			s.SetAttributes(attribute.String("http.request.method", "GET"), attribute.String("url.path", "/api/items"),
				attribute.String("url.scheme", "http"), attribute.String("server.address", "echo.shop"), attribute.Int("server.port", 80),
				attribute.String("network.protocol.name", "http"), attribute.String("network.protocol.version", "1.1"),
				attribute.String("network.peer.address", "10.244.1.7"), attribute.Int("network.peer.port", 8080),
				attribute.String("user_agent.original", "curl/8"), attribute.Int("http.response.status_code", 200),
				attribute.Int("http.request.body.size", 0), attribute.Int("http.response.body.size", 2),
				attribute.String("upstream_cluster", "outbound|80||echo.shop.svc.cluster.local"), attribute.String("response_flags", "-"),
				attribute.String("guid:x-request-id", "2b1f7c0e-6a1d-4f55-9a54-1c2b8f0d9e77"),
				attribute.String("source.principal", "spiffe://cluster.local/ns/shop/sa/client"),
				attribute.String("destination.principal", "spiffe://cluster.local/ns/shop/sa/echo"),
				attribute.String("source.zone", "zone-a"), attribute.String("destination.zone", "zone-b"))
			s.End(trace.WithTimestamp(time.Now()))
		}
		if err := tp.ForceFlush(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
		_ = tp.Shutdown(ctx)
	})
}
