#!/usr/bin/env python3
"""What --explain costs: a crawler at 1000 polls/s alone, with --explain
(it records every scheduling and interrupt event of the host beside it),
and alone beside `perf sched record -a` (the peer's recording of the same
scheduler events), in turn, round after round.

Keeps per round: the CPU of the processes each mode ran (the crawl with
its gateway and recorder thread; perf), the length of the run, the
crawl's polls and p99.9 send lag. `ontime bench report`
derives what each mode adds over the crawler alone, in % of one core, the
ratio to perf's and the target verdict (<= 1 % of a core: docs/explain.md,
"Cost"). Needs root (BPF, perf -a).
Usage: bench/explain_cost.py [--rounds 3] [--seconds 20] [--rate 1000] [--out FILE]
"""
import argparse, json, os, pathlib, shutil, signal, subprocess, sys, tempfile, time

from benchresult import BenchResult, children_cpu_s, over, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
ALONE, EXPLAIN, PERF = "crawl", "crawl --explain", "crawl beside perf sched record -a"


def declare(res, table):
    res.metric("processes' CPU", "% of a core", value("process_cpu_ns", per="span_ns", scale=100))
    res.metric("added over the crawler alone", "% of a core", over("process_cpu_ns", baseline=ALONE, scale=100,
                                                                    per="span_ns"))
    res.metric("polls", "", value("polls"))
    res.metric("p99.9 send lag", "us", value("send_lag_p999_us"))
    res.ratio("added over the crawler alone", EXPLAIN, PERF)
    res.target("--explain adds <= 1 % of a core", value_of(EXPLAIN, "added over the crawler alone"), at_most=1.0,
               table=table)
    res.method("Each round runs the three modes one after another (alone, --explain, beside perf), each "
               "`ontime crawl --with-gateway` (a local gateway) at the rate for the same length, the crawler "
               "pinned to CPU 1; --explain's recorder thread keeps to the other CPU.")
    res.method("The processes' CPU is user + system time of every process the mode ran (the crawl with its "
               "gateway and, with --explain, its recorder thread, its start and its explanation at the end; "
               "perf's process), per ns from start to exit, % of one core. BPF programs and perf's "
               "tracepoint work run in the traced threads' context, so what they cost the crawler and its "
               "gateway is in their system time; what they cost other threads of the host is not counted. "
               "This host's /proc/stat busy time fell far below the processes' own CPU in trial runs, so it "
               "is not used.")
    res.method("perf sched record -a records the scheduler's tracepoints (switch, wake-ups, migrations, "
               "forks, exits and the sched_stat ones); ontime's recorder also records every interrupt "
               "handler and softirq, which perf sched record does not.")


def crawl(exe, rate, seconds, explain, tmp):
    out = tmp / "crawl.json"
    cmd = [str(exe), "crawl", "--with-gateway", "--rate", str(rate), "-D", f"{seconds}s",
           "--affinity", "1", "--json", "--result", str(out)]
    # Both keep the late polls; --explain also records and explains them.
    cmd.append("--explain" if explain else "--keep-late")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(out.read_text())


def percentile_us(summary, name):
    for p in summary.get("percentiles_ns", []):
        if p["name"] == name and p["value_ns"] is not None:
            return p["value_ns"] / 1000
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--out", default=None, help="also write the result to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("explain_cost: needs root (BPF, perf -a)")
    if shutil.which("perf") is None:
        sys.exit("explain_cost: needs perf (apt-get install linux-perf)")
    exe = ROOT / "target/release/ontime"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    table = f"a crawler at {args.rate} polls/s, {args.seconds} s"
    res = BenchResult("explain_cost", "What --explain costs, beside perf sched record", sys.argv)
    declare(res, table)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ontime-explain-cost-"))
    try:
        for r in range(args.rounds):
            for mode in (ALONE, EXPLAIN, PERF):
                perf = None
                if mode == PERF:
                    perf = subprocess.Popen(["perf", "sched", "record", "-a", "-o", str(tmp / "perf.data")],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                cpu0, t0 = int(children_cpu_s() * 1e9), time.monotonic_ns()
                result = crawl(exe, args.rate, args.seconds, mode == EXPLAIN, tmp)
                t1 = time.monotonic_ns()
                if perf is not None:
                    perf.send_signal(signal.SIGINT)
                    perf.wait(timeout=120)
                cpu1 = int(children_cpu_s() * 1e9)
                values = {
                    "span_ns": t1 - t0,
                    # perf's whole CPU (it writes after the crawl too) is its cost.
                    "process_cpu_ns": cpu1 - cpu0,
                    "polls": result.get("polls", {}).get("planned") if isinstance(result.get("polls"), dict) else None,
                    "send_lag_p999_us": percentile_us(result.get("send_lag", {}), "p99.9"),
                }
                res.round(table, mode, values=values)
                print(f"explain_cost: round {r + 1} {mode}: done", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res.write(args.out)


if __name__ == "__main__":
    main()
