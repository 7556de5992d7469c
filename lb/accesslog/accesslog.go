// Package accesslog renders Envoy's default text access-log line from the
// fields of one request. It only formats bytes: writing them out is the
// data plane's job. It is pure, as lb is: no I/O, no goroutines, no clock.
package accesslog

import (
	"strconv"
	"time"

	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// DefaultFormat is Envoy's default text access-log format: one
// line, newline-terminated. Entry.AppendDefault renders it.
const DefaultFormat = `[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" ` +
	`%RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ` +
	`%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ` +
	`"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"` + "\n"

// startTimeLayout is %START_TIME%'s default: UTC, milliseconds truncated.
const startTimeLayout = "2006-01-02T15:04:05.000Z"

// Entry holds the fields of the default access-log line. An empty
// string renders "-", as Envoy renders an absent header or value (so an
// empty but present header, which Envoy would render empty, also gives "-").
type Entry struct {
	StartTime time.Time // zero renders "-"
	Method    string    // :method
	Path      string    // :path
	// OriginalPath is x-envoy-original-path, which wins over Path when set.
	OriginalPath string
	Protocol     string // "HTTP/1.1", "HTTP/2", "HTTP/3"; "" (TCP) renders "-"
	// ResponseCode 0 renders "0": Envoy prints 0, not "-", when no
	// response was sent (e.g. a downstream disconnect).
	ResponseCode  int
	Flags         respflag.Flags
	BytesReceived uint64
	BytesSent     uint64
	Duration      time.Duration // whole milliseconds; negative renders "-"
	// UpstreamServiceTime is x-envoy-upstream-service-time, which the
	// router adds to a proxied upstream response; negative means absent.
	// It also renders "-" when UpstreamHost is empty or ResponseCode is 0,
	// where no upstream response can exist, so a zero entry gets "-" while
	// a sub-millisecond upstream still gets "0" as in Envoy.
	UpstreamServiceTime time.Duration
	ForwardedFor        string // x-forwarded-for
	UserAgent           string // user-agent
	RequestID           string // x-request-id
	Authority           string // :authority
	UpstreamHost        string // upstream address, e.g. "10.0.2.1:80"
}

// AppendDefault appends e rendered in DefaultFormat, including the
// trailing newline, and allocates nothing beyond b's growth.
func (e *Entry) AppendDefault(b []byte) []byte {
	b = append(b, '[')
	if e.StartTime.IsZero() {
		b = append(b, '-')
	} else {
		b = e.StartTime.UTC().AppendFormat(b, startTimeLayout)
	}
	b = append(b, `] "`...)
	b = appendOrDash(b, e.Method)
	b = append(b, ' ')
	if e.OriginalPath != "" {
		b = append(b, e.OriginalPath...)
	} else {
		b = appendOrDash(b, e.Path)
	}
	b = append(b, ' ')
	b = appendOrDash(b, e.Protocol)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.ResponseCode), 10)
	b = append(b, ' ')
	b = e.Flags.AppendShort(b)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.BytesReceived, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, e.BytesSent, 10)
	b = append(b, ' ')
	b = appendMs(b, e.Duration)
	b = append(b, ' ')
	if e.UpstreamHost == "" || e.ResponseCode == 0 {
		b = append(b, '-')
	} else {
		b = appendMs(b, e.UpstreamServiceTime)
	}
	for _, s := range [...]string{e.ForwardedFor, e.UserAgent, e.RequestID, e.Authority, e.UpstreamHost} {
		b = append(b, ` "`...)
		b = appendOrDash(b, s)
		b = append(b, '"')
	}
	return append(b, '\n')
}

func appendOrDash(b []byte, s string) []byte {
	if s == "" {
		return append(b, '-')
	}
	return append(b, s...)
}

// appendMs writes d in whole milliseconds (truncated, as Envoy's
// duration_cast), or "-" when negative.
func appendMs(b []byte, d time.Duration) []byte {
	if d < 0 {
		return append(b, '-')
	}
	return strconv.AppendInt(b, d.Milliseconds(), 10)
}
