// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * Worker selection in a SO_REUSEPORT group: a new connection goes to the
 * worker listener of the CPU handling it (slot base + cpu % n of its group in
 * workers). The group is found by the local port and family of md->sk, a
 * member of the group. Without an entry the kernel's hash decides.
 */
#include "meshlet.h"

char __license[] SEC("license") = "Dual BSD/GPL";

SEC("sk_reuseport")
int mesh_reuseport(struct sk_reuseport_md *md)
{
	struct bpf_sock *sk = md->sk;
	if (!sk)
		return SK_PASS;
	struct group_key k = {.port = (__u16)sk->src_port, .family = (__u16)sk->family};
	struct worker_group *g = bpf_map_lookup_elem(&worker_groups, &k);
	if (!g || g->n == 0) {
		count(C_REUSEPORT_FALLBACK);
		return SK_PASS;
	}
	__u32 slot = g->base + bpf_get_smp_processor_id() % g->n;
	if (bpf_sk_select_reuseport(md, &workers, &slot, 0))
		count(C_REUSEPORT_FALLBACK);
	else
		count(C_REUSEPORT_SELECTED);
	return SK_PASS;
}
