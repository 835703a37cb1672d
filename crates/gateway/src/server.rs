//! The gateway server: routes `/<building>/getValues` over HTTP, or
//! Modbus/TCP reads of a unit's registers ([`crate::config::Protocol`]);
//! stamps each request's receive time (the kernel's stamp where it gives
//! one, see [`crate::kstamp`], and the handler's own beside it), applies
//! the controller delay and the injected faults, logs receive times and
//! answers.
//!
//! Nothing a client sends can crash it: bodies are size-limited and parsed
//! with serde, every malformed request gets a 4xx with a reason.

use crate::config::GatewayConfig;
use crate::points;
use crate::recvlog::{LogBatch, LogWriter};
use crate::wire::{self, ErrorBody, GetValuesResponse, PointStatus, PointValue};
use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use ontime_core::MonoNs;
use rand::Rng;
use serde::Serialize;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crate::state::{Counters, Draw, StampTally, State};
pub use crate::state::{GatewayStats, StampStats};

/// Stalls a running gateway: until the instant stored (CLOCK_MONOTONIC
/// ns), every answer due waits, as a controller busy with something else
/// would hold it; requests are still received and stamped (the ground
/// truth of the attribution's class c). 0: not stalled.
#[derive(Clone)]
pub struct GatewayStall(Arc<AtomicU64>);

impl GatewayStall {
    /// Holds every answer due until `until_ns` (the latest of the stalls
    /// held at once); 0 lets go of every stall.
    pub fn stall_until(&self, until_ns: u64) {
        if until_ns == 0 {
            self.0.store(0, Relaxed);
        } else {
            self.0.fetch_max(until_ns, Relaxed);
        }
    }
}

/// Returned by the service to make hyper close the connection unanswered.
#[derive(Debug)]
struct DropConnection;

impl std::fmt::Display for DropConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped on purpose (fault injection)")
    }
}

impl std::error::Error for DropConnection {}

/// A gateway serving in background threads.
pub struct RunningGateway {
    addrs: Vec<SocketAddr>,
    stop_tx: Option<tokio::sync::watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    state: Arc<State>,
    log: Option<LogWriter>,
}

impl RunningGateway {
    /// The addresses actually bound (port 0 resolves here), in the order of
    /// [`GatewayConfig::listen_addrs`].
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The write error that stopped the receive log, if any: the caller
    /// should stop, since measurements are no longer stored.
    pub fn log_failure(&self) -> Option<String> {
        self.log.as_ref().and_then(|l| l.failure())
    }

    /// What stalls this gateway's answers (an injected stall).
    pub fn stall(&self) -> GatewayStall {
        GatewayStall(self.state.stalled_until.clone())
    }

    /// Stops serving, flushes the receive log and returns the counters.
    pub fn stop(mut self) -> Result<GatewayStats> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<GatewayStats> {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut stats = self.state.counters.snapshot();
        stats.stamps = self.state.stamps.snapshot();
        if let Some(log) = self.log.take() {
            // The runtime (and every handler's sender clone) is gone; our
            // State still holds one sender, which the writer must not wait
            // for: it is dropped with the last Arc below.
            let state = std::mem::replace(&mut self.state, Arc::new(State::empty()));
            drop(state);
            log.finish()?;
        }
        Ok(stats)
    }
}

impl Drop for RunningGateway {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// What serves one address: a TCP listener (HTTP, Modbus) or a UDP
/// socket (BACnet/IP).
enum Listener {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// A listening socket with a deep accept queue: a crawler that opens many
/// connections at once must not lose SYNs (a lost SYN costs a 1 s retry).
fn listen_socket(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(4096)?;
    s.set_nonblocking(true)?;
    // Failing here is reported per connection (accept_loop), not fatal.
    let _ = crate::kstamp::enable(&s);
    Ok(s.into())
}

/// Binds every listen address and starts serving in background threads.
pub fn start(cfg: GatewayConfig) -> Result<RunningGateway> {
    cfg.validate()?;
    let listen = cfg.listen_addrs();
    let mut listeners = Vec::new();
    let mut addrs = Vec::new();
    let udp = cfg.protocol == crate::config::Protocol::Bacnet;
    for a in &listen {
        let busy =
            || format!("cannot listen on {a}: is another gateway running there? pick another address with --listen");
        let l = if udp {
            Listener::Udp(crate::bacnet::bind(*a).with_context(busy)?)
        } else {
            Listener::Tcp(listen_socket(*a).with_context(busy)?)
        };
        addrs.push(match &l {
            Listener::Tcp(t) => t.local_addr()?,
            Listener::Udp(u) => u.local_addr()?,
        });
        listeners.push(l);
    }
    let mut routes = HashMap::new();
    let mut units = HashMap::new();
    let mut devices = HashMap::new();
    for (bi, b) in cfg.buildings.iter().enumerate() {
        let li = listen
            .iter()
            .position(|a| *a == b.listen.unwrap_or(cfg.listen))
            .expect("every building's address is in listen_addrs");
        routes.insert((li, b.name.clone()), bi);
        if let Some(unit) = cfg.unit_of(bi) {
            units.insert((li, unit), bi);
        }
        devices.entry(li).or_insert((cfg.device_of(bi), bi));
    }
    let log = match &cfg.log {
        Some(p) => Some(LogWriter::create(
            p,
            cfg.buildings.iter().map(|b| b.name.clone()).collect(),
        )?),
        None => None,
    };
    let state = Arc::new(State {
        routes,
        units,
        devices,
        counters: Counters::default(),
        stamps: StampTally::default(),
        log: log.as_ref().map(|l| l.sender()),
        cfg,
        boot_id: wire::boot_id(),
        stalled_until: Arc::default(),
    });
    let policy = state.cfg.policy;
    if policy.is_realtime() {
        // Fail here, in words, rather than serve at the wrong priority:
        // try it on a short-lived thread first.
        std::thread::spawn(move || ontime_core::rt::set_policy(policy))
            .join()
            .map_err(|_| anyhow::anyhow!("the policy check thread panicked"))?
            .context("the gateway's --policy")?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(state.cfg.threads)
        .thread_name("gw-worker")
        .on_thread_start(move || {
            if policy.is_realtime() {
                // Checked above; a failure now would only repeat it.
                let _ = ontime_core::rt::set_policy(policy);
            }
        })
        .enable_all()
        .build()
        .context("cannot start the gateway's runtime")?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let st = state.clone();
    let thread = std::thread::Builder::new()
        .name("gw-main".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut tasks = Vec::new();
                for (li, l) in listeners.into_iter().enumerate() {
                    let st = st.clone();
                    let mut stop = stop_rx.clone();
                    tasks.push(tokio::spawn(async move {
                        match l {
                            Listener::Tcp(l) => match tokio::net::TcpListener::from_std(l) {
                                Ok(l) => accept_loop(l, li, st, &mut stop).await,
                                Err(e) => ontime_core::errln!("gateway: listener failed: {e}"),
                            },
                            Listener::Udp(u) => match tokio::net::UdpSocket::from_std(u) {
                                Ok(u) => crate::bacnet::serve(u, st, li).await,
                                Err(e) => ontime_core::errln!("gateway: socket failed: {e}"),
                            },
                        }
                    }));
                }
                let mut stop = stop_rx;
                let _ = stop.wait_for(|s| *s).await;
                for t in tasks {
                    t.abort();
                }
            });
            // Dropping the runtime aborts open connections and drops every
            // handler's log sender.
            runtime.shutdown_timeout(Duration::from_millis(200));
        })
        .context("cannot start the gateway thread")?;
    Ok(RunningGateway {
        addrs,
        stop_tx: Some(stop_tx),
        thread: Some(thread),
        state,
        log,
    })
}

async fn accept_loop(
    l: tokio::net::TcpListener,
    li: usize,
    st: Arc<State>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            r = l.accept() => {
                let Ok((stream, _peer)) = r else { continue };
                let _ = stream.set_nodelay(true);
                if let Err(e) = crate::kstamp::enable(&stream) {
                    if let Ok(mut u) = st.stamps.unavailable.lock() {
                        u.get_or_insert_with(|| format!("SO_TIMESTAMPNS: {e}"));
                    }
                }
                let (stream, kernel_stamp) = crate::kstamp::StampedStream::new(stream);
                let st = st.clone();
                if st.cfg.protocol == crate::config::Protocol::Modbus {
                    tokio::spawn(crate::modbus::serve(stream, kernel_stamp, st, li));
                    continue;
                }
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let svc = hyper::service::service_fn(move |req| {
                        handle(req, st.clone(), li, kernel_stamp.load(Relaxed))
                    });
                    // Errors here are client disconnects, malformed HTTP or
                    // injected drops: the connection ends, the server goes on.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .keep_alive(true)
                        .half_close(true)
                        .serve_connection(io, svc)
                        .await;
                });
            }
            _ = stop.changed() => return,
        }
    }
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(bytes)))
        .expect("static response parts are valid")
}

fn error(st: &State, status: StatusCode, msg: String) -> Response<Full<Bytes>> {
    st.counters.bad_requests.fetch_add(1, Relaxed);
    json_response(status, &ErrorBody { error: msg })
}

/// `kernel_ns`: the kernel's receive stamp of the connection's last read,
/// the one that completed this request (0: none).
async fn handle(
    req: Request<Incoming>,
    st: Arc<State>,
    li: usize,
    kernel_ns: u64,
) -> Result<Response<Full<Bytes>>, DropConnection> {
    // The measurement time of every point: when the request arrived.
    let user_ns = MonoNs::now().0;
    let (recv_ns, stamp) = st.stamps.choose(kernel_ns, user_ns);
    st.counters.requests.fetch_add(1, Relaxed);

    let poll = req
        .headers()
        .get(wire::POLL_HEADER)
        .and_then(|v| wire::parse_poll_id(v.as_bytes(), &st.boot_id));
    let path = req.uri().path();
    let Some((name, verb)) = path.trim_start_matches('/').split_once('/') else {
        return Ok(error(
            &st,
            StatusCode::NOT_FOUND,
            format!("no route '{path}': use /<building>/getValues"),
        ));
    };
    let Some(&bi) = st.routes.get(&(li, name.to_string())) else {
        return Ok(error(
            &st,
            StatusCode::NOT_FOUND,
            format!("no building '{name}' at this address"),
        ));
    };
    if verb != wire::GET_VALUES {
        return Ok(error(
            &st,
            StatusCode::NOT_FOUND,
            format!("unknown operation '{verb}': use getValues"),
        ));
    }
    if req.method() != Method::POST {
        return Ok(error(
            &st,
            StatusCode::METHOD_NOT_ALLOWED,
            "getValues needs POST".into(),
        ));
    }
    let body = match Limited::new(req.into_body(), wire::MAX_BODY_BYTES).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let too_big = e.downcast_ref::<http_body_util::LengthLimitError>().is_some();
            return Ok(if too_big {
                error(
                    &st,
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("body larger than {} bytes", wire::MAX_BODY_BYTES),
                )
            } else {
                error(&st, StatusCode::BAD_REQUEST, format!("cannot read body: {e}"))
            });
        }
    };
    let request = match wire::parse_request(&body) {
        Ok(r) => r,
        Err(reason) => return Ok(error(&st, StatusCode::BAD_REQUEST, reason)),
    };

    let f = &st.cfg.faults;
    let Draw {
        error: error_now,
        drop: drop_now,
        malformed: malformed_now,
        delay_ns,
    } = st.draw();
    if error_now {
        st.counters.injected_errors.fetch_add(1, Relaxed);
        return Ok(json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &ErrorBody {
                error: "controller unavailable (injected)".into(),
            },
        ));
    }

    let b = &st.cfg.buildings[bi];
    let values: Vec<PointValue> = {
        let mut rng = rand::thread_rng();
        request
            .points
            .iter()
            .map(|&id| {
                if id >= b.points {
                    PointValue {
                        id,
                        value: None,
                        status: PointStatus::UnknownPoint,
                    }
                } else if f.point_fault_probability > 0.0 && rng.gen_bool(f.point_fault_probability) {
                    PointValue {
                        id,
                        value: None,
                        status: PointStatus::Fault,
                    }
                } else {
                    PointValue {
                        id,
                        value: Some(points::value(id, b.analog_percent, recv_ns)),
                        status: PointStatus::Ok,
                    }
                }
            })
            .collect()
    };
    // The gateway measured these points whether or not the answer arrives.
    if let Some(log) = &st.log {
        let _ = log.send(LogBatch {
            recv_ns,
            user_ns,
            building: bi,
            points: request.points,
            poll,
        });
    }
    st.hold(delay_ns).await;
    if drop_now {
        st.counters.injected_drops.fetch_add(1, Relaxed);
        return Err(DropConnection);
    }
    let resp = GetValuesResponse {
        recv_ns,
        stamp: Some(stamp),
        answered_ns: Some(MonoNs::now().0),
        values,
    };
    if malformed_now {
        st.counters.injected_malformed.fetch_add(1, Relaxed);
        let mut bytes = serde_json::to_vec(&resp).unwrap_or_default();
        bytes.truncate(bytes.len() / 2);
        return Ok(Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .expect("static response parts are valid"));
    }
    st.counters.answered_ok.fetch_add(1, Relaxed);
    Ok(json_response(StatusCode::OK, &resp))
}
