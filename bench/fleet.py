#!/usr/bin/env python3
"""The fleet on this machine (docs/fleet.md): nats-server with
JetStream on a temporary store, document 002's load as one window (10 busy
processes as 10 "VMs", stacks at 1 kHz, a 60 s window, recorded by
`ontime profile record --continuous`), then:

- publishing: `ontime agent` replays K copies of that window unpaced; windows
  and MB per second into JetStream, and how many hosts one server carries at
  30 s windows (published windows per second x 30 s);
- workers: 1 worker analyses K windows, then 2 workers K more; windows per
  second per worker, the scaling ratio (2 workers over 1, on this 2-CPU
  machine), and hosts per analyser by document 002's rule with t1 = the
  window's length, t2 = the median analysis time in the results, t0 = 0 (the
  agent stores on its own thread: collection never pauses);
- agent cost: `ontime agent` recording the 10 processes for `--agent-seconds`
  with 30 s windows at 100 Hz and at 1 kHz, beside `ontime profile record
  --continuous` alone on the same targets (CPU of the process, user + system,
  as a share of one core; the BPF probes' own time is spent in the context
  of the tasks they interrupt and is not in either figure: bench/
  profile_overhead.py measures that).

Prints one JSON document. Needs root (BPF) and nats-server.
Usage: bench/fleet.py [--copies 6] [--agent-seconds 60] [--load-seconds 60]
"""
import argparse, json, os, pathlib, resource, shutil, signal, socket, subprocess, sys, tempfile, time

ROOT = pathlib.Path(__file__).resolve().parent.parent
ONTIME = str(ROOT / "target/release/ontime")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, limit=20):
    t = time.time()
    while time.time() - t < limit:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nats-server did not listen on {port}")


def run_json(args, **kw):
    out = subprocess.run(args, capture_output=True, text=True, **kw)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)}: {out.stderr}")
    return json.loads(out.stdout)


def agent_config(d, host, url, what, window="60s"):
    p = d / f"{host}.toml"
    p.write_text(f"host = '{host}'\nwindow = '{window}'\n{what}\n[spool]\ndir = '{d / ('spool-' + host)}'\n"
                 f"max_bytes = '8G'\n[nats]\nservers = ['{url}']\n")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=6)
    ap.add_argument("--agent-seconds", type=int, default=60)
    ap.add_argument("--load-seconds", type=int, default=60)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/fleet.py needs root (BPF)")
    if not shutil.which("nats-server"):
        sys.exit("bench/fleet.py needs nats-server (scripts/setup.sh installs it)")
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    d = pathlib.Path(tempfile.mkdtemp(prefix="ontime-fleet-bench-"))
    procs = []
    try:
        port = free_port()
        url = f"nats://127.0.0.1:{port}"
        server = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(d / "store")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(server)
        wait_port(port)
        vms = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(10)]
        procs.extend(vms)
        pids = [f"vm{i}={p.pid}" for i, p in enumerate(vms)]
        pid_args = sum((["--pid", p] for p in pids), [])

        # Document 002's load: one window of 10 VMs at 1 kHz.
        rec = d / "rec"
        subprocess.run([ONTIME, "profile", "record", "--continuous", "--window", f"{a.load_seconds}s", "-D",
                        f"{a.load_seconds}s", "--rate", "1000", "-o", str(rec)] + pid_args,
                       check=True, capture_output=True)
        window = sorted(rec.glob("window-*.otrec"))[0]
        # Publishing and analysis are measured on a quiet machine: the
        # load's processes stop here and start again for the agent's cost.
        for v in vms:
            v.kill()
            v.wait()
        size = window.stat().st_size

        def backlog(tag):
            src = d / f"copies-{tag}"
            src.mkdir()
            for i in range(a.copies):
                shutil.copy(window, src / f"window-{i + 1:06d}.otrec")
            cfg = agent_config(d, f"pub{tag}", url, f"[replay]\ndir = '{src}'\nloop = false\npace = false")
            t = time.time()
            # A replay without loop ends once its windows are published.
            out = subprocess.run([ONTIME, "agent", "-c", str(cfg), "--json"], capture_output=True, text=True,
                                 timeout=1800, check=True).stdout
            elapsed = time.time() - t
            s = json.loads(out)
            return s, elapsed

        pub1, pub_s = backlog("a")
        published = pub1["published"]

        def workers(n, tag):
            t = time.time()
            ws = [subprocess.Popen([ONTIME, "analyse", "--json", "--name", f"{tag}{i}", "--nats", url,
                                    "--max-windows", str(a.copies // n), "--scratch", str(d / "scratch")],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                  for i in range(n)]
            outs = [json.loads(w.communicate(timeout=1800)[0]) for w in ws]
            return outs, time.time() - t

        one, one_s = workers(1, "one")
        backlog("b")
        two, two_s = workers(2, "two")
        fleet = run_json([ONTIME, "fleet", "report", "--json", "--nats", url])
        one_rate = a.copies // 1 / one_s
        two_rate = (a.copies // 2) * 2 / two_s

        # Analysis time per window (t2) from the workers' own results.
        # The fleet view keeps hosts, not windows: read t2 from the busy time.
        t2 = one[0]["busy_ns"] / max(one[0]["analysed"], 1) / 1e9
        t1 = a.load_seconds
        hosts_per_analyser = int((t1 - 1e-9) // t2) if t2 > 0 else 0

        # Agent cost at 100 Hz and 1 kHz, 30 s windows, beside the recorder alone.
        vms = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(10)]
        procs.extend(vms)
        pids = [f"vm{i}={p.pid}" for i, p in enumerate(vms)]
        pid_args = sum((["--pid", p] for p in pids), [])
        cost = {}
        for hz in (100, 1000):
            cfg = agent_config(d, f"rec{hz}", url, f"[record]\npids = {json.dumps(pids)}\nprofile_hz = {hz}", "30s")
            p = subprocess.Popen([ONTIME, "agent", "-c", str(cfg), "--json"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
            time.sleep(a.agent_seconds)
            p.send_signal(signal.SIGINT)
            s = json.loads(p.communicate(timeout=120)[0])
            alone_dir = d / f"alone{hz}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            q = subprocess.Popen([ONTIME, "profile", "record", "--continuous", "--window", "30s", "-D",
                                  f"{a.agent_seconds}s", "--rate", str(hz), "-o", str(alone_dir)] + pid_args,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            q.wait()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            alone = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            agent_share = s["cpu_ns"] / 1e9 / a.agent_seconds
            cost[f"{hz}Hz"] = {
                "agent_cpu_share_of_a_core": agent_share,
                "recorder_alone_cpu_share_of_a_core": alone / a.agent_seconds,
                "agent_over_recorder_alone": agent_share / (alone / a.agent_seconds) if alone > 0 else None,
                "agent_max_rss_mib": s["max_rss_bytes"] / 2**20,
                "agent_published": s["published"],
            }
        print(json.dumps({
            "window_bytes": size,
            "window_seconds": a.load_seconds,
            "vms": 10,
            "sample_hz": 1000,
            "publish": {"windows": published, "seconds": pub_s, "windows_per_s": published / pub_s,
                        "mb_per_s": published * size / pub_s / 1e6,
                        "hosts_per_server_at_30s_windows": int(published / pub_s * 30)},
            "workers": {"one": {"windows": a.copies, "seconds": one_s, "windows_per_s": one_rate},
                        "two": {"windows": (a.copies // 2) * 2, "seconds": two_s, "windows_per_s": two_rate},
                        "scaling_2_over_1": two_rate / one_rate,
                        "analysis_s_per_window": t2,
                        "hosts_per_analyser_doc002_rule": hosts_per_analyser},
            "agent": cost,
            "fleet_results": fleet["results"],
            "duplicate_results": fleet["duplicate_results"],
        }, indent=2))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
