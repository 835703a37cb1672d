//! A QEMU guest's virtual disks seen from the host: the image files its
//! command line names (`-drive file=`, `-blockdev` `filename`) that the
//! process holds open, whether it opened them with O_DIRECT (`cache=none`),
//! and the disk under each. The guest's virtual disk is then QEMU's own
//! reads and writes of the image: its thread pool's preadv/pwritev, or
//! its Linux AIO or io_uring requests (`aio=native`, `aio=io_uring`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::io_layout::{disk_under, TenantDisk, VmmAio};

/// Image paths named on a QEMU command line.
pub fn drive_files(args: &[String]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for w in args.windows(2) {
        match w[0].as_str() {
            "-hda" | "-hdb" | "-hdc" | "-hdd" => out.push(PathBuf::from(&w[1])),
            "-drive" => out.extend(option_value(&w[1], &["file"]).map(PathBuf::from)),
            "-blockdev" => {
                if w[1].trim_start().starts_with('{') {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&w[1]) {
                        out.extend(json_filename(&v).map(PathBuf::from));
                    }
                } else {
                    out.extend(option_value(&w[1], &["filename", "file.filename"]).map(PathBuf::from));
                }
            }
            _ => {}
        }
    }
    out
}

/// How a QEMU command line has each image submitted (`aio=` on a
/// `-drive` or `-blockdev`, threads when not given): (image, mode).
pub fn drive_aio(args: &[String]) -> Vec<(PathBuf, VmmAio)> {
    let mut out = Vec::new();
    for w in args.windows(2) {
        let (file, aio) = match w[0].as_str() {
            "-drive" => (option_value(&w[1], &["file"]), option_value(&w[1], &["aio"])),
            "-blockdev" if w[1].trim_start().starts_with('{') => {
                let v: serde_json::Value = serde_json::from_str(&w[1]).unwrap_or_default();
                let aio = v
                    .get("aio")
                    .or_else(|| v.get("file").and_then(|f| f.get("aio")))
                    .and_then(|a| a.as_str())
                    .map(String::from);
                (json_filename(&v), aio)
            }
            "-blockdev" => (
                option_value(&w[1], &["filename", "file.filename"]),
                option_value(&w[1], &["aio", "file.aio"]),
            ),
            _ => continue,
        };
        if let Some(f) = file {
            let mode = aio.as_deref().and_then(VmmAio::parse).unwrap_or_default();
            out.push((PathBuf::from(f), mode));
        }
    }
    out
}

/// `key=value` in QEMU's comma-separated options (",," is a comma).
fn option_value(spec: &str, keys: &[&str]) -> Option<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = spec.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts.iter().find_map(|p| {
        let (k, v) = p.split_once('=')?;
        keys.contains(&k).then(|| v.to_string())
    })
}

/// libvirt's `-blockdev {"driver":"file","filename":...}`, possibly
/// nested under "file".
fn json_filename(v: &serde_json::Value) -> Option<String> {
    v.get("filename")
        .and_then(|f| f.as_str().map(String::from))
        .or_else(|| v.get("file").and_then(json_filename))
}

/// The files QEMU process `pid` holds open: (path, O_DIRECT).
fn open_files(pid: u32) -> Vec<(PathBuf, bool)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let path = std::fs::read_link(e.path()).ok()?;
            let fd = e.file_name();
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy())).ok()?;
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
                .unwrap_or(0);
            Some((path, flags & libc::O_DIRECT as u32 != 0))
        })
        .collect()
}

/// The virtual disks of QEMU process `pid` (group `group`): each image
/// its command line names and it holds open. An image it does not hold
/// (a CD-ROM not inserted, a disk not yet opened) is left out.
pub fn vmm_disks(group: u32, pid: u32) -> Result<Vec<TenantDisk>> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).with_context(|| format!("no process {pid}"))?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let open = open_files(pid);
    let aio = drive_aio(&args);
    let mut disks = Vec::new();
    for file in drive_files(&args) {
        let mode = aio.iter().find(|(f, _)| *f == file).map(|x| x.1).unwrap_or_default();
        let Ok(canonical) = std::fs::canonicalize(&file) else {
            continue;
        };
        let held: Vec<bool> = open.iter().filter(|(p, _)| *p == canonical).map(|x| x.1).collect();
        if held.is_empty() || disks.iter().any(|d: &TenantDisk| d.image == canonical) {
            continue;
        }
        disks.push(TenantDisk {
            aio: mode,
            ..image_disk(group, &canonical, held.iter().all(|&d| d))?
        });
    }
    Ok(disks)
}

/// A VMM's image as a virtual disk of group `group`: its identity as the
/// kernel names it (what the VMM's calls on it carry) and the disk under it.
pub fn image_disk(group: u32, image: &Path, direct: bool) -> Result<TenantDisk> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(image).with_context(|| format!("no image {}", image.display()))?;
    let (physical, partition_start) = match disk_under(image) {
        Some((d, s)) => (Some(d), s),
        None => (None, 0),
    };
    Ok(TenantDisk {
        group,
        image: image.to_path_buf(),
        loop_device: None,
        direct,
        physical,
        partition_start,
        image_file: Some(((libc::major(meta.dev()) << 20) | libc::minor(meta.dev()), meta.ino())),
        aio: VmmAio::Threads,
    })
}

/// The one process of a guest's target group.
pub fn vmm_pid(pids: &[u32], name: &str) -> Result<u32> {
    match pids {
        [p] => Ok(*p),
        _ => bail!("guest {name}: expected one QEMU process, found {}", pids.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn each_drive_says_how_qemu_submits_its_io() {
        let a = args(&[
            "qemu-system-x86_64",
            "-drive",
            "file=/i/a.img,if=none,aio=native,cache=none",
            "-drive",
            "file=/i/b.img,aio=threads",
            "-blockdev",
            r#"{"driver":"file","filename":"/i/c.img","aio":"io_uring"}"#,
            "-blockdev",
            "driver=file,filename=/i/d.img,aio=io_uring",
            "-drive",
            "file=/i/e.img,format=raw",
        ]);
        assert_eq!(
            drive_aio(&a),
            vec![
                (PathBuf::from("/i/a.img"), VmmAio::Native),
                (PathBuf::from("/i/b.img"), VmmAio::Threads),
                (PathBuf::from("/i/c.img"), VmmAio::IoUring),
                (PathBuf::from("/i/d.img"), VmmAio::IoUring),
                (PathBuf::from("/i/e.img"), VmmAio::Threads),
            ]
        );
    }

    #[test]
    fn a_direct_image_may_go_through_the_thread_pool_whatever_its_aio() {
        let exe = std::env::current_exe().unwrap();
        let disk = |aio, direct| TenantDisk {
            aio,
            ..image_disk(0, &exe, direct).unwrap()
        };
        assert!(disk(VmmAio::Threads, false).vmm_thread_pool());
        // QEMU bounces misaligned O_DIRECT requests through its pool.
        assert!(disk(VmmAio::Native, true).vmm_thread_pool());
        assert!(disk(VmmAio::IoUring, true).vmm_thread_pool());
        assert!(!disk(VmmAio::IoUring, false).vmm_thread_pool());
    }

    #[test]
    fn images_are_found_in_drive_blockdev_and_libvirt_json() {
        let a = args(&[
            "qemu-system-x86_64",
            "-serial",
            "file:/run/x/t0.console.log",
            "-drive",
            "file=/var/lib/a,,b.img,if=none,id=d0,format=raw,cache=none",
            "-blockdev",
            "driver=file,node-name=f1,filename=/srv/b.qcow2",
            "-blockdev",
            r#"{"driver":"qcow2","node-name":"q","file":{"driver":"file","filename":"/var/lib/libvirt/images/c.qcow2"}}"#,
            "-hda",
            "/srv/d.img",
        ]);
        assert_eq!(
            drive_files(&a),
            [
                "/var/lib/a,b.img",
                "/srv/b.qcow2",
                "/var/lib/libvirt/images/c.qcow2",
                "/srv/d.img"
            ]
            .map(PathBuf::from)
            .to_vec()
        );
    }
}
