//! Where a verb's result goes: text or JSON on stdout, and optionally a
//! JSON file, written even after an interruption.

use anyhow::Context;
use serde::Serialize;
use std::path::Path;

pub fn emit<T: Serialize>(result: &T, text: &str, json: bool, file: Option<&Path>) -> anyhow::Result<()> {
    let doc = serde_json::to_string_pretty(result).context("cannot encode the result as JSON")?;
    if let Some(p) = file {
        if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::write(p, format!("{doc}\n")).with_context(|| format!("cannot write {}", p.display()))?;
    }
    if json {
        println!("{doc}");
    } else {
        print!("{text}");
    }
    Ok(())
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
pub fn progress_bar(len: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len}s (eta {eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb
}
