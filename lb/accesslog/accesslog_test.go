package accesslog

import (
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// accessLogDocEntry is the example of Envoy's access-log documentation.
func accessLogDocEntry() Entry {
	return Entry{
		StartTime:           time.Date(2016, 4, 15, 20, 17, 0, 310_000_000, time.UTC),
		Method:              "POST",
		Path:                "/api/v1/locations",
		Protocol:            "HTTP/2",
		ResponseCode:        204,
		BytesReceived:       154,
		BytesSent:           0,
		Duration:            226 * time.Millisecond,
		UpstreamServiceTime: 100 * time.Millisecond,
		ForwardedFor:        "10.0.35.28",
		UserAgent:           "nsq2http",
		RequestID:           "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2",
		Authority:           "locations",
		UpstreamHost:        "tcp://10.0.2.1:80",
	}
}

func TestAppendDefault(t *testing.T) {
	pst := time.FixedZone("PST", -8*3600)
	tests := []struct {
		name string
		edit func(e *Entry)
		want string
	}{
		{"doc example", func(*Entry) {},
			`[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"` + "\n"},
		{"zero entry", func(e *Entry) { *e = Entry{} },
			`[-] "- - -" 0 - 0 0 0 - "-" "-" "-" "-" "-"` + "\n"},
		{"no response, retries exhausted", func(e *Entry) {
			e.ResponseCode, e.Flags, e.UpstreamServiceTime = 0, respflag.URX|respflag.UF, 0
		}, `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 0 UF,URX 154 0 226 - "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"` + "\n"},
		{"local reply without upstream", func(e *Entry) {
			e.ResponseCode, e.Flags, e.UpstreamHost, e.UpstreamServiceTime = 503, respflag.UH, "", 0
		}, `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 503 UH 154 0 226 - "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "-"` + "\n"},
		{"sub-millisecond upstream", func(e *Entry) { e.UpstreamServiceTime = 400 * time.Microsecond },
			`[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 0 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"` + "\n"},
		{"upstream timeout local reply", func(e *Entry) {
			e.ResponseCode, e.Flags, e.UpstreamServiceTime = 504, respflag.UT, -1
		}, `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 504 UT 154 0 226 - "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"` + "\n"},
		{"original path, UTC, truncation", func(e *Entry) {
			e.StartTime = time.Date(2016, 4, 15, 12, 17, 0, 310_999_999, pst)
			e.OriginalPath = "/orig"
			e.Duration = 226*time.Millisecond + 999*time.Microsecond
			e.UpstreamServiceTime = 100*time.Millisecond + 999*time.Microsecond
		}, `[2016-04-15T20:17:00.310Z] "POST /orig HTTP/2" 204 - 154 0 226 100 "10.0.35.28" "nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"` + "\n"},
		{"TCP-like, negative duration", func(e *Entry) {
			*e = Entry{StartTime: e.StartTime, Duration: -1, BytesReceived: 1 << 40, UpstreamHost: "10.0.0.1:9000", Flags: respflag.UF}
		}, `[2016-04-15T20:17:00.310Z] "- - -" 0 UF 1099511627776 0 - - "-" "-" "-" "-" "10.0.0.1:9000"` + "\n"},
	}
	for _, tt := range tests {
		e := accessLogDocEntry()
		tt.edit(&e)
		if got := string(e.AppendDefault(nil)); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
	e := accessLogDocEntry()
	if got := string(e.AppendDefault([]byte("prefix "))); !strings.HasPrefix(got, "prefix [2016") {
		t.Errorf("AppendDefault does not append: %q", got)
	}
}

func TestDefaultAccessLogFormat(t *testing.T) {
	if strings.Count(DefaultFormat, "\n") != 1 || !strings.HasSuffix(DefaultFormat, "\n") {
		t.Errorf("format must be one newline-terminated line: %q", DefaultFormat)
	}
	// Each command renders one field of the line, in order.
	fields := []string{"%START_TIME%", "%REQ(:METHOD)%", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%", "%PROTOCOL%",
		"%RESPONSE_CODE%", "%RESPONSE_FLAGS%", "%BYTES_RECEIVED%", "%BYTES_SENT%", "%DURATION%",
		"%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%", "%REQ(X-FORWARDED-FOR)%", "%REQ(USER-AGENT)%",
		"%REQ(X-REQUEST-ID)%", "%REQ(:AUTHORITY)%", "%UPSTREAM_HOST%"}
	rest := DefaultFormat
	for _, f := range fields {
		i := strings.Index(rest, f)
		if i < 0 {
			t.Fatalf("format lacks %s in order", f)
		}
		rest = rest[i+len(f):]
	}
}

func TestAppendDefaultRoundTrip(t *testing.T) {
	e := accessLogDocEntry()
	e.Flags = respflag.UO | respflag.URX
	line := string(e.AppendDefault(nil))
	back, err := accessLogEntryFromLine(line)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(back.AppendDefault(nil)); got != line {
		t.Errorf("round trip:\n got %q\nwant %q", got, line)
	}
}

func TestAppendDefaultDoesNotAllocate(t *testing.T) {
	e := accessLogDocEntry()
	e.Flags = respflag.UF | respflag.URX
	buf := make([]byte, 0, 512)
	if a := testing.AllocsPerRun(100, func() { buf = e.AppendDefault(buf[:0]) }); a != 0 {
		t.Errorf("AppendDefault allocates %v times", a)
	}
}

func BenchmarkAppendDefault(b *testing.B) {
	e := accessLogDocEntry()
	e.Flags = respflag.UF | respflag.URX
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = e.AppendDefault(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}
