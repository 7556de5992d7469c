// Package lb is meshlet's upstream load-balancing engine. It follows Envoy's
// semantics exactly where Envoy defines the behaviour: priority load with the
// overprovisioning factor, the panic threshold, zone-aware routing (direct and
// residual), locality-weighted balancing, the per-host policies (weighted round
// robin, random, least request, ring hash, Maglev), outlier detection, active
// health-check state and the retry priority plugin the picker consults.
//
// The request-level pieces live in packages of their own, pure like this
// one: lb/retry (retry decisions and back-off), lb/circuitbreaker
// (thresholds and the retry budget), lb/respflag (Envoy's response flags)
// and lb/accesslog (the access-log line).
//
// The package is pure: it does no I/O, starts no goroutines, and reads no
// clock or random source it is not given. A Snapshot is an immutable view of a
// cluster built on one goroutine whenever hosts, health or outlier state
// change; workers pick from it lock-free through a Picker that holds their own
// mutable state (round-robin cursors, scheduler copies, request counts).
package lb
