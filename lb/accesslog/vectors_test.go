package accesslog

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/lb/internal/vectortest"
	"github.com/meshlet-dev/meshlet/lb/respflag"
)

// vectorRunners check the accesslog vectors. They read each vector field by
// field, so other vector files of the same schema work, and report an
// unknown field instead of ignoring it.
var vectorRunners = vectortest.Runners{
	"access_log": runAccessLogVector,
}

// TestEnvoyVectors runs the accesslog vectors of lb/testdata (or of the file
// named by MESHLET_LB_VECTORS), one subtest per vector.
func TestEnvoyVectors(t *testing.T) {
	vectortest.RunFile(t, vectortest.EnvoyFile("../testdata"), "lb/accesslog", vectorRunners)
}

// TestMeshletVectors runs the accesslog vectors of meshlet's own files.
func TestMeshletVectors(t *testing.T) {
	vectortest.RunMeshletFiles(t, "../testdata", "lb/accesslog", vectorRunners)
}

// retryVecDefaultLine matches one line of DefaultFormat.
var retryVecDefaultLine = regexp.MustCompile(`^\[(\S+)\] "(\S+) (\S+) (\S+)" (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)" "([^"]*)"\n?$`)

// accessLogEntryFromLine builds the Entry a rendered line came from.
func accessLogEntryFromLine(line string) (Entry, error) {
	m := retryVecDefaultLine.FindStringSubmatch(line)
	if m == nil {
		return Entry{}, fmt.Errorf("line does not match the default format: %q", line)
	}
	str := func(s string) string {
		if s == "-" {
			return ""
		}
		return s
	}
	var firstErr error
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return n
	}
	dur := func(s string) time.Duration {
		if s == "-" {
			return -1
		}
		return time.Duration(num(s)) * time.Millisecond
	}
	var e Entry
	if m[1] != "-" {
		t, err := time.Parse(startTimeLayout, m[1])
		if err != nil {
			return e, err
		}
		e.StartTime = t
	}
	e.Method, e.Path, e.Protocol = str(m[2]), str(m[3]), str(m[4])
	e.ResponseCode = int(num(m[5]))
	flags, err := respflag.Parse(m[6])
	if err != nil {
		return e, err
	}
	e.Flags = flags
	e.BytesReceived, e.BytesSent = num(m[7]), num(m[8])
	e.Duration, e.UpstreamServiceTime = dur(m[9]), dur(m[10])
	e.ForwardedFor, e.UserAgent, e.RequestID = str(m[11]), str(m[12]), str(m[13])
	e.Authority, e.UpstreamHost = str(m[14]), str(m[15])
	return e, firstErr
}

func runAccessLogVector(t *testing.T, v vectortest.Vector) {
	in := vectortest.Fields(t, v, v.Input, "input")
	vectortest.RejectRest(t, v, in, "input")
	exp := vectortest.Fields(t, v, v.Expected, "expected")

	var flags []struct{ Short, Long string }
	if vectortest.Take(t, v, exp, "flags", &flags) {
		byLong := map[string]respflag.Flags{}
		for _, n := range respflag.Names() {
			byLong[n.Long] = n.Flag
		}
		seen := map[string]bool{}
		for _, w := range flags {
			seen[w.Short] = true
			f, err := respflag.Lookup(w.Short)
			if err != nil {
				t.Errorf("flags %s: %v", w.Short, err)
				continue
			}
			if got := f.Short(); got != w.Short {
				t.Errorf("flags %s: Short() got %q, want %q", w.Short, got, w.Short)
			}
			if got := f.Long(); got != w.Long {
				t.Errorf("flags %s: Long() got %q, want %q", w.Short, got, w.Long)
			}
			if got, ok := byLong[w.Long]; !ok || got != f {
				t.Errorf("flags %s: long name %q maps to %v, want %v", w.Short, w.Long, got, f)
			}
		}
		for _, n := range respflag.Names() {
			if !seen[n.Short] {
				t.Errorf("flags: table has %s/%s, vector does not", n.Short, n.Long)
			}
		}
	}
	var none string
	if vectortest.Take(t, v, exp, "none", &none) {
		if got := respflag.Flags(0).Short(); got != none {
			t.Errorf("none: Short() got %q, want %q", got, none)
		}
		if got := respflag.Flags(0).Long(); got != none {
			t.Errorf("none: Long() got %q, want %q", got, none)
		}
	}
	var sep string
	if vectortest.Take(t, v, exp, "separator", &sep) {
		a, b := respflag.Names()[0], respflag.Names()[1]
		if got, want := (a.Flag | b.Flag).Short(), a.Short+sep+b.Short; got != want {
			t.Errorf("separator: Short() got %q, want %q", got, want)
		}
		if got, want := (a.Flag | b.Flag).Long(), a.Long+sep+b.Long; got != want {
			t.Errorf("separator: Long() got %q, want %q", got, want)
		}
	}
	var format string
	if vectortest.Take(t, v, exp, "format", &format) && format != DefaultFormat {
		t.Errorf("format: got %q, want %q", DefaultFormat, format)
	}
	var line string
	if vectortest.Take(t, v, exp, "example_line", &line) {
		e, err := accessLogEntryFromLine(line)
		if err != nil {
			t.Fatalf("example_line: %v", err)
		}
		want := strings.TrimSuffix(line, "\n") + "\n"
		if got := string(e.AppendDefault(nil)); got != want {
			t.Errorf("example_line: got %q, want %q", got, want)
		}
	}
	vectortest.RejectRest(t, v, exp, "expected")
}
