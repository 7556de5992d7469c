#!/usr/bin/env bash
# Runs the whole e2e suite N times in a row (default 5) with a compile
# load beside it (a `go build -a` of the module with a throw-away build
# cache, one package at a time, over and over), to find flaky waits: a
# test that waits for a proxy of a condition fails under load. Prints each
# run's result and time and the count of passes; keeps failing runs' output
# in $TMPDIR/meshlet-e2e-soak-<run>.log. Needs root, like `make e2e`.
#   hack/e2e-soak.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
make --no-print-directory e2e-tools
load_cache=$(mktemp -d)
(
	while :; do
		GOCACHE=$load_cache CGO_ENABLED=0 go build -a -p 1 -o /dev/null ./... >/dev/null 2>&1 || true
	done
) &
load=$!
cleanup() {
	kill "$load" 2>/dev/null || true
	pkill -P "$load" 2>/dev/null || true
	wait "$load" 2>/dev/null || true
	rm -rf "$load_cache"
}
trap cleanup EXIT
passed=0
for i in $(seq "$n"); do
	log="${TMPDIR:-/tmp}/meshlet-e2e-soak-$i.log"
	start=$SECONDS
	if make --no-print-directory e2e >"$log" 2>&1; then
		passed=$((passed + 1))
		echo "run $i: passed in $((SECONDS - start)) s"
		rm -f "$log"
	else
		echo "run $i: FAILED in $((SECONDS - start)) s (output in $log):"
		grep -E -- '--- FAIL|^FAIL|_test.go:[0-9]+:' "$log" | head -20 | sed 's/^/   /'
	fi
	bash bpf/sweep.sh --check --all >/dev/null || echo "run $i left things behind: $(bash bpf/sweep.sh --check --all | tr '\n' ' ')"
done
echo "e2e soak: $passed of $n runs passed"
[ "$passed" = "$n" ]
