#!/usr/bin/env python3
"""Cost of stack sampling: ontime profile record vs perf record -g.

A busy tenant (the compute program of crates/profile/tests, pure CPU work,
frame pointers) runs pinned to CPU 0 for a fixed amount of work, timing
itself; the profiler's own process runs on CPU 1. Alternating in rounds:
no profiler, `ontime profile record --pid` and `perf record -g -p` at 400 Hz,
1 kHz and 10 kHz (document 002 measured 0.133 % at 2.5 ms, 0.302 % at 1 ms,
3.084 % at 0.1 ms). Writes a raw result (bench/benchresult.py): a table per
rate, rows "alone", "ontime profile", "perf record -g", per round the
workload's elapsed time and the profiler's CPU time during it; `ontime
bench report` computes the cost per busy CPU (the workload's slowdown + the
profiler's CPU), the ratio ontime / perf and the targets. Needs root, cc
and perf.
Usage: bench/profile_overhead.py [--rounds 5] [--work 400] [--out FILE]
"""
import argparse, os, pathlib, signal, subprocess, sys, tempfile, time

from benchresult import BenchResult, over, ratio_of, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
RATES = [400, 1000, 10000]
ROWS = {"none": "alone", "ontime": "ontime profile", "perf": "perf record -g"}


def rate_name(rate):
    return f"{rate // 1000} kHz" if rate % 1000 == 0 else f"{rate} Hz"


def build(tmp):
    exe = tmp / "compute"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", str(exe),
                    str(ROOT / "crates/profile/tests/compute.c")], check=True)
    return exe


def process_cpu_ns(pid):
    total = 0
    try:
        for t in pathlib.Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((t / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return total


def run_once(tool, rate, exe, ontime, work, tmp):
    """The workload's (elapsed, on-CPU, run delay) ns and the profiler's CPU ns during it (None alone)."""
    w = subprocess.Popen(["taskset", "-c", "0", str(exe), str(work), "1000000", "wait"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rec = None
    if tool == "ontime":
        rec = subprocess.Popen(["taskset", "-c", "1", str(ontime), "profile", "record", "--pid", f"w={w.pid}",
                                "-F", str(rate), "-o", str(tmp / "p.otrec")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif tool == "perf":
        rec = subprocess.Popen(["taskset", "-c", "1", "perf", "record", "-q", "-g", "-F", str(rate), "-p", str(w.pid),
                                "-o", str(tmp / "perf.data")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if rec is not None:
        time.sleep(1.5)
        if rec.poll() is not None:
            w.kill()
            sys.exit(f"profile_overhead: {tool} exited early ({rec.returncode})")
        cpu0 = process_cpu_ns(rec.pid)
    w.stdin.write("g")
    w.stdin.flush()
    out = w.stdout.read()
    w.wait()
    cpu = None
    if rec is not None:
        cpu = process_cpu_ns(rec.pid) - cpu0
        rec.send_signal(signal.SIGINT)
        rec.wait(timeout=120)
    elapsed, on_cpu, run_delay = (int(x) for x in out.split()[:3])
    return elapsed, on_cpu, run_delay, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=int, default=400, help="rounds of the compute program (~3 ms each)")
    ap.add_argument("--out", help="also write the result to this file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("profile_overhead: run as root (perf sampling, BPF)")
    ontime = ROOT / "target/release/ontime"
    if not ontime.exists():
        sys.exit("profile_overhead: build first: cargo build --release")
    res = BenchResult("profile_overhead", "Profile: stack sampling cost", sys.argv)
    res.metric("workload", "s", value("work_ns", scale=1e-9))
    res.metric("slowdown", "%", over("work_ns", "alone", 100, relative=True))
    # The profiler's CPU over the workload's elapsed time, x 100.
    res.metric("profiler CPU", "%", value("profiler_cpu_ns", per="work_ns", scale=100))
    res.metric("cost", "%", over("work_ns", "alone", 100, relative=True, plus="profiler CPU"))
    res.ratio("cost", ROWS["ontime"], ROWS["perf"])
    res.target("at 1 kHz ontime <= 0.3 % of a core per busy CPU (document 002: 0.302 %)",
               value_of(ROWS["ontime"], "cost"), at_most=0.3, table=rate_name(1000))
    res.target("at 1 kHz ontime <= 0.5 x perf record -g", ratio_of("cost", ROWS["ontime"], ROWS["perf"]),
               at_most=0.5, table=rate_name(1000))
    res.method(f"The workload is the compute program of crates/profile/tests ({args.work} rounds of fixed CPU work, "
               "frame pointers) pinned to CPU 0, timing itself (workload: its elapsed time); each profiler's "
               "process runs on CPU 1 and starts 1.5 s before the workload.")
    res.method("Each round runs the workload alone once, then under `ontime profile record --pid` and "
               "`perf record -g -p` at each rate in turn; the round's alone run is the \"alone\" row of every "
               "rate's table, so slowdowns pair round by round.")
    res.method("Slowdown is the workload's elapsed time over its alone run of the same round: the kernel side of "
               "sampling (interrupts, unwinding, scheduler probes), which neither profiler's process sees.")
    res.method("Profiler CPU is the profiler process's run time (its threads' /proc schedstat) while the workload "
               "ran (profiler_cpu_ns), over the workload's elapsed time (work_ns), x 100, per round; cost = "
               "slowdown + profiler CPU, round by round.")
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        exe = build(tmp)
        runs = [("none", 0)] + [(tool, r) for r in RATES for tool in ("ontime", "perf")]
        for i in range(args.rounds):
            got = {run: run_once(*run, exe, ontime, args.work, tmp) for run in runs}
            for r in RATES:
                for tool in ("none", "ontime", "perf"):
                    elapsed, on_cpu, run_delay, cpu = got[(tool, 0 if tool == "none" else r)]
                    values = {"work_ns": elapsed, "work_on_cpu_ns": on_cpu, "work_run_delay_ns": run_delay}
                    if cpu is not None:
                        values["profiler_cpu_ns"] = cpu
                    res.round(rate_name(r), ROWS[tool], values=values)
            print(f"profile_overhead: round {i + 1}/{args.rounds} done", file=sys.stderr)
    res.write(args.out)


if __name__ == "__main__":
    main()
