package lb

// Random is the source of randomness the engine draws from. Each worker owns
// one; tests inject fixed sequences. Implementations need not be safe for
// concurrent use.
type Random interface {
	// Uint64 returns the next 64-bit random number.
	Uint64() uint64
}

// HostID identifies a host within one cluster for as long as the host exists,
// across snapshot rebuilds. State kept outside snapshots (request counts,
// outlier and health-check state) is keyed by it.
type HostID uint32
