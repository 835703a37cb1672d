//! The crawler's hot path allocates nothing per poll, over Modbus/TCP and
//! BACnet/IP: a crawl three times as long as another at the same rate
//! makes (nearly) no more allocation calls. The devices are threads of
//! this test answering from fixed buffers, so they allocate nothing per
//! request either. One test per protocol, run one after the other (the
//! counting allocator counts the whole process).

use ontime_crawl::config::{CrawlConfig, CrawlFile};
use ontime_crawl::engine::StopFlags;
use ontime_fieldbus::{bacnet, modbus};
use std::io::{Read, Write};
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: ontime_testkit::alloc::Counting = ontime_testkit::alloc::Counting;

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const RATE: f64 = 500.0;

/// A Modbus/TCP server on a free port: every register reads 7.
fn modbus_device() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let (mut buf, mut len) = ([0u8; 1024], 0usize);
                let mut out = [0u8; modbus::MAX_FRAME];
                loop {
                    match s.read(&mut buf[len..]) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => len += n,
                    }
                    while let modbus::Frame::Complete(n) = modbus::frame(&buf[..len]) {
                        if let Ok(read) = modbus::parse_read(&buf[..n]) {
                            let k = modbus::encode_registers(&read, std::iter::repeat(7), &mut out);
                            if s.write_all(&out[..k]).is_err() {
                                return;
                            }
                        }
                        buf.copy_within(n..len, 0);
                        len -= n;
                    }
                }
            });
        }
    });
    port
}

/// A BACnet/IP device 77 on a free UDP port: I-Am, and every present
/// value reads 7.
fn bacnet_device() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 1500];
        let mut out = [0u8; 1500];
        loop {
            let Ok((n, from)) = s.recv_from(&mut buf) else { return };
            let Ok(apdu) = bacnet::apdu_of(&buf[..n]) else { continue };
            match bacnet::parse_request(apdu) {
                Ok(bacnet::Request::WhoIs(_)) => {
                    let mut i_am = [0u8; 21];
                    let k = bacnet::encode_i_am(77, 1476, 0, &mut i_am);
                    let _ = s.send_to(&i_am[..k], from);
                }
                Ok(bacnet::Request::Confirmed(c)) => {
                    let mut w = bacnet::AnswerWriter::rpm_ack(&mut out, c.invoke);
                    let _ = bacnet::parse_rpm_request(c.data, &mut |id, _| w.value(id, 7.0));
                    if let Some(k) = w.finish() {
                        let _ = s.send_to(&out[..k], from);
                    }
                }
                _ => {}
            }
        }
    });
    port
}

/// Allocation calls of a crawl of `url` for `seconds`, and its ok polls.
fn crawl(url: &str, seconds: u64) -> (usize, u64) {
    let mut file = CrawlFile::for_rate(vec![url.to_string()], RATE, 10, 1_000_000_000).unwrap();
    // A pool that grows while polls queue up (a busy machine) allocates
    // per connection: capped, it is whole after the first second.
    file.max_connections = Some(4);
    let cfg = CrawlConfig::resolve(file).unwrap();
    let opts = ontime_crawl::RunOptions {
        vcpus: 1,
        duration_ns: seconds * 1_000_000_000,
        thread: Default::default(),
        mlockall: false,
        threshold_ns: None,
        report_interval_ns: 1_000_000_000,
        work: Default::default(),
        work_at: Default::default(),
        resend: true,
        hlog: None,
        polls_file: None,
        store: None,
        keep_worst: 0,
        explain_over: None,
        path_nominal: None,
    };
    let manifest = ontime_core::manifest::Manifest::start("native", Default::default());
    let before = ontime_testkit::alloc::calls();
    let r = ontime_crawl::run(cfg, opts, Arc::new(StopFlags::default()), manifest, &mut |_| {}).unwrap();
    (ontime_testkit::alloc::calls() - before, r.polls.ok)
}

/// Two extra seconds at 500 polls/s are 1000 more polls: the calls they
/// add are the collector's per second (a metrics set made when no spare
/// came back in time: tens of calls), fewer than one per four polls,
/// where an allocation per poll would add at least one per poll.
fn allocates_nothing_per_poll(url: &str) {
    let (short, short_ok) = crawl(url, 1);
    let (long, long_ok) = crawl(url, 3);
    let extra_polls = long_ok.saturating_sub(short_ok);
    assert!(extra_polls >= 800, "{short_ok} then {long_ok} polls answered");
    let extra_calls = long.saturating_sub(short);
    assert!(
        extra_calls * 4 < extra_polls as usize,
        "{extra_calls} more allocation calls for {extra_polls} more polls ({short} in 1 s, {long} in 3 s)"
    );
}

#[test]
fn modbus_polls_allocate_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let port = modbus_device();
    allocates_nothing_per_poll(&format!("modbus://127.0.0.1:{port}/1"));
}

#[test]
fn bacnet_polls_allocate_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let port = bacnet_device();
    allocates_nothing_per_poll(&format!("bacnet://127.0.0.1:{port}/77"));
}
