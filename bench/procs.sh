#!/usr/bin/env bash
# What the adaptive processor scaler (sidecar run -adaptive-procs) saves
# and what it costs: the sidecar with 2 workers, with the scaler and
# without (-adaptive-procs=false), alternating, under a steady 1000 req/s
# (fortio -c 8 -uniform on kept-alive connections, as bench/proxy.sh) and
# that same stream with a burst:
#   steady  the stream alone: the sidecar's CPU per request;
#   storm   3 s into the stream's 8th second, a second fortio opening a new
#           connection per request as fast as it can (-c 32, no
#           keep-alive): accepts, goroutines, connection set-up;
#   reload  SIGHUP every 4 s: the sidecar reloads its config, a
#           10,000-endpoint cluster (parsing, translation, the load
#           balancer's snapshots): a CPU-bound moment as a large xDS update.
# Reports the steady stream's latency (p50, p99, p99.9, max: what the
# stream's clients see of the burst), the sidecar's CPU per request and how
# often the scaler changed the processors. Rewrites the procs section of
# bench/RESULTS.md.
#
# Usage: bench/procs.sh   (about 8 minutes; MESHLET_BENCH_ROUNDS=N, default 3;
#                          MESHLET_BENCH_KEEP=1 keeps the temporary folder)
# Installs fortio v1.68.2 into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin if
# missing. Ports (127.0.0.1): upstream 18080, sidecar 18121 and 18122, its
# admin/health/prometheus 18196-18198.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh # ports_free, wait_http, sidecar_config, big_config
export PATH=/usr/local/go/bin:$PATH

CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
FORTIO_VERSION=1.68.2
ROUNDS=${MESHLET_BENCH_ROUNDS:-3}
SECONDS_RUN=20
UP=127.0.0.1:18080 PORT=18121 PORT_BIG=18122 ADMIN=18196
repo=$PWD
out_md=bench/RESULTS.md

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-procs-bench.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${MESHLET_BENCH_KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[procs.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

fortio=$CACHE/bin/fortio
if [[ $("$fortio" version 2>/dev/null || true) != "$FORTIO_VERSION"* ]]; then
  log "installing fortio v$FORTIO_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin GOFLAGS=-mod=mod go install "fortio.org/fortio@v$FORTIO_VERSION"
fi
clk_tck=$(getconf CLK_TCK)

log "building the sidecar (as make sidecar) and the upstream"
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar" ./cmd/sidecar
go build -o "$tmp/upstream" ./bench/upstream
ports_free 18080 $PORT $PORT_BIG $ADMIN $((ADMIN + 1)) $((ADMIN + 2)) || die "a port the benchmark needs is taken"

start() { # start NAME CMD...: a background process, its pid in $started
  local name=$1
  shift
  "$@" >"$tmp/$name.out" 2>&1 &
  started=$!
  pids+=("$started")
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
cpu_ticks() { # cpu_ticks PID: utime+stime in clock ticks
  local s rest
  s=$(cat "/proc/$1/stat") || die "process $1 is gone"
  rest=${s##*) }
  read -r -a f <<<"$rest"
  echo $((f[11] + f[12]))
}

# run NAME SCENARIO ADAPTIVE: one run; $tmp/NAME.json (the stream),
# $tmp/NAME-storm.json, $tmp/NAME.ticks, $tmp/NAME.out (the sidecar's log).
run() {
  local name=$1 scenario=$2 adaptive=$3 pid f t0 t1 i
  start "$name" "$tmp/sidecar" run -config "$tmp/$scenario.yaml" -watch 0 -concurrency 2 \
    -adaptive-procs="$adaptive" -log-level debug
  pid=$started
  wait_http "http://127.0.0.1:$PORT/" || die "$name did not start: $(tail -5 "$tmp/$name.out")"
  "$fortio" load -quiet -c 8 -qps 1000 -uniform -t 1s "http://127.0.0.1:$PORT/" >/dev/null 2>&1 || true # warm-up
  t0=$(cpu_ticks "$pid")
  "$fortio" load -quiet -c 8 -qps 1000 -uniform -t ${SECONDS_RUN}s -r 0.00001 -p 50,99,99.9 -json "$tmp/$name.json" \
    "http://127.0.0.1:$PORT/" >"$tmp/$name-fortio.log" 2>&1 &
  f=$!
  case $scenario in
  storm)
    sleep 7
    "$fortio" load -quiet -c 32 -qps 0 -t 3s -keepalive=false -json "$tmp/$name-storm.json" \
      "http://127.0.0.1:$PORT/" >"$tmp/$name-storm.log" 2>&1 || die "$name: the storm failed"
    ;;
  reload)
    for i in 1 2 3 4; do
      sleep 4
      kill -HUP "$pid"
    done
    ;;
  esac
  wait "$f" || die "$name: fortio failed: $(tail -3 "$tmp/$name-fortio.log")"
  t1=$(cpu_ticks "$pid")
  echo $((t1 - t0)) >"$tmp/$name.ticks"
  stop "$pid"
  log "$name: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f req/s, codes %s" % (d["ActualQPS"], d["RetCodes"]))' "$tmp/$name.json")"
}

start upstream "$tmp/upstream" -addr "$UP"
wait_http "http://$UP/" || die "upstream did not start"
sidecar_config $PORT $ADMIN >"$tmp/steady.yaml"
cp "$tmp/steady.yaml" "$tmp/storm.yaml"
big_config $PORT $ADMIN $PORT_BIG 10000 >"$tmp/reload.yaml"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
  for scenario in steady storm reload; do
    for adaptive in true false; do
      run "$scenario-$adaptive@$round" "$scenario" "$adaptive"
    done
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
reloads=$(grep -c 'trigger=SIGHUP' "$tmp/reload-true@1.out" || true)
[ "$reloads" -eq 4 ] || die "the sidecar logged $reloads reloads, want 4"

export RUN_DATE=$(date -u +%Y-%m-%d) CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^model name[[:space:]]*: //') \
  NPROC=$(nproc) GO_VERSION=$(go version | cut -d' ' -f3) LOAD_START=$load_start LOAD_END=$load_end ROUNDS SECONDS_RUN CLK_TCK=$clk_tck
python3 - "$tmp" <<'PY' | python3 bench/section.py "$repo/$out_md" procs
import json, os, re, statistics, sys
tmp = sys.argv[1]
E = os.environ
rounds, tck = int(E["ROUNDS"]), int(E["CLK_TCK"])


def one(name):
    d = json.load(open(os.path.join(tmp, name + ".json")))
    h = d["DurationHistogram"]
    pct = {p["Percentile"]: p["Value"] * 1e3 for p in h["Percentiles"]}
    n = h["Count"]
    storm = 0
    sp = os.path.join(tmp, name + "-storm.json")
    if os.path.exists(sp):
        storm = json.load(open(sp))["DurationHistogram"]["Count"]
    ticks = int(open(os.path.join(tmp, name + ".ticks")).read())
    log = open(os.path.join(tmp, name + ".out")).read()
    changes = re.findall(r'msg="go processors" from=(\d+) to=(\d+)', log)
    bad = sum(v for k, v in d["RetCodes"].items() if str(k) != "200")
    return dict(p50=pct[50], p99=pct[99], p999=pct[99.9], max=h["Max"] * 1e3, cpu=ticks / tck * 1e6 / (n + storm),
                raises=sum(1 for a, b in changes if int(b) > int(a)), bad=bad, storm=storm, n=n)


def cell(runs, key, fmt):
    v = [r[key] for r in runs]
    return fmt % statistics.median(v) + " (" + ", ".join(fmt % x for x in v) + ")"


rows = []
res = {}
for scenario in ["steady", "storm", "reload"]:
    for adaptive in ["true", "false"]:
        runs = [one(f"{scenario}-{adaptive}@{i}") for i in range(1, rounds + 1)]
        res[(scenario, adaptive)] = runs
        label = "on" if adaptive == "true" else "off (default)"
        extra = ""
        if scenario == "storm":
            extra = f"; storm {statistics.median(r['storm'] for r in runs) / 3:.0f} new connections/s"
        rows.append(f"| {scenario} | {label} | {cell(runs, 'p50', '%.2f')} | {cell(runs, 'p99', '%.2f')} | {cell(runs, 'p999', '%.1f')} | "
                    f"{cell(runs, 'max', '%.0f')} | {cell(runs, 'cpu', '%.0f')} | {statistics.median(r['raises'] for r in runs):.0f}{extra} | "
                    f"{sum(r['bad'] for r in runs)} |")
table = "\n".join(rows)


def delta(scenario, key):
    on = statistics.median(r[key] for r in res[(scenario, "true")])
    off = statistics.median(r[key] for r in res[(scenario, "false")])
    return on, off, (on - off) / off * 100


summary = []
for scenario in ["steady", "storm", "reload"]:
    c_on, c_off, c_pct = delta(scenario, "cpu")
    p_on, p_off, p_pct = delta(scenario, "p99")
    summary.append(f"{scenario}: CPU per request {c_on:.0f} against {c_off:.0f} µs ({c_pct:+.0f} %), "
                   f"p99 {p_on:.2f} against {p_off:.2f} ms ({p_pct:+.0f} %)")

print(f"""<!-- procs:begin (generated by bench/procs.sh; do not edit by hand) -->
## procs: the adaptive processor scaler, on and off

Run: `bench/procs.sh` on {E['RUN_DATE']}, {E['CPU_MODEL']}, {E['NPROC']} CPUs, {E['GO_VERSION']}, shared with other work
(load average {E['LOAD_START']} at the start, {E['LOAD_END']} at the end).

The sidecar as it ships, `-concurrency 2`, a static config with one
STATIC cluster holding `bench/upstream` (the reload scenario's config adds a
10,000-endpoint cluster that nothing dials), access log off; with the
scaler (`-adaptive-procs=true`: Go on one processor until the sidecar uses
0.8 CPUs in a 100 ms window, then on two, back to one after 2 s under half
a CPU) and without (`-adaptive-procs=false`, the default: two processors).
A stream of 1000 req/s (fortio `-c 8 -qps 1000 -uniform`, kept-alive
connections, 1 KiB responses) for {E['SECONDS_RUN']} s after a 1 s warm-up,
alone (steady), with 3 s of new connections as fast as a second fortio
opens them starting about 7 s in (storm: `-c 32 -qps 0 -keepalive=false`),
or with a reload of the config every 4 s (reload: SIGHUP). Latency is the
stream's (fortio, ms); CPU is the sidecar's utime+stime (`/proc/PID/stat`)
over the run, per request served (the stream's and the storm's). Load
generators, sidecar and upstream share the machine's CPUs. {rounds} rounds,
the six runs alternating in each; each cell is the median, with every
round's figure in brackets.

| scenario | scaler | p50 | p99 | p99.9 | max | sidecar CPU µs/request | raises to 2 processors (median) | non-200 |
|---|---|---:|---:|---:|---:|---:|---:|---:|
{table}

With the scaler against without, medians: {"; ".join(summary)}.
<!-- procs:end -->""")
PY
log "wrote $out_md"
