//! QEMU tenants (`tenant.backend = "qemu"`): one QEMU process per tenant,
//! in the tenant's network namespace and cgroup, booting the guest kit
//! (scripts/guest-kit.sh: Debian's kernel, a busybox initramfs).
//!
//! - The guest's root for its job is the host's root, read-only over 9p,
//!   and the run directory is shared read-write at its host path: the
//!   probe runs the same `ontime` binary with the same spec file and writes
//!   the same result files as a sandbox tenant's. Loads placed in tenants
//!   run inside the guest beside the probe.
//! - Network: QEMU's tap (`vm0`) is bridged to the tenant's veth inside the
//!   tenant's namespace, so every frame crosses the VMM's NIC backend and
//!   then the host relay (the documents' netback / vhost) as before. The
//!   guest's NIC carries the tenant's MAC and address; the veth end inside
//!   the namespace gives both up.
//! - The accelerator: KVM only when a probe guest actually boots with it
//!   within `ontime_guest::kit::KVM_BOOT_LIMIT` (a `/dev/kvm` whose guests hang, as under
//!   nested virtualisation without support, is not enough), else TCG.
//! - A guest's life is its QEMU process: the init runs the job, writes its
//!   exit status beside the results and powers off. A guest that does not
//!   reach its job is an error naming its console log (kept in the run
//!   directory).

use anyhow::{bail, Context, Result};
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_core::rt::Policy;
use ontime_scenario::record::VmEnvironment;
use ontime_scenario::scenario::RunConfig;
use ontime_scenario::vm::{DiskAio, DiskCache, DiskModel, ImageFormat, NicModel, VmConfig};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::names;
use crate::sandbox::{mac_text, Lab, Tenant};
use crate::sys::ip;
use ontime_guest::control::{control_path, GuestControl};
use ontime_guest::job::job_script;
pub use ontime_guest::job::GUEST_IO_RECORDING;
pub use ontime_guest::kit::{choose_accel, console_has, qemu_version, vhost_available, Accel, Kit, QEMU};

/// How long a lab guest may take to reach its job (TCG on a busy host
/// boots in 5 to 30 s).
const BOOT_LIMIT: Duration = Duration::from_secs(180);
/// The guest kernel's: no boot-time check that the timer interrupt
/// arrives within a few emulated ticks (under TCG on a loaded host, or with
/// the vCPU threads real-time, it fails and the kernel panics: "IO-APIC +
/// timer doesn't work"), and a panic reboots at once, which `-no-reboot`
/// turns into QEMU's exit, so a guest that panics fails its run in seconds.
const GUEST_KERNEL_ARGS: &str = "no_timer_check panic=1";
/// The tap QEMU creates in the tenant's namespace, and the bridge.
const TAP: &str = "vm0";
const BRIDGE: &str = "br0";

/// This host cannot run the scenario as written (no guest kit, no QEMU,
/// no vhost-net): the user's to fix, said before anything is made.
#[derive(Debug)]
pub struct HostCannot(pub String);

impl std::fmt::Display for HostCannot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostCannot {}

/// What must hold before a QEMU run makes anything: the kit, QEMU, vhost
/// where asked for.
pub fn preflight(c: &RunConfig) -> Result<Kit> {
    let kit = Kit::find()?;
    qemu_version()?;
    if c.tenant.vm.as_ref().is_some_and(|v| v.vhost) && !vhost_available() {
        bail!("tenant.vm.vhost = true but /dev/vhost-net is unavailable here (modprobe vhost_net): set vhost = false");
    }
    Ok(kit)
}

/// The guest's memory (`tenant.memory`, else the default).
pub fn guest_memory(c: &RunConfig) -> Result<u64> {
    c.tenant.guest_memory().map_err(anyhow::Error::msg)
}

/// Inside tenant `t`'s namespace: a bridge joining its veth end to the
/// tap QEMU will create; the veth end gives its address and MAC up to the
/// guest. The namespace's deletion removes both.
pub fn bridge_tenant(t: &Tenant) -> Result<()> {
    let ns = &t.net.netns;
    let veth = &t.net.ns_if;
    // The guest's NIC takes the tenant's MAC; the bridge port needs another.
    let mut mac = t.net.mac;
    mac[1] ^= 0x01;
    let mac = mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    ip(&["-n", ns, "addr", "flush", "dev", veth])?;
    ip(&["-n", ns, "link", "set", veth, "down"])?;
    ip(&["-n", ns, "link", "set", veth, "address", &mac])?;
    ip(&["-n", ns, "link", "add", BRIDGE, "type", "bridge"])?;
    ip(&["-n", ns, "link", "set", veth, "master", BRIDGE])?;
    ip(&["-n", ns, "link", "set", veth, "up"])?;
    ip(&["-n", ns, "link", "set", BRIDGE, "up"])?;
    Ok(())
}

/// A tenant's image file: ext4 made on the host, then converted when the
/// format asks for it. Removed by the lab's undo or `lab clean`.
fn make_image(undo: &mut crate::undo::Undo, i: usize, size: u64, format: ImageFormat) -> Result<PathBuf> {
    std::fs::create_dir_all(names::DISK_DIR).with_context(|| format!("cannot create {}", names::DISK_DIR))?;
    let raw = PathBuf::from(format!("{}/{}-t{i}-vm.raw", names::DISK_DIR, names::PREFIX));
    let f = std::fs::File::create(&raw).with_context(|| format!("cannot create {}", raw.display()))?;
    f.set_len(size)
        .with_context(|| format!("cannot size {} to {size} bytes", raw.display()))?;
    drop(f);
    let r = raw.clone();
    undo.push(format!("remove {}", raw.display()), move || {
        let _ = std::fs::remove_file(&r);
    });
    run_tool(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&raw),
        "mkfs.ext4 (install e2fsprogs)",
    )?;
    if format == ImageFormat::Raw {
        return Ok(raw);
    }
    let qcow = raw.with_extension("qcow2");
    run_tool(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(&raw)
            .arg(&qcow),
        "qemu-img convert",
    )?;
    let q = qcow.clone();
    undo.push(format!("remove {}", qcow.display()), move || {
        let _ = std::fs::remove_file(&q);
    });
    let _ = std::fs::remove_file(&raw);
    Ok(qcow)
}

fn run_tool(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().with_context(|| format!("cannot run {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Where one tenant's guest says how it went: its console and its job's
/// exit status. Its QEMU process is the tenant's probe process.
pub struct GuestFiles {
    pub index: usize,
    console: PathBuf,
    exit_file: PathBuf,
    started: Instant,
    control: GuestControl,
}

/// What a run's guests share.
pub struct GuestSetup {
    pub kit: Kit,
    pub accel: Accel,
    pub vm: VmConfig,
    pub memory: u64,
    pub images: Vec<PathBuf>,
    disk_cache: Option<DiskCache>,
    disk_aio: DiskAio,
    /// The building side's MAC: the guest's permanent neighbour.
    building_mac: [u8; 6],
    /// Removes the images when the run's guests are done.
    _undo: crate::undo::Undo,
}

impl GuestSetup {
    /// Chooses the accelerator, bridges every tenant's namespace and makes
    /// the images (removed when the setup is dropped).
    pub fn prepare(c: &RunConfig, lab: &Lab) -> Result<GuestSetup> {
        let mut undo = crate::undo::Undo::default();
        let kit = preflight(c)?;
        let accel = choose_accel(c.host.accel, &kit)?;
        for t in &lab.tenants {
            bridge_tenant(t).with_context(|| format!("cannot give tenant {} its tap bridge", t.index))?;
        }
        let mut images = Vec::new();
        if let Some(d) = &c.tenant.disk {
            let size = ontime_core::size::parse_bytes(&d.size).map_err(anyhow::Error::msg)?;
            for t in &lab.tenants {
                images.push(make_image(&mut undo, t.index, size, d.format.unwrap_or_default())?);
            }
        }
        Ok(GuestSetup {
            kit,
            accel,
            vm: c.tenant.vm.clone().unwrap_or_default(),
            memory: guest_memory(c)?,
            images,
            disk_cache: c.tenant.disk.as_ref().map(|d| d.cache.unwrap_or_default()),
            disk_aio: c.tenant.disk.as_ref().and_then(|d| d.aio).unwrap_or_default(),
            building_mac: lab.building.mac,
            _undo: undo,
        })
    }

    /// Tenant `index`'s image as the I/O recorder's virtual disk (QEMU's
    /// calls on it; O_DIRECT with `cache = "none"`), for recorder group
    /// `group`; None without a disk.
    pub fn image_disk(&self, index: usize, group: u32) -> Result<Option<ontime_trace::io::TenantDisk>> {
        let Some(image) = self.images.get(index) else {
            return Ok(None);
        };
        let direct = self.disk_cache == Some(DiskCache::None);
        let disk = ontime_trace::io_vmm::image_disk(group, image, direct)?;
        Ok(Some(ontime_trace::io::TenantDisk {
            aio: ontime_trace::io::VmmAio::parse(self.disk_aio.as_str()).unwrap_or_default(),
            ..disk
        }))
    }

    /// The run record's account of the guests.
    pub fn environment(&self, c: &RunConfig) -> VmEnvironment {
        VmEnvironment {
            accel: self.accel.name.into(),
            accel_why: self.accel.why.clone(),
            qemu: qemu_version().unwrap_or_default(),
            nic: self.vm.nic.as_str().into(),
            vhost: self.vm.vhost,
            disk: c.tenant.disk.as_ref().map(|d| {
                format!(
                    "{}{}, cache {}, aio {}, {}",
                    d.model.unwrap_or_default().as_str(),
                    if d.iothread { ", iothread" } else { "" },
                    d.cache.unwrap_or_default().as_str(),
                    d.aio.unwrap_or_default().as_str(),
                    d.format.unwrap_or_default().as_str()
                )
            }),
            boot_s: Vec::new(),
            host_cache_bound: None,
            vmm_resident_bytes: Vec::new(),
        }
    }

    /// QEMU's command line for tenant `t`.
    fn command(&self, c: &RunConfig, t: &Tenant, dir: &Path) -> Command {
        let i = t.index;
        let disk = c.tenant.disk.as_ref();
        let model = disk.and_then(|d| d.model).unwrap_or_default();
        let mut cmd = Command::new(QEMU);
        cmd.args(["-name", &format!("guest={},debug-threads=on", names::tenant_name(i))])
            // IDE is the i440FX's PIIX; AHCI and everything virtio on Q35.
            .args(["-machine", if model == DiskModel::Ide { "pc" } else { "q35" }]);
        match self.accel.name {
            "kvm" => cmd.args(["-accel", "kvm", "-cpu", "host"]),
            _ => cmd.args(["-accel", "tcg,thread=multi"]),
        };
        cmd.args([
            "-smp",
            &c.tenant.vcpus.to_string(),
            "-m",
            &format!("{}M", self.memory >> 20),
        ])
        .args(self.kit.boot_args());
        if c.host.vmm_memory.is_some() || c.host.vm_memory_budget.is_some() {
            // The host cache's bound sits on what QEMU holds after boot:
            // with the guest's RAM all resident then, it cannot grow into
            // the cache's share later.
            cmd.arg("-mem-prealloc");
        }
        let mut append = format!(
            "console=ttyS0 quiet {GUEST_KERNEL_ARGS} ontime.work=lab ontime.run={} ontime.job={} ontime.ip={}/{} ontime.neigh={},{}",
            dir.display(),
            dir.join(format!("t{i}.guest.sh")).display(),
            t.net.addr,
            names::PREFIX_LEN,
            names::building_addr(),
            mac_text(&self.building_mac),
        );
        if disk.is_some() {
            append.push_str(&format!(" ontime.disk={}", names::DISK_MOUNT));
        }
        cmd.args(["-append", &append, "-serial"])
            .arg(format!("file:{}", dir.join(format!("t{i}.console.log")).display()));
        // The second serial port carries the host's stop request (ttyS1).
        cmd.arg("-chardev")
            .arg(format!("pipe,id=ctl,path={}", control_path(dir, i).display()))
            .args(["-serial", "chardev:ctl"]);
        cmd.args([
            "-fsdev",
            "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap",
        ])
        .args(["-device", "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"])
        .arg("-fsdev")
        .arg(format!("local,id=rundir,path={},security_model=none", dir.display()))
        .args(["-device", "virtio-9p-pci,fsdev=rundir,mount_tag=rundir"]);
        let ifup = dir.join(format!("t{i}.ifup"));
        let vhost = self.vm.nic == NicModel::VirtioNet && self.vm.vhost;
        cmd.arg("-netdev").arg(format!(
            "tap,id=n0,ifname={TAP},script={},downscript=no{}",
            ifup.display(),
            if vhost { ",vhost=on" } else { ",vnet_hdr=off" }
        ));
        // No checksum or segmentation offload: frames leave the tap whole,
        // as the relay's packet sockets need them.
        let offload = if self.vm.nic == NicModel::VirtioNet {
            ",csum=off,guest_csum=off,gso=off"
        } else {
            ""
        };
        cmd.arg("-device").arg(format!(
            "{},netdev=n0,mac={}{offload}",
            self.vm.nic.device(),
            mac_text(&t.net.mac)
        ));
        if let (Some(d), Some(image)) = (disk, self.images.get(i)) {
            let cache = d.cache.unwrap_or_default();
            let format = d.format.unwrap_or_default();
            cmd.arg("-drive").arg(format!(
                "file={},if=none,id=d0,format={},cache={},aio={}",
                image.display(),
                format.as_str(),
                cache.as_str(),
                self.disk_aio.as_str()
            ));
            match model {
                DiskModel::VirtioBlk if d.iothread => cmd.args([
                    "-object",
                    "iothread,id=io0",
                    "-device",
                    "virtio-blk-pci,drive=d0,iothread=io0",
                ]),
                DiskModel::VirtioBlk => cmd.args(["-device", "virtio-blk-pci,drive=d0"]),
                DiskModel::Ide | DiskModel::Ahci => cmd.args(["-device", "ide-hd,drive=d0,bus=ide.0"]),
            };
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        cmd
    }

    /// Starts tenant `t`'s guest with its job: the job script and the tap's
    /// ifup script go beside the results. The probe's spec must be written.
    /// `net`: the guest's part of a net run (its flows), else its probe.
    pub fn start(
        &self,
        c: &RunConfig,
        t: &Tenant,
        dir: &Path,
        exe: &Path,
        net: Option<&ontime_guest::job::GuestNet>,
    ) -> Result<(ChildProcess, GuestFiles)> {
        let i = t.index;
        std::fs::write(
            dir.join(format!("t{i}.guest.sh")),
            job_script(c, i, dir, exe, c.tenant.disk.is_some(), net)?,
        )?;
        let ifup = dir.join(format!("t{i}.ifup"));
        std::fs::write(
            &ifup,
            format!(
                "#!/bin/sh\n# QEMU's tap joins the tenant's bridge (written by ontime lab)\n\
                 echo 1 > /proc/sys/net/ipv6/conf/\"$1\"/disable_ipv6\n\
                 ip link set \"$1\" master {BRIDGE} && ip link set \"$1\" up\n"
            ),
        )?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ifup, std::fs::Permissions::from_mode(0o755))?;
        let exit_file = dir.join(format!("t{i}.guest.exit"));
        let _ = std::fs::remove_file(&exit_file);
        let control = GuestControl::make(control_path(dir, i))?;
        let mut cmd = self.command(c, t, dir);
        cmd.stderr(std::fs::File::create(dir.join(format!("t{i}.qemu.err")))?);
        // Its own process group: Ctrl-C at the terminal must not reach QEMU
        // (it would end the guest at once, and its probe's results with
        // it); the runner asks the guest to stop instead.
        let qemu = t.spawn(
            &mut cmd,
            false,
            SpawnOptions {
                own_group: true,
                ..Default::default()
            },
        )?;
        Ok((
            qemu,
            GuestFiles {
                index: i,
                console: dir.join(format!("t{i}.console.log")),
                exit_file,
                started: Instant::now(),
                control,
            },
        ))
    }
}

impl GuestFiles {
    /// Waits until the guest (process `qemu`) reaches its job: its boot
    /// time, or an error naming the console log when it fails or hangs.
    pub fn await_job(&self, qemu: &mut ChildProcess, stop: &std::sync::atomic::AtomicBool) -> Result<f64> {
        let console = self.console.clone();
        let what = format!("tenant {}'s guest", self.index);
        let r = qemu.wait_until(BOOT_LIMIT, || {
            stop.load(std::sync::atomic::Ordering::Relaxed)
                || console_has(&console, "ontime-guest-ready")
                || console_has(&console, "ontime-guest-failed")
        });
        let text = std::fs::read_to_string(&self.console).unwrap_or_default();
        if let Some(why) = text
            .lines()
            .find_map(|l| l.split_once("ontime-guest-failed ").map(|x| x.1))
        {
            bail!(
                "{what} failed before its job: {why} (console: {})",
                self.console.display()
            );
        }
        r.with_context(|| {
            format!(
                "{what} did not reach its job (console: {}; last line: {})",
                self.console.display(),
                text.lines().last().unwrap_or("(empty)")
            )
        })?;
        Ok(self.started.elapsed().as_secs_f64())
    }

    /// Asks the guest's job to stop (its probe writes what it measured, as
    /// a sandbox probe does on SIGTERM); false when the request could not
    /// be delivered.
    pub fn request_stop(&self) -> bool {
        self.control.request_stop()
    }

    /// The job's exit status once QEMU has ended: what the guest wrote, or
    /// an error naming the console log.
    pub fn job_status(&self, oom_kills: Option<u64>) -> Result<i32> {
        let text = std::fs::read_to_string(&self.exit_file).map_err(|_| {
            let why = match oom_kills {
                Some(n) if n > 0 => {
                    "its QEMU was killed by the OOM killer of the tenant's memory cgroup (host.vmm_memory too small for what QEMU allocates after boot?)"
                }
                _ => "no exit status from the guest",
            };
            anyhow::anyhow!(
                "tenant {}'s guest ended without finishing its job: {why} (console: {})",
                self.index,
                self.console.display()
            )
        })?;
        text.trim()
            .parse()
            .with_context(|| format!("{}: not an exit status", self.exit_file.display()))
    }
}

/// Sets the scheduling policy of a QEMU process's threads: vCPU threads
/// (`CPU n/KVM`, `CPU n/TCG`) to `vcpu`, the rest (main loop, I/O threads;
/// vhost workers are the kernel's `vhost-PID`) to `io`. Waits until the
/// vCPU threads exist.
pub fn set_thread_policies(qemu: &mut ChildProcess, vcpus: usize, vcpu: Policy, io: Policy) -> Result<()> {
    let pid = qemu.id();
    let names = |pid: u32| -> Vec<(i32, String)> {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|t| {
                        let tid = t.file_name().to_string_lossy().parse().ok()?;
                        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
                        Some((tid, comm.trim().to_string()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let is_vcpu = ontime_trace::targets::is_vcpu_name;
    qemu.wait_until(Duration::from_secs(30), || {
        names(pid).iter().filter(|(_, c)| is_vcpu(c)).count() >= vcpus
    })
    .context("QEMU's vCPU threads did not appear")?;
    let mut threads = names(pid);
    // The vhost worker is a kernel thread named after its owner.
    let vhost = format!("vhost-{pid}");
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            if std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == vhost) {
                if let Ok(tid) = e.file_name().to_string_lossy().parse() {
                    threads.push((tid, vhost.clone()));
                }
            }
        }
    }
    for (tid, comm) in threads {
        let p = if is_vcpu(&comm) { vcpu } else { io };
        ontime_core::rt::set_policy_of(tid, p).with_context(|| format!("cannot set {comm} (thread {tid}) to {p}"))?;
    }
    Ok(())
}
