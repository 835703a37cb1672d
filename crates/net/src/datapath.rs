//! Document 003's data path in the kernel (`src/bpf/channel.bpf.c`): the
//! stamp (tc egress on a sending tenant's veth, inside its network
//! namespace) and the check (XDP on a receiving veth), their shared maps
//! (channel table, per-channel counters, the misses ring) and their
//! attachment into named network namespaces. Hooks are removed when the
//! [`DataPath`] drops; deleting the namespace removes them too.
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, OpenObject, RingBufferBuilder, TcHookBuilder, Xdp, XdpFlags, TC_EGRESS};

mod skel {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/channel.skel.rs"));
}
use skel::types;
use skel::{ChannelSkel, ChannelSkelBuilder};

pub use crate::controller::{ChannelCounts, FlowMatch, Miss};

/// Runs `f` with this thread in the network namespace `netns` (a file
/// such as /run/netns/NAME), then puts the thread back.
fn in_netns<T>(netns: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let own = std::fs::File::open("/proc/thread-self/ns/net").context("opening this thread's network namespace")?;
    let target = std::fs::File::open(netns).with_context(|| format!("no network namespace {}", netns.display()))?;
    // SAFETY: setns on valid namespace fds; the thread is put back below.
    if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("entering {}", netns.display()));
    }
    let r = f();
    // SAFETY: as above.
    if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        // The thread cannot go home: nothing it does after is safe.
        panic!(
            "cannot return to the original network namespace: {}",
            std::io::Error::last_os_error()
        );
    }
    r
}

/// The bytes of a struct the skeleton generated from channel.bpf.c.
fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: T is one of the skeleton's #[repr(C)] plain-data structs
    // (integers only, padding spelt out as fields), read as bytes.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// A skeleton struct from the bytes the kernel gave, if there are enough.
fn read_as<T: Copy>(b: &[u8]) -> Option<T> {
    // SAFETY: T is plain data (integers); the length is checked and the
    // read is unaligned.
    (b.len() >= std::mem::size_of::<T>()).then(|| unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

fn flow_key(flow: FlowMatch) -> types::chan_key {
    types::chan_key {
        // Network order in memory, as the packet carries them.
        saddr: u32::from_ne_bytes(flow.src.octets()),
        daddr: u32::from_ne_bytes(flow.dst.octets()),
        dport: u16::from_ne_bytes(flow.dport.unwrap_or(0).to_be_bytes()),
        pad: 0,
    }
}

fn ifindex(name: &str) -> Result<i32> {
    let c = std::ffi::CString::new(name).context("interface name")?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {name} in this namespace");
    }
    Ok(i as i32)
}

pub struct DataPath<'obj> {
    skel: ChannelSkel<'obj>,
    stamps: Vec<(PathBuf, i32)>,
    checks: Vec<(PathBuf, i32)>,
}

impl<'obj> DataPath<'obj> {
    /// Loads the programs and their maps; nothing is attached yet.
    pub fn load(object: &'obj mut MaybeUninit<OpenObject>) -> Result<DataPath<'obj>> {
        let open = ChannelSkelBuilder::default()
            .open(object)
            .context("opening the channel programs failed")?;
        let skel = open.load().map_err(|e| {
            anyhow::anyhow!("loading the channel programs failed: {e}. They need root (CAP_BPF, CAP_NET_ADMIN)")
        })?;
        Ok(DataPath {
            skel,
            stamps: Vec::new(),
            checks: Vec::new(),
        })
    }

    /// Puts a channel in the table the stamp reads: packets of `flow` get
    /// DSCP `id` (1..63), traffic class `tc` and the deadline now + `deadline_ns`.
    pub fn set_channel(&self, flow: FlowMatch, id: u8, tc: u8, deadline_ns: u64) -> Result<()> {
        if !(1..64).contains(&id) {
            bail!("channel id {id}: give 1..63 (it is the DSCP)");
        }
        self.skel
            .maps
            .relative
            .update(&(id as u32).to_ne_bytes(), &deadline_ns.to_ne_bytes(), MapFlags::ANY)
            .context("setting the channel's relative deadline for the check")?;
        let key = flow_key(flow);
        let val = types::chan_val {
            id: id as u32,
            tc: tc as u32,
            deadline_ns,
        };
        self.skel
            .maps
            .channels
            .update(bytes_of(&key), bytes_of(&val), MapFlags::ANY)
            .context("adding a channel to the stamp's table")
    }

    /// Takes a channel out of the stamp's table (its packets pass untouched).
    pub fn remove_channel(&self, flow: FlowMatch) -> Result<()> {
        self.skel
            .maps
            .channels
            .delete(bytes_of(&flow_key(flow)))
            .context("removing a channel from the stamp's table")
    }

    /// The stamp on `ifname`'s egress in network namespace `netns`.
    pub fn stamp_on(&mut self, netns: &Path, ifname: &str) -> Result<()> {
        let fd = self.skel.progs.stamp.as_fd();
        let idx = in_netns(netns, || {
            let idx = ifindex(ifname)?;
            let mut hook = TcHookBuilder::new(fd)
                .ifindex(idx)
                .replace(true)
                .handle(1)
                .priority(1)
                .hook(TC_EGRESS);
            hook.create().context("tc clsact qdisc")?;
            hook.attach()
                .with_context(|| format!("attaching the stamp to {ifname}"))?;
            Ok(idx)
        })?;
        self.stamps.push((netns.to_path_buf(), idx));
        Ok(())
    }

    /// The check (XDP) on `ifname` in network namespace `netns`.
    pub fn check_on(&mut self, netns: &Path, ifname: &str) -> Result<()> {
        let fd = self.skel.progs.check.as_fd();
        let idx = in_netns(netns, || {
            let idx = ifindex(ifname)?;
            Xdp::new(fd)
                .attach(idx, XdpFlags::NONE)
                .with_context(|| format!("attaching the check (XDP) to {ifname}"))?;
            Ok(idx)
        })?;
        self.checks.push((netns.to_path_buf(), idx));
        Ok(())
    }

    pub fn counts(&self, channel: u8) -> ChannelCounts {
        let mut c = ChannelCounts::default();
        let Ok(Some(per_cpu)) = self
            .skel
            .maps
            .stats
            .lookup_percpu(&(channel as u32).to_ne_bytes(), MapFlags::ANY)
        else {
            return c;
        };
        for s in per_cpu.iter().filter_map(|v| read_as::<types::chan_stats>(v)) {
            c.stamped += s.stamped;
            c.on_time += s.on_time;
            c.missed += s.missed;
            c.max_overrun_ns = c.max_overrun_ns.max(s.max_overrun_ns);
            c.delay_sum_ns += s.delay_sum_ns;
            c.delay_max_ns = c.delay_max_ns.max(s.delay_max_ns);
            c.delay_count += s.delay_count;
            c.stamped_bytes += s.stamped_bytes;
        }
        c
    }

    /// (malformed or foreign MPLS frames dropped by the check, stamp failures).
    pub fn errors(&self) -> (u64, u64) {
        let sum = |i: u32| {
            self.skel
                .maps
                .errors
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .ok()
                .flatten()
                .map(|v| {
                    v.iter()
                        .filter_map(|b| b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes))
                        .sum()
                })
                .unwrap_or(0)
        };
        (sum(0), sum(1))
    }

    /// The misses reported since the last call.
    pub fn misses(&self) -> Result<Vec<Miss>> {
        let out = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let sink = out.clone();
        let mut rb = RingBufferBuilder::new();
        rb.add(&self.skel.maps.misses, move |d: &[u8]| {
            if let Some(m) = read_as::<types::miss>(d) {
                sink.borrow_mut().push(Miss {
                    channel: m.channel as u8,
                    overrun_ns: m.overrun_ns,
                    ip_id: m.ip_id,
                    checked_ns: m.checked_ns,
                });
            }
            0
        })?;
        rb.build()?.consume().context("reading the misses")?;
        let v = out.borrow().clone();
        Ok(v)
    }
}

impl Drop for DataPath<'_> {
    fn drop(&mut self) {
        let stamp = self.skel.progs.stamp.as_fd();
        for (ns, idx) in &self.stamps {
            let _ = in_netns(ns, || {
                let mut hook = TcHookBuilder::new(stamp)
                    .ifindex(*idx)
                    .handle(1)
                    .priority(1)
                    .hook(TC_EGRESS);
                let _ = hook.detach();
                let _ = hook.destroy();
                Ok(())
            });
        }
        let check = self.skel.progs.check.as_fd();
        for (ns, idx) in &self.checks {
            let _ = in_netns(ns, || {
                let _ = Xdp::new(check).detach(*idx, XdpFlags::NONE);
                Ok(())
            });
        }
    }
}

/// The controller's [`crate::controller::Plane`] on this data path: the
/// stamp on every sender's interface, the check on every receiver's.
pub struct BpfPlane {
    dp: DataPath<'static>,
}

impl BpfPlane {
    /// Loads the programs and attaches them: stamps on `senders`, checks on
    /// `receivers` (network namespace file, interface name).
    pub fn attach(senders: &[(PathBuf, String)], receivers: &[(PathBuf, String)]) -> Result<BpfPlane> {
        // The skeleton borrows its object for as long as it lives, and the
        // plane lives as long as its controller: the object (a few hundred
        // bytes) is leaked once per controller.
        let object: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let mut dp = DataPath::load(object)?;
        for (ns, ifname) in senders {
            dp.stamp_on(ns, ifname)?;
        }
        for (ns, ifname) in receivers {
            dp.check_on(ns, ifname)?;
        }
        Ok(BpfPlane { dp })
    }
}

impl crate::controller::Plane for BpfPlane {
    fn install(&mut self, id: u8, flow: FlowMatch, tc: u8, deadline_ns: u64) -> Result<()> {
        self.dp.set_channel(flow, id, tc, deadline_ns)
    }
    fn remove(&mut self, flow: FlowMatch) -> Result<()> {
        self.dp.remove_channel(flow)
    }
    fn counts(&self, id: u8) -> ChannelCounts {
        self.dp.counts(id)
    }
    fn misses(&mut self) -> Vec<Miss> {
        self.dp.misses().unwrap_or_default()
    }
    fn errors(&self) -> (u64, u64) {
        self.dp.errors()
    }
    fn cost(&self) -> Option<crate::controller::PlaneCost> {
        let (stamp_runs, stamp_ns) = run_stats(self.dp.skel.progs.stamp.as_fd());
        let (check_runs, check_ns) = run_stats(self.dp.skel.progs.check.as_fd());
        // Zero time for packets that ran: the kernel is not measuring.
        (stamp_ns + check_ns > 0).then_some(crate::controller::PlaneCost {
            stamp_runs,
            stamp_ns,
            check_runs,
            check_ns,
        })
    }
}

/// (runs, total ns) of a program, as the kernel counts them while
/// kernel.bpf_stats_enabled is set.
fn run_stats(fd: std::os::fd::BorrowedFd<'_>) -> (u64, u64) {
    let mut info = libbpf_sys::bpf_prog_info::default();
    let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
    // SAFETY: a valid program fd and an info struct of the stated size.
    let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
    if rc != 0 {
        return (0, 0);
    }
    (info.run_cnt, info.run_time_ns)
}
