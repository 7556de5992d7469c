package lb

// The building blocks below are unexported: only the snapshot and the
// picker use them. The tests, and the conformance vectors in particular,
// drive them directly under these names.

type (
	EDF          = edfSched
	Ring         = hashRing
	RingEntry    = ringEntry
	Maglev       = maglevLookup
	ZoneInputs   = zoneInput
	ZoneBucket   = zoneBucket
	ZoneStats    = zoneStats
	Availability = availability
)

const (
	AvailHealthy  = availHealthy
	AvailDegraded = availDegraded
)

var (
	ComputeZoneRouting           = computeZoneRouting
	EjectionAllowed              = ejectionAllowed
	LeastRequestWeight           = leastRequestWeight
	LocalityEffectiveWeight      = localityEffectiveWeight
	SlowStartFactor              = slowStartFactor
	SuccessRateEjectionThreshold = successRateEjectionThreshold
	ChoosePriority               = choosePriority
	NewEDF                       = newEDF
	BuildMaglev                  = buildMaglev
	BuildRing                    = buildRing
)
