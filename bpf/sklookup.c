// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Inbound steering, attached to the pod's network namespace: a TCP
 * connection for the pod's address is handed to the sidecar's inbound
 * listener whatever its port, and the sidecar learns the port from
 * getsockname() on the accepted socket. Left alone: loopback, connections
 * from the pod to its own address (the sidecar reaching the app), and the
 * ports in in_bypass_ports (excluded ports and the sidecar's own).
 * sk_lookup runs only for listener lookups (SYNs), not for established flows.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("sk_lookup")
int mesh_sk_lookup(struct bpf_sk_lookup *ctx)
{
	if (ctx->protocol != IPPROTO_TCP)
		return SK_PASS;

	__u32 local[4], remote[4];
	__u32 family = ctx->family, slot;
	if (family == AF_INET) {
		addr_from4(local, ctx->local_ip4);
		addr_from4(remote, ctx->remote_ip4);
		slot = 0;
	} else if (family == AF_INET6) {
		local[0] = READ32(ctx->local_ip6[0]);
		local[1] = READ32(ctx->local_ip6[1]);
		local[2] = READ32(ctx->local_ip6[2]);
		local[3] = READ32(ctx->local_ip6[3]);
		remote[0] = READ32(ctx->remote_ip6[0]);
		remote[1] = READ32(ctx->remote_ip6[1]);
		remote[2] = READ32(ctx->remote_ip6[2]);
		remote[3] = READ32(ctx->remote_ip6[3]);
		slot = 1;
	} else {
		return SK_PASS;
	}
	__u16 port = (__u16)ctx->local_port;
	if (addr_is_local_only(local) || addr_eq(local, remote) ||
	    bpf_map_lookup_elem(&in_bypass_ports, &port)) {
		count(C_LOOKUP_BYPASS);
		return SK_PASS;
	}

	struct bpf_sock *sk = bpf_map_lookup_elem(&inbound_sockets, &slot);
	if (!sk) {
		count(C_LOOKUP_NO_LISTENER);
		return SK_PASS;
	}
	long err = bpf_sk_assign(ctx, sk, 0);
	bpf_sk_release(sk);
	count(err ? C_LOOKUP_ASSIGN_ERR : C_LOOKUP_STEERED);
	return SK_PASS;
}
