//! `ontime io record|report`: each I/O of chosen tenants at the application,
//! virtual-disk and physical-disk layers, and which cache absorbed what
//! (document 004).

use crate::flags::{DurationFlag, TargetArgs};
use crate::output;
use clap::{Args, Subcommand};
use ontime_core::bad_input;
use ontime_core::duration::{format_ns, parse_ns};
use ontime_scenario::probe::IoWorkloadProbe;
use ontime_trace::io::IoRecordOptions;
use ontime_trace::recording::Recording;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct IoArgs {
    #[command(subcommand)]
    action: IoAction,
}

#[derive(Subcommand)]
enum IoAction {
    /// Record the tenants' I/O (their threads' read/write counters, or every
    /// file call with --calls), their virtual disks' and the physical disk's
    /// block requests, and the guest and host caches, on one clock
    Record(IoRecordArgs),
    /// Per tenant and layer: operations, bytes, sizes, latency; what the guest
    /// and the host cache absorbed; splits and merges
    Report(IoReportArgs),
    /// Run fio, dd or Postmark in a directory (a tenant's disk) and report
    /// throughput and latency; the lab's I/O tenants run this
    Workload(IoWorkloadArgs),
    /// From a document-004 sweep (a lab results directory): per workload and
    /// data size, the memory, direct/buffered and swap setting that measured
    /// best, its margin, and which of document 004's findings this host reproduced
    Advise(IoAdviseArgs),
}

#[derive(Args)]
struct IoAdviseArgs {
    /// A lab results directory (ontime lab run -o DIR) of I/O tenants
    results: PathBuf,
    #[command(flatten)]
    out: output::OutputFlags,
}

#[derive(Args)]
#[command(mut_arg(
    "duration",
    DurationFlag::help_and_d("How long to record, e.g. 30s [default: until Ctrl-C]", None)
))]
struct IoRecordArgs {
    #[command(flatten)]
    targets: TargetArgs,
    /// A tenant's virtual disk: NAME=IMAGE, the image file attached to a loop
    /// device and mounted in the tenant (lab tenants' disks are found
    /// without it), or NAME=/dev/X, a block device that is the virtual disk
    /// itself (inside a guest: its /dev/vda); repeatable
    #[arg(long, value_name = "NAME=IMAGE")]
    disk: Vec<String>,
    /// The recording file
    #[arg(short = 'o', long, default_value = "io.otrec")]
    output: PathBuf,
    #[command(flatten)]
    duration: DurationFlag,
    /// How often the ring is drained to the file
    #[arg(long, default_value = "100ms", value_parser = parse_ns)]
    drain_every: u64,
    /// How often the caches' sizes, the memory cgroups and the threads' I/O
    /// counters are sampled
    #[arg(long, default_value = "250ms", value_parser = parse_ns)]
    state_every: u64,
    /// Trace every read, write, fsync and open on a file (sizes, latency,
    /// files, O_DIRECT share) through the syscall tracepoints. They put every
    /// system call of every task on the kernel's slow path: on this VM a
    /// cached 4 KiB read ran at a third of its speed (bench/results.md).
    /// Without it the application layer is each thread's I/O counters
    #[arg(long)]
    calls: bool,
    /// Count the bios each virtual disk receives, their merges and splits
    /// (document 004's request splitting): four block tracepoints fire on
    /// every bio of the host (bench/results.md has their cost)
    #[arg(long)]
    merges: bool,
    /// Print the report when the recording ends
    #[arg(long)]
    report: bool,
    #[command(flatten)]
    out: output::OutputFlags,
}

#[derive(Args)]
struct IoReportArgs {
    /// A recording made by `ontime io record`
    recording: PathBuf,
    /// Write figures (bytes per second at each layer, SVG and PNG) here
    #[arg(long, value_name = "DIR")]
    figures: Option<PathBuf>,
    /// Include the time series in the JSON
    #[arg(long)]
    series: bool,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn run(args: IoArgs) -> anyhow::Result<()> {
    match args.action {
        IoAction::Record(a) => record(a),
        IoAction::Report(a) => report(&a.recording, a.figures.as_deref(), a.series, &a.out),
        IoAction::Workload(a) => workload(a),
        IoAction::Advise(a) => advise(a),
    }
}

fn record(a: IoRecordArgs) -> anyhow::Result<()> {
    let targets = a.targets.resolve()?;
    if targets.everything {
        return Err(bad_input(
            "io record watches named tenants; --all is not supported (name them with --lab, --cgroup or --pid)",
        ));
    }
    // A QEMU guest's virtual disk is its QEMU's reads and writes of each
    // image: through its thread pool only per-call tracing sees which file
    // a call was on; Linux AIO and io_uring have hooks of their own.
    let mut guest_disks = Vec::new();
    for name in &a.targets.guest {
        let (g, group) = targets
            .groups
            .iter()
            .enumerate()
            .find(|(_, g)| &g.name == name)
            .ok_or_else(|| anyhow::anyhow!("a --guest target without its group"))?;
        let pid = ontime_trace::io_vmm::vmm_pid(&group.pids, name)?;
        let disks = ontime_trace::io_vmm::vmm_disks(g as u32, pid)?;
        if disks.is_empty() {
            ontime_core::errln!(
                "ontime: guest {name} (pid {pid}) holds no disk image named on its command line: only its QEMU's other I/O is recorded"
            );
        }
        guest_disks.extend(disks);
    }
    let thread_pool = guest_disks.iter().any(ontime_trace::io::TenantDisk::vmm_thread_pool);
    let calls = a.calls || thread_pool;
    if calls && !a.calls {
        ontime_core::errln!(
            "ontime: --guest traces QEMU's calls on its images (--calls: its thread pool's preadv/pwritev, which carry every request with aio=threads and the misaligned ones with cache=none; only aio=io_uring without cache=none does not need it): every system call on this host is slower while it records"
        );
    }
    crate::cmd_observe::check_recording_times(a.duration.until_stopped(), a.drain_every)?;
    if !(10_000_000..=60_000_000_000).contains(&a.state_every) {
        return Err(bad_input("--state-every must be between 10ms and 60s"));
    }
    output::check_outputs(&[("-o", Some(&a.output)), ("--result", a.out.result.as_deref())])?;
    let mut images: Vec<(u32, PathBuf)> = Vec::new();
    for spec in &a.disk {
        let Some((name, image)) = spec.split_once('=') else {
            return Err(bad_input(format!("--disk {spec}: expected NAME=IMAGE")));
        };
        let Some(g) = targets.groups.iter().position(|g| g.name == name) else {
            return Err(bad_input(format!(
                "--disk {spec}: no tenant named {name} (tenants: {})",
                targets
                    .groups
                    .iter()
                    .map(|g| g.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        let block = ontime_trace::io::BlockDevice::of_node(Path::new(image)).is_some();
        if !Path::new(image).is_file() && !block {
            return Err(bad_input(format!(
                "--disk {spec}: {image} is neither a file nor a block device"
            )));
        }
        images.push((g as u32, PathBuf::from(image)));
    }
    // Lab tenants' disks, by the lab's naming.
    for (g, group) in targets.groups.iter().enumerate() {
        if images.iter().any(|(i, _)| *i == g as u32) {
            continue;
        }
        if let Some(i) = ontime_core::names::tenant_index(&group.name) {
            let image = PathBuf::from(ontime_core::names::tenant_disk_image(i));
            if image.is_file() && ontime_trace::io::loop_device_of(&image).is_some() {
                images.push((g as u32, image));
            }
        }
    }
    let opts = IoRecordOptions {
        targets: targets.clone(),
        images,
        output: a.output.clone(),
        drain_every: Duration::from_nanos(a.drain_every),
        state_every: Duration::from_nanos(a.state_every),
        guest_disks,
        app_layer: if calls {
            ontime_trace::io::AppLayer::Calls
        } else {
            ontime_trace::io::AppLayer::Counters
        },
        merges: a.merges,
    };
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::install_flag(stop.clone())?;
    let names: Vec<&str> = targets.groups.iter().map(|g| g.name.as_str()).collect();
    let until = a.duration.until_stopped();
    let summary = ontime_trace::io::record(&opts, &stop, until.map(Duration::from_nanos), &mut |_| {
        ontime_core::errln!(
            "ontime: recording the I/O of {} ({} virtual disk(s)) to {} {}",
            names.join(", "),
            opts.images.len(),
            a.output.display(),
            until
                .map(|d| format!("for {}", format_ns(d)))
                .unwrap_or_else(|| "until Ctrl-C".into())
        );
    })?;
    let text = ontime_core::export::TextReport::text(&summary);
    if a.report {
        ontime_core::err!("{text}");
        return report(&a.output, None, false, &a.out);
    }
    a.out.emit(&summary, &text)
}

fn report(path: &Path, figures: Option<&Path>, series: bool, out: &output::OutputFlags) -> anyhow::Result<()> {
    output::check_outputs(&[("--result", out.result.as_deref())])?;
    let rec = Recording::read(path).map_err(|e| bad_input(format!("{e:#}")))?;
    let mut analysis = ontime_io::analyze(&rec, path).map_err(|e| bad_input(format!("{e:#}")))?;
    if let Some(dir) = figures {
        let files = ontime_io::figures(&analysis, dir)?;
        ontime_core::errln!("ontime: wrote {} figures to {}", files.len(), dir.display());
    }
    if !series {
        for t in &mut analysis.tenants {
            t.series.clear();
        }
    }
    out.emit(&analysis, &ontime_core::export::TextReport::text(&analysis))
}

/// `io workload -D` when not given: 10 s.
const WORKLOAD_DURATION_NS: u64 = 10_000_000_000;

#[derive(Args)]
#[command(mut_arg(
    "duration",
    DurationFlag::help_and_d(
        "How long fio runs; Postmark is sized to about this long; dd makes one pass",
        Some(WORKLOAD_DURATION_NS)
    )
))]
struct IoWorkloadArgs {
    /// fio (sequential or random I/O), dd (one sequential pass), postmark
    /// (small files) or command (your own program, after --)
    #[arg(long, default_value = "fio")]
    tool: ontime_io::workload::Tool,
    /// read, write, randread, randwrite, randrw (fio); read, write (dd)
    #[arg(long, default_value = "randread")]
    rw: String,
    /// The data set, e.g. 256M
    #[arg(long, default_value = "256M")]
    size: String,
    /// Request size, e.g. 4k or 1M
    #[arg(long, default_value = "4k")]
    bs: String,
    /// O_DIRECT (fio, dd)
    #[arg(long)]
    direct: bool,
    /// Where the data goes (a tenant's disk is mounted at /mnt/ontime-disk)
    #[arg(long, default_value = ontime_core::names::DISK_MOUNT)]
    dir: PathBuf,
    #[command(flatten)]
    duration: DurationFlag,
    /// Keep the tool's own output here
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
    /// With --tool command: the program and its arguments
    #[arg(last = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

fn workload(a: IoWorkloadArgs) -> anyhow::Result<()> {
    execute_workload(
        IoWorkloadProbe {
            workload: ontime_io::workload::WorkloadSpec {
                tool: a.tool,
                rw: a.rw,
                size: a.size,
                bs: a.bs,
                direct: a.direct,
                command: a.command,
            },
            dir: a.dir,
            duration_s: a.duration.or(WORKLOAD_DURATION_NS) / 1_000_000_000,
            log: a.log,
            result: a.out.result.clone(),
        },
        &a.out,
    )
}

/// An I/O workload, whether its flags or a lab spec built it.
pub fn execute_workload(p: IoWorkloadProbe, out: &output::OutputFlags) -> anyhow::Result<()> {
    if !p.dir.is_dir() {
        return Err(bad_input(format!(
            "--dir {}: no such directory (give the tenant disk's mount point)",
            p.dir.display()
        )));
    }
    output::check_outputs(&[("--result", p.result.as_deref()), ("--log", p.log.as_deref())])?;
    p.validate().map_err(bad_input)?;
    let r = ontime_io::workload::run(&p.workload, &p.dir, p.duration_s, p.log.as_deref())?;
    output::emit(
        &r,
        &ontime_core::export::TextReport::text(&r),
        out.json,
        p.result.as_deref(),
    )
}

fn advise(a: IoAdviseArgs) -> anyhow::Result<()> {
    output::check_outputs(&[("--result", a.out.result.as_deref())])?;
    let dirs = ontime_scenario::results::run_dirs(&a.results).map_err(|e| bad_input(format!("{e:#}")))?;
    let mut runs = Vec::new();
    for d in dirs {
        match ontime_scenario::results::read_run(&d) {
            Ok(r) => runs.push(r),
            Err(e) => ontime_core::errln!("ontime: skipping {}: {e:#}", d.display()),
        }
    }
    let report = ontime_report::iocells::advice(&runs);
    if report.cells == 0 {
        return Err(bad_input(format!(
            "{} has no finished run of I/O tenants ([tenant.io] with tenant.memory); run e.g. scenarios/doc-004.toml",
            a.results.display()
        )));
    }
    a.out.emit(&report, &ontime_core::export::TextReport::text(&report))
}
