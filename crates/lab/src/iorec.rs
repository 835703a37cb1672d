//! The I/O recorder of a run (`[observe] io = true`): `ontime io record` on
//! the tenants' cgroups and disks while the workloads run, then the layered
//! analysis (io.json, io.txt, figures in io/).
use ontime_scenario::record::IoOutcome;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Result;
use ontime_trace::io::{AppLayer, IoRecordOptions, IoRecordSummary};
use ontime_trace::recording::Recording;
use ontime_trace::targets::{CgroupRoot, TargetGroup, Targets};

use crate::names;
use crate::observe::StopOnDrop;
use crate::qemu::GuestSetup;
use crate::sandbox::Lab;

pub struct IoObserver {
    stop: StopOnDrop,
    handle: JoinHandle<Result<IoRecordSummary>>,
    /// QEMU tenants recorded from inside too: (index, name).
    guests: Vec<(usize, String)>,
}

/// Starts the I/O recorder. QEMU tenants (`guests`): the virtual disk is
/// QEMU's requests on the image; through its thread pool only per-call
/// tracing tells them apart.
pub fn start(lab: &Lab, dir: &Path, calls: bool, guests: Option<&GuestSetup>) -> Result<IoObserver> {
    let root = CgroupRoot::detect()?;
    let mut groups = Vec::new();
    let mut images = Vec::new();
    let mut guest_disks = Vec::new();
    for t in lab.tenants.iter().filter(|t| t.cgroup.is_some()) {
        let path = root.resolve(&names::tenant_cgroup(t.index))?;
        let group = groups.len() as u32;
        match guests {
            Some(g) => guest_disks.extend(g.image_disk(t.index, group)?),
            None => {
                if let Some(d) = &t.disk {
                    images.push((group, d.image.clone()));
                }
            }
        }
        groups.push(TargetGroup::cgroup(&names::tenant_name(t.index), path, false));
    }
    let inside: Vec<(usize, String)> = match guests {
        Some(_) => lab
            .tenants
            .iter()
            .filter(|t| t.cgroup.is_some())
            .map(|t| (t.index, names::tenant_name(t.index)))
            .collect(),
        None => Vec::new(),
    };
    // QEMU's thread pool is seen only through its calls.
    let calls = calls || guest_disks.iter().any(ontime_trace::io::TenantDisk::vmm_thread_pool);
    let opts = IoRecordOptions {
        targets: Targets {
            groups,
            everything: false,
            host_io: vec![],
        },
        images,
        guest_disks,
        output: dir.join("io.otrec"),
        drain_every: Duration::from_millis(100),
        state_every: Duration::from_millis(250),
        app_layer: if calls { AppLayer::Calls } else { AppLayer::Counters },
        // The lab's cost does not matter: document 004's splits and merges.
        merges: true,
    };
    let (stop, handle) = crate::observe::spawn_recorder("io-record", move |stop, ready| {
        ontime_trace::io::record(&opts, stop, None, ready)
    })?;
    Ok(IoObserver {
        stop,
        handle,
        guests: inside,
    })
}

impl IoObserver {
    pub fn finish(self, dir: &Path) -> IoOutcome {
        self.stop.0.store(true, Ordering::Relaxed);
        let mut out = IoOutcome::default();
        let summary = match self.handle.join() {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                out.error = Some(format!("{e:#}"));
                return out;
            }
            Err(_) => {
                out.error = Some("the I/O recorder thread panicked".into());
                return out;
            }
        };
        out.file = Some("io.otrec".into());
        out.events = Some(summary.events);
        out.lost = Some(summary.lost);
        out.reader_cpu_ns = Some(summary.reader_cpu_ns);
        match analyse(&dir.join("io.otrec"), dir, &self.guests) {
            Ok(()) => out.analysis = Some("io.json".into()),
            Err(e) => out.error = Some(format!("analysis: {e:#}")),
        }
        out
    }
}

fn analyse(file: &Path, dir: &Path, guests: &[(usize, String)]) -> Result<()> {
    let rec = Recording::read(file)?;
    let mut a = ontime_io::analyze(&rec, file)?;
    // Each guest's own recording (its job ran `ontime io record` inside).
    for (i, name) in guests {
        let inside = dir.join(format!("t{i}.{}", crate::qemu::GUEST_IO_RECORDING));
        let merged = Recording::read(&inside).and_then(|r| {
            let g = ontime_io::analyze(&r, &inside)?;
            let clock = guest_clock(&rec, &a, name, &r);
            let view = ontime_io::GuestRecording {
                analysis: &g,
                start_ns: r.meta.start_ns,
                clock,
            };
            Ok(ontime_io::merge_guest(&mut a, name, &view))
        });
        match merged {
            Ok(true) => {}
            Ok(false) => a
                .unavailable
                .push(format!("{}: no tenant {name} in it", inside.display())),
            Err(e) => a.unavailable.push(format!(
                "the recording inside guest {name} ({e:#}; see t{i}.guest-io.err)"
            )),
        }
    }
    ontime_io::figures(&a, &dir.join("io"))?;
    ontime_core::fsio::write_atomic(&dir.join("io.json"), &serde_json::to_vec(&a)?)?;
    ontime_core::fsio::write_atomic(&dir.join("io.txt"), ontime_io::text(&a).as_bytes())?;
    Ok(())
}

/// The guest's clock against the host's, from its disk's requests and its
/// QEMU's calls on the image (`ontime_io::clock_offset`).
fn guest_clock(
    host: &Recording,
    a: &ontime_io::IoAnalysis,
    name: &str,
    guest: &Recording,
) -> Option<ontime_io::ClockOffset> {
    let group = a.tenants.iter().position(|t| t.name == name)? as u32;
    let image = a.tenants[group as usize].disk.as_ref()?.image_file?;
    let guest_dev = guest.meta.io.as_ref()?.disks.first()?.loop_device.as_ref()?.dev;
    ontime_io::clock_offset(host, group, image, guest, guest_dev)
}
