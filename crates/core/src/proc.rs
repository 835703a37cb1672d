//! Child processes ontime starts (gateways, probes, loads, recorders,
//! iperf3): one way to place them (a network namespace, cgroups, a process
//! group of their own), to tie their life to ours (PR_SET_PDEATHSIG), to
//! wait until they are ready, and to stop them (a signal to the process or
//! its group, SIGKILL after a grace period). A [`ChildProcess`] dropped
//! without [`ChildProcess::stop`] is stopped all the same, so an error or a
//! panic in the caller leaves nothing running.

use anyhow::{Context, Result};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Where and how a child runs.
#[derive(Clone, Debug)]
pub struct SpawnOptions {
    /// A network namespace file (`/run/netns/NAME`) to enter.
    pub netns: Option<PathBuf>,
    /// A mount namespace file (a pinned `/proc/PID/ns/mnt`) to enter.
    pub mntns: Option<PathBuf>,
    /// `cgroup.procs` files to join (one per controller hierarchy on v1).
    pub cgroup_procs: Vec<PathBuf>,
    /// Its own process group, so a stop reaches its children too.
    pub own_group: bool,
    /// Signal the kernel sends it when ontime dies.
    pub death_signal: i32,
    /// Signal that asks it to stop (SIGTERM; SIGINT for perf, which writes
    /// its data on SIGINT).
    pub stop_signal: i32,
    /// How long a stop waits before SIGKILL.
    pub grace: Duration,
    /// CPUs to pin it to (empty: inherit the spawner's).
    pub affinity: Vec<usize>,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            netns: None,
            mntns: None,
            cgroup_procs: Vec::new(),
            own_group: false,
            death_signal: libc::SIGKILL,
            stop_signal: libc::SIGTERM,
            grace: Duration::from_secs(3),
            affinity: Vec::new(),
        }
    }
}

/// A running child that is stopped when dropped.
pub struct ChildProcess {
    child: Option<Child>,
    what: String,
    opts: SpawnOptions,
    status: Option<ExitStatus>,
}

impl ChildProcess {
    /// Starts `cmd` as `what` (named in errors) with `opts`.
    pub fn spawn(what: &str, cmd: &mut Command, opts: SpawnOptions) -> Result<ChildProcess> {
        let ns = match &opts.netns {
            Some(p) => {
                Some(std::fs::File::open(p).with_context(|| format!("{what}: no network namespace {}", p.display()))?)
            }
            None => None,
        };
        let mnt = match &opts.mntns {
            Some(p) => {
                Some(std::fs::File::open(p).with_context(|| format!("{what}: no mount namespace {}", p.display()))?)
            }
            None => None,
        };
        let mut procs = Vec::new();
        for f in &opts.cgroup_procs {
            procs.push(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(f)
                    .with_context(|| format!("{what}: cannot open {}", f.display()))?,
            );
        }
        let ns_fd = ns.as_ref().map(|f| f.as_raw_fd());
        let mnt_fd = mnt.as_ref().map(|f| f.as_raw_fd());
        let proc_fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
        let (group, death) = (opts.own_group, opts.death_signal);
        // Built before the fork: the child only hands it to the kernel.
        let cpus = crate::rt::cpu_set(&opts.affinity).with_context(|| format!("{what}: affinity"))?;
        let pin = !opts.affinity.is_empty();
        // SAFETY: only async-signal-safe syscalls between fork and exec; the
        // descriptors stay open in the parent (`ns`, `procs`) until spawn
        // returns.
        unsafe {
            cmd.pre_exec(move || {
                if group {
                    libc::setpgid(0, 0);
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, death);
                if pin && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cpus) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(fd) = ns_fd {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if let Some(fd) = mnt_fd {
                    if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // Writing "0" to cgroup.procs moves the writing process.
                for &fd in &proc_fds {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {what}"))?;
        Ok(ChildProcess {
            child: Some(child),
            what: what.into(),
            opts,
            status: None,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The std handle, e.g. to take its piped stdout.
    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// Its exit status, if it has exited (reaped once, remembered).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = self.child.as_mut() {
                self.status = c.try_wait().ok().flatten();
            }
        }
        self.status
    }

    /// Sends `sig` to the child (or its group).
    pub fn signal(&self, sig: i32) {
        if self.status.is_some() {
            return;
        }
        if let Some(c) = &self.child {
            let pid = c.id() as libc::pid_t;
            let target = if self.opts.own_group { -pid } else { pid };
            // SAFETY: signalling our own child (or its group), not yet reaped.
            unsafe { libc::kill(target, sig) };
        }
    }

    /// [`ChildProcess::stop`], and what CPU the child used (user + system,
    /// from wait4), e.g. a peer recorder's cost. The status is there even
    /// when the child had to be killed; the usage is None when it had been
    /// reaped before.
    pub fn stop_with_usage(&mut self) -> (Option<ExitStatus>, Option<libc::rusage>) {
        match self.stop_reaping() {
            Some(ended) => (Some(ended.status), Some(ended.usage)),
            None => (self.status, None),
        }
    }

    /// Signals it to stop and reaps it, with SIGKILL after the grace
    /// period. None when it had been reaped already (or never started).
    fn stop_reaping(&mut self) -> Option<Ended> {
        use std::os::unix::process::ExitStatusExt;
        if self.status.is_some() {
            return None;
        }
        let pid = self.child.as_ref()?.id() as libc::pid_t;
        let target = if self.opts.own_group { -pid } else { pid };
        let (mut raw, mut killed) = (0, false);
        // SAFETY: rusage is plain data, filled by wait4.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: signalling and reaping our own child, not reaped yet (no
        // status): std's Child is never waited on once we reap it here.
        unsafe { libc::kill(target, self.opts.stop_signal) };
        let t0 = Instant::now();
        loop {
            // SAFETY: as above; WNOHANG returns 0 while it runs.
            let r = unsafe { libc::wait4(pid, &mut raw, libc::WNOHANG, &mut usage) };
            if r == pid {
                break;
            }
            if r < 0 || t0.elapsed() > self.opts.grace {
                killed = true;
                // SAFETY: as above.
                unsafe {
                    libc::kill(target, libc::SIGKILL);
                    libc::wait4(pid, &mut raw, 0, &mut usage);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = ExitStatus::from_raw(raw);
        self.status = Some(status);
        Some(Ended { status, killed, usage })
    }

    /// SIGKILL to its whole process group even after the leader is gone
    /// (workers that outlive their parent), when it has one.
    pub fn signal_group_kill(&self) {
        if let (true, Some(c)) = (self.opts.own_group, &self.child) {
            // SAFETY: our child's process group; ESRCH when it is empty.
            unsafe { libc::kill(-(c.id() as libc::pid_t), libc::SIGKILL) };
        }
    }

    /// Waits until `ready()` says so. Fails if the child exits first
    /// (with what it wrote to a piped stderr) or `timeout` passes.
    pub fn wait_until(&mut self, timeout: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(st) = self.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.as_mut().and_then(|c| c.stderr.take()) {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                anyhow::bail!("{} exited ({st}) before it was ready: {}", self.what, err.trim());
            }
            if t0.elapsed() > timeout {
                anyhow::bail!("{} was not ready within {} s", self.what, timeout.as_secs_f64());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks it to stop, waits up to the grace period, then kills it.
    /// Returns how it ended (None if it had to be killed).
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.try_wait().is_some() {
            return self.status;
        }
        match self.stop_reaping() {
            Some(e) if e.killed => None,
            Some(e) => Some(e.status),
            None => self.status,
        }
    }
}

/// How a child ended when [`ChildProcess`] stopped it.
struct Ended {
    status: ExitStatus,
    killed: bool,
    usage: libc::rusage,
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A socket that a readiness check looks for in a process's network
/// namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    /// A UDP socket bound to this local port.
    Udp(u16),
    /// A TCP socket listening on this local port.
    TcpListen(u16),
}

/// Whether the network namespace of process `pid` holds `what` (any local
/// address), from `/proc/PID/net/{udp,tcp}{,6}`: how ontime knows a
/// receiver or server it started is ready to be sent to, without asking it
/// and without a sleep.
pub fn has_socket(pid: u32, what: Bound) -> bool {
    let (tables, port, listen) = match what {
        Bound::Udp(p) => (["udp", "udp6"], p, false),
        Bound::TcpListen(p) => (["tcp", "tcp6"], p, true),
    };
    tables.iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
            .map(|text| socket_table_has(&text, port, listen))
            .unwrap_or(false)
    })
}

/// One `/proc/net/{udp,tcp}` table: a row whose local port is `port`
/// (and, for `listen`, whose state is LISTEN, 0A).
fn socket_table_has(table: &str, port: u16, listen: bool) -> bool {
    table.lines().skip(1).any(|row| {
        let mut f = row.split_whitespace();
        let local = f.nth(1).unwrap_or("");
        let state = f.nth(1).unwrap_or("");
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        local_port == Some(port) && (!listen || state == "0A")
    })
}

/// This process's resident memory (bytes), from /proc/self/statm; None
/// where it cannot be read.
pub fn own_resident_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok().filter(|p| *p > 0)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_child_is_stopped_with_its_group() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & sleep 60"]);
        let c = ChildProcess::spawn(
            "sleepers",
            &mut cmd,
            SpawnOptions {
                own_group: true,
                grace: Duration::from_millis(500),
                ..Default::default()
            },
        )
        .unwrap();
        let pgid = c.id().to_string();
        std::thread::sleep(Duration::from_millis(100));
        drop(c);
        std::thread::sleep(Duration::from_millis(200));
        // Any process of the group still running (zombies waiting for a
        // reaper do not count)?
        let alive: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
            .filter(|st| {
                let after = st.rsplit_once(") ").map(|x| x.1).unwrap_or("");
                let f: Vec<&str> = after.split_whitespace().collect();
                f.len() > 2 && f[2] == pgid && f[0] != "Z"
            })
            .collect();
        assert!(alive.is_empty(), "the group outlived its guard: {alive:?}");
    }

    #[test]
    fn a_child_that_exits_before_ready_says_why() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo broken >&2; exit 3"])
            .stderr(std::process::Stdio::piped());
        let mut c = ChildProcess::spawn("tool", &mut cmd, SpawnOptions::default()).unwrap();
        let e = c.wait_until(Duration::from_secs(5), || false).unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("tool exited") && msg.contains("broken"), "{msg}");
    }

    #[test]
    fn socket_tables_are_read_by_local_port_and_state() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0\n\
   1: 0100007F:0050 0200007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0\n";
        assert!(socket_table_has(t, 8080, true));
        assert!(
            !socket_table_has(t, 80, true),
            "an established connection is not a listener"
        );
        assert!(socket_table_has(t, 80, false));
        assert!(!socket_table_has(t, 81, false));
    }

    #[test]
    fn a_bound_socket_is_seen_in_the_process_table() {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert!(has_socket(std::process::id(), Bound::Udp(port)));
        drop(s);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(has_socket(std::process::id(), Bound::TcpListen(port)));
    }
}
