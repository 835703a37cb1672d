//! Naming guest addresses, as document 002 does: the in-guest agent
//! (`ontime profile agent` prints it; POSIX sh) dumps the guest kernel's
//! text symbols and every process's executable mappings; the host names a
//! guest PC with that dump. Kernel addresses by the guest's kallsyms; user
//! addresses by the process's mappings, and by the file's own symbols when
//! the host can read the guest's files (`root`, e.g. the mounted image).
//! Where nothing names an address it keeps its module and offset or its
//! raw value: a name is never guessed.
//!
//! Guest PCs themselves come from KVM (kvm_exit's guest_rip, perf's guest
//! sampling); this host has no KVM, so they are joined into recordings only
//! where KVM is present.
//!
//! The dump is the guest's word: its paths are looked up only under
//! `root`, never above it (no `..`), and opened under the input rule like
//! a recording's mappings (regular files only, without blocking).
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context, Result};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use ontime_trace::maps::{parse_maps, ProcessMaps};

use crate::symbols::{fd_path, open_mapped, Frame};

/// The agent, as shipped.
pub const AGENT: &str = include_str!("../agent/ontime-guest-agent.sh");

/// What the agent dumped.
#[derive(Clone, Debug, Default)]
pub struct GuestDump {
    pub kernel: String,
    pub processes: HashMap<u32, ProcessMaps>,
    /// Text symbols, by address.
    pub kallsyms: Vec<(u64, String)>,
    /// Why CR3 -> PID is not in the dump, when it is not.
    pub cr3: Option<String>,
    /// Why kernel symbols are missing, when they are.
    pub kallsyms_unavailable: Option<String>,
    /// The dump ended with its end marker (not cut short).
    pub complete: bool,
}

impl GuestDump {
    /// Reads a dump from `text`, which may hold other lines around it (a
    /// serial console log): from the last `ontime-guest-dump 1` on.
    pub fn parse(text: &str) -> Result<GuestDump> {
        let Some(start) = text.rfind("ontime-guest-dump 1") else {
            bail!("no guest dump here (made by `ontime profile agent` run in the guest)");
        };
        let mut d = GuestDump::default();
        let mut maps_text: HashMap<u32, String> = HashMap::new();
        let mut comms: HashMap<u32, String> = HashMap::new();
        for line in text[start..].lines().skip(1) {
            let line = line.trim_end_matches('\r');
            let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
            match tag {
                "kernel" => d.kernel = rest.to_string(),
                "process" => {
                    if let Some((pid, comm)) = rest.split_once(' ') {
                        if let Ok(pid) = pid.parse() {
                            comms.insert(pid, comm.to_string());
                        }
                    }
                }
                "map" => {
                    if let Some((pid, m)) = rest.split_once(' ') {
                        if let Ok(pid) = pid.parse::<u32>() {
                            let t = maps_text.entry(pid).or_default();
                            t.push_str(m);
                            t.push('\n');
                        }
                    }
                }
                "ksym" => {
                    if let Some(rest) = rest.strip_prefix("unavailable") {
                        d.kallsyms_unavailable = Some(rest.trim_start_matches(':').trim().to_string());
                    } else if let Some((addr, name)) = rest.split_once(' ') {
                        if let Ok(a) = u64::from_str_radix(addr, 16) {
                            if a != 0 {
                                d.kallsyms.push((a, name.to_string()));
                            }
                        }
                    }
                }
                "cr3" => d.cr3 = Some(rest.to_string()),
                "ontime-guest-dump" if rest == "end" => {
                    d.complete = true;
                    break;
                }
                _ => {}
            }
        }
        for (pid, comm) in comms {
            let maps = maps_text.get(&pid).map(|t| parse_maps(t)).unwrap_or_default();
            d.processes.insert(pid, ProcessMaps { pid, comm, maps });
        }
        d.kallsyms.sort_unstable();
        if d.kallsyms.is_empty() && d.kallsyms_unavailable.is_none() {
            d.kallsyms_unavailable = Some("the dump holds no kernel symbol (all hidden: kptr_restrict?)".into());
        }
        Ok(d)
    }

    pub fn read(path: &Path) -> Result<GuestDump> {
        let text = ontime_core::fsio::read_text(path, "guest dump")?;
        GuestDump::parse(&text).with_context(|| path.display().to_string())
    }
}

/// Names guest PCs with a dump, and with the guest's files under `root`
/// when the host can read them.
pub struct GuestSymbols {
    pub dump: GuestDump,
    root: Option<PathBuf>,
    sym: Symbolizer,
    /// The guest's files under `root`, opened once each (None: refused or
    /// missing).
    files: RefCell<HashMap<PathBuf, Option<File>>>,
}

/// The first kernel address on x86-64 (the canonical upper half).
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

impl GuestSymbols {
    pub fn new(dump: GuestDump, root: Option<PathBuf>) -> GuestSymbols {
        GuestSymbols {
            dump,
            root,
            sym: Symbolizer::new(),
            files: RefCell::new(HashMap::new()),
        }
    }

    /// Names `pc` of guest process `pid` (None: the process is not known,
    /// e.g. CR3 -> PID unavailable; kernel addresses are named anyway).
    pub fn frame(&self, pid: Option<u32>, pc: u64) -> Frame {
        if pc >= KERNEL_SPACE {
            return self.kernel_frame(pc);
        }
        let Some(maps) = pid.and_then(|p| self.dump.processes.get(&p)) else {
            return raw(pc, "[guest]");
        };
        let Some(m) = maps.find(pc) else {
            return raw(pc, "[guest]");
        };
        let off = (pc - m.start).saturating_add(m.offset);
        if let Some(file) = self.root.as_deref().and_then(|root| under(root, &m.path)) {
            let mut files = self.files.borrow_mut();
            let open = files
                .entry(file)
                .or_insert_with_key(|f| open_mapped(f, 0).ok())
                .as_ref()
                .map(fd_path);
            drop(files);
            if let Some(fd) = open {
                if let Ok(Symbolized::Sym(s)) = self
                    .sym
                    .symbolize_single(&Source::Elf(Elf::new(fd)), Input::FileOffset(off))
                {
                    return Frame {
                        function: s.name.to_string(),
                        module: format!("[guest] {}", m.path),
                        kernel: false,
                        named: true,
                    };
                }
            }
        }
        let short = m.path.rsplit('/').next().unwrap_or(&m.path);
        Frame {
            function: format!("{short}+{off:#x}"),
            module: format!("[guest] {}", m.path),
            kernel: false,
            named: false,
        }
    }

    fn kernel_frame(&self, pc: u64) -> Frame {
        let k = &self.dump.kallsyms;
        let i = k.partition_point(|(a, _)| *a <= pc);
        // A PC past the last symbol by more than any function is long is
        // not that symbol's (module space, or a hole).
        match i.checked_sub(1).map(|i| &k[i]) {
            Some((a, name)) if pc - a < 1 << 20 => Frame {
                function: name.clone(),
                module: "[guest kernel]".into(),
                kernel: true,
                named: true,
            },
            _ => raw(pc, "[guest kernel]"),
        }
    }
}

/// The guest's `path` (absolute) under `root`, unless it would climb out
/// of it.
fn under(root: &Path, path: &str) -> Option<PathBuf> {
    let rel = Path::new(path).strip_prefix("/").ok()?;
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| root.join(rel))
}

fn raw(pc: u64, module: &str) -> Frame {
    Frame {
        function: format!("{pc:#x}"),
        module: module.into(),
        kernel: module.contains("kernel"),
        named: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUMP: &str = "noise from the console\n\
ontime-guest-dump 1\n\
kernel 6.1.0-56-cloud-amd64\n\
time 100\n\
process 1 init\n\
map 1 00400000-00500000 r-xp 00001000 00:02 7 /bin/busybox\n\
process 42 sh\n\
cr3 unavailable: not readable from user space in this guest\n\
ksym ffffffff81000000 _stext\n\
ksym ffffffff81001000 schedule\n\
ksym 0000000000000000 hidden\n\
ontime-guest-dump end\n\
more console\n";

    #[test]
    fn a_dump_reads_from_a_console_log_and_names_what_it_can() {
        let d = GuestDump::parse(DUMP).expect("parses");
        assert!(d.complete);
        assert_eq!(d.kernel, "6.1.0-56-cloud-amd64");
        assert_eq!(d.kallsyms.len(), 2, "zero (hidden) addresses are dropped");
        assert_eq!(d.processes[&1].maps[0].path, "/bin/busybox");
        assert!(d.processes[&42].maps.is_empty());
        assert!(d.cr3.as_deref().is_some_and(|c| c.starts_with("unavailable")));
        let g = GuestSymbols::new(d, None);
        assert_eq!(g.frame(None, 0xffff_ffff_8100_1010).function, "schedule");
        // Past the last symbol by more than a function: not named.
        assert!(!g.frame(None, 0xffff_ffff_9000_0000).named);
        // A user address of a known process: its file and offset.
        let f = g.frame(Some(1), 0x0040_0100);
        assert_eq!((f.function.as_str(), f.named), ("busybox+0x1100", false));
        // Unknown process (no CR3 -> PID): never a guessed name.
        assert_eq!(g.frame(None, 0x0040_0100).function, "0x400100");
    }

    #[test]
    fn no_dump_is_an_error_that_says_what_makes_one() {
        let e = GuestDump::parse("just a console").unwrap_err().to_string();
        assert!(e.contains("ontime profile agent"), "{e}");
    }

    #[test]
    fn the_shipped_agent_is_posix_sh_with_its_markers() {
        assert!(AGENT.starts_with("#!/bin/sh"));
        assert!(AGENT.contains("ontime-guest-dump 1") && AGENT.contains("ontime-guest-dump end"));
    }
}
