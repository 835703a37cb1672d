#!/usr/bin/env python3
"""What a fleet agent's flight recorder costs (docs/fleet.md, "Probes"):
nats-server with JetStream on a temporary store, 10 busy processes as 10
"VMs", and `ontime agent` recording them at 100 Hz in 30 s windows, with a
`[[probe]]` (1 ms wake-ups at SCHED_FIFO 80 on the last CPU, late over
1 ms: the agent then records every thread and attaches each window's late
wake-ups to it) and without, alternating, `--rounds` times each.

Writes a raw result (bench/benchresult.py): per round the agent's CPU time
(its own getrusage: the probe is a process of its own, the instrument, as
cyclictest is), peak memory, windows published and, with the probe, the
windows it attached a late wake-up to. `ontime bench report` computes the
CPU shares and the ratio with / without. No target: the issue asks the
cost to be stated. Needs root (BPF) and nats-server.
Usage: bench/fleet_probe.py [--rounds 2] [--seconds 60] [--out FILE]
"""
import argparse, json, os, pathlib, shutil, signal, subprocess, sys, tempfile, time

from benchresult import BenchResult, value
from fleet import agent_config, busy_vms, nats_server, prologue

ROOT = pathlib.Path(__file__).resolve().parent.parent
ONTIME = str(ROOT / "target/release/ontime")
WITH, WITHOUT = "ontime agent + [[probe]]", "ontime agent"
TABLE = "agent at 100 Hz, 10 busy processes"


def result(a):
    res = BenchResult("fleet_probe", "What a fleet agent's probe costs", sys.argv)
    res.metric("windows", "", value("windows"))
    res.metric("late windows", "", value("late_windows"))
    res.metric("CPU", "s", value("cpu_s"))
    res.metric("CPU share", "%", value("cpu_s", per="seconds", scale=100))
    res.metric("max resident", "MiB", value("max_rss_bytes", scale=2.0 ** -20))
    res.ratio("CPU", WITH, WITHOUT)
    res.method(f"A local nats-server with JetStream; 10 busy processes (`sh -c 'while :; do :; done'`) as 10 \"VMs\"; "
               f"`ontime agent` recording them (`pids`, profile_hz = 100, 30 s windows) for {a.seconds} s, with a "
               "`[[probe]]` (interval 1 ms, cpus = [last CPU], policy fifo:80, late_over 1 ms) and without, "
               f"alternating, {a.rounds} rounds each. CPU is the agent's own user + system time (its summary's "
               "cpu_ns, getrusage of itself: the probe, a child process, is not in it), CPU share that over "
               "the seconds x 100. With a probe the agent records every thread, not only its targets, and "
               "follows the probe's late log; windows are what it published, late windows those it attached "
               "a late wake-up to. The BPF programs' time is spent in the tasks they interrupt and is in neither.")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", help="also write the result to this file")
    a = ap.parse_args()
    prologue("fleet_probe.py")
    res = result(a)
    d = pathlib.Path(tempfile.mkdtemp(prefix="ontime-fleet-probe-bench-"))
    procs = []
    try:
        url = nats_server(d, procs)
        pids = [f"vm{i}={p.pid}" for i, p in enumerate(busy_vms(procs))]
        last_cpu = os.cpu_count() - 1
        for r in range(a.rounds):
            for row, probe in ((WITH, True), (WITHOUT, False)):
                print(f"fleet_probe: round {r + 1}, {row}", file=sys.stderr)
                what = f"[record]\npids = {json.dumps(pids)}\nprofile_hz = 100"
                if probe:
                    what += f"\n[[probe]]\nname = 'plc'\ncpus = [{last_cpu}]\npolicy = 'fifo:80'\nlate_over = '1ms'"
                cfg = agent_config(d, f"r{r}{int(probe)}", url, what, "30s")
                p = subprocess.Popen([ONTIME, "agent", "-c", str(cfg), "--json"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
                time.sleep(a.seconds)
                p.send_signal(signal.SIGINT)
                s = json.loads(p.communicate(timeout=120)[0])
                values = {"windows": s["published"], "cpu_s": s["cpu_ns"] / 1e9, "seconds": a.seconds,
                          "max_rss_bytes": s["max_rss_bytes"]}
                if probe:
                    values["late_windows"] = s["probes"]["windows_late"]
                res.round(TABLE, row, values=values)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
    res.write(a.out)


if __name__ == "__main__":
    main()
