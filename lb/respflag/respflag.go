// Package respflag holds Envoy's response flags (%RESPONSE_FLAGS%): the
// bit set a request's outcome carries into access logs and stats, its
// short and long spellings, and parsing of a rendered value. It is pure, as
// lb is: no I/O, no goroutines, no clock.
package respflag

import (
	"fmt"
	"strings"
)

// ResponseFlags is a bit set of Envoy response flags (%RESPONSE_FLAGS%). Bit
// i is Envoy's response-flag number i, so the values equal the bit masks of
// Envoy's older ResponseFlag enum.
//
// Rendering follows that older fixed table order (LH, UH, UT, LR, UR, UF,
// ...), not the order flags were set as current Envoy does: a bit set does
// not remember insertion order. Single flags, the common case, render the
// same either way.
type ResponseFlags uint64

// The response flags, in table (bit) order.
const (
	FlagLH    ResponseFlags = 1 << iota // FailedLocalHealthCheck
	FlagUH                              // NoHealthyUpstream
	FlagUT                              // UpstreamRequestTimeout
	FlagLR                              // LocalReset
	FlagUR                              // UpstreamRemoteReset
	FlagUF                              // UpstreamConnectionFailure
	FlagUC                              // UpstreamConnectionTermination
	FlagUO                              // UpstreamOverflow
	FlagNR                              // NoRouteFound
	FlagDI                              // DelayInjected
	FlagFI                              // FaultInjected
	FlagRL                              // RateLimited
	FlagUAEX                            // UnauthorizedExternalService
	FlagRLSE                            // RateLimitServiceError
	FlagDC                              // DownstreamConnectionTermination
	FlagURX                             // UpstreamRetryLimitExceeded
	FlagSI                              // StreamIdleTimeout
	FlagIH                              // InvalidEnvoyRequestHeaders
	FlagDPE                             // DownstreamProtocolError
	FlagUMSDR                           // UpstreamMaxStreamDurationReached
	FlagRFCF                            // ResponseFromCacheFilter
	FlagNFCF                            // NoFilterConfigFound
	FlagDT                              // DurationTimeout
	FlagUPE                             // UpstreamProtocolError
	FlagNC                              // NoClusterFound
	FlagOM                              // OverloadManagerTerminated
	FlagDF                              // DnsResolutionFailed
	FlagDO                              // DropOverload
	FlagDR                              // DownstreamRemoteReset
	FlagUDO                             // UnconditionalDropOverload
)

// ResponseFlagName is one row of the response-flag table.
type ResponseFlagName struct {
	Flag  ResponseFlags
	Short string // %RESPONSE_FLAGS% spelling
	Long  string // %RESPONSE_FLAGS_LONG% spelling
}

// responseFlagTable holds bit i at index i.
var responseFlagTable = [...]ResponseFlagName{
	{FlagLH, "LH", "FailedLocalHealthCheck"},
	{FlagUH, "UH", "NoHealthyUpstream"},
	{FlagUT, "UT", "UpstreamRequestTimeout"},
	{FlagLR, "LR", "LocalReset"},
	{FlagUR, "UR", "UpstreamRemoteReset"},
	{FlagUF, "UF", "UpstreamConnectionFailure"},
	{FlagUC, "UC", "UpstreamConnectionTermination"},
	{FlagUO, "UO", "UpstreamOverflow"},
	{FlagNR, "NR", "NoRouteFound"},
	{FlagDI, "DI", "DelayInjected"},
	{FlagFI, "FI", "FaultInjected"},
	{FlagRL, "RL", "RateLimited"},
	{FlagUAEX, "UAEX", "UnauthorizedExternalService"},
	{FlagRLSE, "RLSE", "RateLimitServiceError"},
	{FlagDC, "DC", "DownstreamConnectionTermination"},
	{FlagURX, "URX", "UpstreamRetryLimitExceeded"},
	{FlagSI, "SI", "StreamIdleTimeout"},
	{FlagIH, "IH", "InvalidEnvoyRequestHeaders"},
	{FlagDPE, "DPE", "DownstreamProtocolError"},
	{FlagUMSDR, "UMSDR", "UpstreamMaxStreamDurationReached"},
	{FlagRFCF, "RFCF", "ResponseFromCacheFilter"},
	{FlagNFCF, "NFCF", "NoFilterConfigFound"},
	{FlagDT, "DT", "DurationTimeout"},
	{FlagUPE, "UPE", "UpstreamProtocolError"},
	{FlagNC, "NC", "NoClusterFound"},
	{FlagOM, "OM", "OverloadManagerTerminated"},
	{FlagDF, "DF", "DnsResolutionFailed"},
	{FlagDO, "DO", "DropOverload"},
	{FlagDR, "DR", "DownstreamRemoteReset"},
	{FlagUDO, "UDO", "UnconditionalDropOverload"},
}

// ResponseFlagNames returns a copy of the flag table in rendering order.
func ResponseFlagNames() []ResponseFlagName {
	return append([]ResponseFlagName(nil), responseFlagTable[:]...)
}

// Short renders the flags as %RESPONSE_FLAGS% does: short codes joined by
// "," in table order, "-" when none.
func (f ResponseFlags) Short() string { return string(f.AppendShort(nil)) }

// Long renders the flags as %RESPONSE_FLAGS_LONG% does.
func (f ResponseFlags) Long() string { return string(f.AppendLong(nil)) }

// String returns Short.
func (f ResponseFlags) String() string { return f.Short() }

// AppendShort appends Short's rendering to b without allocating beyond b's
// growth.
func (f ResponseFlags) AppendShort(b []byte) []byte { return f.appendNames(b, false) }

// AppendLong appends Long's rendering to b.
func (f ResponseFlags) AppendLong(b []byte) []byte { return f.appendNames(b, true) }

// appendNames writes the known flags; bits beyond the table are ignored, so
// a set holding only those renders "-" too.
func (f ResponseFlags) appendNames(b []byte, long bool) []byte {
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

// ParseResponseFlag returns the flag with this short code ("UF").
func ParseResponseFlag(short string) (ResponseFlags, error) {
	for i := range responseFlagTable {
		if responseFlagTable[i].Short == short {
			return responseFlagTable[i].Flag, nil
		}
	}
	return 0, fmt.Errorf("respflag: unknown response flag %q", short)
}

// ParseResponseFlags parses a rendered %RESPONSE_FLAGS% value: "-" or short
// codes joined by ",".
func ParseResponseFlags(s string) (ResponseFlags, error) {
	if s == "-" {
		return 0, nil
	}
	var f ResponseFlags
	for s != "" {
		tok, rest, _ := strings.Cut(s, ",")
		s = rest
		bit, err := ParseResponseFlag(tok)
		if err != nil {
			return 0, err
		}
		f |= bit
	}
	return f, nil
}
