//! A lab guest's job: the shell script its init runs with the host's root
//! as its root (read-only over 9p) and the run directory shared at its
//! host path. It switches on the guest's swap, starts the loads placed in
//! tenants, the guest's own I/O recorder when asked, then the probe; the
//! job's status is the probe's.

use anyhow::Result;
use ontime_core::names;
use ontime_scenario::scenario::{LoadKind, Place, RunConfig};
use ontime_scenario::vm::DiskModel;
use std::path::Path;
use std::time::Duration;

/// The guest's own cgroup for its workload when its I/O is recorded.
const GUEST_JOB_CGROUP: &str = "/sys/fs/cgroup/ontime-job";
/// The in-guest I/O recording, `tN.` before it, in the run directory.
pub const GUEST_IO_RECORDING: &str = "guest-io.otrec";

/// A word for the job's shell, quoted.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Tenant `i`'s job inside its guest: the loads placed in tenants (in the
/// background), then its probe from the spec file the runner wrote; the
/// job's status is the probe's.
pub fn job_script(c: &RunConfig, i: usize, dir: &Path, exe: &Path, has_disk: bool) -> Result<String> {
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
        "{probe} >{out} 2>{err} &\necho $! >/run/ontime-probe.pid\nwait $!\nrc=$?\n"
    ));
    if guest_io {
        // The recorder writes what it has on SIGINT, like a sandbox's.
        s.push_str("kill -INT $rec 2>/dev/null\nwait $rec\n");
    }
    s.push_str("kill $(jobs -p) 2>/dev/null\n");
    if swap {
        // The init unmounts the disk the swap file is on after the job.
        s.push_str(&format!("wait\nswapoff {}/swapfile 2>/dev/null\n", names::DISK_MOUNT));
    }
    s.push_str("exit $rc\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let s = job_script(&c, 0, dir, Path::new("/usr/bin/ontime"), true).unwrap();
        let at = |what: &str| s.find(what).unwrap_or_else(|| panic!("no {what:?} in\n{s}"));
        assert!(at("swapon") < at("io record --calls --cgroup t0=/sys/fs/cgroup/ontime-job --disk t0=/dev/vda"));
        assert!(at("io record") < at("stress-ng"));
        assert!(at("stress-ng") < at("cgroup.procs; exec"));
        assert!(at("/run/ontime-probe.pid") < at("kill -INT $rec"));
        assert!(
            s.contains("'/run/ontime lab/r/t0.guest-io.otrec'"),
            "paths are quoted:\n{s}"
        );
        let check = std::process::Command::new("sh")
            .args(["-n", "-c", &s])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{}\n{s}",
            String::from_utf8_lossy(&check.stderr)
        );
    }

    #[test]
    fn a_plain_job_runs_only_the_probe() {
        let c =
            config("name = 'j'\nduration = '5s'\n[tenant]\ncount = 1\nbackend = 'qemu'\n[tenant.crawl]\nrate = 10\n");
        let s = job_script(&c, 2, Path::new("/r"), Path::new("/o"), false).unwrap();
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
