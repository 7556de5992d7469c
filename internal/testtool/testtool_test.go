package testtool

import (
	"net"
	"runtime/debug"
	"strconv"
	"testing"
)

// A cached binary is reused only if it was built with every flag and
// variable asked for now: a default (cgo) or unstripped build of the same
// version is rebuilt.
func TestBuiltWith(t *testing.T) {
	static := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"}, {Key: "-ldflags", Value: "-s -w"}, {Key: "CGO_ENABLED", Value: "0"}, {Key: "GOARCH", Value: "amd64"},
	}}
	cgo := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "CGO_ENABLED", Value: "1"}, {Key: "GOARCH", Value: "amd64"}}}
	want := []string{"-trimpath", "-ldflags=-s -w", "CGO_ENABLED=0"}
	for _, c := range []struct {
		name     string
		bi       *debug.BuildInfo
		settings []string
		want     bool
	}{
		{"static build, static wanted", static, want, true},
		{"cgo build, static wanted", cgo, want, false},
		{"cgo build, nothing wanted", cgo, nil, true},
		{"static build, other ldflags wanted", static, []string{"-ldflags=-s"}, false},
		{"no trimpath recorded", cgo, []string{"-trimpath"}, false},
	} {
		if got := builtWith(c.bi, c.settings); got != c.want {
			t.Errorf("%s: builtWith(%v) = %v, want %v", c.name, c.settings, got, c.want)
		}
	}
}

// TestFreePorts: distinct ports, each bindable, none in the kernel's
// ephemeral range when it leaves room below it.
func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, "127.0.0.1", 20)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if belowEphemeral() && (p < portsLow || p >= portsHigh) {
			t.Fatalf("port %d outside %d-%d", p, portsLow, portsHigh-1)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
	if again := FreePorts(t, "127.0.0.1", 1)[0]; seen[again] {
		t.Fatalf("port %d handed out again", again)
	}
}
