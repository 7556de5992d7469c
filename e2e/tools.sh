#!/usr/bin/env bash
# Builds every tool the e2e suite runs from the Go module proxy: etcd
# v3.7.0, kube-apiserver, kube-controller-manager, kubectl, kubelet,
# kube-scheduler and kube-proxy v1.37.2 (see
# docs/testing.md),
# CoreDNS v1.14.2 with the plugins cluster DNS uses (tools/coredns; v1.15
# needs gRPC 1.84, whose go-spiffe SPIRE 1.13.3 does not build against),
# spire-server and spire-agent v1.13.3, and mkimage (a docker-archive
# packer the suite no longer uses: internal/images builds its images; it
# leaves this build when the cache key changes anyway, since removing it
# alone would rebuild everything). Installs Debian's containerd, runc, CNI
# plugins, iptables, nftables (kube-proxy's nft) and conntrack for the
# real nodes when missing. Prints the bin directory.
#
# One module (e2e/tools: go.mod and go.sum committed, so a build resolves
# nothing) and one `go build` for all of them: the packages they share
# (client-go, the API types, gRPC, protobuf, ...) compile once. With cgo
# (SPIRE's SQLite; every tool runs on the host, none in an image). The
# binaries are stripped (-s -w: also ~3x faster links) and cached outside
# the clone, keyed by this script and e2e/tools; never committed.
#   e2e/tools.sh          build if needed, print the bin dir
#   e2e/tools.sh fetch    only download the modules the build needs
#                         (`make test` runs this in the background while
#                         vet and the unit tests compile)
#   e2e/tools.sh update   rewrite e2e/tools/go.mod and go.sum from the
#                         versions below (network; then commit them)
# Cold: 10-25 min on 2 cores, with progress on stderr; cached: instant.
set -euo pipefail
cd "$(dirname "$0")"
. ./k8s-module.sh
ETCD=v3.7.0 SPIRE=v1.13.3 GGCR=v0.22.1 COREDNS=v1.14.2
mode=${1:-build}
export CGO_ENABLED=1 GOFLAGS=-mod=readonly
targets=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy
  github.com/spiffe/spire/cmd/spire-server github.com/spiffe/spire/cmd/spire-agent ./etcd ./mkimage ./coredns)
ldflags="$(k8s_ldflags) -s -w"
# The cache key is the build's inputs (not this script's messages): the
# versions, targets and flags, the pinned module and the tools' sources.
key=$( {
  echo "$ETCD $SPIRE $GGCR $COREDNS $CGO_ENABLED ${targets[*]} $ldflags"
  cat k8s-module.sh tools/go.mod tools/go.sum tools/tools.go tools/etcd/main.go tools/mkimage/main.go tools/coredns/main.go
} | sha256sum | cut -c1-12)
cache="${MESHLET_CACHE:-$HOME/.cache/meshlet}"
bin="$cache/tools-$K8S-$key/bin"

case "$mode" in
update)
  cd tools
  k8s_module meshlet.dev/e2e-tools "go.etcd.io/etcd/server/v3 $ETCD" "github.com/google/go-containerregistry $GGCR" "github.com/spiffe/spire $SPIRE" "github.com/coredns/coredns $COREDNS"
  rm -f go.sum
  GOFLAGS=-mod=mod go mod tidy
  exit 0
  ;;
fetch | build) ;;
*)
  echo "usage: e2e/tools.sh [build|fetch|update]" >&2
  exit 2
  ;;
esac

built() {
  local b
  for b in kube-apiserver kube-controller-manager kubectl kubelet kube-scheduler kube-proxy spire-server spire-agent etcd mkimage coredns; do
    [ -x "$bin/$b" ] || return 1
  done
}

if [ "$mode" = build ]; then
  need_apt=()
  command -v containerd >/dev/null 2>&1 || need_apt+=(containerd)
  command -v runc >/dev/null 2>&1 || need_apt+=(runc)
  [ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
  command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
  command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
  command -v conntrack >/dev/null 2>&1 || need_apt+=(conntrack)
  if [ ${#need_apt[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  fi
fi

if built; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
# A fetch in the background and a build hold the same lock: the build
# waits for the modules the fetch is downloading.
exec 9>"$cache/tools.lock"
if ! flock -n 9; then
  [ "$mode" = build ] && echo "e2e/tools.sh: waiting for the tools' module download to finish (make test starts it in the background)" >&2
  flock 9
fi
cd tools
if [ "$mode" = fetch ]; then
  go list -deps "${targets[@]}" >/dev/null
  exit 0
fi
if ! built; then
  rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
  # Progress on stderr every 30 s: packages compiled of those the build
  # needs (go build -v names each as it is built) and the latest one.
  total=$(go list -deps "${targets[@]}" | wc -l)
  echo "e2e/tools.sh: building etcd $ETCD, Kubernetes $K8S (apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl), SPIRE $SPIRE, CoreDNS $COREDNS and mkimage into $bin (one go build, $total packages; 10-25 min cold)" >&2
  log="$bin.tmp/build.log"
  start=$SECONDS
  go build -v -ldflags "$ldflags" -o "$bin.tmp/" "${targets[@]}" 2>"$log" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null && sleep 1; done
    kill -0 "$pid" 2>/dev/null || break
    n=$(grep -c -v '^#' "$log" || true)
    printf 'e2e/tools.sh: %dm%02ds: %s of %s packages compiled (latest %s)\n' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$n" "$total" "$(tail -n 1 "$log")" >&2
  done
  if ! wait "$pid"; then
    grep -v '^[a-z0-9.-]*\(/[^ ]*\)\?$' "$log" >&2 || tail -n 50 "$log" >&2
    echo "e2e/tools.sh: the tools' go build failed (log above)" >&2
    exit 1
  fi
  rm -f "$log"
  echo "e2e/tools.sh: built in $(((SECONDS - start) / 60))m$(((SECONDS - start) % 60))s" >&2
  rm -rf "$bin" && mv "$bin.tmp" "$bin"
fi
echo "$bin"
