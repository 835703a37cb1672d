//! Lab results directories as one committed file (`.tar.xz`): the runs
//! behind a published table, so anyone can regenerate the table from the
//! repository (`ontime lab report PACK --markdown`, `ontime sim validate`).
//!
//! A pack keeps what the report and the simulator read of a run (`run.json`,
//! every tenant's result, the JSON the run's recorders wrote) and of each
//! histogram log only its header (its start time places simulated tenants
//! as the measured ones started); recordings (`.otrec`) and the logs'
//! per-interval histograms stay out: they would be most of the size.
//! Unpacking takes regular files and directories only, each under the
//! target directory, within a size cap.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, Read};
use std::path::{Component, Path, PathBuf};

use crate::results::run_dirs;
use ontime_core::BadInput;

/// At most this many bytes unpacked from one pack, tar headers and long
/// names included (the committed packs unpack to under 10 MB each): a
/// pack is input, and a crafted one must not fill the disk or memory.
pub const MAX_UNPACKED_BYTES: u64 = 256 << 20;

/// At most this many members (the committed packs have under 1 400).
pub const MAX_MEMBERS: usize = 100_000;

/// The xz decoder's memory limit: presets up to 9 need 65 MiB.
const XZ_MEMORY_LIMIT: u64 = 128 << 20;

/// The results directories of a pack, unpacked into a temporary directory
/// that is removed when this is dropped.
pub struct Unpacked {
    /// Held so the directory lives as long as this does.
    _dir: tempfile::TempDir,
    /// One results directory per scenario the pack holds, in name order.
    pub results: Vec<PathBuf>,
}

/// True when `path` names a pack rather than a results directory.
pub fn is_pack(path: &Path) -> bool {
    path.is_file() && path.to_string_lossy().ends_with(".tar.xz")
}

/// Files of a run directory a pack keeps whole.
fn kept_whole(name: &str) -> bool {
    name.ends_with(".json") && !name.ends_with(".probe.json")
}

/// Writes the measured runs of `results` (one results directory each;
/// simulated runs are left out: they are recomputed) into `out`, each under
/// its directory's name. Returns the number of runs packed.
pub fn write(out: &Path, results: &[PathBuf]) -> Result<usize> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let tmp =
        tempfile::NamedTempFile::new_in(parent).with_context(|| format!("cannot write into {}", parent.display()))?;
    let file = tmp.reopen()?;
    let mut tar = tar::Builder::new(liblzma::write::XzEncoder::new(file, 6));
    tar.mode(tar::HeaderMode::Deterministic);
    let mut runs = 0;
    let result = (|| -> Result<()> {
        for dir in results {
            let name = dir_name(dir)?;
            for f in ["scenario.toml", "plan.json"] {
                let p = dir.join(f);
                if p.is_file() {
                    tar.append_path_with_name(&p, format!("{name}/{f}"))?;
                }
            }
            for run in run_dirs(dir)? {
                let record = crate::results::read_record(&run)?;
                if record.simulated.is_some() {
                    continue;
                }
                let base = format!("{name}/runs/{}", dir_name(&run)?);
                let mut files: Vec<_> = std::fs::read_dir(&run)?.flatten().map(|e| e.path()).collect();
                files.sort();
                for f in files {
                    let fname = f
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    if !f.is_file() {
                        continue;
                    }
                    if fname.ends_with(".hlog") {
                        let head = hlog_header(&f)?;
                        let mut h = tar::Header::new_gnu();
                        h.set_size(head.len() as u64);
                        h.set_mode(0o644);
                        h.set_cksum();
                        tar.append_data(&mut h, format!("{base}/{fname}"), head.as_slice())?;
                    } else if kept_whole(&fname) {
                        tar.append_path_with_name(&f, format!("{base}/{fname}"))?;
                    }
                }
                runs += 1;
            }
        }
        tar.into_inner()?.finish()?;
        Ok(())
    })();
    result?;
    tmp.persist(out)
        .with_context(|| format!("cannot write {}", out.display()))?;
    Ok(runs)
}

fn dir_name(dir: &Path) -> Result<String> {
    let canonical = dir
        .canonicalize()
        .with_context(|| format!("cannot read {}", dir.display()))?;
    match canonical.file_name() {
        Some(n) => Ok(n.to_string_lossy().into_owned()),
        None => bail!("{} has no name to pack it under", dir.display()),
    }
}

/// A histogram log's leading comment lines (its start time and legend),
/// read under the input rule: a regular file, and no more than
/// [`ontime_core::hlog::MAX_HLOG_LINE_BYTES`] of comments (a log's are
/// a few lines; the intervals after them are not read).
fn hlog_header(path: &Path) -> Result<Vec<u8>> {
    use ontime_core::hlog::{MAX_HLOG_BYTES, MAX_HLOG_LINE_BYTES};
    let (f, _) = ontime_core::fsio::open_input(path, "histogram log", MAX_HLOG_BYTES)?;
    let mut reader = std::io::BufReader::new(f);
    let mut head = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        (&mut reader)
            .take(MAX_HLOG_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if !line.starts_with(b"#") {
            return Ok(head);
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        head.extend_from_slice(&line);
        head.push(b'\n');
        if head.len() as u64 > MAX_HLOG_LINE_BYTES {
            return Err(BadInput(format!(
                "{}: more than {MAX_HLOG_LINE_BYTES} bytes of comments: not a histogram log",
                path.display()
            ))
            .into());
        }
    }
}

/// Unpacks `file` into a temporary directory. Only regular files and
/// directories whose paths stay below it are taken; anything else (links,
/// devices, `..`, absolute paths) makes the pack bad input.
pub fn unpack(file: &Path) -> Result<Unpacked> {
    let f = std::fs::File::open(file).map_err(|e| BadInput(format!("cannot read {}: {e}", file.display())))?;
    if !f.metadata()?.is_file() {
        return Err(BadInput(format!("{} is not a regular file", file.display())).into());
    }
    let dir = tempfile::Builder::new()
        .prefix("ontime-pack-")
        .tempdir()
        .context("cannot make a temporary directory to unpack into")?;
    let bad = |what: String| anyhow::Error::new(BadInput(format!("{}: {what}", file.display())));
    let stream = liblzma::stream::Stream::new_stream_decoder(XZ_MEMORY_LIMIT, 0)
        .map_err(|e| bad(format!("cannot start the xz decoder: {e}")))?;
    // Every decompressed byte counts, so long names and PAX headers (which
    // the tar reader holds whole) are bounded too.
    let xz = liblzma::read::XzDecoder::new_stream(std::io::BufReader::new(f), stream).take(MAX_UNPACKED_BYTES);
    let mut archive = tar::Archive::new(xz);
    let mut total = 0u64;
    let mut members = 0usize;
    let entries = archive.entries().map_err(|e| bad(format!("not a .tar.xz pack: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| {
            bad(format!(
                "not a .tar.xz pack, or larger than {MAX_UNPACKED_BYTES} bytes: {e}"
            ))
        })?;
        members += 1;
        if members > MAX_MEMBERS {
            return Err(bad(format!("holds more than {MAX_MEMBERS} members")));
        }
        let path = entry
            .path()
            .map_err(|e| bad(format!("bad member name: {e}")))?
            .into_owned();
        if path.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(bad(format!("member {} leaves the pack", path.display())));
        }
        let target = dir.path().join(&path);
        match entry.header().entry_type() {
            tar::EntryType::Directory => std::fs::create_dir_all(&target)?,
            tar::EntryType::Regular => {
                total = total.saturating_add(entry.size());
                if total > MAX_UNPACKED_BYTES {
                    return Err(bad(format!("unpacks to more than {MAX_UNPACKED_BYTES} bytes")));
                }
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let size = entry.size();
                let mut file =
                    std::fs::File::create(&target).with_context(|| format!("cannot write {}", target.display()))?;
                std::io::copy(&mut (&mut entry).take(size), &mut file)
                    .map_err(|e| bad(format!("member {}: {e}", path.display())))?;
            }
            other => return Err(bad(format!("member {} is a {other:?}, not a file", path.display()))),
        }
    }
    let mut results: Vec<PathBuf> = std::fs::read_dir(dir.path())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("runs").is_dir())
        .collect();
    results.sort();
    if results.is_empty() {
        return Err(bad("holds no results directory (NAME/runs/...)".into()));
    }
    Ok(Unpacked { _dir: dir, results })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_outside_the_pack_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.tar.xz");
        let f = std::fs::File::create(&p).unwrap();
        let mut tar = tar::Builder::new(liblzma::write::XzEncoder::new(f, 1));
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        // The tar crate refuses `..` when writing through set_path, so the
        // name goes into the header's bytes directly.
        h.as_gnu_mut().unwrap().name[..6].copy_from_slice(b"../x/y");
        h.set_cksum();
        tar.append(&h, &b"x"[..]).unwrap();
        tar.into_inner().unwrap().finish().unwrap();
        let err = unpack(&p).err().unwrap();
        assert!(format!("{err:#}").contains("leaves the pack"), "{err:#}");
        assert!(err.downcast_ref::<BadInput>().is_some());
    }

    #[test]
    fn not_a_pack_is_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tar.xz");
        std::fs::write(&p, b"not xz").unwrap();
        let err = unpack(&p).err().unwrap();
        assert!(err.downcast_ref::<BadInput>().is_some(), "{err:#}");
    }
}
