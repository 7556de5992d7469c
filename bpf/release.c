// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Map cleanup when a socket is released (closed by its last user):
 *  - the app's socket: its entry in orig_by_cookie;
 *  - the sidecar's accepted socket: the orig_by_peer entry keyed by its
 *    remote address. Only that socket has the app socket's local address as
 *    its peer, and the kernel cannot hand out that tuple again while it is
 *    open. (sock_release may not read a socket's own address, only its
 *    remote one.) Deleting the entry when the app's socket closes instead
 *    would race the sidecar, which may accept and ask after the app has gone.
 * sock_pairs needs nothing: the kernel drops closed sockets from it.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("cgroup/sock_release")
int mesh_release(struct bpf_sock *sk)
{
	if (sk->type != SOCK_STREAM)
		return 1;

	__u64 cookie = bpf_get_socket_cookie(sk);
	if (bpf_map_delete_elem(&orig_by_cookie, &cookie) == 0)
		count(C_RELEASED_COOKIE);

	struct addr_key peer = {};
	__u32 family = sk->family;
	if (family == AF_INET) {
		addr_from4(peer.addr, sk->dst_ip4);
	} else if (family == AF_INET6) {
		peer.addr[0] = READ32(sk->dst_ip6[0]);
		peer.addr[1] = READ32(sk->dst_ip6[1]);
		peer.addr[2] = READ32(sk->dst_ip6[2]);
		peer.addr[3] = READ32(sk->dst_ip6[3]);
	} else {
		return 1;
	}
	peer.port = bpf_ntohs(sk->dst_port);
	if (peer.port && bpf_map_delete_elem(&orig_by_peer, &peer) == 0)
		count(C_RELEASED_PEER);
	return 1;
}
