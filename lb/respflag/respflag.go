// Package respflag holds Envoy's response flags (%RESPONSE_FLAGS%): the
// bit set a request's outcome carries into access logs and stats, its
// short and long spellings, and parsing of a rendered value. It is pure, as
// lb is: no I/O, no goroutines, no clock.
package respflag

import (
	"fmt"
	"strings"
)

// Flags is a bit set of Envoy response flags (%RESPONSE_FLAGS%). Bit
// i is Envoy's response-flag number i, so the values equal the bit masks of
// Envoy's older ResponseFlag enum.
//
// Rendering follows that older fixed table order (LH, UH, UT, LR, UR, UF,
// ...), not the order flags were set as current Envoy does: a bit set does
// not remember insertion order. Single flags, the common case, render the
// same either way.
type Flags uint64

// The response flags, in table (bit) order.
const (
	LH    Flags = 1 << iota // FailedLocalHealthCheck
	UH                      // NoHealthyUpstream
	UT                      // UpstreamRequestTimeout
	LR                      // LocalReset
	UR                      // UpstreamRemoteReset
	UF                      // UpstreamConnectionFailure
	UC                      // UpstreamConnectionTermination
	UO                      // UpstreamOverflow
	NR                      // NoRouteFound
	DI                      // DelayInjected
	FI                      // FaultInjected
	RL                      // RateLimited
	UAEX                    // UnauthorizedExternalService
	RLSE                    // RateLimitServiceError
	DC                      // DownstreamConnectionTermination
	URX                     // UpstreamRetryLimitExceeded
	SI                      // StreamIdleTimeout
	IH                      // InvalidEnvoyRequestHeaders
	DPE                     // DownstreamProtocolError
	UMSDR                   // UpstreamMaxStreamDurationReached
	RFCF                    // ResponseFromCacheFilter
	NFCF                    // NoFilterConfigFound
	DT                      // DurationTimeout
	UPE                     // UpstreamProtocolError
	NC                      // NoClusterFound
	OM                      // OverloadManagerTerminated
	DF                      // DnsResolutionFailed
	DO                      // DropOverload
	DR                      // DownstreamRemoteReset
	UDO                     // UnconditionalDropOverload
)

// Name is one row of the response-flag table.
type Name struct {
	Flag  Flags
	Short string // %RESPONSE_FLAGS% spelling
	Long  string // %RESPONSE_FLAGS_LONG% spelling
}

// responseFlagTable holds bit i at index i.
var responseFlagTable = [...]Name{
	{LH, "LH", "FailedLocalHealthCheck"},
	{UH, "UH", "NoHealthyUpstream"},
	{UT, "UT", "UpstreamRequestTimeout"},
	{LR, "LR", "LocalReset"},
	{UR, "UR", "UpstreamRemoteReset"},
	{UF, "UF", "UpstreamConnectionFailure"},
	{UC, "UC", "UpstreamConnectionTermination"},
	{UO, "UO", "UpstreamOverflow"},
	{NR, "NR", "NoRouteFound"},
	{DI, "DI", "DelayInjected"},
	{FI, "FI", "FaultInjected"},
	{RL, "RL", "RateLimited"},
	{UAEX, "UAEX", "UnauthorizedExternalService"},
	{RLSE, "RLSE", "RateLimitServiceError"},
	{DC, "DC", "DownstreamConnectionTermination"},
	{URX, "URX", "UpstreamRetryLimitExceeded"},
	{SI, "SI", "StreamIdleTimeout"},
	{IH, "IH", "InvalidEnvoyRequestHeaders"},
	{DPE, "DPE", "DownstreamProtocolError"},
	{UMSDR, "UMSDR", "UpstreamMaxStreamDurationReached"},
	{RFCF, "RFCF", "ResponseFromCacheFilter"},
	{NFCF, "NFCF", "NoFilterConfigFound"},
	{DT, "DT", "DurationTimeout"},
	{UPE, "UPE", "UpstreamProtocolError"},
	{NC, "NC", "NoClusterFound"},
	{OM, "OM", "OverloadManagerTerminated"},
	{DF, "DF", "DnsResolutionFailed"},
	{DO, "DO", "DropOverload"},
	{DR, "DR", "DownstreamRemoteReset"},
	{UDO, "UDO", "UnconditionalDropOverload"},
}

// Names returns a copy of the flag table in rendering order.
func Names() []Name {
	return append([]Name(nil), responseFlagTable[:]...)
}

// Short renders the flags as %RESPONSE_FLAGS% does: short codes joined by
// "," in table order, "-" when none.
func (f Flags) Short() string { return string(f.AppendShort(nil)) }

// Long renders the flags as %RESPONSE_FLAGS_LONG% does.
func (f Flags) Long() string { return string(f.AppendLong(nil)) }

// String returns Short.
func (f Flags) String() string { return f.Short() }

// AppendShort appends Short's rendering to b without allocating beyond b's
// growth.
func (f Flags) AppendShort(b []byte) []byte { return f.appendNames(b, false) }

// AppendLong appends Long's rendering to b.
func (f Flags) AppendLong(b []byte) []byte { return f.appendNames(b, true) }

// appendNames writes the known flags; bits beyond the table are ignored, so
// a set holding only those renders "-" too.
func (f Flags) appendNames(b []byte, long bool) []byte {
	n := len(b)
	for i := range responseFlagTable {
		e := &responseFlagTable[i]
		if f&e.Flag == 0 {
			continue
		}
		if len(b) > n {
			b = append(b, ',')
		}
		if long {
			b = append(b, e.Long...)
		} else {
			b = append(b, e.Short...)
		}
	}
	if len(b) == n {
		b = append(b, '-')
	}
	return b
}

// Lookup returns the flag with this short code ("UF").
func Lookup(short string) (Flags, error) {
	for i := range responseFlagTable {
		if responseFlagTable[i].Short == short {
			return responseFlagTable[i].Flag, nil
		}
	}
	return 0, fmt.Errorf("respflag: unknown response flag %q", short)
}

// Parse parses a rendered %RESPONSE_FLAGS% value: "-" or short
// codes joined by ",".
func Parse(s string) (Flags, error) {
	if s == "-" {
		return 0, nil
	}
	var f Flags
	for s != "" {
		tok, rest, _ := strings.Cut(s, ",")
		s = rest
		bit, err := Lookup(tok)
		if err != nil {
			return 0, err
		}
		f |= bit
	}
	return f, nil
}
