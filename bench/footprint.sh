#!/usr/bin/env bash
# What one HTTP/1.1 request through the sidecar touches: the instructions
# it executes, the distinct cache lines (64 bytes) of code and of data,
# and the distinct transfers of control (taken branches, calls, returns),
# from valgrind's lackey
# trace of every instruction fetch, load and store (bench/footprint).
# At low load each wake-up finds the caches cold, so this is what a
# request's CPU follows there; unlike CPU time it does not depend on what
# else the machine runs, so two builds compare in one run.
#
# The sidecar runs proxy.sh's static config with one worker under
# valgrind (about a hundred times slower), GOGC=off (at 1000 req/s no
# collection runs in 10 s), memory release when idle off; the requests
# start once the release after start-up (a forced collection) is over. Two constants
# are lengthened in the measured build, for the same reason: the worker
# clock's tick (25 ms) and the client-gone watch's delay (2 ms) would
# fire in every request's window at valgrind's speed, where at full speed
# the tick comes once per 25 requests at 1000 req/s and the watch after
# the request has been answered. Requests are sent one after the other on
# one kept-alive connection; the window of a request runs from one
# (*worker).serveRequest to the next, the first 10 are dropped and a line
# counts when 80 % of the others touch it.
#
# Usage: bench/footprint.sh                 (the work tree; about a minute a build)
#        MESHLET_BENCH_BASE=REV bench/footprint.sh   also git revision REV
#        MESHLET_BENCH_KEEP=1 bench/footprint.sh     keeps the temporary folder
# Rewrites the footprint section of bench/RESULTS.md. Installs valgrind
# (apt) when missing. Ports: upstream 127.0.0.1:18080, sidecar 18101,
# its admin ports 18190-18192.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh # ports_free, sidecar_config
export PATH=/usr/local/go/bin:$PATH
BASE=${MESHLET_BENCH_BASE:-}
REQUESTS=40
MARKER='github.com/meshlet-dev/meshlet/dataplane.(*worker).serveRequest'
UP=127.0.0.1:18080
log() { echo "footprint.sh: $*" >&2; }
die() { log "$*"; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-footprint.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  git worktree remove --force "$tmp/base-src" 2>/dev/null || true
  if [ -n "${MESHLET_BENCH_KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

command -v valgrind >/dev/null || { log "installing valgrind"; apt-get install -y valgrind >/dev/null; }
ports_free 18080 18101 18190 18191 18192

# build SRC OUT: the sidecar from source tree SRC with the two constants
# lengthened (and checked: a renamed constant must fail here, not
# silently measure timers).
build() {
  sed -i 's/^\(\s*Tick = \)25 \* time.Millisecond/\125 * time.Second/' "$1/dataplane/internal/clock/clock.go"
  sed -i 's/^\(\s*dcWatchDelay = \)2 \* time.Millisecond/\120 * time.Second/' "$1/dataplane/internal/h1server/server.go"
  grep -q 'Tick = 25 \* time.Second' "$1/dataplane/internal/clock/clock.go" || die "$1: the clock's Tick constant was not found"
  grep -q 'dcWatchDelay = 20 \* time.Second' "$1/dataplane/internal/h1server/server.go" || die "$1: dcWatchDelay was not found"
  (cd "$1" && go build -tags grpcnotrace -o "$2" ./cmd/sidecar)
}
mkdir "$tmp/src"
git ls-files -co --exclude-standard -z | tar -c --null -T - -f - | tar -x -C "$tmp/src" -f -
build "$tmp/src" "$tmp/sidecar"
builds=(meshlet)
if [ -n "$BASE" ]; then
  base_rev=$(git rev-parse --short "$BASE")
  git worktree add -q --detach "$tmp/base-src" "$base_rev"
  build "$tmp/base-src" "$tmp/sidecar-base"
  builds+=("meshlet@$base_rev")
fi
go build -o "$tmp/footprint" ./bench/footprint
go build -o "$tmp/upstream" ./bench/upstream
sidecar_config 18101 18190 >"$tmp/meshlet.yaml"

"$tmp/upstream" -addr "$UP" >"$tmp/upstream.out" 2>&1 &
pids+=($!)
wait_http "http://$UP/" || die "the upstream did not start"

# measure NAME BINARY: one traced run, its summary in $tmp/NAME.json.
measure() {
  local name=$1 bin=$2 fifo=$tmp/trace.fifo vg fp i
  log "$name: tracing $REQUESTS requests under valgrind"
  rm -f "$fifo" && mkfifo "$fifo"
  "$tmp/footprint" -bin "$bin" -marker "$MARKER" -skip 10 -top 0 <"$fifo" >"$tmp/$name.json" &
  fp=$!
  GOGC=off GODEBUG=asyncpreemptoff=1,gctrace=1 valgrind --tool=lackey --trace-mem=yes --log-file="$fifo" \
    "$bin" run -config "$tmp/meshlet.yaml" -watch 0 -concurrency 1 -release-memory-when-idle=false \
    >"$tmp/$name.out" 2>&1 &
  vg=$!
  pids+=("$vg" "$fp")
  for i in $(seq 240); do
    curl -fsS -o /dev/null --max-time 5 http://127.0.0.1:18101/ 2>/dev/null && break
    kill -0 "$vg" 2>/dev/null || die "$name: the sidecar exited under valgrind (see $tmp/$name.out)"
    sleep 0.5
  done
  # The one collection: the release a second after the configuration
  # loads (debug.FreeOSMemory). It must be over before the requests, or
  # its marking (slowed a hundredfold) overlaps them.
  for i in $(seq 240); do
    grep -q '(forced)' "$tmp/$name.out" && break
    [ "$i" = 240 ] && die "$name: no forced collection within 120 s (see $tmp/$name.out)"
    sleep 0.5
  done
  python3 - "$REQUESTS" <<'PY'
import importlib.util, socket, sys
spec = importlib.util.spec_from_file_location("pages", "bench/pages.py")
pages = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pages)
sock = socket.create_connection(("127.0.0.1", 18101))
for _ in range(int(sys.argv[1])):
    pages.exchange(sock)
PY
  kill "$vg"
  wait "$vg" 2>/dev/null || true
  wait "$fp" || die "$name: footprint failed"
  pids=("${pids[0]}") # the upstream's; the two above are gone
}
measure meshlet "$tmp/sidecar"
[ -n "$BASE" ] && measure "meshlet@$base_rev" "$tmp/sidecar-base"

python3 - "$tmp" "${builds[@]}" <<'PY' | python3 bench/section.py bench/RESULTS.md footprint
import datetime, json, os, platform, subprocess, sys
tmp, names = sys.argv[1], sys.argv[2:]
r = {n: json.load(open(os.path.join(tmp, n + ".json"))) for n in names}
vg = subprocess.run(["valgrind", "--version"], capture_output=True, text=True).stdout.strip()
go = subprocess.run(["go", "version"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
short = lambda s: s.replace("github.com/meshlet-dev/meshlet/", "")
print("<!-- footprint:begin (generated by bench/footprint.sh) -->")
print("## footprint: what one request touches (code and data, in cache lines)\n")
print(f"Run: `bench/footprint.sh` on {datetime.date.today()}, {cpu}; {vg}; {go}.\n")
print("One HTTP/1.1 GET through the sidecar (proxy.sh's static config, one worker) on a kept-alive")
print("connection, traced by valgrind's lackey; a line (64 bytes) counts when 80 % of the requests")
print("after the first 10 touch it (garbage collection and preemption, which a program slowed")
print("a hundredfold does all the time, left out; `bench/footprint.sh` says why and how).\n")
print("| build | requests | instructions | code lines (KiB) | code pages | jumps | data lines (KiB) | data pages |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for n in names:
    x = r[n]
    print(f"| {n} | {x['windows']} | {x['instructions']:,} | {x['code_lines']} ({x['code_lines'] * 64 / 1024:.1f}) | {x['code_pages']} | {x['jumps']} | {x['data_lines']} ({x['data_lines'] * 64 / 1024:.1f}) | {x['data_pages']} |")
print("\n(instructions: executed in the median request, the work it takes at any load; jumps: the")
print("distinct transfers of control, taken branches, calls and returns, each an entry of the")
print("branch predictors, which a wake-up at low load finds cold.)")
m = r[names[0]]
print(f"\nInstructions of `{names[0]}`'s mean request by package (the first 15) and by function (the first 20):\n")
print("| package | instructions |\n|---|---:|")
for c in m["instructions_by_package"][:15]:
    print(f"| {short(c['name'])} | {c['lines']:,} |")
print("\n| function | instructions |\n|---|---:|")
for c in m["instructions_by_function"][:20]:
    print(f"| `{short(c['name'])}` | {c['lines']:,} |")
print(f"\nCode lines of `{names[0]}` by package (the first 15):\n")
print("| package | lines |\n|---|---:|")
for c in m["code_by_package"][:15]:
    print(f"| {short(c['name'])} | {c['lines']} |")
print("\nBy function (the first 20):\n")
print("| function | lines |\n|---|---:|")
for c in m["code_by_function"][:20]:
    print(f"| `{short(c['name'])}` | {c['lines']} |")
print("\nData lines by where they lie:\n")
print("| region | lines |\n|---|---:|")
for c in m["data_by_region"]:
    print(f"| {c['name']} | {c['lines']} |")
print("\nData lines by the function whose instruction touches each first (the first 20):\n")
print("| function | lines |\n|---|---:|")
for c in m["data_by_function"][:20]:
    print(f"| `{short(c['name'])}` | {c['lines']} |")
print("<!-- footprint:end -->")
PY
log "bench/RESULTS.md: footprint section rewritten"
