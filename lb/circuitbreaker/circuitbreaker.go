// Package circuitbreaker holds Envoy's circuit-breaker thresholds of one
// routing priority (connections, pending requests, requests, retries,
// connection pools) with their defaults, and the retry budget that can
// replace the retry limit. The data plane keeps the counters; this package
// only says whether one more may start. It is pure, as lb is: no I/O, no
// goroutines, no clock.
package circuitbreaker

import "math"

// Thresholds are one routing priority's circuit-breaker limits.
// A resource is admitted while its current count is below the limit.
type Thresholds struct {
	MaxConnections, MaxPendingRequests, MaxRequests, MaxRetries uint32
	// MaxConnectionPools limits concurrent connection pools; 0 = unlimited
	// (Envoy's default).
	MaxConnectionPools uint32
	// RetryBudget, when set, replaces MaxRetries.
	RetryBudget *RetryBudget
}

// RetryBudget limits active retries to a share of the active and pending
// requests, with a floor.
type RetryBudget struct {
	BudgetPercent       float64 // percent of active + pending requests
	MinRetryConcurrency uint32  // floor on the limit
}

// DefaultThresholds returns Envoy's defaults: 1024 connections,
// pending requests and requests, 3 retries, unlimited pools, no budget.
func DefaultThresholds() Thresholds {
	return Thresholds{
		MaxConnections:     1024,
		MaxPendingRequests: 1024,
		MaxRequests:        1024,
		MaxRetries:         3,
	}
}

// DefaultRetryBudget returns the budget's field defaults: 20% and 3.
func DefaultRetryBudget() RetryBudget {
	return RetryBudget{BudgetPercent: 20, MinRetryConcurrency: 3}
}

// MaxActiveRetries returns max(budget% of active+pending, min concurrency),
// computed in float64 and truncated exactly as Envoy does.
func (b RetryBudget) MaxActiveRetries(activeRequests, pendingRequests uint64) uint64 {
	v := b.BudgetPercent / 100 * float64(activeRequests+pendingRequests)
	var n uint64
	switch {
	case v >= math.MaxUint64:
		n = math.MaxUint64
	case v > 0: // false for NaN and negatives, which admit nothing extra
		n = uint64(v)
	}
	return max(n, uint64(b.MinRetryConcurrency))
}

// MaxActiveRetries returns the current retry limit: the budget's when one is
// configured, MaxRetries otherwise.
func (c Thresholds) MaxActiveRetries(activeRequests, pendingRequests uint64) uint64 {
	if c.RetryBudget != nil {
		return c.RetryBudget.MaxActiveRetries(activeRequests, pendingRequests)
	}
	return uint64(c.MaxRetries)
}

// RetryAllowed reports whether one more retry may start (activeRetries is
// below the limit). Its result is the cbAllows argument of retry.State.
func (c Thresholds) RetryAllowed(activeRetries, activeRequests, pendingRequests uint64) bool {
	return activeRetries < c.MaxActiveRetries(activeRequests, pendingRequests)
}

// ConnectionAllowed reports whether one more upstream connection may open.
func (c Thresholds) ConnectionAllowed(active uint64) bool {
	return active < uint64(c.MaxConnections)
}

// PendingRequestAllowed reports whether one more request may queue for a
// connection.
func (c Thresholds) PendingRequestAllowed(pending uint64) bool {
	return pending < uint64(c.MaxPendingRequests)
}

// RequestAllowed reports whether one more request may be active.
func (c Thresholds) RequestAllowed(active uint64) bool {
	return active < uint64(c.MaxRequests)
}

// ConnectionPoolAllowed reports whether one more connection pool may be
// created; always true when MaxConnectionPools is 0.
func (c Thresholds) ConnectionPoolAllowed(pools uint64) bool {
	return c.MaxConnectionPools == 0 || pools < uint64(c.MaxConnectionPools)
}
