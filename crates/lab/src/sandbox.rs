//! Sandbox tenants and the building side, built transactionally.
//!
//! Network: every tenant and the building side get their own network
//! namespace and a veth pair whose host end is left without an address.
//! They share one /16 with static neighbour entries, so no packet crosses
//! the host's IP stack: the host relay moves every frame between the host
//! ends (see `relay`). Each tenant also gets a cgroup.
//!
//! Every step that creates something pushes its undo onto a stack; a failure
//! half-way, or dropping the [`Lab`], runs the stack in reverse. What escapes
//! (the runner SIGKILLed) is found by `clean` through the common prefix.

use crate::cgroup::{self, Cgroup, Limits};
use crate::names;
use crate::sys::ip;
pub use crate::undo::Undo;
use anyhow::{Context, Result};
use ontime_core::proc::{ChildProcess, SpawnOptions};
use std::process::Command;

/// One side of the lab network: a namespace, its address and its veth.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub netns: String,
    pub addr: std::net::Ipv4Addr,
    /// Host-side interface (the relay's port).
    pub host_if: String,
    pub host_ifindex: i32,
    /// Namespace-side interface and its MAC.
    pub ns_if: String,
    pub mac: [u8; 6],
}

impl Endpoint {
    /// Receive packet steering on this endpoint's own end: frames arriving
    /// on it are processed (NET_RX softirq) on `cpu`, whichever CPU sent
    /// them onto the veth. The namespace goes with the lab, and this with
    /// it.
    pub fn steer_receipt_to(&self, cpu: usize) -> Result<()> {
        // The kernel reads the mask in comma-separated 32-bit groups,
        // highest first.
        let mut mask = format!("{:x}", 1u32 << (cpu % 32));
        for _ in 0..cpu / 32 {
            mask.push_str(",00000000");
        }
        let file = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", self.ns_if);
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.netns,
                "sh",
                "-c",
                &format!("echo {mask} > {file}"),
            ])
            .output()
            .context("cannot run ip netns exec")?;
        anyhow::ensure!(
            out.status.success(),
            "cannot steer {}'s receipt to CPU {cpu} ({file}): {} (a kernel without CONFIG_RPS cannot)",
            self.ns_if,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }

    /// The relay's view of this endpoint: its host-side interface and the
    /// station behind it.
    pub fn port(&self) -> ontime_net::port::PortId {
        ontime_net::port::PortId {
            ifindex: self.host_ifindex,
            mac: self.mac,
        }
    }
}

/// What a tenant is given.
#[derive(Clone, Debug, Default)]
pub struct TenantSpec {
    pub limits: Limits,
    /// A virtual disk (document 004), mounted in its own mount namespace.
    pub disk: Option<crate::disk::DiskSpec>,
}

pub struct Tenant {
    pub index: usize,
    pub net: Endpoint,
    pub cgroup: Option<Cgroup>,
    pub disk: Option<crate::disk::Disk>,
}

impl Tenant {
    /// Spawns `cmd` inside the tenant: its network namespace, its mount
    /// namespace when it has a disk, and its cgroup unless `native`.
    pub fn spawn(&self, cmd: &mut Command, native: bool, opts: SpawnOptions) -> Result<ChildProcess> {
        spawn_with(
            cmd,
            &self.net.netns,
            if native { None } else { self.cgroup.as_ref() },
            SpawnOptions {
                mntns: self.disk.as_ref().map(|d| d.mntns.clone()),
                ..opts
            },
        )
    }
}

/// The whole lab on this host: building side plus tenants. Dropping it
/// tears everything down.
pub struct Lab {
    pub building: Endpoint,
    pub tenants: Vec<Tenant>,
    pub cgroup_version: Option<cgroup::Version>,
    /// Each tenant cgroup's real-time budget per second, with RT group
    /// scheduling.
    pub tenant_rt_runtime_us: Option<u64>,
    /// The CPUs the tenants are pinned to (their cpusets together; empty:
    /// not pinned), so the lab's own threads can keep off them.
    pub tenant_cpus: Vec<usize>,
    children: Vec<ChildProcess>,
    undo: Undo,
}

impl Lab {
    /// What of the lab is gone while it should exist (namespaces, cgroups,
    /// host-side links): something outside the run removed it, e.g.
    /// `ontime lab clean --force`.
    pub fn vanished(&self) -> Vec<String> {
        let mut gone = Vec::new();
        for e in std::iter::once(&self.building).chain(self.tenants.iter().map(|t| &t.net)) {
            if !crate::names::netns_file(&e.netns).exists() {
                gone.push(format!("namespace {}", e.netns));
            }
            if !std::path::Path::new("/sys/class/net").join(&e.host_if).exists() {
                gone.push(format!("link {}", e.host_if));
            }
        }
        for t in &self.tenants {
            for d in t.cgroup.iter().flat_map(|c| &c.dirs) {
                if !d.exists() {
                    gone.push(format!("cgroup {}", d.display()));
                }
            }
        }
        gone
    }
}

fn mac_for(i: u32) -> [u8; 6] {
    // Locally administered, unicast.
    [0x02, 0x77, (i >> 24) as u8, (i >> 16) as u8, (i >> 8) as u8, i as u8]
}

pub(crate) fn mac_text(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

/// A permanent neighbour entry in `at`'s namespace: `addr` is at `mac`.
fn static_neighbour(at: &Endpoint, addr: std::net::Ipv4Addr, mac: &[u8; 6]) -> Result<()> {
    let (addr, mac) = (addr.to_string(), mac_text(mac));
    ip(&[
        "-n",
        &at.netns,
        "neigh",
        "replace",
        &addr,
        "lladdr",
        &mac,
        "dev",
        &at.ns_if,
        "nud",
        "permanent",
    ])
}

fn ifindex(name: &str) -> Result<i32> {
    let t = std::fs::read_to_string(format!("/sys/class/net/{name}/ifindex"))
        .with_context(|| format!("interface {name} vanished"))?;
    t.trim().parse().with_context(|| format!("bad ifindex for {name}"))
}

/// Creates namespace `netns` with a veth pair (`host_if` stays on the host,
/// `ns_if` moves in with address `addr`).
fn endpoint(
    undo: &mut Undo,
    netns: String,
    host_if: String,
    ns_if: String,
    addr: std::net::Ipv4Addr,
    mac: [u8; 6],
) -> Result<Endpoint> {
    if names::netns_file(&netns).exists() {
        anyhow::bail!(
            "network namespace {netns} exists already: another lab is running, or one was killed (`ontime lab clean` removes what it left)"
        );
    }
    ip(&["netns", "add", &netns])?;
    let n = netns.clone();
    undo.push(format!("delete netns {netns}"), move || {
        let _ = ip(&["netns", "del", &n]);
    });
    ip(&[
        "link",
        "add",
        &host_if,
        "type",
        "veth",
        "peer",
        "name",
        &ns_if,
        "address",
        &mac_text(&mac),
    ])?;
    let h = host_if.clone();
    undo.push(format!("delete link {host_if}"), move || {
        let _ = ip(&["link", "del", &h]);
    });
    ip(&["link", "set", &ns_if, "netns", &netns])?;
    ip(&[
        "-n",
        &netns,
        "addr",
        "add",
        &format!("{addr}/{}", names::PREFIX_LEN),
        "dev",
        &ns_if,
    ])?;
    ip(&["-n", &netns, "link", "set", "lo", "up"])?;
    ip(&["-n", &netns, "link", "set", &ns_if, "up"])?;
    // veth leaves checksums to "hardware" that does not exist once the
    // relay copies frames through packet sockets: compute them in software.
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", &netns, "ethtool", "-K", &ns_if, "tx", "off"])
        .output()
        .context("cannot run ethtool (install ethtool: scripts/setup.sh does)")?;
    anyhow::ensure!(
        out.status.success(),
        "ethtool -K {ns_if} tx off failed: {} (install ethtool: scripts/setup.sh does)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    // The host end carries no address and must stay quiet: no IPv6
    // autoconfiguration chatter through the relay.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{host_if}/disable_ipv6"), "1");
    ip(&["link", "set", &host_if, "up"])?;
    Ok(Endpoint {
        host_ifindex: ifindex(&host_if)?,
        netns,
        addr,
        host_if,
        ns_if,
        mac,
    })
}

impl Lab {
    /// Builds the building side and `tenants`. All or nothing.
    pub fn create(tenants: &[TenantSpec]) -> Result<Lab> {
        anyhow::ensure!(
            crate::sys::is_root(),
            "the lab needs root (namespaces, cgroups): run it with sudo"
        );
        let mut undo = Undo::default();
        let (bh, bn) = names::building_veth();
        let building = endpoint(
            &mut undo,
            names::building_netns(),
            bh,
            bn,
            names::building_addr(),
            mac_for(0xffff_ff01),
        )
        .context("cannot create the building side")?;
        let version = cgroup::detect();
        if version.is_some() {
            // First on the stack, so it runs last: the tenants' groups go
            // before their parent.
            undo.push("remove the lab's parent cgroups", || {
                let dirs = cgroup::all_lab_dirs();
                cgroup::kill_and_remove(&dirs);
            });
        }
        // RT group scheduling: give the lab 90 % of the root's RT budget,
        // shared by the tenants, so SCHED_FIFO vCPU threads may run.
        let rt_parent = cgroup::has_rt_group_sched().then_some(900_000u64);
        let mut tenant_rt_runtime_us = None;
        let mut out = Vec::new();
        for (i, spec) in tenants.iter().enumerate() {
            let (h, n) = names::tenant_veth(i);
            let net = endpoint(
                &mut undo,
                names::tenant_netns(i),
                h,
                n,
                names::tenant_addr(i),
                mac_for(i as u32 + 1),
            )
            .with_context(|| format!("cannot create tenant {i}"))?;
            // Static neighbours both ways: frames go straight to the relay.
            static_neighbour(&net, building.addr, &building.mac)?;
            static_neighbour(&building, net.addr, &net.mac)?;
            let cg = match version {
                Some(v) => {
                    let mut limits = spec.limits.clone();
                    if let (Some(total), None) = (rt_parent, limits.rt_runtime_us) {
                        limits.rt_runtime_us = Some(total / tenants.len() as u64);
                    }
                    tenant_rt_runtime_us = limits.rt_runtime_us;
                    let cg = Cgroup::create(v, &names::tenant_cgroup(i), &limits, rt_parent)
                        .with_context(|| format!("cannot create the cgroup of tenant {i}"))?;
                    let c2 = cg.clone();
                    undo.push(format!("remove cgroup of tenant {i}"), move || c2.remove());
                    Some(cg)
                }
                None => None,
            };
            let disk = match &spec.disk {
                Some(d) => Some(
                    crate::disk::create(&mut undo, i, d).with_context(|| format!("cannot give tenant {i} its disk"))?,
                ),
                None => None,
            };
            out.push(Tenant {
                index: i,
                net,
                cgroup: cg,
                disk,
            });
        }
        let mut tenant_cpus: Vec<usize> = tenants.iter().flat_map(|t| t.limits.cpuset.iter().copied()).collect();
        tenant_cpus.sort_unstable();
        tenant_cpus.dedup();
        Ok(Lab {
            building,
            tenants: out,
            cgroup_version: version,
            tenant_rt_runtime_us,
            tenant_cpus,
            children: Vec::new(),
            undo,
        })
    }

    /// Lets every other tenant reach tenant `receiver` directly through the
    /// relay (static neighbours both ways), for flows between tenants.
    pub fn link_tenants(&self, receiver: usize) -> Result<()> {
        let r = &self.tenants[receiver].net;
        for s in self.tenants.iter().filter(|t| t.index != receiver) {
            static_neighbour(&s.net, r.addr, &r.mac)?;
            static_neighbour(r, s.net.addr, &s.net.mac)?;
        }
        Ok(())
    }

    /// Sets every tenant's interface MTU (channel tenants: 4 bytes below
    /// the link's, room for the deadline label).
    pub fn set_tenant_mtu(&self, mtu: u32) -> Result<()> {
        for t in &self.tenants {
            ip(&["-n", &t.net.netns, "link", "set", &t.net.ns_if, "mtu", &mtu.to_string()])?;
        }
        Ok(())
    }

    /// Processes that live as long as the lab (killed at teardown).
    pub fn children(&mut self) -> &mut Vec<ChildProcess> {
        &mut self.children
    }

    /// Tears everything down now (also done on drop).
    pub fn destroy(mut self) {
        self.teardown();
    }

    fn teardown(&mut self) {
        // Each child is stopped (SIGTERM, then SIGKILL) as it is dropped.
        self.children.clear();
        self.undo.run();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// Spawns `cmd` in network namespace `netns` and `cgroup`, dying with
/// ontime, stopped (SIGTERM, then SIGKILL) when the handle is dropped.
pub fn spawn_in(cmd: &mut Command, netns: &str, cgroup: Option<&Cgroup>) -> Result<ChildProcess> {
    spawn_with(cmd, netns, cgroup, SpawnOptions::default())
}

/// How long a receiver or server the lab starts may take to bind.
pub const BIND_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// An iperf3 server in network namespace `netns`, bound to `addr:port`
/// (`one_off`: it serves one client, then exits), returned once it
/// listens: clients started after it cannot find it missing.
pub fn iperf3_server(netns: &str, addr: std::net::Ipv4Addr, port: u16, one_off: bool) -> Result<ChildProcess> {
    let mut srv = Command::new("iperf3");
    srv.args(["-s", "-p", &port.to_string(), "-B", &addr.to_string()])
        .args(one_off.then_some("-1"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut server = spawn_in(&mut srv, netns, None)?;
    let pid = server.id();
    server.wait_until(BIND_LIMIT, || {
        ontime_core::proc::has_socket(pid, ontime_core::proc::Bound::TcpListen(port))
    })?;
    Ok(server)
}

/// [`spawn_in`] with other stop settings (a process group, a grace period).
pub fn spawn_with(cmd: &mut Command, netns: &str, cgroup: Option<&Cgroup>, opts: SpawnOptions) -> Result<ChildProcess> {
    let what = cmd.get_program().to_string_lossy().into_owned();
    ChildProcess::spawn(
        &format!("{what} in the lab ({netns})"),
        cmd,
        SpawnOptions {
            netns: Some(crate::names::netns_file(netns)),
            cgroup_procs: cgroup.map(|cg| cg.procs_files()).unwrap_or_default(),
            ..opts
        },
    )
}
