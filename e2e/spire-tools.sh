#!/usr/bin/env bash
# Builds SPIRE's spire-server and spire-agent v1.13.3 from the Go module
# proxy for the SPIRE interop test (cgo: SQLite; needs gcc). The binaries
# (~320 MB) are cached outside the clone, keyed by this script's content,
# and never committed. Prints the bin directory.
#   e2e/spire-tools.sh          build if needed, print the bin dir
# Cold: ~10 min on 2 cores; cached: instant.
set -euo pipefail
cd "$(dirname "$0")"
SPIRE=v1.13.3
key=$(sha256sum spire-tools.sh | cut -c1-12)
cache="${MESHLET_CACHE:-$HOME/.cache/meshlet}/spire-$SPIRE-$key"
bin="$cache/bin"
if [ -x "$bin/spire-server" ] && [ -x "$bin/spire-agent" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$cache/src" "$bin"
cd "$cache/src"
cat > go.mod <<MOD
module meshlet.dev/e2e-spire-tools

go 1.26
MOD
export GOFLAGS=-mod=mod CGO_ENABLED=1
go get -tool "github.com/spiffe/spire/cmd/spire-agent@$SPIRE" "github.com/spiffe/spire/cmd/spire-server@$SPIRE" >&2
GOBIN="$bin" go install -ldflags "-s -w" github.com/spiffe/spire/cmd/spire-agent github.com/spiffe/spire/cmd/spire-server >&2
echo "$bin"
