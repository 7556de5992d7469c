/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The subset of the kernel's BPF UAPI (linux/bpf.h and friends) that meshlet's
 * programs use, written by hand so that no vmlinux.h or kernel headers are
 * needed. Every program type here only touches UAPI context structs, which the
 * kernel rewrites itself, so there are no CO-RE relocations.
 *
 * Context structs are truncated after the last field used: the kernel checks
 * accesses by offset, and a shorter struct is fine.
 *
 * bpf_helpers.h, bpf_helper_defs.h and bpf_endian.h next to this file are
 * libbpf 0.6.1's, as shipped in github.com/cilium/ebpf's examples/headers
 * (LGPL-2.1 OR BSD-2-Clause, see LICENSE.BSD-2-Clause).
 */
#pragma once

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

#define __bpf_md_ptr(type, name) \
	union {                  \
		type name;       \
		__u64 : 64;      \
	} __attribute__((aligned(8)))

/* Map types (enum bpf_map_type). */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_LPM_TRIE = 11,
	BPF_MAP_TYPE_SOCKMAP = 15,
	BPF_MAP_TYPE_SOCKHASH = 18,
	BPF_MAP_TYPE_REUSEPORT_SOCKARRAY = 20,
};

/* Map flags and helper flags. */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_INGRESS (1ULL << 0)

/* enum sk_action, returned by sk_msg, sk_lookup and sk_reuseport programs. */
#define SK_DROP 0
#define SK_PASS 1

/* enum bpf_sock_ops_cb: the sockops callbacks used, and their flags. */
#define BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB 4
#define BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB 5
#define BPF_SOCK_OPS_STATE_CB 10 /* args[0]: old state, args[1]: new state */
#define BPF_SOCK_OPS_STATE_CB_FLAG (1 << 2)
#define BPF_TCP_CLOSE 7

/* Socket constants (linux/socket.h, linux/in.h, linux/netfilter_ipv4.h). */
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define IPPROTO_TCP 6
#define IPPROTO_MPTCP 262
#define SOL_IP 0
#define SOL_IPV6 41
#define SO_ORIGINAL_DST 80      /* netfilter_ipv4.h */
#define IP6T_SO_ORIGINAL_DST 80 /* netfilter_ipv6/ip6_tables.h */

struct bpf_sock {
	__u32 bound_dev_if;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 mark;
	__u32 priority;
	__u32 src_ip4;    /* network byte order */
	__u32 src_ip6[4]; /* network byte order */
	__u32 src_port;   /* host byte order */
	__be16 dst_port;  /* network byte order */
	__u16 : 16;
	__u32 dst_ip4;    /* network byte order */
	__u32 dst_ip6[4]; /* network byte order */
	__u32 state;
};

/* cgroup/connect4, connect6, getpeername4, getpeername6. */
struct bpf_sock_addr {
	__u32 user_family;
	__u32 user_ip4;    /* network byte order; 4-byte writes only */
	__u32 user_ip6[4]; /* network byte order; 4- and 8-byte writes */
	__u32 user_port;   /* network byte order in the low 16 bits; 4-byte writes only */
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 msg_src_ip4;
	__u32 msg_src_ip6[4];
	__bpf_md_ptr(struct bpf_sock *, sk);
};

/* sockops, truncated after local_port. */
struct bpf_sock_ops {
	__u32 op;
	union {
		__u32 args[4];
		__u32 reply;
		__u32 replylong[4];
	};
	__u32 family;
	__u32 remote_ip4;    /* network byte order */
	__u32 local_ip4;     /* network byte order */
	__u32 remote_ip6[4]; /* network byte order */
	__u32 local_ip6[4];  /* network byte order */
	__u32 remote_port;   /* network byte order in the upper 16 bits (little endian): use bpf_ntohl */
	__u32 local_port;    /* host byte order */
};

/* sk_msg, truncated after size. */
struct sk_msg_md {
	__bpf_md_ptr(void *, data);
	__bpf_md_ptr(void *, data_end);
	__u32 family;
	__u32 remote_ip4;    /* network byte order */
	__u32 local_ip4;     /* network byte order */
	__u32 remote_ip6[4]; /* network byte order */
	__u32 local_ip6[4];  /* network byte order */
	__u32 remote_port;   /* like bpf_sock_ops.remote_port: use bpf_ntohl */
	__u32 local_port;    /* host byte order */
	__u32 size;          /* bytes in this message */
};

/* cgroup/getsockopt. */
struct bpf_sockopt {
	__bpf_md_ptr(struct bpf_sock *, sk);
	__bpf_md_ptr(void *, optval);
	__bpf_md_ptr(void *, optval_end);
	__s32 level;
	__s32 optname;
	__s32 optlen;
	__s32 retval;
};

/* sk_lookup. */
struct bpf_sk_lookup {
	union {
		__bpf_md_ptr(struct bpf_sock *, sk);
		__u64 cookie;
	};
	__u32 family;
	__u32 protocol;
	__u32 remote_ip4;    /* network byte order */
	__u32 remote_ip6[4]; /* network byte order */
	__be16 remote_port;  /* network byte order */
	__u16 : 16;
	__u32 local_ip4;     /* network byte order */
	__u32 local_ip6[4];  /* network byte order */
	__u32 local_port;    /* host byte order */
	__u32 ingress_ifindex;
};

/* sk_reuseport. */
struct sk_reuseport_md {
	__bpf_md_ptr(void *, data);
	__bpf_md_ptr(void *, data_end);
	__u32 len;
	__u32 eth_protocol;
	__u32 ip_protocol;
	__u32 bind_inany;
	__u32 hash;
	__bpf_md_ptr(struct bpf_sock *, sk); /* a member of the group: its local port names the group */
	__bpf_md_ptr(struct bpf_sock *, migrating_sk);
};

/* Userspace socket addresses written by the getsockopt program. */
struct sockaddr_in {
	__u16 sin_family;
	__be16 sin_port;
	__be32 sin_addr;
	__u8 sin_zero[8];
};

struct sockaddr_in6 {
	__u16 sin6_family;
	__be16 sin6_port;
	__be32 sin6_flowinfo;
	__be32 sin6_addr[4];
	__u32 sin6_scope_id;
};
