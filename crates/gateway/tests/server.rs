//! The gateway answers every malformed request with a 4xx and a reason,
//! and keeps serving afterwards.

use ontime_gateway::server;
use ontime_gateway::GatewayConfig;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(raw).unwrap();
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn post(path: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn malformed_requests_get_4xx_with_a_reason() {
    let cfg = GatewayConfig::generated("127.0.0.1:0".parse().unwrap(), 2, 100, false);
    let gw = server::start(cfg).unwrap();
    let addr = gw.addrs()[0];

    let ok = exchange(addr, &post("/b1/getValues", r#"{"points":[1,2,500]}"#));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains(r#""status":"unknown-point""#), "{ok}");
    assert!(ok.contains(r#""recv_ns":"#));

    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (post("/b0/getValues", "{not json"), "400", "not a getValues request"),
        (post("/b0/getValues", r#"{"points":[]}"#), "400", "1..1000 points"),
        (
            post("/b0/getValues", r#"{"points":[1],"extra":2}"#),
            "400",
            "unknown field",
        ),
        (
            post("/b0/getValues", r#"{"points":[-1]}"#),
            "400",
            "not a getValues request",
        ),
        (post("/b9/getValues", r#"{"points":[1]}"#), "404", "no building 'b9'"),
        (post("/b0/setValues", r#"{"points":[1]}"#), "404", "unknown operation"),
        (post("/", ""), "404", "no route"),
        (
            b"GET /b0/getValues HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            "405",
            "needs POST",
        ),
        (post("/b0/getValues", &"x".repeat(70_000)), "413", "larger than"),
    ];
    for (raw, code, reason) in cases {
        let r = exchange(addr, &raw);
        assert!(r.starts_with(&format!("HTTP/1.1 {code}")), "expected {code}: {r}");
        assert!(r.contains(reason), "expected '{reason}' in {r}");
    }
    // Garbage that is not HTTP at all: the connection just ends.
    let _ = exchange(addr, b"\x00\x01\x02 not http at all\r\n\r\n");
    // Still serving.
    let again = exchange(addr, &post("/b0/getValues", r#"{"points":[0]}"#));
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    let stats = gw.stop().unwrap();
    assert_eq!(stats.bad_requests, 9);
}

/// Where the kernel stamps received segments (it does on loopback and
/// veth), the receive time is the kernel's stamp: the response and the
/// counters say so, and the handler's own stamp, in the receive log beside
/// it, is never earlier.
#[test]
fn the_kernel_receive_stamp_is_the_receive_time_when_present() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("recv.log");
    let mut cfg = GatewayConfig::generated("127.0.0.1:0".parse().unwrap(), 1, 100, false);
    cfg.log = Some(log.clone());
    let gw = server::start(cfg).unwrap();
    let addr = gw.addrs()[0];
    // The kernel turns stamping on from a work item after the listener
    // asked for it: wait for the first kernel stamp (not a timing limit).
    let mut warmup = 0;
    loop {
        let r = exchange(addr, &post("/b0/getValues", r#"{"points":[1,2]}"#));
        warmup += 1;
        if r.contains(r#""stamp":"kernel""#) {
            break;
        }
        assert!(warmup < 100, "no kernel stamp after {warmup} requests: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..5 {
        let r = exchange(addr, &post("/b0/getValues", r#"{"points":[1,2]}"#));
        assert!(r.contains(r#""stamp":"kernel""#), "{r}");
    }
    let stats = gw.stop().unwrap();
    assert_eq!(stats.stamps.kernel + stats.stamps.user, warmup + 5);
    assert!(stats.stamps.kernel >= 6, "{:?}", stats.stamps);
    assert_eq!(stats.stamps.user_minus_kernel.count, stats.stamps.kernel);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = 0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = l.split(' ').collect();
        let (recv, user): (u64, u64) = (f[0].parse().unwrap(), f[6].parse().unwrap());
        assert!(recv <= user, "kernel stamp after the handler's: {l}");
        lines += 1;
    }
    assert_eq!(lines, 2 * (warmup + 5), "two points per request");
    // Stopped cleanly, the log ends with its end mark counting them.
    assert!(
        text.ends_with(&format!("# end: {lines} lines\n")),
        "{}",
        text.lines().last().unwrap_or("")
    );
}
