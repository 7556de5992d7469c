# Sourced by the bench/*.sh scripts that run the sidecar: what they share.

# ports_free PORT...: fails, naming the port, if one is already listened on.
ports_free() {
  local port
  for port in "$@"; do
    if ss -Hltn "sport = :$port" | grep -q .; then
      echo "port $port is already in use on this machine" >&2
      return 1
    fi
  done
}

# wait_http URL: until URL answers 200 (10 s at most).
wait_http() {
  local i
  for i in $(seq 100); do
    if curl -fsS -o /dev/null --max-time 1 "$1" 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

#
# sidecar_config PORT ADMIN_PORT_BASE prints a static config with one
# listener on 127.0.0.1:PORT (original destination 10.96.0.10:80, protocol
# detection) routed to the STATIC round-robin cluster "upstream" holding
# bench/upstream at 127.0.0.1:18080; admin, health and Prometheus on
# ADMIN_PORT_BASE and the two ports after it; access log off.
sidecar_config() { # sidecar_config PORT ADMIN_PORT_BASE: meshlet section, upstream cluster
  cat <<YAML
node: {id: bench, cluster: bench, locality: {region: r1, zone: a}}
admin: 127.0.0.1:$2
health: 127.0.0.1:$(($2 + 1))
prometheus: 127.0.0.1:$(($2 + 2))
access_log: {path: "off"}
drain_timeout: 1s
listeners:
  - name: bench-http
    address: 127.0.0.1:$1
    original_destination: 10.96.0.10:80
    protocol: auto
    routes:
      - name: upstream
        match: {destination: "10.96.0.10:80"}
        cluster: upstream
clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: upstream
      endpoints:
        - locality: {region: r1, zone: a}
          lb_endpoints:
            - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 18080}}}
YAML
}

# big_config PORT ADMIN_PORT_BASE BIG_PORT [N] prints sidecar_config PORT
# ADMIN_PORT_BASE plus a second listener on 127.0.0.1:BIG_PORT (original
# destination 10.96.0.11:80) routed to "big", a STATIC round-robin cluster
# of N endpoints (default 1,000, at most 10,000) over zones a/b/c
# (127.0.10-49.x:18080): in use by a route as in a mesh, but nothing
# connects to that listener and no health checks run, so only its memory
# and its loading count.
big_config() {
  local n=${4:-1000}
  sidecar_config "$1" "$2" | sed '/^clusters:$/,$d'
  cat <<YAML
  - name: bench-big
    address: 127.0.0.1:$3
    original_destination: 10.96.0.11:80
    protocol: auto
    routes:
      - name: big
        match: {destination: "10.96.0.11:80"}
        cluster: big
YAML
  sidecar_config "$1" "$2" | sed -n '/^clusters:$/,$p'
  cat <<YAML
  - name: big
    type: STATIC
    connect_timeout: 1s
    lb_policy: ROUND_ROBIN
    load_assignment:
      cluster_name: big
      endpoints:
YAML
  local zones=(a b c) z i
  for z in 0 1 2; do
    printf '        - locality: {region: r1, zone: %s}\n          lb_endpoints:\n' "${zones[z]}"
    for ((i = z; i < n; i += 3)); do
      printf '            - endpoint: {address: {socket_address: {address: 127.0.%d.%d, port_value: 18080}}}\n' $((10 + i / 250)) $((1 + i % 250))
    done
  done
}
