#!/usr/bin/env python3
"""Observer overhead: ontime observe vs perf sched record on the same lab.

Runs bench/observe-overhead.toml (20 tenants, 1000 polls/s in total; the
recorder swept over off / ontime / perf, repetitions alternate) and keeps,
per run, what the lab measured: the recorder's CPU (as % of one core, and
its CPU ns over the span), events, lost, bytes written, the host's busy CPU,
and each crawler tenant's p99.9 and p99 interval error. `ontime bench
report` derives the medians, the worst tenant, the ratio ontime / perf and
the target verdicts. Writes a raw result (schema ontime-bench/1,
bench/benchresult.py) on stdout and to --out FILE. Needs root.
Usage: bench/observe_overhead.py [--duration 20s] [--reps 2] [--out FILE]
"""
import argparse, json, os, pathlib, subprocess, sys, tempfile

from benchresult import BenchResult, histogram_of, maximum, over, ratio_of, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The lab's recorder name -> the row.
ROWS = {"off": "off", "ontime": "ontime observe", "perf": "perf sched record -a"}
TABLE = "20 tenants, 1000 polls/s"


def declare(res):
    """The columns, ratios and targets `ontime bench report` computes."""
    ours, peer = ROWS["ontime"], ROWS["perf"]
    res.metric("recorder CPU, % of one core", "%", value("overhead_pct"))
    res.metric("host busy", "%", value("host_busy_pct"))
    res.metric("host busy added", "%", over("host_busy_pct", baseline=ROWS["off"]))
    res.metric("events", "", value("events"))
    res.metric("lost", "", value("lost"))
    res.metric("written", "B", value("bytes"))
    res.metric("worst tenant p99.9 interval error", "us", maximum("tenant_p99_9"))
    res.metric("worst tenant p99 interval error", "us", maximum("tenant_p99"))
    res.ratio("recorder CPU, % of one core", ours, peer)
    res.target("recorder < 1 % of one core", value_of(ours, "recorder CPU, % of one core"), at_most=1.0)
    res.target("ontime <= 0.5 x perf sched record (process view)",
               ratio_of("recorder CPU, % of one core", ours, peer), at_most=0.5)
    res.method("The lab runs the same scenario with no recorder, `ontime observe` and `perf sched record -a` "
               "one after another in each repetition, so rounds pair.")
    res.method("Recorder CPU is the recorder's CPU over the run's span as a share of one core: for ontime its "
               "reader thread plus its BPF programs' run time (the lab keeps kernel.bpf_stats_enabled on); for "
               "perf its process (user + system) only. perf does most of its work inside the kernel at each "
               "tracepoint hit, which this does not see, so the comparison favours perf; "
               "bench/observe_switch_cost.py measures both wholly.")
    res.method("Host busy is all CPUs' busy time over the span (/proc/stat), % of one core. The interval-error "
               "columns are the worst of the crawler tenants' own p99.9 (p99) over every round, as each "
               "tenant's result reports it.")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="20s")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--results", default=None, help="results directory (default: a temporary one)")
    ap.add_argument("--out", default=None, help="also write the result to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("observe_overhead: needs root (lab sandboxes, BPF, perf -a)")
    exe = ROOT / "target/release/ontime"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    scen = (ROOT / "bench/observe-overhead.toml").read_text()
    scen = scen.replace('duration = "20s"', f'duration = "{args.duration}"').replace("repetitions = 2", f"repetitions = {args.reps}")
    out = pathlib.Path(args.results or tempfile.mkdtemp(prefix="ontime-observe-bench-"))
    sfile = out / "scenario.toml"
    out.mkdir(parents=True, exist_ok=True)
    sfile.write_text(scen)
    res = BenchResult("observe_overhead", "ontime observe vs perf sched record in the lab", sys.argv)
    declare(res)
    subprocess.run([str(exe), "lab", "run", str(sfile), "-o", str(out / "results")], check=True)
    # Run directories are numbered in the order they ran.
    for run in sorted((out / "results/runs").iterdir()):
        rec = json.loads((run / "run.json").read_text())
        o = rec.get("observe") or {}
        name = o.get("recorder", "?")
        p999, p99 = [], []
        for t in rec["tenants"]:
            if not t.get("result"):
                continue
            s = json.loads((run / t["result"]).read_text())["interval_error"]
            got = {p["name"]: p["value_ns"] for p in s["percentiles_ns"]}
            # None where the tenant's sample count does not support it.
            if got.get("p99.9") is not None:
                p999.append(got["p99.9"] / 1000)
            if got.get("p99") is not None:
                p99.append(got["p99"] / 1000)
        values = {k: o.get(k) for k in ("overhead_pct", "cpu_ns", "span_ns", "host_busy_pct", "events", "lost", "bytes")}
        res.round(TABLE, ROWS.get(name, name), values=values,
                  histograms={"tenant_p99_9": histogram_of(p999), "tenant_p99": histogram_of(p99)})
        if o.get("error"):
            print(f"observe_overhead: {run.name}: {o['error']}", file=sys.stderr)
        cpu = o.get("overhead_pct")
        print(f"{run.name}: {name}: recorder CPU {'-' if cpu is None else f'{cpu:.2f} %'} of one core", file=sys.stderr)
    res.write(args.out)


if __name__ == "__main__":
    main()
