//! How a result was made: the manifest every ontime output carries
//! (command line, version, times, kernel, clocksource, CPUs, capabilities),
//! in the spirit of cyclictest's JSON header.

use crate::caps::Capabilities;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub tool: String,
    pub version: String,
    pub command_line: Vec<String>,
    /// Wall-clock start and end, RFC 3339 UTC.
    pub start_utc: String,
    pub end_utc: Option<String>,
    pub hostname: String,
    pub kernel: String,
    pub clocksource: String,
    pub cpus_online: usize,
    pub backend: String,
    pub capabilities: Capabilities,
}

impl Manifest {
    /// Starts a manifest now; call [`Manifest::finish`] at the end.
    pub fn start(backend: &str, caps: Capabilities) -> Manifest {
        Manifest {
            tool: "ontime".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command_line: std::env::args().collect(),
            start_utc: utc_now(),
            end_utc: None,
            hostname: read_trim("/proc/sys/kernel/hostname"),
            kernel: format!(
                "{} {}",
                read_trim("/proc/sys/kernel/ostype"),
                read_trim("/proc/sys/kernel/osrelease")
            ),
            clocksource: read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            cpus_online: crate::limits::online_cpus(),
            backend: backend.into(),
            capabilities: caps,
        }
    }

    pub fn finish(&mut self) {
        self.end_utc = Some(utc_now());
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The current UTC time as RFC 3339 with seconds.
pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// A wall-clock time (ns since the epoch) as RFC 3339 UTC with
/// milliseconds: "2026-11-29T12:03:07.412Z".
pub fn utc_millis(realtime_ns: u64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(realtime_ns)).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn manifest_has_kernel_and_times() {
        let mut m = super::Manifest::start("native", super::Capabilities::default());
        m.finish();
        assert!(m.kernel.starts_with("Linux"));
        assert!(m.end_utc.is_some());
        assert!(m.cpus_online >= 1);
    }
}
