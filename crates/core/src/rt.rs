//! Real-time settings for the calling thread: scheduling policy (other,
//! fifo, rr, deadline), CPU affinity, memory locking and timer slack.
//!
//! Each call acts on the calling thread only, so a probe applies them from
//! inside the thread whose timing it measures. Failures are returned with
//! what the user can do about them; callers decide whether a failure is
//! fatal (asked for explicitly) or a warning (a default).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A host scheduling policy for a probe or vCPU thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum Policy {
    /// SCHED_OTHER (CFS/EEVDF), the default for ordinary processes.
    #[default]
    Other,
    /// SCHED_FIFO at a priority 1..=99.
    Fifo { priority: u8 },
    /// SCHED_RR at a priority 1..=99.
    Rr { priority: u8 },
    /// SCHED_DEADLINE: `runtime_ns` of CPU every `period_ns`, deadline =
    /// `deadline_ns` (the Linux analogue of Xen's RTDS).
    Deadline {
        runtime_ns: u64,
        deadline_ns: u64,
        period_ns: u64,
    },
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Other => write!(f, "other"),
            Policy::Fifo { priority } => write!(f, "fifo:{priority}"),
            Policy::Rr { priority } => write!(f, "rr:{priority}"),
            Policy::Deadline {
                runtime_ns,
                deadline_ns,
                period_ns,
            } => write!(f, "deadline:{runtime_ns}ns/{deadline_ns}ns/{period_ns}ns"),
        }
    }
}

/// Serde for a [`Policy`] written as in a command line ("fifo:90",
/// "deadline:2ms/10ms"), as scenario files do:
/// `#[serde(with = "ontime_core::rt::policy_text")]`.
pub mod policy_text {
    use super::Policy;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Policy, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Policy, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for Policy {
    type Err = String;

    /// Parses `other`, `fifo:PRIO`, `rr:PRIO`, or
    /// `deadline:RUNTIME/PERIOD[/DEADLINE]` (durations with units).
    fn from_str(s: &str) -> Result<Policy, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let prio = |a: Option<&str>| -> Result<u8, String> {
            let a = a.ok_or_else(|| format!("'{name}' needs a priority, e.g. {name}:80"))?;
            match a.parse::<u8>() {
                Ok(p) if (1..=99).contains(&p) => Ok(p),
                _ => Err(format!("priority '{a}' must be 1..99")),
            }
        };
        match name {
            "other" | "normal" => Ok(Policy::Other),
            "fifo" => Ok(Policy::Fifo { priority: prio(arg)? }),
            "rr" => Ok(Policy::Rr { priority: prio(arg)? }),
            "deadline" => {
                let a = arg.ok_or("deadline needs RUNTIME/PERIOD, e.g. deadline:200us/1ms")?;
                let parts: Vec<&str> = a.split('/').collect();
                if parts.len() < 2 || parts.len() > 3 {
                    return Err(format!(
                        "'{a}': deadline takes RUNTIME/PERIOD[/DEADLINE], e.g. 200us/1ms"
                    ));
                }
                let runtime_ns = crate::duration::parse_ns(parts[0])?;
                let period_ns = crate::duration::parse_ns(parts[1])?;
                let deadline_ns = match parts.get(2) {
                    Some(d) => crate::duration::parse_ns(d)?,
                    None => period_ns,
                };
                Policy::deadline(runtime_ns, deadline_ns, period_ns)
            }
            _ => Err(format!(
                "unknown policy '{name}'; use other, fifo:PRIO, rr:PRIO or deadline:RUNTIME/PERIOD"
            )),
        }
    }
}

impl Policy {
    /// A deadline policy, checked the way the kernel will check it.
    pub fn deadline(runtime_ns: u64, deadline_ns: u64, period_ns: u64) -> Result<Policy, String> {
        if runtime_ns < 1024 {
            return Err("deadline runtime must be at least 1024 ns".into());
        }
        if !(runtime_ns <= deadline_ns && deadline_ns <= period_ns) {
            return Err("deadline needs runtime <= deadline <= period".into());
        }
        Ok(Policy::Deadline {
            runtime_ns,
            deadline_ns,
            period_ns,
        })
    }

    /// True when the policy is a real-time one (needs privileges).
    pub fn is_realtime(&self) -> bool {
        !matches!(self, Policy::Other)
    }
}

/// Kernel `struct sched_attr` (include/uapi/linux/sched/types.h).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_DEADLINE: u32 = 6;

/// Applies `policy` to the calling thread.
pub fn set_policy(policy: Policy) -> Result<()> {
    set_policy_of(0, policy)
}

/// Applies `policy` to thread `tid` (0: the calling thread), e.g. a
/// tenant's vCPU thread that a controller makes real-time.
pub fn set_policy_of(tid: i32, policy: Policy) -> Result<()> {
    let mut attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        ..Default::default()
    };
    match policy {
        Policy::Other => attr.sched_policy = libc::SCHED_OTHER as u32,
        Policy::Fifo { priority } => {
            attr.sched_policy = libc::SCHED_FIFO as u32;
            attr.sched_priority = priority as u32;
        }
        Policy::Rr { priority } => {
            attr.sched_policy = libc::SCHED_RR as u32;
            attr.sched_priority = priority as u32;
        }
        Policy::Deadline {
            runtime_ns,
            deadline_ns,
            period_ns,
        } => {
            attr.sched_policy = SCHED_DEADLINE;
            attr.sched_runtime = runtime_ns;
            attr.sched_deadline = deadline_ns;
            attr.sched_period = period_ns;
        }
    }
    // SAFETY: sched_setattr(2) reads a correctly sized, initialised
    // sched_attr and writes nothing.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        let hint = match err.raw_os_error() {
            Some(libc::EPERM) => "run as root or grant CAP_SYS_NICE",
            Some(libc::EBUSY) => "the deadline bandwidth is exhausted: lower runtime/period or the number of deadline threads",
            Some(libc::EINVAL) => "the kernel rejected the parameters (deadline tasks cannot have a restricted CPU affinity on some kernels)",
            _ => "check the kernel supports this policy",
        };
        return Err(err).with_context(|| format!("cannot set scheduling policy {policy}: {hint}"));
    }
    Ok(())
}

/// `cpus` as the kernel's CPU set.
pub fn cpu_set(cpus: &[usize]) -> Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c >= libc::CPU_SETSIZE as usize {
            bail!("CPU {c} is out of range");
        }
        // SAFETY: index checked against CPU_SETSIZE above.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    Ok(set)
}

/// Pins the calling thread to the given CPUs.
pub fn set_affinity(cpus: &[usize]) -> Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let set = cpu_set(cpus)?;
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot pin to CPUs {cpus:?}: are they online and in this cgroup's cpuset?"));
    }
    Ok(())
}

/// Locks current and future memory so page faults cannot add latency.
pub fn mlockall() -> Result<()> {
    // SAFETY: mlockall takes flags only.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error())
            .context("mlockall failed: run as root or raise RLIMIT_MEMLOCK (ulimit -l)");
    }
    Ok(())
}

/// Sets the calling thread's timer slack; 1 ns makes hrtimers fire on time.
pub fn set_timer_slack_ns(ns: u64) -> Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long value.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot set timer slack");
    }
    Ok(())
}

/// The online CPUs, as /sys/devices/system/cpu/online lists them.
pub fn online_cpu_list() -> Result<Vec<usize>> {
    let text =
        std::fs::read_to_string("/sys/devices/system/cpu/online").context("reading /sys/devices/system/cpu/online")?;
    parse_cpu_list(text.trim()).map_err(|e| anyhow::anyhow!("online CPUs: {e}"))
}

/// The online CPUs outside `busy` (say, the tenants' cpuset), where a
/// tool's own threads keep off the CPUs they measure. Empty, meaning "stay
/// unpinned", when `busy` is empty, covers every online CPU, or the online
/// CPUs cannot be read.
pub fn housekeeping_cpus(busy: &[usize]) -> Vec<usize> {
    if busy.is_empty() {
        return Vec::new();
    }
    online_cpu_list()
        .map(|online| online.into_iter().filter(|c| !busy.contains(c)).collect())
        .unwrap_or_default()
}

/// Parses a CPU list such as "0", "0-3", "0,2,4-5".
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || format!("'{s}' is not a CPU list (use e.g. 0,2-3)");
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.parse().map_err(|_| bad())?;
                let b: usize = b.parse().map_err(|_| bad())?;
                if b < a {
                    return Err(bad());
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    if out.is_empty() {
        return Err(format!("'{s}' names no CPU"));
    }
    Ok(out)
}

/// Puts the calling thread in SCHED_IDLE: it then runs only when nothing
/// else on its CPU wants to, so helper threads (collectors, writers) never
/// delay a probe's thread, even when pinned to the same CPU or cgroup.
pub fn set_idle() -> Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_IDLE as u32,
        ..Default::default()
    };
    // SAFETY: as in set_policy.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot set SCHED_IDLE");
    }
    Ok(())
}

/// Waits for `n` threads to report how their start went (each sends one
/// `Ok(())` or the error that stopped it). The threads keep their senders
/// while they run, so a thread that died before reporting is caught by the
/// timeout rather than waited for forever.
pub fn await_ready(
    rx: &std::sync::mpsc::Receiver<std::result::Result<(), String>>,
    n: usize,
    timeout: std::time::Duration,
) -> std::result::Result<(), String> {
    for _ in 0..n {
        match rx.recv_timeout(timeout) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err("a thread did not report its start (did it panic?)".into()),
        }
    }
    Ok(())
}

/// Threads that take their scheduling settings, say they are ready, and
/// then do their work: the crawler's vCPU threads, the cyclic probe's
/// threads, the relay's threads. One way to start them, to wait until all
/// run with their settings (or fail with the first one's error), and to
/// stop and join them all if that fails or the group is dropped, so no
/// caller leaves a thread behind.
pub struct ThreadGroup<U: Send + 'static> {
    handles: Vec<std::thread::JoinHandle<anyhow::Result<U>>>,
    ready_tx: Option<std::sync::mpsc::Sender<std::result::Result<(), String>>>,
    ready_rx: std::sync::mpsc::Receiver<std::result::Result<(), String>>,
    stop: Box<dyn Fn() + Send + Sync>,
}

impl<U: Send + 'static> ThreadGroup<U> {
    /// `stop` tells every thread of the group to finish (sets their flag).
    pub fn new(stop: impl Fn() + Send + Sync + 'static) -> Self {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        ThreadGroup {
            handles: Vec::new(),
            ready_tx: Some(ready_tx),
            ready_rx,
            stop: Box::new(stop),
        }
    }

    /// Starts thread `name` (also its kernel name, as ps and the observer
    /// show it): it applies `settings`, reports, then runs `body`.
    pub fn spawn(
        &mut self,
        name: &str,
        settings: ThreadSettings,
        body: impl FnOnce() -> anyhow::Result<U> + Send + 'static,
    ) -> anyhow::Result<()> {
        let ready = self
            .ready_tx
            .clone()
            .context("the group's threads were already awaited")?;
        let kernel_name = name.to_string();
        let h = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                set_thread_name(&kernel_name);
                if let Err(e) = settings.apply() {
                    let _ = ready.send(Err(format!("{e:#}")));
                    return Err(e);
                }
                let _ = ready.send(Ok(()));
                drop(ready);
                body()
            })
            .with_context(|| format!("cannot start thread {name}"));
        match h {
            Ok(h) => {
                self.handles.push(h);
                Ok(())
            }
            Err(e) => {
                self.stop_and_join();
                Err(e)
            }
        }
    }

    /// Waits until every thread runs with its settings. On the first error
    /// (or a thread that never reports within `timeout`), stops and joins
    /// them all and returns that error.
    pub fn await_ready(&mut self, timeout: std::time::Duration) -> std::result::Result<(), String> {
        drop(self.ready_tx.take());
        let r = await_ready(&self.ready_rx, self.handles.len(), timeout);
        if r.is_err() {
            self.stop_and_join();
        }
        r
    }

    pub fn all_finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// Tells the threads to stop (they finish what they do).
    pub fn stop(&self) {
        (self.stop)();
    }

    /// Waits for every thread; a panic becomes an error naming it.
    pub fn join(mut self) -> Vec<anyhow::Result<U>> {
        std::mem::take(&mut self.handles)
            .into_iter()
            .map(|h| {
                let name = h.thread().name().unwrap_or("?").to_string();
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("thread {name} panicked")))
            })
            .collect()
    }

    fn stop_and_join(&mut self) {
        if self.handles.is_empty() {
            return;
        }
        (self.stop)();
        for h in std::mem::take(&mut self.handles) {
            let _ = h.join();
        }
    }
}

impl<U: Send + 'static> Drop for ThreadGroup<U> {
    /// A group dropped before [`ThreadGroup::join`] (an error or panic in
    /// the caller) still stops and joins its threads.
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// A CPU list as one value ("0,2-3"), for command lines and configs.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CpuList(pub Vec<usize>);

impl FromStr for CpuList {
    type Err = String;
    fn from_str(s: &str) -> Result<CpuList, String> {
        parse_cpu_list(s).map(CpuList)
    }
}

/// Names the calling thread (shown by top, ps and the observer).
pub fn set_thread_name(name: &str) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: buf is NUL-terminated and at most 16 bytes as PR_SET_NAME needs.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// The settings a probe thread asks for, applied in one place.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ThreadSettings {
    pub policy: Policy,
    /// CPUs the thread may run on; empty = unrestricted.
    pub affinity: Vec<usize>,
    /// Timer slack in ns; None leaves the default (50 us).
    pub timer_slack_ns: Option<u64>,
}

impl ThreadSettings {
    pub fn apply(&self) -> Result<()> {
        if let Some(ns) = self.timer_slack_ns {
            set_timer_slack_ns(ns)?;
        }
        // Deadline tasks may refuse a restricted affinity, so pin first and
        // let set_policy report the kernel's verdict.
        set_affinity(&self.affinity)?;
        set_policy(self.policy)?;
        Ok(())
    }
}

/// Holds `/dev/cpu_dma_latency` at a target (0 us keeps CPUs out of deep
/// idle states) for as long as the guard lives, as cyclictest does.
pub struct DmaLatencyGuard {
    _file: std::fs::File,
}

impl DmaLatencyGuard {
    /// None (with the reason) when the device is missing or not writable.
    pub fn hold(target_us: i32) -> Result<DmaLatencyGuard> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .context("cannot open /dev/cpu_dma_latency")?;
        f.write_all(&target_us.to_ne_bytes())
            .context("cannot write /dev/cpu_dma_latency")?;
        Ok(DmaLatencyGuard { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One thread whose settings fail stops the whole group: the caller
    /// gets that error, and every other thread has been told and joined.
    #[test]
    fn a_thread_group_with_a_failed_start_stops_and_joins_all() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicUsize::new(0));
        let s = stop.clone();
        let mut g: ThreadGroup<()> = ThreadGroup::new(move || s.store(true, Ordering::Relaxed));
        for i in 0..3 {
            let settings = ThreadSettings {
                affinity: if i == 1 { vec![4095] } else { vec![] },
                ..Default::default()
            };
            let (stop, ended) = (stop.clone(), ended.clone());
            g.spawn(&format!("t{i}"), settings, move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                ended.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
        }
        let e = g.await_ready(std::time::Duration::from_secs(5)).unwrap_err();
        assert!(e.contains("4095") || e.to_lowercase().contains("cpu"), "{e}");
        assert_eq!(ended.load(Ordering::Relaxed), 2, "the two started threads were joined");
        assert!(g.is_empty());
    }

    #[test]
    fn parses_policies() {
        assert_eq!("other".parse::<Policy>().unwrap(), Policy::Other);
        assert_eq!("fifo:80".parse::<Policy>().unwrap(), Policy::Fifo { priority: 80 });
        assert_eq!(
            "deadline:200us/1ms".parse::<Policy>().unwrap(),
            Policy::Deadline {
                runtime_ns: 200_000,
                deadline_ns: 1_000_000,
                period_ns: 1_000_000
            }
        );
        assert!("fifo".parse::<Policy>().is_err());
        assert!("fifo:0".parse::<Policy>().is_err());
        assert!("deadline:2ms/1ms".parse::<Policy>().is_err());
        assert!("batch".parse::<Policy>().is_err());
    }

    #[test]
    fn await_ready_reports_errors_and_silence() {
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(Ok(())).unwrap();
        tx.send(Err("no".into())).unwrap();
        assert_eq!(
            await_ready(&rx, 2, std::time::Duration::from_millis(10)),
            Err("no".into())
        );
        assert!(await_ready(&rx, 1, std::time::Duration::from_millis(10)).is_err());
    }

    #[test]
    fn parses_cpu_lists() {
        assert_eq!(parse_cpu_list("0,2-4").unwrap(), vec![0, 2, 3, 4]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("x").is_err());
    }
}
