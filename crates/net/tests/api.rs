//! The controller's HTTP API over its Unix socket, with a plane that only
//! remembers what it was told (no root needed): the token file's mode,
//! 401 without or with a wrong token (and nothing changes), 4xx with a
//! clear message for bad requests, admission refusals, removal, the
//! misses stream a sender subscribes to, and what idle connections may
//! hold (over the socket and over TCP).
use hyper::Method;
use ontime_net::api::{self, Client, Listen, Target};
use ontime_net::channel::Link;
use ontime_net::controller::{
    ChannelCounts, Controller, ControllerConfig, Endpoint, FlowMatch, Miss, MissEvent, Plane,
};
use ontime_net::edf::SwitchTable;
use ontime_testkit::{wait_until, MIN_HANG_BOUND};
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Seen {
    installed: Vec<u8>,
    misses: Vec<Miss>,
    missed: u64,
}

struct Fake(Arc<Mutex<Seen>>);

impl Plane for Fake {
    fn install(&mut self, id: u8, _: FlowMatch, _: u8, _: u64) -> anyhow::Result<()> {
        self.0.lock().unwrap().installed.push(id);
        Ok(())
    }
    fn remove(&mut self, _: FlowMatch) -> anyhow::Result<()> {
        Ok(())
    }
    fn counts(&self, _: u8) -> ChannelCounts {
        ChannelCounts {
            missed: self.0.lock().unwrap().missed,
            ..Default::default()
        }
    }
    fn misses(&mut self) -> Vec<Miss> {
        std::mem::take(&mut self.0.lock().unwrap().misses)
    }
    fn errors(&self) -> (u64, u64) {
        (0, 0)
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    /// Where it listens over TCP too, if asked to.
    tcp: Option<std::net::SocketAddr>,
    token: String,
    seen: Arc<Mutex<Seen>>,
    _server: api::ApiServer,
    _controller: Controller,
}

fn setup() -> Setup {
    setup_with(api::ServeLimits::default(), false)
}

fn setup_with(limits: api::ServeLimits, over_tcp: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ep = |name: &str, last: u8| Endpoint {
        name: name.into(),
        addr: Ipv4Addr::new(10, 77, 1, last),
        threads_file: None,
    };
    let config = ControllerConfig {
        link: Link {
            rate_bps: 100e6,
            mtu_bytes: 1514.0,
            c_tot_bytes: 1514.0,
            d_tot_ns: 0.0,
            max_share: 0.9,
        },
        endpoints: vec![ep("building", 100), ep("t0", 1), ep("t1", 2)],
        escalate_after: 1,
        hold_ns: 1_000_000_000,
        log: None,
        echo: false,
    };
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    let controller = Controller::start(config, Some(SwitchTable::new()), move || {
        Ok(Box::new(Fake(s2)) as Box<dyn Plane>)
    })
    .unwrap();
    let token_file = dir.path().join("token");
    let token = api::create_token_file(&token_file).unwrap();
    let mode = std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the token file is for its owner only");
    assert_eq!(api::read_token_file(&token_file).unwrap(), token);
    let socket = dir.path().join("c.sock");
    let server = api::serve_with(
        &Listen {
            socket: socket.clone(),
            tcp: over_tcp.then(|| std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, 0))),
        },
        token.clone(),
        controller.handle(),
        limits,
    )
    .unwrap();
    Setup {
        _dir: dir,
        socket,
        tcp: server.tcp,
        token,
        seen,
        _server: server,
        _controller: controller,
    }
}

fn body(v: serde_json::Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(&v).unwrap())
}

fn channel(from: &str, port: u16, rate_bps: f64, deadline_ns: i64) -> serde_json::Value {
    serde_json::json!({
        "from": from, "to": "building", "port": port, "kind": "deadline",
        "rate_bps": rate_bps, "burst_bytes": 2000.0, "deadline_ns": deadline_ns
    })
}

fn error_of(b: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(b).unwrap();
    v["error"].as_str().unwrap().to_string()
}

#[test]
fn requests_need_the_token_and_change_nothing_without_it() {
    let s = setup();
    let wrong = Client::new(Target::Socket(s.socket.clone()), "0".repeat(64)).unwrap();
    let (st, b) = wrong
        .call(Method::POST, "/v1/channels", body(channel("t0", 5000, 2e6, 5_000_000)))
        .unwrap();
    assert_eq!(st, 401, "{}", String::from_utf8_lossy(&b));
    assert_eq!(error_of(&b), "wrong token");
    let (st, _) = wrong.call(Method::GET, "/v1/channels", None).unwrap();
    assert_eq!(st, 401);
    // No Authorization header at all.
    let none = Client::new(Target::Socket(s.socket.clone()), String::new()).unwrap();
    let (st, b) = none.call(Method::GET, "/v1/status", None).unwrap();
    assert_eq!(st, 401);
    assert!(error_of(&b).contains("bearer token"), "{}", error_of(&b));
    assert!(s.seen.lock().unwrap().installed.is_empty(), "nothing was installed");
    let good = Client::new(Target::Socket(s.socket.clone()), s.token.clone()).unwrap();
    let (st, b) = good.call(Method::GET, "/v1/channels", None).unwrap();
    assert_eq!((st, b.as_slice()), (200, b"[]\n".as_slice()));
}

#[test]
fn bad_requests_get_a_4xx_with_the_reason() {
    let s = setup();
    let c = Client::new(Target::Socket(s.socket.clone()), s.token.clone()).unwrap();
    let post = |v: serde_json::Value| c.call(Method::POST, "/v1/channels", body(v)).unwrap();
    let (st, b) = post(channel("t0", 5000, -1.0, 5_000_000));
    assert_eq!((st, error_of(&b).as_str()), (400, "rate must be above 0"));
    let (st, b) = post(channel("t0", 5000, 2e6, 0));
    assert_eq!((st, error_of(&b).as_str()), (400, "deadline must be above 0"));
    // Deadlines the MPLS label cannot carry (defect 3: 201, then every
    // packet counted missed and the channel escalated).
    for d in [10_000_000_000u64, u64::MAX] {
        let mut req = channel("t0", 5000, 2e6, 0);
        req["deadline_ns"] = d.into();
        let (st, b) = post(req);
        assert_eq!(st, 400, "deadline_ns {d}: {}", error_of(&b));
        assert!(error_of(&b).contains("at most 5.243 s"), "{}", error_of(&b));
    }
    let (st, b) = post(channel("t0", 5000, 2e6, -5));
    assert_eq!(st, 400);
    assert!(error_of(&b).contains("deadline_ns"), "{}", error_of(&b));
    let (st, b) = post(channel("t7", 5000, 2e6, 5_000_000));
    assert_eq!(st, 404);
    assert!(error_of(&b).contains("unknown sender 't7'"), "{}", error_of(&b));
    let (st, b) = c
        .call(Method::POST, "/v1/channels", Some(b"{not json".to_vec()))
        .unwrap();
    assert_eq!(st, 400);
    assert!(error_of(&b).starts_with("bad channel request"), "{}", error_of(&b));
    let mut extra = channel("t0", 5000, 2e6, 5_000_000);
    extra["colour"] = "red".into();
    assert_eq!(post(extra).0, 400, "unknown fields are refused");
    // Admitted, then the same flow again is a duplicate.
    let (st, b) = post(channel("t0", 5000, 2e6, 5_000_000));
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&b));
    let (st, b) = post(channel("t0", 5000, 2e6, 5_000_000));
    assert_eq!(st, 409);
    assert!(error_of(&b).starts_with("duplicate"), "{}", error_of(&b));
    // Beyond the link: refused with the numbers.
    let (st, b) = post(channel("t1", 5001, 95e6, 50_000_000));
    assert_eq!(st, 409);
    assert!(
        error_of(&b).contains("link capacity: the channels would need 97.000 Mbit/s, 90.000 Mbit/s may be reserved"),
        "{}",
        error_of(&b)
    );
    assert_eq!(s.seen.lock().unwrap().installed, vec![1], "only the admitted channel");
    let (st, _) = c.call(Method::DELETE, "/v1/channels/9", None).unwrap();
    assert_eq!(st, 404);
    let (st, _) = c.call(Method::DELETE, "/v1/channels/x", None).unwrap();
    assert_eq!(st, 400);
    let (st, _) = c.call(Method::PUT, "/v1/channels", None).unwrap();
    assert_eq!(st, 405);
    let (st, _) = c.call(Method::GET, "/nowhere", None).unwrap();
    assert_eq!(st, 404);
    let (st, _) = c.call(Method::DELETE, "/v1/channels/1", None).unwrap();
    assert_eq!(st, 200);
    let (st, b) = c.call(Method::GET, "/v1/actions", None).unwrap();
    assert_eq!(st, 200);
    let kinds: Vec<String> = serde_json::from_slice::<Vec<serde_json::Value>>(&b)
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, vec!["admitted", "refused", "removed"]);
}

#[test]
fn a_sender_follows_its_misses() {
    let s = setup();
    let c = Client::new(Target::Socket(s.socket.clone()), s.token.clone()).unwrap();
    let (st, _) = c
        .call(Method::POST, "/v1/channels", body(channel("t0", 5000, 2e6, 5_000_000)))
        .unwrap();
    assert_eq!(st, 201);
    let seen = s.seen.clone();
    let handle = s._controller.handle();
    std::thread::spawn(move || {
        // Once the subscription is up: three misses of channel 1.
        wait_until("the miss subscription", Duration::from_secs(30), || {
            handle.subscribers() > 0
        });
        let mut g = seen.lock().unwrap();
        g.missed = 3;
        for ip_id in 0..3 {
            g.misses.push(Miss {
                channel: 1,
                overrun_ns: 1_000_000,
                ip_id,
                checked_ns: 0,
            });
        }
    });
    let mut got: Vec<MissEvent> = Vec::new();
    let stop = AtomicBool::new(false);
    c.stream("/v1/misses?from=t0", &stop, |line| {
        got.push(serde_json::from_slice(line).unwrap());
        got.len() < 3
    })
    .unwrap();
    assert_eq!(got.iter().map(|m| m.ip_id).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(got.iter().all(|m| m.from == "t0" && m.channel == 1));
    // The misses made the controller raise the channel's priority (in the
    // tick that sent them, or the next).
    wait_until("the escalation", Duration::from_secs(30), || {
        let (_, b) = c.call(Method::GET, "/v1/channels", None).unwrap();
        let l: Vec<serde_json::Value> = serde_json::from_slice(&b).unwrap();
        l[0]["priority"] == true
    });
}

/// ~20 000 idle connections took every descriptor of the controller (its
/// miss ring reads failed with EMFILE). Connections are capped and one
/// that sends nothing is closed, so the API keeps answering.
#[test]
fn idle_connections_are_capped_and_closed() {
    let s = setup_with(
        api::ServeLimits {
            max_connections: 4,
            per_client: 64,
            first_request: Duration::from_millis(300),
            idle: Duration::from_secs(3600),
        },
        false,
    );
    // More idle connections than the cap.
    let idle: Vec<Raw> = (0..10).map(|_| Raw::socket(&s)).collect();
    let c = Client::new(Target::Socket(s.socket.clone()), s.token.clone()).unwrap();
    let (st, _) = c.call(Method::GET, "/v1/channels", None).unwrap();
    assert_eq!(st, 200, "the API answers while idle clients hold connections");
    for mut conn in idle {
        // Closed to make room, or when its time for a first request is up.
        assert!(conn.until_closed().is_empty(), "closed without an answer");
    }
}

/// A raw connection to the API, for what a client library would not do:
/// connect and send nothing, or hold a stream open.
enum Raw {
    Socket(std::os::unix::net::UnixStream),
    Tcp(std::net::TcpStream),
}

impl Raw {
    fn socket(s: &Setup) -> Raw {
        Raw::Socket(std::os::unix::net::UnixStream::connect(&s.socket).unwrap())
    }

    fn tcp(s: &Setup) -> Raw {
        Raw::Tcp(std::net::TcpStream::connect(s.tcp.expect("listening over TCP")).unwrap())
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Raw::Socket(c) => {
                c.set_read_timeout(Some(MIN_HANG_BOUND)).unwrap();
                c as &mut dyn ReadWrite
            }
            Raw::Tcp(c) => {
                c.set_read_timeout(Some(MIN_HANG_BOUND)).unwrap();
                c as &mut dyn ReadWrite
            }
        }
    }

    /// All the server sends until it closes the connection; fails if it
    /// does not close it within the hang bound.
    fn until_closed(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.io()
            .read_to_end(&mut out)
            .expect("the server closes the connection");
        out
    }

    /// Sends `request` and reads up to the end of the answer's head.
    fn ask(&mut self, request: &str) -> String {
        let io = self.io();
        io.write_all(request.as_bytes()).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = io.read(&mut byte).expect("an answer within the hang bound");
            assert_eq!(
                n,
                1,
                "closed before the answer's head: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A client may hold 4 of 6 connections, and a connection may wait an hour
/// for its first request: only closing idle ones to make room (not their
/// time running out) can let a client with the token in.
fn crowded() -> api::ServeLimits {
    api::ServeLimits {
        max_connections: 6,
        per_client: 4,
        first_request: Duration::from_secs(3600),
        idle: Duration::from_secs(3600),
    }
}

/// `GET /v1/status` through `client`, on a thread of its own so that a
/// hang fails the test at the hang bound instead of blocking it.
fn status(client: Client) -> u16 {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = client.call(Method::GET, "/v1/status", None).map(|(st, _)| st);
        let _ = tx.send(r.map_err(|e| format!("{e:#}")));
    });
    match rx.recv_timeout(MIN_HANG_BOUND) {
        Ok(r) => r.unwrap(),
        Err(_) => panic!("no answer to /v1/status within {MIN_HANG_BOUND:?}"),
    }
}

/// About 260 idle connections without the token held every connection the
/// controller would serve, so /v1/status and channel adds each waited the
/// 30 s idle timeout. Here a client's idle connections (12 over the
/// socket, and over TCP 12 more from 127.0.0.1: together four times the
/// total) are held for good, and the client with the token is answered.
#[test]
fn idle_connections_without_the_token_keep_no_one_out() {
    for over_tcp in [false, true] {
        let s = setup_with(crowded(), over_tcp);
        let mut idle: Vec<Raw> = (0..12).map(|_| Raw::socket(&s)).collect();
        let target = match s.tcp {
            Some(a) => {
                idle.extend((0..12).map(|_| Raw::tcp(&s)));
                Target::Tcp(a.to_string())
            }
            None => Target::Socket(s.socket.clone()),
        };
        let c = Client::new(target, s.token.clone()).unwrap();
        assert_eq!(status(c), 200, "over TCP: {over_tcp}");
        // The socket's client's oldest was closed to make room, unanswered.
        assert!(idle[0].until_closed().is_empty());
    }
}

/// Connections that have shown the token are never closed to make room: a
/// client holding its limit of them (here miss streams over the socket)
/// is refused the next with 429 and the reason; its streams go on, and
/// another client (over TCP) is served.
#[test]
fn a_client_holding_its_limit_with_the_token_is_refused_with_429() {
    let s = setup_with(crowded(), true);
    let follow = format!(
        "GET /v1/misses HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\n\r\n",
        s.token
    );
    let mut streams: Vec<Raw> = (0..4).map(|_| Raw::socket(&s)).collect();
    for st in &mut streams {
        let head = st.ask(&follow);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let answer = String::from_utf8(Raw::socket(&s).until_closed()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("already holds 4 connections"), "{answer}");
    assert_eq!(s._controller.handle().subscribers(), 4, "the streams go on");
    let tcp = s.tcp.expect("listening over TCP").to_string();
    let c = Client::new(Target::Tcp(tcp), s.token.clone()).unwrap();
    assert_eq!(status(c), 200);
    drop(streams);
}
