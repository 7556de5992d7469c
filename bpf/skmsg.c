// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Loopback acceleration: every sendmsg on a socket in sock_pairs goes
 * straight into the receive queue of its peer socket, skipping TCP/IP. When
 * the peer is not in the map the message goes through TCP as usual: a miss
 * must return SK_PASS, because bpf_msg_redirect_hash's own SK_DROP would
 * drop the data.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("sk_msg")
int mesh_sk_msg(struct sk_msg_md *msg)
{
	/* The peer's key is ours reversed. */
	struct pair_key peer = {};
	__u32 family = msg->family;
	if (family == AF_INET) {
		addr_from4(peer.local, msg->remote_ip4);
		addr_from4(peer.remote, msg->local_ip4);
	} else if (family == AF_INET6) {
		peer.local[0] = READ32(msg->remote_ip6[0]);
		peer.local[1] = READ32(msg->remote_ip6[1]);
		peer.local[2] = READ32(msg->remote_ip6[2]);
		peer.local[3] = READ32(msg->remote_ip6[3]);
		peer.remote[0] = READ32(msg->local_ip6[0]);
		peer.remote[1] = READ32(msg->local_ip6[1]);
		peer.remote[2] = READ32(msg->local_ip6[2]);
		peer.remote[3] = READ32(msg->local_ip6[3]);
	} else {
		return SK_PASS;
	}
	peer.lport = (__u16)bpf_ntohl(msg->remote_port);
	peer.rport = (__u16)msg->local_port;

	__u32 size = msg->size;
	if (bpf_msg_redirect_hash(msg, &sock_pairs, &peer, BPF_F_INGRESS) == SK_PASS) {
		count(C_MSG_REDIRECTED);
		count_n(C_MSG_REDIRECTED_BYTES, size);
		return SK_PASS;
	}
	count(C_MSG_PASSED);
	count_n(C_MSG_PASSED_BYTES, size);
	return SK_PASS;
}
