// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Outbound capture: an app's TCP connect is rewritten to the sidecar's
 * outbound listener and the dialled address is saved under the socket cookie.
 * Exempt: the sidecar (its cgroup id, then its uid), loopback and unspecified
 * destinations, excluded ports and ranges, and everything but TCP.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

static __always_inline int is_tcp(struct bpf_sock_addr *ctx)
{
	__u32 proto = ctx->protocol;
	return ctx->type == SOCK_STREAM &&
	       (proto == IPPROTO_TCP || proto == IPPROTO_MPTCP);
}

static __always_inline int from_proxy(void)
{
	if (cfg_proxy_cgroup && bpf_get_current_cgroup_id() == cfg_proxy_cgroup) {
		count(C_BYPASS_PROXY_CGROUP);
		return 1;
	}
	if (cfg_proxy_uid_set && (__u32)bpf_get_current_uid_gid() == cfg_proxy_uid) {
		count(C_BYPASS_PROXY_UID);
		return 1;
	}
	return 0;
}

/* Saves the dialled address and reports whether the connect may be
 * redirected. Nothing is redirected whose destination could not be saved:
 * the sidecar would not know where it was going. */
static __always_inline int capture(void *ctx, const __u32 *dst, __u16 port, __u16 family)
{
	if (addr_is_local_only(dst)) {
		count(C_BYPASS_LOOPBACK);
		return 0;
	}
	if (bpf_map_lookup_elem(&out_excluded_ports, &port)) {
		count(C_BYPASS_PORT);
		return 0;
	}
	struct cidr_key ck = {.prefixlen = 128};
	ck.addr[0] = dst[0];
	ck.addr[1] = dst[1];
	ck.addr[2] = dst[2];
	ck.addr[3] = dst[3];
	if (bpf_map_lookup_elem(&out_excluded_cidrs, &ck)) {
		count(C_BYPASS_CIDR);
		return 0;
	}

	struct orig_dst o = {.port = port, .family = family};
	o.addr[0] = dst[0];
	o.addr[1] = dst[1];
	o.addr[2] = dst[2];
	o.addr[3] = dst[3];
	__u64 cookie = bpf_get_socket_cookie(ctx);
	if (bpf_map_update_elem(&orig_by_cookie, &cookie, &o, BPF_ANY)) {
		count(C_SAVE_ERR);
		return 0;
	}
	return 1;
}

SEC("cgroup/connect4")
int mesh_connect4(struct bpf_sock_addr *ctx)
{
	if (!is_tcp(ctx))
		return 1;
	count(C_CONNECT);
	if (from_proxy())
		return 1;

	__u32 dst[4];
	addr_from4(dst, ctx->user_ip4);
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	if (!capture(ctx, dst, port, AF_INET))
		return 1;

	ctx->user_ip4 = cfg_out4_ip;
	ctx->user_port = (__u32)bpf_htons((__u16)cfg_out4_port);
	count(C_REDIRECTED);
	return 1;
}

/* connect6 also sees IPv4 connects made on dual-stack sockets (v4-mapped
 * destinations); those go to the IPv4 listener, in its v4-mapped form. */
SEC("cgroup/connect6")
int mesh_connect6(struct bpf_sock_addr *ctx)
{
	if (!is_tcp(ctx))
		return 1;
	count(C_CONNECT);
	if (from_proxy())
		return 1;

	__u32 dst[4];
	dst[0] = READ32(ctx->user_ip6[0]);
	dst[1] = READ32(ctx->user_ip6[1]);
	dst[2] = READ32(ctx->user_ip6[2]);
	dst[3] = READ32(ctx->user_ip6[3]);
	__u16 port = bpf_ntohs((__u16)ctx->user_port);
	int v4 = addr_is_v4(dst);
	if (!capture(ctx, dst, port, v4 ? AF_INET : AF_INET6))
		return 1;

	if (v4) {
		ctx->user_ip6[0] = 0;
		ctx->user_ip6[1] = 0;
		ctx->user_ip6[2] = bpf_htonl(0xffff);
		ctx->user_ip6[3] = cfg_out4_ip;
		barrier();
		ctx->user_port = (__u32)bpf_htons((__u16)cfg_out4_port);
	} else {
		ctx->user_ip6[0] = cfg_out6_ip[0];
		ctx->user_ip6[1] = cfg_out6_ip[1];
		ctx->user_ip6[2] = cfg_out6_ip[2];
		ctx->user_ip6[3] = cfg_out6_ip[3];
		barrier();
		ctx->user_port = (__u32)bpf_htons((__u16)cfg_out6_port);
	}
	count(C_REDIRECTED);
	return 1;
}
