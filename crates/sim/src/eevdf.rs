//! EEVDF's per-CPU bookkeeping for the Linux model's fair class
//! (kernel/sched/fair.c since 6.6, with 6.12's delayed dequeue): each
//! entity's lag, its place in its current slice, and which run queue
//! holds it, so the model can ask what the kernel asks when a thread
//! wakes onto a busy CPU: is the running entity still eligible, is its
//! slice protected, and whose virtual deadline comes first.
//!
//! Lag is kept as the kernel defines it, `V - v_i` in virtual
//! nanoseconds, `V` the run queue's weighted average virtual runtime:
//! while an entity runs for `dt`, `V` moves on by `dt * 1024 / W` and the
//! runner's `v` by `dt * 1024 / w`. Enqueueing an entity with lag `l`
//! moves `V` back by `w l / W` (`place_entity` inflates the lag so the
//! newcomer keeps exactly `l`), dequeueing moves it forward again; the
//! lags on a queue sum to zero. An entity queued on an empty queue gets
//! no lag (`place_entity` applies it only beside others). A sleeping
//! entity keeps its lag, not its `v`.
//!
//! Rules followed, each as the kernel has it:
//! - `place_entity` (PLACE_LAG): a waking or migrating entity keeps the
//!   lag it left with; its deadline is one slice ahead (`used` = 0).
//! - `entity_lag`: the lag kept at dequeue is clamped to the largest
//!   slice plus a tick (1.5 ms + 4 ms at HZ=250 on 2 CPUs).
//! - DELAY_DEQUEUE: an entity going to sleep while not eligible (lag < 0)
//!   stays on its queue, gaining lag as the others run, and leaves once
//!   eligible (or once nothing runnable is left on the queue) with its
//!   lag clipped to zero (DELAY_ZERO). It wakes where it is
//!   (`ttwu_runnable` requeues it without choosing a CPU).
//! - RUN_TO_PARITY: an entity picked to run is protected up to its
//!   deadline (`set_protect_slice`: vprot = deadline, all slices being
//!   equal here); a waking entity preempts only an ineligible or
//!   unprotected current, and only when it has the earliest virtual
//!   deadline among the eligible (`check_preempt_wakeup_fair`,
//!   `__pick_eevdf`).
//! - Cgroups one level below the root: a group's threads queue on the
//!   group's per-CPU queue, and the group's entity on that CPU competes at
//!   the root (`find_matching_se` decides at the level both share).
//!
//! Left out: NEXT_BUDDY and PREEMPT_SHORT (off, or without effect when
//! all slices are equal), reweighting, per-CPU shares of a group's weight
//! (each group entity weighs the group's weight), and the tick's rounding
//! of deadlines.

/// Virtual nanoseconds per nanosecond at nice 0.
const NICE_0: i64 = 1024;
/// A tick at Debian's CONFIG_HZ=250 (`entity_lag` adds one to the clamp).
const TICK_NS: u64 = 4_000_000;

#[derive(Clone, Debug)]
pub struct Eevdf {
    cpus: usize,
    threads: usize,
    /// Per thread, its cgroup (None: the root).
    group: Vec<Option<usize>>,
    /// Per entity: threads 0..threads, then group g's entity on CPU c at
    /// threads + g * cpus + c.
    weight: Vec<i64>,
    /// The slice in virtual time (slice * 1024 / weight), and the lag
    /// clamp (`entity_lag`), per entity.
    vslice: Vec<i64>,
    lag_limit: Vec<i64>,
    /// Lag kept while not queued.
    lag: Vec<i64>,
    /// Virtual runtime while queued.
    v: Vec<i64>,
    /// Virtual time used of the entity's current slice (its deadline is
    /// `vslice - used` ahead of its virtual runtime).
    used: Vec<i64>,
    /// Virtual time left of the protection it got when last picked.
    protect: Vec<i64>,
    /// The run queue holding it: CPU c's root queue is c, group g's queue
    /// on CPU c is cpus + g * cpus + c.
    rq: Vec<Option<usize>>,
    delayed: Vec<bool>,
    /// Per thread: it woke at a [`Eevdf::sync`] since the last
    /// [`Eevdf::dispatched`] (the kernel asks about wake-up preemption
    /// then only), and scratch for a sync.
    woke: Vec<bool>,
    moving: Vec<bool>,
    /// The threads whose `woke` is set.
    woken: Vec<usize>,
    /// Per run queue: its entities (delayed ones included), their weight,
    /// and the entity that last ran from it (None: another class ran on
    /// the CPU since, or it slept).
    members: Vec<Vec<usize>>,
    rq_weight: Vec<i64>,
    /// Per run queue, its weighted average virtual runtime `V`.
    avg: Vec<i64>,
    /// Per run queue, how many of its entities are delayed dequeues.
    rq_delayed: Vec<u32>,
    curr: Vec<Option<usize>>,
}

impl Eevdf {
    /// `weights` per thread (fair or not: only fair threads are ever
    /// queued), `group` per thread with `group_weights` per group, the
    /// fair slice.
    pub fn new(weights: &[u64], group: &[Option<usize>], group_weights: &[u64], cpus: usize, slice_ns: u64) -> Eevdf {
        let threads = weights.len();
        let groups = group_weights.len();
        let mut weight: Vec<i64> = weights.iter().map(|&w| w.max(1) as i64).collect();
        for &gw in group_weights {
            weight.extend(std::iter::repeat_n(gw.max(1) as i64, cpus));
        }
        let entities = weight.len();
        let rqs = cpus + groups * cpus;
        let mut group: Vec<Option<usize>> = group.to_vec();
        group.resize(threads, None);
        let vslice = weight.iter().map(|&w| slice_ns as i64 * NICE_0 / w).collect();
        let lag_limit = weight
            .iter()
            .map(|&w| (slice_ns + TICK_NS) as i64 * NICE_0 / w)
            .collect();
        Eevdf {
            cpus,
            threads,
            group,
            weight,
            vslice,
            lag_limit,
            lag: vec![0; entities],
            v: vec![0; entities],
            used: vec![0; entities],
            protect: vec![0; entities],
            rq: vec![None; entities],
            delayed: vec![false; entities],
            woke: vec![false; threads],
            moving: vec![false; threads],
            woken: Vec::with_capacity(threads),
            members: vec![Vec::new(); rqs],
            rq_weight: vec![0; rqs],
            avg: vec![0; rqs],
            rq_delayed: vec![0; rqs],
            curr: vec![None; rqs],
        }
    }

    fn vslice(&self, e: usize) -> i64 {
        self.vslice[e]
    }

    fn group_entity(&self, g: usize, cpu: usize) -> usize {
        self.threads + g * self.cpus + cpu
    }

    fn group_rq(&self, g: usize, cpu: usize) -> usize {
        self.cpus + g * self.cpus + cpu
    }

    /// The queue thread `t` joins on `cpu`.
    fn rq_for(&self, t: usize, cpu: usize) -> usize {
        self.group[t].map_or(cpu, |g| self.group_rq(g, cpu))
    }

    fn cpu_of_rq(&self, rq: usize) -> usize {
        if rq < self.cpus {
            rq
        } else {
            (rq - self.cpus) % self.cpus
        }
    }

    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// The CPU whose queue holds thread `t`, and whether it is there only
    /// as a delayed dequeue.
    pub fn queued_on(&self, t: usize) -> Option<(usize, bool)> {
        self.rq[t].map(|rq| (self.cpu_of_rq(rq), self.delayed[t]))
    }

    /// An entity's lag: `V - v` while queued, else the lag it left with.
    fn lag_e(&self, e: usize) -> i64 {
        match self.rq[e] {
            Some(rq) => self.avg[rq] - self.v[e],
            None => self.lag[e],
        }
    }

    fn enqueue(&mut self, e: usize, rq: usize) {
        let (w, l, total) = (self.weight[e], self.lag[e], self.rq_weight[rq]);
        if total > 0 {
            self.avg[rq] -= (w as i128 * l as i128 / total as i128) as i64;
            self.v[e] = self.avg[rq] - l;
        } else {
            self.v[e] = self.avg[rq];
        }
        let was_empty = self.members[rq].is_empty();
        self.members[rq].push(e);
        self.rq_weight[rq] += w;
        self.rq[e] = Some(rq);
        self.used[e] = 0;
        // The first entity on a group's queue brings the group's entity
        // onto the root queue of that CPU.
        if was_empty && rq >= self.cpus {
            let cpu = self.cpu_of_rq(rq);
            let g = (rq - self.cpus) / self.cpus;
            let ge = self.group_entity(g, cpu);
            match self.rq[ge] {
                Some(_) if self.delayed[ge] => self.requeue(ge),
                Some(_) => {}
                None => self.enqueue(ge, cpu),
            }
        }
    }

    /// A delayed entity wakes where it is (DELAY_ZERO: positive lag clipped).
    fn requeue(&mut self, e: usize) {
        self.set_delayed(e, false);
        if let Some(rq) = self.rq[e] {
            self.v[e] = self.v[e].max(self.avg[rq]);
        }
    }

    /// Takes `e` off its queue; `sleep`: it has nothing to run (it may be
    /// delayed instead), else it moves to another CPU.
    fn dequeue(&mut self, e: usize, sleep: bool) {
        let Some(rq) = self.rq[e] else { return };
        if sleep && self.lag_e(e) < 0 && !self.delayed[e] {
            self.set_delayed(e, true);
            if self.curr[rq] == Some(e) {
                self.curr[rq] = None;
            }
            self.leave_if_only_delayed(rq);
            return;
        }
        self.remove(e, rq);
    }

    fn remove(&mut self, e: usize, rq: usize) {
        let pos = self.members[rq].iter().position(|&m| m == e);
        if let Some(p) = pos {
            self.members[rq].swap_remove(p);
        }
        let (w, l) = (self.weight[e], self.avg[rq] - self.v[e]);
        self.rq_weight[rq] -= w;
        let total = self.rq_weight[rq];
        if total > 0 {
            self.avg[rq] += (w as i128 * l as i128 / total as i128) as i64;
        }
        let limit = self.lag_limit[e];
        self.lag[e] = if self.delayed[e] { l.min(0) } else { l }.clamp(-limit, limit);
        if self.delayed[e] {
            self.delayed[e] = false;
            self.rq_delayed[rq] -= 1;
        }
        self.rq[e] = None;
        if self.curr[rq] == Some(e) {
            self.curr[rq] = None;
        }
        if self.members[rq].is_empty() && rq >= self.cpus {
            let cpu = self.cpu_of_rq(rq);
            let g = (rq - self.cpus) / self.cpus;
            let ge = self.group_entity(g, cpu);
            self.dequeue(ge, true);
        } else {
            self.leave_if_only_delayed(rq);
        }
    }

    fn set_delayed(&mut self, e: usize, delayed: bool) {
        if self.delayed[e] != delayed {
            self.delayed[e] = delayed;
            if let Some(rq) = self.rq[e] {
                if delayed {
                    self.rq_delayed[rq] += 1;
                } else {
                    self.rq_delayed[rq] -= 1;
                }
            }
        }
    }

    /// A queue left with delayed entities only: the CPU picks them, and a
    /// picked delayed entity leaves (`pick_next_entity`).
    fn leave_if_only_delayed(&mut self, rq: usize) {
        if self.rq_delayed[rq] as usize == self.members[rq].len() {
            while let Some(&m) = self.members[rq].last() {
                self.remove(m, rq);
            }
        }
    }

    /// Brings the queues in line with where each fair thread is runnable
    /// now (`homes[t]`: its CPU, None when it has nothing to run).
    pub fn sync(&mut self, homes: &[Option<usize>], fair: impl Fn(usize) -> bool) {
        // Leaving first (sleep, or moving away), then arriving.
        for (t, &home) in homes.iter().enumerate().take(self.threads) {
            if !fair(t) {
                continue;
            }
            let Some(rq) = self.rq[t] else { continue };
            let cpu = self.cpu_of_rq(rq);
            match home {
                None if !self.delayed[t] => self.dequeue(t, true),
                Some(c) if c != cpu => {
                    // Migrated; or a delayed entity waking elsewhere (its
                    // cpuset changed), which leaves its old queue first.
                    self.moving[t] = !self.delayed[t];
                    self.dequeue(t, false);
                }
                _ => {}
            }
        }
        for (t, &home) in homes.iter().enumerate().take(self.threads) {
            let Some(c) = home.filter(|_| fair(t)) else { continue };
            match self.rq[t] {
                None => {
                    let rq = self.rq_for(t, c);
                    self.enqueue(t, rq);
                    if !self.moving[t] {
                        self.woke[t] = true;
                        self.woken.push(t);
                    }
                    self.moving[t] = false;
                }
                Some(_) if self.delayed[t] => {
                    self.requeue(t);
                    self.woke[t] = true;
                    self.woken.push(t);
                }
                Some(_) => {}
            }
        }
    }

    /// A dispatch is done: the threads that woke before it have had their
    /// wake-up preemption asked.
    pub fn dispatched(&mut self) {
        for t in self.woken.drain(..) {
            self.woke[t] = false;
        }
    }

    /// Thread `t` (fair) ran `dt` on `cpu`: its queue's average moves on,
    /// at each level.
    pub fn ran(&mut self, cpu: usize, t: usize, dt: u64) {
        let dt = dt as i64;
        match self.group[t] {
            Some(g) => {
                let (grq, ge) = (self.group_rq(g, cpu), self.group_entity(g, cpu));
                self.advance(grq, t, dt);
                self.advance(cpu, ge, dt);
            }
            None => self.advance(cpu, t, dt),
        }
    }

    /// Something other than a fair thread ran on `cpu`: the next fair
    /// entity to run there is picked anew (its protection is set again).
    pub fn other_ran(&mut self, cpu: usize) {
        self.curr[cpu] = None;
        for g in 0..self.group_count() {
            let rq = self.group_rq(g, cpu);
            self.curr[rq] = None;
        }
    }

    fn group_count(&self) -> usize {
        (self.members.len() - self.cpus) / self.cpus.max(1)
    }

    fn advance(&mut self, rq: usize, e: usize, dt: i64) {
        if self.rq[e] != Some(rq) || dt == 0 {
            return;
        }
        if self.curr[rq] != Some(e) {
            // Picked: protected up to its deadline.
            self.curr[rq] = Some(e);
            self.protect[e] = self.vslice(e) - self.used[e];
        }
        let total = self.rq_weight[rq].max(1);
        self.avg[rq] += dt * NICE_0 / total;
        let spent = if self.weight[e] == NICE_0 {
            dt
        } else {
            dt * NICE_0 / self.weight[e]
        };
        self.v[e] += spent;
        self.used[e] += spent;
        self.protect[e] -= spent;
        let vslice = self.vslice(e);
        if self.used[e] >= vslice {
            // `update_deadline`: a new slice, and a pick (the old
            // protection is spent).
            self.used[e] = 0;
        }
        // Delayed entities that became eligible are picked and leave.
        let mut i = 0;
        while self.rq_delayed[rq] > 0 && i < self.members[rq].len() {
            let m = self.members[rq][i];
            if self.delayed[m] && self.lag_e(m) >= 0 {
                self.remove(m, rq);
                i = 0;
            } else {
                i += 1;
            }
        }
    }

    fn eligible(&self, e: usize) -> bool {
        self.lag_e(e) >= 0
    }

    /// Virtual deadline relative to the queue's average.
    fn deadline(&self, e: usize) -> i64 {
        self.vslice(e) - self.used[e] - self.lag_e(e)
    }

    /// The entities of threads `a` and `b` at the level where they share a
    /// queue (`find_matching_se`), if both are queued on one CPU.
    fn matching(&self, a: usize, b: usize) -> Option<(usize, usize)> {
        let (ra, rb) = (self.rq[a]?, self.rq[b]?);
        if ra == rb {
            return Some((a, b));
        }
        let (ca, cb) = (self.cpu_of_rq(ra), self.cpu_of_rq(rb));
        if ca != cb {
            return None;
        }
        let top = |t: usize| self.group[t].map_or(t, |g| self.group_entity(g, ca));
        Some((top(a), top(b)))
    }

    /// EEVDF's pick key of thread `t` at the level it shares with `other`
    /// (or its own, on another CPU): eligible first, then earliest virtual
    /// deadline. None when `t` is not queued.
    pub fn key(&self, t: usize, other: usize) -> Option<(bool, i64)> {
        let e = match self.matching(t, other) {
            Some((e, _)) => e,
            None => {
                self.rq[t]?;
                t
            }
        };
        Some((!self.eligible(e), self.deadline(e)))
    }

    /// Whether `woken`, queued at the last sync, preempts `running` on its
    /// CPU (`check_preempt_wakeup_fair` with RUN_TO_PARITY; later, only
    /// the end of a slice moves it, as the tick does): not while the
    /// running entity is eligible and protected; otherwise when the woken
    /// one is the eligible entity with the earliest virtual deadline on
    /// the queue they share.
    pub fn wakeup_preempts(&self, woken: usize, running: usize) -> bool {
        if !self.woke.get(woken).copied().unwrap_or(false) {
            return false;
        }
        let Some((pse, se)) = self.matching(woken, running) else {
            return false;
        };
        if pse == se {
            return false;
        }
        if self.eligible(se) && self.protect[se] > 0 {
            return false;
        }
        let Some(rq) = self.rq[pse] else { return false };
        let best = self.members[rq]
            .iter()
            .copied()
            .filter(|&m| self.eligible(m))
            .min_by_key(|&m| self.deadline(m));
        best == Some(pse)
    }

    /// The lag of thread `t` (virtual ns), for tests and traces.
    pub fn lag_of(&self, t: usize) -> i64 {
        self.lag_e(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn two_threads() -> Eevdf {
        Eevdf::new(&[1024, 1024], &[None, None], &[], 1, 3 * MS / 2)
    }

    #[test]
    fn lags_on_a_queue_sum_to_zero_and_the_runner_pays() {
        let mut e = two_threads();
        e.sync(&[Some(0), Some(0)], |_| true);
        e.ran(0, 0, MS);
        assert_eq!(e.lag_of(0), -(MS as i64) / 2);
        assert_eq!(e.lag_of(1), MS as i64 / 2);
    }

    /// Thread 1 waited 1 ms behind thread 0, ran 10 us and went to sleep
    /// owed about half a millisecond; 0 runs on.
    fn one_slept_owed() -> Eevdf {
        let mut e = two_threads();
        e.sync(&[Some(0), Some(0)], |_| true);
        e.ran(0, 0, MS);
        e.ran(0, 1, 10_000);
        e.sync(&[Some(0), None], |_| true);
        e
    }

    #[test]
    fn a_waiter_that_sleeps_keeps_its_lag_and_preempts_when_it_wakes() {
        let mut e = one_slept_owed();
        assert!(e.lag_of(1) > 400_000, "kept {}", e.lag_of(1));
        // 0 runs alone for a while; 1 wakes: 0 is no longer eligible.
        e.ran(0, 0, 5 * MS);
        e.sync(&[Some(0), Some(0)], |_| true);
        assert!(e.wakeup_preempts(1, 0));
    }

    #[test]
    fn lag_is_kept_only_beside_others() {
        let mut e = one_slept_owed();
        e.sync(&[None, None], |_| true);
        assert!(e.lag_of(1) > 400_000, "kept while asleep: {}", e.lag_of(1));
        // Woken onto an empty queue it is the average: no lag to spend.
        e.sync(&[None, Some(0)], |_| true);
        assert_eq!(e.lag_of(1), 0);
    }

    #[test]
    fn a_thread_woken_without_lag_waits_for_a_protected_one() {
        let mut e = two_threads();
        e.sync(&[Some(0), None], |_| true);
        e.ran(0, 0, MS / 2);
        e.sync(&[Some(0), Some(0)], |_| true);
        assert!(!e.wakeup_preempts(1, 0), "0 is eligible and within its slice");
        // Past its slice it is no longer protected, and 1's deadline is
        // earlier.
        e.ran(0, 0, 2 * MS);
        assert!(e.wakeup_preempts(1, 0));
    }

    #[test]
    fn an_ineligible_sleeper_is_delayed_and_leaves_at_zero_lag() {
        let mut e = two_threads();
        e.sync(&[Some(0), Some(0)], |_| true);
        e.ran(0, 0, MS);
        e.sync(&[None, Some(0)], |_| true);
        assert_eq!(e.queued_on(0), Some((0, true)), "delayed, still queued");
        e.ran(0, 1, 2 * MS);
        assert_eq!(e.queued_on(0), None, "left once eligible");
        assert_eq!(e.lag_of(0), 0);
    }
}
