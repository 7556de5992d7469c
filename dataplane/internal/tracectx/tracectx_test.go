package tracectx

import (
	"net/http"
	"strings"
	"testing"
)

const (
	tid = "4bf92f3577b34da6a3ce929d0e0e4736"
	sid = "00f067aa0ba902b7"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        http.Header
		ok       bool
		from     Format
		sampling Sampling
		trace    string // hex of the trace id read ("" none)
		short    bool
	}{
		{"none", hdr(), false, 0, Deferred, "", false},
		{"w3c sampled", hdr("traceparent", "00-"+tid+"-"+sid+"-01"), true, W3C, Sampled, tid, false},
		{"w3c not sampled", hdr("traceparent", "00-"+tid+"-"+sid+"-00"), true, W3C, NotSampled, tid, false},
		{"w3c other flag bits", hdr("traceparent", "00-"+tid+"-"+sid+"-09"), true, W3C, Sampled, tid, false},
		{"w3c future version with more fields", hdr("traceparent", "cc-"+tid+"-"+sid+"-01-what-the-future-holds"), true, W3C, Sampled, tid, false},
		{"w3c version 00 with extra", hdr("traceparent", "00-"+tid+"-"+sid+"-01-x"), false, 0, Deferred, "", false},
		{"w3c future version, bad separator", hdr("traceparent", "cc-"+tid+"-"+sid+"-01x"), false, 0, Deferred, "", false},
		{"w3c version ff", hdr("traceparent", "ff-"+tid+"-"+sid+"-01"), false, 0, Deferred, "", false},
		{"w3c uppercase", hdr("traceparent", "00-"+strings.ToUpper(tid)+"-"+sid+"-01"), false, 0, Deferred, "", false},
		{"w3c zero trace", hdr("traceparent", "00-"+strings.Repeat("0", 32)+"-"+sid+"-01"), false, 0, Deferred, "", false},
		{"w3c zero span", hdr("traceparent", "00-"+tid+"-"+strings.Repeat("0", 16)+"-01"), false, 0, Deferred, "", false},
		{"w3c short", hdr("traceparent", "00-"+tid+"-"+sid+"-1"), false, 0, Deferred, "", false},
		{"w3c two values", hdr("traceparent", "00-"+tid+"-"+sid+"-01", "traceparent", "00-"+tid+"-"+sid+"-00"), false, 0, Deferred, "", false},
		{"w3c bad falls back to b3", hdr("traceparent", "garbage", "b3", tid+"-"+sid+"-1"), true, B3Single, Sampled, tid, false},
		{"w3c wins over b3", hdr("traceparent", "00-"+tid+"-"+sid+"-00", "b3", "0000000000000001-"+sid+"-1"), true, W3C, NotSampled, tid, false},
		{"b3 single", hdr("b3", tid+"-"+sid+"-1-"+sid), true, B3Single, Sampled, tid, false},
		{"b3 single deferred", hdr("b3", tid+"-"+sid), true, B3Single, Deferred, tid, false},
		{"b3 single debug", hdr("b3", tid+"-"+sid+"-d"), true, B3Single, Debug, tid, false},
		{"b3 single 64-bit", hdr("b3", "a3ce929d0e0e4736-"+sid+"-0"), true, B3Single, NotSampled, "0000000000000000a3ce929d0e0e4736", true},
		{"b3 single uppercase (Envoy takes it)", hdr("b3", strings.ToUpper(tid)+"-"+sid+"-1"), true, B3Single, Sampled, tid, false},
		{"b3 deny only", hdr("b3", "0"), true, B3Single, NotSampled, "", false},
		{"b3 bad sampling", hdr("b3", tid+"-"+sid+"-2"), false, 0, Deferred, "", false},
		{"b3 bad parent", hdr("b3", tid+"-"+sid+"-1-xyz"), false, 0, Deferred, "", false},
		{"b3 48-bit trace", hdr("b3", "a3ce929d0e0e-"+sid+"-1"), false, 0, Deferred, "", false},
		{"b3 multi", hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Sampled", "1"), true, B3Multi, Sampled, tid, false},
		{"b3 multi true", hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Sampled", "true"), true, B3Multi, Sampled, tid, false},
		{"b3 multi flags 0", hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Sampled", "1", "X-B3-Flags", "0"), true, B3Multi, Sampled, tid, false},
		{"b3 multi flags debug", hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Flags", "1"), true, B3Multi, Debug, tid, false},
		{"b3 multi sampled only", hdr("X-B3-Sampled", "0"), true, B3Multi, NotSampled, "", false},
		{"b3 multi trace without span", hdr("X-B3-TraceId", tid, "X-B3-Sampled", "1"), false, 0, Deferred, "", false},
		{"b3 multi two trace ids", hdr("X-B3-TraceId", tid, "X-B3-TraceId", tid, "X-B3-SpanId", sid), false, 0, Deferred, "", false},
		{"b3 multi bad sampled", hdr("X-B3-TraceId", tid, "X-B3-SpanId", sid, "X-B3-Sampled", "yes"), false, 0, Deferred, "", false},
		{"b3 multi zero span", hdr("X-B3-TraceId", tid, "X-B3-SpanId", strings.Repeat("0", 16)), false, 0, Deferred, "", false},
		{"b3 multi parent only", hdr("X-B3-ParentSpanId", sid), false, 0, Deferred, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := Extract(tc.h)
			if ok != tc.ok || p.From != tc.from || p.Sampling != tc.sampling || p.Short != tc.short {
				t.Fatalf("Extract = %+v, %v; want ok %v from %v sampling %v short %v", p, ok, tc.ok, tc.from, tc.sampling, tc.short)
			}
			got := ""
			if p.HasIDs() {
				got = string(AppendHex(nil, p.TraceID[:]))
			}
			if got != tc.trace {
				t.Fatalf("trace id %q, want %q", got, tc.trace)
			}
			if len(tc.h) > 0 && p.Carried == 0 {
				t.Fatalf("Carried empty for %v", tc.h)
			}
		})
	}
}

func TestTracestateOK(t *testing.T) {
	if !TracestateOK(nil) || !TracestateOK([]string{"a=1,b=2", "c=3"}) {
		t.Error("small tracestate refused")
	}
	if TracestateOK([]string{strings.Repeat("a", 513)}) || TracestateOK([]string{strings.Repeat("k=v,", 32) + "z=1"}) {
		t.Error("tracestate over 512 characters or 32 members accepted")
	}
}

func TestAppendRoundTrip(t *testing.T) {
	var tr TraceID
	var s, par SpanID
	copy(tr[:], "0123456789abcdef")
	copy(s[:], "spanid!!")
	copy(par[:], "parent!!")
	tp := string(AppendTraceparent(nil, tr, s, true))
	if len(tp) != 55 {
		t.Fatalf("traceparent %q: %d characters", tp, len(tp))
	}
	p, ok := Extract(hdr("traceparent", tp))
	if !ok || p.TraceID != tr || p.SpanID != s || p.Sampling != Sampled {
		t.Fatalf("traceparent %q read back as %+v %v", tp, p, ok)
	}
	for _, sm := range []Sampling{Sampled, NotSampled, Debug} {
		b3 := string(AppendB3Single(nil, tr, false, s, sm, par))
		p, ok := Extract(hdr("b3", b3))
		if !ok || p.TraceID != tr || p.SpanID != s || p.Sampling != sm {
			t.Fatalf("b3 %q read back as %+v %v", b3, p, ok)
		}
	}
	var short TraceID
	short[15] = 7
	if got := string(AppendB3TraceID(nil, short, true)); got != "0000000000000007" {
		t.Fatalf("short B3 trace id %q", got)
	}
	if got := string(AppendB3TraceID(nil, short, false)); len(got) != 32 {
		t.Fatalf("long B3 trace id %q", got)
	}
}

// FuzzExtract: no input panics, and what is accepted has ids that are
// not zero (or none at all), and writes back to what reads the same.
func FuzzExtract(f *testing.F) {
	f.Add("00-"+tid+"-"+sid+"-01", tid+"-"+sid+"-1", tid, sid, "1")
	f.Add("", "0", "", "", "")
	f.Add("cc-"+tid+"-"+sid+"-01-x", "", "a3ce929d0e0e4736", sid, "true")
	f.Fuzz(func(t *testing.T, tp, b3, mt, ms, sampled string) {
		h := http.Header{}
		for k, v := range map[string]string{HeaderTraceparent: tp, HeaderB3: b3, HeaderB3TraceID: mt, HeaderB3SpanID: ms, HeaderB3Sampled: sampled} {
			if v != "" {
				h[k] = []string{v}
			}
		}
		p, ok := Extract(h)
		if !ok {
			return
		}
		if p.HasIDs() == p.SpanID.IsZero() {
			t.Fatalf("%+v: a trace id without a span id, or the reverse", p)
		}
		if !p.HasIDs() {
			return
		}
		again, ok := Extract(hdr("traceparent", string(AppendTraceparent(nil, p.TraceID, p.SpanID, p.Sampling == Sampled || p.Sampling == Debug))))
		if !ok || again.TraceID != p.TraceID || again.SpanID != p.SpanID {
			t.Fatalf("%+v written as traceparent reads back as %+v", p, again)
		}
	})
}
