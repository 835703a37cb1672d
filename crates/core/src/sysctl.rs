//! Kernel settings a run changes and puts back: also after ontime was
//! killed. Before a change the original value is saved under
//! [`STATE_DIR`]; the guard puts it back when dropped, and whatever a killed
//! run left there is put back by the next `lab run` or by `lab clean`.
//!
//! The settings: `/proc/sys/kernel/sched_rr_timeslice_ms`, the Linux knob
//! nearest to Xen credit's time slice (document 000, finding 5: 30 ms ->
//! 1 ms kept the interval error under 10 ms at 8 VMs), and
//! `kernel.bpf_stats_enabled` while document 003's programs are measured.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// Where original values wait to be put back (tmpfs: a reboot resets the
/// settings and the record together).
pub const STATE_DIR: &str = "/run/ontime-lab/sysctl";

/// The round-robin time slice of SCHED_RR threads, ms.
pub const RR_TIMESLICE: &str = "/proc/sys/kernel/sched_rr_timeslice_ms";

/// A setting changed for the life of the guard.
#[derive(Debug)]
pub struct SysctlGuard {
    setting: PathBuf,
    original: String,
    saved: PathBuf,
    restored: bool,
}

/// The setting whose original value a file under the state directory
/// holds (the inverse of [`saved_path`]).
fn setting_of(saved_name: &std::ffi::OsStr) -> PathBuf {
    PathBuf::from(format!("/{}", saved_name.to_string_lossy().replace('%', "/")))
}

/// The file under `state_dir` that holds `setting`'s original value.
fn saved_path(state_dir: &Path, setting: &Path) -> PathBuf {
    let name = setting.to_string_lossy().trim_start_matches('/').replace('/', "%");
    state_dir.join(name)
}

impl SysctlGuard {
    /// Sets `setting` to `value`, saving the original under [`STATE_DIR`].
    pub fn set(setting: &str, value: &str) -> Result<SysctlGuard> {
        Self::set_in(Path::new(STATE_DIR), Path::new(setting), value)
    }

    /// [`SysctlGuard::set`] with the state kept in `state_dir` (tests).
    pub fn set_in(state_dir: &Path, setting: &Path, value: &str) -> Result<SysctlGuard> {
        let saved = saved_path(state_dir, setting);
        // A value left by a killed run is the true original: keep it.
        let original = match std::fs::read_to_string(&saved) {
            Ok(v) => v,
            Err(_) => {
                let v =
                    std::fs::read_to_string(setting).with_context(|| format!("cannot read {}", setting.display()))?;
                std::fs::create_dir_all(state_dir).with_context(|| format!("cannot create {}", state_dir.display()))?;
                crate::fsio::write_atomic(&saved, v.as_bytes())?;
                v
            }
        };
        std::fs::write(setting, value).with_context(|| {
            format!(
                "cannot set {} to {value} (needs root; {} keeps the original)",
                setting.display(),
                saved.display()
            )
        })?;
        Ok(SysctlGuard {
            setting: setting.to_path_buf(),
            original,
            saved,
            restored: false,
        })
    }

    /// The value in force now, as the kernel reports it.
    pub fn current(&self) -> Result<String> {
        Ok(std::fs::read_to_string(&self.setting)
            .with_context(|| format!("cannot read {}", self.setting.display()))?
            .trim()
            .to_string())
    }

    /// Puts the original back and forgets it.
    pub fn restore(&mut self) -> Result<()> {
        if self.restored {
            return Ok(());
        }
        std::fs::write(&self.setting, self.original.trim())
            .with_context(|| format!("cannot restore {}", self.setting.display()))?;
        self.restored = true;
        let _ = std::fs::remove_file(&self.saved);
        Ok(())
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            crate::errln!("ontime: {e:#}");
        }
    }
}

/// The settings a killed run left changed ("path = original"), to report.
pub fn leftovers() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(STATE_DIR) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| {
            let v = std::fs::read_to_string(e.path()).unwrap_or_default();
            format!("{} = {}", setting_of(&e.file_name()).display(), v.trim())
        })
        .collect()
}

/// Puts back every setting a killed run left changed; returns what it
/// restored ("path = value").
pub fn restore_leftovers() -> Result<Vec<String>> {
    restore_leftovers_in(Path::new(STATE_DIR))
}

/// [`restore_leftovers`] with the state in `state_dir` (tests).
pub fn restore_leftovers_in(state_dir: &Path) -> Result<Vec<String>> {
    let mut done = Vec::new();
    let Ok(entries) = std::fs::read_dir(state_dir) else {
        return Ok(done);
    };
    for e in entries.flatten() {
        let setting = setting_of(&e.file_name());
        let value = std::fs::read_to_string(e.path()).with_context(|| format!("cannot read {}", e.path().display()))?;
        std::fs::write(&setting, value.trim())
            .with_context(|| format!("cannot restore {} from {}", setting.display(), e.path().display()))?;
        std::fs::remove_file(e.path()).with_context(|| format!("cannot remove {}", e.path().display()))?;
        done.push(format!("{} = {}", setting.display(), value.trim()));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_put_back_when_the_guard_goes() {
        let d = tempfile::tempdir().unwrap();
        let (state, setting) = (d.path().join("state"), d.path().join("knob"));
        std::fs::write(&setting, "100\n").unwrap();
        {
            let g = SysctlGuard::set_in(&state, &setting, "1").unwrap();
            assert_eq!(g.current().unwrap(), "1");
            assert!(
                saved_path(&state, &setting).exists(),
                "the original is on disk while changed"
            );
        }
        assert_eq!(std::fs::read_to_string(&setting).unwrap(), "100");
        assert!(!saved_path(&state, &setting).exists());
    }

    /// A killed run never drops its guard: the next run (or `lab clean`)
    /// finds the saved original and puts it back, and a second change in
    /// between keeps the true original rather than the run's value.
    #[test]
    fn a_setting_left_by_a_killed_run_is_put_back_later() {
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        let setting = d.path().join("knob");
        std::fs::write(&setting, "100").unwrap();
        std::mem::forget(SysctlGuard::set_in(&state, &setting, "30").unwrap());
        assert_eq!(std::fs::read_to_string(&setting).unwrap(), "30");
        // A second run before any clean-up: the original stays 100.
        std::mem::forget(SysctlGuard::set_in(&state, &setting, "1").unwrap());
        let done = restore_leftovers_in(&state).unwrap();
        assert_eq!(done, vec![format!("{} = 100", setting.display())]);
        assert_eq!(std::fs::read_to_string(&setting).unwrap(), "100");
        assert!(restore_leftovers_in(&state).unwrap().is_empty());
    }
}
