#!/usr/bin/env python3
"""The fleet on this machine (docs/fleet.md): nats-server with
JetStream on a temporary store, document 002's load as one window (10 busy
processes as 10 "VMs", stacks at 1 kHz, a 60 s window, recorded by
`ontime profile record --continuous`), then:

- publishing: `ontime agent` replays K copies of that window unpaced;
- workers: 1 worker analyses K windows, then 2 workers K more;
- agent cost: `ontime agent` recording the 10 processes for `--agent-seconds`
  with 30 s windows at 100 Hz and at 1 kHz, beside `ontime profile record
  --continuous` alone on the same targets.

Writes a raw result (bench/benchresult.py): per table (publishing, analysis,
agent at each rate, the stream) what each run measured: windows, bytes,
wall and CPU seconds, the workers' busy time and windows analysed, memory,
results. No peer, no target; `ontime bench report` computes the rates, the
analysis time per window, the CPU shares, the scaling 2 workers / 1 and
the agent's CPU over the recorder alone's. Needs root (BPF) and nats-server.
Usage: bench/fleet.py [--copies 6] [--agent-seconds 60] [--load-seconds 60] [--out FILE]
"""
import argparse, json, os, pathlib, resource, shutil, signal, socket, subprocess, sys, tempfile, time

from benchresult import BenchResult, value

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


def prologue(script):
    """What both fleet benchmarks need first: root, nats-server, a release build."""
    if os.geteuid() != 0:
        sys.exit(f"bench/{script} needs root (BPF)")
    if not shutil.which("nats-server"):
        sys.exit(f"bench/{script} needs nats-server (scripts/setup.sh installs it)")
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)


def nats_server(d, procs):
    """A nats-server with JetStream on a store in `d`, added to `procs`; its URL."""
    port = free_port()
    server = subprocess.Popen(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(d / "store")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(server)
    wait_port(port)
    return f"nats://127.0.0.1:{port}"


def busy_vms(procs, n=10):
    """`n` busy processes as document 002's "VMs", added to `procs`."""
    vms = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]
    procs.extend(vms)
    return vms


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


PUB_ROW, AGENT_ROW, ALONE_ROW = "ontime agent (replay, unpaced)", "ontime agent", "profile record alone"


def result(a):
    res = BenchResult("fleet", "The fleet on NATS JetStream", sys.argv)
    res.metric("windows", "", value("windows"))
    res.metric("wall", "s", value("wall_s"))
    res.metric("window size", "MB", value("window_bytes", scale=1e-6))
    res.metric("windows/s", "", value("windows", per="wall_s"))
    res.metric("MB/s", "MB/s", value("published_bytes", per="wall_s", scale=1e-6))
    # The workers' busy time over the windows they analysed.
    res.metric("analysis per window", "s", value("busy_ns", per="analysed", scale=1e-9))
    res.metric("CPU", "s", value("cpu_s"))
    res.metric("CPU share", "%", value("cpu_s", per="seconds", scale=100))
    res.metric("max resident", "MiB", value("max_rss_bytes", scale=2.0 ** -20))
    res.metric("results", "", value("results"))
    res.metric("duplicate results", "", value("duplicate_results"))
    res.ratio("windows/s", "2 workers", "1 worker")
    res.ratio("CPU", AGENT_ROW, ALONE_ROW)
    res.method(f"A local nats-server with JetStream on a file store. Document 002's load: 10 busy processes as 10 "
               f"\"VMs\", stacks at 1 kHz, one {a.load_seconds} s window recorded by `ontime profile record "
               f"--continuous` (window size: its file); the load stops before publishing and analysis.")
    res.method(f"Publishing: `ontime agent` replays {a.copies} copies of the window unpaced (object + notice + ack "
               "per window) and exits; wall is its start to exit, windows what it published, published_bytes windows "
               "x the window's file size. windows/s = windows / wall, MB/s = published_bytes / wall; one server "
               "carries windows/s x 30 hosts at 30 s windows. A burst of copies, not a sustained rate.")
    res.method(f"Analysis: one `ontime analyse` worker takes {a.copies} windows, then, after a second replay, two "
               f"workers take {a.copies // 2} each at once; wall is their start until all exit (windows/s = windows "
               "/ wall). Analysis per window is the workers' busy_ns (summed) over the windows they analysed "
               "(summed): document 002's t2; its rule t0 + t1 > (t0 + t2) n "
               f"gives the hosts per analyser with t1 = {a.load_seconds} s and t0 = 0 (the agent stores on its own "
               "thread). Document 002 took 81.8 s to analyse a 60 s window of 10 VMs.")
    res.method(f"Agent cost: `ontime agent` recording the 10 processes (30 s windows) for {a.agent_seconds} s, then "
               f"`ontime profile record --continuous --window 30s -D {a.agent_seconds}s` alone on the same "
               "processes; windows is what the agent published, CPU the process's user + system time (the agent's own cpu_ns "
               f"in s, cpu_ns kept beside it; the recorder's from getrusage of children), CPU share that over seconds "
               f"(--agent-seconds, {a.agent_seconds}), x 100. "
               "The BPF probes' time is spent in the tasks they interrupt and is in neither "
               "(bench/profile_overhead.py measures it). One run.")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=6)
    ap.add_argument("--agent-seconds", type=int, default=60)
    ap.add_argument("--load-seconds", type=int, default=60)
    ap.add_argument("--out", help="also write the result to this file")
    a = ap.parse_args()
    prologue("fleet.py")
    res = result(a)
    d = pathlib.Path(tempfile.mkdtemp(prefix="ontime-fleet-bench-"))
    procs = []
    try:
        url = nats_server(d, procs)
        vms = busy_vms(procs)
        pids = [f"vm{i}={p.pid}" for i, p in enumerate(vms)]
        pid_args = sum((["--pid", p] for p in pids), [])

        # Document 002's load: one window of 10 VMs at 1 kHz.
        print(f"fleet: recording the load for {a.load_seconds} s", file=sys.stderr)
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

        print("fleet: publishing and analysis", file=sys.stderr)
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
        res.round("publishing", PUB_ROW, values={
            "windows": published, "wall_s": pub_s, "window_bytes": size, "published_bytes": published * size})
        for row, outs, windows, wall in (("1 worker", one, a.copies, one_s),
                                         ("2 workers", two, (a.copies // 2) * 2, two_s)):
            res.round("analysis", row, values={
                "windows": windows, "wall_s": wall, "busy_ns": sum(o["busy_ns"] for o in outs),
                "analysed": sum(o["analysed"] for o in outs)})
        print("fleet: agent cost", file=sys.stderr)

        # Agent cost at 100 Hz and 1 kHz, 30 s windows, beside the recorder alone.
        vms = busy_vms(procs)
        pids = [f"vm{i}={p.pid}" for i, p in enumerate(vms)]
        pid_args = sum((["--pid", p] for p in pids), [])
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
            table = f"agent at {hz // 1000} kHz" if hz % 1000 == 0 else f"agent at {hz} Hz"
            res.round(table, AGENT_ROW, values={
                "windows": s["published"], "cpu_ns": s["cpu_ns"],
                # ns to s, the unit getrusage gives the recorder alone's in: one key for the column and the ratio.
                "cpu_s": s["cpu_ns"] / 1e9, "seconds": a.agent_seconds, "max_rss_bytes": s["max_rss_bytes"]})
            res.round(table, ALONE_ROW, values={"cpu_s": alone, "seconds": a.agent_seconds})
        res.round("stream", "ontime fleet report", values={
            "results": fleet["results"], "duplicate_results": fleet["duplicate_results"],
            "dead_letters": fleet["dead_letters"]})
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
    res.write(a.out)


if __name__ == "__main__":
    main()
