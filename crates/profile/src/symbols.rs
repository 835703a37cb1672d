//! Names for sampled addresses, by blazesym: user frames through the
//! process's executable mappings kept in the recording (so a process that
//! ended is still symbolised from its files), kernel frames through
//! /proc/kallsyms. An address that cannot be named keeps its module and
//! offset, or its raw value; a name is never guessed.
use std::collections::HashMap;
use std::path::PathBuf;

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
                    let off = ip - m.start + m.offset;
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
    for ((path, inode), addrs) in &by_file {
        if !same_file(path, *inode) {
            out.notes.push(format!(
                "{path} changed since it was mapped (inode {inode}): its frames are left unnamed"
            ));
            continue;
        }
        let offsets: Vec<u64> = addrs.iter().map(|a| a.2).collect();
        let src = Source::Elf(Elf::new(PathBuf::from(path)));
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
            Err(e) => out.notes.push(format!("cannot read symbols of {path}: {e}")),
        }
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

/// Whether the file at `path` is still the one mapped (same inode).
fn same_file(path: &str, inode: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    inode == 0 || std::fs::metadata(path).is_ok_and(|m| m.ino() == inode)
}
