package retry

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/circuitbreaker"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// retryFixedRandom always returns its value.
type retryFixedRandom uint64

func (r retryFixedRandom) Uint64() uint64 { return uint64(r) }

// retryXorshift is a cheap deterministic Random for benchmarks.
type retryXorshift struct{ s uint64 }

func (r *retryXorshift) Uint64() uint64 {
	r.s ^= r.s << 13
	r.s ^= r.s >> 7
	r.s ^= r.s << 17
	return r.s
}

func mustRetryOn(t testing.TB, s string) On {
	t.Helper()
	on, err := ParseOn(s)
	if err != nil {
		t.Fatalf("ParseOn(%q): %v", s, err)
	}
	return on
}

func TestParseRetryOn(t *testing.T) {
	tests := []struct {
		in      string
		want    On
		wantErr string
	}{
		{"", 0, ""},
		{"5xx", On5xx, ""},
		{" 5xx , ,reset,", On5xx | OnReset, ""},
		{"connect-failure,refused-stream", DefaultOn, ""},
		{"cancelled,deadline-exceeded,internal,resource-exhausted,unavailable",
			OnGRPCCancelled | OnGRPCDeadlineExceeded | OnGRPCInternal | OnGRPCResourceExhausted | OnGRPCUnavailable, ""},
		{"5xxx", 0, `retry: retry_on: unknown condition "5xxx"`},
		// Known names survive an error, as Envoy keeps them from headers.
		{"gateway-error,bogus,reset", OnGatewayError | OnReset, `retry: retry_on: unknown condition "bogus"`},
		{"5XX", 0, `retry: retry_on: unknown condition "5XX"`}, // names are case-sensitive
		{"a,b", 0, `retry: retry_on: unknown condition "a"`},   // the first unknown is named
	}
	for _, tt := range tests {
		got, err := ParseOn(tt.in)
		if got != tt.want {
			t.Errorf("ParseOn(%q) = %v, want %v", tt.in, got, tt.want)
		}
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if gotErr != tt.wantErr {
			t.Errorf("ParseOn(%q) error %q, want %q", tt.in, gotErr, tt.wantErr)
		}
	}
}

func TestRetryOnStringRoundTrip(t *testing.T) {
	for i := range len(retryOnNames) {
		bit := On(1) << i
		if got := mustRetryOn(t, bit.String()); got != bit {
			t.Errorf("bit %d: %q parses to %v", i, bit.String(), got)
		}
	}
	if got, want := (OnConnectFailure | On5xx).String(), "5xx,connect-failure"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := On(0).String(); got != "" {
		t.Errorf("On(0).String() = %q, want empty", got)
	}
	all := On(1)<<len(retryOnNames) - 1
	if got := mustRetryOn(t, all.String()); got != all {
		t.Errorf("all conditions round-trip to %v, want %v", got, all)
	}
}

func TestResetReasonNames(t *testing.T) {
	for r := ResetLocal; int(r) < len(resetReasonNames); r++ {
		got, err := ParseResetReason(r.String())
		if err != nil || got != r {
			t.Errorf("ParseResetReason(%q) = %v, %v; want %v", r.String(), got, err, r)
		}
	}
	for name, want := range map[string]ResetReason{
		"remote_reset": ResetRemote, "overflow": ResetOverflow,
		"remote_connection_failure": ResetConnectionFailure, "remote_refused_stream_reset": ResetRemoteRefusedStream,
		"connection_termination": ResetConnectionTermination, "local_reset": ResetLocal,
	} {
		if got, err := ParseResetReason(name); err != nil || got != want {
			t.Errorf("ParseResetReason(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseResetReason("remote-reset"); err == nil {
		t.Error("ParseResetReason(remote-reset): want error")
	}
	if got := ResetReason(99).String(); got != "ResetReason(99)" {
		t.Errorf("ResetReason(99).String() = %q", got)
	}
}

func TestRetryPolicyWithDefaults(t *testing.T) {
	got := Policy{}.WithDefaults()
	want := Policy{NumRetries: 1, BaseInterval: 25 * time.Millisecond, MaxInterval: 250 * time.Millisecond, HostSelectionRetryMaxAttempts: 1}
	if got.RetryOn != 0 || got.NumRetries != want.NumRetries || got.BaseInterval != want.BaseInterval ||
		got.MaxInterval != want.MaxInterval || got.HostSelectionRetryMaxAttempts != want.HostSelectionRetryMaxAttempts {
		t.Errorf("zero.WithDefaults() = %+v, want %+v", got, want)
	}
	set := Policy{RetryOn: On5xx, NumRetries: 4, BaseInterval: 100 * time.Millisecond, HostSelectionRetryMaxAttempts: 5}.WithDefaults()
	if set.RetryOn != On5xx || set.NumRetries != 4 || set.MaxInterval != time.Second || set.HostSelectionRetryMaxAttempts != 5 {
		t.Errorf("set fields not kept or max not 10 x base: %+v", set)
	}
}

func TestWouldRetryOnResponse(t *testing.T) {
	tests := []struct {
		on     string
		codes  []uint32
		status int
		rl     bool
		grpc   int
		want   bool
	}{
		{"5xx", nil, 500, false, -1, true},
		{"5xx", nil, 599, false, -1, true},
		{"5xx", nil, 600, false, -1, false},
		{"5xx", nil, 499, false, -1, false},
		{"gateway-error", nil, 502, false, -1, true},
		{"gateway-error", nil, 503, false, -1, true},
		{"gateway-error", nil, 501, false, -1, false},
		{"gateway-error", nil, 505, false, -1, false},
		{"retriable-4xx", nil, 409, false, -1, true},
		{"retriable-4xx", nil, 408, false, -1, false},
		{"retriable-status-codes", []uint32{418, 503}, 418, false, -1, true},
		{"retriable-status-codes", []uint32{418}, 503, false, -1, false},
		{"5xx", []uint32{418}, 418, false, -1, false}, // codes need their condition
		// x-envoy-ratelimited wins over every other condition.
		{"5xx,gateway-error,retriable-status-codes", []uint32{503}, 503, true, -1, false},
		{"envoy-ratelimited", nil, 200, true, -1, true},
		{"envoy-ratelimited", nil, 503, false, -1, false},
		{"unavailable", nil, 200, true, 14, false},
		// gRPC statuses, each only under its own condition.
		{"cancelled", nil, 200, false, 1, true},
		{"deadline-exceeded", nil, 200, false, 4, true},
		{"resource-exhausted", nil, 200, false, 8, true},
		{"internal", nil, 200, false, 13, true},
		{"unavailable", nil, 200, false, 14, true},
		{"unavailable", nil, 200, false, 13, false},
		{"cancelled,deadline-exceeded,internal,resource-exhausted,unavailable", nil, 200, false, 2, false},
		{"cancelled,deadline-exceeded,internal,resource-exhausted,unavailable", nil, 200, false, -1, false},
		{"cancelled,deadline-exceeded,internal,resource-exhausted,unavailable", nil, 200, false, 0, false},
		{"5xx", nil, 200, false, 14, false},
		{"", nil, 503, false, 14, false},
	}
	for _, tt := range tests {
		p := Policy{RetryOn: mustRetryOn(t, tt.on), RetriableStatusCodes: tt.codes}
		if got := WouldRetryOnResponse(&p, tt.status, tt.rl, tt.grpc); got != tt.want {
			t.Errorf("retry_on %q codes %v: status %d ratelimited %v grpc %d: got %v, want %v",
				tt.on, tt.codes, tt.status, tt.rl, tt.grpc, got, tt.want)
		}
	}
	if WouldRetryOnResponse(nil, 503, false, -1) {
		t.Error("nil policy retried")
	}
}

func TestRetriableHeadersAndTooEarly(t *testing.T) {
	p := Policy{RetryOn: mustRetryOn(t, "retriable-headers,retriable-status-codes"), NumRetries: 3, RetriableStatusCodes: []uint32{425}}
	tests := []struct {
		name        string
		r           UpstreamResponse
		want        Decision
		wantBackoff bool // a back-off was drawn, not an immediate retry
	}{
		{"header matched", UpstreamResponse{Status: 200, RetriableHeaderMatched: true, GRPCStatus: -1}, Yes, true},
		{"no header", UpstreamResponse{Status: 200, GRPCStatus: -1}, No, false},
		{"425 not early data", UpstreamResponse{Status: 425, GRPCStatus: -1}, Yes, false},
		{"425 early data", UpstreamResponse{Status: 425, EarlyData: true, GRPCStatus: -1}, No, false},
	}
	for _, tt := range tests {
		var s State
		s.Init(&p, retryFixedRandom(7))
		d, _ := s.OnUpstreamResponse(tt.r, true)
		if d != tt.want {
			t.Errorf("%s: decision %v, want %v", tt.name, d, tt.want)
		}
		if got := s.LastStats()&StatBackoffExponential != 0; got != tt.wantBackoff {
			t.Errorf("%s: exponential back-off drawn = %v, want %v", tt.name, got, tt.wantBackoff)
		}
	}
}

func TestWouldRetryOnReset(t *testing.T) {
	tests := []struct {
		on      string
		reason  ResetReason
		started bool
		want    bool
	}{
		{"5xx,gateway-error,reset,reset-before-request,connect-failure,refused-stream", ResetOverflow, false, false},
		{"connect-failure", ResetConnectionFailure, true, true},
		{"connect-failure", ResetLocalConnectionFailure, false, true},
		{"connect-failure", ResetConnectTimeout, false, true},
		{"connect-failure", ResetRemote, false, false},
		{"connect-failure", ResetConnectionTermination, false, false},
		// A connect failure falls through to the generic reset rules.
		{"5xx", ResetConnectionFailure, false, true},
		{"gateway-error", ResetConnectTimeout, false, true},
		{"reset", ResetLocalConnectionFailure, false, true},
		{"refused-stream", ResetConnectionFailure, false, false},
		{"refused-stream", ResetRemoteRefusedStream, true, true},
		{"refused-stream", ResetLocalRefusedStream, true, false},
		{"refused-stream", ResetRemote, true, false},
		{"reset", ResetConnectionTermination, true, true},
		{"reset", ResetProtocolError, true, true},
		{"reset-before-request", ResetRemote, false, true},
		{"reset-before-request", ResetRemote, true, false},
		{"reset-before-request", ResetConnectionFailure, false, true},
		{"gateway-error", ResetLocal, true, true},
		{"5xx", ResetRemote, true, true},
		{"retriable-4xx,retriable-status-codes,envoy-ratelimited", ResetRemote, false, false},
		{"", ResetRemote, false, false},
	}
	for _, tt := range tests {
		p := Policy{RetryOn: mustRetryOn(t, tt.on)}
		if got := WouldRetryOnReset(&p, tt.reason, tt.started); got != tt.want {
			t.Errorf("retry_on %q: reset %v started %v: got %v, want %v", tt.on, tt.reason, tt.started, got, tt.want)
		}
	}
	if WouldRetryOnReset(nil, ResetRemote, false) {
		t.Error("nil policy retried")
	}
}

func TestHTTP3Resets(t *testing.T) {
	tests := []struct {
		name string
		on   string
		r    UpstreamReset
		want Decision
	}{
		{"0-RTT connect failure retries at once without connect-failure", "retriable-4xx", UpstreamReset{Reason: ResetConnectionFailure, HTTP3: true}, Yes},
		{"no conditions, no retry state", "", UpstreamReset{Reason: ResetConnectionFailure, HTTP3: true}, No},
		{"post-connect failure", "http3-post-connect-failure", UpstreamReset{Reason: ResetRemote, RequestStarted: true, HTTP3: true}, Yes},
		{"post-connect failure needs HTTP/3", "http3-post-connect-failure", UpstreamReset{Reason: ResetRemote, RequestStarted: true}, No},
		{"overflow never", "http3-post-connect-failure,reset", UpstreamReset{Reason: ResetOverflow, HTTP3: true}, No},
	}
	for _, tt := range tests {
		p := Policy{RetryOn: mustRetryOn(t, tt.on), NumRetries: 1}
		var s State
		s.Init(&p, retryFixedRandom(7))
		d, backoff := s.OnUpstreamReset(tt.r, true)
		if d != tt.want {
			t.Errorf("%s: decision %v, want %v", tt.name, d, tt.want)
		}
		if d == Yes && (backoff != 0 || s.LastStats()&StatBackoffExponential != 0) {
			t.Errorf("%s: HTTP/3 retries are immediate, got back-off %v stats %b", tt.name, backoff, s.LastStats())
		}
	}
}

func TestRetryStateLimitExceeded(t *testing.T) {
	p := Policy{RetryOn: On5xx, NumRetries: 2}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(math.MaxUint64))
	steps := []struct {
		want      Decision
		remaining uint32
		stats     Stats
		flag      respflag.Flags
	}{
		{Yes, 1, StatRetry | StatBackoffExponential, 0},
		{Yes, 0, StatRetry | StatBackoffExponential, 0},
		{LimitExceeded, 0, StatLimitExceeded, respflag.URX},
		{LimitExceeded, 0, StatLimitExceeded, respflag.URX},
	}
	for i, st := range steps {
		d, _ := s.OnResponse(503, false, -1, true)
		if d != st.want || s.RetriesRemaining() != st.remaining || s.LastStats() != st.stats || d.Flag() != st.flag {
			t.Errorf("step %d: got %v remaining %d stats %b flag %v; want %v %d %b %v",
				i, d, s.RetriesRemaining(), s.LastStats(), d.Flag(), st.want, st.remaining, st.stats, st.flag)
		}
	}
}

func TestRetryStateZeroRetries(t *testing.T) {
	p := Policy{RetryOn: On5xx}.WithDefaults()
	p.NumRetries = 0 // explicit zero, set after the defaults
	var s State
	s.Init(&p, retryFixedRandom(0))
	if d, _ := s.OnReset(ResetRemote, true, true); d != LimitExceeded {
		t.Errorf("num_retries 0: got %v, want LimitExceeded", d)
	}
}

func TestRetryStateOverflow(t *testing.T) {
	p := Policy{RetryOn: OnReset, NumRetries: 2}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(3))
	// The breaker refuses: UO, and the retry is spent all the same.
	d, backoff := s.OnReset(ResetRemote, true, false)
	if d != Overflow || d.Flag() != respflag.UO || backoff != 0 || s.LastStats() != StatOverflow || s.RetriesRemaining() != 1 {
		t.Errorf("refused: got %v flag %v backoff %v stats %b remaining %d", d, d.Flag(), backoff, s.LastStats(), s.RetriesRemaining())
	}
	if s.HoldsRetrySlot() {
		t.Error("overflow holds a retry slot")
	}
	if d, _ := s.OnReset(ResetRemote, true, true); d != Yes || !s.HoldsRetrySlot() {
		t.Errorf("admitted: got %v holds %v, want Yes holding", d, s.HoldsRetrySlot())
	}
	if d, _ := s.OnReset(ResetRemote, true, false); d != LimitExceeded {
		t.Errorf("exhausted: got %v, want LimitExceeded (the limit is checked before the breaker)", d)
	}
	if s.HoldsRetrySlot() {
		t.Error("slot not released by the next decision")
	}
}

func TestRetryStateBudgetOverflow(t *testing.T) {
	budget := circuitbreaker.DefaultRetryBudget()
	cb := circuitbreaker.DefaultThresholds()
	cb.RetryBudget = &budget
	p := Policy{RetryOn: On5xx, NumRetries: 5}.WithDefaults()
	tests := []struct {
		activeRetries, active, pending uint64
		want                           Decision
	}{
		{2, 10, 0, Yes},        // 20% of 10 is 2, the floor 3 applies
		{3, 10, 0, Overflow},   // floor reached
		{3, 20, 0, Yes},        // 20% of 20 is 4
		{19, 100, 0, Yes},      // 20% of 100 is 20
		{20, 90, 10, Overflow}, // pending requests count too
	}
	for _, tt := range tests {
		var s State
		s.Init(&p, retryFixedRandom(1))
		allowed := cb.RetryAllowed(tt.activeRetries, tt.active, tt.pending)
		if d, _ := s.OnResponse(503, false, -1, allowed); d != tt.want {
			t.Errorf("retries %d active %d pending %d: got %v, want %v", tt.activeRetries, tt.active, tt.pending, d, tt.want)
		}
	}
	// Without a budget, max_retries (3) applies regardless of load.
	cb.RetryBudget = nil
	if !cb.RetryAllowed(2, 1000, 0) || cb.RetryAllowed(3, 1000, 0) {
		t.Error("max_retries 3 not applied without a budget")
	}
}

func TestRetryStateRateLimitedPrecedence(t *testing.T) {
	p := Policy{RetryOn: On5xx | OnEnvoyRateLimited, NumRetries: 3}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(22))
	d, backoff := s.OnUpstreamResponse(UpstreamResponse{Status: 429, EnvoyRateLimited: true, GRPCStatus: -1, RateLimitReset: 500 * time.Millisecond}, true)
	if d != Yes || backoff != 522*time.Millisecond || s.LastStats() != StatRetry|StatBackoffRateLimited {
		t.Errorf("reset header: got %v %v stats %b, want Yes 522ms rate-limited", d, backoff, s.LastStats())
	}
	// The next retry without a header is exponential again, from the base.
	d, backoff = s.OnResponse(503, false, -1, true)
	if d != Yes || backoff != 22*time.Millisecond || s.LastStats() != StatRetry|StatBackoffExponential {
		t.Errorf("no header: got %v %v stats %b, want Yes 22ms exponential", d, backoff, s.LastStats())
	}
	// Intervals under 2 whole ms are ignored.
	d, backoff = s.OnUpstreamResponse(UpstreamResponse{Status: 503, GRPCStatus: -1, RateLimitReset: 1999 * time.Microsecond}, true)
	if d != Yes || backoff != 22*time.Millisecond || s.LastStats()&StatBackoffExponential == 0 {
		t.Errorf("1ms header: got %v %v stats %b, want exponential 22ms (interval 50)", d, backoff, s.LastStats())
	}
	// A rate-limited 503 without envoy-ratelimited is not retried by 5xx.
	p2 := Policy{RetryOn: On5xx, NumRetries: 3}.WithDefaults()
	s.Init(&p2, retryFixedRandom(22))
	if d, _ := s.OnResponse(503, true, -1, true); d != No {
		t.Errorf("x-envoy-ratelimited under 5xx: got %v, want No", d)
	}
}

func TestRetryStateBackoffSequence(t *testing.T) {
	p := Policy{RetryOn: OnConnectFailure, NumRetries: 10}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(math.MaxUint64))
	// The default-retry vector: intervals 25, 50, 100, 200, 250 ms.
	for i, want := range []time.Duration{15, 15, 15, 15, 115, 115} {
		_, got := s.OnReset(ResetConnectionFailure, false, true)
		if got != want*time.Millisecond {
			t.Errorf("retry %d: back-off %v, want %v", i, got, want*time.Millisecond)
		}
	}
}

func TestRetryStateSuccess(t *testing.T) {
	p := Policy{RetryOn: On5xx, NumRetries: 3}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(0))
	if d, _ := s.OnResponse(200, false, -1, true); d != No || s.LastStats() != 0 {
		t.Errorf("first attempt ok: %v stats %b, want No and no counters", d, s.LastStats())
	}
	s.OnResponse(503, false, -1, true)
	if !s.HoldsRetrySlot() {
		t.Fatal("granted retry holds no slot")
	}
	if d, _ := s.OnResponse(200, false, -1, true); d != No || s.LastStats() != StatSuccess || s.HoldsRetrySlot() {
		t.Errorf("retry ok: %v stats %b holds %v, want No, retry_success, slot released", d, s.LastStats(), s.HoldsRetrySlot())
	}
	// A retry that ends in the limit is no success.
	p.NumRetries = 1
	s.Init(&p, retryFixedRandom(0))
	s.OnResponse(503, false, -1, true)
	if s.OnResponse(503, false, -1, true); s.LastStats() != StatLimitExceeded {
		t.Errorf("retry then limit: stats %b, want limit exceeded only", s.LastStats())
	}
}

func TestRetryStatePerTryTimeout(t *testing.T) {
	tests := []struct {
		on      string
		started bool
		want    Decision
	}{
		{"reset", true, Yes},
		{"5xx", true, Yes},
		{"gateway-error", true, Yes},
		{"connect-failure", true, No},
		{"refused-stream", true, No},
		{"retriable-4xx,retriable-status-codes", true, No},
		{"reset-before-request", false, Yes},
		{"reset-before-request", true, No},
	}
	for _, tt := range tests {
		p := Policy{RetryOn: mustRetryOn(t, tt.on), NumRetries: 1, PerTryTimeout: time.Second}.WithDefaults()
		var s State
		s.Init(&p, retryFixedRandom(0))
		if d, _ := s.OnPerTryTimeout(tt.started, true); d != tt.want {
			t.Errorf("retry_on %q started %v: got %v, want %v", tt.on, tt.started, d, tt.want)
		}
	}
}

func TestRetryStateStartedIsSticky(t *testing.T) {
	p := Policy{RetryOn: OnResetBeforeRequest | OnRefusedStream, NumRetries: 3}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(0))
	if d, _ := s.OnReset(ResetRemoteRefusedStream, true, true); d != Yes {
		t.Fatalf("refused stream: got %v, want Yes", d)
	}
	// Bytes went out on the first attempt, so this reset is not "before request".
	if d, _ := s.OnReset(ResetRemote, false, true); d != No {
		t.Errorf("later reset: got %v, want No", d)
	}
}

func TestRetryStateZeroValue(t *testing.T) {
	var s State
	if d, b := s.OnResponse(503, false, -1, true); d != No || b != 0 {
		t.Errorf("zero state: %v %v", d, b)
	}
	s.Init(nil, retryFixedRandom(0))
	if d, _ := s.OnReset(ResetRemote, false, true); d != No {
		t.Errorf("nil policy: %v", d)
	}
}

func TestRetryStatsEach(t *testing.T) {
	var got []string
	(StatRetry | StatBackoffRateLimited | StatLimitExceeded).Each(func(n string) { got = append(got, n) })
	want := []string{"upstream_rq_retry", "upstream_rq_retry_limit_exceeded", "upstream_rq_retry_backoff_ratelimited"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Each = %v, want %v", got, want)
	}
	n := 0
	(Stats(1)<<len(retryStatNames) - 1).Each(func(string) { n++ })
	if n != 6 {
		t.Errorf("all stats: %d names, want 6", n)
	}
}

func TestRetryDecisionNames(t *testing.T) {
	for d, want := range map[Decision]string{No: "No", Yes: "Yes", LimitExceeded: "LimitExceeded", Overflow: "Overflow", 9: "Decision(9)"} {
		if got := d.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	if No.Flag() != 0 || Yes.Flag() != 0 {
		t.Error("No/Yes carry a flag")
	}
}

func TestJitteredBackoff(t *testing.T) {
	tests := []struct {
		name      string
		base, max time.Duration
		want      []time.Duration // intervals
	}{
		{"defaults", 25 * time.Millisecond, 0, []time.Duration{25, 50, 100, 200, 250, 250}},
		{"max below base is raised", 40 * time.Millisecond, 10 * time.Millisecond, []time.Duration{40, 40}},
		{"sub-millisecond base is 1ms", 100 * time.Microsecond, 5 * time.Millisecond, []time.Duration{1, 2, 5, 5}},
		{"no doubling from max/2 (integer) up", 10 * time.Millisecond, 39 * time.Millisecond, []time.Duration{10, 20, 39, 39}},
	}
	for _, tt := range tests {
		b := NewJitteredBackoff(tt.base, tt.max, retryFixedRandom(math.MaxUint64))
		for i, w := range tt.want {
			if got := b.NextInterval(); got != w*time.Millisecond {
				t.Errorf("%s: interval %d = %v, want %v", tt.name, i, got, w*time.Millisecond)
			}
			if d := b.Next(); d >= w*time.Millisecond || d < 0 {
				t.Errorf("%s: delay %d = %v outside [0, %v)", tt.name, i, d, w*time.Millisecond)
			}
		}
	}
	b := NewJitteredBackoff(25*time.Millisecond, 30*time.Millisecond, retryFixedRandom(27))
	b.Next()
	b.ResetWithBase(50 * time.Millisecond) // above max: Envoy keeps it for the first draw
	if got := b.NextInterval(); got != 50*time.Millisecond {
		t.Errorf("ResetWithBase above max: interval %v, want 50ms", got)
	}
	b.Next()
	if got := b.NextInterval(); got != 30*time.Millisecond {
		t.Errorf("after ResetWithBase above max: interval %v, want 30ms", got)
	}
}

func TestRateLimitedBackoff(t *testing.T) {
	tests := []struct {
		interval time.Duration
		rnd      uint64
		want     time.Duration
	}{
		{500 * time.Millisecond, 22, 522 * time.Millisecond},
		{500 * time.Millisecond, 9999, 749 * time.Millisecond},
		{500 * time.Millisecond, 250, 500 * time.Millisecond},
		{3 * time.Millisecond, 5, 3 * time.Millisecond},
		{time.Millisecond, 5, time.Millisecond}, // no jitter range
	}
	for _, tt := range tests {
		if got := RateLimitedBackoff(tt.interval, retryFixedRandom(tt.rnd)); got != tt.want {
			t.Errorf("RateLimitedBackoff(%v, %d) = %v, want %v", tt.interval, tt.rnd, got, tt.want)
		}
	}
}

func TestRetryStateDoesNotAllocate(t *testing.T) {
	p := Policy{RetryOn: On5xx | OnReset, NumRetries: 1 << 30}.WithDefaults()
	rnd := &retryXorshift{s: 1}
	var s State
	allocs := testing.AllocsPerRun(100, func() {
		s.Init(&p, rnd)
		s.OnResponse(503, false, -1, true)
		s.OnReset(ResetRemote, true, true)
		s.OnUpstreamResponse(UpstreamResponse{Status: 503, RateLimitReset: time.Second}, true)
	})
	if allocs != 0 {
		t.Errorf("State decisions allocate %v times per run", allocs)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = ParseOn("5xx, reset,connect-failure") }); a != 0 {
		t.Errorf("ParseOn allocates %v times", a)
	}
}

func BenchmarkRetryStateOnResponse(b *testing.B) {
	p := Policy{RetryOn: On5xx | OnConnectFailure, NumRetries: 2}.WithDefaults()
	rnd := &retryXorshift{s: 88172645463325252}
	b.ReportAllocs()
	for b.Loop() {
		var s State
		s.Init(&p, rnd)
		s.OnResponse(503, false, -1, true)
		s.OnResponse(200, false, -1, true)
	}
}

// State carries the policy's retry priority plugin: disabled without
// RetryPriorityUpdateFrequency, fed every attempted host otherwise.
func TestRetryStateRetryPriority(t *testing.T) {
	var s State
	p := Policy{RetryOn: On5xx, NumRetries: 3}.WithDefaults()
	s.Init(&p, retryFixedRandom(0))
	if s.RetryPriority() != nil {
		t.Fatal("RetryPriority without update frequency: want nil")
	}
	s.OnHostAttempted(&lb.Host{Priority: 1}) // ignored
	p.RetryPriorityUpdateFrequency = 1
	s.Init(&p, retryFixedRandom(0))
	rp := s.RetryPriority()
	if rp == nil || !rp.Enabled() {
		t.Fatal("RetryPriority with update frequency 1: want the enabled plugin")
	}
	s.OnHostAttempted(nil) // no host: nothing recorded
	s.OnHostAttempted(&lb.Host{Priority: 0})
	l := lb.ComputePriorityLoad([]lb.PriorityAvailability{{Hosts: 2, Healthy: 2, OverprovisioningFactor: 140}, {Hosts: 2, Healthy: 2, OverprovisioningFactor: 140}}, 0)
	if h, _ := rp.PriorityLoad(&l); len(h) != 2 || h[0] != 0 || h[1] != 100 {
		t.Errorf("after a P0 attempt: healthy load %v, want [0 100]", h)
	}
}

// TestResponseMatters checks that a state ResponseMatters calls inert
// decides No without a counter on every response, for every retry_on set,
// and that it is not inert where a response can retry or a granted
// retry's success is still to count.
func TestResponseMatters(t *testing.T) {
	statuses := []int{200, 409, 425, 429, 500, 503, 504}
	inert := 0
	for on := On(0); on < 1<<len(retryOnNames); on++ {
		p := Policy{RetryOn: on, NumRetries: 2, RetriableStatusCodes: []uint32{200, 425, 429}}.WithDefaults()
		var s State
		s.Init(&p, retryFixedRandom(0))
		if s.ResponseMatters() {
			if on&responseConditions == 0 {
				t.Fatalf("retry_on %q: ResponseMatters with no response condition", on)
			}
			continue
		}
		inert++
		for _, st := range statuses {
			for _, rl := range []bool{false, true} {
				for _, g := range []int{-1, 0, 1, 4, 8, 13, 14} {
					if WouldRetryOnResponse(&p, st, rl, g) {
						t.Fatalf("retry_on %q: not ResponseMatters, but %d (ratelimited %v, grpc %d) would retry", on, st, rl, g)
					}
					if d, b := s.OnResponse(st, rl, g, true); d != No || b != 0 || s.LastStats() != 0 {
						t.Fatalf("retry_on %q, %d: %v %v stats %b, want No", on, st, d, b, s.LastStats())
					}
				}
			}
		}
	}
	// Half of the sets have none of the eleven response conditions...
	if want := 1 << (len(retryOnNames) - 11); inert != want {
		t.Errorf("%d inert retry_on sets, want %d", inert, want)
	}
	// ...meshlet's default among them, until a retry is granted.
	p := Policy{RetryOn: DefaultOn, NumRetries: 1}.WithDefaults()
	var s State
	s.Init(&p, retryFixedRandom(0))
	if s.ResponseMatters() {
		t.Error("the default policy: ResponseMatters before any retry")
	}
	if d, _ := s.OnReset(ResetConnectionFailure, false, true); d != Yes || !s.ResponseMatters() {
		t.Errorf("after a granted retry (%v): ResponseMatters false", d)
	}
	if d, _ := s.OnResponse(200, false, -1, true); d != No || s.LastStats() != StatSuccess {
		t.Errorf("the retry's response: %v stats %b, want No and retry_success", d, s.LastStats())
	}
}
