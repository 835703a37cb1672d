//! `ontime explain RESULT RECORDING`: why the late events a probe kept
//! (`ontime crawl|cyclic --keep-late`) were late, on a scheduler recording
//! made beside the run (`ontime observe record --all`), on the same clock;
//! for a probe that ran in a QEMU guest, on the guest's own recording
//! placed on the host's clock and split by the host's at the vCPU threads.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use ontime_core::bad_input;
use ontime_core::late::LateSet;
use ontime_explain::summary::RunExplanation;
use ontime_trace::recording::Recording;

use crate::output;

#[derive(Args)]
pub struct ExplainArgs {
    /// A probe's JSON result holding `late_events` (crawl or cyclic with
    /// --keep-late or --explain)
    #[arg(value_name = "RESULT")]
    probe_result: PathBuf,
    /// A recording of every CPU made during the run (`ontime observe
    /// record --all`); with --guest, the host's
    recording: PathBuf,
    /// RESULT's probe ran in a QEMU guest: the recording made inside it
    /// during the run (`ontime observe record --all` in the guest). Each
    /// late event is explained in the guest and split by RECORDING, the
    /// host's, at the guest's vCPU threads
    #[arg(long, value_name = "RECORDING", requires = "guest_clock")]
    guest: Option<PathBuf>,
    /// The guest's clock against the host's, measured in the guest
    /// (`ontime net clock measure --server HOST:5399 --result FILE` beside
    /// `ontime net clock echo` on the host)
    #[arg(long, value_name = "FILE", requires = "guest")]
    guest_clock: Option<PathBuf>,
    /// The guest's QEMU process on the host [default: the one process in
    /// RECORDING with vCPU threads]
    #[arg(long, value_name = "PID", requires = "guest")]
    vm: Option<u32>,
    /// RESULT is a flow's receiver (`ontime net receive`): its sender's
    /// report (`ontime net send --result FILE`), whose thread is then read
    /// for the time a late datagram had not left it
    #[arg(long, value_name = "FILE", conflicts_with = "guest")]
    sender: Option<PathBuf>,
    /// RESULT is a flow's receiver: the path's set one-way delay (a
    /// relay's or an emulated WAN's), not counted against the path
    #[arg(long, value_name = "DURATION", value_parser = ontime_core::duration::parse_ns, default_value = "0", conflicts_with = "guest")]
    path_delay: u64,
    /// Also write the scheduling around the worst late events as a
    /// Perfetto trace (ui.perfetto.dev; not with --guest)
    #[arg(long, value_name = "FILE", conflicts_with = "guest")]
    perfetto: Option<PathBuf>,
    #[command(flatten)]
    out: output::OutputFlags,
}

pub fn run(a: ExplainArgs) -> Result<()> {
    output::check_outputs(&[
        ("--result", a.out.result.as_deref()),
        ("--perfetto", a.perfetto.as_deref()),
    ])?;
    let Some((late, what)) = ontime_explain::kept::read(&a.probe_result)? else {
        return Err(bad_input(format!(
            "{}: no late_events: run the probe with --keep-late (or --explain)",
            a.probe_result.display()
        )));
    };
    let rec = read_recording(&a.recording)?;
    let x = match (&a.guest, &a.guest_clock) {
        (Some(guest), Some(clock)) => explain_guest(&rec, guest, clock, a.vm, &late)?,
        // A flow receiver waits for datagrams, not for its timer.
        _ if what == ontime_explain::kept::FLOW_WHAT => {
            let path = ontime_explain::summary::DatagramPath {
                sender_tid: a.sender.as_deref().map(sender_tid).transpose()?,
                nominal_ns: a.path_delay,
            };
            crate::explain::explain_datagrams(&rec, &late, path, a.perfetto.as_deref())?
        }
        _ if a.sender.is_some() || a.path_delay > 0 => {
            return Err(bad_input(format!(
                "--sender and --path-delay go with a flow receiver's result (`ontime net receive`); {} keeps {what}",
                a.probe_result.display()
            )))
        }
        _ => crate::explain::explain(
            &crate::explain::Recorded::Whole(Box::new(rec)),
            &late,
            a.perfetto.as_deref(),
        )?,
    };
    let text = x.text(what);
    a.out.emit(&x, &text)
}

/// The sending thread a flow sender's report names.
fn sender_tid(report: &Path) -> Result<u32> {
    let text = std::fs::read(report).map_err(|e| bad_input(format!("--sender {}: {e}", report.display())))?;
    let r: ontime_net::flow::SendReport = serde_json::from_slice(&text).map_err(|e| {
        bad_input(format!(
            "--sender {}: not a sender's report (`ontime net send --result FILE`): {e}",
            report.display()
        ))
    })?;
    r.tid.ok_or_else(|| {
        bad_input(format!(
            "--sender {}: names no thread (written by an older ontime): send again",
            report.display()
        ))
    })
}

fn read_recording(path: &Path) -> Result<Recording> {
    Recording::read(path).map_err(|e| bad_input(format!("{e:#}")))
}

/// A guest probe's late events on the guest's recording, placed on the
/// host's clock by the measured offset and split by the host's at the
/// vCPU threads of its QEMU process.
fn explain_guest(
    host: &Recording,
    guest: &Path,
    clock: &Path,
    vm: Option<u32>,
    late: &LateSet,
) -> Result<RunExplanation> {
    let guest_rec = read_recording(guest)?;
    let offset = ontime_net::clock::read_offset(clock)
        .map_err(|e| bad_input(format!("--guest-clock: {e:#}")))?
        .offset_ns;
    let vms = ontime_explain::summary::vm_processes(host);
    let pid = match vm {
        Some(pid) if vms.contains(&pid) => pid,
        Some(pid) => {
            return Err(bad_input(format!(
            "--vm {pid}: no vCPU threads (CPU n/KVM or CPU n/TCG) of that process in {}; QEMU processes there: {vms:?}",
            "the host's recording"
        )))
        }
        None => match vms.as_slice() {
            [pid] => *pid,
            [] => {
                return Err(bad_input(
                    "the host's recording has no QEMU vCPU threads (CPU n/KVM or CPU n/TCG): record the host with \
                     `ontime observe record --all` while the guest runs"
                        .to_string(),
                ))
            }
            many => {
                return Err(bad_input(format!(
                    "the host's recording has several QEMU processes ({many:?}): say which ran the guest with --vm PID"
                )))
            }
        },
    };
    let vcpus = ontime_explain::summary::vcpu_threads_of_process(host, pid);
    let qemu = ontime_explain::summary::threads_of_process(host, pid);
    let tl = ontime_explain::timeline::Timeline::from_recording(host, &qemu);
    let mut x = ontime_explain::summary::explain_guest_on(&tl, host, &guest_rec, offset, &vcpus, late);
    x.notes.push(format!(
        "in a QEMU guest: its recording placed on the host's clock (offset {} ns), split at QEMU {pid}'s {} vCPU thread(s)",
        offset,
        vcpus.len()
    ));
    Ok(x)
}
