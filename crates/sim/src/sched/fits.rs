//! What the lab measured of this host's kernel, kept apart from the
//! kernel's rules as written (kernel/sched/fair.c's wake-up placement and
//! preemption): the shares `ontime sim calibrate` fits from observe's
//! wake-up placement, and the per-job draws that apply them.

use super::Job;

/// How a measured host's kernel treats waking fair threads (from
/// observe's wake-up placement, pooled by `ontime sim calibrate`); the
/// default is the kernel's rules as written (an idle CPU first, EEVDF's
/// wake-up preemption).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MeasuredWakeups {
    /// Of a fair thread's wake-ups that find its last CPU busy while
    /// another idles, the share queued on that busy CPU all the same (0:
    /// always the idle one, as mainline's `select_idle_sibling` would
    /// within a shared cache). Not a default of the kernel's: the lab
    /// VM's packing kernel keeps about 91 %.
    pub stay_on_busy_prev: f64,
    /// Of fair threads woken onto a CPU running a fair thread, the share
    /// that preempts it at once (the lab VM's 6.18 kernel: about 76 %).
    /// None: not measured; EEVDF decides as written (lag kept across
    /// sleep, eligibility, run to parity, delayed dequeue: [`Eevdf`](crate::eevdf::Eevdf))
    /// where the model keeps per-CPU queues, else run to parity.
    pub preempts: Option<f64>,
    /// A fair thread waking while its last CPU runs a real-time or
    /// deadline thread goes to a CPU that runs none, idle first, else one
    /// running a fair thread. The lab VM's kernel (`ontime observe report
    /// --wakeups`, placement by what the last CPU ran: the host I/O path,
    /// or the gateway among the untracked; two runs of 4 tenants at
    /// 100/s, gateway at fifo:95): with the relay at fifo:90, 741 of 741
    /// crawlers so woken went to the idle CPU and 1079 of 1235 (87 %) to
    /// the one running a crawler; with the relay fair, 456 of 456 and 203
    /// of 361 (56 %). The model moves all.
    /// false: only to an idle CPU, as `select_idle_sibling` does.
    pub leave_real_time: bool,
}

/// Keeps the wake-up preemption draw apart from the placement draw.
pub(super) const WAKE_PREEMPT_SALT: u64 = 0x5eed_0f9e_e3b7;

/// A draw in [0, 1) fixed by the job (its thread and release time), so a
/// run is repeatable and the draw needs no state (splitmix64's finalizer).
pub(super) fn unit_draw(job: &Job) -> f64 {
    salted_draw(job, 0)
}

/// [`unit_draw`] for another question about the same job: a different
/// `salt` gives an independent draw.
pub(super) fn salted_draw(job: &Job, salt: u64) -> f64 {
    let mut h = (job.task as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ job.release_ns ^ salt;
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}
