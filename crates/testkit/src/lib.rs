//! ontime-testkit: what the tests of every crate share, so none keeps its
//! own copy: a skip that is seen ([`skip`]: the reason goes to stderr and,
//! when `ONTIME_TEST_SKIPS` names a file, as scripts/test.sh sets it, is
//! appended there, so the suite's summary lists every skip instead of
//! showing a skipped test as a silent pass), the root and tool checks that
//! skip with a reason, a free TCP port, and a child process (or Debian's
//! nginx, [`Nginx`]) that is stopped when the test ends, also when it
//! fails.
//!
//! It also makes seeded corruptions of a recording ([`corrupt`]) for the
//! tests that every reader survives them, and measures the peak memory of
//! a piece of code ([`alloc`]) for the tests that bound it.
//!
//! Nothing here waits a fixed time to let something happen: tests wait for
//! a signal of readiness ([`wait_until`] polls a condition with a limit
//! that only bounds a hang).

pub mod alloc;
pub mod corrupt;

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Records that the calling test skipped, and why.
pub fn skip(reason: &str) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    eprintln!("skipped: {reason}");
    if let Some(path) = std::env::var_os("ONTIME_TEST_SKIPS") {
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{test}: {reason}");
        }
    }
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True as root; else a visible skip saying what needed root.
pub fn root_or_skip(needs: &str) -> bool {
    if is_root() {
        return true;
    }
    skip(&format!("{needs}: needs root"));
    false
}

/// True when every tool is on PATH; else a visible skip naming the first
/// missing one.
pub fn tools_or_skip(tools: &[&str]) -> bool {
    for tool in tools {
        if ontime_core::caps::which(tool).is_none() {
            skip(&format!("{tool} is not installed (scripts/setup.sh installs it)"));
            return false;
        }
    }
    true
}

/// A TCP port on 127.0.0.1 that nothing listened on a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 for a free port")
}

/// Gaps between `times` (a poller's log) that fall within `slack_ns` of
/// one and a half, two and a half ... periods: where the same request
/// stamped a little differently elsewhere (on the wire) may round to the
/// other count of missed slots. Two judges of one poller may differ in
/// missed slots by at most this many.
pub fn ambiguous_gaps(times: &[u64], period_ns: u64, slack_ns: u64) -> u64 {
    let period = period_ns.max(1) as f64;
    times
        .windows(2)
        .filter(|w| {
            let slots = (w[1] - w[0]) as f64 / period;
            let off_half = (slots - slots.floor() - 0.5).abs() * period;
            slots >= 1.0 && off_half <= slack_ns as f64
        })
        .count() as u64
}

/// The least time any wait here allows. A limit only bounds a hang, and
/// on a machine as busy as `stress-ng --cpu 2` beside the suite a 5 s
/// crawl took over 30 s to exit (its collector runs at SCHED_IDLE, which
/// such a load starves): no limit may be a timing the test depends on.
pub const MIN_HANG_BOUND: Duration = Duration::from_secs(120);

/// Polls `ready` every 10 ms until it holds; panics with `what` after
/// `limit` or [`MIN_HANG_BOUND`], whichever is longer (a bound on a hang,
/// not a timing the test depends on).
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let limit = limit.max(MIN_HANG_BOUND);
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child process that is resumed and killed when dropped, so a failing
/// test leaves no process behind.
pub struct KillOnDrop(pub Child);

impl KillOnDrop {
    /// Spawns `cmd` with stdin closed and stdout/stderr captured.
    pub fn spawn(cmd: &mut Command) -> KillOnDrop {
        KillOnDrop(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}")),
        )
    }

    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(self.0.id() as i32, sig) };
    }

    /// Waits up to `limit` for the child to exit and returns its output.
    pub fn wait_output(mut self, limit: Duration) -> Output {
        wait_until("process exit", limit, || matches!(self.0.try_wait(), Ok(Some(_))));
        let child = std::mem::replace(&mut self.0, Command::new("true").spawn().expect("spawn true"));
        child.wait_with_output().expect("collecting the output")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.signal(libc::SIGCONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tmpfs of `size` (e.g. "16k") on a fresh directory, unmounted when
/// dropped: a full disk for tests of what a write failure leaves behind.
pub struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    /// None where tmpfs cannot be mounted (not root, a container).
    pub fn mount(size: &str) -> Option<SmallTmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "ontime-test"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallTmpfs { dir })
    }

    pub fn path(&self) -> &std::path::Path {
        self.dir.path()
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A python3 process at SCHED_FIFO 50 on CPU 1, busy 80 ms then resting,
/// again and again; killed on drop. What the explanation tests' probes
/// wait behind.
pub struct FifoHog(KillOnDrop);

const HOG: &str = r#"
import os, sys, time
os.sched_setaffinity(0, {1})
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
print("ready", flush=True)
while True:
    end = time.monotonic() + 0.08
    while time.monotonic() < end:
        pass
    time.sleep(float(sys.argv[1]))
"#;

impl FifoHog {
    /// Busy 80 ms, then resting `rest_s`. None, with the reason said,
    /// where this machine refuses SCHED_FIFO or CPU 1 (a container without
    /// CAP_SYS_NICE, a cpuset, no real-time budget for the cgroup): the
    /// test then skips.
    pub fn start_resting(rest_s: f64) -> Option<FifoHog> {
        let mut child = KillOnDrop(
            Command::new("python3")
                .args(["-c", HOG, &rest_s.to_string()])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("python3 for the hog"),
        );
        let mut line = String::new();
        use std::io::BufRead;
        // EOF when it fails: never a hang.
        if let Some(out) = child.0.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            skip("this machine refuses a SCHED_FIFO process on CPU 1");
            return None;
        }
        Some(FifoHog(child))
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

/// nginx from Debian, one worker, in a temporary prefix; stopped (workers
/// included) on drop.
pub struct Nginx {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// Serves `body` (as JSON) for every path on `port`.
    pub fn start(port: u16, body: &str) -> Option<Nginx> {
        let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())?;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        // Debian's default worker_connections (768), one worker, as a user
        // would run it; the answer lists values before recv_ns, which any
        // JSON producer may do.
        let conf = format!(
            "daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/logs/error.log warn;\n\
             events {{ worker_connections 768; }}\n\
             http {{ access_log off; client_body_temp_path {d}; \
             server {{ listen 127.0.0.1:{port}; location / {{ default_type application/json; return 200 '{body}'; }} }} }}\n",
            d = dir.path().display()
        );
        std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
        // Its own process group, so its workers go with it on drop.
        let child = Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(dir.path().join("nginx.conf"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let n = Nginx { child, _dir: dir };
        wait_until("nginx listening", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Some(n)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: nginx's fast shutdown, which stops the workers too.
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signalling the process group nginx leads.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}
