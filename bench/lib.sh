# Sourced by bench/proxy.sh and bench/pgo.sh: what both need to run the
# proxy benchmark's sidecar.

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
