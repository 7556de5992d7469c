// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Answers getsockopt(SOL_IP, SO_ORIGINAL_DST) and
 * getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST) on the sidecar's accepted
 * sockets from orig_by_peer, as netfilter would with iptables REDIRECT, so the
 * proxy code is the same in both modes. The kernel has already run its own
 * handler; on a miss its answer (ENOENT without conntrack) passes through.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup/getsockopt")
int mesh_getsockopt(struct bpf_sockopt *ctx)
{
	int want6;
	if (ctx->level == SOL_IP && ctx->optname == SO_ORIGINAL_DST)
		want6 = 0;
	else if (ctx->level == SOL_IPV6 && ctx->optname == IP6T_SO_ORIGINAL_DST)
		want6 = 1;
	else
		return 1;

	struct bpf_sock *sk = ctx->sk;
	if (!sk)
		return 1;
	struct addr_key k = {};
	__u32 family = sk->family;
	if (family == AF_INET) {
		addr_from4(k.addr, sk->dst_ip4);
	} else if (family == AF_INET6) {
		k.addr[0] = READ32(sk->dst_ip6[0]);
		k.addr[1] = READ32(sk->dst_ip6[1]);
		k.addr[2] = READ32(sk->dst_ip6[2]);
		k.addr[3] = READ32(sk->dst_ip6[3]);
	} else {
		return 1;
	}
	k.port = bpf_ntohs(sk->dst_port);

	struct orig_dst *o = bpf_map_lookup_elem(&orig_by_peer, &k);
	if (!o || (!want6 && o->family != AF_INET)) {
		count(C_GETSOCKOPT_MISS);
		return 1;
	}

	void *end = ctx->optval_end;
	if (!want6) {
		struct sockaddr_in *sa = ctx->optval;
		if ((void *)(sa + 1) > end)
			return 1;
		sa->sin_family = AF_INET;
		sa->sin_port = bpf_htons(o->port);
		sa->sin_addr = o->addr[3];
		__builtin_memset(sa->sin_zero, 0, sizeof(sa->sin_zero));
		ctx->optlen = sizeof(*sa);
	} else {
		/* An IPv4 original destination comes back v4-mapped. */
		struct sockaddr_in6 *sa = ctx->optval;
		if ((void *)(sa + 1) > end)
			return 1;
		sa->sin6_family = AF_INET6;
		sa->sin6_port = bpf_htons(o->port);
		sa->sin6_flowinfo = 0;
		sa->sin6_addr[0] = o->addr[0];
		sa->sin6_addr[1] = o->addr[1];
		sa->sin6_addr[2] = o->addr[2];
		sa->sin6_addr[3] = o->addr[3];
		sa->sin6_scope_id = 0;
		ctx->optlen = sizeof(*sa);
	}
	barrier();
	ctx->retval = 0;
	count(C_GETSOCKOPT_HIT);
	return 1;
}
