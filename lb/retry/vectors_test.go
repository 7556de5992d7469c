package retry

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

	"github.com/meshlet-dev/meshlet/lb"
	"github.com/meshlet-dev/meshlet/lb/internal/vectortest"
)

// vectorRunners check the retry vectors. They read each vector field by
// field, so other vector files of the same schema work, and report an
// unknown field instead of ignoring it.
var vectorRunners = vectortest.Runners{
	"retry_backoff": runRetryBackoffVector,
	"retry_policy":  runRetryPolicyVector,
}

// TestEnvoyVectors runs the retry vectors of lb/testdata (or of the file
// named by MESHLET_LB_VECTORS), one subtest per vector.
func TestEnvoyVectors(t *testing.T) {
	vectortest.RunFile(t, vectortest.EnvoyFile("../testdata"), "lb/retry", vectorRunners)
}

// TestMeshletVectors runs the retry vectors of meshlet's own files.
func TestMeshletVectors(t *testing.T) {
	vectortest.RunMeshletFiles(t, "../testdata", "lb/retry", vectorRunners)
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

func runRetryBackoffVector(t *testing.T, v vectortest.Vector) {
	in := vectortest.Fields(t, v, v.Input, "input")
	exp := vectortest.Fields(t, v, v.Expected, "expected")

	var base, maxI, minI uint64
	hasBase := vectortest.Take(t, v, in, "base_interval_ms", &base)
	vectortest.Take(t, v, in, "max_interval_ms", &maxI)
	rateLimited := vectortest.Take(t, v, in, "min_interval_ms", &minI)
	var one uint64
	var list []uint64
	hasOne := vectortest.Take(t, v, in, "random", &one)
	hasList := vectortest.Take(t, v, in, "randoms", &list)
	vectortest.RejectRest(t, v, in, "input")
	if hasOne == hasList {
		t.Fatalf("vector %s: want exactly one of random, randoms", v.ID)
	}
	if !hasBase {
		base = uint64(DefaultBaseInterval / time.Millisecond)
	}
	newRand := func() lb.Random {
		if hasOne {
			return &retryVecRand{t: t, vals: []uint64{one}, repeat: true}
		}
		return &retryVecRand{t: t, vals: list}
	}
	if rateLimited {
		var seq []uint64
		vectortest.Take(t, v, exp, "sequence_ms", &seq)
		rnd := newRand()
		for i, want := range seq {
			retryVecCompareMs(t, "sequence_ms", i, RateLimitedBackoff(retryVecMs(minI), rnd), want)
		}
		vectortest.RejectRest(t, v, exp, "expected")
		return
	}

	// Intervals do not depend on the random numbers.
	var intervals []uint64
	if vectortest.Take(t, v, exp, "intervals_ms", &intervals) {
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
	vectortest.Take(t, v, exp, "sequence_ms", &seq)
	for i, want := range seq {
		retryVecCompareMs(t, "sequence_ms", i, b.Next(), want)
	}
	var afterReset []uint64
	if vectortest.Take(t, v, exp, "after_reset", &afterReset) {
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
			vectortest.Take(t, v, exp, r.key, &first)
			want = []uint64{first}
		} else {
			vectortest.Take(t, v, exp, r.key, &want)
		}
		b.ResetWithBase(retryVecMs(r.base))
		for i, w := range want {
			retryVecCompareMs(t, r.key, i, b.Next(), w)
		}
	}
	vectortest.RejectRest(t, v, exp, "expected")
}

// retryVecCase is one decision-table row, decoded field by field.
type retryVecCase struct {
	policy   Policy
	isReset  bool
	response UpstreamResponse
	reset    UpstreamReset
}

func decodeRetryCase(t *testing.T, v vectortest.Vector, i int, raw json.RawMessage) retryVecCase {
	t.Helper()
	f := vectortest.Fields(t, v, raw, fmt.Sprintf("cases[%d]", i))
	c := retryVecCase{policy: Policy{NumRetries: 1}.WithDefaults(), response: UpstreamResponse{GRPCStatus: -1}}
	var names []string
	if vectortest.Take(t, v, f, "retry_on", &names) {
		on, err := ParseOn(strings.Join(names, ","))
		if err != nil {
			t.Fatalf("vector %s: cases[%d].retry_on: %v", v.ID, i, err)
		}
		c.policy.RetryOn = on
	}
	vectortest.Take(t, v, f, "retriable_status_codes", &c.policy.RetriableStatusCodes)
	vectortest.Take(t, v, f, "num_retries", &c.policy.NumRetries)
	hasResp := vectortest.Take(t, v, f, "response_status", &c.response.Status)
	if vectortest.Take(t, v, f, "response_has_x_envoy_ratelimited", &c.response.EnvoyRateLimited) {
		hasResp = true
	}
	if vectortest.Take(t, v, f, "grpc_status", &c.response.GRPCStatus) {
		hasResp = true
	}
	var reason string
	if vectortest.Take(t, v, f, "reset_reason", &reason) {
		r, err := ParseResetReason(reason)
		if err != nil {
			t.Fatalf("vector %s: cases[%d].reset_reason: %v", v.ID, i, err)
		}
		c.isReset, c.reset.Reason = true, r
	}
	vectortest.Take(t, v, f, "upstream_request_started", &c.reset.RequestStarted)
	vectortest.RejectRest(t, v, f, fmt.Sprintf("cases[%d]", i))
	if hasResp == c.isReset {
		t.Fatalf("vector %s: cases[%d] must be either a response or a reset", v.ID, i)
	}
	return c
}

func runRetryPolicyVector(t *testing.T, v vectortest.Vector) {
	in := vectortest.Fields(t, v, v.Input, "input")
	exp := vectortest.Fields(t, v, v.Expected, "expected")
	var cases []json.RawMessage
	vectortest.Take(t, v, in, "cases", &cases)
	vectortest.RejectRest(t, v, in, "input")
	var want []bool
	if !vectortest.Take(t, v, exp, "would_retry", &want) {
		t.Errorf("vector %s: expected.would_retry missing", v.ID)
	}
	vectortest.RejectRest(t, v, exp, "expected")
	if len(want) != len(cases) {
		t.Fatalf("vector %s: %d cases but %d would_retry values", v.ID, len(cases), len(want))
	}
	for i, raw := range cases {
		c := decodeRetryCase(t, v, i, raw)
		var got bool
		var s State
		s.Init(&c.policy, &retryVecRand{t: t, vals: []uint64{0}, repeat: true})
		var d Decision
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
		// With a retry left and the breaker admitting, State agrees.
		wantD := No
		if want[i] {
			wantD = Yes
		}
		if c.policy.NumRetries > 0 && d != wantD {
			t.Errorf("would_retry[%d] (%s): State decision %v, want %v", i, raw, d, wantD)
		}
	}
}
