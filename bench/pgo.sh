#!/usr/bin/env bash
# Refreshes cmd/sidecar/default.pgo, the CPU profile `go build` uses for
# profile-guided optimisation of the sidecar (-pgo=auto, the default: hot
# calls inlined, hot interface calls devirtualised). The profile is the
# proxy benchmark's workload (bench/proxy.sh): HTTP/1.1 keep-alive through
# the sidecar to bench/upstream on loopback, 1 KiB responses, 10 s at max
# throughput (fortio -c 16) and 20 s at 1000 req/s (-c 8), profiled through
# the admin port's /debug/pprof/profile and merged.
#
# Usage: bench/pgo.sh      (about 40 s; needs fortio, which bench/proxy.sh
#                           installs into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin)
#
# Ports (127.0.0.1): upstream 18080, sidecar 18101, its admin 18190-18192.
# Rerun it after changes to the request path; a stale profile only helps
# less (the compiler matches it to the source by function and line).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
fortio=$CACHE/bin/fortio
[ -x "$fortio" ] || { echo "pgo.sh: $fortio missing: run bench/proxy.sh once (it installs fortio)" >&2; exit 1; }
. bench/lib.sh # ports_free, wait_http, sidecar_config
ports_free 18080 18101 18190 18191 18192 || exit 1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-pgo.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# Built without a profile, so that the profile describes the plain build.
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -pgo=off -o "$tmp/sidecar" ./cmd/sidecar
go build -o "$tmp/upstream" ./bench/upstream
sidecar_config 18101 18190 >"$tmp/sidecar.yaml"
"$tmp/upstream" -addr 127.0.0.1:18080 >"$tmp/upstream.log" 2>&1 &
pids+=($!)
"$tmp/sidecar" run -config "$tmp/sidecar.yaml" -watch 0 >"$tmp/sidecar.log" 2>&1 &
pids+=($!)
wait_http http://127.0.0.1:18101/ || { cat "$tmp/sidecar.log" >&2; echo "pgo.sh: the sidecar did not answer" >&2; exit 1; }
"$fortio" load -quiet -c 16 -qps 0 -t 1s http://127.0.0.1:18101/ >/dev/null 2>&1

profile() { # profile NAME SECONDS FORTIO_ARGS...: one profiled load run
  local name=$1 secs=$2
  shift 2
  curl -fsS -o "$tmp/$name.prof" "http://127.0.0.1:18190/debug/pprof/profile?seconds=$secs" &
  local curl_pid=$!
  sleep 0.2
  "$fortio" load -quiet "$@" -t "$((secs - 1))s" http://127.0.0.1:18101/ >"$tmp/$name.log" 2>&1
  wait "$curl_pid"
}
profile max 11 -c 16 -qps 0
profile fixed 21 -c 8 -qps 1000 -uniform
go tool pprof -proto "$tmp/max.prof" "$tmp/fixed.prof" >"$tmp/default.pgo"
mv "$tmp/default.pgo" cmd/sidecar/default.pgo
echo "pgo.sh: wrote cmd/sidecar/default.pgo ($(wc -c <cmd/sidecar/default.pgo) bytes)"
