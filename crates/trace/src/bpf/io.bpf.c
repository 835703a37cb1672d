// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// I/O at three layers for `ontime io record` (document 004).
//
// Application layer: the read/write family (preadv/pwritev too: QEMU's
// thread pool moves its images' data with them), fsync and openat through the
// syscall tracepoints, for tasks whose cgroup (the cpu controller's on
// cgroup v1, the unified one on v2) is in `tracked_cgroups` or whose tgid is
// in `tracked_tgids`; only regular files, so pipes, sockets and terminals
// cost one lookup and nothing else. Enter and exit are paired here, per
// thread, so one event carries the call's latency.
//
// Without per-call tracing (the default mode: the syscall tracepoints put
// every system call of every task on the kernel's slow path), the
// application layer is each thread's I/O counters: /proc for the living,
// `task_exit` below for those that end during the recording.
//
// Block layer: requests on the devices in `devices` (the tenants' loop
// devices and the disks under their image files), one record at each
// completion (tp_btf/block_rq_complete: the request says its device, size,
// operation and start); bios queued, merged and split on those devices
// are counted per device, not streamed.
//
// Kernel types are declared with only the fields read (CO-RE), as in
// sched.bpf.c.
#include <linux/types.h>
#include <linux/bpf.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "cgroup_id.h"
struct super_block { __u32 s_dev; } __attribute__((preserve_access_index));
struct inode {
    unsigned short i_mode;
    unsigned long i_ino;
    struct super_block *i_sb;
} __attribute__((preserve_access_index));
struct file {
    struct inode *f_inode;
    unsigned int f_flags;
    long long f_pos;
} __attribute__((preserve_access_index));
struct fdtable {
    unsigned int max_fds;
    struct file **fd;
} __attribute__((preserve_access_index));
struct files_struct { struct fdtable *fdt; } __attribute__((preserve_access_index));
/* What a thread read and wrote through system calls (CONFIG_TASK_XACCT),
 * as /proc/TGID/task/TID/io shows it. */
struct task_io_accounting {
    __u64 rchar;
    __u64 wchar;
    __u64 syscr;
    __u64 syscw;
} __attribute__((preserve_access_index));
struct task_struct {
    int pid;
    int tgid;
    struct css_set *cgroups;
    struct files_struct *files;
    struct task_io_accounting ioac;
} __attribute__((preserve_access_index));

#include "io_event.h"

#define S_IFMT 00170000
#define S_IFREG 0100000
#define O_DIRECT_X86 00040000

const volatile bool cgroup_v1 = true;
/* Cleared by the reader to stop at once: detaching two dozen tracepoint
 * links waits for RCU grace periods, over a second in all. */
volatile bool enabled = true;
const volatile __u64 wakeup_threshold = 1 << 20;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} events SEC(".maps");

/* cgroup id -> group */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u64);
    __type(value, __u32);
} tracked_cgroups SEC(".maps");

/* tgid -> group */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u32);
} tracked_tgids SEC(".maps");

/* dev_t (kernel encoding, major << 20 | minor) -> layer (IO_LAYER_*) */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 256);
    __type(key, __u32);
    __type(value, __u32);
} devices SEC(".maps");

/* A system call between enter and exit, per thread. */
struct pending_call {
    struct io_event ev;
    char path[IO_PATH_MAX];
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct pending_call);
} pending SEC(".maps");

/* Room to build a pending call (too large for the BPF stack). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct pending_call);
} scratch SEC(".maps");


struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
    __uint(max_entries, 256);
    __type(key, __u32);
    __type(value, struct dev_counts);
} dev_counts SEC(".maps");

/* group -> counts of its exited threads */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, struct app_counts);
} exited_io SEC(".maps");

/* tid -> its counts when the recording began (written by the reader) */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, struct app_counts);
} io_baseline SEC(".maps");

/* [0] events lost because the ring was full, [1] calls or requests whose
 * start could not be remembered (map full). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} lost SEC(".maps");

static __always_inline void count_lost(__u32 which)
{
    __u64 *n = bpf_map_lookup_elem(&lost, &which);
    if (n)
        *n += 1;
}

static __always_inline __u64 submit_flags(void)
{
    return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > wakeup_threshold ? BPF_RB_FORCE_WAKEUP
                                                                             : BPF_RB_NO_WAKEUP;
}

static __always_inline __u64 task_cgroup_id(struct task_struct *t)
{
    return css_set_cgroup_id(BPF_CORE_READ(t, cgroups), cgroup_v1);
}

/* The group of the current task, or IO_NO_GROUP. */
static __always_inline __u32 current_group(struct task_struct *t)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    __u32 *g = bpf_map_lookup_elem(&tracked_tgids, &tgid);
    if (g)
        return *g;
    __u64 cg = task_cgroup_id(t);
    g = bpf_map_lookup_elem(&tracked_cgroups, &cg);
    return g ? *g : IO_NO_GROUP;
}

static __always_inline struct file *fd_file(struct task_struct *t, __u64 fd)
{
    struct fdtable *fdt = BPF_CORE_READ(t, files, fdt);
    if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
        return 0;
    struct file **fds = BPF_CORE_READ(fdt, fd);
    struct file *f = 0;
    bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
    return f;
}

/* Fills the file's identity; false when it is not a regular file. */
static __always_inline bool file_identity(struct file *f, struct io_event *ev)
{
    if (!f)
        return false;
    unsigned short mode = BPF_CORE_READ(f, f_inode, i_mode);
    if ((mode & S_IFMT) != S_IFREG)
        return false;
    ev->ino = BPF_CORE_READ(f, f_inode, i_ino);
    ev->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
    ev->offset = BPF_CORE_READ(f, f_pos);
    if (BPF_CORE_READ(f, f_flags) & O_DIRECT_X86)
        ev->flags |= IO_F_DIRECT;
    return true;
}

struct sys_enter_ctx {
    __u64 common;
    __s32 nr;
    __u32 pad;
    __u64 args[6];
};

struct sys_exit_ctx {
    __u64 common;
    __s32 nr;
    __u32 pad;
    __s64 ret;
};

/* A call on a file descriptor: fd in args[0], count in args[2]; `pos_arg`
 * says args[3] is the offset (pread64/pwrite64). */
static __always_inline void enter_fd_call(struct sys_enter_ctx *ctx, __u8 kind, bool pos_arg)
{
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    __u32 group = current_group(t);
    if (group == IO_NO_GROUP)
        return;
    __u32 zero = 0;
    struct pending_call *p = bpf_map_lookup_elem(&scratch, &zero);
    if (!p)
        return;
    __builtin_memset(&p->ev, 0, sizeof(p->ev));
    if (!file_identity(fd_file(t, ctx->args[0]), &p->ev))
        return;
    if (pos_arg)
        p->ev.offset = ctx->args[3];
    p->ev.ts = bpf_ktime_get_ns();
    p->ev.fd = ctx->args[0];
    p->ev.bytes = kind == IO_FSYNC || kind == IO_FDATASYNC ? 0 : ctx->args[2];
    p->ev.group = group;
    p->ev.kind = kind;
    p->ev.tid = (__u32)bpf_get_current_pid_tgid();
    p->path[0] = 0;
    if (bpf_map_update_elem(&pending, &p->ev.tid, p, BPF_ANY))
        count_lost(1);
}

/* A call or request that started as `start` has ended with `ret`: one
 * event, stamped now, carrying its latency. */
static __always_inline void emit_done(const struct io_event *start, __s64 ret)
{
    __u64 now = bpf_ktime_get_ns();
    struct io_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost(0);
        return;
    }
    __builtin_memcpy(e, start, sizeof(*e));
    e->latency = now - start->ts;
    e->ts = now;
    e->ret = ret;
    e->cpu = bpf_get_smp_processor_id();
    bpf_ringbuf_submit(e, submit_flags());
}

static __always_inline void exit_call(struct sys_exit_ctx *ctx)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct pending_call *p = bpf_map_lookup_elem(&pending, &tid);
    if (!p)
        return;
    emit_done(&p->ev, ctx->ret);
    bpf_map_delete_elem(&pending, &tid);
}

/* Only opens of regular files are worth a record; it names the file. */
static __always_inline void exit_open(struct sys_exit_ctx *ctx)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct pending_call *p = bpf_map_lookup_elem(&pending, &tid);
    if (!p)
        return;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    if (ctx->ret < 0 || !file_identity(fd_file(t, ctx->ret), &p->ev)) {
        bpf_map_delete_elem(&pending, &tid);
        return;
    }
    __u64 now = bpf_ktime_get_ns();
    struct io_open_event *o = bpf_ringbuf_reserve(&events, sizeof(*o), 0);
    if (!o) {
        count_lost(0);
        bpf_map_delete_elem(&pending, &tid);
        return;
    }
    __builtin_memcpy(&o->ev, &p->ev, sizeof(o->ev));
    __builtin_memcpy(o->path, p->path, IO_PATH_MAX);
    o->ev.fd = ctx->ret;
    o->ev.latency = now - p->ev.ts;
    o->ev.ts = now;
    o->ev.ret = ctx->ret;
    o->ev.cpu = bpf_get_smp_processor_id();
    bpf_ringbuf_submit(o, submit_flags());
    bpf_map_delete_elem(&pending, &tid);
}

SEC("tracepoint/syscalls/sys_enter_read")
int enter_read(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_READ, false); return 0; }
SEC("tracepoint/syscalls/sys_enter_write")
int enter_write(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_WRITE, false); return 0; }
SEC("tracepoint/syscalls/sys_enter_pread64")
int enter_pread(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_PREAD, true); return 0; }
SEC("tracepoint/syscalls/sys_enter_pwrite64")
int enter_pwrite(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_PWRITE, true); return 0; }
/* readv/writev: args[2] is the vector count; the bytes come from ret. */
SEC("tracepoint/syscalls/sys_enter_readv")
int enter_readv(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_READV, false); return 0; }
SEC("tracepoint/syscalls/sys_enter_writev")
int enter_writev(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_WRITEV, false); return 0; }
/* preadv/pwritev: args[3] is the offset (pos_l, the whole of it on x86_64). */
SEC("tracepoint/syscalls/sys_enter_preadv")
int enter_preadv(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_PREADV, true); return 0; }
SEC("tracepoint/syscalls/sys_enter_pwritev")
int enter_pwritev(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_PWRITEV, true); return 0; }
SEC("tracepoint/syscalls/sys_enter_fsync")
int enter_fsync(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_FSYNC, false); return 0; }
SEC("tracepoint/syscalls/sys_enter_fdatasync")
int enter_fdatasync(struct sys_enter_ctx *ctx) { if (!enabled) return 0; enter_fd_call(ctx, IO_FDATASYNC, false); return 0; }

SEC("tracepoint/syscalls/sys_enter_openat")
int enter_openat(struct sys_enter_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    __u32 group = current_group(t);
    if (group == IO_NO_GROUP)
        return 0;
    __u32 zero = 0;
    struct pending_call *p = bpf_map_lookup_elem(&scratch, &zero);
    if (!p)
        return 0;
    __builtin_memset(&p->ev, 0, sizeof(p->ev));
    p->ev.ts = bpf_ktime_get_ns();
    p->ev.group = group;
    p->ev.kind = IO_OPENAT;
    p->ev.tid = (__u32)bpf_get_current_pid_tgid();
    bpf_probe_read_user_str(p->path, sizeof(p->path), (const char *)ctx->args[1]);
    if (bpf_map_update_elem(&pending, &p->ev.tid, p, BPF_ANY))
        count_lost(1);
    return 0;
}

SEC("tracepoint/syscalls/sys_exit_read")
int exit_read(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_write")
int exit_write(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_pread64")
int exit_pread(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_pwrite64")
int exit_pwrite(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_readv")
int exit_readv(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_writev")
int exit_writev(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_preadv")
int exit_preadv(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_pwritev")
int exit_pwritev(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_fsync")
int exit_fsync(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_fdatasync")
int exit_fdatasync(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_call(ctx); return 0; }
SEC("tracepoint/syscalls/sys_exit_openat")
int exit_openat(struct sys_exit_ctx *ctx) { if (!enabled) return 0; exit_open(ctx); return 0; }

/* A block request as the kernel keeps it (CO-RE: only the fields read).
 * The completion alone says everything: the request carries its own start
 * time, so no issue program and no map of requests in flight are needed
 * (each cost every request on its way; bench/results.md). */
struct gendisk {
    int major;
    int first_minor;
} __attribute__((preserve_access_index));
struct request_queue { struct gendisk *disk; } __attribute__((preserve_access_index));
struct request {
    struct request_queue *q;
    unsigned int cmd_flags;
    unsigned long long __sector;
    unsigned int __data_len;
    __u64 start_time_ns;
    __u64 io_start_time_ns;
} __attribute__((preserve_access_index));

enum req_op { REQ_OP_READ = 0, REQ_OP_WRITE = 1, REQ_OP_FLUSH = 2, REQ_OP_DISCARD = 3 };
enum req_flag_bits { __REQ_PREFLUSH = 18 };
#define REQ_OP_MASK 0xff

/* The block layer's operation letters, as block_rq_complete prints them:
 * R, W, F (flush, or before a write: FW), D. */
static __always_inline void rwbs_of(unsigned int flags, char *rwbs)
{
    unsigned int op = flags & REQ_OP_MASK;
    int i = 0;
    int preflush = bpf_core_enum_value(enum req_flag_bits, __REQ_PREFLUSH);
    if (op == REQ_OP_FLUSH || (preflush > 0 && preflush < 32 && (flags & (1u << preflush))))
        rwbs[i++] = 'F';
    if (op == REQ_OP_WRITE)
        rwbs[i++] = 'W';
    else if (op == REQ_OP_READ)
        rwbs[i++] = 'R';
    else if (op == REQ_OP_DISCARD)
        rwbs[i++] = 'D';
    else if (op != REQ_OP_FLUSH)
        rwbs[i++] = 'N';
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(rq_done, struct request *rq, unsigned char error, unsigned int nr_bytes)
{
    if (!enabled)
        return 0;
    struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
    if (!disk)
        return 0;
    __u32 dev = ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
    if (!bpf_map_lookup_elem(&devices, &dev))
        return 0;
    __u64 now = bpf_ktime_get_ns();
    struct io_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost(0);
        return 0;
    }
    __builtin_memset(e, 0, sizeof(*e));
    /* Issued to the device where the kernel keeps that (blk stats), else
     * when the request was made (iostats; queueing included); 0: unknown. */
    __u64 start = BPF_CORE_READ(rq, io_start_time_ns);
    if (!start)
        start = BPF_CORE_READ(rq, start_time_ns);
    e->latency = start && start < now ? now - start : 0;
    e->ts = now;
    e->offset = BPF_CORE_READ(rq, __sector) << 9;
    e->dev = dev;
    e->group = IO_NO_GROUP;
    e->ret = error ? -5 : 0;
    e->bytes = nr_bytes;
    e->kind = IO_BLOCK;
    e->cpu = bpf_get_smp_processor_id();
    rwbs_of(BPF_CORE_READ(rq, cmd_flags), e->rwbs);
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* block_bio_queue/backmerge/frontmerge: dev at 8, sector 16, nr_sector 24;
 * block_split: dev at 8. */
struct bio_ctx {
    __u64 common;
    __u32 dev;
    __u32 pad;
    __u64 sector;
    __u32 nr_sector;
};

static __always_inline struct dev_counts *counts_of(__u32 dev)
{
    if (!bpf_map_lookup_elem(&devices, &dev))
        return 0;
    struct dev_counts *c = bpf_map_lookup_elem(&dev_counts, &dev);
    if (c)
        return c;
    struct dev_counts fresh = {};
    bpf_map_update_elem(&dev_counts, &dev, &fresh, BPF_NOEXIST);
    return bpf_map_lookup_elem(&dev_counts, &dev);
}

SEC("tracepoint/block/block_bio_queue")
int bio_queue(struct bio_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct dev_counts *c = counts_of(ctx->dev);
    if (c) {
        c->bios += 1;
        c->bio_bytes += (__u64)ctx->nr_sector << 9;
    }
    return 0;
}

SEC("tracepoint/block/block_bio_backmerge")
int bio_backmerge(struct bio_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct dev_counts *c = counts_of(ctx->dev);
    if (c)
        c->merges += 1;
    return 0;
}

SEC("tracepoint/block/block_bio_frontmerge")
int bio_frontmerge(struct bio_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct dev_counts *c = counts_of(ctx->dev);
    if (c)
        c->merges += 1;
    return 0;
}

SEC("tracepoint/block/block_split")
int bio_split(struct bio_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct dev_counts *c = counts_of(ctx->dev);
    if (c)
        c->splits += 1;
    return 0;
}

/* A VMM's asynchronous I/O on its images, which the syscall tracepoints
 * do not see (document 004's virtual disk when QEMU runs aio=io_uring or
 * aio=native). Both are paired in flight by the kernel's own request
 * pointer. A plain hash, not an LRU: an LRU evicts silently, and a
 * request evicted in flight would vanish from the counts; here a full map
 * refuses the insert, which is counted as an event lost. A request whose
 * completion is never traced (a cancelled one) holds its entry. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u64);
    __type(value, struct io_event);
} async_pending SEC(".maps");

/* The stable io_uring opcodes (include/uapi/linux/io_uring.h). */
static __always_inline __u8 uring_kind(__u8 opcode)
{
    switch (opcode) {
    case 1:  /* IORING_OP_READV */
    case 4:  /* IORING_OP_READ_FIXED */
    case 22: /* IORING_OP_READ */
        return IO_URING_READ;
    case 2:  /* IORING_OP_WRITEV */
    case 5:  /* IORING_OP_WRITE_FIXED */
    case 23: /* IORING_OP_WRITE */
        return IO_URING_WRITE;
    case 3:  /* IORING_OP_FSYNC */
        return IO_URING_FSYNC;
    }
    return 0;
}

/* io_uring_submit_req, _file_get and _complete as their formats give them
 * (Linux 5.19 and later). */
struct uring_submit_ctx {
    __u64 common;
    void *ring;
    void *req;
    __u64 user_data;
    __u8 opcode;
};
struct uring_file_ctx {
    __u64 common;
    void *ring;
    void *req;
    __u64 user_data;
    int fd;
};
struct uring_complete_ctx {
    __u64 common;
    void *ring;
    void *req;
    __u64 user_data;
    int res;
};

/* The request's entry, made by whichever of submit and file lookup comes
 * first (their order has changed between kernels). */
static __always_inline struct io_event *async_entry(__u64 key, __u32 group)
{
    struct io_event *p = bpf_map_lookup_elem(&async_pending, &key);
    if (p)
        return p;
    struct io_event fresh = {};
    fresh.ts = bpf_ktime_get_ns();
    fresh.group = group;
    fresh.tid = (__u32)bpf_get_current_pid_tgid();
    if (bpf_map_update_elem(&async_pending, &key, &fresh, BPF_ANY)) {
        count_lost(1);
        return 0;
    }
    return bpf_map_lookup_elem(&async_pending, &key);
}

SEC("tracepoint/io_uring/io_uring_submit_req")
int uring_submit(struct uring_submit_ctx *ctx)
{
    if (!enabled)
        return 0;
    __u8 kind = uring_kind(ctx->opcode);
    if (!kind)
        return 0;
    __u32 group = current_group((struct task_struct *)bpf_get_current_task());
    if (group == IO_NO_GROUP)
        return 0;
    struct io_event *p = async_entry((__u64)ctx->req, group);
    if (p) {
        p->kind = kind;
        p->ts = bpf_ktime_get_ns();
    }
    return 0;
}

SEC("tracepoint/io_uring/io_uring_file_get")
int uring_file(struct uring_file_ctx *ctx)
{
    if (!enabled)
        return 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    __u32 group = current_group(t);
    if (group == IO_NO_GROUP)
        return 0;
    __u64 key = (__u64)ctx->req;
    struct io_event *p = async_entry(key, group);
    if (!p)
        return 0;
    if (!file_identity(fd_file(t, ctx->fd), p)) {
        bpf_map_delete_elem(&async_pending, &key);
        return 0;
    }
    /* The request carries its own offset; f_pos says nothing of it. */
    p->offset = 0;
    p->fd = ctx->fd;
    return 0;
}

/* A finished asynchronous request of a tracked VMM, as one event. */
static __always_inline void async_done(__u64 key, __s64 ret)
{
    struct io_event *p = bpf_map_lookup_elem(&async_pending, &key);
    if (!p)
        return;
    if (p->kind && p->dev) {
        /* io_uring's submit does not say the size: what it moved. */
        if (!p->bytes)
            p->bytes = ret > 0 ? (__u32)ret : 0;
        emit_done(p, ret);
    }
    bpf_map_delete_elem(&async_pending, &key);
}

SEC("tracepoint/io_uring/io_uring_complete")
int uring_complete(struct uring_complete_ctx *ctx)
{
    if (!enabled)
        return 0;
    async_done((__u64)ctx->req, ctx->res);
    return 0;
}

struct kiocb {
    struct file *ki_filp;
    long long ki_pos;
    int ki_flags;
} __attribute__((preserve_access_index));

/* The bytes a request asks for (inside an anonymous member on recent
 * kernels; CO-RE finds it there). */
struct iov_iter {
    unsigned long count;
} __attribute__((preserve_access_index));

/* The kiocb flags marking a Linux AIO read or write and a write
 * (IOCB_AIO_RW, IOCB_WRITE), read by the recorder from the tracepoint's
 * format, where the kernel prints them; 0 keeps these programs out. */
const volatile __u32 iocb_aio_rw = 0;
const volatile __u32 iocb_write = 0;

/* Direct I/O through iomap (ext4, xfs, btrfs) begins in the submitting
 * thread. Only Linux AIO's: the thread pool's calls are the syscall
 * programs' and io_uring's requests the io_uring programs'. */
SEC("tp_btf/iomap_dio_rw_begin")
int BPF_PROG(aio_begin, struct kiocb *iocb, struct iov_iter *iter)
{
    if (!enabled || !iocb_aio_rw)
        return 0;
    int flags = BPF_CORE_READ(iocb, ki_flags);
    if (!(flags & iocb_aio_rw))
        return 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    __u32 group = current_group(t);
    if (group == IO_NO_GROUP)
        return 0;
    struct io_event ev = {};
    if (!file_identity(BPF_CORE_READ(iocb, ki_filp), &ev))
        return 0;
    ev.offset = BPF_CORE_READ(iocb, ki_pos);
    ev.ts = bpf_ktime_get_ns();
    ev.group = group;
    ev.tid = (__u32)bpf_get_current_pid_tgid();
    ev.kind = (flags & iocb_write) ? IO_AIO_WRITE : IO_AIO_READ;
    /* What it asks for: a request whose completion is never seen is
     * still counted at its size (the reader's last drain). */
    ev.bytes = (__u32)BPF_CORE_READ(iter, count);
    __u64 key = (__u64)iocb;
    if (bpf_map_update_elem(&async_pending, &key, &ev, BPF_ANY))
        count_lost(1);
    return 0;
}

SEC("tp_btf/iomap_dio_complete")
int BPF_PROG(aio_complete, struct kiocb *iocb, int error, long ret)
{
    if (!enabled || !iocb_aio_rw)
        return 0;
    async_done((__u64)iocb, error ? error : ret);
    return 0;
}

/* A tracked thread's last counts, when it exits: /proc no longer shows
 * them, so the application layer's counters would lose what it did. Runs
 * in the exiting thread, after its last read or write. */
SEC("tracepoint/sched/sched_process_exit")
int task_exit(void *ctx)
{
    if (!enabled || !bpf_core_field_exists(((struct task_struct *)0)->ioac))
        return 0;
    struct task_struct *t = (struct task_struct *)bpf_get_current_task();
    __u32 group = current_group(t);
    if (group == IO_NO_GROUP)
        return 0;
    struct app_counts *sum = bpf_map_lookup_elem(&exited_io, &group);
    if (!sum)
        return 0;
    struct app_counts now = {
        .rchar = BPF_CORE_READ(t, ioac.rchar),
        .wchar = BPF_CORE_READ(t, ioac.wchar),
        .syscr = BPF_CORE_READ(t, ioac.syscr),
        .syscw = BPF_CORE_READ(t, ioac.syscw),
    };
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct app_counts *base = bpf_map_lookup_elem(&io_baseline, &tid);
    if (base) {
        now.rchar -= base->rchar;
        now.wchar -= base->wchar;
        now.syscr -= base->syscr;
        now.syscw -= base->syscw;
        bpf_map_delete_elem(&io_baseline, &tid);
    }
    __sync_fetch_and_add(&sum->rchar, now.rchar);
    __sync_fetch_and_add(&sum->wchar, now.wchar);
    __sync_fetch_and_add(&sum->syscr, now.syscr);
    __sync_fetch_and_add(&sum->syscw, now.syscw);
    return 0;
}
