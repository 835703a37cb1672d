//! Running iproute2 and writing sysfs files, with errors that say what
//! failed and how to fix it.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

/// Runs `ip ARGS`; the error carries ip's own message.
pub fn ip(args: &[&str]) -> Result<()> {
    ip_output(args).map(|_| ())
}

/// `ip ARGS` whose output is wanted.
pub fn ip_output(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run ip (install iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).with_context(|| format!("cannot write '{value}' to {}", path.display()))
}

pub fn read_trim(path: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .trim()
        .to_string())
}

/// True when running as root (the lab needs it for namespaces and cgroups).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}
