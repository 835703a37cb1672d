//! One lab per host: the lab's network namespaces, links and cgroups have
//! fixed names, so a second `lab run` would collide with the first half-way
//! through. The lock is an flock on a file in /run that holds the owner's
//! pid; the kernel drops it when the owner exits, even by SIGKILL.

use anyhow::{Context, Result};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

const LOCK_FILE: &str = "/run/ontime-lab.lock";

/// Held while a lab exists; released on drop or exit.
pub struct LabLock {
    _file: std::fs::File,
}

impl LabLock {
    /// Takes the host's lab lock, or says who holds it.
    pub fn acquire() -> Result<LabLock> {
        LabLock::acquire_at(Path::new(LOCK_FILE))
    }

    /// Takes the lock, or returns the pid of the live process holding it
    /// (`Err(None)` when the holder left no pid).
    pub fn try_acquire() -> Result<std::result::Result<LabLock, Option<u32>>> {
        LabLock::try_acquire_at(Path::new(LOCK_FILE))
    }

    fn acquire_at(path: &Path) -> Result<LabLock> {
        match LabLock::try_acquire_at(path)? {
            Ok(l) => Ok(l),
            Err(pid) => anyhow::bail!(
                "a lab is already running (pid {}); wait for it to finish or stop it (kill {0}); \
                 `ontime lab clean` then removes what a killed lab left",
                pid.map_or("unknown".into(), |p| p.to_string())
            ),
        }
    }

    fn try_acquire_at(path: &Path) -> Result<std::result::Result<LabLock, Option<u32>>> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("cannot open the lab lock {}", path.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Ok(Err(pid.trim().parse().ok()));
        }
        file.set_len(0)?;
        file.rewind()?;
        write!(file, "{}", std::process::id())?;
        file.flush()?;
        Ok(Ok(LabLock { _file: file }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_told_who_has_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("lock");
        let first = LabLock::acquire_at(&p).unwrap();
        let e = LabLock::acquire_at(&p).err().expect("second lock must fail");
        let msg = format!("{e:#}");
        assert!(msg.contains(&format!("pid {}", std::process::id())), "{msg}");
        // Defect 4: it used to tell the user to run `lab clean`, which
        // destroys the running lab.
        assert!(msg.contains("stop it (kill"), "{msg}");
        drop(first);
        LabLock::acquire_at(&p).unwrap();
    }
}
