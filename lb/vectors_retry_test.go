package lb

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Runners for the retry, circuit-breaker and access-log vectors. They read
// each vector field by field, so other vector files of the same schema work,
// and report an unknown field instead of ignoring it.
func init() {
	vectorRunners["retry_backoff"] = runRetryBackoffVector
	vectorRunners["retry_policy"] = runRetryPolicyVector
	vectorRunners["retry_budget"] = runRetryBudgetVector
	vectorRunners["circuit_breaker"] = runCircuitBreakerVector
	vectorRunners["access_log"] = runAccessLogVector
}

// retryVecFields splits a JSON object into its fields.
func retryVecFields(t *testing.T, v vector, raw json.RawMessage, what string) map[string]json.RawMessage {
	t.Helper()
	m := map[string]json.RawMessage{}
	if len(raw) == 0 || string(raw) == "null" {
		return m
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("vector %s: %s is not an object: %v", v.ID, what, err)
	}
	return m
}

// retryVecTake decodes field key of m into dst and removes it, reporting
// whether it was present.
func retryVecTake(t *testing.T, v vector, m map[string]json.RawMessage, key string, dst any) bool {
	t.Helper()
	raw, ok := m[key]
	if !ok {
		return false
	}
	delete(m, key)
	if err := json.Unmarshal(raw, dst); err != nil {
		t.Fatalf("vector %s: field %s: %v", v.ID, key, err)
	}
	return true
}

// retryVecRejectRest fails on the fields no one consumed.
func retryVecRejectRest(t *testing.T, v vector, m map[string]json.RawMessage, what string) {
	t.Helper()
	for k := range m {
		t.Errorf("vector %s: unsupported %s field %q", v.ID, what, k)
	}
}

// retryVecRand replays the vector's random numbers: one value forever, or a
// list that must not run out.
type retryVecRand struct {
	t      *testing.T
	vals   []uint64
	repeat bool
	i      int
}

func (r *retryVecRand) Uint64() uint64 {
	if r.repeat {
		return r.vals[0]
	}
	if r.i >= len(r.vals) {
		r.t.Errorf("more random numbers drawn than the vector's %d", len(r.vals))
		return 0
	}
	r.i++
	return r.vals[r.i-1]
}

func retryVecMs(n uint64) time.Duration { return time.Duration(n) * time.Millisecond }

func retryVecCompareMs(t *testing.T, field string, i int, got time.Duration, want uint64) {
	t.Helper()
	if got != retryVecMs(want) {
		t.Errorf("%s[%d]: got %v, want %dms", field, i, got, want)
	}
}

var retryVecAfterResetKey = regexp.MustCompile(`^after_reset_(\d+)(_first)?$`)

func runRetryBackoffVector(t *testing.T, v vector) {
	in := retryVecFields(t, v, v.Input, "input")
	exp := retryVecFields(t, v, v.Expected, "expected")

	var base, maxI, minI uint64
	hasBase := retryVecTake(t, v, in, "base_interval_ms", &base)
	retryVecTake(t, v, in, "max_interval_ms", &maxI)
	rateLimited := retryVecTake(t, v, in, "min_interval_ms", &minI)
	var one uint64
	var list []uint64
	hasOne := retryVecTake(t, v, in, "random", &one)
	hasList := retryVecTake(t, v, in, "randoms", &list)
	retryVecRejectRest(t, v, in, "input")
	if hasOne == hasList {
		t.Fatalf("vector %s: want exactly one of random, randoms", v.ID)
	}
	if !hasBase {
		base = uint64(DefaultRetryBaseInterval / time.Millisecond)
	}
	newRand := func() Random {
		if hasOne {
			return &retryVecRand{t: t, vals: []uint64{one}, repeat: true}
		}
		return &retryVecRand{t: t, vals: list}
	}
	if rateLimited {
		var seq []uint64
		retryVecTake(t, v, exp, "sequence_ms", &seq)
		rnd := newRand()
		for i, want := range seq {
			retryVecCompareMs(t, "sequence_ms", i, RateLimitedBackoff(retryVecMs(minI), rnd), want)
		}
		retryVecRejectRest(t, v, exp, "expected")
		return
	}

	// Intervals do not depend on the random numbers.
	var intervals []uint64
	if retryVecTake(t, v, exp, "intervals_ms", &intervals) {
		b := NewJitteredBackoff(retryVecMs(base), retryVecMs(maxI), &retryVecRand{t: t, vals: []uint64{0}, repeat: true})
		for i, want := range intervals {
			retryVecCompareMs(t, "intervals_ms", i, b.NextInterval(), want)
			b.Next()
		}
	}

	// One timeline, as in Envoy's tests, drawing the randoms in order: the
	// sequence, then after_reset after Reset, then each after_reset_<base>
	// (ascending base) after ResetWithBase.
	b := NewJitteredBackoff(retryVecMs(base), retryVecMs(maxI), newRand())
	var seq []uint64
	retryVecTake(t, v, exp, "sequence_ms", &seq)
	for i, want := range seq {
		retryVecCompareMs(t, "sequence_ms", i, b.Next(), want)
	}
	var afterReset []uint64
	if retryVecTake(t, v, exp, "after_reset", &afterReset) {
		b.Reset()
		for i, want := range afterReset {
			retryVecCompareMs(t, "after_reset", i, b.Next(), want)
		}
	}
	type rebase struct {
		key   string
		base  uint64
		first bool
	}
	var rebases []rebase
	for key := range exp {
		if m := retryVecAfterResetKey.FindStringSubmatch(key); m != nil {
			n, _ := strconv.ParseUint(m[1], 10, 64)
			rebases = append(rebases, rebase{key, n, m[2] != ""})
		}
	}
	slices.SortFunc(rebases, func(a, b rebase) int { return cmp.Compare(a.base, b.base) })
	for _, r := range rebases {
		var want []uint64
		if r.first {
			var first uint64
			retryVecTake(t, v, exp, r.key, &first)
			want = []uint64{first}
		} else {
			retryVecTake(t, v, exp, r.key, &want)
		}
		b.ResetWithBase(retryVecMs(r.base))
		for i, w := range want {
			retryVecCompareMs(t, r.key, i, b.Next(), w)
		}
	}
	retryVecRejectRest(t, v, exp, "expected")
}

// retryVecCase is one decision-table row, decoded field by field.
type retryVecCase struct {
	policy   RetryPolicy
	isReset  bool
	response UpstreamResponse
	reset    UpstreamReset
}

func decodeRetryCase(t *testing.T, v vector, i int, raw json.RawMessage) retryVecCase {
	t.Helper()
	f := retryVecFields(t, v, raw, fmt.Sprintf("cases[%d]", i))
	c := retryVecCase{policy: RetryPolicy{NumRetries: 1}.WithDefaults(), response: UpstreamResponse{GRPCStatus: -1}}
	var names []string
	if retryVecTake(t, v, f, "retry_on", &names) {
		on, err := ParseRetryOn(strings.Join(names, ","))
		if err != nil {
			t.Fatalf("vector %s: cases[%d].retry_on: %v", v.ID, i, err)
		}
		c.policy.RetryOn = on
	}
	retryVecTake(t, v, f, "retriable_status_codes", &c.policy.RetriableStatusCodes)
	retryVecTake(t, v, f, "num_retries", &c.policy.NumRetries)
	hasResp := retryVecTake(t, v, f, "response_status", &c.response.Status)
	if retryVecTake(t, v, f, "response_has_x_envoy_ratelimited", &c.response.EnvoyRateLimited) {
		hasResp = true
	}
	if retryVecTake(t, v, f, "grpc_status", &c.response.GRPCStatus) {
		hasResp = true
	}
	var reason string
	if retryVecTake(t, v, f, "reset_reason", &reason) {
		r, err := ParseResetReason(reason)
		if err != nil {
			t.Fatalf("vector %s: cases[%d].reset_reason: %v", v.ID, i, err)
		}
		c.isReset, c.reset.Reason = true, r
	}
	retryVecTake(t, v, f, "upstream_request_started", &c.reset.RequestStarted)
	retryVecRejectRest(t, v, f, fmt.Sprintf("cases[%d]", i))
	if hasResp == c.isReset {
		t.Fatalf("vector %s: cases[%d] must be either a response or a reset", v.ID, i)
	}
	return c
}

func runRetryPolicyVector(t *testing.T, v vector) {
	in := retryVecFields(t, v, v.Input, "input")
	exp := retryVecFields(t, v, v.Expected, "expected")
	var cases []json.RawMessage
	retryVecTake(t, v, in, "cases", &cases)
	retryVecRejectRest(t, v, in, "input")
	var want []bool
	if !retryVecTake(t, v, exp, "would_retry", &want) {
		t.Errorf("vector %s: expected.would_retry missing", v.ID)
	}
	retryVecRejectRest(t, v, exp, "expected")
	if len(want) != len(cases) {
		t.Fatalf("vector %s: %d cases but %d would_retry values", v.ID, len(cases), len(want))
	}
	for i, raw := range cases {
		c := decodeRetryCase(t, v, i, raw)
		var got bool
		var s RetryState
		s.Init(&c.policy, &retryVecRand{t: t, vals: []uint64{0}, repeat: true})
		var d RetryDecision
		if c.isReset {
			got = WouldRetryOnReset(&c.policy, c.reset.Reason, c.reset.RequestStarted)
			d, _ = s.OnUpstreamReset(c.reset, true)
		} else {
			got = WouldRetryOnResponse(&c.policy, c.response.Status, c.response.EnvoyRateLimited, c.response.GRPCStatus)
			d, _ = s.OnUpstreamResponse(c.response, true)
		}
		if got != want[i] {
			t.Errorf("would_retry[%d] (%s): got %v, want %v", i, raw, got, want[i])
		}
		// With a retry left and the breaker admitting, RetryState agrees.
		wantD := RetryNo
		if want[i] {
			wantD = RetryYes
		}
		if c.policy.NumRetries > 0 && d != wantD {
			t.Errorf("would_retry[%d] (%s): RetryState decision %v, want %v", i, raw, d, wantD)
		}
	}
}

func runRetryBudgetVector(t *testing.T, v vector) {
	in := retryVecFields(t, v, v.Input, "input")
	exp := retryVecFields(t, v, v.Expected, "expected")
	var cases []json.RawMessage
	retryVecTake(t, v, in, "cases", &cases)
	retryVecRejectRest(t, v, in, "input")
	var want []uint64
	if !retryVecTake(t, v, exp, "max_retries", &want) {
		t.Errorf("vector %s: expected.max_retries missing", v.ID)
	}
	retryVecRejectRest(t, v, exp, "expected")
	if len(want) != len(cases) {
		t.Fatalf("vector %s: %d cases but %d max_retries values", v.ID, len(cases), len(want))
	}
	for i, raw := range cases {
		f := retryVecFields(t, v, raw, fmt.Sprintf("cases[%d]", i))
		b := DefaultRetryBudget()
		var active, pending uint64
		retryVecTake(t, v, f, "active", &active)
		retryVecTake(t, v, f, "pending", &pending)
		retryVecTake(t, v, f, "budget_percent", &b.BudgetPercent)
		retryVecTake(t, v, f, "min_retry_concurrency", &b.MinRetryConcurrency)
		retryVecRejectRest(t, v, f, fmt.Sprintf("cases[%d]", i))
		if got := b.MaxActiveRetries(active, pending); got != want[i] {
			t.Errorf("max_retries[%d]: got %d, want %d", i, got, want[i])
		}
		// The budget replaces max_retries: admitted iff below the limit.
		cb := DefaultCircuitBreakerThresholds()
		cb.RetryBudget = &b
		if want[i] > 0 && !cb.RetryAllowed(want[i]-1, active, pending) {
			t.Errorf("max_retries[%d]: RetryAllowed(%d) = false, want true", i, want[i]-1)
		}
		if cb.RetryAllowed(want[i], active, pending) {
			t.Errorf("max_retries[%d]: RetryAllowed(%d) = true, want false", i, want[i])
		}
	}
}

func runCircuitBreakerVector(t *testing.T, v vector) {
	in := retryVecFields(t, v, v.Input, "input")
	retryVecRejectRest(t, v, in, "input") // only defaults are defined
	exp := retryVecFields(t, v, v.Expected, "expected")
	cb := DefaultCircuitBreakerThresholds()
	limits := map[string]uint32{
		"max_connections":      cb.MaxConnections,
		"max_pending_requests": cb.MaxPendingRequests,
		"max_requests":         cb.MaxRequests,
		"max_retries":          cb.MaxRetries,
		"max_connection_pools": cb.MaxConnectionPools,
	}
	for key, raw := range exp {
		if key == "retry_budget" {
			continue
		}
		got, ok := limits[key]
		if !ok {
			continue // reported below
		}
		delete(exp, key)
		var unlimited string
		if json.Unmarshal(raw, &unlimited) == nil {
			if unlimited != "unlimited" || key != "max_connection_pools" {
				t.Errorf("%s: got %d, want %q", key, got, unlimited)
			} else if got != 0 || !cb.ConnectionPoolAllowed(1<<40) {
				t.Errorf("%s: got %d, want unlimited (0)", key, got)
			}
			continue
		}
		var want uint32
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("vector %s: field %s: %v", v.ID, key, err)
		}
		if got != want {
			t.Errorf("%s: got %d, want %d", key, got, want)
		}
	}
	if budget, ok := exp["retry_budget"]; ok {
		delete(exp, "retry_budget")
		f := retryVecFields(t, v, budget, "retry_budget")
		got := DefaultRetryBudget()
		var pct float64
		var minC uint32
		if retryVecTake(t, v, f, "budget_percent", &pct) && got.BudgetPercent != pct {
			t.Errorf("retry_budget.budget_percent: got %v, want %v", got.BudgetPercent, pct)
		}
		if retryVecTake(t, v, f, "min_retry_concurrency", &minC) && got.MinRetryConcurrency != minC {
			t.Errorf("retry_budget.min_retry_concurrency: got %d, want %d", got.MinRetryConcurrency, minC)
		}
		retryVecRejectRest(t, v, f, "retry_budget")
		if cb.RetryBudget != nil {
			t.Errorf("default thresholds carry a retry budget; Envoy configures none")
		}
	}
	retryVecRejectRest(t, v, exp, "expected")
}

// retryVecDefaultLine matches one line of DefaultAccessLogFormat.
var retryVecDefaultLine = regexp.MustCompile(`^\[(\S+)\] "(\S+) (\S+) (\S+)" (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)"\n?$`)

// accessLogEntryFromLine builds the AccessLogEntry a rendered line came from.
func accessLogEntryFromLine(line string) (AccessLogEntry, error) {
	m := retryVecDefaultLine.FindStringSubmatch(line)
	if m == nil {
		return AccessLogEntry{}, fmt.Errorf("line does not match the default format: %q", line)
	}
	str := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	var firstErr error
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return n
	}
	dur := func(s string) time.Duration {
		if s == "-" {
			return -1
		}
		return retryVecMs(num(s))
	}
	var e AccessLogEntry
	if m[1] != "-" {
		t, err := time.Parse(startTimeLayout, m[1])
		if err != nil {
			return e, err
		}
		e.StartTime = t
	}
	e.Method, e.Path, e.Protocol = str(m[2]), str(m[3]), str(m[4])
	e.ResponseCode = int(num(m[5]))
	flags, err := ParseResponseFlags(m[6])
	if err != nil {
		return e, err
	}
	e.Flags = flags
	e.BytesReceived, e.BytesSent = num(m[7]), num(m[8])
	e.Duration, e.UpstreamServiceTime = dur(m[9]), dur(m[10])
	e.ForwardedFor, e.UserAgent, e.RequestID = str(m[11]), str(m[12]), str(m[13])
	e.Authority, e.UpstreamHost = str(m[14]), str(m[15])
	return e, firstErr
}

func runAccessLogVector(t *testing.T, v vector) {
	in := retryVecFields(t, v, v.Input, "input")
	retryVecRejectRest(t, v, in, "input")
	exp := retryVecFields(t, v, v.Expected, "expected")

	var flags []struct{ Short, Long string }
	if retryVecTake(t, v, exp, "flags", &flags) {
		byLong := map[string]ResponseFlags{}
		for _, n := range ResponseFlagNames() {
			byLong[n.Long] = n.Flag
		}
		seen := map[string]bool{}
		for _, w := range flags {
			seen[w.Short] = true
			f, err := ParseResponseFlag(w.Short)
			if err != nil {
				t.Errorf("flags %s: %v", w.Short, err)
				continue
			}
			if got := f.Short(); got != w.Short {
				t.Errorf("flags %s: Short() got %q, want %q", w.Short, got, w.Short)
			}
			if got := f.Long(); got != w.Long {
				t.Errorf("flags %s: Long() got %q, want %q", w.Short, got, w.Long)
			}
			if got, ok := byLong[w.Long]; !ok || got != f {
				t.Errorf("flags %s: long name %q maps to %v, want %v", w.Short, w.Long, got, f)
			}
		}
		for _, n := range ResponseFlagNames() {
			if !seen[n.Short] {
				t.Errorf("flags: table has %s/%s, vector does not", n.Short, n.Long)
			}
		}
	}
	var none string
	if retryVecTake(t, v, exp, "none", &none) {
		if got := ResponseFlags(0).Short(); got != none {
			t.Errorf("none: Short() got %q, want %q", got, none)
		}
		if got := ResponseFlags(0).Long(); got != none {
			t.Errorf("none: Long() got %q, want %q", got, none)
		}
	}
	var sep string
	if retryVecTake(t, v, exp, "separator", &sep) {
		a, b := ResponseFlagNames()[0], ResponseFlagNames()[1]
		if got, want := (a.Flag | b.Flag).Short(), a.Short+sep+b.Short; got != want {
			t.Errorf("separator: Short() got %q, want %q", got, want)
		}
		if got, want := (a.Flag | b.Flag).Long(), a.Long+sep+b.Long; got != want {
			t.Errorf("separator: Long() got %q, want %q", got, want)
		}
	}
	var format string
	if retryVecTake(t, v, exp, "format", &format) && format != DefaultAccessLogFormat {
		t.Errorf("format: got %q, want %q", DefaultAccessLogFormat, format)
	}
	var line string
	if retryVecTake(t, v, exp, "example_line", &line) {
		e, err := accessLogEntryFromLine(line)
		if err != nil {
			t.Fatalf("example_line: %v", err)
		}
		want := strings.TrimSuffix(line, "\n") + "\n"
		if got := string(e.AppendDefault(nil)); got != want {
			t.Errorf("example_line: got %q, want %q", got, want)
		}
	}
	retryVecRejectRest(t, v, exp, "expected")
}
