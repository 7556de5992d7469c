#!/usr/bin/env bash
# Builds a real Kubernetes control plane for the e2e tests from the Go module
# proxy: etcd, kube-apiserver, kube-controller-manager and kubectl v1.37.2
# (see shared/reference/k8s-local-control-plane.md). The binaries (stripped:
# -s -w, which also makes each link ~3x faster)
# are cached outside the clone, keyed by this script's content, and never
# committed. Prints the bin directory.
#   e2e/k8s-tools.sh            build if needed, print the bin dir
# Cold: ~10 min on 2 cores; cached: instant.
set -euo pipefail
cd "$(dirname "$0")"
. ./k8s-module.sh
ETCD=v3.7.0
key=$(cat k8s-tools.sh k8s-module.sh | sha256sum | cut -c1-12)
cache="${MESHLET_CACHE:-$HOME/.cache/meshlet}/k8s-$K8S-$key"
bin="$cache/bin"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/etcd" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache/src/etcd" "$bin"
cd "$cache/src"
k8s_module meshlet.dev/e2e-k8s-tools "go.etcd.io/etcd/server/v3 $ETCD"
cat > etcd/main.go <<'GO'
// Command etcd is etcd's server main, built in the e2e tools module.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
export GOFLAGS=-mod=mod CGO_ENABLED=0
go mod tidy >/dev/null 2>&1 || go mod tidy
ver=$(k8s_ldflags)
go build -ldflags "$ver -s -w" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl >&2
go build -ldflags "-s -w" -o "$bin/etcd" ./etcd >&2
echo "$bin"
