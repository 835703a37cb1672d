//! Document 004's workloads, run with the real tools (fio, dd, Postmark)
//! in a directory (a tenant's disk) and reduced to one result: bytes,
//! operations, throughput and, where the tool measures it, per-operation
//! latency. `ontime io workload` runs one; the lab runs one per tenant.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use ontime_core::stats::{supports, Percentile, Summary, PERCENTILES};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// fio with the psync engine: sequential or random, read or write.
    #[default]
    Fio,
    /// dd: one sequential pass over the data.
    Dd,
    /// Postmark: small files created, read, appended and deleted (a mail
    /// or news server).
    Postmark,
    /// The user's own program (`command`), run in the directory; its bytes
    /// are what the I/O recording sees, the tool reports only its time.
    Command,
}

impl std::str::FromStr for Tool {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fio" => Ok(Tool::Fio),
            "dd" => Ok(Tool::Dd),
            "postmark" => Ok(Tool::Postmark),
            "command" => Ok(Tool::Command),
            o => Err(format!("unknown tool {o:?}; use fio, dd, postmark or command")),
        }
    }
}

impl Tool {
    pub fn program(self) -> &'static str {
        match self {
            Tool::Fio => "fio",
            Tool::Dd => "dd",
            Tool::Postmark => "postmark",
            Tool::Command => "command",
        }
    }
}

/// What to run: `[tenant.io]` in a lab scenario, or `ontime io workload`'s flags.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    #[serde(default)]
    pub tool: Tool,
    /// read, write, randread, randwrite or randrw (fio); read or write (dd);
    /// ignored by Postmark.
    #[serde(default = "default_rw")]
    pub rw: String,
    /// The data set, e.g. "256M" (Postmark: the files' total size).
    pub size: String,
    /// Request size, e.g. "4k" (fio) or "1M" (dd).
    #[serde(default = "default_bs")]
    pub bs: String,
    /// O_DIRECT in the tenant (fio, dd; Postmark has no such option).
    #[serde(default)]
    pub direct: bool,
    /// tool = "command": the program and its arguments, run in the
    /// tenant's disk directory, e.g. ["sh", "-c", "tar xf /data/x.tar"].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
}

fn default_rw() -> String {
    "randread".into()
}
fn default_bs() -> String {
    "4k".into()
}

impl WorkloadSpec {
    /// Checks the values before anything runs.
    pub fn validate(&self) -> Result<(u64, u64), String> {
        let size = ontime_core::size::parse_bytes(&self.size).map_err(|e| format!("io.size: {e}"))?;
        let bs = ontime_core::size::parse_bytes(&self.bs).map_err(|e| format!("io.bs: {e}"))?;
        if size < 1 << 20 {
            return Err(format!("io.size {} is below 1M", self.size));
        }
        if !(512..=64 << 20).contains(&bs) || bs % 512 != 0 {
            return Err(format!(
                "io.bs {} must be a multiple of 512 between 512 and 64M",
                self.bs
            ));
        }
        let ok: &[&str] = match self.tool {
            Tool::Fio => &["read", "write", "randread", "randwrite", "randrw"],
            Tool::Dd => &["read", "write"],
            Tool::Postmark | Tool::Command => &["read", "write", "randread", "randwrite", "randrw", "mixed"],
        };
        if (self.tool == Tool::Command) == self.command.is_empty() {
            return Err(if self.command.is_empty() {
                "io.command: tool = \"command\" needs the program to run, e.g. command = [\"sh\", \"-c\", \"...\"]"
                    .into()
            } else {
                format!(
                    "io.command is only for tool = \"command\" (tool is {})",
                    self.tool.program()
                )
            });
        }
        if !ok.contains(&self.rw.as_str()) {
            return Err(format!(
                "io.rw {:?} for {}: use one of {}",
                self.rw,
                self.tool.program(),
                ok.join(", ")
            ));
        }
        Ok((size, bs))
    }

    /// The workload class the advice groups by: "fio randread", "dd write", "postmark".
    pub fn class(&self) -> String {
        match self.tool {
            Tool::Postmark => "postmark".into(),
            Tool::Command => format!("command {}", self.command.first().map(String::as_str).unwrap_or("")),
            t => format!("{} {}", t.program(), self.rw),
        }
    }
}

/// What a workload did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadResult {
    pub class: String,
    pub spec: Option<WorkloadSpec>,
    pub command: Vec<String>,
    /// Wall time of the measured phase (fio: its job runtime; dd and
    /// Postmark: the whole run, timed here).
    pub elapsed_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Operations (fio: I/Os; dd: blocks; Postmark: transactions).
    pub ops: u64,
    /// (read + written) / elapsed.
    pub throughput_bps: f64,
    pub ops_per_s: f64,
    /// Per-operation latency where the tool measures it (fio: completion
    /// latency); empty otherwise.
    pub latency: Summary,
    pub note: Option<String>,
}

/// Runs the workload in `dir`; the tool's own output goes to `log` when given.
pub fn run(spec: &WorkloadSpec, dir: &Path, duration_s: u64, log: Option<&Path>) -> Result<WorkloadResult> {
    let (size, bs) = spec.validate().map_err(anyhow::Error::msg)?;
    if !dir.is_dir() {
        bail!(
            "{} is not a directory (the tenant's disk is mounted at /mnt/ontime-disk)",
            dir.display()
        );
    }
    if spec.tool != Tool::Command && ontime_core::caps::which(spec.tool.program()).is_none() {
        bail!(
            "{} is not installed: run scripts/setup.sh or apt-get install {}",
            spec.tool.program(),
            spec.tool.program()
        );
    }
    let mut r = match spec.tool {
        Tool::Fio => fio(spec, dir, size, bs, duration_s, log)?,
        Tool::Dd => dd(spec, dir, size, bs, log)?,
        Tool::Postmark => postmark(dir, size, duration_s, log)?,
        Tool::Command => command(spec, dir, log)?,
    };
    r.class = spec.class();
    r.spec = Some(spec.clone());
    let secs = r.elapsed_ns.max(1) as f64 / 1e9;
    r.throughput_bps = (r.read_bytes + r.write_bytes) as f64 / secs;
    r.ops_per_s = r.ops as f64 / secs;
    Ok(r)
}

fn output(cmd: &mut Command, log: Option<&Path>) -> Result<(String, String)> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {:?}", cmd.get_program()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if let Some(l) = log {
        let _ = std::fs::write(l, format!("{stdout}\n--- stderr\n{stderr}"));
    }
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            stderr.lines().last().unwrap_or("")
        );
    }
    Ok((stdout, stderr))
}

fn command_line(cmd: &Command) -> Vec<String> {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn fio(
    spec: &WorkloadSpec,
    dir: &Path,
    size: u64,
    bs: u64,
    duration_s: u64,
    log: Option<&Path>,
) -> Result<WorkloadResult> {
    let mut cmd = Command::new("fio");
    cmd.arg("--name=ontime")
        .arg(format!("--directory={}", dir.display()))
        .arg("--filename=ontime-fio.dat")
        .arg(format!("--size={size}"))
        .arg(format!("--bs={bs}"))
        .arg(format!("--rw={}", spec.rw))
        .arg(format!("--direct={}", u8::from(spec.direct)))
        .arg("--ioengine=psync")
        // fio drops the file's cache at every pass of a time-based job by
        // default, which would hide the guest cache document 004 measures;
        // the file stays as its layout left it (written through the cache).
        .arg("--invalidate=0")
        .arg(format!("--runtime={}", duration_s.max(1)))
        .arg("--time_based")
        .arg("--output-format=json")
        .arg("--percentile_list=50:90:99:99.9:99.99:99.999:99.9999")
        .arg("--group_reporting");
    let command = command_line(&cmd);
    let (stdout, _) = output(&mut cmd, log)?;
    // fio may print warnings before the JSON.
    let json = stdout.find('{').map(|i| &stdout[i..]).unwrap_or(&stdout);
    let v: serde_json::Value = serde_json::from_str(json).context("fio's JSON output")?;
    let job = &v["jobs"][0];
    let mut r = WorkloadResult {
        command,
        elapsed_ns: job["job_runtime"].as_u64().unwrap_or(0) * 1_000_000,
        ..Default::default()
    };
    let mut latencies = Vec::new();
    for dir in ["read", "write"] {
        let d = &job[dir];
        let bytes = d["io_bytes"].as_u64().unwrap_or(0);
        if dir == "read" {
            r.read_bytes = bytes;
        } else {
            r.write_bytes = bytes;
        }
        r.ops += d["total_ios"].as_u64().unwrap_or(0);
        if d["clat_ns"]["N"].as_u64().unwrap_or(0) > 0 {
            latencies.push(&d["clat_ns"]);
        }
    }
    // The direction with the most operations speaks for the run (randrw:
    // reads and writes are reported apart by fio; the larger one here).
    if let Some(clat) = latencies.into_iter().max_by_key(|c| c["N"].as_u64().unwrap_or(0)) {
        r.latency = fio_summary(clat);
    }
    if job["error"].as_u64().unwrap_or(0) != 0 {
        r.note = Some(format!("fio reported error {}", job["error"]));
    }
    Ok(r)
}

/// fio's completion-latency statistics as an ontime summary (percentiles
/// only where the count supports them, as everywhere in ontime).
fn fio_summary(clat: &serde_json::Value) -> Summary {
    let n = clat["N"].as_u64().unwrap_or(0);
    let pct = &clat["percentile"];
    Summary {
        count: n,
        min_ns: clat["min"].as_u64(),
        mean_ns: clat["mean"].as_f64().map(|m| m.round() as u64),
        percentiles_ns: PERCENTILES
            .iter()
            .map(|(name, p)| Percentile {
                name: name.to_string(),
                value_ns: supports(n, *p).then(|| pct[format!("{p:.6}")].as_u64()).flatten(),
            })
            .collect(),
        max_ns: clat["max"].as_u64(),
        threshold_ns: None,
        above_threshold: None,
        clamped_at_max: 0,
    }
}

fn dd(spec: &WorkloadSpec, dir: &Path, size: u64, bs: u64, log: Option<&Path>) -> Result<WorkloadResult> {
    let file = dir.join("ontime-dd.dat");
    let count = size.div_ceil(bs);
    let flag = if spec.direct { "direct" } else { "" };
    let mut cmd = Command::new("dd");
    if spec.rw == "write" {
        cmd.arg("if=/dev/zero")
            .arg(format!("of={}", file.display()))
            .arg("conv=fsync");
        if spec.direct {
            cmd.arg(format!("oflag={flag}"));
        }
    } else {
        if std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0) < count * bs {
            // Laid out first, as fio does; not timed.
            let st = Command::new("dd")
                .args(["if=/dev/zero", &format!("of={}", file.display())])
                .args([
                    format!("bs={bs}"),
                    format!("count={count}"),
                    "conv=fsync".into(),
                    "status=none".into(),
                ])
                .status()
                .context("cannot run dd")?;
            if !st.success() {
                bail!("laying out {} with dd failed", file.display());
            }
        }
        cmd.arg(format!("if={}", file.display())).arg("of=/dev/null");
        if spec.direct {
            cmd.arg(format!("iflag={flag}"));
        }
    }
    cmd.arg(format!("bs={bs}")).arg(format!("count={count}"));
    let command = command_line(&cmd);
    let t0 = Instant::now();
    let (_, stderr) = output(&mut cmd, log)?;
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    // "N bytes (...) copied, T s, R MB/s"
    let bytes = stderr
        .lines()
        .find(|l| l.contains("bytes") && l.contains("copied"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .context("dd did not report the bytes it copied")?;
    let mut r = WorkloadResult {
        command,
        elapsed_ns,
        ops: bytes.div_ceil(bs),
        note: Some("dd reports no per-operation latency".into()),
        ..Default::default()
    };
    if spec.rw == "write" {
        r.write_bytes = bytes;
    } else {
        r.read_bytes = bytes;
    }
    Ok(r)
}

fn postmark(dir: &Path, size: u64, duration_s: u64, log: Option<&Path>) -> Result<WorkloadResult> {
    // Files of 4-64 KiB (about 34 KiB each): as many as fill `size`, and
    // transactions for about the run's length at this VM's ~15 000/s
    // with a warm cache (far fewer when the files do not fit memory).
    let location = dir.join("ontime-postmark");
    std::fs::create_dir_all(&location).with_context(|| format!("cannot create {}", location.display()))?;
    let files = (size / (34 << 10)).max(100);
    let transactions = (duration_s.max(1) * 5_000).max(files);
    let config = format!(
        "set location {}\nset size 4096 65536\nset number {files}\nset transactions {transactions}\nrun\nquit\n",
        location.display()
    );
    let cfg_path = std::env::temp_dir().join(format!("ontime-postmark-{}.cfg", std::process::id()));
    std::fs::write(&cfg_path, &config).context("writing Postmark's configuration")?;
    let mut cmd = Command::new("postmark");
    cmd.arg(&cfg_path);
    let command = command_line(&cmd);
    let t0 = Instant::now();
    let res = output(&mut cmd, log);
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    let _ = std::fs::remove_file(&cfg_path);
    let (stdout, _) = res?;
    let (read_mb, written_mb) = postmark_data(&stdout).context("Postmark did not report the data it moved")?;
    Ok(WorkloadResult {
        command,
        elapsed_ns,
        read_bytes: (read_mb * 1e6) as u64,
        write_bytes: (written_mb * 1e6) as u64,
        ops: transactions,
        note: Some(format!(
            "Postmark: {files} files of 4-64 KiB, {transactions} transactions, buffered (it has no O_DIRECT); timed here as a whole (its own clock counts whole seconds)"
        )),
        ..Default::default()
    })
}

fn command(spec: &WorkloadSpec, dir: &Path, log: Option<&Path>) -> Result<WorkloadResult> {
    let mut cmd = Command::new(&spec.command[0]);
    cmd.args(&spec.command[1..]).current_dir(dir);
    let command = command_line(&cmd);
    let t0 = Instant::now();
    output(&mut cmd, log)?;
    Ok(WorkloadResult {
        command,
        elapsed_ns: t0.elapsed().as_nanos() as u64,
        note: Some("a user's command: its bytes are in the run's I/O recording ([observe] io = true), not here".into()),
        ..Default::default()
    })
}

/// (megabytes read, megabytes written) from Postmark's report ("39.04
/// megabytes read").
fn postmark_data(out: &str) -> Option<(f64, f64)> {
    let find = |what: &str| -> Option<f64> {
        out.lines().find_map(|l| {
            let l = l.trim();
            let pos = l.find(what)?;
            l[..pos].split_whitespace().last()?.parse().ok()
        })
    };
    // Postmark scales its unit to the amount: bytes, kilobytes, megabytes.
    let amount = |dir: &str| {
        find(&format!("megabytes {dir}"))
            .or_else(|| find(&format!("kilobytes {dir}")).map(|k| k / 1e3))
            .or_else(|| find(&format!("bytes {dir}")).map(|b| b / 1e6))
    };
    Some((amount("read")?, amount("written")?))
}

/// One line: class, throughput, operations per second, latency.
pub fn text(r: &WorkloadResult) -> String {
    let p = |name: &str| {
        r.latency
            .percentiles_ns
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| p.value_ns)
            .map(ontime_core::duration::format_ns)
            .unwrap_or_else(|| "-".into())
    };
    format!(
        "{}: {:.1} MiB/s ({} read, {} written in {}), {:.0} ops/s, latency p50 {} p99 {} max {}{}\n",
        r.class,
        r.throughput_bps / 1048576.0,
        crate::format_bytes(r.read_bytes),
        crate::format_bytes(r.write_bytes),
        ontime_core::duration::format_ns(r.elapsed_ns),
        r.ops_per_s,
        p("p50"),
        p("p99"),
        r.latency
            .max_ns
            .map(ontime_core::duration::format_ns)
            .unwrap_or_else(|| "-".into()),
        r.note.as_ref().map(|n| format!("\n  ({n})")).unwrap_or_default()
    )
}

/// Where the result of tenant `i` goes in a lab run directory.
pub fn result_file(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("t{i}.json"))
}

impl ontime_core::export::TextReport for WorkloadResult {
    fn text(&self) -> String {
        text(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_are_checked() {
        let ok = WorkloadSpec {
            tool: Tool::Fio,
            rw: "randread".into(),
            size: "64M".into(),
            bs: "4k".into(),
            direct: false,
            command: vec![],
        };
        assert_eq!(ok.validate(), Ok((64 << 20, 4096)));
        let own = WorkloadSpec {
            tool: Tool::Command,
            ..ok.clone()
        };
        assert!(own.validate().unwrap_err().contains("needs the program"));
        let own = WorkloadSpec {
            command: vec!["sh".into()],
            ..own
        };
        assert!(own.validate().is_ok());
        assert_eq!(own.class(), "command sh");
        assert_eq!(ok.class(), "fio randread");
        let bad = WorkloadSpec {
            tool: Tool::Dd,
            rw: "randread".into(),
            ..ok.clone()
        };
        assert!(bad.validate().unwrap_err().contains("use one of read, write"));
        let tiny = WorkloadSpec {
            bs: "100".into(),
            ..ok.clone()
        };
        assert!(tiny.validate().is_err());
    }

    #[test]
    fn fio_percentiles_only_where_the_count_supports_them() {
        let clat = serde_json::json!({
            "N": 500, "min": 1000, "max": 90000, "mean": 4000.4,
            "percentile": {"50.000000": 3000, "90.000000": 5000, "99.000000": 20000, "99.900000": 80000}
        });
        let s = fio_summary(&clat);
        let p = |n: &str| s.percentiles_ns.iter().find(|p| p.name == n).unwrap().value_ns;
        assert_eq!(p("p50"), Some(3000));
        assert_eq!(p("p99"), Some(20000));
        assert_eq!(p("p99.9"), None, "500 samples do not support p99.9");
        assert_eq!(s.mean_ns, Some(4000));
    }

    #[test]
    fn postmark_reports_are_read() {
        let out = "Data:\n\t39.04 megabytes read (39.04 megabytes per second)\n\t59.57 megabytes written (59.57 megabytes per second)\n";
        assert_eq!(postmark_data(out), Some((39.04, 59.57)));
    }
}
