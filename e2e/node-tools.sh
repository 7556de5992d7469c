#!/usr/bin/env bash
# Builds what real Kubernetes nodes need for the e2e tests (see
# shared/reference/k8s-real-nodes.md): kubelet and kube-scheduler v1.37.2
# from the Go module proxy, in a module next to e2e/k8s-tools.sh's, and the
# local image packer (go-containerregistry). Installs Debian's containerd,
# runc, CNI plugins and iptables when missing. Binaries are cached outside
# the clone, keyed by this script's content, and never committed. Prints
# the bin directory.
#   e2e/node-tools.sh            build if needed, print the bin dir
# Cold: ~5 min on 2 cores (kubelet); cached: instant.
set -euo pipefail
cd "$(dirname "$0")"
. ./k8s-module.sh
GGCR=v0.22.1
key=$(cat node-tools.sh k8s-module.sh | sha256sum | cut -c1-12)
cache="${MESHLET_CACHE:-$HOME/.cache/meshlet}/nodes-$K8S-$key"
bin="$cache/bin"

need_apt=()
command -v containerd >/dev/null 2>&1 || need_apt+=(containerd)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
command -v conntrack >/dev/null 2>&1 || need_apt+=(conntrack)
if [ ${#need_apt[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ -x "$bin/kubelet" ] && [ -x "$bin/kube-scheduler" ] && [ -x "$bin/mkimage" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache/src/mkimage" "$bin"
cd "$cache/src"
k8s_module meshlet.dev/e2e-node-tools "github.com/google/go-containerregistry $GGCR"
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
# mkimage packs static binaries into a docker-archive image that
# `ctr images import` loads: no registry is involved.
cat > mkimage/main.go <<'GO'
// Command mkimage writes a one-layer image of static binaries as a docker
// archive: mkimage -o out.tar -tag docker.io/local/x:v1 -entrypoint /x SRC=DST...
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"io"
	"log"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	out := flag.String("o", "", "output tar")
	tag := flag.String("tag", "", "image reference")
	entry := flag.String("entrypoint", "", "entrypoint path")
	flag.Parse()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	dir := func(d string) {
		for p := ""; ; {
			i := strings.Index(d[len(p):], "/")
			if i < 0 {
				return
			}
			p = d[:len(p)+i+1]
			if !dirs[p] {
				dirs[p] = true
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p, Mode: 0o755})
			}
		}
	}
	for _, d := range []string{"tmp/", "etc/", "var/run/"} {
		dir(d)
	}
	for _, arg := range flag.Args() {
		src, dst, ok := strings.Cut(arg, "=")
		if !ok {
			log.Fatalf("mkimage: %q: want SRC=DST", arg)
		}
		dst = strings.TrimPrefix(dst, "/")
		dir(dst)
		f, err := os.Open(src)
		if err != nil {
			log.Fatal(err)
		}
		st, _ := f.Stat()
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: dst, Mode: 0o755, Size: st.Size()})
		io.Copy(tw, f)
		f.Close()
	}
	tw.Close()
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		log.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		log.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: []string{*entry}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		log.Fatal(err)
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		log.Fatal(err)
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		log.Fatal(err)
	}
}
GO
export GOFLAGS=-mod=mod CGO_ENABLED=0
go mod tidy >/dev/null 2>&1 || go mod tidy
ver=$(k8s_ldflags)
go build -ldflags "$ver -s -w" -o "$bin/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler >&2
go build -o "$bin/mkimage" ./mkimage >&2
echo "$bin"
