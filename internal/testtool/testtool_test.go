package testtool

import (
	"runtime/debug"
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
