#!/usr/bin/env bash
# What a sidecar costs in memory, measured as what a node pays for it:
# private memory (RssAnon), PSS (/proc/PID/smaps_rollup) and, as root, the
# working set of a memory cgroup of its own (what the kubelet reports and
# evicts by). VmRSS is listed for reference only: its RssFile part is the
# executable's clean page cache, shared by every sidecar of the node.
# Rewrites the memory section of bench/RESULTS.md.
#
# 1. The sidecar with a 1,000-endpoint cluster (bench/lib.sh big_config):
#    started, at 1000 req/s (fortio -c 8 -uniform, as bench/proxy.sh), and
#    5 s after the load; the rounds alternate the default with
#    -release-memory-when-idle=false, and the first of each also waits
#    MESHLET_BENCH_LONG_IDLE (default 130 s: past the runtime's forced
#    collection every 2 minutes; 0 skips it). Then the 1-endpoint config,
#    started.
# 2. What starting costs: the empty Go program against one that imports
#    the Envoy/xDS protobuf packages the sidecar links (after their package
#    initialisation, with every registered descriptor resolved, and with
#    every message type's tables built), the sidecar's package
#    initialisation (GODEBUG=inittrace=1) and its live heap once started,
#    by package (a heap profile taken with GODEBUG=memprofilerate=1).
#
# Usage: bench/memory.sh   (about 10 minutes; MESHLET_BENCH_ROUNDS=N, default 3;
#                           MESHLET_BENCH_KEEP=1 keeps the temporary folder)
# Installs fortio v1.68.2 into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin if
# missing. Ports (127.0.0.1): upstream 18080, sidecar 18111 and 18112, its
# admin/health/prometheus 18193-18195. As root, each sidecar runs in a new
# memory cgroup (cgroup v2, or v1's memory hierarchy), removed after it, and
# the executable is dropped from the page cache before each start, so that
# the cgroup is charged for the binary's pages as a first pod on a node is.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh # ports_free, wait_http, sidecar_config, big_config
export PATH=/usr/local/go/bin:$PATH

CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
FORTIO_VERSION=1.68.2
ROUNDS=${MESHLET_BENCH_ROUNDS:-3}
LONG_IDLE=${MESHLET_BENCH_LONG_IDLE:-130}
LOAD_SECONDS=20
UP=127.0.0.1:18080 PORT=18111 PORT_BIG=18112 ADMIN=18193
repo=$PWD
out_md=bench/RESULTS.md

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-memory-bench.XXXXXX")
pids=()
cgroups=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for p in "${cgroups[@]}"; do rmdir "$p" 2>/dev/null || true; done
  if [ -n "${MESHLET_BENCH_KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[memory.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

fortio=$CACHE/bin/fortio
if [[ $("$fortio" version 2>/dev/null || true) != "$FORTIO_VERSION"* ]]; then
  log "installing fortio v$FORTIO_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin GOFLAGS=-mod=mod go install "fortio.org/fortio@v$FORTIO_VERSION"
fi

log "building the sidecar (as make sidecar) and the upstream"
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar" ./cmd/sidecar
go build -o "$tmp/upstream" ./bench/upstream
ports_free 18080 $PORT $PORT_BIG $ADMIN $((ADMIN + 1)) $((ADMIN + 2)) || die "a port the benchmark needs is taken"

# The memory cgroup hierarchy new cgroups go in ("" when not root or none).
cgroot=
if [ "$(id -u)" = 0 ]; then
  if grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    cgroot=/sys/fs/cgroup
  elif [ -f /sys/fs/cgroup/memory/memory.usage_in_bytes ]; then
    cgroot=/sys/fs/cgroup/memory
  fi
fi
[ -n "$cgroot" ] || log "no memory cgroup (needs root and a memory controller): no working set"
cgversion=$([ "$cgroot" = /sys/fs/cgroup ] && echo 2 || echo 1)

start() { # start NAME CMD...: a background process, its pid in $started
  local name=$1
  shift
  "$@" >"$tmp/$name.out" 2>&1 &
  started=$!
  pids+=("$started")
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# evict FILE: drops FILE's pages from the page cache (they are clean).
evict() {
  python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
}

# sidecar NAME CONFIG [FLAG...]: starts the sidecar in a new memory cgroup
# ($cg; none without one); its pid in $started.
sidecar() {
  local name=$1 cfg=$2
  shift 2
  cg=
  if [ -n "$cgroot" ]; then
    cg=$cgroot/meshlet-bench-$$-$name
    mkdir "$cg"
    cgroups+=("$cg")
    evict "$tmp/sidecar"
  fi
  start "$name" sh -c '[ -z "$1" ] || echo $$ >"$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
    "$tmp/sidecar" run -config "$cfg" -watch 0 "$@"
  wait_http "http://127.0.0.1:$PORT/" || die "$name did not start: $(tail -5 "$tmp/$name.out")"
}
sample() { python3 bench/memstat.py "$1" "${cg:-}" --maps; } # sample PID

# run_big NAME [FLAG...]: the 1,000-endpoint sidecar started (2 s: its
# release after the configuration load runs at 1 s), at 1000 req/s (four
# samples 8-17 s into the 20 s load), 5 s after the load; with
# LONG=SECONDS, again that long after the load. JSON lines into
# $tmp/NAME.jsonl.
run_big() {
  local name=$1 pid f s
  shift
  sidecar "$name" "$tmp/big.yaml" "$@"
  pid=$started
  sleep 2
  echo "{\"phase\": \"started\", \"m\": $(sample "$pid")}" >"$tmp/$name.jsonl"
  "$fortio" load -quiet -c 8 -qps 1000 -uniform -t ${LOAD_SECONDS}s -json "$tmp/$name-load.json" \
    "http://127.0.0.1:$PORT/" >"$tmp/$name-load.log" 2>&1 &
  f=$!
  for s in 8 3 3 3; do
    sleep "$s"
    echo "{\"phase\": \"load\", \"m\": $(sample "$pid")}" >>"$tmp/$name.jsonl"
  done
  wait "$f" || die "fortio through $name failed: $(tail -3 "$tmp/$name-load.log")"
  sleep 5
  echo "{\"phase\": \"idle\", \"m\": $(sample "$pid")}" >>"$tmp/$name.jsonl"
  if [ "${LONG:-0}" -gt 5 ]; then
    sleep $((LONG - 5))
    echo "{\"phase\": \"long\", \"m\": $(sample "$pid")}" >>"$tmp/$name.jsonl"
  fi
  curl -fsS --max-time 5 "http://127.0.0.1:$ADMIN/clusters" >"$tmp/$name.clusters" || die "$name: GET /clusters failed"
  stop "$pid"
  [ -z "$cg" ] || rmdir "$cg"
  log "$name: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f req/s, codes %s" % (d["ActualQPS"], d["RetCodes"]))' "$tmp/$name-load.json")"
}

start upstream "$tmp/upstream" -addr "$UP"
wait_http "http://$UP/" || die "upstream did not start"
big_config $PORT $ADMIN $PORT_BIG >"$tmp/big.yaml"
sidecar_config $PORT $ADMIN >"$tmp/one.yaml"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

for round in $(seq "$ROUNDS"); do
  long=0
  [ "$round" = 1 ] && long=$LONG_IDLE
  log "round $round: default"
  LONG=$long run_big "default@$round"
  log "round $round: -release-memory-when-idle=false"
  LONG=$long run_big "norelease@$round" -release-memory-when-idle=false
done
hosts=$(grep -c '^big::[0-9.:]*::zone::' "$tmp/default@1.clusters" || true)
[ "$hosts" -eq 1000 ] || die "the sidecar reports $hosts hosts in cluster big, want 1000"
for round in $(seq "$ROUNDS"); do
  sidecar "one@$round" "$tmp/one.yaml"
  sleep 2
  echo "{\"phase\": \"started\", \"m\": $(sample "$started")}" >"$tmp/one@$round.jsonl"
  stop "$started"
  [ -z "$cg" ] || rmdir "$cg"
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- start-up
log "start-up: package initialisation and the protobuf registry"
GODEBUG=inittrace=1 "$tmp/sidecar" help 2>"$tmp/inittrace.txt" >/dev/null
# The sidecar's live heap once started, by allocation site (every
# allocation sampled).
start heapprofile env GODEBUG=memprofilerate=1 "$tmp/sidecar" run -config "$tmp/big.yaml" -watch 0
wait_http "http://127.0.0.1:$PORT/" || die "the sidecar did not start"
sleep 2
curl -fsS --max-time 10 -o "$tmp/heap.pb.gz" "http://127.0.0.1:$ADMIN/debug/pprof/heap?gc=1" || die "GET /debug/pprof/heap failed"
stop "$started"
go tool pprof -raw "$tmp/sidecar" "$tmp/heap.pb.gz" >"$tmp/heap.raw" 2>/dev/null
# The two programs, in a module of their own with this one's requirements.
prog=$tmp/initcost
mkdir -p "$prog/empty" "$prog/registry"
sed '1s#.*#module initcost#' go.mod >"$prog/go.mod"
cp go.sum "$prog/"
cat >"$prog/report.go.txt" <<'GO'

// report prints, after a collection that returns the free heap to the
// kernel, the live heap, the heap's spans in use, the bytes allocated so
// far and the private memory (RssAnon), in KiB.
func report(stage string) {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	private := int64(-1)
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssAnon:" {
			private, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{"stage": stage, "heap_live": m.HeapAlloc >> 10,
		"heap_inuse": m.HeapInuse >> 10, "allocated": m.TotalAlloc >> 10, "private": private})
}
GO
imports='import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"'
{
  printf '%s\n)\n\nfunc main() { report("init") }\n' "$imports"
  cat "$prog/report.go.txt"
} | sed '1i package main\n' >"$prog/empty/main.go"
{
  printf '%s\n\n\t"google.golang.org/protobuf/proto"\n\t"google.golang.org/protobuf/reflect/protoreflect"\n\t"google.golang.org/protobuf/reflect/protoregistry"\n\n' "$imports"
  go list -tags grpcnotrace -deps ./cmd/sidecar |
    grep -E '^(github.com/envoyproxy/|github.com/cncf/xds/|google.golang.org/genproto/|cel.dev/expr|google.golang.org/protobuf/types/)' |
    sed 's/.*/\t_ "&"/'
  cat <<'GO'
)

func main() {
	report("init")
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool { walk(fd.Messages()); return true })
	report("descriptors")
	protoregistry.GlobalTypes.RangeMessages(func(mt protoreflect.MessageType) bool {
		proto.Size(mt.New().Interface())
		return true
	})
	report("types")
}

// walk resolves the messages' descriptors (the registry builds them lazily).
func walk(ms protoreflect.MessageDescriptors) {
	for i := range ms.Len() {
		_ = ms.Get(i).Fields().Len()
		walk(ms.Get(i).Messages())
	}
}
GO
  cat "$prog/report.go.txt"
} | sed '1i package main\n' >"$prog/registry/main.go"
n_proto_pkgs=$(grep -c '^	_ "' "$prog/registry/main.go")
(cd "$prog" && CGO_ENABLED=0 go build -trimpath -o empty.bin ./empty && CGO_ENABLED=0 go build -trimpath -o registry.bin ./registry) ||
  die "building the start-up programs failed"
"$prog/empty.bin" >"$tmp/empty.jsonl"
"$prog/registry.bin" >"$tmp/registry.jsonl"
GODEBUG=inittrace=1 "$prog/registry.bin" 2>"$tmp/registry-inittrace.txt" >/dev/null

# ---------------------------------------------------------------- results
export RUN_DATE=$(date -u +%Y-%m-%d) CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^model name[[:space:]]*: //') \
  NPROC=$(nproc) KERNEL=$(uname -r) GO_VERSION=$(go version | cut -d' ' -f3) LOAD_START=$load_start LOAD_END=$load_end \
  ROUNDS LONG_IDLE LOAD_SECONDS CGROOT=$cgroot CGVERSION=$cgversion N_PROTO_PKGS=$n_proto_pkgs \
  BIN_MIB=$(du -m "$tmp/sidecar" | cut -f1) EMPTY_MIB=$(du -m "$prog/empty.bin" | cut -f1) REGISTRY_MIB=$(du -m "$prog/registry.bin" | cut -f1)
python3 - "$tmp" <<'PY' | python3 bench/section.py "$repo/$out_md" memory
import glob, json, os, re, statistics, sys
tmp = sys.argv[1]
E = os.environ
rounds = int(E["ROUNDS"])
mib = lambda kib: kib / 1024
cg = bool(E["CGROOT"])


def phases(name):
    out = {}
    for l in open(os.path.join(tmp, name + ".jsonl")):
        d = json.loads(l)
        out.setdefault(d["phase"], []).append(d["m"])
    return out


def runs(prefix):
    return [phases(f"{prefix}@{i}") for i in range(1, rounds + 1)]


def med(samples, key):
    v = [s[key] for s in samples if s.get(key) is not None]
    return statistics.median(v) if v else None


def cell(samples, key):
    """The median over the rounds of each round's median sample, with the rounds' spread."""
    per = [med(s, key) for s in samples]
    per = [p for p in per if p is not None]
    if not per:
        return "-"
    m = statistics.median(per)
    return f"{mib(m):.1f}" + (f" ({mib(min(per)):.1f}-{mib(max(per)):.1f})" if len(per) > 1 else "")


def row(label, samples):
    return (f"| {label} | {cell(samples, 'private')} | {cell(samples, 'pss')} | "
            f"{cell(samples, 'working_set') if cg else '-'} | {cell(samples, 'vmrss')} | {cell(samples, 'rss_file')} |")


d, n, one = runs("default"), runs("norelease"), runs("one")
P = lambda rs, ph: [r[ph] for r in rs if ph in r]
rows = [
    row("1-endpoint config, started", P(one, "started")),
    row("1,000 endpoints, started", P(d, "started")),
    row("1,000 endpoints, at 1000 req/s", P(d, "load")),
    row("1,000 endpoints, 5 s after the load", P(d, "idle")),
    row(f"1,000 endpoints, {E['LONG_IDLE']} s after the load (first round)", P(d, "long")),
    row("`-release-memory-when-idle=false`: at 1000 req/s", P(n, "load")),
    row("`-release-memory-when-idle=false`: 5 s after the load", P(n, "idle")),
    row(f"`-release-memory-when-idle=false`: {E['LONG_IDLE']} s after the load (first round)", P(n, "long")),
]
if int(E["LONG_IDLE"]) <= 5:
    rows = [r for r in rows if "first round" not in r]
table = "\n".join(rows)

# Where the private memory is, started and under load (default, medians).
def maps(ph):
    keys = list(d[0][ph][0]["maps"])
    return {k: statistics.median(statistics.median(s["maps"][k] for s in r[ph]) for r in d) for k in keys}
mstart, mload = maps("started"), maps("load")
labels = {"data": "the executable's data pages it wrote (.data, .noptrdata)",
          "anonymous": "anonymous mappings (the Go heap with the goroutines' stacks, the runtime's own structures, .bss)",
          "other": "other mappings"}
maps_line = "; ".join(f"{labels[k]} {mib(mstart[k]):.1f} / {mib(mload[k]):.1f}" for k in mstart if mstart[k] or mload[k])

cg_line = ""
if cg:
    s = P(d, "load")
    cg_line = (f"The cgroup (v{E['CGVERSION']}) at 1000 req/s, medians: charged {mib(statistics.median(med(x, 'cg_usage') for x in s)):.1f} MiB, "
               f"of which the inactive page cache (the executable read from disk, subtracted from the working set) "
               f"{mib(statistics.median(med(x, 'cg_inactive_file') for x in s)):.1f} MiB and the active "
               f"{mib(statistics.median(med(x, 'cg_active_file') for x in s)):.1f} MiB; anonymous {mib(statistics.median(med(x, 'cg_anon') for x in s)):.1f} MiB. "
               "The executable's pages the sidecar maps (RssFile) counted as inactive page cache here, outside the working set; "
               "a kernel reclaiming memory that finds them in use moves them to the active list, which can add up to their RssFile.")

peak_private = max(max(x["private"] for x in r["load"]) for r in d)
peak_ws = max(max(x.get("working_set", 0) for x in r["load"]) for r in d) if cg else None
verdict = lambda ok: "**met**" if ok else "**not met**"
goals = [f"| private memory <= 12 MiB (1,000 endpoints, 1000 req/s) | {verdict(mib(peak_private) <= 12)}: "
         f"{cell(P(d, 'load'), 'private')} MiB (rounds' medians), the highest sample {mib(peak_private):.1f} MiB |"]
if cg:
    goals.append(f"| container working set <= 24 MiB | {verdict(mib(peak_ws) <= 24)}: {cell(P(d, 'load'), 'working_set')} MiB "
                 f"(rounds' medians), the highest sample {mib(peak_ws):.1f} MiB |")
else:
    goals.append("| container working set <= 24 MiB | not measured in this run (no memory cgroup) |")

# Start-up: the programs.
def stages(f):
    return {json.loads(l)["stage"]: json.loads(l) for l in open(os.path.join(tmp, f))}
e, r = stages("empty.jsonl"), stages("registry.jsonl")
prog_rows = "\n".join([
    f"| the empty Go program ({E['EMPTY_MIB']} MB) | {mib(e['init']['heap_live']):.1f} | {mib(e['init']['heap_inuse']):.1f} | {mib(e['init']['allocated']):.1f} | {mib(e['init']['private']):.1f} |",
    f"| importing the {E['N_PROTO_PKGS']} Envoy/xDS protobuf packages the sidecar links ({E['REGISTRY_MIB']} MB), after package initialisation | {mib(r['init']['heap_live']):.1f} | {mib(r['init']['heap_inuse']):.1f} | {mib(r['init']['allocated']):.1f} | {mib(r['init']['private']):.1f} |",
    f"| the same, every registered message descriptor resolved | {mib(r['descriptors']['heap_live']):.1f} | {mib(r['descriptors']['heap_inuse']):.1f} | {mib(r['descriptors']['allocated']):.1f} | {mib(r['descriptors']['private']):.1f} |",
    f"| the same, every registered message type's tables built (`proto.Size` of a new one) | {mib(r['types']['heap_live']):.1f} | {mib(r['types']['heap_inuse']):.1f} | {mib(r['types']['allocated']):.1f} | {mib(r['types']['private']):.1f} |",
])

# The sidecar's package initialisation by group (inittrace: heap bytes).
groups = [("Envoy/xDS protobuf packages", r"^(github\.com/envoyproxy/|github\.com/cncf/xds/|google\.golang\.org/genproto/|cel\.dev/expr)"),
          ("protobuf runtime and well-known types", r"^google\.golang\.org/protobuf/"),
          ("gRPC", r"^google\.golang\.org/grpc"),
          ("Prometheus client", r"^github\.com/prometheus/"),
          ("eBPF library", r"^github\.com/cilium/"),
          ("Kubernetes and YAML", r"^(k8s\.io/|sigs\.k8s\.io/|go\.yaml\.in/|gopkg\.in/yaml)"),
          ("meshlet", r"^github\.com/meshlet-dev/"),
          ("the standard library and the rest", r"")]
init = {}
total_b = total_ms = 0
for l in open(os.path.join(tmp, "inittrace.txt")):
    m = re.match(r"init (\S+) @\S+ ms, (\S+) ms clock, (\d+) bytes, (\d+) allocs", l)
    if not m:
        continue
    pkg, ms, b = m.group(1), float(m.group(2)), int(m.group(3))
    total_b += b
    total_ms += ms
    for g, pat in groups:
        if re.search(pat, pkg):
            init[g] = init.get(g, 0) + b
            break
init_line = "; ".join(f"{g} {init[g] / 1024:.0f} KiB" for g, _ in groups if init.get(g))

# The started sidecar's live heap by what allocated it (a stack mentioning
# a group's packages counts for the first group it matches).
heap_groups = [("protobuf descriptors and message tables (Envoy/xDS types)", r"google\.golang\.org/protobuf|github\.com/envoyproxy|github\.com/cncf|google\.golang\.org/genproto|cel\.dev/expr"),
               ("meshlet's configuration, load balancer and data plane", r"github\.com/meshlet-dev/meshlet/"),
               ("regular expressions", r"^regexp"),
               ("Prometheus client", r"github\.com/prometheus/"),
               ("gRPC", r"google\.golang\.org/grpc"),
               ("the rest", r"")]
raw = open(os.path.join(tmp, "heap.raw")).read()
locs, cur = {}, None
for l in raw.split("\nLocations\n", 1)[1].split("\nMappings\n", 1)[0].splitlines():
    m = re.match(r"\s*(\d+): 0x[0-9a-f]+ M=\d+ (\S+)", l)
    if m:
        cur = m.group(1)
        locs[cur] = [m.group(2)]
    elif cur and l.strip():
        locs[cur].append(l.split()[0])  # a function inlined there
heap = {}
live = 0
for m in re.finditer(r"^\s+\d+\s+\d+\s+\d+\s+(\d+): ([\d ]+)$", raw, re.M):
    b = int(m.group(1))
    if not b:
        continue
    live += b
    fns = [f for x in m.group(2).split() for f in locs.get(x, [])]
    for g, pat in heap_groups:
        if any(re.search(pat, f) for f in fns):
            heap[g] = heap.get(g, 0) + b
            break
heap_line = "; ".join(f"{g} {heap[g] / 1024:.0f} KiB ({100 * heap[g] / live:.0f} %)" for g, _ in heap_groups if heap.get(g))

print(f"""<!-- memory:begin (generated by bench/memory.sh; do not edit by hand) -->
## memory: what a sidecar costs a node

Run: `bench/memory.sh` on {E['RUN_DATE']}, {E['CPU_MODEL']}, {E['NPROC']} CPUs, Linux {E['KERNEL']}, {E['GO_VERSION']}
(load average {E['LOAD_START']} at the start, {E['LOAD_END']} at the end).

The sidecar as it ships ({E['BIN_MIB']} MB, static, `-tags grpcnotrace`), 2 workers, with
a static config: a listener to the 1-endpoint cluster `upstream` (`bench/upstream`)
and a second listener routed to a STATIC round-robin cluster of 1,000
endpoints in three zones (never dialled, no health checks), access log off.
Each sidecar starts afresh{' in a memory cgroup of its own (cgroup v' + E['CGVERSION'] + '), after its executable was dropped from the page cache, so that the cgroup is charged for the pages it reads as the first pod of a node is' if cg else ''}.
Sampled 2 s after the start (after the release that follows the configuration
load), four times between 8 and 17 s into {E['LOAD_SECONDS']} s at 1000 req/s (fortio `-c 8
-qps 1000 -uniform`, kept-alive connections, 1 KiB responses), and 5 s after the
load; {rounds} round(s) alternating the default with `-release-memory-when-idle=false`.
Each cell: the median of the rounds (of each round's median sample) and the
rounds' range, in MiB.

- **private** = RssAnon (`/proc/PID/status`): heap, stacks, the runtime's own
  memory, written data pages. Every sidecar of a node pays it again.
- **PSS** (`/proc/PID/smaps_rollup`): private memory plus each shared page
  divided by the processes mapping it. Here one sidecar maps its executable
  alone; with N sidecars on a node, the file part is divided by N.
- **working set**: the memory cgroup's charge less its inactive page cache
  (v2 `memory.current` − `inactive_file`, v1 `memory.usage_in_bytes` −
  `total_inactive_file`), what the kubelet reports and evicts by.
- VmRSS and its RssFile part, for reference only: RssFile is the
  executable's clean pages that the process maps, shared with every other
  sidecar running the same binary and reclaimable.

| sidecar | private | PSS | working set | VmRSS | of which RssFile |
|---|---:|---:|---:|---:|---:|
{table}

Where the private memory is (default, started / at 1000 req/s, MiB, from
`/proc/PID/smaps`): {maps_line}.
{cg_line}

### What starting costs

Each program reports after a garbage collection that returned the free heap
to the kernel; KiB shown as MiB:

| program | live heap | heap spans in use | allocated so far | private (RssAnon) |
|---|---:|---:|---:|---:|
{prog_rows}

The sidecar's package initialisation (`GODEBUG=inittrace=1 sidecar help`)
allocates {total_b / 1024:.0f} KiB in {total_ms:.1f} ms: {init_line}.
The registry builds a message's descriptor and tables lazily, at its
first use: what the sidecar resolves depends on the Envoy types its
configuration uses.

The started sidecar's live heap with the 1,000-endpoint config, by what
allocated it (`/debug/pprof/heap` with every allocation sampled,
`GODEBUG=memprofilerate=1`): {live / 1024:.0f} KiB in all; {heap_line}.

### Goals

| goal | result |
|---|---|
{chr(10).join(goals)}
<!-- memory:end -->""")
PY
log "wrote $out_md"
