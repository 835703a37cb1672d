// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// The scheduler event: the one definition shared by the BPF program
// (crates/trace/src/bpf/sched.bpf.c includes this file) and Rust (whose
// `Event`, kinds and flags crates/recording/build.rs generates from it).
// The recording stores events in this layout, little-endian. build.rs
// reads the enums and structs it names (`enum kind`, `struct event`; the
// others, like `struct comm_event`, are C only) and every `#define NAME
// VALUE`: enum members as `NAME = N,`, struct fields as `TYPE name;` with
// __u64, __s64, __u32, __s32, __u16, __s16, __u8 or __s8, or `char
// name[N];`, naturally aligned with no padding between or after them, and
// defines with a decimal or hex value and a Rust type build.rs gives their
// prefix (F_: u8, TASK_: u32). A comment just before an item or field, or
// after it on its line, becomes its Rust doc (Markdown). build.rs stops on
// anything else it is asked to read, naming the line.
#ifndef ONTIME_EVENT_H
#define ONTIME_EVENT_H

/* Kinds of event. */
enum kind {
    EV_SWITCH = 1,
    EV_WAKEUP = 2,
    EV_WAKEUP_NEW = 3,
    EV_MIGRATE = 4,
    EV_FORK = 5,
    EV_EXIT = 6,
    EV_EXEC = 7,
    EV_KVM_ENTRY = 8,
    EV_KVM_EXIT = 9,
    /* A hard interrupt handler entered on this CPU (irq_handler_entry),
     * recorded on every CPU whatever it interrupts; and x86's local timer
     * and scheduler and call-function IPIs (the irq_vectors tracepoints,
     * with F_IRQ_VECTOR, a the vector), where the kernel has them. */
    EV_IRQ_ENTRY = 10,
    EV_IRQ_EXIT = 11,
    /* A softirq run on this CPU (softirq_entry, softirq_exit), recorded
     * like EV_IRQ_ENTRY. */
    EV_SOFTIRQ_ENTRY = 12,
    EV_SOFTIRQ_EXIT = 13,
    /* A task renamed itself (task_rename: prctl PR_SET_NAME, which is how
     * threads get their names), recorded for every task like EV_EXEC: a
     * culprit seen before its rename is named by its new name. */
    EV_RENAME = 14,
    /* This CPU's steal clock moved since it was last emitted (a KVM
     * guest's: the hypervisor beneath ran something else while this CPU
     * had work or a timer due), seen before the event it comes with and
     * stamped like it; a and b the clock (ns), low and high 32 bits. The
     * difference from the CPU's previous STEAL was taken somewhere between
     * them; a CPU's first STEAL only sets its start. */
    EV_STEAL = 15,
};

/* flags of a switch: the previous task stays runnable (preempted or
 * yielded), so its wait for a CPU starts now. */
#define F_PREV_RUNNABLE 1
/* flags of a switch: the kernel preempted the previous task. */
#define F_PREEMPT 2
/* flags of a switch: the previous task is real-time (prio below 100:
 * SCHED_FIFO, SCHED_RR, SCHED_DEADLINE). Set by both mechanisms (the
 * perf fallback reads sched_switch's prev_prio and next_prio). */
#define F_PREV_RT 4
/* flags of a switch: the next task is real-time, as F_PREV_RT. */
#define F_NEXT_RT 8
/* flags of an IRQ entry or exit: a is an x86 system vector (local timer,
 * reschedule or call-function IPI), not an IRQ number. */
#define F_IRQ_VECTOR 16
/* TASK_DEAD in the previous task's state: it will never run again. */
#define TASK_DEAD 0x80
/* TASK_UNINTERRUPTIBLE in the previous task's state: it blocked in the
 * kernel (typically on I/O), not a voluntary sleep. */
#define TASK_UNINTERRUPTIBLE 0x02

/* One scheduler event, as the BPF ring carries it and the recording
 * stores it. What a, b and c hold depends on the kind:
 *
 * | kind | a | b | c |
 * |---|---|---|---|
 * | SWITCH | prev tid | next tid | prev state |
 * | WAKEUP(_NEW) | tid | current tid (the waker, or the thread an interrupt came in on; 0: the CPU idled) | target CPU |
 * | MIGRATE | tid | from CPU | to CPU |
 * | FORK | parent tid | child tid | child tgid |
 * | EXIT | tid | - | - |
 * | EXEC | tid | - | tgid |
 * | RENAME | tid | - | tgid |
 * | KVM_ENTRY/EXIT | tid | vCPU id | - |
 * | IRQ_ENTRY/EXIT | IRQ number (vector with F_IRQ_VECTOR) | tid current on the CPU (0: idle) | - |
 * | SOFTIRQ_ENTRY/EXIT | softirq vector (0 HI .. 9 RCU) | tid current on the CPU (0: idle) | - |
 * | STEAL | steal clock (ns), low 32 bits | high 32 bits | - |
 *
 * In IRQ and softirq events `a` is not a thread id. */
struct event {
    __u64 ts;
    __u32 a;
    __u32 b;
    __u32 c;
    __u16 cpu;
    __u8 kind;
    __u8 flags;
};

/* FORK, EXEC and RENAME carry the task's (new) comm after the event in
 * the ring. */
struct comm_event {
    struct event ev;
    char comm[16];
};

#endif
