#!/usr/bin/env bash
# End-to-end request latency through the sidecar with the eBPF redirect, on
# the real kernel, against the same requests without it. A pod fixture: a
# network namespace with no route out (a VIP connect that escaped the
# redirect goes nowhere) and a pod cgroup with proxy and app children. The
# app (fortio, started in the app cgroup) sends HTTP/1.1 keep-alive requests
#   direct   to the upstream on 127.0.0.2:18080 (loopback: never redirected),
#   explicit to the sidecar's listener 127.0.0.1:15002 (static destination),
#   ebpf     to the Service VIP 10.96.0.10:80, which cgroup/connect4 sends to
#            the sidecar's outbound listener 127.0.0.1:15001,
#   skmsg    the same with the sidecar started with -accelerate (the app <->
#            sidecar and sidecar <-> upstream loopback hops go through sk_msg),
# at a fixed 1000 req/s (8 connections) and at full speed (16 connections),
# 10 s each, and measures the sidecar's CPU per request. It also runs
# BenchmarkHop (bpf/: the app <-> sidecar loopback hop alone, plain TCP
# against sk_msg, round trip and streaming at 1 B, 1 KiB, 16 KiB and
# 64 KiB writes). Rewrites the redirect section of bench/RESULTS.md.
#
# Usage: sudo bench/redirect.sh    (root: eBPF, cgroups, netns; ~1 minute)
# Installs fortio v1.68.2 into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH:/usr/sbin
[ "$(id -u)" = 0 ] || { echo "bench/redirect.sh: needs root (eBPF, cgroups, network namespaces)" >&2; exit 1; }
command -v ip >/dev/null || { echo "bench/redirect.sh: needs iproute2 (ip)" >&2; exit 1; }
CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
FORTIO_VERSION=1.68.2
DURATION=${MESHLET_BENCH_DURATION:-10s}
fortio=$CACHE/bin/fortio
if [[ $("$fortio" version 2>/dev/null || true) != "$FORTIO_VERSION"* ]]; then
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin GOFLAGS=-mod=mod go install "fortio.org/fortio@v$FORTIO_VERSION"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-redirect-bench.XXXXXX")
ns=meshlet-bench-$$
cleanup() {
  ip netns del "$ns" 2>/dev/null || true
  [ -n "${MESHLET_BENCH_KEEP:-}" ] && echo "kept $tmp" >&2 || rm -rf "$tmp"
}
trap cleanup EXIT
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar" ./cmd/sidecar # as `make sidecar`
go build -o "$tmp/upstream" ./bench/upstream
cat >"$tmp/sidecar.yaml" <<YAML
node: {id: bench, cluster: bench}
admin: 127.0.0.1:15000
health: "off"
prometheus: "off"
access_log: {path: "off"}
listeners:
  - {name: outbound, address: 127.0.0.1:15001, routes: [{name: vip, match: {destination: "10.96.0.10:80"}, cluster: up}]}
  - {name: explicit, address: 127.0.0.1:15002, original_destination: "10.96.0.10:80",
     routes: [{name: vip, match: {destination: "10.96.0.10:80"}, cluster: up}]}
clusters:
  - {name: up, type: STATIC, connect_timeout: 1s,
     load_assignment: {endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 18080}}}}]}]}}
YAML
ip netns add "$ns"
ip -n "$ns" link set lo up
# Inside the namespace (a private mount namespace: mount cgroup2 again).
ip netns exec "$ns" env tmp="$tmp" fortio="$fortio" DURATION="$DURATION" bash -s <<'INNER'
set -euo pipefail
mnt=$tmp/cgroup
mkdir -p "$mnt"
mount -t cgroup2 none "$mnt"
own=$(sed -n 's/^0:://p' /proc/self/cgroup)
pod=$mnt/meshlet-bench-$$-pod
mkdir -p "$pod/proxy" "$pod/app"
pids=()
finish() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rmdir "$pod/app" "$pod/proxy" "$pod" 2>/dev/null || true
  umount "$mnt" 2>/dev/null || true
}
trap finish EXIT
"$tmp/upstream" -addr 127.0.0.2:18080 >"$tmp/upstream.out" 2>&1 &
pids+=($!)
# The sidecar joins the proxy cgroup before it makes a socket; it attaches
# to the pod cgroup (its own cgroup's parent).
start_sidecar() { # start_sidecar FLAGS...
  (echo "$BASHPID" >"$pod/proxy/cgroup.procs"; exec "$tmp/sidecar" run -config "$tmp/sidecar.yaml" -redirect ebpf -watch 0 -log-level error "$@") \
    >"$tmp/sidecar.out" 2>&1 &
  sidecar=$!
  pids+=($sidecar)
  for _ in $(seq 100); do
    curl -fsS -o /dev/null --max-time 1 http://127.0.0.1:15000/ready 2>/dev/null && break
    sleep 0.1
  done
  curl -fsS -o /dev/null http://127.0.0.1:15000/ready || { cat "$tmp/sidecar.out"; exit 1; }
  sleep 0.3
}
ticks() { awk '{print $14 + $15}' "/proc/$sidecar/stat"; }
app() { # app ARGS...: fortio in the app cgroup
  (echo "$BASHPID" >"$pod/app/cgroup.procs"; exec "$fortio" "$@")
}
start_sidecar
for case in direct:http://127.0.0.2:18080/ explicit:http://127.0.0.1:15002/ ebpf:http://10.96.0.10:80/ skmsg:http://10.96.0.10:80/; do
  name=${case%%:*} url=${case#*:}
  if [ "$name" = skmsg ]; then
    kill "$sidecar"; wait "$sidecar" 2>/dev/null || true
    start_sidecar -accelerate
  fi
  app load -quiet -c 16 -qps 0 -t 1s "$url" >/dev/null 2>&1 || true
  for kind in fixed max; do
    args=(-c 16 -qps 0)
    [ "$kind" = fixed ] && args=(-c 8 -qps 1000 -uniform)
    before=$(ticks)
    app load -quiet "${args[@]}" -t "$DURATION" -r 0.00001 -p 50,90,99 -json "$tmp/$name-$kind.json" "$url" >"$tmp/$name-$kind.log" 2>&1 ||
      { tail -5 "$tmp/$name-$kind.log" >&2; exit 1; }
    echo $(($(ticks) - before)) >"$tmp/$name-$kind.ticks"
  done
done
INNER
go test -run '^$' -bench BenchmarkHop -benchtime 1s -count 1 ./bpf/ >"$tmp/hop.txt" 2>&1 || { cat "$tmp/hop.txt" >&2; exit 1; }
python3 - "$tmp/hop.txt" >"$tmp/hop.md" <<'PY'
import re, sys
r = {}
for line in open(sys.argv[1]):
    m = re.match(r"BenchmarkHop/(rtt|stream)/(\w+)/(tcp|skmsg)-\d+\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) MB/s", line)
    if m:
        r[(m[1], m[2], m[3])] = (float(m[4]), float(m[5]))
for size in ["1B", "1KiB", "16KiB", "64KiB"]:
    rt, rs = r[("rtt", size, "tcp")][0] / 1000, r[("rtt", size, "skmsg")][0] / 1000
    st, ss = r[("stream", size, "tcp")][1], r[("stream", size, "skmsg")][1]
    mb = lambda v: f"{v:.2f}" if v < 10 else f"{v:.0f}"
    print(f"| {size} | {rt:.1f} | {rs:.1f} | {mb(st)} | {mb(ss)} |")
PY
python3 - "$tmp" "$(getconf CLK_TCK)" >"$tmp/rows.md" <<'PY'
import json, sys
tmp, hz = sys.argv[1], int(sys.argv[2])
def p(d, q):
    for x in d["DurationHistogram"]["Percentiles"]:
        if x["Percentile"] == q:
            return x["Value"] * 1000
for name, what in [("direct", "direct to the upstream (no sidecar)"), ("explicit", "to the sidecar's listener (no eBPF)"),
                   ("ebpf", "to the VIP, redirected by eBPF"), ("skmsg", "the same with -accelerate (sockops + sk_msg)")]:
    f = json.load(open(f"{tmp}/{name}-fixed.json"))
    m = json.load(open(f"{tmp}/{name}-max.json"))
    for d in (f, m):
        ok = d["RetCodes"].get("200", 0)
        if ok != d["DurationHistogram"]["Count"]:
            sys.exit(f"{name}: {d['RetCodes']} of {d['DurationHistogram']['Count']} requests")
    n = f["DurationHistogram"]["Count"]
    ticks = int(open(f"{tmp}/{name}-fixed.ticks").read())
    cpu = "-" if name == "direct" else "%.0f" % (ticks / hz / n * 1e6)
    print(f"| {name}: {what} | {p(f, 50):.3f} | {p(f, 90):.3f} | {p(f, 99):.3f} | {m['ActualQPS']:.0f} | {cpu} |")
PY
section=$(cat <<MD
<!-- redirect:begin (generated by bench/redirect.sh; do not edit by hand) -->
## redirect: request latency through the sidecar with the eBPF redirect

Run: \`bench/redirect.sh\` on $(date -u +%Y-%m-%d), $(nproc) CPUs, kernel $(uname -r), $(go version | cut -d' ' -f3).
fortio (HTTP/1.1 keep-alive, 1 KiB responses from \`bench/upstream\`) runs in
the app cgroup of a pod fixture (a network namespace with no route out, a pod
cgroup with the sidecar's programs attached). Latency at a fixed 1000 req/s
over 8 connections, $DURATION; max throughput with 16 connections; sidecar CPU
per request at 1000 req/s (the direct case has no sidecar on the path).
\`ebpf\` against \`explicit\` is what the redirect itself costs; \`explicit\`
against \`direct\` is the proxy hop; \`skmsg\` against \`ebpf\` is what the
sk_msg acceleration changes (every hop here is loopback, so all of them are
accelerated).

| path | p50 ms | p90 ms | p99 ms | max req/s | sidecar CPU µs/req |
|---|---|---|---|---|---|
$(cat "$tmp/rows.md")

The hop alone (\`BenchmarkHop\`, a connected loopback pair inside the attached
pod cgroup, Read and Write; rtt: one message there and back; stream: one
write per op to a reader draining the other end):

| write size | rtt plain TCP µs | rtt sk_msg µs | stream plain TCP MB/s | stream sk_msg MB/s |
|---|---|---|---|---|
$(cat "$tmp/hop.md")
<!-- redirect:end -->
MD
)
printf '%s\n' "$section" | python3 bench/section.py bench/RESULTS.md redirect
echo "wrote bench/RESULTS.md"
cat "$tmp/rows.md"
