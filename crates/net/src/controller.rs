//! Document 003's controller: it holds the real-time channels, admits them
//! (existing channels win; a refusal says why), programs the data path (the
//! stamp's channel table on the sender, the check's deadlines on the
//! receiver: a [`Plane`]) and the switch (the relay's [`SwitchTable`]:
//! reserved rates, priorities), reads every miss the checks report, passes
//! it to the sender's subscribers and escalates: a deadline channel that
//! misses is raised to priority, a reservation channel gets a larger R
//! within what admission allows. It can also give a channel tenant's vCPU
//! threads a real-time policy (document 003's EDF run queue for real-time
//! VMs). Every action is logged.
//!
//! It runs as one thread that owns the plane (BPF objects are not `Send`);
//! the HTTP API (the `api` module) talks to it through [`ControllerHandle`].
use crate::channel::{self, Admitted, ChannelKind, ChannelSpec, Link, Refusal};
use crate::edf::{SwitchTable, MAX_CHANNELS};
use crate::miss::{explain_miss, MissCauses, MissPart, PathIndex};
use anyhow::{Context, Result};
use ontime_core::rt::Policy;
use ontime_core::MonoNs;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Which packets a channel carries: IPv4 source and destination, and a
/// destination port (any when None).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowMatch {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub dport: Option<u16>,
}

/// A channel's counters from the data path, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelCounts {
    /// Packets the sender's stamp labelled.
    pub stamped: u64,
    /// Packets the receiver's check found in time, and late.
    pub on_time: u64,
    pub missed: u64,
    pub max_overrun_ns: u64,
    /// Stamp-to-check delay (to the label's 10 us resolution).
    pub delay_sum_ns: u64,
    pub delay_max_ns: u64,
    pub delay_count: u64,
    #[serde(default)]
    pub stamped_bytes: u64,
}

impl ChannelCounts {
    /// What was counted since `base` (a DSCP reused after a removal).
    fn since(&self, base: &ChannelCounts) -> ChannelCounts {
        ChannelCounts {
            stamped: self.stamped.saturating_sub(base.stamped),
            on_time: self.on_time.saturating_sub(base.on_time),
            missed: self.missed.saturating_sub(base.missed),
            max_overrun_ns: self.max_overrun_ns,
            delay_sum_ns: self.delay_sum_ns.saturating_sub(base.delay_sum_ns),
            delay_max_ns: self.delay_max_ns,
            delay_count: self.delay_count.saturating_sub(base.delay_count),
            stamped_bytes: self.stamped_bytes.saturating_sub(base.stamped_bytes),
        }
    }
}

/// One missed deadline, as a receiver's check reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Miss {
    /// The DSCP of the packet's channel: the data path knows channels by it.
    pub channel: u8,
    pub overrun_ns: u64,
    pub ip_id: u16,
    /// When the check ran (CLOCK_MONOTONIC ns).
    pub checked_ns: u64,
}

/// What the controller programs on the hosts: the stamp and the check.
/// The BPF data path implements it (the `datapath` module); tests use a fake.
/// It knows a channel by its DSCP (1..63), which the controller hands out
/// again after a removal; the channel's id is the controller's alone.
pub trait Plane {
    /// Puts a channel into the sender's stamp (and its relative deadline
    /// into the receivers' checks).
    fn install(&mut self, dscp: u8, flow: FlowMatch, tc: u8, deadline_ns: u64) -> Result<()>;
    fn remove(&mut self, flow: FlowMatch) -> Result<()>;
    /// Counters of the DSCP since the data path was loaded.
    fn counts(&self, dscp: u8) -> ChannelCounts;
    /// Misses reported since the last call.
    fn misses(&mut self) -> Vec<Miss>;
    /// (malformed or foreign MPLS frames dropped, stamp failures).
    fn errors(&self) -> (u64, u64);
    /// What the stamp and the check cost per packet, where the kernel
    /// measures it (kernel.bpf_stats_enabled).
    fn cost(&self) -> Option<PlaneCost> {
        None
    }
}

/// Run counts and total run time of the data path's programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaneCost {
    pub stamp_runs: u64,
    pub stamp_ns: u64,
    pub check_runs: u64,
    pub check_ns: u64,
}

impl PlaneCost {
    pub fn stamp_ns_per_packet(&self) -> Option<f64> {
        (self.stamp_runs > 0).then(|| self.stamp_ns as f64 / self.stamp_runs as f64)
    }
    pub fn check_ns_per_packet(&self) -> Option<f64> {
        (self.check_runs > 0).then(|| self.check_ns as f64 / self.check_runs as f64)
    }
}

/// A tenant (or the building side) the controller knows: where its
/// packets come from and, for vCPU scheduling, its threads.
#[derive(Clone, Debug, Serialize)]
pub struct Endpoint {
    pub name: String,
    pub addr: Ipv4Addr,
    /// The file listing its threads (cgroup `tasks` / `cgroup.threads`).
    #[serde(skip)]
    pub threads_file: Option<PathBuf>,
}

/// What a tenant asks for (the API's request body). Rates in bit/s, sizes
/// in bytes, times in ns.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelRequest {
    /// Sending tenant ("t0").
    pub from: String,
    /// Receiving tenant or "building".
    pub to: String,
    /// Destination port; any when absent.
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default = "default_kind")]
    pub kind: ChannelKind,
    pub rate_bps: f64,
    pub burst_bytes: f64,
    /// Largest packet, label included (default: the MTU).
    #[serde(default)]
    pub max_packet_bytes: Option<f64>,
    #[serde(default)]
    pub peak_bps: Option<f64>,
    pub deadline_ns: u64,
    /// A real-time policy for the sender's vCPU threads ("fifo:70", "rr:50",
    /// "deadline:1ms/10ms").
    #[serde(default)]
    pub vcpu_policy: Option<String>,
}

fn default_kind() -> ChannelKind {
    ChannelKind::Deadline
}

/// A channel the controller holds, with what happened to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChannelState {
    /// The channel's id: given in order from 1 and never given again while
    /// the controller runs, so a client holding a removed channel's id
    /// reaches no other channel.
    pub id: u64,
    /// The DSCP its packets carry, 1..63: at most 63 channels at once, and
    /// a removed channel's DSCP goes to a later one. 0 in results written
    /// before ids and DSCPs were apart, whose `id` was the DSCP.
    #[serde(default)]
    pub dscp: u8,
    pub from: String,
    pub to: String,
    pub port: Option<u16>,
    pub spec: ChannelSpec,
    /// The rate reserved now (reservation channels; raised on escalation).
    pub reserved_bps: Option<f64>,
    /// Raised to priority at the switch (deadline channels, on escalation).
    pub priority: bool,
    pub vcpu_policy: Option<String>,
    /// When it was admitted and (if so) removed, ns since the controller started.
    pub added_ns: u64,
    #[serde(default)]
    pub removed_ns: Option<u64>,
    pub counts: ChannelCounts,
    pub escalations: u32,
}

impl ChannelState {
    /// Whether its packets carry `dscp` (in older results, where `dscp` is
    /// absent, the id was the DSCP).
    pub fn has_dscp(&self, dscp: u8) -> bool {
        match self.dscp {
            0 => self.id == u64::from(dscp),
            d => d == dscp,
        }
    }
}

/// One thing the controller did, for the log and the report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Action {
    /// ns since the controller started.
    pub at_ns: u64,
    /// The channel's id.
    pub channel: Option<u64>,
    /// "admitted", "refused", "removed", "escalated", "cannot escalate", "vcpu".
    pub kind: String,
    pub message: String,
}

/// A miss as the sender's subscribers see it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MissEvent {
    pub at_ns: u64,
    /// The channel's id.
    pub channel: u64,
    /// The sending tenant.
    pub from: String,
    pub overrun_ns: u64,
    pub ip_id: u16,
    /// When the receiver's check ran (CLOCK_MONOTONIC ns).
    #[serde(default)]
    pub checked_ns: u64,
    /// The overrun's parts, largest first (`miss::explain_miss`): they add
    /// up to `overrun_ns`. Empty where the controller runs without a relay.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub why: Vec<MissPart>,
}

/// An answer the API turns into an HTTP status.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }
}

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub link: Link,
    pub endpoints: Vec<Endpoint>,
    /// Misses in one tick that make the controller escalate a channel.
    pub escalate_after: u64,
    /// Time after an escalation before the same channel escalates again.
    pub hold_ns: u64,
    /// Where every action is appended (JSON lines), if anywhere.
    pub log: Option<PathBuf>,
    /// Print actions on standard error as they happen.
    pub echo: bool,
}

/// What the controller did, when it stops.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ControllerReport {
    pub link: Option<Link>,
    /// Every channel ever admitted, with its counts at removal or stop.
    pub channels: Vec<ChannelState>,
    pub actions: Vec<Action>,
    /// Misses read from the checks' ring (per channel in `channels`).
    pub misses_reported: u64,
    pub malformed_dropped: u64,
    pub stamp_failures: u64,
    /// Per-packet cost of the stamp and the check (None: not measured).
    #[serde(default)]
    pub cost: Option<PlaneCost>,
    /// Per channel with misses: what their overruns were made of, from
    /// the relay's record of each missed frame (`miss`); empty where the
    /// controller ran without a relay.
    #[serde(default)]
    pub miss_causes: Vec<MissCauses>,
    /// Channel frames' paths the relay's log overwrote before the
    /// controller read them (their misses are `not_recorded`).
    #[serde(default)]
    pub paths_lost: u64,
}

/// Status for `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Status {
    pub link: Link,
    pub endpoints: Vec<String>,
    pub channels: usize,
    pub reserved_bps: f64,
    pub deadline_rate_bps: f64,
    pub malformed_dropped: u64,
    pub stamp_failures: u64,
    pub uptime_ns: u64,
}

type Reply<T> = tokio::sync::oneshot::Sender<T>;

enum Command {
    Add(ChannelRequest, Reply<Result<ChannelState, ApiError>>),
    Remove(u64, Reply<Result<ChannelState, ApiError>>),
    List(Reply<Vec<ChannelState>>),
    Actions(Reply<Vec<Action>>),
    Status(Reply<Status>),
}

/// The API's way in: commands to the controller thread, and its misses.
#[derive(Clone)]
pub struct ControllerHandle {
    tx: mpsc::Sender<Command>,
    misses: tokio::sync::broadcast::Sender<MissEvent>,
}

impl ControllerHandle {
    async fn ask<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(make(tx))
            .map_err(|_| ApiError::new(503, "the controller has stopped"))?;
        rx.await.map_err(|_| ApiError::new(503, "the controller has stopped"))
    }

    pub async fn add(&self, r: ChannelRequest) -> Result<ChannelState, ApiError> {
        self.ask(|tx| Command::Add(r, tx)).await?
    }

    pub async fn remove(&self, id: u64) -> Result<ChannelState, ApiError> {
        self.ask(|tx| Command::Remove(id, tx)).await?
    }

    pub async fn list(&self) -> Result<Vec<ChannelState>, ApiError> {
        self.ask(Command::List).await
    }

    pub async fn actions(&self) -> Result<Vec<Action>, ApiError> {
        self.ask(Command::Actions).await
    }

    pub async fn status(&self) -> Result<Status, ApiError> {
        self.ask(Command::Status).await
    }

    /// Every miss from now on (a lagging subscriber loses the oldest).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<MissEvent> {
        self.misses.subscribe()
    }

    /// Subscribers to the misses now (a caller can know its subscription
    /// is up before it makes misses happen).
    pub fn subscribers(&self) -> usize {
        self.misses.receiver_count()
    }

    fn ask_blocking<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, ApiError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(make(tx))
            .map_err(|_| ApiError::new(503, "the controller has stopped"))?;
        rx.blocking_recv()
            .map_err(|_| ApiError::new(503, "the controller has stopped"))
    }

    /// Blocking variant of [`ControllerHandle::add`] for callers outside
    /// an async runtime (the lab adds a scenario's channels with it).
    pub fn add_blocking(&self, r: ChannelRequest) -> Result<ChannelState, ApiError> {
        self.ask_blocking(|tx| Command::Add(r, tx))?
    }

    /// Blocking variant of [`ControllerHandle::actions`].
    pub fn actions_blocking(&self) -> Result<Vec<Action>, ApiError> {
        self.ask_blocking(Command::Actions)
    }
}

/// The running controller thread.
pub struct Controller {
    handle: ControllerHandle,
    thread: Option<std::thread::JoinHandle<Result<ControllerReport>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// How long a miss waits for its frame's path in the relay's log before
/// it is reported without (`not_recorded`), and how many may wait.
const PATH_WAIT_NS: u64 = 1_000_000_000;
const MAX_UNMATCHED: usize = 1 << 16;

/// How often misses are read and escalation decided.
const TICK: Duration = Duration::from_millis(50);
/// How often vCPU policies are (re)applied to new threads.
const VCPU_EVERY_NS: u64 = 200_000_000;

impl Controller {
    /// Starts the controller thread; `plane` is built on it (so BPF objects
    /// stay on one thread). Returns once the plane is ready.
    pub fn start(
        config: ControllerConfig,
        switch: Option<Arc<SwitchTable>>,
        plane: impl FnOnce() -> Result<Box<dyn Plane>> + Send + 'static,
    ) -> Result<Controller> {
        let (tx, rx) = mpsc::channel();
        let (misses, _) = tokio::sync::broadcast::channel(4096);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let (m2, s2) = (misses.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("ontime-netctl".into())
            .spawn(move || {
                let plane = match plane() {
                    Ok(p) => {
                        let _ = ready_tx.send(Ok(()));
                        p
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Err(e);
                    }
                };
                let mut state = State::new(config, switch, plane, m2)?;
                state.run(rx, &s2)
            })
            .context("cannot start the controller thread")?;
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => anyhow::bail!("the controller cannot start: {e}"),
            Err(_) => anyhow::bail!("the controller did not start within 30 s"),
        }
        Ok(Controller {
            handle: ControllerHandle { tx, misses },
            thread: Some(thread),
            stop,
        })
    }

    pub fn handle(&self) -> ControllerHandle {
        self.handle.clone()
    }

    /// Stops the thread (the plane's hooks go with it) and returns the report.
    pub fn stop(mut self) -> Result<ControllerReport> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow::anyhow!("the controller thread panicked"))?,
            None => Ok(ControllerReport::default()),
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One channel the controller holds, with its escalation state.
struct Held {
    state: ChannelState,
    flow: FlowMatch,
    /// Counters of its DSCP before it was admitted (a DSCP is reused).
    base: ChannelCounts,
    missed_seen: u64,
    last_escalation_ns: Option<u64>,
    vcpu: Option<Policy>,
    /// The kernel refused the vCPU policy (said once in the log).
    vcpu_refused: bool,
    /// (controller time, bytes stamped so far) at each tick of the last
    /// [`RATE_WINDOW`], from the tick before the channel's first byte.
    sent_history: std::collections::VecDeque<(u64, u64)>,
    /// When the channel last sent more than its declaration allows.
    exceeded_ns: Option<u64>,
}

/// What a channel's rate is judged over: since the tick before its first
/// byte, at most this long. A sender in a guest whose vCPU waited for a
/// host CPU sends its backlog in one burst (a TCG guest's waited 551 ms
/// in doc-003-vm, and its flow, conforming on average, was refused
/// escalation for 13 s as "exceeds" when judged per 50 ms tick); over
/// 10 s such a burst stays within the 10 % slack for stalls up to 1 s.
/// A flow sending beyond its declaration from its first byte (C in the
/// escalation scenario) is called out at its first tick: a window that
/// started at admission, or a bucket that filled while it was idle, let
/// such a flow be escalated first.
const RATE_WINDOW: Duration = Duration::from_secs(10);

struct State {
    cfg: ControllerConfig,
    switch: Option<Arc<SwitchTable>>,
    plane: Box<dyn Plane>,
    misses: tokio::sync::broadcast::Sender<MissEvent>,
    held: Vec<Held>,
    /// The next channel's id. Ids only grow: a client's stale id (a retry,
    /// an old list) must never reach a channel added since.
    next_id: u64,
    /// Where the search for a free DSCP starts: DSCPs are handed out in
    /// turn, so the last packets of a removed channel, still in flight,
    /// are rarely counted for the channel that gets its DSCP next.
    next_dscp: u8,
    gone: Vec<ChannelState>,
    actions: Vec<Action>,
    log: Option<std::fs::File>,
    start_ns: u64,
    misses_reported: u64,
    last_vcpu_ns: u64,
    /// The relay's channel frames, to look misses up in.
    paths: PathIndex,
    /// Misses whose frame's path the relay has not logged yet.
    unmatched: Vec<Miss>,
    miss_causes: Vec<MissCauses>,
}

impl State {
    fn new(
        cfg: ControllerConfig,
        switch: Option<Arc<SwitchTable>>,
        plane: Box<dyn Plane>,
        misses: tokio::sync::broadcast::Sender<MissEvent>,
    ) -> Result<State> {
        let log = match &cfg.log {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("cannot open the controller log {}", p.display()))?,
            ),
            None => None,
        };
        Ok(State {
            cfg,
            switch,
            plane,
            misses,
            held: Vec::new(),
            next_id: 1,
            next_dscp: 1,
            gone: Vec::new(),
            actions: Vec::new(),
            log,
            start_ns: MonoNs::now().0,
            misses_reported: 0,
            last_vcpu_ns: 0,
            paths: PathIndex::default(),
            unmatched: Vec::new(),
            miss_causes: Vec::new(),
        })
    }

    fn now(&self) -> u64 {
        MonoNs::now().0.saturating_sub(self.start_ns)
    }

    fn act(&mut self, channel: Option<u64>, kind: &str, message: String) {
        let a = Action {
            at_ns: self.now(),
            channel,
            kind: kind.into(),
            message,
        };
        if self.cfg.echo {
            ontime_core::errln!(
                "ontime net controller: {:.3} s {}: {}",
                a.at_ns as f64 / 1e9,
                a.kind,
                a.message
            );
        }
        if let Some(f) = &mut self.log {
            if let Ok(line) = serde_json::to_string(&a) {
                // A full disk must not stop the controller: the report keeps them too.
                let _ = writeln!(f, "{line}");
            }
        }
        self.actions.push(a);
    }

    fn run(&mut self, rx: mpsc::Receiver<Command>, stop: &std::sync::atomic::AtomicBool) -> Result<ControllerReport> {
        let mut next_tick = MonoNs::now().0 + TICK.as_nanos() as u64;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let wait = next_tick.saturating_sub(MonoNs::now().0);
            match rx.recv_timeout(Duration::from_nanos(wait)) {
                Ok(cmd) => self.command(cmd),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                // Every handle gone: keep watching until told to stop.
                Err(mpsc::RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_nanos(wait)),
            }
            if MonoNs::now().0 >= next_tick {
                self.tick(false);
                next_tick += TICK.as_nanos() as u64;
            }
        }
        self.tick(true);
        Ok(self.report())
    }

    fn report(&mut self) -> ControllerReport {
        let mut channels = self.gone.clone();
        channels.extend(self.list());
        channels.sort_by_key(|c| c.added_ns);
        let (malformed_dropped, stamp_failures) = self.plane.errors();
        ControllerReport {
            link: Some(self.cfg.link),
            channels,
            actions: self.actions.clone(),
            misses_reported: self.misses_reported,
            malformed_dropped,
            stamp_failures,
            cost: self.plane.cost(),
            miss_causes: self.miss_causes.clone(),
            paths_lost: self.paths.lost,
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Add(r, reply) => {
                let out = self.add(r);
                let _ = reply.send(out);
            }
            Command::Remove(id, reply) => {
                let out = self.remove(id);
                let _ = reply.send(out);
            }
            Command::List(reply) => {
                let _ = reply.send(self.list());
            }
            Command::Actions(reply) => {
                let _ = reply.send(self.actions.clone());
            }
            Command::Status(reply) => {
                let (malformed_dropped, stamp_failures) = self.plane.errors();
                let _ = reply.send(Status {
                    link: self.cfg.link,
                    endpoints: self.cfg.endpoints.iter().map(|e| e.name.clone()).collect(),
                    channels: self.held.len(),
                    reserved_bps: self.held.iter().filter_map(|h| h.state.reserved_bps).sum(),
                    deadline_rate_bps: self
                        .held
                        .iter()
                        .filter(|h| h.state.spec.kind == ChannelKind::Deadline)
                        .map(|h| h.state.spec.rate_bps)
                        .sum(),
                    malformed_dropped,
                    stamp_failures,
                    uptime_ns: self.now(),
                });
            }
        }
    }

    /// A held channel's counters since it was admitted.
    fn counts_of(&self, h: &Held) -> ChannelCounts {
        self.plane.counts(h.state.dscp).since(&h.base)
    }

    fn list(&self) -> Vec<ChannelState> {
        self.held
            .iter()
            .map(|h| ChannelState {
                counts: self.counts_of(h),
                ..h.state.clone()
            })
            .collect()
    }

    fn endpoint(&self, name: &str, what: &str) -> Result<&Endpoint, ApiError> {
        self.cfg.endpoints.iter().find(|e| e.name == name).ok_or_else(|| {
            let known: Vec<&str> = self.cfg.endpoints.iter().map(|e| e.name.as_str()).collect();
            ApiError::new(
                404,
                format!("unknown {what} '{name}': this lab has {}", known.join(", ")),
            )
        })
    }

    fn add(&mut self, r: ChannelRequest) -> Result<ChannelState, ApiError> {
        let from = self.endpoint(&r.from, "sender")?.addr;
        let to = self.endpoint(&r.to, "receiver")?.addr;
        if r.from == r.to {
            return Err(ApiError::new(400, "from and to are the same endpoint"));
        }
        if r.from == "building" {
            return Err(ApiError::new(
                400,
                "channels are sent by tenants (the stamp sits at a tenant's VMM boundary); 'building' can only receive",
            ));
        }
        let vcpu = match &r.vcpu_policy {
            Some(p) => {
                let p: Policy = p.parse().map_err(|e| ApiError::new(400, format!("vcpu_policy: {e}")))?;
                if !p.is_realtime() {
                    return Err(ApiError::new(
                        400,
                        "vcpu_policy must be real-time (fifo:N, rr:N, deadline:RUNTIME/PERIOD)",
                    ));
                }
                Some(p)
            }
            None => None,
        };
        let flow = FlowMatch {
            src: from,
            dst: to,
            dport: r.port,
        };
        let spec = ChannelSpec {
            kind: r.kind,
            rate_bps: r.rate_bps,
            burst_bytes: r.burst_bytes,
            max_packet_bytes: r.max_packet_bytes.unwrap_or(self.cfg.link.mtu_bytes),
            peak_bps: r.peak_bps,
            deadline_ns: r.deadline_ns,
        };
        if let Err(Refusal::Invalid(m)) = channel::validate(&spec) {
            return Err(ApiError::new(400, m));
        }
        if let Some(h) = self.held.iter().find(|h| h.flow == flow) {
            return Err(ApiError::new(
                409,
                format!(
                    "duplicate: channel {} already carries {} -> {} port {}",
                    h.state.id,
                    r.from,
                    r.to,
                    port_text(r.port)
                ),
            ));
        }
        let dscps = MAX_CHANNELS as u8 - 1;
        let Some(dscp) = (0..dscps)
            .map(|k| 1 + (self.next_dscp - 1 + k) % dscps)
            .find(|d| self.held.iter().all(|h| h.state.dscp != *d))
        else {
            return Err(ApiError::new(
                409,
                "all 63 DSCPs are in use: at most 63 channels at once; remove one first",
            ));
        };
        let existing: Vec<Admitted> = self
            .held
            .iter()
            .map(|h| Admitted {
                id: u32::from(h.state.dscp),
                spec: h.state.spec.clone(),
                reserved_bps: h.state.reserved_bps,
            })
            .collect();
        let what = format!(
            "{} {} -> {} port {} ({:.3} Mbit/s, burst {} B, deadline {:.3} ms)",
            kind_text(r.kind),
            r.from,
            r.to,
            port_text(r.port),
            r.rate_bps / 1e6,
            r.burst_bytes,
            r.deadline_ns as f64 / 1e6
        );
        let admitted = match channel::admit(&existing, &spec, &self.cfg.link, u32::from(dscp)) {
            Ok(a) => a,
            Err(Refusal::Invalid(m)) => return Err(ApiError::new(400, m)),
            Err(e) => {
                self.act(None, "refused", format!("{what}: {e}"));
                return Err(ApiError::new(409, format!("refused: {e}")));
            }
        };
        let tc = match r.kind {
            ChannelKind::Deadline => 1,
            ChannelKind::Reservation => 2,
        };
        let base = self.plane.counts(dscp);
        if let Err(e) = self.plane.install(dscp, flow, tc, r.deadline_ns) {
            return Err(ApiError::new(500, format!("cannot install the channel: {e:#}")));
        }
        if let (Some(sw), Some(bps)) = (&self.switch, admitted.reserved_bps) {
            sw.set_reservation(dscp, bps.ceil() as u64);
        }
        let id = self.next_id;
        self.next_id += 1;
        let state = ChannelState {
            id,
            dscp,
            from: r.from.clone(),
            to: r.to.clone(),
            port: r.port,
            spec,
            reserved_bps: admitted.reserved_bps,
            priority: false,
            vcpu_policy: r.vcpu_policy.clone(),
            added_ns: self.now(),
            removed_ns: None,
            counts: ChannelCounts::default(),
            escalations: 0,
        };
        let reserved = admitted
            .reserved_bps
            .map(|b| format!(", R = {:.3} Mbit/s", b / 1e6))
            .unwrap_or_default();
        self.act(
            Some(id),
            "admitted",
            format!("channel {id}: {what}{reserved}, DSCP {dscp}"),
        );
        self.next_dscp = dscp % dscps + 1;
        self.held.push(Held {
            state: state.clone(),
            flow,
            base,
            missed_seen: 0,
            last_escalation_ns: None,
            vcpu,
            vcpu_refused: false,
            // Counts are relative to `base`: nothing sent at admission.
            sent_history: std::collections::VecDeque::from([(self.now(), 0)]),
            exceeded_ns: None,
        });
        if vcpu.is_some() {
            self.apply_vcpu_policies();
        }
        Ok(state)
    }

    fn remove(&mut self, id: u64) -> Result<ChannelState, ApiError> {
        let Some(k) = self.held.iter().position(|h| h.state.id == id) else {
            let why = if self.gone.iter().any(|g| g.id == id) {
                format!("no channel {id}: it was removed (ids are never given again)")
            } else {
                format!("no channel {id}")
            };
            return Err(ApiError::new(404, why));
        };
        let h = self.held.remove(k);
        if let Err(e) = self.plane.remove(h.flow) {
            self.act(
                Some(id),
                "error",
                format!("removing channel {id} from the stamp: {e:#}"),
            );
        }
        if let Some(sw) = &self.switch {
            sw.clear(h.state.dscp);
        }
        let counts = self.counts_of(&h);
        let mut s = h.state;
        s.counts = counts;
        s.removed_ns = Some(self.now());
        self.act(
            Some(id),
            "removed",
            format!("channel {id} ({} -> {}) removed", s.from, s.to),
        );
        self.gone.push(s.clone());
        Ok(s)
    }

    /// Misses to subscribers, then escalation, then vCPU policies; `last`:
    /// the controller stops, no miss waits for its path.
    fn tick(&mut self, last: bool) {
        let now = self.now();
        if let Some(switch) = &self.switch {
            self.paths.follow(&switch.paths);
        }
        let fresh = self.plane.misses();
        self.misses_reported += fresh.len() as u64;
        let mut waiting = std::mem::take(&mut self.unmatched);
        waiting.extend(fresh);
        let mono = MonoNs::now().0;
        for m in waiting {
            let path = self.paths.find(m.channel, m.ip_id, m.checked_ns).copied();
            // A relay thread appends a frame's path after its batch of
            // sends: preempted (or throttled) in between, the path comes
            // after the check's miss. Such a miss waits for it, a while.
            if self.switch.is_some()
                && path.is_none()
                && !last
                && self.unmatched.len() < MAX_UNMATCHED
                && mono.saturating_sub(m.checked_ns) < PATH_WAIT_NS
            {
                self.unmatched.push(m);
                continue;
            }
            // The channel holding the DSCP now; while none does, the one
            // removed last with it (its last packets were still in flight).
            let owner = self
                .held
                .iter()
                .map(|h| &h.state)
                .find(|s| s.dscp == m.channel)
                .or_else(|| self.gone.iter().rev().find(|s| s.dscp == m.channel));
            let Some(owner) = owner else { continue };
            let (id, from) = (owner.id, owner.from.clone());
            let mut why = Vec::new();
            if self.switch.is_some() {
                let deadline = m.checked_ns.saturating_sub(m.overrun_ns);
                explain_miss(path.as_ref(), deadline, owner.spec.deadline_ns, m.checked_ns, &mut why);
                let causes = match self.miss_causes.iter().position(|c| c.channel == id) {
                    Some(i) => &mut self.miss_causes[i],
                    None => {
                        self.miss_causes.push(MissCauses::new(id, &from));
                        self.miss_causes.last_mut().expect("just pushed")
                    }
                };
                causes.add(m.checked_ns, m.ip_id, path.as_ref(), &why);
            }
            let _ = self.misses.send(MissEvent {
                at_ns: now,
                channel: id,
                from,
                overrun_ns: m.overrun_ns,
                ip_id: m.ip_id,
                checked_ns: m.checked_ns,
                why,
            });
        }
        for k in 0..self.held.len() {
            let counts = self.counts_of(&self.held[k]);
            let h = &mut self.held[k];
            let new = counts.missed.saturating_sub(h.missed_seen);
            h.missed_seen = counts.missed;
            let total = counts.stamped_bytes;
            if total == 0 {
                // Not started: its window begins at the tick before its first byte.
                h.sent_history.clear();
            }
            h.sent_history.push_back((now, total));
            while h
                .sent_history
                .get(1)
                .is_some_and(|&(t, _)| now.saturating_sub(t) >= RATE_WINDOW.as_nanos() as u64)
            {
                h.sent_history.pop_front();
            }
            let (since_ns, bytes_then) = h.sent_history.front().copied().unwrap_or((now, total));
            let window_s = now.saturating_sub(since_ns) as f64 / 1e9;
            let sent = total.saturating_sub(bytes_then) as f64;
            // 10 % slack for the measurement, and the declared burst.
            let allowed = h.state.spec.rate_bps / 8.0 * window_s * 1.1 + h.state.spec.burst_bytes;
            if sent > allowed {
                if h.exceeded_ns.is_none() {
                    let msg = format!(
                        "channel {}: sends {:.3} Mbit/s over its last {:.2} s, more than the {:.3} Mbit/s it declared; it will not be escalated while it does",
                        h.state.id,
                        sent * 8.0 / window_s.max(1e-3) / 1e6,
                        window_s,
                        h.state.spec.rate_bps / 1e6
                    );
                    h.exceeded_ns = Some(now);
                    let id = h.state.id;
                    self.act(Some(id), "exceeds", msg);
                }
                self.held[k].exceeded_ns = Some(now);
            }
            let h = &self.held[k];
            let held_off = h
                .last_escalation_ns
                .is_some_and(|t| now.saturating_sub(t) < self.cfg.hold_ns);
            // A channel that sends beyond its declaration causes its own
            // misses: escalating it would take from the channels that keep theirs.
            let conforming = h.exceeded_ns.is_none_or(|t| now.saturating_sub(t) >= 1_000_000_000);
            if new >= self.cfg.escalate_after.max(1) && !held_off && conforming {
                self.escalate(k, new, counts.max_overrun_ns);
            }
        }
        if now.saturating_sub(self.last_vcpu_ns) >= VCPU_EVERY_NS {
            self.apply_vcpu_policies();
        }
    }

    /// Document 003's escalation: a deadline channel is raised to priority;
    /// a reservation channel's R grows to what meets a tighter deadline
    /// (3/4 of the last target each time), within what admission leaves.
    fn escalate(&mut self, k: usize, new_misses: u64, max_overrun_ns: u64) {
        let now = self.now();
        let (id, dscp) = (self.held[k].state.id, self.held[k].state.dscp);
        let why = format!(
            "{new_misses} misses in {} ms (largest overrun so far {:.3} ms)",
            TICK.as_millis(),
            max_overrun_ns as f64 / 1e6
        );
        self.held[k].last_escalation_ns = Some(now);
        match self.held[k].state.spec.kind {
            ChannelKind::Deadline => {
                if self.held[k].state.priority {
                    self.act(
                        Some(id),
                        "cannot escalate",
                        format!("channel {id}: {why}; it already has priority"),
                    );
                    return;
                }
                if let Some(sw) = &self.switch {
                    sw.set_priority(dscp, true);
                }
                let h = &mut self.held[k];
                h.state.priority = true;
                h.state.escalations += 1;
                self.act(
                    Some(id),
                    "escalated",
                    format!("channel {id}: {why}; raised to priority at the switch"),
                );
            }
            ChannelKind::Reservation => {
                let link = self.cfg.link;
                let others: f64 = self
                    .held
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .map(|(_, h)| h.state.reserved_bps.unwrap_or(h.state.spec.rate_bps))
                    .sum();
                let room = link.rate_bps * link.max_share - others;
                let h = &self.held[k];
                let current = h.state.reserved_bps.unwrap_or(0.0);
                let mut tighter = h.state.spec.clone();
                tighter.deadline_ns =
                    (tighter.deadline_ns as f64 * 0.75f64.powi(h.state.escalations as i32 + 1)) as u64;
                let target = channel::rate_for_deadline(&tighter, &link, room).unwrap_or(room);
                if target <= current + 1.0 {
                    self.act(
                        Some(id),
                        "cannot escalate",
                        format!(
                            "channel {id}: {why}; R = {:.3} Mbit/s is all admission leaves",
                            current / 1e6
                        ),
                    );
                    return;
                }
                if let Some(sw) = &self.switch {
                    sw.set_reservation(dscp, target.ceil() as u64);
                }
                let h = &mut self.held[k];
                h.state.reserved_bps = Some(target);
                h.state.escalations += 1;
                self.act(
                    Some(id),
                    "escalated",
                    format!(
                        "channel {id}: {why}; R raised {:.3} -> {:.3} Mbit/s",
                        current / 1e6,
                        target / 1e6
                    ),
                );
            }
        }
    }

    /// Gives every thread of a channel sender's tenant the channel's vCPU
    /// policy (threads started since are caught on the next pass).
    fn apply_vcpu_policies(&mut self) {
        self.last_vcpu_ns = self.now();
        let mut done = Vec::new();
        let mut refused = Vec::new();
        for h in &mut self.held {
            let Some(policy) = h.vcpu else { continue };
            let Some(file) = self
                .cfg
                .endpoints
                .iter()
                .find(|e| e.name == h.state.from)
                .and_then(|e| e.threads_file.clone())
            else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let mut changed = 0;
            for tid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                if current_policy(tid) == Some(policy_number(policy)) {
                    continue;
                }
                match ontime_core::rt::set_policy_of(tid, policy) {
                    Ok(()) => changed += 1,
                    Err(e) if !h.vcpu_refused => {
                        h.vcpu_refused = true;
                        refused.push((h.state.id, h.state.from.clone(), format!("{e:#}")));
                    }
                    Err(_) => {}
                }
            }
            if changed > 0 {
                done.push((h.state.id, h.state.from.clone(), policy, changed));
            }
        }
        for (id, from, why) in refused {
            self.act(Some(id), "vcpu", format!("channel {id}: threads of {from}: {why}"));
        }
        for (id, from, policy, n) in done {
            self.act(
                Some(id),
                "vcpu",
                format!("channel {id}: {n} thread(s) of {from} set to {policy}"),
            );
        }
    }
}

fn policy_number(p: Policy) -> i32 {
    match p {
        Policy::Other => libc::SCHED_OTHER,
        Policy::Fifo { .. } => libc::SCHED_FIFO,
        Policy::Rr { .. } => libc::SCHED_RR,
        Policy::Deadline { .. } => 6,
    }
}

fn current_policy(tid: i32) -> Option<i32> {
    // SAFETY: sched_getscheduler takes a pid and returns a number or -1.
    let p = unsafe { libc::sched_getscheduler(tid) };
    (p >= 0).then_some(p)
}

fn port_text(p: Option<u16>) -> String {
    p.map(|p| p.to_string()).unwrap_or_else(|| "any".into())
}

fn kind_text(k: ChannelKind) -> &'static str {
    match k {
        ChannelKind::Deadline => "deadline",
        ChannelKind::Reservation => "reservation",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A plane that remembers what it was told; misses are injected.
    struct FakeState {
        installed: Vec<(u8, FlowMatch, u8, u64)>,
        counts: [ChannelCounts; MAX_CHANNELS],
        misses: Vec<Miss>,
    }

    impl Default for FakeState {
        fn default() -> Self {
            FakeState {
                installed: Vec::new(),
                counts: [ChannelCounts::default(); MAX_CHANNELS],
                misses: Vec::new(),
            }
        }
    }
    struct Fake(Arc<Mutex<FakeState>>);

    impl Plane for Fake {
        fn install(&mut self, id: u8, flow: FlowMatch, tc: u8, deadline_ns: u64) -> Result<()> {
            self.0.lock().unwrap().installed.push((id, flow, tc, deadline_ns));
            Ok(())
        }
        fn remove(&mut self, flow: FlowMatch) -> Result<()> {
            self.0.lock().unwrap().installed.retain(|i| i.1 != flow);
            Ok(())
        }
        fn counts(&self, id: u8) -> ChannelCounts {
            self.0.lock().unwrap().counts[id as usize]
        }
        fn misses(&mut self) -> Vec<Miss> {
            std::mem::take(&mut self.0.lock().unwrap().misses)
        }
        fn errors(&self) -> (u64, u64) {
            (0, 0)
        }
    }

    pub(crate) fn lab_config() -> ControllerConfig {
        let ep = |name: &str, last: u8| Endpoint {
            name: name.into(),
            addr: Ipv4Addr::new(10, 77, 1, last),
            threads_file: None,
        };
        ControllerConfig {
            link: Link {
                rate_bps: 100e6,
                mtu_bytes: 1500.0,
                c_tot_bytes: 1500.0,
                d_tot_ns: 0.0,
                max_share: 0.9,
            },
            endpoints: vec![ep("t0", 1), ep("t1", 2), ep("building", 100)],
            escalate_after: 1,
            hold_ns: 0,
            log: None,
            echo: false,
        }
    }

    pub(crate) fn request(from: &str, deadline_ms: u64) -> ChannelRequest {
        ChannelRequest {
            from: from.into(),
            to: "building".into(),
            port: Some(5000),
            kind: ChannelKind::Deadline,
            rate_bps: 2e6,
            burst_bytes: 3000.0,
            max_packet_bytes: None,
            peak_bps: None,
            deadline_ns: deadline_ms * 1_000_000,
            vcpu_policy: None,
        }
    }

    fn started() -> (Controller, Arc<Mutex<FakeState>>, Arc<SwitchTable>) {
        let fake = Arc::new(Mutex::new(FakeState::default()));
        let f2 = fake.clone();
        let sw = SwitchTable::new();
        let c = Controller::start(lab_config(), Some(sw.clone()), move || {
            Ok(Box::new(Fake(f2)) as Box<dyn Plane>)
        })
        .unwrap();
        (c, fake, sw)
    }

    #[test]
    fn admits_installs_and_refuses_with_reasons() {
        let (c, fake, _) = started();
        let h = c.handle();
        let a = h.add_blocking(request("t0", 5)).unwrap();
        assert_eq!(a.id, 1);
        let installed = fake.lock().unwrap().installed.clone();
        assert_eq!(installed.len(), 1);
        assert_eq!(installed[0].2, 1, "deadline channels carry TC 1");
        assert_eq!(installed[0].3, 5_000_000);
        // Same flow again: duplicate.
        let e = h.add_blocking(request("t0", 5)).unwrap_err();
        assert_eq!(e.status, 409);
        assert!(e.message.contains("duplicate"), "{}", e.message);
        // Unknown tenant, deadline 0, negative rate, from the building.
        assert_eq!(h.add_blocking(request("t9", 5)).unwrap_err().status, 404);
        let e = h.add_blocking(request("t1", 0)).unwrap_err();
        assert_eq!((e.status, e.message.as_str()), (400, "deadline must be above 0"));
        let mut neg = request("t1", 5);
        neg.rate_bps = -1.0;
        assert_eq!(h.add_blocking(neg).unwrap_err().status, 400);
        let mut b = request("building", 5);
        b.to = "t0".into();
        assert_eq!(h.add_blocking(b).unwrap_err().status, 400);
        // Beyond capacity: 90 of 100 Mbit/s may be used; 2 are.
        let mut big = request("t1", 50);
        big.rate_bps = 89e6;
        let e = h.add_blocking(big).unwrap_err();
        assert_eq!(e.status, 409);
        assert!(e.message.contains("link capacity"), "{}", e.message);
        // Nothing of the refused ones was installed; the first keeps its place.
        assert_eq!(fake.lock().unwrap().installed.len(), 1);
        let report = c.stop().unwrap();
        assert_eq!(report.channels.len(), 1);
        assert!(report.actions.iter().any(|a| a.kind == "refused"));
    }

    #[test]
    fn misses_escalate_a_deadline_channel_to_priority_once() {
        let (c, fake, sw) = started();
        let h = c.handle();
        let mut sub = h.subscribe();
        let a = h.add_blocking(request("t0", 5)).unwrap();
        {
            let mut f = fake.lock().unwrap();
            f.counts[a.dscp as usize].missed = 3;
            f.counts[a.dscp as usize].max_overrun_ns = 700_000;
            f.misses.push(Miss {
                channel: a.dscp,
                overrun_ns: 700_000,
                ip_id: 42,
                checked_ns: 0,
            });
        }
        let t0 = std::time::Instant::now();
        while !sw.priority(a.dscp) && t0.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(sw.priority(a.dscp), "the switch gives the channel priority");
        let m = sub.blocking_recv().unwrap();
        assert_eq!((m.channel, m.from.as_str(), m.ip_id), (a.id, "t0", 42));
        let report = c.stop().unwrap();
        let esc: Vec<_> = report.actions.iter().filter(|a| a.kind == "escalated").collect();
        assert_eq!(esc.len(), 1, "{:?}", report.actions);
        assert!(esc[0].message.contains("3 misses"), "{}", esc[0].message);
        assert!(report.channels[0].priority);
    }

    /// A client that removed channel 1 and removes "1" again (a retry, a
    /// stale list) must not remove the channel added meanwhile.
    #[test]
    fn a_removed_channels_number_is_not_handed_out_at_once() {
        let (c, _, _) = started();
        let h = c.handle();
        let a = h.add_blocking(request("t0", 5)).unwrap();
        h.ask_blocking(|tx| Command::Remove(a.id, tx)).unwrap().unwrap();
        let b = h.add_blocking(request("t0", 5)).unwrap();
        assert_ne!(b.id, a.id, "the removed id was handed out again");
        let stale = h.ask_blocking(|tx| Command::Remove(a.id, tx)).unwrap();
        assert_eq!(stale.unwrap_err().status, 404);
        c.stop().unwrap();
    }

    /// Ids did wrap after 63 (they were the DSCP), so after enough adds
    /// and removes a stale id removed whichever channel had the number
    /// then. Now only the DSCP comes round again: more than twice round
    /// all 63, a channel gets the removed channel's DSCP, the removed
    /// channel's id is refused with 404 and every channel stays.
    #[test]
    fn a_stale_id_never_reaches_a_channel_with_its_dscp_after_wraps() {
        let (c, fake, _) = started();
        let h = c.handle();
        let remove = |id: u64| h.ask_blocking(|tx| Command::Remove(id, tx)).unwrap();
        let keep = h.add_blocking(request("t1", 5)).unwrap();
        let stale = h.add_blocking(request("t0", 5)).unwrap();
        remove(stale.id).unwrap();
        let mut ids = vec![keep.id, stale.id];
        let reused = loop {
            let a = h.add_blocking(request("t0", 5)).unwrap();
            assert!(ids.iter().all(|&i| i < a.id), "ids only grow: {} after {ids:?}", a.id);
            ids.push(a.id);
            assert_ne!(a.dscp, keep.dscp, "a held channel's DSCP was handed out");
            if a.dscp == stale.dscp && ids.len() > 2 * MAX_CHANNELS {
                break a;
            }
            remove(a.id).unwrap();
            assert!(
                ids.len() < 10 * MAX_CHANNELS,
                "DSCP {} never came round again",
                stale.dscp
            );
        };
        let e = remove(stale.id).unwrap_err();
        assert_eq!(e.status, 404, "{}", e.message);
        assert!(e.message.contains("removed"), "{}", e.message);
        let held: Vec<u64> = h.ask_blocking(Command::List).unwrap().iter().map(|s| s.id).collect();
        assert_eq!(held, vec![keep.id, reused.id], "the stale id removed nothing");
        let installed: Vec<u8> = fake.lock().unwrap().installed.iter().map(|i| i.0).collect();
        assert_eq!(installed, vec![keep.dscp, reused.dscp], "the data path keeps both");
        // A miss on the reused DSCP is the new channel's, by its own id.
        let mut sub = h.subscribe();
        fake.lock().unwrap().misses.push(Miss {
            channel: reused.dscp,
            overrun_ns: 1_000,
            ip_id: 7,
            checked_ns: 0,
        });
        let m = sub.blocking_recv().unwrap();
        assert_eq!((m.channel, m.from.as_str()), (reused.id, "t0"));
        c.stop().unwrap();
    }

    #[test]
    fn a_channel_beyond_its_declaration_is_not_escalated() {
        let (c, fake, sw) = started();
        let h = c.handle();
        let a = h.add_blocking(request("t0", 5)).unwrap();
        // 2 Mbit/s declared, burst 3000 B: 1 MB in the first tick after
        // admission is far beyond.
        {
            let mut f = fake.lock().unwrap();
            f.counts[a.dscp as usize].stamped_bytes = 1_000_000;
            f.counts[a.dscp as usize].missed = 5;
        }
        // Escalation is decided in the tick that logs "exceeds".
        let limit = std::time::Instant::now() + Duration::from_secs(30);
        while !h.actions_blocking().unwrap().iter().any(|a| a.kind == "exceeds") {
            assert!(std::time::Instant::now() < limit, "no tick logged the excess");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!sw.priority(a.dscp));
        let report = c.stop().unwrap();
        let kinds: Vec<&str> = report.actions.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, vec!["admitted", "exceeds"], "{:?}", report.actions);
    }

    /// A sender in a guest that waited for a CPU: 2 s at its declared
    /// 2 Mbit/s, nothing for 600 ms, then its backlog (150 KB) in one tick,
    /// with misses. Within its declaration on average, so escalated. The
    /// bytes follow the time that really passed, so a slow host only
    /// spreads them out.
    #[test]
    fn a_sender_catching_up_after_a_stall_is_escalated_not_called_excessive() {
        let (c, fake, sw) = started();
        let h = c.handle();
        let a = h.add_blocking(request("t0", 5)).unwrap();
        let start = std::time::Instant::now();
        let due = |t: std::time::Instant| (2e6 / 8.0 * t.duration_since(start).as_secs_f64()) as u64;
        while start.elapsed() < Duration::from_secs(2) {
            fake.lock().unwrap().counts[a.dscp as usize].stamped_bytes = due(std::time::Instant::now());
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(600));
        {
            let mut f = fake.lock().unwrap();
            f.counts[a.dscp as usize].stamped_bytes = due(std::time::Instant::now());
            f.counts[a.dscp as usize].missed = 3;
        }
        let limit = std::time::Instant::now() + Duration::from_secs(30);
        while !sw.priority(a.dscp) {
            assert!(
                std::time::Instant::now() < limit,
                "not escalated: {:?}",
                h.actions_blocking()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let report = c.stop().unwrap();
        let kinds: Vec<&str> = report.actions.iter().map(|a| a.kind.as_str()).collect();
        assert_eq!(kinds, vec!["admitted", "escalated"], "{:?}", report.actions);
    }

    #[test]
    fn misses_raise_a_reservation_channels_rate_within_the_link() {
        let (c, fake, sw) = started();
        let h = c.handle();
        let mut r = request("t0", 5);
        r.kind = ChannelKind::Reservation;
        let a = h.add_blocking(r).unwrap();
        let r0 = a.reserved_bps.unwrap();
        assert_eq!(sw.reservation(a.dscp), r0.ceil() as u64);
        assert_eq!(
            fake.lock().unwrap().installed[0].2,
            2,
            "reservation channels carry TC 2"
        );
        fake.lock().unwrap().counts[a.dscp as usize].missed = 1;
        let t0 = std::time::Instant::now();
        while sw.reservation(a.dscp) == r0.ceil() as u64 && t0.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r1 = sw.reservation(a.dscp) as f64;
        assert!(r1 > r0 && r1 <= 90e6, "R {r0} -> {r1}");
        let report = c.stop().unwrap();
        assert_eq!(report.channels[0].escalations, 1);
    }

    #[test]
    fn removal_frees_the_number_and_the_switch() {
        let (c, fake, sw) = started();
        let h = c.handle();
        let mut r = request("t0", 5);
        r.kind = ChannelKind::Reservation;
        let a = h.add_blocking(r).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let gone = rt.block_on(h.remove(a.id)).unwrap();
        assert!(gone.removed_ns.is_some());
        assert_eq!(sw.reservation(a.dscp), 0);
        assert!(fake.lock().unwrap().installed.is_empty());
        assert_eq!(rt.block_on(h.remove(a.id)).unwrap_err().status, 404);
        assert!(rt.block_on(h.list()).unwrap().is_empty());
        let report = c.stop().unwrap();
        assert_eq!(report.channels.len(), 1, "removed channels stay in the report");
    }
}
