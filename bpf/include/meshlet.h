/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * What every meshlet program shares: the maps (one definition; the Go side
 * creates each map once and hands the same map to every object), the
 * load-time configuration, the counters, and address helpers.
 *
 * Addresses are kept in one 16-byte form for both families: IPv6 as is and
 * IPv4 as ::ffff:a.b.c.d, as four 32-bit words in network byte order. A
 * connection made on a dual-stack AF_INET6 socket to a v4-mapped address and
 * one made on an AF_INET socket thus produce the same keys. Ports in map keys
 * and values are in host byte order.
 */
#pragma once

#include "uapi.h"
#include "bpf_helpers.h"
#include "bpf_endian.h"

/* Keep the compiler from merging adjacent 32-bit context stores into one
 * 64-bit store, which the verifier rejects ("invalid bpf_context access"). */
#define barrier() asm volatile("" ::: "memory")

/* Context fields are read one 32-bit word at a time: several contexts reject
 * 8-byte loads, which the compiler may otherwise produce for adjacent words. */
#define READ32(x) (*(volatile __u32 *)&(x))

#define MAX_CONNS 65536
#define MAX_EXCLUSIONS 1024
#define MAX_WORKER_SLOTS 1024
#define MAX_WORKER_GROUPS 64

/* ---- load-time configuration (set from Go before loading) ---- */

volatile const __u32 cfg_out4_ip;    /* outbound listener, IPv4, network order */
volatile const __u32 cfg_out4_port;  /* host order */
volatile const __u32 cfg_out6_ip[4]; /* outbound listener, IPv6, network order */
volatile const __u32 cfg_out6_port;  /* host order */
volatile const __u64 cfg_proxy_cgroup; /* cgroup v2 id of the sidecar; 0: none */
volatile const __u32 cfg_proxy_uid;
volatile const __u32 cfg_proxy_uid_set;

/* ---- maps ---- */

struct orig_dst {
	__u32 addr[4]; /* the dialled address */
	__u16 port;    /* the dialled port, host order */
	__u16 family;  /* AF_INET or AF_INET6: the family the app dialled */
};

struct addr_key {
	__u32 addr[4];
	__u16 port; /* host order */
	__u16 pad;
};

struct pair_key {
	__u32 local[4];
	__u32 remote[4];
	__u16 lport; /* host order */
	__u16 rport; /* host order */
};

struct cidr_key {
	__u32 prefixlen; /* over the 128-bit form: IPv4 /n is 96+n */
	__u32 addr[4];
};

struct group_key {
	__u16 port;   /* the reuseport group's local port, host order */
	__u16 family; /* the group's socket family */
};

struct worker_group {
	__u32 base; /* first slot in workers */
	__u32 n;    /* number of workers */
};

struct settings {
	__u32 accelerate; /* insert local pairs into sock_pairs */
};

/* Original destination by socket cookie: written at connect, read by
 * getpeername and by sockops, deleted when the app's socket is released. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, __u64);
	__type(value, struct orig_dst);
} orig_by_cookie SEC(".maps");

/* Original destination by the app socket's local address, which is the
 * sidecar's peer address: written by sockops when the app's connect is
 * established, read by getsockopt and by the Go side, deleted when the
 * sidecar's accepted socket is released. An LRU covers connections the
 * sidecar never accepts. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_CONNS);
	__type(key, struct addr_key);
	__type(value, struct orig_dst);
} orig_by_peer SEC(".maps");

/* Local (loopback) sockets by their own 4-tuple, for sk_msg. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, MAX_CONNS);
	__uint(key_size, sizeof(struct pair_key));
	__uint(value_size, sizeof(__u64));
} sock_pairs SEC(".maps");

/* Outbound destination ports that are never redirected. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EXCLUSIONS);
	__type(key, __u16);
	__type(value, __u8);
} out_excluded_ports SEC(".maps");

/* Outbound destination ranges that are never redirected. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, MAX_EXCLUSIONS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct cidr_key);
	__type(value, __u8);
} out_excluded_cidrs SEC(".maps");

/* Inbound local ports sk_lookup leaves alone (excluded ports and the
 * sidecar's own ports). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EXCLUSIONS);
	__type(key, __u16);
	__type(value, __u8);
} in_bypass_ports SEC(".maps");

/* The sidecar's inbound listener: slot 0 for IPv4 lookups, 1 for IPv6. */
struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 2);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
} inbound_sockets SEC(".maps");

/* Worker listeners of all reuseport groups; a group owns a range of slots. */
struct {
	__uint(type, BPF_MAP_TYPE_REUSEPORT_SOCKARRAY);
	__uint(max_entries, MAX_WORKER_SLOTS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u64));
} workers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_WORKER_GROUPS);
	__type(key, struct group_key);
	__type(value, struct worker_group);
} worker_groups SEC(".maps");

/* Run-time switches, one entry. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct settings);
} settings SEC(".maps");

/* ---- counters: a per-CPU array, summed by the Go side (counters.go) ---- */

enum counter {
	C_CONNECT = 0,          /* TCP connects seen by connect4/6 */
	C_REDIRECTED,           /* ... rewritten to the outbound listener */
	C_BYPASS_PROXY_CGROUP,  /* ... made by the sidecar (cgroup id) */
	C_BYPASS_PROXY_UID,     /* ... made by the sidecar's uid */
	C_BYPASS_LOOPBACK,      /* ... to a loopback or unspecified address */
	C_BYPASS_PORT,          /* ... to an excluded port */
	C_BYPASS_CIDR,          /* ... to an excluded range */
	C_SAVE_ERR,             /* ... not redirected: orig_by_cookie update failed */
	C_REKEYED,              /* sockops moved an entry to orig_by_peer */
	C_REKEY_ERR,
	C_GETSOCKOPT_HIT,       /* SO_ORIGINAL_DST answered */
	C_GETSOCKOPT_MISS,      /* SO_ORIGINAL_DST asked, no entry */
	C_GETPEERNAME_HIT,      /* getpeername answered with the dialled address */
	C_RELEASED_COOKIE,      /* orig_by_cookie entries deleted at release */
	C_RELEASED_PEER,        /* orig_by_peer entries deleted at release */
	C_SOCKHASH_INSERT,      /* sockets put into sock_pairs */
	C_SOCKHASH_ERR,
	C_MSG_REDIRECTED,       /* sk_msg messages redirected to the peer socket */
	C_MSG_REDIRECTED_BYTES,
	C_MSG_PASSED,           /* sk_msg messages passed to TCP (peer not in sock_pairs) */
	C_MSG_PASSED_BYTES,
	C_LOOKUP_STEERED,       /* sk_lookup assigned the inbound listener */
	C_LOOKUP_BYPASS,        /* ... left alone: loopback, self, excluded or own port */
	C_LOOKUP_NO_LISTENER,   /* ... left alone: no inbound listener registered */
	C_LOOKUP_ASSIGN_ERR,
	C_REUSEPORT_SELECTED,   /* sk_reuseport picked the worker of the current CPU */
	C_REUSEPORT_FALLBACK,   /* ... left the choice to the kernel */
	C_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_n(__u32 c, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &c);
	if (v)
		*v += n; /* per-CPU: no atomics needed */
}

static __always_inline void count(__u32 c)
{
	count_n(c, 1);
}

static __always_inline int accelerate(void)
{
	__u32 zero = 0;
	struct settings *s = bpf_map_lookup_elem(&settings, &zero);
	return s && s->accelerate;
}

/* ---- addresses ---- */

static __always_inline void addr_from4(__u32 *a, __u32 ip4)
{
	a[0] = 0;
	a[1] = 0;
	a[2] = bpf_htonl(0xffff);
	a[3] = ip4;
}

static __always_inline int addr_is_v4(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

/* 127.0.0.0/8, 0.0.0.0, ::1 and ::. */
static __always_inline int addr_is_local_only(const __u32 *a)
{
	if (addr_is_v4(a))
		return (bpf_ntohl(a[3]) >> 24) == 127 || a[3] == 0;
	return a[0] == 0 && a[1] == 0 && a[2] == 0 &&
	       (a[3] == 0 || a[3] == bpf_htonl(1));
}

static __always_inline int addr_eq(const __u32 *a, const __u32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}
