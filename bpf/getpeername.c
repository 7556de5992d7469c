// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * getpeername() on a redirected app socket returns the address the app
 * dialled, not the sidecar's listener. The entry is found by the socket's
 * cookie or, failing that (an MPTCP app: connect saw the cookie of its
 * subflow), by its local address in orig_by_peer, when the kernel's answer is
 * the outbound listener.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

static __always_inline struct orig_dst *lookup(struct bpf_sock_addr *ctx, int to_outbound)
{
	__u64 cookie = bpf_get_socket_cookie(ctx);
	struct orig_dst *o = bpf_map_lookup_elem(&orig_by_cookie, &cookie);
	if (o || !to_outbound)
		return o;
	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 0;
	struct addr_key k = {.port = (__u16)sk->src_port};
	if (sk->family == AF_INET) {
		addr_from4(k.addr, sk->src_ip4);
	} else {
		k.addr[0] = READ32(sk->src_ip6[0]);
		k.addr[1] = READ32(sk->src_ip6[1]);
		k.addr[2] = READ32(sk->src_ip6[2]);
		k.addr[3] = READ32(sk->src_ip6[3]);
	}
	return bpf_map_lookup_elem(&orig_by_peer, &k);
}

SEC("cgroup/getpeername4")
int mesh_getpeer4(struct bpf_sock_addr *ctx)
{
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int to_outbound = ctx->user_ip4 == cfg_out4_ip && port == cfg_out4_port;
	struct orig_dst *o = lookup(ctx, to_outbound);
	if (!o || o->family != AF_INET)
		return 1;
	ctx->user_ip4 = o->addr[3];
	ctx->user_port = (__u32)bpf_htons(o->port);
	count(C_GETPEERNAME_HIT);
	return 1;
}

SEC("cgroup/getpeername6")
int mesh_getpeer6(struct bpf_sock_addr *ctx)
{
	__u32 peer[4];
	peer[0] = READ32(ctx->user_ip6[0]);
	peer[1] = READ32(ctx->user_ip6[1]);
	peer[2] = READ32(ctx->user_ip6[2]);
	peer[3] = READ32(ctx->user_ip6[3]);
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int to_outbound;
	if (addr_is_v4(peer))
		to_outbound = peer[3] == cfg_out4_ip && port == cfg_out4_port;
	else
		to_outbound = port == cfg_out6_port && peer[0] == cfg_out6_ip[0] &&
			      peer[1] == cfg_out6_ip[1] && peer[2] == cfg_out6_ip[2] &&
			      peer[3] == cfg_out6_ip[3];
	struct orig_dst *o = lookup(ctx, to_outbound);
	if (!o)
		return 1;
	/* o->addr is v4-mapped for an IPv4 dial on a dual-stack socket, which is
	 * exactly how such a socket reports its peer. */
	ctx->user_ip6[0] = o->addr[0];
	ctx->user_ip6[1] = o->addr[1];
	ctx->user_ip6[2] = o->addr[2];
	ctx->user_ip6[3] = o->addr[3];
	barrier();
	ctx->user_port = (__u32)bpf_htons(o->port);
	count(C_GETPEERNAME_HIT);
	return 1;
}
