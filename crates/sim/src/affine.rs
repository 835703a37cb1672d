//! What Linux's fair class weighs when one thread wakes another that last
//! ran on a different CPU (`select_task_rq_fair`, kernel/sched/fair.c):
//! how often each waker changes the thread it wakes (`wakee_flips`, which
//! `wake_wide` compares to keep a thread that many others wake where it
//! is) and every thread's PELT runnable average with the CPU holding its
//! load, from which the Linux model makes the CPUs' loads and the threads'
//! hierarchical loads that `wake_affine_weight` compares.
//!
//! Leaves out: PELT's 1 ms steps (the average decays continuously, as in
//! [`crate::shares`]), utilisation, and capacity and frequency scaling.

use crate::shares::runnable_average;

/// `wakee_flips` halve once a second (`record_wakee`: `HZ`).
const FLIP_DECAY_NS: u64 = 1_000_000_000;

#[derive(Clone, Debug)]
pub struct WakeAffine {
    /// Per thread: PELT's runnable average (0..1) as of `at_ns`, whether
    /// it has been runnable since, and the CPU holding its load (where it
    /// is runnable, else where it last was: a sleeping thread's load stays,
    /// decaying, on its CPU's queue).
    avg: Vec<f64>,
    at_ns: Vec<u64>,
    runnable: Vec<bool>,
    cpu: Vec<usize>,
    /// Per thread as a waker: `wakee_flips`, `last_wakee`,
    /// `wakee_flip_decay_ts`.
    flips: Vec<u32>,
    last_wakee: Vec<Option<usize>>,
    flip_decay_ns: Vec<u64>,
}

impl WakeAffine {
    pub fn new(threads: usize, cpus: usize) -> WakeAffine {
        let cpus = cpus.max(1);
        WakeAffine {
            avg: vec![0.0; threads],
            at_ns: vec![0; threads],
            runnable: vec![false; threads],
            cpu: (0..threads).map(|t| t % cpus).collect(),
            flips: vec![0; threads],
            last_wakee: vec![None; threads],
            flip_decay_ns: vec![0; threads],
        }
    }

    /// Follows where every thread is runnable at `now` (`homes`, as the
    /// engine keeps them; None: asleep).
    pub fn sync(&mut self, homes: &[Option<usize>], now: u64) {
        for (t, home) in homes.iter().enumerate().take(self.avg.len()) {
            if home.is_some() != self.runnable[t] || home.is_some_and(|c| c != self.cpu[t]) {
                self.avg[t] = self.average_at(t, now);
                self.at_ns[t] = now;
                self.runnable[t] = home.is_some();
            }
            if let Some(c) = *home {
                self.cpu[t] = c;
            }
        }
    }

    /// Thread `t`'s runnable average at `now`, 0..1.
    pub fn average_at(&self, t: usize, now: u64) -> f64 {
        runnable_average(self.avg[t], self.runnable[t], now.saturating_sub(self.at_ns[t]))
    }

    /// The CPU whose queue holds thread `t`'s load.
    pub fn cpu_of(&self, t: usize) -> usize {
        self.cpu[t]
    }

    /// `waker` (the thread current on the waking CPU, an interrupt's too)
    /// wakes `wakee` at `now` (`record_wakee`).
    pub fn record_wakee(&mut self, waker: usize, wakee: usize, now: u64) {
        if now > self.flip_decay_ns[waker] + FLIP_DECAY_NS {
            self.flips[waker] >>= 1;
            self.flip_decay_ns[waker] = now;
        }
        if self.last_wakee[waker] != Some(wakee) {
            self.last_wakee[waker] = Some(wakee);
            self.flips[waker] += 1;
        }
    }

    /// Whether `wake_wide` keeps `wakee` off its waker's CPU: both switch
    /// wakees often, one of them `llc_size` times as often as the other
    /// (a thread serving many, or many serving one).
    pub fn wide(&self, waker: usize, wakee: usize, llc_size: usize) -> bool {
        let factor = llc_size as u32;
        let (a, b) = (self.flips[waker], self.flips[wakee]);
        let (master, slave) = if a < b { (b, a) } else { (a, b) };
        !(slave < factor || master < slave.saturating_mul(factor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A waker that alternates between two wakees flips each time; one
    /// that wakes the same thread does not; flips halve each second.
    #[test]
    fn flips_count_changes_of_wakee_and_halve_each_second() {
        let mut w = WakeAffine::new(4, 2);
        for i in 0..10u64 {
            w.record_wakee(0, 1 + (i % 2) as usize, i * MS);
            w.record_wakee(3, 1, i * MS);
        }
        assert_eq!((w.flips[0], w.flips[3]), (10, 1));
        // The server (0) flips ten times as often as its client (3).
        assert!(!w.wide(3, 0, 2), "a client of 1 flip is below the LLC size");
        w.record_wakee(3, 2, 11 * MS);
        w.record_wakee(3, 1, 12 * MS);
        assert!(w.wide(3, 0, 2), "3 flips against 10");
        // Past a second the next wake-up halves them first.
        w.record_wakee(0, 1, 1_500 * MS);
        assert_eq!(w.flips[0], 5 + 1);
    }

    /// Runnable half the time in 4 ms cycles: the average settles near
    /// one half; asleep for 32 ms it halves; the load stays on the CPU
    /// the thread last ran on.
    #[test]
    fn the_runnable_average_follows_the_thread_and_stays_where_it_slept() {
        let mut w = WakeAffine::new(1, 2);
        let mut now = 0;
        while now < 1_000 * MS {
            w.sync(&[Some(1)], now);
            w.sync(&[None], now + 2 * MS);
            now += 4 * MS;
        }
        let avg = w.average_at(0, now);
        assert!((0.45..0.55).contains(&avg), "{avg}");
        let later = w.average_at(0, now + 32 * MS + (32 * MS) / 40);
        assert!((avg / 2.0 - later).abs() < 0.02, "{avg} then {later}");
        assert_eq!(w.cpu_of(0), 1);
    }
}
