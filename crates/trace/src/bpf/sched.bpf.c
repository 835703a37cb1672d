// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Scheduler events for `ontime observe record`.
//
// Kernel types are declared here with only the fields we read and
// preserve_access_index, so libbpf relocates them against the running
// kernel's BTF (CO-RE): no vmlinux.h is generated or shipped.
//
// Every sched_switch is recorded (it is what tells who ran instead of a
// waiting vCPU); wake-ups, migrations, forks, exits and execs only for
// tracked tasks. A task is tracked when its tid is in `tracked_tids` or
// its cgroup (the cpu controller's on cgroup v1, the unified one on v2) is
// in `tracked_cgroups`; children of tracked tasks are tracked from fork.
#include <linux/types.h>
#include <linux/bpf.h>
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "cgroup_id.h"
struct rq { __u64 prev_steal_time_rq; } __attribute__((preserve_access_index));
struct cfs_rq { struct rq *rq; } __attribute__((preserve_access_index));
struct sched_entity { struct cfs_rq *cfs_rq; } __attribute__((preserve_access_index));
struct task_struct {
    unsigned int __state;
    int pid;
    int tgid;
    int prio;
    unsigned int cpu;
    int wake_cpu;
    struct css_set *cgroups;
    struct sched_entity se;
    char comm[16];
} __attribute__((preserve_access_index));
struct task_struct___old { long state; } __attribute__((preserve_access_index));
struct kvm_vcpu { int vcpu_id; } __attribute__((preserve_access_index));
struct irqaction;

#include "event.h"

/* Set by the loader before the object is loaded. */
const volatile bool track_all = false;
const volatile bool cgroup_v1 = true;
const volatile __u64 wakeup_threshold = 1 << 20;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 65536);
    __type(key, __u32);
    __type(value, __u32);
} tracked_tids SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __type(key, __u64);
    __type(value, __u32);
} tracked_cgroups SEC(".maps");

/* Per-task answer of is_tracked(), so a task's later events skip the map
 * lookups and the cgroup walk. An answer is good for one `generation`:
 * the reader bumps it when it changes what is tracked (new cgroups, threads
 * tracked by name) and at least once a second, so tasks moved into a
 * tracked cgroup are found. */
#define NOT_TRACKED 0xffffffffu
struct track_state {
    __u32 group;
    __u32 generation;
};

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct track_state);
} track_cache SEC(".maps");

/* Starts at 1: fresh task storage (all zero) is never current. */
volatile __u32 generation = 1;

/* [0] events lost because the ring was full. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} lost SEC(".maps");

static __always_inline __u64 task_cgroup_id(struct task_struct *t)
{
    return css_set_cgroup_id(BPF_CORE_READ(t, cgroups), cgroup_v1);
}

static __always_inline bool is_tracked(struct task_struct *t)
{
    __u32 tid = BPF_CORE_READ(t, pid);
    if (tid == 0)
        return false;
    /* Recording everything, a thread's group is still looked up: user
     * space reads it from tracked_tids to tell tenants' threads apart. */
    __u32 gen = generation;
    /* NULL when the storage is busy on this CPU: then ask the maps. */
    struct track_state *st = bpf_task_storage_get(&track_cache, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (st && st->generation == gen)
        return track_all || st->group != NOT_TRACKED;
    __u32 answer = NOT_TRACKED;
    __u32 *known = bpf_map_lookup_elem(&tracked_tids, &tid);
    if (known) {
        answer = *known;
    } else {
        __u64 cg = task_cgroup_id(t);
        __u32 *group = bpf_map_lookup_elem(&tracked_cgroups, &cg);
        if (group) {
            answer = *group;
            /* User space reads a thread's group from this map. */
            bpf_map_update_elem(&tracked_tids, &tid, group, BPF_ANY);
        }
    }
    if (st) {
        st->group = answer;
        st->generation = gen;
    }
    return track_all || answer != NOT_TRACKED;
}

static __always_inline void count_lost(void)
{
    __u32 zero = 0;
    __u64 *n = bpf_map_lookup_elem(&lost, &zero);
    if (n)
        *n += 1;
}

/* The reader drains on a timer; wake it only when the ring fills up. */
static __always_inline __u64 submit_flags(void)
{
    return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > wakeup_threshold ? BPF_RB_FORCE_WAKEUP
                                                                             : BPF_RB_NO_WAKEUP;
}

static __always_inline void emit_now(__u8 kind, __u8 flags, __u32 a, __u32 b, __u32 c)
{
    struct event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost();
        return;
    }
    e->ts = bpf_ktime_get_ns();
    e->a = a;
    e->b = b;
    e->c = c;
    e->cpu = bpf_get_smp_processor_id();
    e->kind = kind;
    e->flags = flags;
    bpf_ringbuf_submit(e, submit_flags());
}

/* [0] this CPU's steal clock as the last EV_STEAL on it said. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} steal_seen SEC(".maps");

/* EV_STEAL with this CPU's steal clock when it moved since the last: the
 * machine's own CPU was taken from it in between (the hypervisor beneath
 * ran something else), which no event inside it can show. The clock is
 * the one the scheduler keeps from the paravirtual one (KVM's) on each
 * update of its run-queue clock, reached through the current task's
 * run queue: per-CPU symbols like KVM's own steal_time are not visible to
 * BPF on kernels without CONFIG_KALLSYMS_ALL. Without
 * CONFIG_PARAVIRT_TIME_ACCOUNTING or CONFIG_FAIR_GROUP_SCHED the fields
 * are absent and nothing is emitted. The clock itself is emitted, not the
 * difference: a program interrupted between its read and its write (a
 * hard IRQ inside a softirq's program) emits the same value twice, which
 * the reader's difference makes nothing. */
static __always_inline void note_steal(void)
{
    struct task_struct *t = (struct task_struct *)bpf_get_current_task_btf();
    if (!bpf_core_field_exists(t->se.cfs_rq))
        return;
    struct cfs_rq *cfs = BPF_CORE_READ(t, se.cfs_rq);
    if (!cfs || !bpf_core_field_exists(cfs->rq))
        return;
    struct rq *rq = BPF_CORE_READ(cfs, rq);
    if (!rq || !bpf_core_field_exists(rq->prev_steal_time_rq))
        return;
    __u64 now = BPF_CORE_READ(rq, prev_steal_time_rq);
    __u32 zero = 0;
    __u64 *seen = bpf_map_lookup_elem(&steal_seen, &zero);
    if (!seen || now <= *seen)
        return;
    *seen = now;
    emit_now(EV_STEAL, 0, (__u32)now, (__u32)(now >> 32), 0);
}

static __always_inline void emit(__u8 kind, __u8 flags, __u32 a, __u32 b, __u32 c)
{
    note_steal();
    emit_now(kind, flags, a, b, c);
}

static __always_inline void emit_comm(__u8 kind, struct task_struct *t, __u32 a, __u32 b)
{
    struct comm_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost();
        return;
    }
    e->ev.ts = bpf_ktime_get_ns();
    e->ev.a = a;
    e->ev.b = b;
    e->ev.c = BPF_CORE_READ(t, tgid);
    e->ev.cpu = bpf_get_smp_processor_id();
    e->ev.kind = kind;
    e->ev.flags = 0;
    BPF_CORE_READ_STR_INTO(&e->comm, t, comm);
    bpf_ringbuf_submit(e, submit_flags());
}

static __always_inline long task_state(struct task_struct *t)
{
    if (bpf_core_field_exists(t->__state))
        return BPF_CORE_READ(t, __state);
    return BPF_CORE_READ((struct task_struct___old *)t, state);
}

static __always_inline __u32 task_cpu(struct task_struct *t)
{
    if (bpf_core_field_exists(t->cpu))
        return BPF_CORE_READ(t, cpu);
    return BPF_CORE_READ(t, wake_cpu);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    long state = task_state(prev);
    __u8 flags = 0;
    if (preempt)
        flags |= F_PREEMPT;
    if (preempt || state == 0)
        flags |= F_PREV_RUNNABLE;
    /* Real-time classes (prio below 100): a real-time thread queued behind
     * a fair one is throttled, which only these bits can show. */
    if (BPF_CORE_READ(prev, prio) < 100)
        flags |= F_PREV_RT;
    if (BPF_CORE_READ(next, prio) < 100)
        flags |= F_NEXT_RT;
    /* Cheap filter first: a tracked side makes the lookup worth it. */
    is_tracked(prev);
    is_tracked(next);
    emit(EV_SWITCH, flags, BPF_CORE_READ(prev, pid), BPF_CORE_READ(next, pid), (__u32)state);
    return 0;
}

static __always_inline void on_wake(struct task_struct *p, __u8 kind)
{
    if (!is_tracked(p))
        return;
    /* The thread current as it wakes p: the waker, or the thread an
     * interrupt came in on (0: the CPU was idle). */
    emit(kind, 0, BPF_CORE_READ(p, pid), (__u32)bpf_get_current_pid_tgid(), task_cpu(p));
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
    on_wake(p, EV_WAKEUP);
    return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct *p)
{
    on_wake(p, EV_WAKEUP_NEW);
    return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(on_migrate, struct task_struct *p, int dest_cpu)
{
    if (!is_tracked(p))
        return 0;
    emit(EV_MIGRATE, 0, BPF_CORE_READ(p, pid), task_cpu(p), dest_cpu);
    return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 ptid = BPF_CORE_READ(parent, pid);
    __u32 ctid = BPF_CORE_READ(child, pid);
    if (!is_tracked(parent))
        return 0;
    __u32 *group = bpf_map_lookup_elem(&tracked_tids, &ptid);
    if (group) {
        __u32 g = *group;
        bpf_map_update_elem(&tracked_tids, &ctid, &g, BPF_ANY);
    }
    emit_comm(EV_FORK, child, ptid, ctid);
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
    __u32 tid = BPF_CORE_READ(p, pid);
    if (!is_tracked(p))
        return 0;
    emit(EV_EXIT, 0, tid, 0, 0);
    return 0;
}

/* Every task's, tracked or not: a culprit first seen before its exec
 * (forked from a shell) is named by what it became. Execs are rare. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
    __u32 tid = BPF_CORE_READ(p, pid);
    emit_comm(EV_EXEC, p, tid, 0);
    return 0;
}

/* Every task's rename, as its exec: a thread names itself after it
 * starts (pthread_setname_np, Rust's thread names), so a culprit seen
 * before would keep its parent's name. The tracepoint fires before the
 * copy, so the new name is the argument, not p->comm. */
SEC("tp_btf/task_rename")
int BPF_PROG(on_rename, struct task_struct *p, const char *comm)
{
    struct comm_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
    if (!e) {
        count_lost();
        return 0;
    }
    e->ev.ts = bpf_ktime_get_ns();
    e->ev.a = BPF_CORE_READ(p, pid);
    e->ev.b = 0;
    e->ev.c = BPF_CORE_READ(p, tgid);
    e->ev.cpu = bpf_get_smp_processor_id();
    e->ev.kind = EV_RENAME;
    e->ev.flags = 0;
    bpf_probe_read_kernel_str(&e->comm, sizeof(e->comm), comm);
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* Interrupt time on every CPU, whatever it interrupts: a late event's wait
 * or run includes it (docs/explain.md). b: the thread current on the CPU
 * (0: idle). */
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(on_irq_entry, int irq, struct irqaction *action)
{
    emit(EV_IRQ_ENTRY, 0, (__u32)irq, (__u32)bpf_get_current_pid_tgid(), 0);
    return 0;
}

SEC("tp_btf/irq_handler_exit")
int BPF_PROG(on_irq_exit, int irq, struct irqaction *action, int ret)
{
    emit(EV_IRQ_EXIT, 0, (__u32)irq, (__u32)bpf_get_current_pid_tgid(), 0);
    return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(on_softirq_entry, unsigned int vec_nr)
{
    emit(EV_SOFTIRQ_ENTRY, 0, vec_nr, (__u32)bpf_get_current_pid_tgid(), 0);
    return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(on_softirq_exit, unsigned int vec_nr)
{
    emit(EV_SOFTIRQ_EXIT, 0, vec_nr, (__u32)bpf_get_current_pid_tgid(), 0);
    return 0;
}

/* x86 system vectors: the local timer and the scheduler's and
 * call-function IPIs, which irq_handler_entry does not see. Entry and exit
 * like a device interrupt's, a the vector, flagged F_IRQ_VECTOR. Not
 * loaded where the kernel lacks the tracepoints (other architectures). */
#define SYSTEM_VECTOR(name)                                                      \
    SEC("tp_btf/" #name "_entry")                                                \
    int BPF_PROG(on_##name##_entry, int vector)                                  \
    {                                                                            \
        emit(EV_IRQ_ENTRY, F_IRQ_VECTOR, (__u32)vector, (__u32)bpf_get_current_pid_tgid(), 0); \
        return 0;                                                                \
    }                                                                            \
    SEC("tp_btf/" #name "_exit")                                                 \
    int BPF_PROG(on_##name##_exit, int vector)                                   \
    {                                                                            \
        emit(EV_IRQ_EXIT, F_IRQ_VECTOR, (__u32)vector, (__u32)bpf_get_current_pid_tgid(), 0); \
        return 0;                                                                \
    }
SYSTEM_VECTOR(local_timer)
SYSTEM_VECTOR(reschedule)
SYSTEM_VECTOR(call_function)
SYSTEM_VECTOR(call_function_single)

SEC("tp_btf/kvm_entry")
int BPF_PROG(on_kvm_entry, struct kvm_vcpu *vcpu)
{
    struct task_struct *t = (struct task_struct *)bpf_get_current_task_btf();
    if (!is_tracked(t))
        return 0;
    emit(EV_KVM_ENTRY, 0, BPF_CORE_READ(t, pid), BPF_CORE_READ(vcpu, vcpu_id), 0);
    return 0;
}

SEC("tp_btf/kvm_exit")
int BPF_PROG(on_kvm_exit, struct kvm_vcpu *vcpu)
{
    struct task_struct *t = (struct task_struct *)bpf_get_current_task_btf();
    if (!is_tracked(t))
        return 0;
    emit(EV_KVM_EXIT, 0, BPF_CORE_READ(t, pid), BPF_CORE_READ(vcpu, vcpu_id), 0);
    return 0;
}
