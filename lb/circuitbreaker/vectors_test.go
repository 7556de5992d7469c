package circuitbreaker

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/meshlet-dev/meshlet/lb/internal/vectortest"
)

// vectorRunners check the circuitbreaker vectors. They read each vector field by
// field, so other vector files of the same schema work, and report an
// unknown field instead of ignoring it.
var vectorRunners = vectortest.Runners{
	"retry_budget":    runRetryBudgetVector,
	"circuit_breaker": runCircuitBreakerVector,
}

// TestEnvoyVectors runs the circuitbreaker vectors of lb/testdata (or of the file
// named by MESHLET_LB_VECTORS), one subtest per vector.
func TestEnvoyVectors(t *testing.T) {
	vectortest.RunFile(t, vectortest.EnvoyFile("../testdata"), "lb/circuitbreaker", vectorRunners)
}

// TestMeshletVectors runs the circuitbreaker vectors of meshlet's own files.
func TestMeshletVectors(t *testing.T) {
	vectortest.RunMeshletFiles(t, "../testdata", "lb/circuitbreaker", vectorRunners)
}

func runRetryBudgetVector(t *testing.T, v vectortest.Vector) {
	in := vectortest.Fields(t, v, v.Input, "input")
	exp := vectortest.Fields(t, v, v.Expected, "expected")
	var cases []json.RawMessage
	vectortest.Take(t, v, in, "cases", &cases)
	vectortest.RejectRest(t, v, in, "input")
	var want []uint64
	if !vectortest.Take(t, v, exp, "max_retries", &want) {
		t.Errorf("vector %s: expected.max_retries missing", v.ID)
	}
	vectortest.RejectRest(t, v, exp, "expected")
	if len(want) != len(cases) {
		t.Fatalf("vector %s: %d cases but %d max_retries values", v.ID, len(cases), len(want))
	}
	for i, raw := range cases {
		f := vectortest.Fields(t, v, raw, fmt.Sprintf("cases[%d]", i))
		b := DefaultRetryBudget()
		var active, pending uint64
		vectortest.Take(t, v, f, "active", &active)
		vectortest.Take(t, v, f, "pending", &pending)
		vectortest.Take(t, v, f, "budget_percent", &b.BudgetPercent)
		vectortest.Take(t, v, f, "min_retry_concurrency", &b.MinRetryConcurrency)
		vectortest.RejectRest(t, v, f, fmt.Sprintf("cases[%d]", i))
		if got := b.MaxActiveRetries(active, pending); got != want[i] {
			t.Errorf("max_retries[%d]: got %d, want %d", i, got, want[i])
		}
		// The budget replaces max_retries: admitted iff below the limit.
		cb := DefaultThresholds()
		cb.RetryBudget = &b
		if want[i] > 0 && !cb.RetryAllowed(want[i]-1, active, pending) {
			t.Errorf("max_retries[%d]: RetryAllowed(%d) = false, want true", i, want[i]-1)
		}
		if cb.RetryAllowed(want[i], active, pending) {
			t.Errorf("max_retries[%d]: RetryAllowed(%d) = true, want false", i, want[i])
		}
	}
}

func runCircuitBreakerVector(t *testing.T, v vectortest.Vector) {
	in := vectortest.Fields(t, v, v.Input, "input")
	vectortest.RejectRest(t, v, in, "input") // only defaults are defined
	exp := vectortest.Fields(t, v, v.Expected, "expected")
	cb := DefaultThresholds()
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
		f := vectortest.Fields(t, v, budget, "retry_budget")
		got := DefaultRetryBudget()
		var pct float64
		var minC uint32
		if vectortest.Take(t, v, f, "budget_percent", &pct) && got.BudgetPercent != pct {
			t.Errorf("retry_budget.budget_percent: got %v, want %v", got.BudgetPercent, pct)
		}
		if vectortest.Take(t, v, f, "min_retry_concurrency", &minC) && got.MinRetryConcurrency != minC {
			t.Errorf("retry_budget.min_retry_concurrency: got %d, want %d", got.MinRetryConcurrency, minC)
		}
		vectortest.RejectRest(t, v, f, "retry_budget")
		if cb.RetryBudget != nil {
			t.Errorf("default thresholds carry a retry budget; Envoy configures none")
		}
	}
	vectortest.RejectRest(t, v, exp, "expected")
}
