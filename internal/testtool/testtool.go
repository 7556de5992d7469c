// Package testtool installs the Go programs tests run as real peers or
// tools (fortio, h2spec, helm, Istio's echo) with `go install` from the module proxy
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
	"runtime/debug"
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
	return goInstall(t, Dir(), version, nil, nil, pkg)[0]
}

// goInstall installs pkgs (main packages of one module) at version into
// dir with one go install, extra flags and environment added, unless
// every binary there records that version and those settings; it returns
// the binaries' paths, in the order of pkgs.
func goInstall(t testing.TB, dir, version string, flags, env []string, pkgs ...string) []string {
	t.Helper()
	bins := make([]string, len(pkgs))
	args := append([]string{"install"}, flags...)
	// What a cached binary must record; go leaves -ldflags out of a
	// -trimpath build's info (it may hold paths).
	settings := append([]string{}, env...)
	for _, f := range flags {
		if !strings.HasPrefix(f, "-ldflags") {
			settings = append(settings, f)
		}
	}
	cached := true
	for i, pkg := range pkgs {
		bins[i] = filepath.Join(dir, path.Base(pkg))
		args = append(args, pkg+"@"+version)
		bi, err := buildinfo.ReadFile(bins[i])
		cached = cached && err == nil && bi.Main.Version == version && builtWith(bi, settings)
	}
	if cached {
		return bins
	}
	// helm's cold build (about 1,000 packages) took 7 minutes on a busy
	// 2-core machine: leave room for it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	// Outside any module's build list: -mod=mod so a -mod=readonly or
	// -mod=vendor from the environment does not refuse it.
	cmd.Env = append(append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod"), env...)
	out, err := cmd.CombinedOutput()
	what := "go " + strings.Join(args, " ")
	if err == nil {
		return bins
	}
	privileged.Need(t, !proxyUnreachable(string(out)), what+": the module proxy is unreachable:\n"+tail(string(out), 1500))
	t.Fatalf("%s (from the module proxy, GOBIN=%s %s): %v\n%s", what, dir, strings.Join(env, " "), err, tail(string(out), 3000))
	return nil
}

// builtWith says whether a binary's build settings hold every flag
// (-trimpath, -ldflags=-s -w) and environment variable (CGO_ENABLED=0) of
// settings, a flag without a value meaning true, so that a cached binary
// built otherwise is rebuilt.
func builtWith(bi *debug.BuildInfo, settings []string) bool {
	have := map[string]string{}
	for _, s := range bi.Settings {
		have[s.Key] = s.Value
	}
	for _, kv := range settings {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			v = "true"
		}
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// IstioEchoVersion is the version of istio.io/istio whose echo server and
// client make the Gateway API conformance suite's echo-advanced image
// (upstream that image is Istio's echo app, gcr.io/istio-release/app). A
// pseudo-version because that is all the module proxy serves: Istio tags
// its releases 1.x.y, without the v that would make them module versions.
const IstioEchoVersion = "v0.0.0-20260827124520-eed52ebb66ad"

// IstioEcho returns the paths of Istio's echo server and client
// (istio.io/istio/pkg/test/echo/cmd/server and .../client) at
// IstioEchoVersion, built as an image needs them: static (CGO_ENABLED=0;
// go defaults to cgo where a C compiler is installed, which links
// against the host's libc), -trimpath and stripped, for this machine's
// platform (go install refuses to cross-compile into a GOBIN). They are
// cached in their own folder of Dir named by the version, since their
// names are generic; the first build takes about 45 s on 2 cores.
func IstioEcho(t testing.TB) (server, client string) {
	t.Helper()
	const cmd = "istio.io/istio/pkg/test/echo/cmd/"
	bins := goInstall(t, filepath.Join(Dir(), "istio-echo-"+IstioEchoVersion), IstioEchoVersion,
		[]string{"-trimpath", "-ldflags=-s -w"}, []string{"CGO_ENABLED=0"}, cmd+"server", cmd+"client")
	return bins[0], bins[1]
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
