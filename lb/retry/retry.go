// Package retry is Envoy's router retry logic for one request: the retry_on
// conditions, the retry policy with Envoy's defaults, the decision on a
// response or a reset (would-retry, retries remaining, the retry circuit
// breaker's verdict), the jittered and rate-limited back-off, and the
// counters and response flag each decision implies. State also carries the
// request's retry priority plugin (lb.PreviousPriorities), which the picker
// reads. It is pure, as lb is: no I/O, no goroutines, no clock; randomness
// comes from an lb.Random the caller passes.
//
// The file is over 600 lines: the policy's defaults, the decisions and
// the back-off all read one State, and Envoy defines them together.
package retry

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// On is a bit set of Envoy retry_on conditions. The HTTP and the gRPC
// conditions share one set because Envoy accepts both in a route's retry_on
// string and ORs the x-envoy-retry-on and x-envoy-retry-grpc-on headers in.
type On uint32

// The retry_on conditions, in Envoy's naming order.
const (
	On5xx                     On = 1 << iota // "5xx": any 5xx response, and any reset
	OnGatewayError                           // "gateway-error": 502, 503, 504, and any reset
	OnReset                                  // "reset": any reset, disconnect or read timeout
	OnResetBeforeRequest                     // "reset-before-request": a reset before request bytes were sent
	OnConnectFailure                         // "connect-failure": connection failure or connect timeout
	OnEnvoyRateLimited                       // "envoy-ratelimited": response carries x-envoy-ratelimited
	OnRetriable4xx                           // "retriable-4xx": 409 only
	OnRefusedStream                          // "refused-stream": HTTP/2 REFUSED_STREAM reset
	OnRetriableStatusCodes                   // "retriable-status-codes": Policy.RetriableStatusCodes
	OnRetriableHeaders                       // "retriable-headers": a retriable_headers matcher matched
	OnHTTP3PostConnectFailure                // "http3-post-connect-failure": HTTP/3 failure after connecting
	OnGRPCCancelled                          // "cancelled": grpc-status 1
	OnGRPCDeadlineExceeded                   // "deadline-exceeded": grpc-status 4
	OnGRPCInternal                           // "internal": grpc-status 13
	OnGRPCResourceExhausted                  // "resource-exhausted": grpc-status 8
	OnGRPCUnavailable                        // "unavailable": grpc-status 14
)

// DefaultOn is meshlet's retry_on for routes that configure none. Envoy
// has no default (no policy means no retries); meshlet retries the two
// failures where the request provably never reached the application.
const DefaultOn = OnConnectFailure | OnRefusedStream

// retryOnNames holds the Envoy name of bit i at index i.
var retryOnNames = [...]string{
	"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure",
	"envoy-ratelimited", "retriable-4xx", "refused-stream", "retriable-status-codes",
	"retriable-headers", "http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable",
}

// ParseOn parses a comma-separated list of Envoy retry_on names (HTTP
// and gRPC). Like Envoy it trims blanks around names and skips empty ones. An
// unknown name yields an error naming it; the result still holds every known
// name, because Envoy ignores unknown tokens in x-envoy-retry-on headers. It
// does not allocate unless it fails, so it is cheap enough for headers.
func ParseOn(s string) (On, error) {
	var on On
	var err error
	for s != "" {
		tok, rest, _ := strings.Cut(s, ",")
		s = rest
		tok = strings.TrimSpace(tok)
		if tok == "" {
			continue
		}
		bit := lookupRetryOn(tok)
		if bit == 0 && err == nil {
			err = fmt.Errorf("retry: retry_on: unknown condition %q", tok)
		}
		on |= bit
	}
	return on, err
}

func lookupRetryOn(name string) On {
	for i, n := range retryOnNames {
		if n == name {
			return 1 << i
		}
	}
	return 0
}

// String returns the Envoy names of the set conditions, comma-separated in
// bit order ("" for none), so that ParseOn(r.String()) == r.
func (r On) String() string {
	var b strings.Builder
	for i, n := range retryOnNames {
		if r&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
	}
	return b.String()
}

// ResetReason says why an upstream stream ended without a complete response
// (Envoy's Http::StreamResetReason).
type ResetReason int

// The reset reasons. String gives Envoy's enum name in snake case.
const (
	ResetLocal                           ResetReason = iota // local_reset (also a per-try timeout)
	ResetConnectionFailure                                  // remote_connection_failure
	ResetConnectionTermination                              // connection_termination
	ResetOverflow                                           // overflow (connection-pool circuit breaker)
	ResetRemote                                             // remote_reset
	ResetRemoteRefusedStream                                // remote_refused_stream_reset (HTTP/2 REFUSED_STREAM)
	ResetConnectTimeout                                     // connection_timeout
	ResetProtocolError                                      // protocol_error
	ResetLocalConnectionFailure                             // local_connection_failure
	ResetLocalRefusedStream                                 // local_refused_stream_reset
	ResetConnectError                                       // connect_error (CONNECT tunnel refused)
	ResetOverloadManager                                    // overload_manager
	ResetHTTP1PrematureUpstreamHalfClose                    // http1_premature_upstream_half_close
)

var resetReasonNames = [...]string{
	"local_reset", "remote_connection_failure", "connection_termination", "overflow",
	"remote_reset", "remote_refused_stream_reset", "connection_timeout", "protocol_error",
	"local_connection_failure", "local_refused_stream_reset", "connect_error",
	"overload_manager", "http1_premature_upstream_half_close",
}

// String returns the reason's snake-case Envoy name.
func (r ResetReason) String() string {
	if r >= 0 && int(r) < len(resetReasonNames) {
		return resetReasonNames[r]
	}
	return fmt.Sprintf("ResetReason(%d)", int(r))
}

// ParseResetReason is the inverse of ResetReason.String.
func ParseResetReason(s string) (ResetReason, error) {
	for i, n := range resetReasonNames {
		if n == s {
			return ResetReason(i), nil
		}
	}
	return 0, fmt.Errorf("retry: unknown reset reason %q", s)
}

// isConnectFailure reports the reasons Envoy treats as a pool (connect)
// failure rather than a failure of an established stream.
func (r ResetReason) isConnectFailure() bool {
	return r == ResetConnectionFailure || r == ResetLocalConnectionFailure || r == ResetConnectTimeout
}

// Envoy's defaults for an absent retry_policy field.
const (
	DefaultNumRetries                    = 1
	DefaultBaseInterval                  = 25 * time.Millisecond
	DefaultHostSelectionRetryMaxAttempts = 1
	// DefaultRateLimitedMaxInterval is rate_limited_retry_back_off.max_interval:
	// reset-header intervals above it are ignored (the caller filters them).
	DefaultRateLimitedMaxInterval = 300 * time.Second
)

// Policy is a route's retry_policy with the request's x-envoy-* retry
// headers already merged in (the caller ORs header conditions into RetryOn,
// lets x-envoy-max-retries override NumRetries when RetryOn != 0, and appends
// x-envoy-retriable-status-codes). Zero fields mean "unset"; see WithDefaults.
type Policy struct {
	RetryOn    On
	NumRetries uint32
	// PerTryTimeout bounds each attempt (0 = none). When it fires the data
	// plane resets the attempt and calls State.OnPerTryTimeout.
	PerTryTimeout        time.Duration
	RetriableStatusCodes []uint32
	// BaseInterval and MaxInterval shape the jittered back-off; Envoy
	// counts them in whole milliseconds (at least 1).
	BaseInterval, MaxInterval time.Duration
	// HostSelectionRetryMaxAttempts is the number of extra host picks the
	// previous_hosts predicate may ask for (section 9.2).
	HostSelectionRetryMaxAttempts uint32
	// RetryPriorityUpdateFrequency, when > 0, enables the
	// previous_priorities retry priority with that update_frequency
	// (section 9.2); 0 means no retry_priority.
	RetryPriorityUpdateFrequency uint32
}

// WithDefaults returns p with Envoy's defaults in its unset fields:
// num_retries 1, base interval 25 ms, max interval 10 x base and one extra
// host-selection attempt. RetryOn is left alone: an empty set means no
// retries (use DefaultOn to opt in). A zero NumRetries counts as unset,
// so set it after WithDefaults to really allow no retries.
func (p Policy) WithDefaults() Policy {
	if p.NumRetries == 0 {
		p.NumRetries = DefaultNumRetries
	}
	if p.BaseInterval <= 0 {
		p.BaseInterval = DefaultBaseInterval
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = 10 * p.BaseInterval
	}
	if p.HostSelectionRetryMaxAttempts == 0 {
		p.HostSelectionRetryMaxAttempts = DefaultHostSelectionRetryMaxAttempts
	}
	return p
}

// UpstreamResponse is what the retry decision reads from upstream response
// headers (and the request). The zero GRPCStatus is OK, which never retries.
type UpstreamResponse struct {
	Status           int  // :status
	EnvoyRateLimited bool // x-envoy-ratelimited present
	GRPCStatus       int  // grpc-status in the headers, -1 when absent
	// RetriableHeaderMatched reports that one of the policy's
	// retriable_headers matchers (or x-envoy-retriable-header-names)
	// matched; the data plane owns header matching.
	RetriableHeaderMatched bool
	// EarlyData reports that the downstream request arrived as TLS early
	// data. A retriable 425 is retried immediately (with early data
	// disabled) only when it did not.
	EarlyData bool
	// RateLimitReset is the interval parsed from the policy's reset headers
	// (Retry-After, X-RateLimit-Reset), already checked against the
	// rate-limited max interval; 0 for none. Values under 2 whole ms are
	// ignored, as in Envoy.
	RateLimitReset time.Duration
}

// UpstreamReset describes an attempt that ended in a stream reset.
type UpstreamReset struct {
	Reason ResetReason
	// RequestStarted reports that request bytes were sent upstream.
	// State makes it sticky: once one attempt started, later resets
	// count as started too, as Envoy's router does.
	RequestStarted bool
	// HTTP3 reports that the attempt ran over HTTP/3 on a cluster that may
	// fall back to TCP (Envoy's Http3Used::Yes with auto_config). Such a
	// connect failure is a failed 0-RTT handshake and is retried at once; a
	// later failure is retried at once under http3-post-connect-failure,
	// and the caller disables HTTP/3 for that retry.
	HTTP3 bool
}

// wouldRetry is Envoy's Decision before retries_remaining and the
// circuit breaker are consulted.
type wouldRetry uint8

const (
	noRetry wouldRetry = iota
	retryWithBackoff
	retryImmediately
)

// gRPC status codes that retry_on can name.
const (
	grpcCancelled         = 1
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcInternal          = 13
	grpcUnavailable       = 14
)

const statusTooEarly = 425

// fromResponse evaluates the response conditions in Envoy's order.
func fromResponse(on On, codes []uint32, r *UpstreamResponse) wouldRetry {
	// x-envoy-ratelimited comes from an upstream Envoy; only
	// envoy-ratelimited may retry it, never 5xx.
	if r.EnvoyRateLimited {
		if on&OnEnvoyRateLimited != 0 {
			return retryWithBackoff
		}
		return noRetry
	}
	s := r.Status
	if on&On5xx != 0 && s >= 500 && s < 600 {
		return retryWithBackoff
	}
	if on&OnGatewayError != 0 && (s == 502 || s == 503 || s == 504) {
		return retryWithBackoff
	}
	if on&OnRetriable4xx != 0 && s == 409 {
		return retryWithBackoff
	}
	if on&OnRetriableStatusCodes != 0 && containsCode(codes, s) {
		if s != statusTooEarly {
			return retryWithBackoff
		}
		// A 425 for a request that was not early data is retried at
		// once without early data; otherwise it goes downstream.
		if !r.EarlyData {
			return retryImmediately
		}
	}
	if on&OnRetriableHeaders != 0 && r.RetriableHeaderMatched {
		return retryWithBackoff
	}
	switch {
	case r.GRPCStatus == grpcCancelled && on&OnGRPCCancelled != 0,
		r.GRPCStatus == grpcDeadlineExceeded && on&OnGRPCDeadlineExceeded != 0,
		r.GRPCStatus == grpcResourceExhausted && on&OnGRPCResourceExhausted != 0,
		r.GRPCStatus == grpcUnavailable && on&OnGRPCUnavailable != 0,
		r.GRPCStatus == grpcInternal && on&OnGRPCInternal != 0:
		return retryWithBackoff
	}
	return noRetry
}

func containsCode(codes []uint32, status int) bool {
	if status < 0 {
		return false
	}
	for _, c := range codes {
		if uint64(c) == uint64(status) {
			return true
		}
	}
	return false
}

// fromReset evaluates a reset in Envoy's order. Note that a connect failure
// without connect-failure falls through to the generic rules, so 5xx,
// gateway-error and reset retry it too.
func fromReset(on On, r *UpstreamReset) wouldRetry {
	// No conditions means Envoy has no retry state at all, so not even the
	// HTTP/3 fallback retries; overflow is the pool's own circuit breaker.
	if on == 0 || r.Reason == ResetOverflow {
		return noRetry
	}
	if r.Reason.isConnectFailure() {
		if r.HTTP3 {
			return retryImmediately
		}
		if on&OnConnectFailure != 0 {
			return retryWithBackoff
		}
	} else if r.HTTP3 && on&OnHTTP3PostConnectFailure != 0 {
		return retryImmediately
	}
	if on&OnResetBeforeRequest != 0 && !r.RequestStarted {
		return retryWithBackoff
	}
	if on&(OnReset|On5xx|OnGatewayError) != 0 {
		return retryWithBackoff // a reset becomes a 503 downstream
	}
	if on&OnRefusedStream != 0 && r.Reason == ResetRemoteRefusedStream {
		return retryWithBackoff
	}
	return noRetry
}

// WouldRetryOnResponse reports whether p's conditions ask to retry a response
// with this status, x-envoy-ratelimited presence and grpc-status (-1 none),
// before retries_remaining and the circuit breaker are consulted.
func WouldRetryOnResponse(p *Policy, status int, hasEnvoyRateLimited bool, grpcStatus int) bool {
	if p == nil {
		return false
	}
	r := UpstreamResponse{Status: status, EnvoyRateLimited: hasEnvoyRateLimited, GRPCStatus: grpcStatus}
	return fromResponse(p.RetryOn, p.RetriableStatusCodes, &r) != noRetry
}

// WouldRetryOnReset reports whether p's conditions ask to retry a reset for
// reason, where upstreamRequestStarted says request bytes were sent, before
// retries_remaining and the circuit breaker are consulted.
func WouldRetryOnReset(p *Policy, reason ResetReason, upstreamRequestStarted bool) bool {
	if p == nil {
		return false
	}
	r := UpstreamReset{Reason: reason, RequestStarted: upstreamRequestStarted}
	return fromReset(p.RetryOn, &r) != noRetry
}

// JitteredBackoff is Envoy's fully jittered exponential back-off: the n-th
// delay is random % interval, where the interval starts at base and doubles
// while below max/2, then stays at max. Envoy works in whole milliseconds;
// so does this, which keeps vector results identical.
type JitteredBackoff struct {
	base, max, next uint64 // milliseconds
	rnd             lb.Random
}

// NewJitteredBackoff returns a back-off over [base, maxInterval] drawing from
// rnd. base is at least 1 ms; maxInterval 0 means 10 x base, and one below
// base is raised to base (Envoy rejects such a config).
func NewJitteredBackoff(base, maxInterval time.Duration, rnd lb.Random) *JitteredBackoff {
	b := &JitteredBackoff{}
	b.init(base, maxInterval, rnd)
	return b
}

func (b *JitteredBackoff) init(base, maxInterval time.Duration, rnd lb.Random) {
	b.base = wholeMs(base)
	if maxInterval <= 0 {
		b.max = 10 * b.base
	} else {
		b.max = wholeMs(maxInterval)
	}
	if b.max < b.base {
		b.max = b.base
	}
	b.next = b.base
	b.rnd = rnd
}

// wholeMs truncates d to milliseconds, with a floor of 1 so the modulo in
// Next is always defined.
func wholeMs(d time.Duration) uint64 {
	if ms := d.Milliseconds(); ms > 1 {
		return uint64(ms)
	}
	return 1
}

// NextInterval returns the exclusive upper bound the next delay is drawn
// from.
func (b *JitteredBackoff) NextInterval() time.Duration {
	return time.Duration(b.next) * time.Millisecond
}

// Next returns the next delay and advances the interval.
func (b *JitteredBackoff) Next() time.Duration {
	cur := b.next
	if b.next < b.max/2 {
		b.next *= 2
	} else {
		b.next = b.max
	}
	return time.Duration(b.rnd.Uint64()%cur) * time.Millisecond
}

// Reset restarts the sequence at the base interval.
func (b *JitteredBackoff) Reset() { b.next = b.base }

// ResetWithBase sets a new base interval (max is kept) and restarts.
func (b *JitteredBackoff) ResetWithBase(base time.Duration) {
	b.base = wholeMs(base)
	b.Reset()
}

// RateLimitedBackoff is the delay for a retry whose response named a reset
// interval: interval + random % (interval/2), i.e. in [interval,
// 1.5 x interval), in whole milliseconds. Below 2 ms there is no jitter
// range and the interval itself is returned.
func RateLimitedBackoff(interval time.Duration, rnd lb.Random) time.Duration {
	ms := interval.Milliseconds()
	if ms < 2 {
		return interval
	}
	return time.Duration(uint64(ms)+rnd.Uint64()%uint64(ms/2)) * time.Millisecond
}

// Decision is the outcome of a retry decision for a failed attempt.
type Decision int

// The retry decisions.
const (
	No            Decision = iota // no retry wanted (or no policy)
	Yes                           // retry after the returned back-off
	LimitExceeded                 // retries exhausted: flag URX, upstream_rq_retry_limit_exceeded
	Overflow                      // retry circuit breaker full: flag UO, upstream_rq_retry_overflow
)

var retryDecisionNames = [...]string{"No", "Yes", "LimitExceeded", "Overflow"}

// String returns the decision's Go name.
func (d Decision) String() string {
	if d >= 0 && int(d) < len(retryDecisionNames) {
		return retryDecisionNames[d]
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Flag returns the response flag Envoy's router sets for d: URX for
// LimitExceeded, UO for Overflow, none otherwise.
func (d Decision) Flag() respflag.Flags {
	switch d {
	case LimitExceeded:
		return respflag.URX
	case Overflow:
		return respflag.UO
	}
	return 0
}

// Stats is the set of cluster counters one decision increments, so the
// data plane can count without re-deriving Envoy's rules.
type Stats uint8

// The retry counters, named as in Envoy's cluster stats.
const (
	StatRetry              Stats = 1 << iota // upstream_rq_retry
	StatSuccess                              // upstream_rq_retry_success
	StatLimitExceeded                        // upstream_rq_retry_limit_exceeded
	StatOverflow                             // upstream_rq_retry_overflow
	StatBackoffExponential                   // upstream_rq_retry_backoff_exponential
	StatBackoffRateLimited                   // upstream_rq_retry_backoff_ratelimited
)

var retryStatNames = [...]string{
	"upstream_rq_retry", "upstream_rq_retry_success", "upstream_rq_retry_limit_exceeded",
	"upstream_rq_retry_overflow", "upstream_rq_retry_backoff_exponential",
	"upstream_rq_retry_backoff_ratelimited",
}

// Each calls f with the Envoy name of every counter in s, in bit order.
func (s Stats) Each(f func(name string)) {
	for i, n := range retryStatNames {
		if s&(1<<i) != 0 {
			f(n)
		}
	}
}

// State is one request's retry bookkeeping. It is a plain value, meant
// to live inside the request object, and decides without allocating.
// Initialise it with Init; the zero value never retries.
type State struct {
	policy    *Policy
	rnd       lb.Random
	backoff   JitteredBackoff
	remaining uint32
	started   bool  // some attempt sent request bytes
	holding   bool  // the last decision granted a retry
	stats     Stats // counters of the last decision
	// priorities is the policy's retry priority plugin, disabled when the
	// policy configures none.
	priorities lb.PreviousPriorities
}

// Init prepares s for a new request under p (which must stay unchanged
// while s is in use) and rnd. p is used as given, so pass p.WithDefaults();
// only a zero back-off base falls back to the 25 ms default.
func (s *State) Init(p *Policy, rnd lb.Random) {
	*s = State{policy: p, rnd: rnd}
	if p == nil {
		return
	}
	s.remaining = p.NumRetries
	if p.RetryPriorityUpdateFrequency > 0 {
		s.priorities.Init(p.RetryPriorityUpdateFrequency)
	}
	// The back-off is set up by the first retry that waits (nextBackoff):
	// most requests never retry.
}

// nextBackoff is the exponential back-off's next delay, set up from the
// policy on first use.
func (s *State) nextBackoff() time.Duration {
	if s.backoff.base == 0 { // (init makes it at least 1 ms)
		base := s.policy.BaseInterval
		if base <= 0 {
			base = DefaultBaseInterval
		}
		s.backoff.init(base, s.policy.MaxInterval, s.rnd)
	}
	return s.backoff.Next()
}

// responseConditions are the retry_on conditions a response can meet (the
// others are met by resets only).
const responseConditions = On5xx | OnGatewayError | OnEnvoyRateLimited | OnRetriable4xx | OnRetriableStatusCodes |
	OnRetriableHeaders | OnGRPCCancelled | OnGRPCDeadlineExceeded | OnGRPCInternal | OnGRPCResourceExhausted | OnGRPCUnavailable

// ResponseMatters reports whether OnResponse could decide anything but No
// without a counter: the policy retries some response, or a retry was
// granted, whose success the next response counts. When it could not, a
// caller may skip OnResponse and reading its inputs from the response
// (meshlet's default policy retries connect failures and refused streams
// only).
func (s *State) ResponseMatters() bool {
	return s.holding || s.policy != nil && s.policy.RetryOn&responseConditions != 0
}

// OnResponse decides on a response with this status, x-envoy-ratelimited
// presence and grpc-status (-1 none); cbAllows is the retry circuit
// breaker's verdict (circuitbreaker.Thresholds.RetryAllowed). It returns the
// decision and, for Yes, the back-off before the next attempt.
func (s *State) OnResponse(status int, hasEnvoyRateLimited bool, grpcStatus int, cbAllows bool) (Decision, time.Duration) {
	return s.OnUpstreamResponse(UpstreamResponse{Status: status, EnvoyRateLimited: hasEnvoyRateLimited, GRPCStatus: grpcStatus}, cbAllows)
}

// OnUpstreamResponse is OnResponse with the rarer inputs too: header
// matches, early data and a rate-limit reset interval, which when present
// replaces the exponential back-off for this retry.
func (s *State) OnUpstreamResponse(r UpstreamResponse, cbAllows bool) (Decision, time.Duration) {
	w := noRetry
	if s.policy != nil {
		w = fromResponse(s.policy.RetryOn, s.policy.RetriableStatusCodes, &r)
	}
	reset := time.Duration(0)
	if w == retryWithBackoff && r.RateLimitReset.Milliseconds() > 1 { // whole ms, as Envoy
		reset = r.RateLimitReset
	}
	return s.decide(w, cbAllows, reset)
}

// OnReset decides on an attempt that ended in a reset for reason; started
// says request bytes were sent upstream.
func (s *State) OnReset(reason ResetReason, started bool, cbAllows bool) (Decision, time.Duration) {
	return s.OnUpstreamReset(UpstreamReset{Reason: reason, RequestStarted: started}, cbAllows)
}

// OnUpstreamReset is OnReset with the HTTP/3 input too.
func (s *State) OnUpstreamReset(r UpstreamReset, cbAllows bool) (Decision, time.Duration) {
	s.started = s.started || r.RequestStarted
	r.RequestStarted = s.started
	w := noRetry
	if s.policy != nil {
		w = fromReset(s.policy.RetryOn, &r)
	}
	return s.decide(w, cbAllows, 0)
}

// OnPerTryTimeout decides on an attempt cut by the per-try timeout. Envoy
// resets such an attempt and judges it as a local reset, so it is retried
// under reset, 5xx and gateway-error (or reset-before-request when nothing
// was sent). Hedging is not modelled.
func (s *State) OnPerTryTimeout(started bool, cbAllows bool) (Decision, time.Duration) {
	return s.OnReset(ResetLocal, started, cbAllows)
}

// decide applies Envoy's shouldRetry steps to a would-retry verdict.
func (s *State) decide(w wouldRetry, cbAllows bool, rateLimitReset time.Duration) (Decision, time.Duration) {
	s.stats = 0
	// A granted retry followed by an attempt that needs none succeeded.
	if s.holding && w == noRetry {
		s.stats |= StatSuccess
	}
	s.holding = false
	if w == noRetry {
		return No, 0
	}
	if s.remaining == 0 {
		s.stats |= StatLimitExceeded
		return LimitExceeded, 0
	}
	s.remaining-- // spent even when the breaker then refuses
	if !cbAllows {
		s.stats |= StatOverflow
		return Overflow, 0
	}
	s.holding = true
	s.stats |= StatRetry
	switch {
	case w == retryImmediately:
		return Yes, 0
	case rateLimitReset > 0:
		s.stats |= StatBackoffRateLimited
		return Yes, RateLimitedBackoff(rateLimitReset, s.rnd)
	default:
		s.stats |= StatBackoffExponential
		return Yes, s.nextBackoff()
	}
}

// OnHostAttempted records the host an attempt went to (every attempt, the
// first included), for the retry priority plugin.
func (s *State) OnHostAttempted(h *lb.Host) {
	if h != nil {
		s.priorities.OnHostAttempted(h.Priority)
	}
}

// RetryPriority returns the request's retry priority plugin, to pass as
// PickContext.RetryPriority, or nil when the policy configures none.
func (s *State) RetryPriority() *lb.PreviousPriorities {
	if !s.priorities.Enabled() {
		return nil
	}
	return &s.priorities
}

// RetriesRemaining returns how many more retries the request may make.
func (s *State) RetriesRemaining() uint32 { return s.remaining }

// LastStats returns the counters the most recent decision increments.
func (s *State) LastStats() Stats { return s.stats }

// HoldsRetrySlot reports whether the request occupies a slot of the retry
// circuit breaker: the last decision was Yes. Envoy frees the slot at
// the start of the next decision, before the breaker is asked, so release it
// from the active-retry count before computing cbAllows, and at request end.
func (s *State) HoldsRetrySlot() bool { return s.holding }
