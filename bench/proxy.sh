#!/usr/bin/env bash
# Compares meshlet's HTTP/1.1 data plane with haproxy and nginx on loopback:
# max throughput, latency at a fixed 1000 req/s, proxy CPU time per request (and its user part)
# and the pages each touches per request. Rewrites the proxy section of
# bench/RESULTS.md and bench/proxy.png. The sidecar's memory is
# bench/memory.sh's.
#
# Every proxy runs with 1 and with 2 workers (threads, worker processes,
# Go processors), the scenarios alternating within each round.
#
# Usage: bench/proxy.sh        (one run of 3 alternating rounds, about 15 minutes
#                               once tools are installed; MESHLET_BENCH_ROUNDS=N,
#                               MESHLET_BENCH_WORKERS="1 2")
#        MESHLET_BENCH_BASE=REV bench/proxy.sh   also runs meshlet built from
#                               git revision REV ("meshlet@REV" rows), alternating
#                               with the work tree's build: a refactor's CPU cost
#        MESHLET_BENCH_KEEP=1 bench/proxy.sh   keeps the temporary folder (logs, JSON)
#
# Installs what is missing: apt packages haproxy, nginx, gnuplot-nox, and
# fortio v1.68.2 into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin (reused).
# Everything else lives in a temporary folder removed at exit; every process
# started here is stopped at exit.
#
# Ports (127.0.0.1): upstream 18080, meshlet 18101, haproxy 18102, nginx 18103,
# the Go floor (bench/floor) 18104,
# meshlet admin/health/prometheus 18190-18192.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh # ports_free, wait_http, sidecar_config
export PATH=/usr/local/go/bin:$PATH

CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
FORTIO_VERSION=1.68.2
DURATION=${MESHLET_BENCH_DURATION:-10s}
ROUNDS=${MESHLET_BENCH_ROUNDS:-3}
WORKERS=${MESHLET_BENCH_WORKERS:-1 2}
BASE=${MESHLET_BENCH_BASE:-}
UP=127.0.0.1:18080
PORT_MESHLET=18101 PORT_HAPROXY=18102 PORT_NGINX=18103 PORT_FLOOR=18104
out_md=bench/RESULTS.md
out_png=bench/proxy.png

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-proxy-bench.XXXXXX")
pids=()
worktree=""
cleanup() {
  local p
  [ -n "$worktree" ] && git worktree remove --force "$worktree" 2>/dev/null
  for p in "${pids[@]}"; do
    kill "$p" 2>/dev/null || true
  done
  for p in "${pids[@]}"; do
    wait "$p" 2>/dev/null || true
  done
  if [ -n "${MESHLET_BENCH_KEEP:-}" ]; then
    log "kept $tmp"
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[proxy.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- tools
need_apt=()
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
command -v gnuplot >/dev/null || need_apt+=(gnuplot-nox)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >"$tmp/apt.log" 2>&1 ||
    { tail -20 "$tmp/apt.log" >&2; die "apt-get install ${need_apt[*]} failed"; }
fi
export PATH=$PATH:/usr/sbin
fortio=$CACHE/bin/fortio
have=$("$fortio" version 2>/dev/null || true)
if [[ $have != "$FORTIO_VERSION"* ]]; then
  log "installing fortio v$FORTIO_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin GOFLAGS=-mod=mod go install "fortio.org/fortio@v$FORTIO_VERSION"
fi
clk_tck=$(getconf CLK_TCK)

# ---------------------------------------------------------------- builds
log "building sidecar and upstream"
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar" ./cmd/sidecar # as `make sidecar`
go build -o "$tmp/upstream" ./bench/upstream
base_name=""
if [ -n "$BASE" ]; then
  base_rev=$(git rev-parse --verify --short "$BASE^{commit}") || die "MESHLET_BENCH_BASE=$BASE is no commit"
  base_name="meshlet@$base_rev"
  log "building the sidecar at $base_rev (git worktree in $tmp/base)"
  worktree=$tmp/base # removed by cleanup too, should the build fail
  git worktree add -q --detach "$worktree" "$base_rev"
  (cd "$worktree" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar-base" ./cmd/sidecar)
  git worktree remove --force "$worktree"
  worktree=""
fi
go build -o "$tmp/floor" ./bench/floor

ports_free 18080 $PORT_MESHLET $PORT_HAPROXY $PORT_NGINX $PORT_FLOOR 18190 18191 18192 ||
  die "a port the benchmark needs is taken"

# ---------------------------------------------------------------- helpers

# cpu_ticks PID...: "utime stime" (clock ticks) summed over the processes.
cpu_ticks() {
  local p s u=0 k=0 rest
  for p in "$@"; do
    s=$(cat "/proc/$p/stat") || die "process $p is gone"
    rest=${s##*) } # fields after "pid (comm) "; comm may hold spaces
    read -r -a f <<<"$rest"
    # f[0] is field 3 (state): utime is field 14, stime field 15.
    u=$((u + f[11]))
    k=$((k + f[12]))
  done
  echo "$u $k"
}

# proc_group PID: the process and its children (nginx master + workers).
proc_group() {
  echo "$1"
  pgrep -P "$1" || true
}

# run_fortio NAME KIND URL PID...: one fortio run (KIND max or fixed) with the
# proxy processes' CPU ticks measured around it; writes $tmp/NAME-KIND.json
# and $tmp/NAME-KIND.ticks (user and system ticks).
run_fortio() {
  local name=$1 kind=$2 url=$3
  shift 3
  local args=(-c 16 -qps 0)
  [ "$kind" = fixed ] && args=(-c 8 -qps 1000 -uniform)
  local before="0 0" after="0 0"
  [ $# -gt 0 ] && before=$(cpu_ticks "$@")
  "$fortio" load -quiet "${args[@]}" -t "$DURATION" -r 0.00001 -p 50,90,99 \
    -json "$tmp/$name-$kind.json" "$url" >"$tmp/$name-$kind.log" 2>&1 ||
    { tail -5 "$tmp/$name-$kind.log" >&2; die "fortio $name $kind failed"; }
  [ $# -gt 0 ] && after=$(cpu_ticks "$@")
  local u0 k0 u1 k1
  read -r u0 k0 <<<"$before"
  read -r u1 k1 <<<"$after"
  echo "$((u1 - u0)) $((k1 - k0))" >"$tmp/$name-$kind.ticks"
  log "$name $kind: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f qps, codes %s" % (d["ActualQPS"], d["RetCodes"]))' "$tmp/$name-$kind.json")"
}

# scenario NAME URL PID...: warm-up, then the two measured runs.
scenario() {
  local name=$1 url=$2
  shift 2
  wait_http "$url" || die "$name: $url does not answer 200"
  "$fortio" load -quiet -c 16 -qps 0 -t 1s "$url" >"$tmp/$name-warmup.log" 2>&1 || true
  run_fortio "$name" max "$url" "$@"
  run_fortio "$name" fixed "$url" "$@"
}

start() { # start NAME CMD...: background process, pid in $started
  local name=$1
  shift
  "$@" >"$tmp/$name.out" 2>&1 &
  started=$!
  pids+=("$started")
}

stop() { # stop PID: and forget it, so that cleanup never signals a reused pid
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local p kept=()
  for p in "${pids[@]}"; do
    [ "$p" = "$1" ] || kept+=("$p")
  done
  pids=("${kept[@]}")
}


loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
load_start=$(loadavg)

# ---------------------------------------------------------------- upstream
start upstream "$tmp/upstream" -addr "$UP"
wait_http "http://$UP/" || die "upstream did not start (see log: $(cat "$tmp/upstream.out"))"

# ---------------------------------------------------------------- the runs
# Each scenario runs ROUNDS times, all of them alternating within a
# round, each proxy started afresh per round and worker count; the table
# gives medians (one run of a proxy varies by 10-20 % on a shared machine).
# A scenario's name is PROXY-wN (N workers), its run's PROXY-wN@ROUND.
bench_direct() { # bench_direct ROUND
  log "direct, round $1"
  scenario "direct@$1" "http://$UP/"
}

sidecar_config $PORT_MESHLET 18190 >"$tmp/meshlet.yaml"
bench_meshlet() { # bench_meshlet ROUND WORKERS [NAME BINARY]
  local name=${3:-meshlet} bin=${4:-$tmp/sidecar}
  log "$name, $2 workers, round $1"
  start "$name-w$2" "$bin" run -config "$tmp/meshlet.yaml" -watch 0 -concurrency "$2"
  local pid=$started
  scenario "$name-w$2@$1" "http://127.0.0.1:$PORT_MESHLET/" "$pid"
  curl -fsS --max-time 2 "http://127.0.0.1:18190/stats" >"$tmp/$name-w$2-stats.txt" 2>/dev/null || true
  stop "$pid"
}

haproxy_cfg() { # haproxy_cfg THREADS
  cat <<CFG
global
    nbthread $1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend bench
    bind 127.0.0.1:$PORT_HAPROXY
    default_backend upstream
backend upstream
    http-reuse always
    server up $UP
CFG
}
for n in $WORKERS; do
  haproxy_cfg "$n" >"$tmp/haproxy-$n.cfg"
  haproxy -c -q -f "$tmp/haproxy-$n.cfg" || die "haproxy config check failed"
done
bench_haproxy() { # bench_haproxy ROUND WORKERS
  log "haproxy, $2 threads, round $1"
  start "haproxy-w$2" haproxy -db -f "$tmp/haproxy-$2.cfg"
  local pid=$started
  scenario "haproxy-w$2@$1" "http://127.0.0.1:$PORT_HAPROXY/" "$pid"
  stop "$pid"
}

mkdir -p "$tmp/nginx/logs" "$tmp/nginx/tmp"
nginx_cfg() { # nginx_cfg WORKER_PROCESSES
  cat <<CFG
worker_processes $1;
daemon off;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $tmp/nginx/tmp/body;
    proxy_temp_path $tmp/nginx/tmp/proxy;
    fastcgi_temp_path $tmp/nginx/tmp/fastcgi;
    uwsgi_temp_path $tmp/nginx/tmp/uwsgi;
    scgi_temp_path $tmp/nginx/tmp/scgi;
    # nginx closes a keep-alive connection after 1000 requests by default;
    # the other proxies do not, so lift the limit on both sides.
    keepalive_requests 1000000;
    upstream upstream {
        server $UP;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$PORT_NGINX;
        location / {
            proxy_pass http://upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CFG
}
for n in $WORKERS; do
  nginx_cfg "$n" >"$tmp/nginx/nginx-$n.conf"
  nginx -t -q -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx/nginx-$n.conf" || die "nginx config check failed"
done
start_nginx() { # start_nginx WORKERS: the master's pid in $started, all pids in $nginx_pids
  start "nginx-w$1" nginx -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx/nginx-$1.conf"
  wait_http "http://127.0.0.1:$PORT_NGINX/" || die "nginx did not start"
  mapfile -t nginx_pids < <(proc_group "$started")
  [ ${#nginx_pids[@]} -ge $(($1 + 1)) ] || die "nginx: expected a master and $1 workers, found pids ${nginx_pids[*]}"
}
bench_nginx() { # bench_nginx ROUND WORKERS
  log "nginx, $2 worker processes, round $1"
  start_nginx "$2"
  local pid=$started
  scenario "nginx-w$2@$1" "http://127.0.0.1:$PORT_NGINX/" "${nginx_pids[@]}"
  stop "$pid"
}

bench_floor() { # bench_floor ROUND WORKERS
  log "Go floor, GOMAXPROCS=$2, round $1"
  start "floor-w$2" env GOMAXPROCS="$2" "$tmp/floor" -listen "127.0.0.1:$PORT_FLOOR" -upstream "$UP"
  local pid=$started
  scenario "floor-w$2@$1" "http://127.0.0.1:$PORT_FLOOR/" "$pid"
  stop "$pid"
}

for round in $(seq "$ROUNDS"); do
  bench_direct "$round"
  for n in $WORKERS; do
    bench_meshlet "$round" "$n"
    [ -n "$base_name" ] && bench_meshlet "$round" "$n" "$base_name" "$tmp/sidecar-base"
    bench_haproxy "$round" "$n"
    bench_nginx "$round" "$n"
    bench_floor "$round" "$n"
  done
done

load_end=$(loadavg)

# ---------------------------------------------------------------- pages per request
# pages_run NAME PORT PID...: after a 1 s warm-up at 1000 rps, the pages the
# proxy's processes touch to serve one request on a kept-alive connection
# (bench/pages.py, median of 7) into $tmp/NAME.pages.
pages_run() {
  local name=$1 port=$2
  shift 2
  wait_http "http://127.0.0.1:$port/" || die "$name: port $port does not answer 200"
  "$fortio" load -quiet -c 8 -qps 1000 -t 1s "http://127.0.0.1:$port/" >/dev/null 2>&1 || true
  python3 bench/pages.py "$port" 7 "$@" >"$tmp/$name.pages" || die "pages.py $name failed"
  log "$name: pages per request $(cat "$tmp/$name.pages")"
}
pages_w=${WORKERS##* }
log "pages touched per request ($pages_w workers)"
start meshlet-pages "$tmp/sidecar" run -config "$tmp/meshlet.yaml" -watch 0 -concurrency "$pages_w"
pages_run meshlet $PORT_MESHLET "$started"
stop "$started"
start haproxy-pages haproxy -db -f "$tmp/haproxy-$pages_w.cfg"
pages_run haproxy $PORT_HAPROXY "$started"
stop "$started"
start_nginx "$pages_w"
nginx_pid=$started
pages_run nginx $PORT_NGINX "${nginx_pids[@]}"
stop "$nginx_pid"
start floor-pages env GOMAXPROCS="$pages_w" "$tmp/floor" -listen "127.0.0.1:$PORT_FLOOR" -upstream "$UP"
pages_run floor $PORT_FLOOR "$started"
stop "$started"
if grep -qw pcid /proc/cpuinfo; then
  pcid="this CPU has process-context identifiers (\`pcid\`): a switch between processes keeps their TLB entries"
else
  pcid="this CPU has no process-context identifiers (no \`pcid\` flag in /proc/cpuinfo): every switch between processes empties the TLB of the process's entries, so each page a wake-up touches costs a page-table walk"
fi

# ---------------------------------------------------------------- results
haproxy_version=$(haproxy -v 2>&1 | sed -n 1p)
nginx_version=$(nginx -v 2>&1 | sed -n 1p)
fortio_version=$("$fortio" version 2>&1 | sed -n 1p)
go_version=$(go version)
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^model name[[:space:]]*: //')

export WORKERS BASE_NAME=$base_name
python3 - "$tmp" "$clk_tck" "$ROUNDS" <<'PY'
import json, statistics, sys, os
tmp, tck = sys.argv[1], int(sys.argv[2])
rounds = int(sys.argv[3])
workers = os.environ["WORKERS"].split()
proxies = ["meshlet"] + ([os.environ["BASE_NAME"]] if os.environ.get("BASE_NAME") else []) + ["haproxy", "nginx", "floor"]
rows = []
for name in ["direct"] + [f"{p}-w{n}" for n in workers for p in proxies]:
    r = {"name": name}
    for kind in ["max", "fixed"]:
        runs = []
        for i in range(1, rounds + 1):
            d = json.load(open(os.path.join(tmp, f"{name}@{i}-{kind}.json")))
            h = d["DurationHistogram"]
            pct = {p["Percentile"]: p["Value"] for p in h["Percentiles"]}
            n = h["Count"]
            uticks, sticks = map(int, open(os.path.join(tmp, f"{name}@{i}-{kind}.ticks")).read().split())
            ticks = uticks + sticks
            codes = d.get("RetCodes", {})
            runs.append(dict(qps=d["ActualQPS"], p50=pct[50] * 1e3, p90=pct[90] * 1e3, p99=pct[99] * 1e3,
                             cpu=(ticks / tck * 1e6 / n) if name != "direct" and n else None,
                             ucpu=(uticks / tck * 1e6 / n) if name != "direct" and n else None,
                             bad=sum(v for k, v in codes.items() if str(k) != "200"), codes=codes))
        med = lambda key: statistics.median(x[key] for x in runs) if runs[0][key] is not None else None
        codes = {}
        for x in runs:
            for k, v in x["codes"].items():
                codes[k] = codes.get(k, 0) + v
        r[kind] = dict(qps=med("qps"), p50=med("p50"), p90=med("p90"), p99=med("p99"), cpu=med("cpu"), ucpu=med("ucpu"),
                       cpus=[x["cpu"] for x in runs], bad=sum(x["bad"] for x in runs), codes=codes)
    rows.append(r)
json.dump(rows, open(os.path.join(tmp, "rows.json"), "w"))
PY
python3 - "$tmp" >"$tmp/cpu.dat" <<'PY'
import json, sys, os
rows = json.load(open(os.path.join(sys.argv[1], "rows.json")))
print("# name cpu_max_us cpu_1000rps_us p50_us p99_us")
for r in rows:
    cm = r["max"]["cpu"]; cf = r["fixed"]["cpu"]
    print(r["name"].replace("meshlet@", "base-"), "%.2f" % (cm or 0), "%.2f" % (cf or 0), "%.1f" % (r["fixed"]["p50"] * 1e3), "%.1f" % (r["fixed"]["p99"] * 1e3))
PY
nrows=$(($(wc -l <"$tmp/cpu.dat") - 1))

run_date=$(date -u +%Y-%m-%d)
gnuplot <<GP
set terminal pngcairo size 1600,640 font "DejaVu Sans,11"
set output "$out_png"
set multiplot layout 1,2 title "meshlet vs haproxy vs nginx (and the Go floor), 1 and 2 workers (-wN), HTTP/1.1 keep-alive on loopback, 1 KiB responses (fortio ${FORTIO_VERSION}, ${run_date}, 2 cores)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set yrange [0:*]
set offsets 0, 0, graph 0.1, 0
set key below horizontal
set xtics rotate by -30
set title "Proxy CPU time per request (lower is better)"
set ylabel "CPU µs / request (all proxy processes)"
set xrange [-0.6:$nrows-1.4]
plot "< tail -n +3 $tmp/cpu.dat" using 2:xtic(1) title "max throughput (c=16)" lc rgb "#4477aa", \
     "" using 3 title "1000 req/s (c=8)" lc rgb "#ee7733", \
     "" using (\$0-1.0/6):2:(sprintf("%.0f",\$2)) with labels offset 0,0.7 notitle, \
     "" using (\$0+1.0/6):3:(sprintf("%.0f",\$3)) with labels offset 0,0.7 notitle
set title "Latency at 1000 req/s, c=8 (lower is better)"
set ylabel "latency µs"
set xrange [-0.6:$nrows-0.4]
plot "< tail -n +2 $tmp/cpu.dat" using 4:xtic(1) title "p50" lc rgb "#228833", \
     "" using 5 title "p99" lc rgb "#aa3377", \
     "" using (\$0-1.0/6):4:(sprintf("%.0f",\$4)) with labels offset 0,0.7 notitle, \
     "" using (\$0+1.0/6):5:(sprintf("%.0f",\$5)) with labels offset 0,0.7 notitle
unset multiplot
GP

export RUN_DATE=$run_date CPU_MODEL=$cpu_model NPROC=$(nproc) LOAD_START=$load_start LOAD_END=$load_end \
  HAPROXY_VERSION=$haproxy_version NGINX_VERSION=$nginx_version FORTIO_VERSION_OUT=$fortio_version \
  GO_VERSION=$go_version UP DURATION ROUNDS PCID="$pcid" PAGES_W=$pages_w
python3 - "$tmp" "$out_md" <<'PY'
import json, os, re, sys
tmp, path = sys.argv[1], sys.argv[2]
E = os.environ
rows = {r["name"]: r for r in json.load(open(os.path.join(tmp, "rows.json")))}
workers = E["WORKERS"].split()
base = E.get("BASE_NAME", "")
proxies = ["meshlet"] + ([base] if base else []) + ["haproxy", "nginx", "floor"]


def ms(v):
    return "%.3f" % v


def us(v):
    return "-" if v is None else "%.1f" % v


def row(label, r, w="-"):
    m, f = r["max"], r["fixed"]
    return (f"| {label} | {w} | {m['qps']:.0f} | {ms(f['p50'])} | {ms(f['p90'])} | {ms(f['p99'])} "
            f"| {us(m['cpu'])} | {us(f['cpu'])} | {m['bad'] + f['bad']} |")


lines = [row("direct", rows["direct"])]
for n in workers:
    for p in proxies:
        lines.append(row(f"`{p}`" if p == base else p, rows[f"{p}-w{n}"], n))
table = "\n".join(lines)
cpu_rounds = "CPU µs per request in each round (max throughput / 1000 rps): " + "; ".join(
    f"{p} ({n}w) " + ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(rows[f"{p}-w{n}"]["max"]["cpus"], rows[f"{p}-w{n}"]["fixed"]["cpus"]))
    for n in workers for p in proxies) + "."
user_line = ("Of which user time (the rest is the kernel's: system calls, loopback TCP, wake-ups), "
             "medians, max throughput / 1000 rps: " + "; ".join(
    f"{p} ({n}w) {rows[f'{p}-w{n}']['max']['ucpu']:.1f}/{rows[f'{p}-w{n}']['fixed']['ucpu']:.1f}" for n in workers for p in proxies) + ".")

pages = {n: json.load(open(os.path.join(tmp, n + ".pages"))) for n in ["meshlet", "haproxy", "nginx", "floor"]}
pages_table = "\n".join(
    f"| {n} | {p['total']:.0f} | {p['code']:.0f} | {p['library_code']:.0f} | {p['read_only']:.0f} | {p['writable']:.0f} |"
    for n, p in pages.items())


def verdict(ok):
    return "**met**" if ok else "**not met**"


non200 = [k for k in rows if rows[k]["max"]["bad"] + rows[k]["fixed"]["bad"]]
if non200:
    codes_line = "**Non-200 responses** (fortio RetCodes): " + "; ".join(
        f"{k}: max {rows[k]['max']['codes']}, 1000 rps {rows[k]['fixed']['codes']}" for k in non200) + "."
else:
    codes_line = "Every response in every run was a 200 (fortio RetCodes)."

goal_rows = []
for n in workers:
    for kind, label in [("max", "max throughput"), ("fixed", "1000 rps")]:
        me = rows[f"meshlet-w{n}"][kind]["cpu"]
        ha = rows[f"haproxy-w{n}"][kind]["cpu"]
        ng = rows[f"nginx-w{n}"][kind]["cpu"]
        fl = rows[f"floor-w{n}"][kind]["cpu"]
        best, bname = min((ha, "haproxy"), (ng, "nginx"))
        goal_rows.append(f"| {n} | {label} | {me:.1f} | {ha:.1f} | {ng:.1f} | {me / best:.2f}x {bname} | {verdict(me <= best)} | {fl:.1f} ({me - fl:+.1f}) |")
goal_table = "\n".join(goal_rows)
base_line = ""
if base:
    cells = []
    for n in workers:
        for kind, label in [("max", "max"), ("fixed", "1000 rps")]:
            a, b = rows[f"meshlet-w{n}"][kind]["cpu"], rows[f"{base}-w{n}"][kind]["cpu"]
            cells.append(f"{n}w {label} {a:.1f} vs {b:.1f} ({a / b:.2f}x)")
    base_line = (f"\n\nThe work tree's build against `{base}` (the same harness, alternating in every round), "
                 "CPU µs per request: " + "; ".join(cells) + ".")
section = f"""<!-- proxy:begin (generated by bench/proxy.sh; do not edit by hand) -->
## proxy: meshlet vs haproxy and nginx (HTTP/1.1 on loopback)

Run: `bench/proxy.sh` on {E['RUN_DATE']}, {E['CPU_MODEL']}, {E['NPROC']} CPUs
(load average {E['LOAD_START']} at the start of the runs, {E['LOAD_END']} at the end).
Versions: {E['HAPROXY_VERSION']}; {E['NGINX_VERSION']}; fortio {E['FORTIO_VERSION_OUT']}; {E['GO_VERSION']}.

Setup: an upstream (`bench/upstream`, Go net/http, fixed 1 KiB body with
Content-Length, keep-alive) on {E['UP']}; each proxy in turn on its own port,
keep-alive on both sides, with N workers (the `workers` column):
- meshlet: `sidecar run -concurrency N` with a static config, one STATIC
  round-robin cluster holding the upstream, `access_log: off`, protocol auto
  (N workers on N Go processors; the processor scaler, `-adaptive-procs`, off:
  the default);
- haproxy: http mode, `nbthread N`, `http-reuse always`;
- nginx: `worker_processes N`, upstream `keepalive 64`, `proxy_http_version 1.1`,
  `proxy_set_header Connection ""`, and `keepalive_requests 1000000` on both sides
  (by default nginx closes a connection after 1000 requests; the others do not);
- direct: fortio straight to the upstream;
- floor: `bench/floor` with `GOMAXPROCS=N`, the least a goroutine-per-connection Go proxy
  costs here: one goroutine and one upstream connection per client
  connection, raw read and send system calls as meshlet's, nothing parsed
  but the response's Content-Length, nothing routed, counted or logged.
  Not a proxy: the yardstick of what the Go runtime and the kernel take,
  so that the rest of meshlet's CPU per request is meshlet's own work.

fortio load, after a 1 s warm-up: max throughput `-c 16 -qps 0 -t {E['DURATION']}`; fixed rate
`-c 8 -qps 1000 -uniform -t {E['DURATION']}`; both with `-r 0.00001 -p 50,90,99`.
{E['ROUNDS']} rounds, every scenario alternating within each, each proxy started afresh
per round and worker count; every figure is the median over the rounds (the CPU of each round
is listed under the table).
Proxy CPU = utime+stime from /proc/PID/stat, summed over all the proxy's
processes (nginx master + workers), before and after each run, divided by the
requests served. Load generator, proxy and upstream share the 2 cores, so max
QPS mostly measures the box: compare CPU per request, and read its spread
over the rounds (listed under the table) as the noise.

| scenario | workers | max QPS c=16 | p50 ms @1000 rps | p90 ms @1000 rps | p99 ms @1000 rps | proxy CPU µs/req (max) | proxy CPU µs/req (1000 rps) | non-200 |
|---|---:|---:|---:|---:|---:|---:|---:|---:|
{table}

{cpu_rounds}

{user_line}

{codes_line}{base_line}

Pages each proxy touches to serve one request with {E['PAGES_W']} workers (`bench/pages.py`: the
accessed bits of the proxy's pages cleared, one request on a kept-alive
connection after a 1 s warm-up at 1000 rps, the pages referenced since
counted from /proc/PID/smaps; median of 7):

| proxy | pages touched | its own code | shared libraries' code | read-only data (types, tables, constants) | writable (heap, stacks, data) |
|---|---:|---:|---:|---:|---:|
{pages_table}

At 1000 rps every request wakes the proxy twice (the request, then the
upstream's response), each time after other processes ran; {E['PCID']}.
At max throughput the proxy is seldom idle: it goes from one ready
connection to the next without a switch, and the TLB stays warm (see the
notes of the sixth stop below).

### Goals

Proxy CPU per request <= the best peer's (haproxy or nginx) in each of
the four cells; the floor's column gives meshlet's own work above it:

| workers | load | meshlet µs/req | haproxy | nginx | meshlet / best peer | goal | Go floor (meshlet above it) |
|---:|---|---:|---:|---:|---:|---|---:|
{goal_table}

Memory is in the memory section (`bench/memory.sh`).

![proxy benchmark](proxy.png)
<!-- proxy:end -->"""

if os.path.exists(path):
    with open(path, encoding="utf-8", newline="") as fh:
        text = fh.read()
else:
    text = "# meshlet benchmark results\n"
pat = re.compile(r"<!-- proxy:begin.*?<!-- proxy:end -->", re.S)
if pat.search(text):
    text = pat.sub(lambda m: section, text, count=1)
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
with open(path, "w", encoding="utf-8", newline="") as fh:
    fh.write(text)
print(table)
print(goal_table)
PY

# Anything meshlet logged at warn/error level during the runs.
for f in "$tmp"/meshlet-w*.out; do
  if grep -E 'level=(WARN|ERROR)' "$f" >/dev/null; then
    log "meshlet logged warnings/errors ($(basename "$f")):"
    grep -E 'level=(WARN|ERROR)' "$f" | head -20 >&2
  fi
done
cat "$tmp"/meshlet-w*-stats.txt 2>/dev/null | grep -E 'upstream_rq_(5xx|retry|timeout)|cx_connect_fail|none_healthy'  | grep -v ': 0$' | head -20 >&2 || true
log "wrote $out_md and $out_png"
