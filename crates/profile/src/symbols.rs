//! Names for sampled addresses, by blazesym: user frames through the
//! process's executable mappings kept in the recording (so a process that
//! ended is still symbolised from its files), kernel frames through
//! /proc/kallsyms. An address that cannot be named keeps its module and
//! offset, or its raw value; a name is never guessed.
//!
//! The paths a recording's mappings name are opened here, on the host
//! that reports (for the fleet, a worker, with paths a remote agent
//! wrote), so they are opened under the input rule: a regular file of at
//! most [`MAX_SYMBOL_FILE_BYTES`], without blocking (a FIFO or a device is
//! skipped and counted in a note, never read). blazesym is handed the
//! file that was checked, as `/proc/self/fd/N`, so nothing can swap the
//! path for a FIFO between the check and the read.
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use ontime_core::limits::MAX_SYMBOL_FILE_BYTES;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;
use ontime_trace::maps::ProcessMaps;
use ontime_trace::recording::Recording;

/// One frame's name and where it lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, or `module+0xoffset` / `0xaddress` when unnamed.
    pub function: String,
    /// The binary (path), "[kernel]", or "" when unknown.
    pub module: String,
    pub kernel: bool,
    pub named: bool,
}

/// Frames by id and stacks (leaf first) by id, interned.
#[derive(Debug, Default)]
pub struct Symbols {
    pub frames: Vec<Frame>,
    frame_ids: HashMap<Frame, u32>,
    pub stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<Vec<u32>, u32>,
    /// Per sample (in the recording's order), its stack id.
    pub sample_stack: Vec<u32>,
    /// Samples whose user chain has a single frame though the thread was in
    /// user space: its binary keeps no frame pointers (the leaf is exact,
    /// its callers are lost).
    pub truncated: u64,
    /// Frames that could not be named.
    pub unnamed: u64,
    pub notes: Vec<String>,
}

impl Symbols {
    fn frame(&mut self, f: Frame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&f) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(f.clone());
        self.frame_ids.insert(f, id);
        id
    }

    fn stack(&mut self, s: Vec<u32>) -> u32 {
        if let Some(&id) = self.stack_ids.get(&s) {
            return id;
        }
        let id = self.stacks.len() as u32;
        self.stacks.push(s.clone());
        self.stack_ids.insert(s, id);
        id
    }

    /// Symbols made by hand: user functions `names`, `stacks` of their
    /// indices (leaf first), and each sample's stack.
    #[cfg(test)]
    pub(crate) fn by_hand(names: &[&str], stacks: &[&[u32]], sample_stack: &[u32]) -> Symbols {
        let mut s = Symbols::default();
        for n in names {
            s.frame(Frame {
                function: n.to_string(),
                module: "/bin/x".into(),
                kernel: false,
                named: true,
            });
        }
        for st in stacks {
            s.stack(st.to_vec());
        }
        s.sample_stack = sample_stack.to_vec();
        s
    }

    /// The leaf frame of a stack (None for an empty one).
    pub fn leaf(&self, stack: u32) -> Option<u32> {
        self.stacks.get(stack as usize).and_then(|s| s.first().copied())
    }

    /// The program's own function in a stack: its innermost user-space
    /// frame (a sample taken in a system call or an interrupt has kernel
    /// frames on top), or the kernel leaf for a kernel thread.
    pub fn program_frame(&self, stack: u32) -> Option<u32> {
        let s = self.stacks.get(stack as usize)?;
        s.iter()
            .copied()
            .find(|&f| !self.frames[f as usize].kernel)
            .or_else(|| s.first().copied())
    }
}

/// A mapped file: path and inode.
type FileId = (String, u64);
/// A user address to name: pid, address, file offset.
type UserAddr = (u32, u64, u64);

/// Symbolises every sample of `rec`.
pub fn symbolize(rec: &Recording) -> Symbols {
    let sym = Symbolizer::new();
    let mut out = Symbols::default();
    let empty = ProcessMaps {
        pid: 0,
        comm: String::new(),
        maps: Vec::new(),
    };
    // Distinct user addresses per (file, inode), as file offsets.
    let mut user_names: HashMap<(u32, u64), Frame> = HashMap::new();
    let mut by_file: HashMap<FileId, Vec<UserAddr>> = HashMap::new();
    let mut kernel_ips: Vec<u64> = Vec::new();
    // A process forked without exec has its parent's mappings, and the
    // kernel reports no new ones: look them up through the fork events.
    let parent: HashMap<u32, u32> = rec
        .events
        .iter()
        .filter(|e| e.kind == ontime_trace::event::kind::FORK && e.b == e.c)
        .map(|e| {
            (
                e.b,
                rec.threads
                    .get(&e.a)
                    .map(|t| t.tgid)
                    .filter(|&t| t != 0 && t != u32::MAX)
                    .unwrap_or(e.a),
            )
        })
        .collect();
    let maps_of = |pid: u32| -> &ProcessMaps {
        let mut p = pid;
        for _ in 0..8 {
            match rec.maps.get(&p) {
                Some(m) if !m.maps.is_empty() => return m,
                _ => match parent.get(&p) {
                    Some(&q) if q != p => p = q,
                    _ => break,
                },
            }
        }
        &empty
    };
    for s in &rec.samples.samples {
        let maps = maps_of(s.pid);
        for &ip in rec.samples.user_frames(s) {
            if user_names.contains_key(&(s.pid, ip)) {
                continue;
            }
            match maps.find(ip) {
                Some(m) if m.path.starts_with('/') => {
                    // The reader checked that offset + length fits.
                    let off = (ip - m.start).saturating_add(m.offset);
                    by_file
                        .entry((m.path.clone(), m.inode))
                        .or_default()
                        .push((s.pid, ip, off));
                    // Placeholder until the file is read.
                    user_names.insert((s.pid, ip), unnamed(&m.path, off, false));
                }
                Some(m) => {
                    let name = if m.path.is_empty() {
                        "[anon]".to_string()
                    } else {
                        m.path.clone()
                    };
                    user_names.insert((s.pid, ip), unnamed(&name, ip - m.start, false));
                }
                None => {
                    user_names.insert((s.pid, ip), raw(ip, false));
                }
            }
        }
        kernel_ips.extend_from_slice(rec.samples.kernel_frames(s));
    }
    let mut changed = Skipped::default();
    let mut unreadable = Skipped::default();
    let mut no_symbols = Skipped::default();
    // In path order: the notes (their examples) read the same each time.
    let mut files: Vec<(&FileId, &Vec<UserAddr>)> = by_file.iter().collect();
    files.sort_by(|a, b| a.0.cmp(b.0));
    for ((path, inode), addrs) in files {
        let file = match open_mapped(Path::new(path), *inode) {
            Ok(f) => f,
            Err(Unusable::Changed) => {
                changed.add(path.clone());
                continue;
            }
            Err(Unusable::Refused(why)) => {
                unreadable.add(why);
                continue;
            }
        };
        let offsets: Vec<u64> = addrs.iter().map(|a| a.2).collect();
        let src = Source::Elf(Elf::new(fd_path(&file)));
        match sym.symbolize(&src, Input::FileOffset(&offsets)) {
            Ok(results) => {
                for (r, &(pid, ip, _)) in results.iter().zip(addrs) {
                    if let Symbolized::Sym(s) = r {
                        user_names.insert(
                            (pid, ip),
                            Frame {
                                function: s.name.to_string(),
                                module: path.clone(),
                                kernel: false,
                                named: true,
                            },
                        );
                    }
                }
            }
            Err(e) => no_symbols.add(format!("{path}: {e}")),
        }
        drop(file);
    }
    if let Some(n) =
        changed.note("mapped file(s) changed since mapped (another inode) or gone: their frames are left unnamed")
    {
        out.notes.push(n);
    }
    let rule = format!(
        "mapped file(s) not read (only regular files of at most {} MiB are): their frames are left unnamed",
        MAX_SYMBOL_FILE_BYTES >> 20
    );
    if let Some(n) = unreadable.note(&rule) {
        out.notes.push(n);
    }
    if let Some(n) = no_symbols.note("mapped file(s) without symbols blazesym can read") {
        out.notes.push(n);
    }
    kernel_ips.sort_unstable();
    kernel_ips.dedup();
    let mut kernel_names: HashMap<u64, Frame> = HashMap::new();
    if !kernel_ips.is_empty() {
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
            vmlinux: MaybeDefault::None,
            kaslr_offset: None,
            debug_syms: false,
            ..Default::default()
        });
        match sym.symbolize(&src, Input::AbsAddr(&kernel_ips)) {
            Ok(results) => {
                for (r, &ip) in results.iter().zip(&kernel_ips) {
                    if let Symbolized::Sym(s) = r {
                        kernel_names.insert(
                            ip,
                            Frame {
                                function: s.name.to_string(),
                                module: "[kernel]".into(),
                                kernel: true,
                                named: true,
                            },
                        );
                    }
                }
            }
            Err(e) => out.notes.push(format!(
                "kernel frames unnamed: cannot read /proc/kallsyms ({e}); report as root"
            )),
        }
        if kernel_names.is_empty() {
            out.notes
                .push("no kernel frame could be named (is /proc/kallsyms readable, kptr_restrict?)".into());
        }
    }
    let mut stack = Vec::with_capacity(256);
    for s in &rec.samples.samples {
        stack.clear();
        for &ip in rec.samples.kernel_frames(s) {
            let f = kernel_names.get(&ip).cloned().unwrap_or_else(|| raw(ip, true));
            out.unnamed += (!f.named) as u64;
            let id = out.frame(f);
            stack.push(id);
        }
        let user = rec.samples.user_frames(s);
        for &ip in user {
            let f = user_names.get(&(s.pid, ip)).cloned().unwrap_or_else(|| raw(ip, false));
            out.unnamed += (!f.named) as u64;
            let id = out.frame(f);
            stack.push(id);
        }
        if user.len() == 1 {
            out.truncated += 1;
        }
        let id = out.stack(stack.clone());
        out.sample_stack.push(id);
    }
    out
}

fn unnamed(module: &str, offset: u64, kernel: bool) -> Frame {
    let short = module.rsplit('/').next().unwrap_or(module);
    Frame {
        function: format!("{short}+{offset:#x}"),
        module: module.to_string(),
        kernel,
        named: false,
    }
}

fn raw(ip: u64, kernel: bool) -> Frame {
    Frame {
        function: format!("{ip:#x}"),
        module: if kernel { "[kernel]".into() } else { String::new() },
        kernel,
        named: false,
    }
}

/// Why a mapped file is not symbolised.
pub(crate) enum Unusable {
    /// Gone, or another file under its name (another inode).
    Changed,
    /// Refused by the input rule (a FIFO, a device, too large), or not
    /// readable; the reason names the file.
    Refused(String),
}

/// Opens a file a recording's mapping names, under the input rule, if it
/// is still the one that was mapped (same inode; 0: not known).
pub(crate) fn open_mapped(path: &Path, inode: u64) -> Result<File, Unusable> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unusable::Changed),
        _ => {}
    }
    let (file, _) = ontime_core::fsio::open_input(path, "mapped file", MAX_SYMBOL_FILE_BYTES)
        .map_err(|e| Unusable::Refused(format!("{e:#}")))?;
    let ino = file
        .metadata()
        .map(|m| m.ino())
        .map_err(|e| Unusable::Refused(format!("{}: {e}", path.display())))?;
    if inode != 0 && ino != inode {
        return Err(Unusable::Changed);
    }
    Ok(file)
}

/// The path of an open file that names that very file, whatever becomes
/// of the name it was opened by.
pub(crate) fn fd_path(f: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
}

/// Files left out for one reason: how many, and the first few.
#[derive(Default)]
struct Skipped {
    count: usize,
    examples: Vec<String>,
}

impl Skipped {
    /// Examples a note shows: a recording can name any number of files.
    const EXAMPLES: usize = 3;

    fn add(&mut self, what: String) {
        self.count += 1;
        if self.examples.len() < Self::EXAMPLES {
            self.examples.push(what);
        }
    }

    fn note(&self, what: &str) -> Option<String> {
        (self.count > 0).then(|| {
            let more = if self.count > self.examples.len() { ", ..." } else { "" };
            format!("{} {what} ({}{more})", self.count, self.examples.join("; "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ontime_trace::maps::Mapping;
    use ontime_trace::recording::Meta;
    use std::sync::mpsc;
    use std::time::Duration;

    fn mkfifo(p: &Path) {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    /// A recording whose only user frame lies in a mapping of `path`.
    fn recording_mapping(path: &Path) -> Recording {
        let mut rec = Recording::of_events(Meta::of_this_host("bpf", 0, vec![]), HashMap::new(), vec![], 1_000);
        rec.samples.push(10, 42, 42, 0, &[], &[0x1010]);
        rec.maps.insert(
            42,
            ProcessMaps {
                pid: 42,
                comm: "x".into(),
                maps: vec![Mapping {
                    start: 0x1000,
                    end: 0x2000,
                    offset: 0,
                    path: path.to_string_lossy().into_owned(),
                    dev: "00:00".into(),
                    inode: 0,
                }],
            },
        );
        rec
    }

    /// A mapping naming a FIFO made `profile report` (and a fleet worker)
    /// block for ever: it is skipped at once and counted in a note, and so
    /// is a device.
    #[test]
    fn a_mapping_naming_a_fifo_or_a_device_is_skipped_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        for path in [fifo.clone(), PathBuf::from("/dev/zero")] {
            let rec = recording_mapping(&path);
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(symbolize(&rec));
            });
            // A regression blocks in open(2): fail instead of hanging.
            let syms = rx
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("symbolising a mapping of {} blocked", path.display()));
            let name = path.display().to_string();
            assert!(
                syms.notes
                    .iter()
                    .any(|n| n.starts_with("1 mapped file(s) not read") && n.contains(&name)),
                "{:?}",
                syms.notes
            );
            let leaf = syms.leaf(syms.sample_stack[0]).unwrap();
            assert!(!syms.frames[leaf as usize].named, "{:?}", syms.frames[leaf as usize]);
        }
    }

    #[test]
    fn a_mapped_file_gone_or_replaced_is_changed_and_a_regular_one_opens() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("bin");
        std::fs::write(&f, b"not an ELF file").unwrap();
        let ino = std::fs::metadata(&f).unwrap().ino();
        assert!(open_mapped(&f, ino).is_ok());
        assert!(open_mapped(&f, 0).is_ok());
        assert!(matches!(open_mapped(&f, ino + 1), Err(Unusable::Changed)));
        assert!(matches!(
            open_mapped(&dir.path().join("gone"), 1),
            Err(Unusable::Changed)
        ));
        assert!(matches!(open_mapped(dir.path(), 0), Err(Unusable::Refused(_))));
        // The descriptor's path names the file opened, whatever its name
        // becomes.
        let opened = open_mapped(&f, ino).ok().unwrap();
        std::fs::remove_file(&f).unwrap();
        assert_eq!(std::fs::metadata(fd_path(&opened)).unwrap().ino(), ino);
    }
}
