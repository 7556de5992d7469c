#!/usr/bin/env bash
# Benchmark P2: a sidecar pair with mutual TLS against a haproxy pair, as
# separate processes on loopback:
#   fortio -> client-side proxy -> mTLS -> server-side proxy -> upstream
# meshlet pair: HTTP/2 over mTLS between the sidecars, identities from
# files (sidecar run -identity-dir); haproxy pair: TLS 1.3 with client
# certificates both ways, HTTP/1.1 kept alive between them; plain: fortio
# straight to the upstream. Each pair runs bare and with a 10-rule
# authorization on the server side (meshlet: an Envoy RBAC ALLOW filter of
# 10 policies, the one that matches last; haproxy: 10 http-request rules).
# Reports the latency each pair adds to plain at 1000 req/s (p50/p90/p99)
# and the CPU time per request of its two proxies together; rewrites the
# pair section of bench/RESULTS.md.
#
# Usage: bench/pair.sh   (3 alternating rounds, about 5 minutes;
#                         MESHLET_BENCH_ROUNDS=N, MESHLET_BENCH_DURATION=10s,
#                         MESHLET_BENCH_KEEP=1 keeps the temporary folder)
#        MESHLET_BENCH_SPLIT=1 bench/pair.sh: instead, where each pair's
#                         latency goes, proxy by proxy and direction by
#                         direction (bench/pairsplit.py, from a capture of
#                         loopback; needs tcpdump and tshark, installed if
#                         missing); prints a table, leaves RESULTS.md alone
#
# Installs what is missing: apt packages haproxy and openssl, and fortio
# v1.68.2 into ${MESHLET_CACHE:-$HOME/.cache/meshlet}/bin. Every proxy runs
# one worker (thread, Go processor): four proxies, fortio and the upstream
# share the machine's cores.
#
# Ports: upstream 127.0.0.1:18080; meshlet client 127.0.0.1:18201, server
# 127.0.0.2:18202 (admin ports 18290-18292 and 18295-18297); haproxy client
# 127.0.0.1:18211, server 127.0.0.2:18212.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh # ports_free, wait_http
export PATH=/usr/local/go/bin:$PATH:/usr/sbin

CACHE=${MESHLET_CACHE:-$HOME/.cache/meshlet}
FORTIO_VERSION=1.68.2
DURATION=${MESHLET_BENCH_DURATION:-10s}
ROUNDS=${MESHLET_BENCH_ROUNDS:-3}
UP=127.0.0.1:18080
out_md=bench/RESULTS.md

tmp=$(mktemp -d "${TMPDIR:-/tmp}/meshlet-pair-bench.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "${MESHLET_BENCH_KEEP:-}" ]; then log "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[pair.sh %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need_apt=()
command -v haproxy >/dev/null || need_apt+=(haproxy)
command -v openssl >/dev/null || need_apt+=(openssl)
if [ -n "${MESHLET_BENCH_SPLIT:-}" ]; then
  command -v tcpdump >/dev/null || need_apt+=(tcpdump)
  command -v tshark >/dev/null || need_apt+=(tshark)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >"$tmp/apt.log" 2>&1 ||
    { tail -20 "$tmp/apt.log" >&2; die "apt-get install ${need_apt[*]} failed"; }
fi
fortio=$CACHE/bin/fortio
if [[ $("$fortio" version 2>/dev/null || true) != "$FORTIO_VERSION"* ]]; then
  log "installing fortio v$FORTIO_VERSION into $CACHE/bin"
  mkdir -p "$CACHE/bin"
  GOBIN=$CACHE/bin GOFLAGS=-mod=mod go install "fortio.org/fortio@v$FORTIO_VERSION"
fi
clk_tck=$(getconf CLK_TCK)
ports_free 18080 18201 18202 18211 18212 18290 18291 18292 18295 18296 18297 || die "a port the benchmark needs is taken"

log "building sidecar and upstream"
CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$tmp/sidecar" ./cmd/sidecar # as `make sidecar`
go build -o "$tmp/upstream" ./bench/upstream

# ---------------------------------------------------------------- identities
# One CA; client and server certificates with SPIFFE IDs, ECDSA P-256.
pki=$tmp/pki
mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/ca.key" -out "$pki/ca.pem" -days 2 \
  -subj /O=meshlet-bench-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
for who in client server; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/$who.key" -out "$pki/$who.csr" -subj /O=meshlet-bench 2>/dev/null
  printf 'subjectAltName=URI:spiffe://cluster.local/ns/bench/sa/%s\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=critical,CA:FALSE\n' "$who" >"$pki/$who.ext"
  openssl x509 -req -in "$pki/$who.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 1 -out "$pki/$who.crt" -extfile "$pki/$who.ext" 2>/dev/null
  mkdir -p "$tmp/id-$who"
  cp "$pki/$who.crt" "$tmp/id-$who/svid.pem"
  cp "$pki/$who.key" "$tmp/id-$who/svid_key.pem"
  cp "$pki/ca.pem" "$tmp/id-$who/svid_bundle.pem"
  cat "$pki/$who.crt" "$pki/$who.key" >"$pki/$who-haproxy.pem"
done

# ---------------------------------------------------------------- configs
cat >"$tmp/meshlet-client.yaml" <<YAML
node: {id: bench-client, cluster: bench, locality: {region: r1, zone: a}}
admin: 127.0.0.1:18290
health: 127.0.0.1:18291
prometheus: 127.0.0.1:18292
access_log: {path: "off"}
drain_timeout: 1s
listeners:
  - name: outbound
    address: 127.0.0.1:18201
    original_destination: 10.96.0.20:80
    routes: [{name: server, match: {destination: "10.96.0.20:80"}, cluster: server}]
clusters:
  - name: server
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: server
      endpoints:
        - lb_endpoints:
            - endpoint: {address: {socket_address: {address: 127.0.0.2, port_value: 18202}}}
              metadata: {filter_metadata: {meshlet.io: {meshed: true, identity: "spiffe://cluster.local/ns/bench/sa/server"}}}
YAML
server_config() { # server_config WITH_RBAC
  cat <<YAML
node: {id: bench-server, cluster: bench, locality: {region: r1, zone: a}}
admin: 127.0.0.1:18295
health: 127.0.0.1:18296
prometheus: 127.0.0.1:18297
access_log: {path: "off"}
drain_timeout: 1s
listeners:
  - name: inbound
    address: 127.0.0.2:18202
    direction: inbound
    mtls: {mode: STRICT}
    routes: [{name: app, cluster: app}]
YAML
  if [ "$1" = 1 ]; then
    # 10 policies: nine that never match this traffic (other identities,
    # paths and methods), then the one that does, tried last.
    echo "    rbac:"
    echo "      http:"
    echo "        - rules:"
    echo "            action: ALLOW"
    echo "            policies:"
    local i
    for i in 0 1 2 3 4 5 6 7 8; do
      cat <<YAML
              p$i:
                permissions: [{and_rules: {rules: [{header: {name: ":method", string_match: {exact: POST}}}, {url_path: {path: {prefix: "/admin$i/"}}}]}}]
                principals: [{authenticated: {principal_name: {exact: "spiffe://cluster.local/ns/other/sa/s$i"}}}]
YAML
    done
    cat <<YAML
              p9:
                permissions: [{and_rules: {rules: [{header: {name: ":method", string_match: {exact: GET}}}, {url_path: {path: {prefix: "/"}}}]}}]
                principals: [{authenticated: {principal_name: {exact: "spiffe://cluster.local/ns/bench/sa/client"}}}]
YAML
  fi
  cat <<YAML
clusters:
  - name: app
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: app
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18080}}}}]}]
YAML
}
server_config 0 >"$tmp/meshlet-server.yaml"
server_config 1 >"$tmp/meshlet-server-rbac.yaml"

cat >"$tmp/haproxy-client.cfg" <<CFG
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend client
    bind 127.0.0.1:18211
    default_backend server
backend server
    http-reuse always
    server server 127.0.0.2:18212 ssl crt $pki/client-haproxy.pem ca-file $pki/ca.pem verify required ssl-min-ver TLSv1.3
CFG
haproxy_server() { # haproxy_server WITH_RULES
  cat <<CFG
global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend server
    bind 127.0.0.2:18212 ssl crt $pki/server-haproxy.pem ca-file $pki/ca.pem verify required ssl-min-ver TLSv1.3
CFG
  if [ "$1" = 1 ]; then
    local i
    for i in 0 1 2 3 4 5 6 7 8; do
      echo "    http-request deny if { method POST } { path_beg /admin$i/ }"
    done
    echo "    http-request allow if { method GET } { path_beg / } { ssl_c_used } { ssl_c_verify 0 }"
    echo "    http-request deny"
  fi
  cat <<CFG
    default_backend app
backend app
    http-reuse always
    server app $UP
CFG
}
haproxy_server 0 >"$tmp/haproxy-server.cfg"
haproxy_server 1 >"$tmp/haproxy-server-rules.cfg"
for f in haproxy-client haproxy-server haproxy-server-rules; do
  haproxy -c -q -f "$tmp/$f.cfg" || die "haproxy config $f check failed"
done

# ---------------------------------------------------------------- helpers
cpu_ticks() { # cpu_ticks PID...: user+system clock ticks summed
  local p s t=0 rest
  for p in "$@"; do
    s=$(cat "/proc/$p/stat") || die "process $p is gone"
    rest=${s##*) }
    read -r -a f <<<"$rest"
    t=$((t + f[11] + f[12]))
  done
  echo "$t"
}
start() { # start NAME CMD...: background process, pid in $started
  local name=$1
  shift
  "$@" >"$tmp/$name.out" 2>&1 &
  started=$!
  pids+=("$started")
}
stop() { # stop PID...
  local p q kept
  for p in "$@"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    kept=()
    for q in "${pids[@]}"; do [ "$q" = "$p" ] || kept+=("$q"); done
    pids=("${kept[@]}")
  done
}
# measure NAME URL PID...: warm-up, then fortio at 1000 req/s with the
# processes' CPU ticks around it.
measure() {
  local name=$1 url=$2
  shift 2
  wait_http "$url" || die "$name: $url does not answer 200 (logs in $tmp)"
  "$fortio" load -quiet -c 8 -qps 1000 -t 2s "$url" >"$tmp/$name-warmup.log" 2>&1 || true
  local before=0 after=0
  [ $# -gt 0 ] && before=$(cpu_ticks "$@")
  "$fortio" load -quiet -c 8 -qps 1000 -uniform -t "$DURATION" -r 0.00001 -p 50,90,99 \
    -json "$tmp/$name.json" "$url" >"$tmp/$name.log" 2>&1 || { tail -5 "$tmp/$name.log" >&2; die "fortio $name failed"; }
  [ $# -gt 0 ] && after=$(cpu_ticks "$@")
  echo "$((after - before))" >"$tmp/$name.ticks"
  log "$name: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.0f qps, codes %s" % (d["ActualQPS"], d["RetCodes"]))' "$tmp/$name.json")"
}

if [ -n "${MESHLET_BENCH_SPLIT:-}" ]; then
  start upstream "$tmp/upstream" -addr "$UP" -echo-request-id
else
  start upstream "$tmp/upstream" -addr "$UP"
fi
wait_http "http://$UP/" || die "upstream did not start"

# meshlet_up NAME BINARY SERVER_CONFIG [VAR=VALUE...]: a sidecar pair
# (the client's environment given), both ready; pids in $srv and $cli.
meshlet_up() {
  local name=$1 bin=$2 cfg=$3
  shift 3
  start "$name-server" "$bin" run -config "$cfg" -watch 0 -concurrency 1 -identity-dir "$tmp/id-server"
  srv=$started
  start "$name-client" env "$@" "$bin" run -config "$tmp/meshlet-client.yaml" -watch 0 -concurrency 1 -identity-dir "$tmp/id-client"
  cli=$started
  wait_http "http://127.0.0.1:18296/ready" || die "$name: the server sidecar is not ready: $(tail -3 "$tmp/$name-server.out")"
  wait_http "http://127.0.0.1:18291/ready" || die "$name: the client sidecar is not ready: $(tail -3 "$tmp/$name-client.out")"
}
# haproxy_up NAME SERVER_CFG CLIENT_CFG: a haproxy pair; pids in $srv and $cli.
haproxy_up() {
  start "$1-server" haproxy -db -f "$2"
  srv=$started
  start "$1-client" haproxy -db -f "$3"
  cli=$started
}
bench_meshlet() { # bench_meshlet ROUND NAME SERVER_CONFIG
  log "$2, round $1"
  local srv cli
  meshlet_up "$2@$1" "$tmp/sidecar" "$3"
  measure "$2@$1" "http://127.0.0.1:18201/" "$cli" "$srv"
  curl -fsS --max-time 2 "http://127.0.0.1:18297/stats/prometheus" >"$tmp/$2-server@$1.prom" 2>/dev/null || true
  stop "$cli" "$srv"
}
bench_haproxy() { # bench_haproxy ROUND NAME SERVER_CFG
  log "$2, round $1"
  local srv cli
  haproxy_up "$2@$1" "$3" "$tmp/haproxy-client.cfg"
  measure "$2@$1" "http://127.0.0.1:18211/" "$cli" "$srv"
  stop "$cli" "$srv"
}

# ---------------------------------------------------------------- split
# One capture per pair and round, from before the proxies start (the mesh
# hop's TLS handshake must be in it), then bench/pairsplit.py: the meshlet
# pair's mesh hop decrypted with its client's key log (a sidecar built
# with -tags meshlet_keylog), haproxy's told apart by its connections; the
# client haproxy sets the X-Request-Id meshlet's client sidecar makes.
split_run() { # split_run ROUND PAIR
  local name=$2@$1 front mid srv cli cap since keylog=()
  log "$name, captured"
  if [ "$2" = meshlet ]; then front=18201 mid=18202; else front=18211 mid=18212; fi
  tcpdump -i lo -n -s 0 -B 16384 -w "$tmp/$name.pcap" "tcp and (port $front or port $mid or port 18080)" >"$tmp/$name.tcpdump" 2>&1 &
  cap=$!
  pids+=("$cap")
  local i
  for i in $(seq 100); do # until tcpdump says it listens
    grep -q listening "$tmp/$name.tcpdump" && break
    kill -0 "$cap" 2>/dev/null || die "tcpdump failed: $(cat "$tmp/$name.tcpdump")"
    sleep 0.05
  done
  if [ "$2" = meshlet ]; then
    rm -f "$tmp/keys.log"
    meshlet_up "$name" "$tmp/sidecar-keylog" "$tmp/meshlet-server.yaml" MESHLET_TLS_KEYLOG="$tmp/keys.log"
    keylog=(--keylog "$tmp/keys.log")
  else
    haproxy_up "$name" "$tmp/haproxy-server.cfg" "$tmp/haproxy-client-id.cfg"
  fi
  wait_http "http://127.0.0.1:$front/" || die "$name: the pair does not answer"
  "$fortio" load -quiet -c 8 -qps 1000 -t 2s "http://127.0.0.1:$front/" >/dev/null 2>&1 || true
  since=$(date +%s.%N)
  "$fortio" load -quiet -c 8 -qps 1000 -uniform -t "$DURATION" "http://127.0.0.1:$front/" >"$tmp/$name.log" 2>&1 || die "fortio $name failed"
  stop "$cli" "$srv"
  kill -INT "$cap"
  stop "$cap"
  python3 bench/pairsplit.py "$tmp/$name.pcap" "$front" "$mid" --since "$since" "${keylog[@]}" >"$tmp/split-$name.json" ||
    die "pairsplit.py $name failed"
  rm -f "$tmp/$name.pcap"
}
if [ -n "${MESHLET_BENCH_SPLIT:-}" ]; then
  CGO_ENABLED=0 go build -trimpath -tags grpcnotrace,meshlet_keylog -o "$tmp/sidecar-keylog" ./cmd/sidecar
  sed 's|^    default_backend server|    http-request set-header X-Request-ID %[uuid]\n    default_backend server|' \
    "$tmp/haproxy-client.cfg" >"$tmp/haproxy-client-id.cfg"
  grep -q X-Request-ID "$tmp/haproxy-client-id.cfg" || die "the client haproxy's config has no X-Request-ID rule"
  for round in $(seq "$ROUNDS"); do
    split_run "$round" meshlet
    split_run "$round" haproxy
  done
  python3 - "$tmp" "$ROUNDS" <<'PY'
import json, os, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
segs = [("client_request", "client proxy, request"), ("server_request", "server proxy, request"),
        ("server_response", "server proxy, answer"), ("client_response", "client proxy, answer"),
        ("client", "client proxy, both ways"), ("server", "server proxy, both ways"),
        ("proxies", "both proxies"), ("upstream", "upstream (not a proxy's)")]
runs = {p: [json.load(open(os.path.join(tmp, f"split-{p}@{r}.json"))) for r in range(1, rounds + 1)] for p in ("meshlet", "haproxy")}
for p, rs in runs.items():
    print(f"{p}: requests followed per round " + ", ".join(f"{r['split']} of {r['requests']}" for r in rs))
    if any(r["split"] < r["requests"] / 2 for r in rs):
        sys.exit(f"pair.sh: fewer than half of the {p} pair's requests were followed (is the mesh hop decrypted?)")
print()
print("| segment (µs, median over rounds) | meshlet p50 | haproxy p50 | meshlet p90 | haproxy p90 | meshlet p99 | haproxy p99 |")
print("|---|---:|---:|---:|---:|---:|---:|")
med = lambda rs, k, q: statistics.median(r[k][q] for r in rs)
for k, label in segs:
    cells = [f"{med(runs[p], k, q):.0f}" for q in ("50", "90", "99") for p in ("meshlet", "haproxy")]
    print(f"| {label} | " + " | ".join(cells) + " |")
PY
  exit 0
fi
for round in $(seq "$ROUNDS"); do
  log "plain, round $round"
  measure "plain@$round" "http://$UP/"
  bench_meshlet "$round" meshlet "$tmp/meshlet-server.yaml"
  bench_meshlet "$round" meshlet-rbac10 "$tmp/meshlet-server-rbac.yaml"
  bench_haproxy "$round" haproxy "$tmp/haproxy-server.cfg"
  bench_haproxy "$round" haproxy-rules10 "$tmp/haproxy-server-rules.cfg"
done
# The 10-rule policy did decide: the matching policy counted every request.
grep -q 'meshlet_authz_decisions_total{action="ALLOW",policy="p9",result="allowed"}' "$tmp/meshlet-rbac10-server@1.prom" ||
  die "the meshlet server with 10 rules counted no decision by p9"

# ---------------------------------------------------------------- results
haproxy_version=$(haproxy -v 2>&1 | sed -n 1p)
go_version=$(go version)
cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^model name[[:space:]]*: //')
run_date=$(date -u +%Y-%m-%d)
python3 - "$tmp" "$clk_tck" "$ROUNDS" "$DURATION" "$FORTIO_VERSION" "$haproxy_version" "$go_version" "$cpu_model" "$run_date" >"$tmp/section.md" <<'PY'
import json, statistics, sys, os
tmp, tck, rounds, duration, fortio, haproxy, gover, cpu, date = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
def runs(name):
    out = []
    for i in range(1, rounds + 1):
        d = json.load(open(os.path.join(tmp, f"{name}@{i}.json")))
        h = d["DurationHistogram"]
        pct = {p["Percentile"]: p["Value"] * 1e6 for p in h["Percentiles"]}
        ticks = int(open(os.path.join(tmp, f"{name}@{i}.ticks")).read())
        bad = sum(v for k, v in d.get("RetCodes", {}).items() if str(k) != "200")
        out.append(dict(qps=d["ActualQPS"], p50=pct[50], p90=pct[90], p99=pct[99], cpu=ticks / tck * 1e6 / h["Count"], bad=bad))
    return out
med = lambda rs, k: statistics.median(r[k] for r in rs)
plain = runs("plain")
print("<!-- pair:begin (generated by bench/pair.sh; edits are overwritten) -->")
print("## pair: a sidecar pair with mTLS against a haproxy pair (P2)")
print()
print(f"Run {date}: {cpu}, 2 cores; {gover}; {haproxy}; fortio {fortio}, 8 connections at 1000 req/s for {duration},")
print(f"{rounds} rounds alternating the scenarios, medians. fortio -> client-side proxy -> mTLS -> server-side proxy -> upstream")
print("(1 KiB responses), every proxy a separate process with one worker on loopback. meshlet: HTTP/2 over mTLS between")
print("the sidecars (TLS 1.3, ECDSA P-256 SPIFFE certificates from files, `-identity-dir`); haproxy: TLS 1.3 with client")
print("certificates both ways, HTTP/1.1 kept alive between the two. \"rbac10\"/\"rules10\": the server side checks 10")
print("authorization rules per request (meshlet: an Envoy RBAC ALLOW filter of 10 policies, the matching one tried last;")
print("haproxy: 10 `http-request` rules). Added latency is the scenario's percentile minus plain's; CPU is both proxies'")
print("user+system time per request.")
print()
print(f"Plain (no proxy): p50 {med(plain,'p50'):.0f} µs, p90 {med(plain,'p90'):.0f} µs, p99 {med(plain,'p99'):.0f} µs.")
print()
print("| pair | added p50 | added p90 | added p99 | CPU per request, both proxies | non-200 |")
print("|---|---:|---:|---:|---:|---:|")
res, per = {}, {"plain": plain}
for name in ["meshlet", "meshlet-rbac10", "haproxy", "haproxy-rules10"]:
    rs = per[name] = runs(name)
    add = {k: med(rs, k) - med(plain, k) for k in ("p50", "p90", "p99")}
    res[name] = dict(add, cpu=med(rs, "cpu"))
    print(f"| {name} | {add['p50']:.0f} µs | {add['p90']:.0f} µs | {add['p99']:.0f} µs | {med(rs,'cpu'):.1f} µs "
          f"({', '.join('%.1f' % r['cpu'] for r in rs)}) | {sum(r['bad'] for r in rs)} |")
print()
# Each round's p99, for the spread behind the medians, and the rounds the
# meshlet pair beat the haproxy pair in (each round runs both).
print("p99 in each round (µs): " + "; ".join(f"{n} {', '.join('%.0f' % r['p99'] for r in rs)}" for n, rs in per.items()) + ".")
wins = lambda k: sum(a[k] <= b[k] for a, b in zip(per["meshlet"], per["haproxy"]))
print(f"Round by round, the meshlet pair's p99 was at most the haproxy pair's in {wins('p99')} of {rounds} rounds, "
      f"its CPU per request in {wins('cpu')} of {rounds}.")
print()
m, h = res["meshlet"], res["haproxy"]
ok99, okcpu = m["p99"] <= h["p99"], m["cpu"] <= h["cpu"]
print(f"Goal (meshlet pair's added p99 and CPU per request <= the haproxy pair's): added p99 {m['p99']:.0f} vs {h['p99']:.0f} µs "
      f"({'met' if ok99 else 'not met'}), CPU {m['cpu']:.1f} vs {h['cpu']:.1f} µs ({'met' if okcpu else 'not met'}). "
      f"The 10 rules cost meshlet {res['meshlet-rbac10']['cpu'] - m['cpu']:+.1f} µs and haproxy "
      f"{res['haproxy-rules10']['cpu'] - h['cpu']:+.1f} µs of CPU per request.")
print("<!-- pair:end -->")
PY
python3 bench/section.py "$out_md" pair <"$tmp/section.md"
cat "$tmp/section.md"
