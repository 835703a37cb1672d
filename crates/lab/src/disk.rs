//! A tenant's virtual disk (document 004): an image file on the host's
//! file system, attached through a loop device (buffered through the host
//! page cache by default, or `direct`), formatted ext4 and mounted at
//! `names::DISK_MOUNT` in the tenant's own mount namespace. The tenant's
//! page cache (its memory cgroup) is the "guest cache"; the image file's
//! page cache on the host is the "host cache"; the device under the image
//! is the physical disk.
//!
//! Made through the lab's undo stack (all or nothing) and found again by
//! `lab clean` after a kill ([`leftovers`], [`remove_leftovers`]).
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use ontime_core::names;

use crate::undo::Undo;

/// What a tenant's disk is.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskSpec {
    /// Image size, bytes (sparse on the host).
    pub size: u64,
    /// Loop device in direct I/O: the host page cache is bypassed.
    pub direct: bool,
    /// A swap file of this size on the disk, switched on (document 004's
    /// guest swap). Linux swap is host-wide: every tenant's cgroup limit
    /// decides how much it may swap, not which file it swaps to.
    pub swap: Option<u64>,
}

/// Where tenant `index`'s swap file lives, inside its mount namespace. The
/// name carries the index: swap is listed host-wide (/proc/swaps) by path,
/// and mkswap refuses a path that is already swapping somewhere.
pub fn swap_file(index: usize) -> PathBuf {
    Path::new(names::DISK_MOUNT).join(format!("swapfile-t{index}"))
}

/// A tenant's disk, attached and mounted.
#[derive(Clone, Debug)]
pub struct Disk {
    pub image: PathBuf,
    /// The loop device (`/dev/loopN`): the virtual disk's block layer.
    pub device: PathBuf,
    /// The pinned mount namespace processes of the tenant enter.
    pub mntns: PathBuf,
    /// Where the disk is mounted inside that namespace.
    pub mount_point: PathBuf,
    pub direct: bool,
}

impl Disk {
    /// The loop device's name in /sys/block (`loopN`).
    pub fn block_name(&self) -> String {
        self.device
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

fn run(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {what} (util-linux and e2fsprogs: scripts/setup.sh installs them)"))?;
    if !out.status.success() {
        bail!("{what} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The directory holding pinned mount namespaces must be a private mount
/// of its own, or the kernel refuses to bind a namespace file there.
fn private_mntns_dir() -> Result<()> {
    let dir = Path::new(names::MNTNS_DIR);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(4) == Some(names::MNTNS_DIR));
    if !mounted {
        run(
            "mount --bind",
            Command::new("mount").args(["--bind", names::MNTNS_DIR, names::MNTNS_DIR]),
        )?;
    }
    run(
        "mount --make-private",
        Command::new("mount").args(["--make-private", names::MNTNS_DIR]),
    )?;
    Ok(())
}

/// Unmounts the namespace directory's own bind mount once no namespace
/// is pinned there (the lab leaves no mount behind).
fn release_mntns_dir() {
    let empty = std::fs::read_dir(names::MNTNS_DIR)
        .map(|mut d| d.next().is_none())
        .unwrap_or(false);
    if empty {
        let _ = Command::new("umount").arg(names::MNTNS_DIR).output();
    }
}

/// Makes tenant `index`'s disk; each step's undo goes on `undo`.
pub fn create(undo: &mut Undo, index: usize, spec: &DiskSpec) -> Result<Disk> {
    if spec.size < 16 << 20 {
        bail!("a tenant disk needs at least 16 MiB (ext4 and its journal)");
    }
    let image = PathBuf::from(names::tenant_disk_image(index));
    std::fs::create_dir_all(names::DISK_DIR).with_context(|| format!("cannot create {}", names::DISK_DIR))?;
    let f = std::fs::File::create(&image).with_context(|| format!("cannot create {}", image.display()))?;
    f.set_len(spec.size)
        .with_context(|| format!("cannot size {} to {} bytes", image.display(), spec.size))?;
    drop(f);
    let im = image.clone();
    undo.push(format!("remove {}", image.display()), move || {
        let _ = std::fs::remove_file(&im);
    });
    let direct = if spec.direct {
        "--direct-io=on"
    } else {
        "--direct-io=off"
    };
    let device = PathBuf::from(run(
        "losetup",
        Command::new("losetup").args(["--find", "--show", direct]).arg(&image),
    )?);
    let dev = device.clone();
    undo.push(format!("detach {}", device.display()), move || {
        let _ = Command::new("losetup").arg("-d").arg(&dev).output();
    });
    run(
        "mkfs.ext4",
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .arg(&device),
    )?;
    private_mntns_dir()?;
    let mntns = PathBuf::from(names::tenant_mntns(index));
    std::fs::write(&mntns, b"").with_context(|| format!("cannot create {}", mntns.display()))?;
    run(
        "unshare --mount",
        Command::new("unshare")
            .arg(format!("--mount={}", mntns.display()))
            .args(["--propagation", "private", "true"]),
    )?;
    let ns = mntns.clone();
    undo.push(format!("release mount namespace {}", mntns.display()), move || {
        // The namespace (and the disk's mount in it) goes with its last
        // reference: this pin, once the tenant's processes are gone.
        let _ = Command::new("umount").arg(&ns).output();
        let _ = std::fs::remove_file(&ns);
        release_mntns_dir();
    });
    std::fs::create_dir_all(names::DISK_MOUNT).with_context(|| format!("cannot create {}", names::DISK_MOUNT))?;
    run(
        "mount (in the tenant's namespace)",
        Command::new("nsenter")
            .arg(format!("--mount={}", mntns.display()))
            .arg("mount")
            .arg(&device)
            .arg(names::DISK_MOUNT),
    )?;
    if let Some(bytes) = spec.swap.filter(|&b| b > 0) {
        let sf = swap_file(index);
        let script = format!(
            "fallocate -l {bytes} {f} && chmod 600 {f} && mkswap -q {f} && swapon {f}",
            f = sf.display()
        );
        run(
            "swap file (in the tenant's namespace)",
            Command::new("nsenter")
                .arg(format!("--mount={}", mntns.display()))
                .args(["sh", "-c", &script]),
        )?;
        let ns = mntns.clone();
        undo.push(format!("swapoff {} (tenant {index})", sf.display()), move || {
            let _ = Command::new("nsenter")
                .arg(format!("--mount={}", ns.display()))
                .arg("swapoff")
                .arg(swap_file(index))
                .output();
        });
    }
    Ok(Disk {
        image,
        device,
        mntns,
        mount_point: PathBuf::from(names::DISK_MOUNT),
        direct: spec.direct,
    })
}

/// What of the lab's disks is on this host: loop devices backed by its
/// images, pinned mount namespaces, image files.
#[derive(Debug, Default, PartialEq, serde::Serialize)]
pub struct DiskLeftovers {
    pub loop_devices: Vec<String>,
    pub mount_namespaces: Vec<String>,
    pub images: Vec<String>,
}

pub fn leftovers() -> DiskLeftovers {
    let list = |dir: &str| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.path().display().to_string())
                    .filter(|p| p.contains(&format!("/{}-", names::PREFIX)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = DiskLeftovers {
        loop_devices: ontime_trace::io::loop_devices()
            .into_iter()
            .filter(|l| l.backing.starts_with(names::DISK_DIR))
            .map(|l| format!("/dev/{}", l.device.name))
            .collect(),
        mount_namespaces: list(names::MNTNS_DIR),
        images: list(names::DISK_DIR),
    };
    out.loop_devices.sort();
    out.mount_namespaces.sort();
    out.images.sort();
    out
}

/// Removes what [`leftovers`] found (after the tenants' processes are
/// killed): namespaces first (their mounts go with them), then loop
/// devices, then images.
pub fn remove_leftovers(l: &DiskLeftovers) {
    for ns in &l.mount_namespaces {
        // A swap file still on holds the disk's file system (and so the
        // loop device) after the namespace goes.
        let index = ns.rsplit("-t").next().and_then(|i| i.parse().ok()).unwrap_or(0);
        let _ = Command::new("nsenter")
            .arg(format!("--mount={ns}"))
            .arg("swapoff")
            .arg(swap_file(index))
            .output();
        let _ = Command::new("umount").arg(ns).output();
        let _ = std::fs::remove_file(ns);
    }
    release_mntns_dir();
    for dev in &l.loop_devices {
        let _ = Command::new("losetup").arg("-d").arg(dev).output();
    }
    for im in &l.images {
        let _ = std::fs::remove_file(im);
    }
}
