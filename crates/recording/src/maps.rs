//! What symbolisation needs of a sampled process, kept in the recording so
//! that a process that ended can still be symbolised: its executable
//! mappings (address range, file offset, path and the file's identity,
//! device and inode as /proc/<pid>/maps gives them).
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// The file ("[vdso]" and other pseudo files as the kernel names them).
    pub path: String,
    /// "major:minor" and inode of the file when mapped (to tell a file
    /// replaced since from the one that ran).
    pub dev: String,
    pub inode: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessMaps {
    pub pid: u32,
    pub comm: String,
    pub maps: Vec<Mapping>,
}

impl ProcessMaps {
    /// The mapping that holds `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        self.maps.iter().find(|m| m.start <= addr && addr < m.end)
    }
}

/// Executable mappings from the text of /proc/<pid>/maps.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(offset), Some(dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let path = f.collect::<Vec<_>>().join(" ");
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset), Ok(inode)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(offset, 16),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            offset,
            path,
            dev: dev.to_string(),
            inode,
        });
    }
    out
}

/// Reads a live process's executable mappings (None once it is gone).
pub fn read_maps(pid: u32) -> Option<ProcessMaps> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Some(ProcessMaps {
        pid,
        comm,
        maps: parse_maps(&text),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_executable_mappings_are_kept_with_their_file_identity() {
        let text = "\
55d0c0a00000-55d0c0a20000 r--p 00000000 fe:01 1234  /usr/bin/app
55d0c0a20000-55d0c0a80000 r-xp 00020000 fe:01 1234  /usr/bin/app
7ffd1c5f0000-7ffd1c5f2000 r-xp 00000000 00:00 0  [vdso]
7f00 bad line
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].start, m[0].offset, m[0].inode), (0x55d0c0a20000, 0x20000, 1234));
        assert_eq!(m[0].path, "/usr/bin/app");
        assert_eq!(m[1].path, "[vdso]");
        let p = ProcessMaps {
            pid: 1,
            comm: "app".into(),
            maps: m,
        };
        assert_eq!(p.find(0x55d0c0a20010).map(|m| m.inode), Some(1234));
        assert!(p.find(0x10).is_none());
    }

    #[test]
    fn this_process_has_its_own_binary_mapped() {
        let me = read_maps(std::process::id()).expect("own maps");
        assert!(
            me.maps
                .iter()
                .any(|m| m.path.contains("ontime_recording") || m.path.contains("deps/")),
            "{me:?}"
        );
    }
}
