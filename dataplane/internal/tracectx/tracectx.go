// Package tracectx reads and writes the trace context headers the sidecar
// propagates: W3C Trace Context (traceparent, tracestate) and Zipkin's B3,
// as one b3 header or as X-B3-* headers. It only parses and formats: the
// sampling decision's randomness, the spans and their export belong to the
// data plane. Hostile values are rejected as a whole (the request then
// starts a trace of its own), never partly trusted.
package tracectx

import "net/http"

// TraceID is a 128-bit trace id; a 64-bit B3 id fills the low 8 bytes.
type TraceID [16]byte

// SpanID is a 64-bit span id.
type SpanID [8]byte

// IsZero reports the all-zero id, which both formats forbid.
func (t TraceID) IsZero() bool { return t == TraceID{} }

// IsZero reports the all-zero id, which both formats forbid.
func (s SpanID) IsZero() bool { return s == SpanID{} }

// Sampling is the caller's sampling decision.
type Sampling uint8

const (
	// Deferred: the caller decided nothing; the sidecar samples by its
	// percentage.
	Deferred Sampling = iota
	// Sampled: record and export.
	Sampled
	// NotSampled: record nothing, and say so downstream.
	NotSampled
	// Debug is B3's debug flag: sampled, whatever the percentage.
	Debug
)

// Format is a set of the header formats a request carried.
type Format uint8

const (
	// W3C is traceparent (and tracestate).
	W3C Format = 1 << iota
	// B3Single is the one b3 header.
	B3Single
	// B3Multi is the X-B3-* headers.
	B3Multi
)

// Canonical header keys (http.Header's form).
const (
	HeaderTraceparent  = "Traceparent"
	HeaderTracestate   = "Tracestate"
	HeaderB3           = "B3"
	HeaderB3TraceID    = "X-B3-Traceid"
	HeaderB3SpanID     = "X-B3-Spanid"
	HeaderB3ParentSpan = "X-B3-Parentspanid"
	HeaderB3Sampled    = "X-B3-Sampled"
	HeaderB3Flags      = "X-B3-Flags"
)

// Parent is the trace context a request arrived with.
type Parent struct {
	// TraceID and SpanID are the caller's; both zero when the request
	// carried a sampling decision only (b3: 0, X-B3-Sampled: 1).
	TraceID TraceID
	SpanID  SpanID
	// Sampling is the caller's decision.
	Sampling Sampling
	// From is the format the context was read from; Carried every
	// format present in the request, valid or not (to rewrite or remove
	// them all downstream).
	From, Carried Format
	// Short: a 64-bit B3 trace id, written back as 16 hex digits.
	Short bool
}

// HasIDs reports a parent span to join (else the request starts a trace,
// possibly with the caller's sampling decision).
func (p *Parent) HasIDs() bool { return !p.TraceID.IsZero() }

// Extract reads the request's trace context: traceparent first (the
// OpenTelemetry default), then b3, then the X-B3-* headers; the first
// that is present and valid wins. ok is false when none is (a request
// that carried only invalid headers starts a trace of its own, as the W3C
// recommendation says for an invalid traceparent).
func Extract(h http.Header) (p Parent, ok bool) {
	tp, b3, b3t := h[HeaderTraceparent], h[HeaderB3], h[HeaderB3TraceID]
	if len(tp) > 0 {
		p.Carried |= W3C
	}
	if len(b3) > 0 {
		p.Carried |= B3Single
	}
	if len(b3t) > 0 || len(h[HeaderB3SpanID]) > 0 || len(h[HeaderB3Sampled]) > 0 || len(h[HeaderB3Flags]) > 0 || len(h[HeaderB3ParentSpan]) > 0 {
		p.Carried |= B3Multi
	}
	if p.Carried == 0 {
		return p, false
	}
	// One value only: traceparent is not a list, and two b3 contexts
	// cannot both be the parent.
	if len(tp) == 1 && parseTraceparent(tp[0], &p) {
		p.From = W3C
		// A 64-bit B3 id that an earlier hop padded into traceparent
		// stays 64-bit in the B3 headers written back.
		p.Short = p.Carried&(B3Single|B3Multi) != 0 && [8]byte(p.TraceID[:8]) == [8]byte{}
		return p, true
	}
	if len(b3) == 1 && parseB3Single(b3[0], &p) {
		p.From = B3Single
		return p, true
	}
	if p.Carried&B3Multi != 0 && parseB3Multi(h, &p) {
		p.From = B3Multi
		return p, true
	}
	p.TraceID, p.SpanID, p.Sampling, p.Short = TraceID{}, SpanID{}, Deferred, false
	return p, false
}

// parseTraceparent reads "version-traceid-parentid-flags" (W3C Trace
// Context level 1): lowercase hex only; version ff is invalid; version 00
// is exactly 55 characters; a later version may append "-..." fields,
// which are ignored.
func parseTraceparent(v string, p *Parent) bool {
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	ver, ok := hexByte(v[0], v[1], false)
	if !ok || ver == 0xff || (ver == 0 && len(v) != 55) || (len(v) > 55 && v[55] != '-') {
		return false
	}
	var t TraceID
	var s SpanID
	if !decodeHex(t[:], v[3:35], false) || !decodeHex(s[:], v[36:52], false) || t.IsZero() || s.IsZero() {
		return false
	}
	flags, ok := hexByte(v[53], v[54], false)
	if !ok {
		return false
	}
	p.TraceID, p.SpanID, p.Short = t, s, false
	p.Sampling = NotSampled
	if flags&1 != 0 {
		p.Sampling = Sampled
	}
	return true
}

// parseB3Single reads "traceid-spanid[-sampling[-parentspanid]]" or a
// lone sampling state ("0", "1", "d"). Hex digits of either case are
// taken, as Envoy's Zipkin tracer takes them.
func parseB3Single(v string, p *Parent) bool {
	if len(v) == 1 {
		s, ok := b3Sampling(v)
		if !ok {
			return false
		}
		p.Sampling = s
		return true
	}
	tid, rest, ok := cut(v)
	if !ok {
		return false
	}
	sid, rest, more := cut(rest)
	var t TraceID
	var s SpanID
	short, okT := decodeTraceID(&t, tid)
	if !okT || len(sid) != 16 || !decodeHex(s[:], sid, true) || s.IsZero() {
		return false
	}
	sampling := Deferred
	if more {
		st, parent, hasParent := cut(rest)
		if sampling, ok = b3Sampling(st); !ok {
			return false
		}
		var ps SpanID
		if hasParent && (len(parent) != 16 || !decodeHex(ps[:], parent, true)) {
			return false
		}
	}
	p.TraceID, p.SpanID, p.Sampling, p.Short = t, s, sampling, short
	return true
}

// parseB3Multi reads X-B3-TraceId and X-B3-SpanId (both or neither),
// X-B3-Sampled ("1", "0", or "true"/"false" from older tracers) and
// X-B3-Flags ("1": debug). Each may appear once.
func parseB3Multi(h http.Header, p *Parent) bool {
	one := func(k string) (string, bool) {
		v := h[k]
		if len(v) > 1 {
			return "", false
		}
		if len(v) == 0 {
			return "", true
		}
		return v[0], true
	}
	tid, ok1 := one(HeaderB3TraceID)
	sid, ok2 := one(HeaderB3SpanID)
	sm, ok3 := one(HeaderB3Sampled)
	fl, ok4 := one(HeaderB3Flags)
	par, ok5 := one(HeaderB3ParentSpan)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || (tid == "") != (sid == "") {
		return false
	}
	sampling := Deferred
	switch sm {
	case "":
	case "1", "true":
		sampling = Sampled
	case "0", "false":
		sampling = NotSampled
	default:
		return false
	}
	switch fl {
	case "", "0": // 0: not debug (Envoy reads the flags as a number)
	case "1":
		sampling = Debug
	default:
		return false
	}
	var t TraceID
	var s SpanID
	short := false
	if tid != "" {
		var ok bool
		if short, ok = decodeTraceID(&t, tid); !ok || len(sid) != 16 || !decodeHex(s[:], sid, true) || s.IsZero() {
			return false
		}
		var ps SpanID
		if par != "" && (len(par) != 16 || !decodeHex(ps[:], par, true)) {
			return false
		}
	} else if sampling == Deferred {
		return false // nothing at all
	}
	p.TraceID, p.SpanID, p.Sampling, p.Short = t, s, sampling, short
	return true
}

// TracestateOK reports whether tracestate header values are within what
// the W3C recommendation has vendors propagate: 32 list members and 512
// characters in all. A longer one is discarded, as it allows, rather
// than forwarded whatever its size.
func TracestateOK(vals []string) bool {
	n, members := 0, 0
	for _, v := range vals {
		n += len(v)
		members++
		for i := 0; i < len(v); i++ {
			if v[i] == ',' {
				members++
			}
		}
	}
	return n <= 512 && members <= 32
}

func b3Sampling(s string) (Sampling, bool) {
	switch s {
	case "1":
		return Sampled, true
	case "0":
		return NotSampled, true
	case "d":
		return Debug, true
	}
	return Deferred, false
}

// decodeTraceID reads a B3 trace id of 16 or 32 hex digits, not all zero.
func decodeTraceID(t *TraceID, s string) (short, ok bool) {
	switch len(s) {
	case 32:
		ok = decodeHex(t[:], s, true)
	case 16:
		short, ok = true, decodeHex(t[8:], s, true)
	}
	return short, ok && !t.IsZero()
}

func cut(s string) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func decodeHex(dst []byte, s string, upper bool) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		b, ok := hexByte(s[2*i], s[2*i+1], upper)
		if !ok {
			return false
		}
		dst[i] = b
	}
	return true
}

func hexByte(a, b byte, upper bool) (byte, bool) {
	x, ok1 := nibble(a, upper)
	y, ok2 := nibble(b, upper)
	return x<<4 | y, ok1 && ok2
}

func nibble(c byte, upper bool) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case upper && 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const hexdig = "0123456789abcdef"

// AppendHex appends b as lowercase hex.
func AppendHex(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, hexdig[c>>4], hexdig[c&0xf])
	}
	return dst
}

// AppendTraceparent appends a version 00 traceparent.
func AppendTraceparent(dst []byte, t TraceID, s SpanID, sampled bool) []byte {
	dst = append(dst, "00-"...)
	dst = AppendHex(dst, t[:])
	dst = append(dst, '-')
	dst = AppendHex(dst, s[:])
	if sampled {
		return append(dst, "-01"...)
	}
	return append(dst, "-00"...)
}

// AppendB3TraceID appends a B3 trace id: 16 hex digits when short and
// the high half is zero, else 32.
func AppendB3TraceID(dst []byte, t TraceID, short bool) []byte {
	if short && [8]byte(t[:8]) == [8]byte{} {
		return AppendHex(dst, t[8:])
	}
	return AppendHex(dst, t[:])
}

// AppendB3Single appends a b3 header value: trace id, span id, sampling
// state ("1", "0" or "d") and the parent span id when there is one.
func AppendB3Single(dst []byte, t TraceID, short bool, s SpanID, sampling Sampling, parent SpanID) []byte {
	dst = AppendB3TraceID(dst, t, short)
	dst = append(dst, '-')
	dst = AppendHex(dst, s[:])
	switch sampling {
	case Debug:
		dst = append(dst, "-d"...)
	case Sampled:
		dst = append(dst, "-1"...)
	default:
		dst = append(dst, "-0"...)
	}
	if !parent.IsZero() {
		dst = append(dst, '-')
		dst = AppendHex(dst, parent[:])
	}
	return dst
}
