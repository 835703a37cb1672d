//! Document 003's stamp and check against the kernel: two network
//! namespaces joined by a veth pair, the stamp on the sender's end, the
//! check (XDP) on the receiver's. Root only; skips elsewhere. Everything is
//! removed on drop, also when the test fails.
#![cfg(feature = "bpf")]

use std::mem::MaybeUninit;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use ontime_net::datapath::{DataPath, FlowMatch};

const A: &str = "ontime-dp-a";
const B: &str = "ontime-dp-b";

fn sh(cmd: &str) -> String {
    let out = Command::new("sh").args(["-c", cmd]).output().unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Netns;

impl Netns {
    fn new() -> Netns {
        let _ = Command::new("ip").args(["netns", "del", A]).output();
        let _ = Command::new("ip").args(["netns", "del", B]).output();
        let n = Netns;
        sh(&format!("ip netns add {A} && ip netns add {B}"));
        sh(&format!("ip link add dpa netns {A} type veth peer name dpb netns {B}"));
        // The sender's MTU is 4 bytes smaller: room for the label.
        sh(&format!(
            "ip -n {A} link set dpa mtu 1496 up && ip -n {A} addr add 10.77.0.1/24 dev dpa"
        ));
        sh(&format!(
            "ip -n {B} link set dpb up && ip -n {B} addr add 10.77.0.2/24 dev dpb"
        ));
        n
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", A]).output();
        let _ = Command::new("ip").args(["netns", "del", B]).output();
    }
}

#[test]
fn packets_are_stamped_checked_and_arrive_whole() {
    if !ontime_testkit::root_or_skip("the channel data path") {
        return;
    }
    let _ns = Netns::new();
    let mut object = MaybeUninit::uninit();
    let mut dp = DataPath::load(&mut object).expect("load");
    let (a, b) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
    // Channel 5: 100 ms, never missed here; channel 6: deadline 0, always missed.
    dp.set_channel(
        FlowMatch {
            src: a,
            dst: b,
            dport: Some(5000),
        },
        5,
        1,
        100_000_000,
    )
    .unwrap();
    dp.set_channel(
        FlowMatch {
            src: a,
            dst: b,
            dport: Some(5001),
        },
        6,
        1,
        0,
    )
    .unwrap();
    dp.stamp_on(&Path::new("/run/netns").join(A), "dpa").unwrap();
    dp.check_on(&Path::new("/run/netns").join(B), "dpb").unwrap();

    // A receiver in B counts whole datagrams on 5000, 5001 and 5002 (no channel).
    let mut recv = std::process::Command::new("ip")
        .args(["netns", "exec", B, "python3", "-c"])
        .arg(
            "import socket,select,sys\n\
             socks=[]\n\
             for p in (5000,5001,5002):\n s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('10.77.0.2',p)); socks.append(s)\n\
             got={5000:0,5001:0,5002:0}; sizes=set()\n\
             print('ready',flush=True)\n\
             while True:\n r,_,_=select.select(socks,[],[],2.0)\n if not r: break\n for s in r:\n  d=s.recv(65535); got[s.getsockname()[1]]+=1; sizes.add(len(d))\n\
             print(got[5000],got[5001],got[5002],max(sizes) if sizes else 0)\n",
        )
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(recv.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    // 20 datagrams per port, the last 5 of each at the sender's MTU (1496 - 28 bytes of headers).
    sh(&format!(
        "ip netns exec {A} python3 -c \"\nimport socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\nfor p in (5000,5001,5002):\n for i in range(20):\n  s.sendto(b'x'*(100 if i<15 else 1468),('10.77.0.2',p))\n\""
    ));
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(recv.wait().unwrap().success());
    let got: Vec<u64> = line.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert_eq!(
        got,
        vec![20, 20, 20, 1468],
        "datagrams per port and the largest: {line}"
    );

    let c5 = dp.counts(5);
    assert_eq!((c5.stamped, c5.on_time, c5.missed), (20, 20, 0), "{c5:?}");
    let c6 = dp.counts(6);
    assert_eq!((c6.stamped, c6.on_time, c6.missed), (20, 0, 20), "{c6:?}");
    assert!(c6.max_overrun_ns > 0);
    let misses = dp.misses().unwrap();
    assert_eq!(misses.len(), 20);
    assert!(misses.iter().all(|m| m.channel == 6 && m.overrun_ns > 0));
    assert_eq!(dp.errors(), (0, 0));

    // A foreign MPLS frame (two labels: not bottom of stack) is counted and dropped.
    sh(&format!(
        "ip netns exec {A} python3 -c \"\nimport socket\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind(('dpa',0))\nmac=open('/sys/class/net/dpa/address').read().strip().replace(':','')\ns.send(bytes.fromhex('ffffffffffff'+mac+'8847'+'00010040'+'00000140')+bytes(40))\n\""
    ));
    let t0 = std::time::Instant::now();
    while dp.errors().0 == 0 && t0.elapsed() < std::time::Duration::from_secs(120) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(dp.errors().0, 1, "the foreign frame was not counted");
}
