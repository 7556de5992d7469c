#!/usr/bin/env bash
# Regenerates the committed BPF objects (*_bpfel.go, *_bpfel.o) from the C
# sources and fails if they differ from what is committed. CI runs it where
# clang is installed; without clang it says so and succeeds, since the
# committed objects are what every other build uses.
#   needs: clang and llvm-strip (apt-get install clang llvm), go, git
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang >/dev/null 2>&1; then
	echo "bpf/regen.sh: clang is not installed: not checking the committed BPF objects (apt-get install clang llvm to check them)"
	exit 0
fi
if ! command -v llvm-strip >/dev/null 2>&1; then
	echo "bpf/regen.sh: llvm-strip is not installed (apt-get install llvm): not checking the committed BPF objects"
	exit 0
fi

echo "bpf/regen.sh: $(clang --version | head -n1)"
go generate ./bpf/
if ! git diff --exit-code --stat -- bpf/; then
	echo "bpf/regen.sh: the committed BPF objects do not match bpf/*.c: run go generate ./bpf/ and commit the result" >&2
	exit 1
fi
# New generated files that are not committed yet are a mismatch too.
untracked=$(git ls-files --others --exclude-standard -- 'bpf/*_bpfel.go' 'bpf/*_bpfel.o')
if [ -n "$untracked" ]; then
	echo "bpf/regen.sh: generated files not committed:" >&2
	echo "$untracked" >&2
	exit 1
fi
echo "bpf/regen.sh: the committed BPF objects match the sources"
