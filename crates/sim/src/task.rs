//! Periodic tasks, the simulator's first workload, and the response-time
//! analysis that fixed-priority results are checked against.

use serde::{Deserialize, Serialize};

/// Every `period_ns` from `offset_ns` a job needing `wcet_ns` of CPU is
/// released, due `deadline_ns` after its release.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodicTask {
    pub name: String,
    pub period_ns: u64,
    pub wcet_ns: u64,
    pub deadline_ns: u64,
    pub offset_ns: u64,
    /// For fixed-priority schedulers: higher runs first.
    pub priority: u32,
    /// Each release comes up to this much late, uniformly (seeded): 0 is
    /// strictly periodic.
    #[serde(default)]
    pub jitter_ns: u64,
}

impl PeriodicTask {
    /// An implicit-deadline task (deadline = period) released at 0.
    pub fn new(name: &str, wcet_ns: u64, period_ns: u64, priority: u32) -> PeriodicTask {
        PeriodicTask {
            name: name.into(),
            period_ns,
            wcet_ns,
            deadline_ns: period_ns,
            offset_ns: 0,
            priority,
            jitter_ns: 0,
        }
    }

    pub fn utilisation(&self) -> f64 {
        self.wcet_ns as f64 / self.period_ns as f64
    }
}

/// Worst-case response time of task `i` under preemptive fixed priorities
/// on one CPU (Joseph and Pandya's recurrence, R = C_i + sum over higher
/// priorities of ceil(R / T_j) C_j), for synchronous releases without
/// jitter. None when it exceeds the task's deadline.
pub fn response_time(tasks: &[PeriodicTask], i: usize) -> Option<u64> {
    let t = &tasks[i];
    let higher: Vec<&PeriodicTask> = tasks
        .iter()
        .enumerate()
        .filter(|&(j, o)| j != i && o.priority > t.priority)
        .map(|(_, o)| o)
        .collect();
    let mut r = t.wcet_ns;
    loop {
        let next = t.wcet_ns + higher.iter().map(|h| r.div_ceil(h.period_ns) * h.wcet_ns).sum::<u64>();
        if next > t.deadline_ns {
            return None;
        }
        if next == r {
            return Some(r);
        }
        r = next;
    }
}

/// The least common multiple of the periods: the schedule repeats after it
/// (synchronous, jitter-free releases).
pub fn hyperperiod(tasks: &[PeriodicTask]) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    tasks.iter().fold(1, |l, t| l / gcd(l, t.period_ns) * t.period_ns)
}

/// A periodic task set as a file (`ontime sim tasks SET.toml`):
///
/// ```toml
/// [[task]]
/// name = "a"
/// wcet = "1ms"
/// period = "4ms"
/// deadline = "4ms"   # default: the period
/// offset = "0ms"     # first release
/// priority = 3       # fifo and rr: higher runs first
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSetFile {
    #[serde(rename = "task")]
    pub tasks: Vec<TaskSpec>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub name: String,
    #[serde(with = "ontime_core::duration::text_ns")]
    pub wcet: u64,
    #[serde(with = "ontime_core::duration::text_ns")]
    pub period: u64,
    #[serde(default, with = "ontime_core::duration::opt_text_ns")]
    pub deadline: Option<u64>,
    #[serde(default, with = "ontime_core::duration::opt_text_ns")]
    pub offset: Option<u64>,
    #[serde(default)]
    pub priority: u32,
}

/// Tasks in a set at most: a set is analysed, not a fleet.
pub const MAX_TASKS: usize = 10_000;

impl TaskSetFile {
    /// The tasks, checked: a period of at least 1 us, a WCET and deadline
    /// within it (a deadline up to 100 periods: arbitrary deadlines), unique
    /// names.
    pub fn tasks(&self) -> Result<Vec<PeriodicTask>, String> {
        if self.tasks.is_empty() {
            return Err("no [[task]]: give at least one (name, wcet, period)".into());
        }
        if self.tasks.len() > MAX_TASKS {
            return Err(format!("{} tasks: at most {MAX_TASKS}", self.tasks.len()));
        }
        let mut seen = std::collections::HashSet::new();
        self.tasks
            .iter()
            .map(|t| {
                let at = |m: String| format!("task {}: {m}", t.name);
                if !seen.insert(t.name.as_str()) {
                    return Err(at("the name appears twice".into()));
                }
                ontime_core::limits::duration("period", t.period, 1_000, ontime_core::limits::MAX_DURATION_NS)
                    .map_err(at)?;
                ontime_core::limits::duration("wcet", t.wcet, 1, t.period).map_err(at)?;
                let deadline = t.deadline.unwrap_or(t.period);
                ontime_core::limits::duration("deadline", deadline, 1, t.period.saturating_mul(100)).map_err(at)?;
                let offset = t.offset.unwrap_or(0);
                ontime_core::limits::duration("offset", offset, 0, ontime_core::limits::MAX_DURATION_NS).map_err(at)?;
                Ok(PeriodicTask {
                    name: t.name.clone(),
                    period_ns: t.period,
                    wcet_ns: t.wcet,
                    deadline_ns: deadline,
                    offset_ns: offset,
                    priority: t.priority,
                    jitter_ns: 0,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buttazzo's example: (C, T) = (1, 4), (2, 6), (3, 12) under rate
    /// monotonic priorities responds in 1, 3 and 10.
    #[test]
    fn response_time_analysis_of_a_textbook_set() {
        let ts = vec![
            PeriodicTask::new("a", 1, 4, 3),
            PeriodicTask::new("b", 2, 6, 2),
            PeriodicTask::new("c", 3, 12, 1),
        ];
        let r: Vec<Option<u64>> = (0..3).map(|i| response_time(&ts, i)).collect();
        assert_eq!(r, vec![Some(1), Some(3), Some(10)]);
        assert_eq!(hyperperiod(&ts), 12);
        let mut over = ts.clone();
        over[2].wcet_ns = 6;
        assert_eq!(response_time(&over, 2), None, "U > 1: the lowest misses");
    }
}
