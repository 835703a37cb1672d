//! Writing results so that a full disk or an interruption never leaves a
//! half-written file that looks whole, and every failure names the file.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through `path.tmp` + fsync + rename: readers see
/// the old file or the whole new one. On failure the temporary file is
/// removed and the error names `path` (e.g. "No space left on device").
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let r = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Reads a text file the user named (`what` says what it should be): the
/// error names the file and what is wrong with it: missing, a directory,
/// or bytes that are not text (a binary given by mistake).
pub fn read_text(path: &Path, what: &str) -> Result<String> {
    if path.is_dir() {
        anyhow::bail!("{} is a directory, not a {what}", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))?;
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a {what}: byte {} is not UTF-8 text",
            path.display(),
            e.utf8_error().valid_up_to()
        )
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn output_paths_are_checked_not_created() {
        assert!(check_output_path("--result", Path::new("/no/such/dir/x.json")).is_err());
        assert!(check_output_path("--result", Path::new("x.json")).is_ok());
        assert!(check_output_path("--result", Path::new("/tmp")).is_err());
    }
}
