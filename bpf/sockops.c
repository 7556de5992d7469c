// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * sockops, on established connections:
 *  - an app connect that connect4/6 redirected is re-keyed from its cookie to
 *    its local address, which is what the sidecar sees as the peer of the
 *    accepted socket (the cookie of that socket is a different one);
 *  - with acceleration on, sockets whose both ends are local (loopback) go
 *    into sock_pairs, where sk_msg finds the peer of each.
 * ACTIVE_ESTABLISHED runs while the client handles the SYN-ACK, before its
 * final ACK makes the connection acceptable, so the entry is always there
 * when the sidecar accepts.
 * A redirected socket also asks for state callbacks, to delete its cookie
 * entry when it closes: an MPTCP app's connect is seen on its first subflow,
 * which is never released as a socket of its own (sock_release handles the
 * rest).
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("sockops")
int mesh_sockops(struct bpf_sock_ops *skops)
{
	__u32 op = skops->op;
	if (op == BPF_SOCK_OPS_STATE_CB) {
		if (skops->args[1] == BPF_TCP_CLOSE) {
			__u64 cookie = bpf_get_socket_cookie(skops);
			if (bpf_map_delete_elem(&orig_by_cookie, &cookie) == 0)
				count(C_RELEASED_COOKIE);
		}
		return 1;
	}
	if (op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;

	struct pair_key k = {};
	__u32 family = skops->family;
	if (family == AF_INET) {
		addr_from4(k.local, skops->local_ip4);
		addr_from4(k.remote, skops->remote_ip4);
	} else if (family == AF_INET6) {
		k.local[0] = READ32(skops->local_ip6[0]);
		k.local[1] = READ32(skops->local_ip6[1]);
		k.local[2] = READ32(skops->local_ip6[2]);
		k.local[3] = READ32(skops->local_ip6[3]);
		k.remote[0] = READ32(skops->remote_ip6[0]);
		k.remote[1] = READ32(skops->remote_ip6[1]);
		k.remote[2] = READ32(skops->remote_ip6[2]);
		k.remote[3] = READ32(skops->remote_ip6[3]);
	} else {
		return 1;
	}
	k.lport = (__u16)skops->local_port;
	k.rport = (__u16)bpf_ntohl(skops->remote_port);

	if (op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB) {
		__u64 cookie = bpf_get_socket_cookie(skops);
		struct orig_dst *o = bpf_map_lookup_elem(&orig_by_cookie, &cookie);
		if (o) {
			struct addr_key pk = {.port = k.lport};
			pk.addr[0] = k.local[0];
			pk.addr[1] = k.local[1];
			pk.addr[2] = k.local[2];
			pk.addr[3] = k.local[3];
			if (bpf_map_update_elem(&orig_by_peer, &pk, o, BPF_ANY))
				count(C_REKEY_ERR);
			else
				count(C_REKEYED);
			bpf_sock_ops_cb_flags_set(skops, BPF_SOCK_OPS_STATE_CB_FLAG);
		}
	}

	if (accelerate() && addr_is_local_only(k.local) && addr_is_local_only(k.remote)) {
		if (bpf_sock_hash_update(skops, &sock_pairs, &k, BPF_ANY))
			count(C_SOCKHASH_ERR);
		else
			count(C_SOCKHASH_INSERT);
	}
	return 1;
}
