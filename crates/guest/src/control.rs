//! A guest's control channel: the host's requests reach the guest's init
//! on its second serial port (ttyS1), through QEMU's pipe chardev and two
//! FIFOs beside the run's files. Today one request: "stop" (Ctrl-C), on
//! which the init sends the probe SIGTERM so it writes what it measured.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Tenant `i`'s control channel: QEMU's pipe chardev opens `PATH.in` (what
/// the guest reads on ttyS1) and `PATH.out`.
pub fn control_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("t{i}.control"))
}

/// The FIFOs of a guest's control channel, removed when dropped.
pub struct GuestControl {
    base: PathBuf,
}

impl GuestControl {
    fn fifos(base: &Path) -> [PathBuf; 2] {
        [".in", ".out"].map(|end| {
            let mut f = base.as_os_str().to_owned();
            f.push(end);
            PathBuf::from(f)
        })
    }

    pub fn make(base: PathBuf) -> Result<GuestControl> {
        for f in Self::fifos(&base) {
            // Left by a run killed before it cleaned up (--resume).
            let _ = std::fs::remove_file(&f);
            let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes())
                .with_context(|| format!("{}: not a path QEMU can open", f.display()))?;
            // SAFETY: a valid NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(std::io::Error::last_os_error())
                    .with_context(|| format!("cannot make the guest's control FIFO {}", f.display()));
            }
        }
        Ok(GuestControl { base })
    }

    /// Writes the stop request; false when nobody reads the FIFO (QEMU is
    /// gone) or it cannot be written.
    pub fn request_stop(&self) -> bool {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let [input, _] = Self::fifos(&self.base);
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(input)
            .and_then(|mut f| f.write_all(b"stop\n"))
            .is_ok()
    }
}

impl Drop for GuestControl {
    fn drop(&mut self) {
        for f in Self::fifos(&self.base) {
            let _ = std::fs::remove_file(f);
        }
    }
}
