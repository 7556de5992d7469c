#!/usr/bin/env bash
# Builds a real Kubernetes control plane for the e2e tests from the Go module
# proxy: etcd, kube-apiserver, kube-controller-manager and kubectl v1.37.2
# (see shared/reference/k8s-local-control-plane.md). The binaries (~310 MB)
# are cached outside the clone, keyed by this script's content, and never
# committed. Prints the bin directory.
#   e2e/k8s-tools.sh            build if needed, print the bin dir
# Cold: ~10 min on 2 cores; cached: instant.
set -euo pipefail
cd "$(dirname "$0")"
K8S=v1.37.2 STAGING=v0.37.2 ETCD=v3.7.0
key=$(sha256sum k8s-tools.sh | cut -c1-12)
cache="${MESHLET_CACHE:-$HOME/.cache/meshlet}/k8s-$K8S-$key"
bin="$cache/bin"
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/etcd" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache/src/etcd" "$bin"
cd "$cache/src"
# k8s.io/kubernetes replaces every staging module with a local path; a
# tools module requiring it replaces them with their released versions.
staging="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider cluster-bootstrap
code-generator component-base component-helpers controller-manager cri-api cri-client cri-streaming csi-translation-lib
dynamic-resource-allocation endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler
kubectl kubelet metrics mount-utils pod-security-admission sample-apiserver streaming"
{
  echo "module meshlet.dev/e2e-k8s-tools"
  echo
  echo "go 1.26"
  echo
  echo "require ("
  echo "	k8s.io/kubernetes $K8S"
  echo "	go.etcd.io/etcd/server/v3 $ETCD"
  echo ")"
  echo
  echo "replace ("
  for m in $staging; do echo "	k8s.io/$m => k8s.io/$m $STAGING"; done
  echo ")"
} > go.mod
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
ver="-X k8s.io/component-base/version.gitVersion=$K8S -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
ver="$ver -X k8s.io/client-go/pkg/version.gitVersion=$K8S -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37"
go build -ldflags "$ver" -o "$bin/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl >&2
go build -o "$bin/etcd" ./etcd >&2
echo "$bin"
