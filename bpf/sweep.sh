#!/usr/bin/env bash
# Removes what meshlet's bpf tests leave behind when they are killed:
# cgroups, network namespaces (with their veths) and bpffs pins named
# meshlet-test-<pid>-*, the e2e suite's temporary directories
# (meshlet-test-<pid>-tmp), and, once no kubelet or kube-proxy runs, the
# nftables tables of its kube-proxy (table ip/ip6 kube-proxy), an empty
# `table ip filter` and the kubelets' fixed-path sockets. Kernel
# attachments need no sweeping: they are bpf_links that die with the test
# process (see doc.go).
#
#   sweep.sh              remove leftovers of test processes that are gone
#   sweep.sh --all        ... of live ones too
#   sweep.sh --pid PID    ... of PID only, live or not
#   sweep.sh --check      list instead of removing; exit 1 if there are any
#                         (combines with --pid / --all)
# Prints one line per leftover. Needs root to remove.
set -euo pipefail

prefix=meshlet-test-
check=0 all=0 only=
while [ $# -gt 0 ]; do
	case "$1" in
	--check) check=1 ;;
	--all) all=1 ;;
	--pid) only=$2; shift ;;
	*) echo "usage: $0 [--check] [--all | --pid PID]" >&2; exit 2 ;;
	esac
	shift
done

# selected NAME: is NAME (meshlet-test-<pid>-...) one to act on?
selected() {
	local pid=${1#"$prefix"}
	pid=${pid%%-*}
	case "$pid" in '' | *[!0-9]*) return 1 ;; esac
	if [ -n "$only" ]; then [ "$pid" = "$only" ]; return; fi
	[ "$all" = 1 ] && return 0
	! kill -0 "$pid" 2>/dev/null
}

found=0

# Cgroups, under every cgroup2 mount (nested ones first).
while read -r _ mnt fstype _; do
	[ "$fstype" = cgroup2 ] || continue
	for dir in "$mnt/$prefix"*; do
		[ -d "$dir" ] || continue
		selected "$(basename "$dir")" || continue
		found=1
		echo "cgroup $dir"
		[ "$check" = 1 ] && continue
		# Helper processes left inside die first (cgroup.kill: Linux 5.14+).
		find "$dir" -depth -type d | while read -r d; do
			[ -f "$d/cgroup.kill" ] && echo 1 >"$d/cgroup.kill" 2>/dev/null || true
		done
		for _ in $(seq 50); do
			find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			[ -d "$dir" ] || break
			sleep 0.1
		done
		[ -d "$dir" ] && echo "sweep.sh: could not remove cgroup $dir" >&2
	done
done </proc/mounts

# Network namespaces (their veths and routes go with them).
if command -v ip >/dev/null 2>&1; then
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		case "$ns" in "$prefix"*) ;; *) continue ;; esac
		selected "$ns" || continue
		found=1
		echo "netns $ns"
		[ "$check" = 1 ] && continue
		ip netns del "$ns" || echo "sweep.sh: could not remove netns $ns" >&2
	done
fi

# Pins on any bpffs (the tests pin nothing; this is the check that they don't).
while read -r _ mnt fstype _; do
	[ "$fstype" = bpf ] || continue
	for pin in "$mnt/$prefix"*; do
		[ -e "$pin" ] || continue
		selected "$(basename "$pin")" || continue
		found=1
		echo "pin $pin"
		[ "$check" = 1 ] && continue
		rm -rf "$pin"
	done
done </proc/mounts

# The e2e suite's temporary directories (its TMPDIR: built binaries,
# image layers, the tests' own directories), meshlet-test-<pid>-tmp.
tmpdirs=(/tmp)
[ -n "${TMPDIR:-}" ] && [ "${TMPDIR%/}" != /tmp ] && tmpdirs+=("${TMPDIR%/}")
for dir in $(for d in "${tmpdirs[@]}"; do printf '%s\n' "$d/$prefix"*-tmp; done); do
	[ -d "$dir" ] || continue
	selected "$(basename "$dir")" || continue
	if grep -q " $dir/" /proc/mounts; then
		echo "sweep.sh: $dir has mounts under it; not removing" >&2
		found=1
		continue
	fi
	found=1
	echo "tmp $dir ($(du -sh "$dir" 2>/dev/null | cut -f1))"
	[ "$check" = 1 ] && continue
	rm -rf "$dir" || echo "sweep.sh: could not remove $dir" >&2
done

# The rest is host-wide, not one test process's: not with --pid.
if [ -z "$only" ]; then

# kube-proxy's tables (the real-nodes e2e test runs one on the host and
# deletes them when it stops; this machine runs no other).
if command -v nft >/dev/null 2>&1 && ! pgrep -x kube-proxy >/dev/null 2>&1; then
	for family in ip ip6; do
		nft list table "$family" kube-proxy >/dev/null 2>&1 || continue
		found=1
		echo "nft table $family kube-proxy"
		[ "$check" = 1 ] && continue
		nft delete table "$family" kube-proxy || echo "sweep.sh: could not remove nft table $family kube-proxy" >&2
	done
fi

# What the real nodes' kubelets leave where their paths are fixed (the
# device-plugin and pod-resources sockets under /var/lib/kubelet) once no
# kubelet runs; this machine runs no other.
if ! pgrep -x kubelet >/dev/null 2>&1; then
	for sock in /var/lib/kubelet/device-plugins/kubelet.sock /var/lib/kubelet/pod-resources/kubelet.sock; do
		[ -S "$sock" ] || continue
		found=1
		echo "kubelet socket $sock"
		[ "$check" = 1 ] && continue
		rm -f "$sock"
		rmdir "$(dirname "$sock")" 2>/dev/null || true
	done
	[ "$check" = 1 ] || rmdir /var/lib/kubelet/plugins_registry /var/lib/kubelet/plugins /var/lib/kubelet 2>/dev/null || true
fi

# The empty filter table iptables (nft backend) leaves once the real
# nodes' guard rules are deleted; a table with any rule is someone's.
if command -v nft >/dev/null 2>&1 && ! pgrep -x kube-proxy >/dev/null 2>&1 &&
	out=$(nft list table ip filter 2>/dev/null) &&
	! grep -qvE '^[[:space:]]*(table .*|chain .*|type .*|policy .*|\}|)$' <<<"$out"; then
	found=1
	echo "nft table ip filter (no rules)"
	[ "$check" = 1 ] || nft delete table ip filter || echo "sweep.sh: could not remove nft table ip filter" >&2
fi

fi

if [ "$check" = 1 ] && [ "$found" = 1 ]; then
	exit 1
fi
exit 0
