#!/usr/bin/env bash
# `make test`: meshlet's whole test suite on this machine, as CI runs it.
#
# Needs root: the bpf and redirect tests load eBPF programs and build
# cgroups, network namespaces and veths, and the e2e suite runs kubelets,
# containerd and kube-proxy on the host. It installs what a fresh machine
# lacks (Debian packages: git, curl, unzip, gcc, libc6-dev, openssl,
# prometheus; in e2e/tools.sh: containerd, runc, CNI plugins, iptables,
# nftables, conntrack; Go from the module proxy if absent) and caches the
# e2e tools it builds (11-16 GB with the Go caches) in
# ${MESHLET_CACHE:-~/.cache/meshlet}. Every step says what it does; long
# ones report progress. Whatever happens, it ends by sweeping and listing
# what the tests left behind (bpf/sweep.sh), and fails if there was any.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

elapsed() { printf '%dm%02ds' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); }
step() { printf '\n== %s [%s]\n' "$*" "$(elapsed)"; }

# run_long WHAT CMD...: CMD with a line every minute while it runs.
run_long() {
	local what=$1 pid rc=0
	shift
	"$@" &
	pid=$!
	(
		n=0
		while sleep 60; do
			n=$((n + 1))
			kill -0 "$pid" 2>/dev/null || exit 0
			printf '   ... still %s (%d min)\n' "$what" "$n"
		done
	) &
	local ticker=$!
	wait "$pid" || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	return "$rc"
}

if [ "$(id -u)" != 0 ]; then
	echo "make test needs root: the bpf tests load eBPF programs and the e2e suite runs kubelets and containerd (CI runs it as root)." >&2
	echo "Without root, 'go test ./...' runs the unprivileged tests only." >&2
	exit 1
fi

step "installing what this machine lacks"
need_apt=()
command -v git >/dev/null 2>&1 || need_apt+=(git)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
# The SPIRE interop test's tools build with cgo.
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# Real peers the tests use: Prometheus (and promtool).
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
# The kind quickstart script is checked, not run (deploy/kind_test.go).
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
if [ ${#need_apt[@]} -gt 0 ]; then
	echo "apt-get install ${need_apt[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
else
	echo "nothing to install"
fi
export PATH="/usr/local/go/bin:$PATH"
if ! command -v go >/dev/null 2>&1; then
	# Go from the module proxy (the only Go download reachable here),
	# cached outside the clone.
	ver=go1.26.8
	dir="${MESHLET_CACHE:-$HOME/.cache/meshlet}/toolchain-$ver"
	if [ ! -x "$dir/bin/go" ]; then
		echo "downloading $ver from the Go module proxy into $dir"
		mkdir -p "$dir.tmp"
		curl -fsSL "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$ver.linux-amd64.zip" -o "$dir.zip"
		unzip -q -o "$dir.zip" -d "$dir.tmp"
		rm -rf "$dir" && mv "$dir.tmp/golang.org/toolchain@v0.0.1-$ver.linux-amd64" "$dir"
		rm -rf "$dir.tmp" "$dir.zip"
	fi
	export PATH="$dir/bin:$PATH"
fi
go version

# Privileged tests fail here instead of skipping (internal/privileged).
export MESHLET_REQUIRE_PRIVILEGED=1

step "sweeping what a killed earlier run left (bpf/sweep.sh)"
bash bpf/sweep.sh
leftover_check() {
	local rc=$?
	step "checking the tests left nothing behind (bpf/sweep.sh --all)"
	# Remove what is left, list it, and fail if there was anything.
	local left
	left=$(bash bpf/sweep.sh --all 2>&1) || true
	if [ -n "$left" ]; then
		echo "the tests left these behind (now removed):"
		echo "$left" | sed 's/^/   /'
		[ "$rc" = 0 ] && rc=1
	else
		echo "nothing left behind"
	fi
	[ "$rc" = 0 ] && echo "make test: passed in $(elapsed)" || echo "make test: FAILED after $(elapsed)"
	exit "$rc"
}
trap leftover_check EXIT

step "checking the committed BPF objects match their sources (bpf/regen.sh; needs clang, else skipped)"
bash bpf/regen.sh

# The e2e tools' modules download meanwhile (network, little CPU;
# e2e/tools.sh's build waits for them under the same lock).
bash e2e/tools.sh fetch >/dev/null 2>&1 &
# So do the modules of Jaeger, which the tracing tests build on first use
# (internal/testtool/jaeger).
(cd internal/testtool/jaeger && GOFLAGS=-mod=readonly go list -deps github.com/jaegertracing/jaeger/cmd/jaeger >/dev/null 2>&1) &

step "gofmt"
make --no-print-directory fmt
step "go vet (compiles every package: minutes on a cold build cache)"
run_long "vetting" make --no-print-directory vet
step "unit tests: go test ./... (every package; fuzz targets on their seed corpus)"
run_long "running the unit tests" make --no-print-directory unit
step "data plane tests on the net/http HTTP/1 fallback: go test ./dataplane/ with MESHLET_TEST_HTTP1_SERVER=net/http (1-2 min)"
run_long "running the data plane tests on the fallback" make --no-print-directory unit-http1-fallback
step "the benchmarks' latency split on a synthetic capture (bench/pairsplit.py --self-test)"
python3 bench/pairsplit.py --self-test
step "Envoy load-balancing conformance vectors"
make --no-print-directory vectors
step "e2e tools (e2e/tools.sh: cached in ${MESHLET_CACHE:-~/.cache/meshlet}; 10-25 min to build cold)"
make --no-print-directory e2e-tools
step "end-to-end tests (real API server, SPIRE, eBPF pods, three real nodes, Gateway API conformance: ~7 min)"
run_long "running the e2e tests" make --no-print-directory e2e
