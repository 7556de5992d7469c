// Package testtool installs the Go programs tests run as real peers or
// tools (fortio, h2spec, helm) with `go install` from the module proxy
// into a cache outside the clone, once per version; it also holds the
// helpers several packages' tests share (helpers.go).
package testtool

import (
	"context"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshlet-dev/meshlet/internal/privileged"
)

// Dir is where installed tools live: $MESHLET_CACHE/bin, by default
// ~/.cache/meshlet/bin.
func Dir() string {
	cache := os.Getenv("MESHLET_CACHE")
	if cache == "" {
		cache = filepath.Join(os.Getenv("HOME"), ".cache", "meshlet")
	}
	return filepath.Join(cache, "bin")
}

// GoInstall returns the path of the program pkg (a main package path) at
// module version version, installing it first unless the cached binary
// records that version. Where the module proxy cannot be reached the test
// is skipped, or failed where privileged tests are required
// (privileged.Need); any other failure fails it.
func GoInstall(t testing.TB, pkg, version string) string {
	t.Helper()
	bin := filepath.Join(Dir(), path.Base(pkg))
	if bi, err := buildinfo.ReadFile(bin); err == nil && bi.Main.Version == version {
		return bin
	}
	// helm's cold build (about 1,000 packages) took 7 minutes on a busy
	// 2-core machine: leave room for it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+version)
	// Outside any module's build list: -mod=mod so a -mod=readonly or
	// -mod=vendor from the environment does not refuse it.
	cmd.Env = append(os.Environ(), "GOBIN="+Dir(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return bin
	}
	privileged.Need(t, !proxyUnreachable(string(out)), "go install "+pkg+"@"+version+": the module proxy is unreachable:\n"+tail(string(out), 1500))
	t.Fatalf("go install %s@%s (from the module proxy): %v\n%s", pkg, version, err, tail(string(out), 3000))
	return ""
}

// proxyUnreachable tells from go's output that a download failed for
// want of a network (or of a proxy: GOPROXY=off), not that the module or
// its build is broken.
func proxyUnreachable(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "network is unreachable",
		"i/o timeout", "TLS handshake timeout", "proxyconnect", "disabled by GOPROXY=off", "Client.Timeout exceeded"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// HelmVersion is the helm the tests, the e2e suite and `go generate
// ./deploy/` render and install the chart with (helm.sh/helm/v4).
const HelmVersion = "v4.3.2"

// Helm returns the path of helm HelmVersion, built from source with `go
// install` on first use (7 minutes on a busy 2-core machine) and cached
// in Dir.
func Helm(t testing.TB) string {
	t.Helper()
	return GoInstall(t, "helm.sh/helm/v4/cmd/helm", HelmVersion)
}

// HelmEnv is the environment to run helm in: its config, cache and data
// folders under dir, so that no repository, plugin or registry login of
// the user's own reaches a test, and a test leaves nothing in $HOME.
func HelmEnv(dir string) []string {
	return append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"),
		"HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
}
