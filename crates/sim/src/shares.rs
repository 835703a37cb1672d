//! Per-CPU shares of a cgroup's weight, as Linux's fair class gives them
//! (`calc_group_shares`, kernel/sched/fair.c): a group's entity on a CPU
//! weighs the group's weight times that CPU's part of the group's load,
//! the load being PELT's runnable average of the group's threads
//! (`cfs_rq->avg.load_avg`, which keeps a sleeping thread's load, decaying,
//! on the CPU it last ran on) or, when more, the weight runnable there now
//! (`cfs_rq->load.weight`). Two tenants of one cgroup on two CPUs thus
//! weigh more together than the group's weight alone: each about
//! weight / (1 + the other's runnable share), not half of it.
//!
//! Leaves out: the 1/64 change threshold before a CPU's contribution to
//! the group's total is updated (`update_tg_load_avg`), PELT's 1 ms
//! steps (the average here decays continuously), and frequency and
//! capacity scaling.

/// PELT's half-life: 32 periods of 1024 us (`LOAD_AVG_PERIOD`).
pub const PELT_HALF_LIFE_NS: f64 = 32.0 * 1_024_000.0;

/// A runnable average `avg` after `dt_ns` more of being runnable or not.
pub(crate) fn runnable_average(avg: f64, runnable: bool, dt_ns: u64) -> f64 {
    let y = (-(dt_ns as f64) / PELT_HALF_LIFE_NS).exp2();
    let target = if runnable { 1.0 } else { 0.0 };
    avg * y + target * (1.0 - y)
}

/// The least share a group entity gets (`MIN_SHARES`).
const MIN_SHARES: u64 = 2;

#[derive(Clone, Debug)]
pub struct GroupShares {
    cpus: usize,
    /// Per group: its weight (cpu.shares) and its threads.
    group_weight: Vec<u64>,
    members: Vec<Vec<usize>>,
    /// Per thread: its weight, and PELT's runnable average (0..1) as of
    /// `at_ns`, whether it was runnable since, and the CPU holding its
    /// load (where it is runnable, else where it last was).
    weight: Vec<u64>,
    avg: Vec<f64>,
    at_ns: Vec<u64>,
    runnable: Vec<bool>,
    cpu: Vec<usize>,
    /// Per group and CPU: its threads runnable there.
    queued: Vec<u32>,
    /// Scratch per CPU: the group's load there, its weight runnable there
    /// now, and (in `sync`) its threads runnable there.
    load: Vec<f64>,
    now_weight: Vec<u64>,
    now_threads: Vec<u32>,
    /// Per group: a thread of it woke, slept or moved since its shares
    /// were last asked for, and when that was.
    changed: Vec<bool>,
    shared_at_ns: Vec<u64>,
}

impl GroupShares {
    /// `group` per thread (None: not in a group), `group_weights` per
    /// group, `weights` per thread, on `cpus` CPUs.
    pub fn new(weights: &[u64], group: &[Option<usize>], group_weights: &[u64], cpus: usize) -> GroupShares {
        let mut members = vec![Vec::new(); group_weights.len()];
        for (t, g) in group.iter().enumerate() {
            if let Some(g) = g {
                members[*g].push(t);
            }
        }
        let n = weights.len();
        let cpus = cpus.max(1);
        GroupShares {
            cpus,
            group_weight: group_weights.to_vec(),
            members,
            weight: weights.to_vec(),
            avg: vec![0.0; n],
            at_ns: vec![0; n],
            runnable: vec![false; n],
            cpu: (0..n).map(|t| t % cpus).collect(),
            queued: vec![0; group_weights.len() * cpus],
            load: vec![0.0; cpus],
            now_weight: vec![0; cpus],
            now_threads: vec![0; cpus],
            changed: vec![true; group_weights.len()],
            shared_at_ns: vec![0; group_weights.len()],
        }
    }

    pub fn groups(&self) -> usize {
        self.group_weight.len()
    }

    pub fn cpus(&self) -> usize {
        self.cpus
    }

    /// The CPU holding thread `t`'s load.
    pub fn cpu_of(&self, t: usize) -> usize {
        self.cpu[t]
    }

    /// Thread `t`'s runnable average at `now`.
    fn avg_at(&self, t: usize, now: u64) -> f64 {
        runnable_average(self.avg[t], self.runnable[t], now.saturating_sub(self.at_ns[t]))
    }

    /// Follows where every group thread is runnable at `now` (`homes`, as
    /// the engine keeps them); pushes onto `entered` each group queue
    /// (`g * cpus + cpu`) that had no runnable thread and has one now
    /// (its entity is enqueued: placed afresh).
    pub fn sync(&mut self, homes: &[Option<usize>], now: u64, entered: &mut Vec<usize>) {
        for g in 0..self.members.len() {
            let base = g * self.cpus;
            self.now_threads.iter_mut().for_each(|q| *q = 0);
            for i in 0..self.members[g].len() {
                let t = self.members[g][i];
                let home = homes.get(t).copied().flatten().filter(|&c| c < self.cpus);
                if home.is_some() != self.runnable[t] || home.is_some_and(|c| c != self.cpu[t]) {
                    self.changed[g] = true;
                    self.avg[t] = self.avg_at(t, now);
                    self.at_ns[t] = now;
                    self.runnable[t] = home.is_some();
                }
                if let Some(c) = home {
                    // The load goes with the thread (`migrate_task_rq_fair`).
                    self.cpu[t] = c;
                    self.now_threads[c] += 1;
                }
            }
            for c in 0..self.cpus {
                let q = self.now_threads[c];
                if q > 0 && self.queued[base + c] == 0 {
                    entered.push(base + c);
                }
                self.queued[base + c] = q;
            }
        }
    }

    /// Whether group `g`'s shares are due at `now`: the kernel updates
    /// them as its threads are enqueued and dequeued and at each tick
    /// (`update_cfs_group`), every `tick_ns` here.
    pub fn due(&self, g: usize, now: u64, tick_ns: u64) -> bool {
        self.changed[g] || now >= self.shared_at_ns[g] + tick_ns
    }

    /// Group `g`'s share of its weight on every CPU at `now`, into
    /// `out[c]` (`calc_group_shares`).
    pub fn shares(&mut self, g: usize, now: u64, out: &mut [u64]) {
        self.changed[g] = false;
        self.shared_at_ns[g] = now;
        self.load.iter_mut().for_each(|l| *l = 0.0);
        self.now_weight.iter_mut().for_each(|w| *w = 0);
        for i in 0..self.members[g].len() {
            let t = self.members[g][i];
            let c = self.cpu[t];
            self.load[c] += self.weight[t] as f64 * self.avg_at(t, now);
            if self.runnable[t] {
                self.now_weight[c] += self.weight[t];
            }
        }
        let total: f64 = self.load.iter().sum();
        let gw = self.group_weight[g];
        for (c, share) in out.iter_mut().enumerate().take(self.cpus) {
            let load = self.load[c].max(self.now_weight[c] as f64);
            // The group's total with this CPU's part taken at `load`.
            let of_all = total - self.load[c] + load;
            *share = if of_all > 0.0 {
                ((gw as f64 * load / of_all) as u64).clamp(MIN_SHARES, gw)
            } else {
                gw
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Two threads of a group on two CPUs, one always runnable and one
    /// runnable a quarter of the time: the first weighs about the group's
    /// weight / (1 + 0.25) on its CPU, not half of it; together on one
    /// CPU they weigh the whole group's.
    #[test]
    fn a_cpu_gets_the_group_weight_by_its_part_of_the_groups_load() {
        let mut s = GroupShares::new(&[1024, 1024], &[Some(0), Some(0)], &[1024], 2);
        let mut entered = Vec::new();
        // 1 s of 4 ms cycles: thread 1 runnable the first ms of each.
        let mut now = 0;
        while now < 1000 * MS {
            s.sync(&[Some(0), Some(1)], now, &mut entered);
            s.sync(&[Some(0), None], now + MS, &mut entered);
            now += 4 * MS;
        }
        let mut out = [0u64; 2];
        s.shares(0, now, &mut out);
        let expected = 1024.0 / 1.25;
        assert!(
            (out[0] as f64 - expected).abs() < 40.0,
            "CPU 0: {} against about {expected}",
            out[0]
        );
        // Thread 1 woke 250 times on CPU 1, its queue entering each time.
        assert_eq!(entered.iter().filter(|&&e| e == 1).count(), 250);
        assert_eq!(entered.iter().filter(|&&e| e == 0).count(), 1);
        // Both on CPU 0 for a while: the whole weight there.
        s.sync(&[Some(0), Some(0)], now, &mut entered);
        s.shares(0, now + 200 * MS, &mut out);
        assert_eq!(out[0], 1024);
    }
}
