// Package bpf is meshlet's per-pod traffic capture: eBPF programs that the
// sidecar attaches to its own pod's cgroup and network namespace, with no
// iptables and no node agent.
//
// Outbound: cgroup/connect4 and connect6 rewrite the app's TCP connects to
// the sidecar's outbound listener (127.0.0.1:15001 and [::1]:15001 by
// default) and keep the dialled address. The sidecar recovers it on the
// accepted socket with [OriginalDst] (getsockopt SO_ORIGINAL_DST, answered by
// a cgroup/getsockopt program, so the same call works under iptables) or with
// [Objects.LookupOriginalDst] by peer address; cgroup/getpeername4/6 make the
// app see the address it dialled. Never redirected: connects made by the
// sidecar (its cgroup, with its uid as a second guard), loopback and
// unspecified destinations, excluded ports and ranges ([Objects.SetExclusions]),
// and everything but TCP.
//
// Inbound: an sk_lookup program on the pod's network namespace hands TCP
// connections for the pod's address, on any port, to the sidecar's inbound
// listener ([Objects.SetInboundListener]); getsockname on the accepted socket
// gives the port the client dialled. Loopback, connections from the pod to
// its own address, excluded inbound ports and the sidecar's own ports are left
// alone.
//
// Workers: an sk_reuseport program sends each new connection of a
// SO_REUSEPORT group to the worker listener of the CPU handling it
// ([Objects.RegisterWorkers]).
//
// Acceleration ([Options.Accelerate], [Objects.SetAcceleration]): sockops puts
// local (loopback) sockets of the pod into a sockhash, and an sk_msg program
// moves each write straight into the peer socket's receive queue; when the
// peer is not in the sockhash the write goes through TCP (SK_PASS, never a
// drop). BenchmarkHop and bench/redirect.sh (figures in bench/RESULTS.md)
// measure round trips shorter, but streaming mostly slower, and through
// the whole sidecar a latency gain with throughput from lower to higher.
// It stays off by default: it loses on bulk transfers,
// and redirected bytes bypass the receive queue that splice(2) reads, so a
// reader that splices from an accelerated socket stalls. meshlet's own TCP proxy asks
// [Objects.Accelerated] and copies those connections with Read and Write;
// an app's own splice readers cannot be fixed from here, so a pod opts in
// (`sidecar run -accelerate`, the meshlet.io/accelerate annotation).
//
// # Use
//
// Load once, attach to the pod, then create the listeners:
//
//	objs, err := bpf.Load(bpf.Options{})        // the sidecar's cgroup is its current one
//	att, err := objs.Attach(bpf.Pod{Cgroup: podCgroup, Netns: "/proc/self/ns/net"})
//	defer att.Close()
//	// listeners: net.ListenConfig with SetMultipathTCP(false)
//	objs.SetInboundListener(inbound)
//	dst, err := bpf.OriginalDst(acceptedConn)
//
// The hooks act on the cgroup a socket was created in, not on the caller's
// current cgroup, and accepted sockets inherit their listener's. The sidecar's
// listeners must therefore be created while it runs in (a child of) the pod
// cgroup, which is where Kubernetes puts a sidecar container. Sockets that go
// into a map (inbound and worker listeners, sockhash members) must be plain
// TCP: Go 1.24+ listeners are MPTCP by default, and MPTCP sockets are
// rejected; this package returns an error naming the fix.
//
// # When the sidecar dies
//
// Every attachment is a bpf_link held only by a file descriptor of the
// sidecar process; nothing is pinned. When the process exits or is killed,
// the kernel detaches everything and frees the maps: the app's traffic goes
// out unredirected (fail-open) and inbound connections reach the app's own
// listeners. Chosen because:
//   - a redirect that outlives its sidecar points the app's every connection at
//     a port nobody listens on, an outage of the whole pod until the sidecar is
//     back, which is worse than a short window without the mesh;
//   - pinning needs the host's bpffs in the pod (a pod-private bpffs dies with
//     the container) and a sweeper for pods that are gone; without pins there
//     is no node state to clean up, after a crash or a deleted pod alike;
//   - the kubelet restarts the sidecar container, which re-attaches before it
//     reports ready.
//
// The cost: while the sidecar is down, the app's connections leave without
// mTLS (peers requiring mTLS refuse them) and inbound connections bypass the
// sidecar's policy. Attachments are made with bpf_link only: on a kernel
// without cgroup bpf_link, Attach fails rather than fall back to the legacy
// attach, which would outlive the process. (The sk_msg program, attached to
// the sockhash, falls back to the map attach on kernels before 6.10: that one
// goes with the map, which goes with the process.)
//
// Requirements: root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN) to load and
// attach; afterwards the Objects work in a process that has given up root
// and every capability (the sidecar runs as uid 1337) on Linux 6.5 or later,
// which checks kernel.unprivileged_bpf_disabled only when programs and maps
// are created; a cgroup v2
// mount and Linux 5.15 or later. The programs use only UAPI context structs,
// so they need no kernel BTF and no CO-RE. The objects are compiled by bpf2go and
// committed; see gen.go.
package bpf
