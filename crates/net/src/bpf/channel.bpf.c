// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Document 003's data path: `stamp` (tc egress on the sending tenant's veth,
// inside its namespace: the VMM boundary) pushes an MPLS label carrying the
// packet's absolute deadline and sets the channel's DSCP; `check` (XDP on
// the receiving veth) compares the deadline with now, pops the label and
// counts on-time and missed packets per channel, pushing each miss to a
// ring buffer. The label arithmetic is crates/net/src/channel.rs's.
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/pkt_cls.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define ETH_P_MPLS_UC 0x8847
#define LABEL_UNIT_NS 10000ULL
#define LABEL_WRAP ((1ULL << 20) - 16)
#define MAX_CHANNELS 64

struct chan_key {
    __u32 saddr;
    __u32 daddr;
    __u16 dport;
    __u16 pad;
};

struct chan_val {
    __u32 id;        /* the DSCP, 1..63 */
    __u32 tc;        /* the label's traffic class: 1 deadline, 2 reservation */
    __u64 deadline_ns;
};

struct chan_stats {
    __u64 stamped;
    __u64 on_time;
    __u64 missed;
    __u64 max_overrun_ns;
    /* stamp to check, where the channel's relative deadline is known */
    __u64 delay_sum_ns;
    __u64 delay_max_ns;
    __u64 delay_count;
    /* bytes the stamp labelled (the frame with its label) */
    __u64 stamped_bytes;
};

struct miss {
    __u64 overrun_ns;
    __u32 channel;
    __u16 ip_id;
    __u16 pad;
    /* when the check ran (CLOCK_MONOTONIC), to join the relay's record */
    __u64 checked_ns;
};

/* The ring carries `struct miss`, which no map names: this global puts it
 * in the object's BTF, so the skeleton generates its Rust twin
 * (skel::types::miss) as it does for the maps' keys and values. Every
 * struct shared with Rust is generated from this file, never copied. */
struct miss miss_layout;

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, struct chan_key);
    __type(value, struct chan_val);
} channels SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, MAX_CHANNELS);
    __type(key, __u32);
    __type(value, struct chan_stats);
} stats SEC(".maps");

/* Each channel's relative deadline (by DSCP), so the check can tell when a
 * packet was stamped: deadline - relative (to the label's 10 us). */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, MAX_CHANNELS);
    __type(key, __u32);
    __type(value, __u64);
} relative SEC(".maps");

/* [0] malformed or foreign MPLS frames dropped, [1] stamp failures */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} errors SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1 << 20);
} misses SEC(".maps");

static __always_inline void count_error(__u32 which)
{
    __u64 *n = bpf_map_lookup_elem(&errors, &which);
    if (n)
        *n += 1;
}

SEC("tc")
int stamp(struct __sk_buff *skb)
{
    void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
        return TC_ACT_OK;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > end || ip->ihl < 5)
        return TC_ACT_OK;
    struct chan_key key = { .saddr = ip->saddr, .daddr = ip->daddr };
    if (ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP) {
        __u16 dport = 0;
        if (bpf_skb_load_bytes(skb, sizeof(*eth) + ip->ihl * 4 + 2, &dport, 2) == 0)
            key.dport = dport;
    }
    struct chan_val *ch = bpf_map_lookup_elem(&channels, &key);
    if (!ch) {
        key.dport = 0;
        ch = bpf_map_lookup_elem(&channels, &key);
        if (!ch)
            return TC_ACT_OK;
    }
    __u32 id = ch->id, tc = ch->tc;
    __u64 deadline = bpf_ktime_get_ns() + ch->deadline_ns;
    /* DSCP: the upper six bits of TOS; the header checksum follows. */
    __u16 old_word = *(__u16 *)ip;
    __u8 tos = (id << 2) | (ip->tos & 3);
    ip->tos = tos;
    __u16 new_word = *(__u16 *)ip;
    if (bpf_l3_csum_replace(skb, sizeof(*eth) + offsetof(struct iphdr, check), old_word, new_word, 2)) {
        count_error(1);
        return TC_ACT_OK;
    }
    if (bpf_skb_adjust_room(skb, 4, BPF_ADJ_ROOM_MAC, 0)) {
        count_error(1);
        return TC_ACT_OK;
    }
    __u32 label = 16 + (__u32)((deadline / LABEL_UNIT_NS) % LABEL_WRAP);
    __u32 mpls = bpf_htonl((label << 12) | ((tc & 7) << 9) | (1 << 8) | 64);
    __u16 proto = bpf_htons(ETH_P_MPLS_UC);
    if (bpf_skb_store_bytes(skb, sizeof(struct ethhdr), &mpls, 4, 0) ||
        bpf_skb_store_bytes(skb, offsetof(struct ethhdr, h_proto), &proto, 2, 0)) {
        count_error(1);
        return TC_ACT_SHOT;
    }
    __u32 idx = id;
    struct chan_stats *st = bpf_map_lookup_elem(&stats, &idx);
    if (st) {
        st->stamped += 1;
        st->stamped_bytes += skb->len;
    }
    return TC_ACT_OK;
}

/* The deadline a label carries: the instant nearest `now` with its residue. */
static __always_inline __u64 decode_deadline(__u32 label, __u64 now)
{
    __s64 residue = label - 16;
    __s64 now_units = now / LABEL_UNIT_NS;
    __s64 wrap = LABEL_WRAP;
    __s64 base = now_units - now_units % wrap;
    __s64 best = base + residue;
    __s64 d = best - now_units;
    if (d > wrap / 2)
        best -= wrap;
    else if (d < -wrap / 2)
        best += wrap;
    if (best < 0)
        best = 0;
    return (__u64)best * LABEL_UNIT_NS;
}

SEC("xdp")
int check(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_MPLS_UC))
        return XDP_PASS;
    __u32 *mp = (void *)(eth + 1);
    struct iphdr *ip = (void *)(mp + 1);
    if ((void *)(ip + 1) > end) {
        count_error(0);
        return XDP_DROP;
    }
    __u32 mpls = bpf_ntohl(*mp);
    __u32 label = mpls >> 12;
    /* One label (bottom of stack), not a reserved value, IPv4 inside: ours. */
    if (!(mpls & (1 << 8)) || label < 16 || ip->version != 4) {
        count_error(0);
        return XDP_DROP;
    }
    __u64 now = bpf_ktime_get_ns();
    __u64 deadline = decode_deadline(label, now);
    __u32 channel = ip->tos >> 2;
    struct chan_stats *st = bpf_map_lookup_elem(&stats, &channel);
    if (now > deadline) {
        __u64 overrun = now - deadline;
        if (st) {
            st->missed += 1;
            if (overrun > st->max_overrun_ns)
                st->max_overrun_ns = overrun;
        }
        struct miss *m = bpf_ringbuf_reserve(&misses, sizeof(*m), 0);
        if (m) {
            m->overrun_ns = overrun;
            m->channel = channel;
            m->ip_id = bpf_ntohs(ip->id);
            m->pad = 0;
            m->checked_ns = now;
            bpf_ringbuf_submit(m, 0);
        }
    } else if (st) {
        st->on_time += 1;
    }
    __u64 *rel = bpf_map_lookup_elem(&relative, &channel);
    if (st && rel && *rel && deadline >= *rel && now >= deadline - *rel) {
        __u64 delay = now - (deadline - *rel);
        st->delay_sum_ns += delay;
        st->delay_count += 1;
        if (delay > st->delay_max_ns)
            st->delay_max_ns = delay;
    }
    /* Pop: move the MAC addresses 4 bytes on, IPv4 EtherType, drop the head. */
    struct ethhdr copy;
    __builtin_memcpy(&copy, eth, sizeof(copy));
    if (bpf_xdp_adjust_head(ctx, 4))
        return XDP_DROP;
    data = (void *)(long)ctx->data;
    end = (void *)(long)ctx->data_end;
    eth = data;
    if ((void *)(eth + 1) > end)
        return XDP_DROP;
    __builtin_memcpy(eth->h_dest, copy.h_dest, ETH_ALEN);
    __builtin_memcpy(eth->h_source, copy.h_source, ETH_ALEN);
    eth->h_proto = bpf_htons(ETH_P_IP);
    return XDP_PASS;
}
