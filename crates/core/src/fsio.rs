//! Writing results so that a full disk or an interruption never leaves a
//! half-written file that looks whole, and every failure names the file;
//! and the one rule for opening input files: regular files only (a FIFO,
//! a device or /dev/zero behind a symlink is refused, never read), opened
//! without blocking, and no larger than a cap the error names.

use anyhow::{Context, Result};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through `path.tmp` + fsync + rename: readers see
/// the old file or the whole new one. On failure the temporary file is
/// removed and the error names `path` (e.g. "No space left on device").
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut w = AtomicWriter::create(path)?;
    // A failed write drops `w`, which removes the temporary file.
    w.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.commit()
}

/// A file written as a stream and put in place whole, for outputs too
/// large to hold in memory (`sim tasks --jobs`): bytes go to `path.tmp`,
/// [`AtomicWriter::commit`] syncs it and renames it to `path`. Dropped
/// without a commit (a write failed, the run was abandoned) it removes the
/// temporary file, so a full disk never leaves a partial file under the
/// real name; every error names `path`.
pub struct AtomicWriter {
    path: PathBuf,
    tmp: PathBuf,
    /// None once committed.
    out: Option<std::io::BufWriter<std::fs::File>>,
}

impl AtomicWriter {
    pub fn create(path: &Path) -> Result<AtomicWriter> {
        let tmp = tmp_path(path);
        let f = std::fs::File::create(&tmp).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(AtomicWriter {
            path: path.to_path_buf(),
            tmp,
            out: Some(std::io::BufWriter::new(f)),
        })
    }

    /// The file it writes (not the temporary one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes, syncs and renames the file into place; on failure the
    /// temporary file is removed and the error names `path`.
    pub fn commit(mut self) -> Result<()> {
        let Some(out) = self.out.take() else {
            return Ok(());
        };
        let r = (|| -> std::io::Result<()> {
            let f = out.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(&self.tmp, &self.path)
        })();
        if let Err(e) = r {
            let _ = std::fs::remove_file(&self.tmp);
            return Err(e).with_context(|| format!("cannot write {}", self.path.display()));
        }
        Ok(())
    }
}

impl Write for AtomicWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.out.as_mut() {
            Some(o) => o.write(buf),
            None => Err(std::io::Error::other("written after its commit")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.out.as_mut() {
            Some(o) => o.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicWriter {
    fn drop(&mut self) {
        // Not committed: the partial file must not stay behind.
        if self.out.take().is_some() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// The largest text input (a scenario, a run.json, a calibration, an
/// agent's TOML) read whole: far above any file ontime writes (a 200-run
/// sweep's run.json is under 1 MiB), far below what would strain memory.
pub const MAX_TEXT_BYTES: u64 = 64 << 20;

/// Opens an input file the user or a peer named (`what` says what it
/// should be) under the one rule for inputs: it must be a regular file (a
/// symlink is followed, but a FIFO, socket or device at its end is
/// refused: opening with O_NONBLOCK keeps a FIFO from blocking the open)
/// of at most `cap` bytes. Every refusal is [`crate::BadInput`] naming the
/// file and, for size, the cap. Returns the file and its size.
pub fn open_input(path: &Path, what: &str, cap: u64) -> Result<(std::fs::File, u64)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| crate::bad_input(format!("cannot read {what} {}: {e}", path.display())))?;
    let meta = f
        .metadata()
        .map_err(|e| crate::bad_input(format!("cannot read {what} {}: {e}", path.display())))?;
    if meta.is_dir() {
        return Err(crate::bad_input(format!(
            "{} is a directory, not a {what}",
            path.display()
        )));
    }
    if !meta.is_file() {
        return Err(crate::bad_input(format!(
            "{} is not a regular file (a FIFO, socket or device), not a {what}: give a file",
            path.display()
        )));
    }
    if meta.len() > cap {
        return Err(crate::bad_input(format!(
            "{} is {} bytes, more than a {what} may be ({} bytes)",
            path.display(),
            meta.len(),
            cap
        )));
    }
    Ok((f, meta.len()))
}

/// Reads a whole input file under [`open_input`]'s rule. A file that grows
/// past `cap` while it is read is refused too (the read stops at the cap).
pub fn read_input(path: &Path, what: &str, cap: u64) -> Result<Vec<u8>> {
    let (f, len) = open_input(path, what, cap)?;
    let mut bytes = Vec::with_capacity(len as usize);
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| crate::bad_input(format!("cannot read {what} {}: {e}", path.display())))?;
    if bytes.len() as u64 > cap {
        return Err(crate::bad_input(format!(
            "{} grew past {cap} bytes while it was read, more than a {what} may be",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Copies an input file (`what` names it) to `dest` under [`open_input`]'s
/// rule: a FIFO or device in an input directory neither hangs the copy
/// nor fills `dest`. A failure to write names `dest`.
pub fn copy_input(src: &Path, what: &str, cap: u64, dest: &Path) -> Result<()> {
    let (f, _) = open_input(src, what, cap)?;
    let mut out = std::fs::File::create(dest).with_context(|| format!("cannot write {}", dest.display()))?;
    std::io::copy(&mut f.take(cap), &mut out)
        .with_context(|| format!("copying {} to {}", src.display(), dest.display()))?;
    Ok(())
}

/// Reads a text file the user named (`what` says what it should be) under
/// the input rule with [`MAX_TEXT_BYTES`]: the error names the file and
/// what is wrong with it: missing, a directory, not a regular file, too
/// large, or bytes that are not text (a binary given by mistake).
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    read_text_capped(path, what, MAX_TEXT_BYTES)
}

/// [`read_text`] with its own cap (a password file, a small key).
pub fn read_text_capped(path: &Path, what: &str, cap: u64) -> Result<String> {
    let bytes = read_input(path, what, cap)?;
    String::from_utf8(bytes).map_err(|e| {
        crate::bad_input(format!(
            "{} is not a {what}: byte {} is not UTF-8 text",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Checks, before a run starts, that `path` can be written: its directory
/// exists and is a directory. `flag` names the option in the error. Nothing
/// is created: a typo in a directory name is the user's to fix, not ours to
/// build.
pub fn check_output_path(flag: &str, path: &Path) -> Result<(), String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {}: directory {} does not exist (create it first)",
            path.display(),
            dir.display()
        ));
    }
    if path.is_dir() {
        return Err(format!("{flag} {}: is a directory; give a file name", path.display()));
    }
    Ok(())
}

/// Checks, before any work, that the directory an output flag names can
/// take the files written into it (figures, a report): an existing
/// directory that can be written, or a path whose nearest existing
/// ancestor is one (the verb creates the rest). `flag` names the option in
/// the error. A file in the way (`--plots /etc/passwd`) or a read-only
/// place is the user's to fix, said before a recording is read or a run
/// made.
pub fn check_output_dir(flag: &str, dir: &Path) -> Result<(), String> {
    let mut at = dir;
    loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => {
                if !writable(at) {
                    return Err(format!(
                        "{flag} {}: {} cannot be written (read-only, or not yours): give another directory",
                        dir.display(),
                        at.display()
                    ));
                }
                return Ok(());
            }
            Ok(_) => {
                return Err(format!(
                    "{flag} {}: {} is a file, not a directory: give a directory",
                    dir.display(),
                    at.display()
                ))
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) => {}
            Err(e) => return Err(format!("{flag} {}: {e}", dir.display())),
        }
        at = match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ if at != Path::new(".") => Path::new("."),
            _ => return Err(format!("{flag} {}: the working directory is gone", dir.display())),
        };
    }
}

/// True when this process may create files in `dir` (write and search
/// permission; false on a read-only file system, also for root).
fn writable(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path; access(2) only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bad_input(e: &anyhow::Error) -> bool {
        e.downcast_ref::<crate::BadInput>().is_some()
    }

    #[test]
    fn inputs_are_regular_files_under_their_cap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("run.json");
        std::fs::write(&p, b"{}").unwrap();
        assert_eq!(read_text(&p, "run.json").unwrap(), "{}");
        let e = read_input(&p, "run.json", 1).unwrap_err();
        assert!(
            is_bad_input(&e) && e.to_string().contains("more than a run.json may be (1 bytes)"),
            "{e}"
        );
        // A FIFO would block a plain open for ever; here it is refused at once.
        let fifo = d.path().join("fifo.json");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_text(&fifo, "run.json").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("not a regular file"), "{e}");
        // /dev/zero behind a symlink is a device, not a file to read to the end.
        let link = d.path().join("zero.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_text(&link, "run.json").unwrap_err();
        assert!(is_bad_input(&e) && e.to_string().contains("not a regular file"), "{e}");
        let e = read_text(d.path(), "run.json").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let e = read_text(&d.path().join("missing"), "run.json").unwrap_err();
        assert!(is_bad_input(&e), "{e}");
    }

    #[test]
    fn atomic_write_replaces_whole_and_leaves_no_tmp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!d.path().join("r.json.tmp").exists());
        let e = write_atomic(&d.path().join("no/such/r.json"), b"x").unwrap_err();
        assert!(format!("{e:#}").contains("no/such/r.json"), "{e:#}");
    }

    #[test]
    fn a_streamed_file_is_in_place_whole_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("jobs.csv");
        let mut w = AtomicWriter::create(&p).unwrap();
        writeln!(w, "task,release_ns").unwrap();
        assert!(!p.exists(), "not under its name before the commit");
        w.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "task,release_ns\n");
        assert!(!d.path().join("jobs.csv.tmp").exists());
        // Abandoned (a write failed on the way): nothing is left, and the
        // earlier whole file stays.
        let mut w = AtomicWriter::create(&p).unwrap();
        writeln!(w, "half").unwrap();
        drop(w);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "task,release_ns\n");
        assert!(!d.path().join("jobs.csv.tmp").exists());
        let e = AtomicWriter::create(&d.path().join("no/such/jobs.csv")).err().unwrap();
        assert!(format!("{e:#}").contains("no/such/jobs.csv"), "{e:#}");
    }

    #[test]
    fn output_paths_are_checked_not_created() {
        assert!(check_output_path("--result", Path::new("/no/such/dir/x.json")).is_err());
        assert!(check_output_path("--result", Path::new("x.json")).is_ok());
        assert!(check_output_path("--result", Path::new("/tmp")).is_err());
    }

    #[test]
    fn output_dirs_are_directories_that_can_be_written() {
        let d = tempfile::tempdir().unwrap();
        assert!(check_output_dir("--plots", d.path()).is_ok());
        assert!(check_output_dir("--plots", &d.path().join("new/deeper")).is_ok());
        let file = d.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let e = check_output_dir("--plots", &file).unwrap_err();
        assert!(e.contains("--plots") && e.contains("is a file"), "{e}");
        let e = check_output_dir("--plots", &file.join("below")).unwrap_err();
        assert!(e.contains("is a file"), "{e}");
        // A directory without write permission (root may write anywhere
        // but a read-only file system, so this part needs a user).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            use std::os::unix::fs::PermissionsExt;
            let ro = d.path().join("ro");
            std::fs::create_dir(&ro).unwrap();
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o500)).unwrap();
            let e = check_output_dir("--plots", &ro.join("figures")).unwrap_err();
            assert!(e.contains("cannot be written"), "{e}");
            std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
}
