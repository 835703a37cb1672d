//! The guest kit (scripts/guest-kit.sh: Debian's kernel and a busybox
//! initramfs), QEMU itself, and the accelerator: KVM only when a probe
//! guest actually boots with it within [`KVM_BOOT_LIMIT`] (a `/dev/kvm`
//! whose guests hang, as under nested virtualisation without support, is
//! not enough), else TCG.

use anyhow::{bail, Context, Result};
use ontime_core::proc::{ChildProcess, SpawnOptions};
use ontime_scenario::vm::AccelChoice;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The QEMU this code runs.
pub const QEMU: &str = "qemu-system-x86_64";
/// How long a KVM probe guest may take to print its ready line.
pub const KVM_BOOT_LIMIT: Duration = Duration::from_secs(5);
/// The kit's version this code boots (scripts/guest-kit.sh's `version`).
pub const KIT_VERSION: u32 = 4;

/// The guest kit's kernel and initramfs.
#[derive(Clone, Debug)]
pub struct Kit {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

impl Kit {
    /// A headless machine with only the devices asked for, that ends
    /// when its guest powers off, booting the kit.
    pub fn boot_args(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = [
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
            "-kernel",
        ]
        .iter()
        .map(Into::into)
        .collect();
        a.push(self.kernel.clone().into());
        a.push("-initrd".into());
        a.push(self.initrd.clone().into());
        a
    }

    /// `$ONTIME_GUEST_KIT` or /var/cache/ontime/guest-kit, at the version
    /// this code needs.
    pub fn find() -> Result<Kit> {
        let dir = std::env::var_os("ONTIME_GUEST_KIT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/cache/ontime/guest-kit"));
        let version: Option<u32> = std::fs::read_to_string(dir.join("VERSION"))
            .ok()
            .and_then(|v| v.trim().parse().ok());
        let kit = Kit {
            kernel: dir.join("vmlinuz"),
            initrd: dir.join("initrd.gz"),
        };
        if !kit.kernel.exists() || !kit.initrd.exists() || version.is_none_or(|v| v < KIT_VERSION) {
            bail!(
                "QEMU tenants need the guest kit (version {KIT_VERSION}) in {}: run scripts/guest-kit.sh (scripts/setup.sh does)",
                dir.display()
            );
        }
        Ok(kit)
    }
}

/// QEMU's version line, or why there is none.
pub fn qemu_version() -> Result<String> {
    let out = Command::new(QEMU).arg("--version").output().with_context(|| {
        format!("QEMU tenants need {QEMU}: run scripts/setup.sh or apt-get install qemu-system-x86")
    })?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string())
}

/// Whether vhost-net can serve a virtio NIC here (the device opens).
pub fn vhost_available() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/vhost-net")
        .is_ok()
}

/// The accelerator a run's guests use, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accel {
    /// "kvm" or "tcg".
    pub name: &'static str,
    pub why: String,
}

/// Chooses the accelerator by trying it: KVM only when a probe guest boots
/// with it. The answer for `auto` is kept for the process (a sweep asks
/// once).
pub fn choose_accel(choice: AccelChoice, kit: &Kit) -> Result<Accel> {
    static AUTO: std::sync::Mutex<Option<Accel>> = std::sync::Mutex::new(None);
    if choice == AccelChoice::Tcg {
        return Ok(Accel {
            name: "tcg",
            why: "host.accel = \"tcg\"".into(),
        });
    }
    if choice == AccelChoice::Auto {
        if let Some(a) = AUTO.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Ok(a);
        }
    }
    let tried = try_kvm(kit);
    let accel = match (choice, tried) {
        (_, Ok(secs)) => Accel {
            name: "kvm",
            why: format!("kvm: a probe guest booted in {secs:.1} s"),
        },
        (AccelChoice::Kvm, Err(why)) => bail!("host.accel = \"kvm\" but {why}: use \"auto\" or \"tcg\""),
        (_, Err(why)) => Accel {
            name: "tcg",
            why: format!("kvm: {why}: tcg"),
        },
    };
    *AUTO.lock().unwrap_or_else(|e| e.into_inner()) = Some(accel.clone());
    Ok(accel)
}

/// Boots the kit idle under KVM; Ok(seconds to its ready line) or why not.
fn try_kvm(kit: &Kit) -> std::result::Result<f64, String> {
    if !Path::new("/dev/kvm").exists() {
        return Err("no /dev/kvm".into());
    }
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory: {e}"))?;
    let console = dir.path().join("console.log");
    let mut cmd = Command::new(QEMU);
    cmd.args([
        "-name",
        "guest=ontime-kvm-probe",
        "-accel",
        "kvm",
        "-cpu",
        "host",
        "-m",
        "128",
    ])
    .args(kit.boot_args())
    .args([
        "-append",
        "console=ttyS0 quiet no_timer_check panic=1 ontime.work=idle",
        "-serial",
    ])
    .arg(format!("file:{}", console.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child =
        ChildProcess::spawn("the KVM probe guest", &mut cmd, SpawnOptions::default()).map_err(|e| format!("{e:#}"))?;
    let t0 = Instant::now();
    let ready = child.wait_until(KVM_BOOT_LIMIT, || console_has(&console, "ontime-guest-ready"));
    child.stop();
    match ready {
        Ok(()) => Ok(t0.elapsed().as_secs_f64()),
        Err(e) if e.to_string().contains("exited") => {
            // QEMU's own first complaint, e.g. "failed to set MSR 0x10a".
            let text = format!("{e:#}");
            let why = text
                .lines()
                .find_map(|l| l.split_once("error: ").map(|x| x.1.trim().to_string()))
                .unwrap_or_else(|| text.lines().next().unwrap_or("").to_string());
            Err(format!("/dev/kvm present, QEMU failed with it ({why})"))
        }
        Err(_) => Err(format!(
            "/dev/kvm present, guest did not boot in {} s",
            KVM_BOOT_LIMIT.as_secs()
        )),
    }
}

/// Whether the console log holds `line`.
pub fn console_has(console: &Path, line: &str) -> bool {
    std::fs::read_to_string(console).is_ok_and(|t| t.contains(line))
}
