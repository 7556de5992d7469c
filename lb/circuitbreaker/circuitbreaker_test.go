package circuitbreaker

import (
	"math"
	"testing"
)

func TestRetryBudgetMax(t *testing.T) {
	tests := []struct {
		b               RetryBudget
		active, pending uint64
		want            uint64
	}{
		{DefaultRetryBudget(), 0, 0, 3},
		{DefaultRetryBudget(), 100, 0, 20},
		{DefaultRetryBudget(), 17, 0, 3},
		{DefaultRetryBudget(), 24, 0, 4}, // 4.8 truncates
		// Envoy computes percent/100*count in double and truncates.
		{RetryBudget{BudgetPercent: 29, MinRetryConcurrency: 0}, 100, 0, 28}, // 28.999...
		{RetryBudget{BudgetPercent: 57, MinRetryConcurrency: 0}, 100, 0, 56},
		{RetryBudget{BudgetPercent: 35, MinRetryConcurrency: 0}, 100, 80, 62},
		{RetryBudget{BudgetPercent: 0, MinRetryConcurrency: 0}, 1000, 0, 0},
		{RetryBudget{BudgetPercent: -5, MinRetryConcurrency: 1}, 1000, 0, 1},
		{RetryBudget{BudgetPercent: math.NaN(), MinRetryConcurrency: 2}, 1000, 0, 2},
		{RetryBudget{BudgetPercent: 1e30, MinRetryConcurrency: 2}, 1000, 0, math.MaxUint64},
	}
	for _, tt := range tests {
		if got := tt.b.MaxActiveRetries(tt.active, tt.pending); got != tt.want {
			t.Errorf("%+v.MaxActiveRetries(%d, %d) = %d, want %d", tt.b, tt.active, tt.pending, got, tt.want)
		}
	}
}

func TestCircuitBreakerThresholds(t *testing.T) {
	c := DefaultThresholds()
	if c.MaxConnections != 1024 || c.MaxPendingRequests != 1024 || c.MaxRequests != 1024 || c.MaxRetries != 3 || c.MaxConnectionPools != 0 || c.RetryBudget != nil {
		t.Fatalf("defaults: %+v", c)
	}
	type check struct {
		name      string
		got, want bool
	}
	checks := []check{
		{"connection 1023", c.ConnectionAllowed(1023), true},
		{"connection 1024", c.ConnectionAllowed(1024), false},
		{"pending 1023", c.PendingRequestAllowed(1023), true},
		{"pending 1024", c.PendingRequestAllowed(1024), false},
		{"request 1023", c.RequestAllowed(1023), true},
		{"request 1024", c.RequestAllowed(1024), false},
		{"pools unlimited", c.ConnectionPoolAllowed(math.MaxUint64 - 1), true},
		{"retry 2", c.RetryAllowed(2, 0, 0), true},
		{"retry 3", c.RetryAllowed(3, 0, 0), false},
	}
	c.MaxConnectionPools = 2
	checks = append(checks, check{"pool 1 of 2", c.ConnectionPoolAllowed(1), true}, check{"pool 2 of 2", c.ConnectionPoolAllowed(2), false})
	for _, ck := range checks {
		if ck.got != ck.want {
			t.Errorf("%s: got %v, want %v", ck.name, ck.got, ck.want)
		}
	}
}
