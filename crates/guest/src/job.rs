//! A lab guest's job: the shell script its init runs with the host's root
//! as its root (read-only over 9p) and the run directory shared at its
//! host path. It switches on the guest's swap, starts the loads placed in
//! tenants, the guest's own I/O recorder when asked, then the probe; the
//! job's status is the probe's.

use anyhow::Result;
use ontime_core::names;
use ontime_scenario::scenario::{LoadKind, Place, RunConfig};
use ontime_scenario::vm::DiskModel;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The guest's own cgroup for its workload when its I/O is recorded.
const GUEST_JOB_CGROUP: &str = "/sys/fs/cgroup/ontime-job";
/// The in-guest I/O recording, `tN.` before it, in the run directory.
pub const GUEST_IO_RECORDING: &str = "guest-io.otrec";

/// A word for the job's shell, quoted.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// One flow's probe inside a guest: its spec (written by the runner), its
/// error log and its UDP port (a receiver's, to know when it is bound).
#[derive(Clone, Debug)]
pub struct GuestFlow {
    pub spec: PathBuf,
    pub err: PathBuf,
    pub port: u16,
}

/// A net run's part of a guest's job (document 003's channels from and to
/// VM tenants): the guest's side of the channel MTU and its neighbours,
/// the receivers of the flows to it, then, once every guest's receivers
/// are bound and the host says go, the best effort and the senders of the
/// flows from it. The host cannot see a guest's sockets: the guest says
/// when its receivers are bound (`ready`), the host when all are (`go`).
#[derive(Clone, Debug, Default)]
pub struct GuestNet {
    /// The guest NIC's MTU (room for the deadline label).
    pub mtu: Option<u32>,
    /// Static neighbours: (address, MAC as text).
    pub neighbours: Vec<(std::net::Ipv4Addr, String)>,
    pub receivers: Vec<GuestFlow>,
    pub senders: Vec<GuestFlow>,
    /// iperf3 client arguments of the best effort sent from this guest.
    pub best_effort: Vec<Vec<String>>,
    /// Ports of the iperf3 servers of the best effort sent to this guest.
    pub best_effort_servers: Vec<u16>,
    /// The spec of the clock measurement the flows' probes read their
    /// offset from (a guest's clock is not the host's).
    pub clock_sync: Option<PathBuf>,
    /// Made by the guest once its receivers are bound.
    pub ready: PathBuf,
    /// Made by the host once every guest is ready.
    pub go: PathBuf,
    /// The receivers stop this long after go (the flows' time and a grace).
    pub receive_for: Duration,
}

/// How long a guest waits for the host's go.
const GO_LIMIT_S: u32 = 300;

/// The net tail of a job: sets `rc` to the first failing sender's status.
fn net_part(n: &GuestNet, exe_q: &str) -> String {
    let q = |p: &Path| shell_quote(&p.display().to_string());
    let mut s =
        String::from("dev=\nfor d in /sys/class/net/*; do [ \"${d##*/}\" = lo ] || { dev=${d##*/}; break; }; done\n");
    if let Some(mtu) = n.mtu {
        s.push_str(&format!("ip link set dev \"$dev\" mtu {mtu}\n"));
    }
    for (addr, mac) in &n.neighbours {
        s.push_str(&format!(
            "ip neigh replace {addr} lladdr {mac} dev \"$dev\" nud permanent\n"
        ));
    }
    if let Some(spec) = &n.clock_sync {
        s.push_str(&format!(
            "{exe_q} probe {} || {{ echo 'ontime: the guest could not measure its clock against the host' >&2; exit 96; }}\n",
            q(spec)
        ));
    }
    s.push_str("r=\n");
    for f in &n.receivers {
        s.push_str(&format!(
            "{exe_q} probe {} >/dev/null 2>{} &\nr=\"$r $!\"\n",
            q(&f.spec),
            q(&f.err)
        ));
    }
    for port in &n.best_effort_servers {
        s.push_str(&format!("iperf3 -s -1 -p {port} >/dev/null 2>&1 &\n"));
    }
    // Bound: each port in the guest's UDP (receivers) and TCP (iperf3's
    // control connection) tables, in hex as the kernel writes them.
    // iperf3 listens on IPv6's wildcard (dual stack): tcp6.
    for (table, ports) in [
        (
            "udp /proc/net/udp6",
            n.receivers.iter().map(|f| f.port).collect::<Vec<_>>(),
        ),
        ("tcp /proc/net/tcp6", n.best_effort_servers.clone()),
    ] {
        if ports.is_empty() {
            continue;
        }
        let hex: Vec<String> = ports.iter().map(|p| format!("{p:04X}")).collect();
        s.push_str(&format!(
            "n=0\nwhile [ $n -lt 600 ]; do ok=1; for p in {}; do grep -qs \":$p \" /proc/net/{table} || ok=0; done; [ $ok = 1 ] && break; sleep 0.05; n=$((n + 1)); done\n",
            hex.join(" ")
        ));
    }
    s.push_str(&format!(
        ": >{}\nn=0\nwhile [ ! -e {go} ] && [ $n -lt {} ]; do sleep 0.02; n=$((n + 1)); done\n\
         [ -e {go} ] || {{ echo 'ontime: the host never said go' >&2; kill -TERM $r 2>/dev/null; exit 98; }}\n",
        q(&n.ready),
        GO_LIMIT_S * 50,
        go = q(&n.go),
    ));
    if !n.receivers.is_empty() {
        s.push_str(&format!(
            "( sleep {}; kill -TERM $r 2>/dev/null ) &\n",
            n.receive_for.as_secs().max(1)
        ));
    }
    s.push_str("b=\n");
    for args in &n.best_effort {
        let a: Vec<String> = args.iter().map(|x| shell_quote(x)).collect();
        // Its report is written when it ends: the job waits for it.
        s.push_str(&format!("iperf3 {} >/dev/null 2>&1 &\nb=\"$b $!\"\n", a.join(" ")));
    }
    s.push_str("p=\n");
    for f in &n.senders {
        s.push_str(&format!(
            "{exe_q} probe {} >/dev/null 2>{} &\np=\"$p $!\"\n",
            q(&f.spec),
            q(&f.err)
        ));
    }
    // A stop request (the init SIGTERMs the pid in /run/ontime-probe.pid)
    // reaches every probe, which write what they measured.
    s.push_str(
        "( trap 'kill -TERM $p $b $r 2>/dev/null; exit 0' TERM; while :; do sleep 1; done ) &\nstopper=$!\necho $stopper >/run/ontime-probe.pid\n\
         rc=0\nfor x in $p; do wait $x || rc=$?; done\nfor x in $b $r; do wait $x; done\nkill $stopper 2>/dev/null\n",
    );
    s
}

/// Tenant `i`'s job inside its guest: the loads placed in tenants (in the
/// background), then its probe from the spec file the runner wrote (or, in
/// a net run, its flows' receivers and senders); the job's status is the
/// probe's (the senders').
pub fn job_script(
    c: &RunConfig,
    i: usize,
    dir: &Path,
    exe: &Path,
    has_disk: bool,
    net: Option<&GuestNet>,
) -> Result<String> {
    // The host's root is read-only in the guest: scratch space is /run.
    let mut s = String::from(
        "# tenant's job inside its QEMU guest (written by ontime lab)\ncd /\nexport TMPDIR=/run/ontime-tmp\nmkdir -p $TMPDIR\n",
    );
    let err = shell_quote(&dir.join(format!("t{i}.err")).display().to_string());
    // Document 004's guest swap: a swap file on the guest's own disk,
    // switched on by the guest's kernel before the workload starts.
    let swap_bytes = c.tenant.swap_bytes().map_err(anyhow::Error::msg)?.filter(|&b| b > 0);
    let swap = swap_bytes.is_some();
    if let Some(bytes) = swap_bytes {
        let f = format!("{}/swapfile", names::DISK_MOUNT);
        s.push_str(&format!(
            "if ! {{ fallocate -l {bytes} {f} && chmod 600 {f} && mkswap -q {f} && swapon {f}; }} >/run/ontime-swap.log 2>&1; then\n\
             echo \"ontime: the guest could not switch on its swap file {f}: $(cat /run/ontime-swap.log)\" >{err}\n\
             exit 97\nfi\n\
             echo \"ontime-guest-swap $(grep -c {f} /proc/swaps)\" >/dev/console\n"
        ));
    }
    let exe_q = shell_quote(&exe.display().to_string());
    // The guest's own layers (document 004's application layer and guest
    // cache): the workload runs in a cgroup of the guest's own, recorded
    // from inside by the same `ontime io record` (every call, or the counters
    // with `io_calls = false`), with the guest's disk as its virtual disk; the
    // host's recorder has the layers below.
    let guest_io = c.observe.io && has_disk;
    if guest_io {
        let model = c.tenant.disk.as_ref().and_then(|d| d.model).unwrap_or_default();
        let device = if model == DiskModel::VirtioBlk {
            "/dev/vda"
        } else {
            "/dev/sda"
        };
        let name = names::tenant_name(i);
        let rec_err = shell_quote(&dir.join(format!("t{i}.guest-io.err")).display().to_string());
        s.push_str(&format!(
            "mount -t cgroup2 none /sys/fs/cgroup && echo +memory >/sys/fs/cgroup/cgroup.subtree_control && mkdir -p {GUEST_JOB_CGROUP}\n\
             {exe_q} io record{} --cgroup {name}={GUEST_JOB_CGROUP} --disk {name}={device} -o {} >/dev/null 2>{rec_err} &\n\
             rec=$!\nn=0\n\
             while ! grep -q 'ontime: recording' {rec_err} && kill -0 $rec 2>/dev/null && [ $n -lt 900 ]; do sleep 0.2; n=$((n + 1)); done\n",
            if c.observe.io_calls { " --calls" } else { "" },
            shell_quote(&dir.join(format!("t{i}.{GUEST_IO_RECORDING}")).display().to_string()),
        ));
    }
    // The guest's own scheduling (the guest side of its probe's late
    // events): its clock measured against the host's echo first, then
    // every task's switches and wake-ups recorded, before the loads start.
    let guest_sched = c.records_guests();
    if guest_sched {
        let q = |name: String| shell_quote(&dir.join(name).display().to_string());
        let rec_err = q(format!("t{i}.guest-sched.err"));
        // Without a clock the recording cannot be placed: the probe runs
        // all the same, its late events unexplained (the error says why).
        s.push_str(&format!(
            "srec=\nif {exe_q} probe {} >/dev/null 2>{rec_err}; then\n\
             {exe_q} observe record --all -o {} >/dev/null 2>>{rec_err} &\n\
             srec=$!\nn=0\n\
             while ! grep -q 'ontime: recording' {rec_err} && kill -0 $srec 2>/dev/null && [ $n -lt 900 ]; do sleep 0.2; n=$((n + 1)); done\n\
             else echo 'ontime: the guest could not measure its clock against the host: not recorded' >>{rec_err}; fi\n",
            q(names::guest_clock_probe(i)),
            q(names::guest_sched_recording(i)),
        ));
    }
    let max = Duration::from_nanos(c.duration) + Duration::from_secs(60);
    for l in c.effective_loads().iter().filter(|l| l.place == Place::Tenants) {
        match l.profile {
            LoadKind::None => {}
            LoadKind::Stress(p) => {
                let work = if has_disk {
                    format!("{}/load", names::DISK_MOUNT)
                } else {
                    "/run/ontime-load".to_string()
                };
                let args: Vec<String> = p
                    .args(l.workers, l.vm_bytes().unwrap_or(None), Path::new(&work), max)
                    .iter()
                    .map(|a| shell_quote(a))
                    .collect();
                s.push_str(&format!(
                    "mkdir -p {work}\nstress-ng {} >/dev/null 2>&1 &\n",
                    args.join(" ")
                ));
            }
            LoadKind::Wan => {
                let secs = c.duration / 1_000_000_000 + 5;
                s.push_str(&format!(
                    "iperf3 -c {} -p {} -u -l 1200 -b {}M -t {secs} >/dev/null 2>&1 &\n",
                    names::building_addr(),
                    5201 + i,
                    l.rate_mbit
                ));
            }
        }
    }
    if let Some(n) = net {
        s.push_str(&net_part(n, &exe_q));
    } else {
        let injectors: Vec<PathBuf> = c
            .guest_injectors(dir, i)
            .map_err(anyhow::Error::msg)?
            .into_iter()
            .map(|(file, _)| file)
            .collect();
        probe_part(&mut s, i, dir, &exe_q, &err, guest_io, &injectors);
    }
    if guest_io {
        // The recorder writes what it has on SIGINT, like a sandbox's.
        s.push_str("kill -INT $rec 2>/dev/null\nwait $rec\n");
    }
    if guest_sched {
        s.push_str("if [ -n \"$srec\" ]; then kill -INT $srec 2>/dev/null; wait $srec; fi\n");
    }
    s.push_str("kill $(jobs -p) 2>/dev/null\n");
    if swap {
        // The init unmounts the disk the swap file is on after the job.
        s.push_str(&format!("wait\nswapoff {}/swapfile 2>/dev/null\n", names::DISK_MOUNT));
    }
    s.push_str("exit $rc\n");
    Ok(s)
}

/// The probe of a run without [net], with the causes injected inside the
/// guest (`injectors`: their specs) started once it runs and stopped
/// (they write their windows) once it ends: sets `rc` to its status.
fn probe_part(s: &mut String, i: usize, dir: &Path, exe_q: &str, err: &str, guest_io: bool, injectors: &[PathBuf]) {
    let spec = shell_quote(&dir.join(format!("t{i}.probe.json")).display().to_string());
    let out = shell_quote(&dir.join(format!("t{i}.out")).display().to_string());
    let probe = if guest_io {
        // Into the job's cgroup first (the probe runs even if that fails:
        // the recording then says it saw nothing), then the probe in its place.
        format!("sh -c 'echo $$ >{GUEST_JOB_CGROUP}/cgroup.procs; exec \"$@\"' sh {exe_q} probe {spec}")
    } else {
        format!("{exe_q} probe {spec}")
    };
    s.push_str(&format!(
        "{probe} >{out} 2>{err} &\np=$!\necho $p >/run/ontime-probe.pid\ninj=\n"
    ));
    for spec in injectors {
        let q = |p: &Path| shell_quote(&p.display().to_string());
        s.push_str(&format!(
            "{exe_q} probe {} 2>{} &\ninj=\"$inj $!\"\n",
            q(spec),
            q(&spec.with_extension("err"))
        ));
    }
    s.push_str("wait $p\nrc=$?\n");
    if !injectors.is_empty() {
        s.push_str("kill -TERM $inj 2>/dev/null\nfor x in $inj; do wait $x; done\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shell parses `script` (`sh -n`).
    fn assert_valid_shell(script: &str) {
        let check = std::process::Command::new("sh")
            .args(["-n", "-c", script])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}\n{script}",
            String::from_utf8_lossy(&check.stderr)
        );
    }

    fn config(text: &str) -> RunConfig {
        let plan = ontime_scenario::scenario::load_str(text, Path::new("vm.toml")).expect("a valid scenario");
        plan.runs[0].config.clone()
    }

    /// The job of a guest with swap, a load beside it and its own I/O
    /// recorder: every piece is there, in order (the recorder attached before
    /// anything it should see starts), and the shell accepts it.
    #[test]
    fn a_full_job_is_valid_shell_with_swap_load_recorder_and_probe_in_order() {
        let c = config(
            "name = 'j'\nduration = '5s'\n[tenant]\ncount = 1\nbackend = 'qemu'\nmemory = '256M'\nswap = '64M'\n\
             [tenant.disk]\nsize = '512M'\n[tenant.io]\ntool = 'fio'\nrw = 'randread'\nsize = '32M'\nbs = '4k'\n\
             [[load]]\nprofile = 'memory'\nplace = 'tenants'\n[observe]\nrecorder = 'off'\nio = true\n",
        );
        let dir = Path::new("/run/ontime lab/r");
        let s = job_script(&c, 0, dir, Path::new("/usr/bin/ontime"), true, None).unwrap();
        let at = |what: &str| s.find(what).unwrap_or_else(|| panic!("no {what:?} in\n{s}"));
        assert!(at("swapon") < at("io record --calls --cgroup t0=/sys/fs/cgroup/ontime-job --disk t0=/dev/vda"));
        assert!(at("io record") < at("stress-ng"));
        assert!(at("stress-ng") < at("cgroup.procs; exec"));
        assert!(at("/run/ontime-probe.pid") < at("kill -INT $rec"));
        assert!(
            s.contains("'/run/ontime lab/r/t0.guest-io.otrec'"),
            "paths are quoted:\n{s}"
        );
        assert_valid_shell(&s);
    }

    /// A net run's job: MTU and neighbours first, the receivers bound
    /// before the guest says ready, nothing sent before the host's go, the
    /// receivers stopped by their own timer, a stop request reaching every
    /// probe; the shell accepts it.
    #[test]
    fn a_net_job_binds_its_receivers_before_ready_and_sends_only_after_go() {
        let c =
            config("name = 'j'\nduration = '5s'\n[tenant]\ncount = 2\nbackend = 'qemu'\n[tenant.crawl]\nrate = 10\n");
        let flow = |n: &str, port| GuestFlow {
            spec: PathBuf::from(format!("/r/flow-{n}.probe.json")),
            err: PathBuf::from(format!("/r/flow-{n}.err")),
            port,
        };
        let net = GuestNet {
            mtu: Some(1496),
            neighbours: vec![("10.77.0.1".parse().unwrap(), "02:77:ff:ff:ff:01".into())],
            receivers: vec![flow("A", 5001), flow("B", 5002)],
            senders: vec![flow("C", 5003)],
            best_effort: vec![vec!["-c".into(), "10.77.0.1".into()]],
            best_effort_servers: vec![5202],
            clock_sync: Some(PathBuf::from("/r/t1.clock.probe.json")),
            ready: PathBuf::from("/r/t1.net-ready"),
            go: PathBuf::from("/r/net.go"),
            receive_for: Duration::from_secs(8),
        };
        let s = job_script(&c, 1, Path::new("/r"), Path::new("/o"), false, Some(&net)).unwrap();
        let at = |what: &str| s.find(what).unwrap_or_else(|| panic!("no {what:?} in\n{s}"));
        assert!(at("mtu 1496") < at("ip neigh replace 10.77.0.1 lladdr 02:77:ff:ff:ff:01"));
        assert!(at("ip neigh") < at("'/o' probe '/r/t1.clock.probe.json' ||"));
        assert!(at("t1.clock.probe.json") < at("flow-A.probe.json"));
        assert!(at("ip neigh") < at("'/o' probe '/r/flow-A.probe.json'"));
        assert!(at("flow-B.probe.json") < at("for p in 1389 138A"), "ports in hex:\n{s}");
        assert!(at("iperf3 -s -1 -p 5202") < at("for p in 1452; do grep -qs \":$p \" /proc/net/tcp /proc/net/tcp6"));
        assert!(at("/proc/net/tcp") < at("t1.net-ready"));
        assert!(at("for p in 1389 138A") < at(": >'/r/t1.net-ready'"));
        assert!(at("t1.net-ready") < at("while [ ! -e '/r/net.go' ]"));
        assert!(at("net.go") < at("sleep 8; kill -TERM $r"));
        assert!(at("net.go") < at("iperf3 '-c' '10.77.0.1'"));
        assert!(at("net.go") < at("'/o' probe '/r/flow-C.probe.json'"));
        assert!(at("flow-C.probe.json") < at("/run/ontime-probe.pid"));
        assert!(!s.contains("t1.probe.json"), "no probe of its own:\n{s}");
        assert_valid_shell(&s);
    }

    /// With the scheduler recorder on, a guest measures its clock, then
    /// records itself from before its loads start to after its probe
    /// ends; the shell accepts it.
    #[test]
    fn a_recorded_guest_measures_its_clock_and_records_around_its_probe() {
        let c = config(
            "name = 'j'\nduration = '5s'\n[tenant]\ncount = 1\nbackend = 'qemu'\n[tenant.cyclic]\ninterval = '1ms'\n\
             [[load]]\nprofile = 'kernel'\nplace = 'tenants'\n[observe]\nguest = true\n",
        );
        let s = job_script(&c, 0, Path::new("/r"), Path::new("/o"), false, None).unwrap();
        let at = |what: &str| s.find(what).unwrap_or_else(|| panic!("no {what:?} in\n{s}"));
        assert!(at("'/o' probe '/r/t0.clock.probe.json'") < at("observe record --all -o '/r/t0.guest-sched.otrec'"));
        assert!(at("observe record") < at("stress-ng"));
        assert!(at("stress-ng") < at("'/o' probe '/r/t0.probe.json'"));
        assert!(at("'/r/t0.probe.json'") < at("kill -INT $srec"));
        assert_valid_shell(&s);
    }

    #[test]
    fn a_plain_job_runs_only_the_probe() {
        let c =
            config("name = 'j'\nduration = '5s'\n[tenant]\ncount = 1\nbackend = 'qemu'\n[tenant.crawl]\nrate = 10\n");
        let s = job_script(&c, 2, Path::new("/r"), Path::new("/o"), false, None).unwrap();
        assert!(
            !s.contains("swapon") && !s.contains("io record") && !s.contains("stress-ng"),
            "{s}"
        );
        assert!(
            s.contains("'/o' probe '/r/t2.probe.json' >'/r/t2.out' 2>'/r/t2.err' &"),
            "{s}"
        );
    }
}
