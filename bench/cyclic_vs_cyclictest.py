#!/usr/bin/env python3
"""Benchmark: ontime cyclic vs cyclictest, same settings and load, alternating.

Both tools write a histogram in cyclictest's -h layout (1 us bins); the same
parser computes both sides' percentiles from those bins. cyclictest leaves
out the periods it overran; ontime counts each as a sample with its full
lateness. The ratio is therefore taken against ontime's histogram of
wake-ups that happened (--histfile-woken), counted as cyclictest counts;
ontime's all-samples figures and cyclictest's missing periods are reported
beside it. The load (stress-ng) is started once by this script and runs
through every round of both tools.

Prints one JSON object (machine-readable) on stdout; progress on stderr.
Target: ontime p99.99 <= 1.05 x cyclictest p99.99.
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADS = {
    "none": [],
    "kernel": ["--shm", "1", "--vm", "1", "--vm-bytes", "128M", "--switch", "1", "--yield", "1", "--timer", "1", "--sem", "1"],
    "io": ["--hdd", "1", "--hdd-bytes", "64M", "--sync-file", "1", "--io", "1", "--dentry", "1"],
    "net": ["--udp", "1"],
}
LOADS["mixed"] = LOADS["kernel"] + LOADS["io"] + LOADS["net"]


def parse_hist(path):
    """Returns (bins, overflows, max_us) from a cyclictest -h layout file (thread 0)."""
    bins, overflows, max_us = [], 0, 0
    with open(path) as f:
        for line in f:
            if line.startswith("# Histogram Overflows:"):
                overflows = int(line.split(":")[1].split()[0])
            elif line.startswith("# Max Latencies:"):
                max_us = int(line.split(":")[1].split()[0])
            elif line[:1].isdigit():
                parts = line.split()
                bins.append(int(parts[1]))
    return bins, overflows, max_us


def percentiles(bins, overflows, max_us, ps=(50, 99, 99.9, 99.99)):
    total = sum(bins) + overflows
    out = {"count": total, "max_us": max_us}
    for p in ps:
        need = p / 100.0 * total
        acc, val = 0, None
        for us, c in enumerate(bins):
            acc += c
            if acc >= need:
                val = us
                break
        # In the overflow: only the max is known; report it (an upper bound).
        out[f"p{p}_us"] = val if val is not None else max_us
        min_count = round(1 / (1 - p / 100.0))
        if total < min_count:
            out[f"p{p}_us"] = None
    return out


def merge(acc, new):
    b, o, m = new
    if acc is None:
        return list(b), o, m
    bins = [x + y for x, y in zip(acc[0], b)]
    return bins, acc[1] + o, max(acc[2], m)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=20, help="seconds per tool per round")
    ap.add_argument("--interval-us", type=int, default=1000)
    ap.add_argument("--priority", type=int, default=80)
    ap.add_argument("--cpu", type=int, default=0)
    ap.add_argument("--bins", type=int, default=20000, help="histogram bins (us)")
    ap.add_argument("--load", choices=sorted(LOADS), default="none")
    ap.add_argument("--ontime", default=os.path.join(ROOT, "target", "release", "ontime"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (SCHED_FIFO, mlockall)")
    for tool in ("cyclictest", "stress-ng"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing: run scripts/setup.sh")
    if not os.path.exists(a.ontime):
        sys.exit(f"bench: {a.ontime} is missing: cargo build --release")

    tmp = tempfile.mkdtemp(prefix="ontime-bench-")
    common = ["-m", "-p", str(a.priority), "-i", str(a.interval_us), "-a", str(a.cpu), "-t", "1", "-D", f"{a.duration}s", "-h", str(a.bins)]
    load = None
    if LOADS[a.load]:
        load = subprocess.Popen(["stress-ng", *LOADS[a.load], "--temp-path", tmp, "--quiet", "--timeout",
                                 f"{a.rounds * a.duration * 2 + 120}s"], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    acc = {"cyclictest": None, "ontime": None, "ontime_all_planned": None}
    planned = a.rounds * a.duration * 1_000_000 // a.interval_us
    try:
        for r in range(a.rounds):
            for tool in ("cyclictest", "ontime"):
                hist = os.path.join(tmp, f"{tool}-{r}.hist")
                if tool == "cyclictest":
                    cmd = ["cyclictest", *common, "-q", f"--histfile={hist}"]
                else:
                    hist_all = os.path.join(tmp, f"{tool}-{r}-all.hist")
                    cmd = [a.ontime, "cyclic", *common, "--histfile", hist_all, "--histfile-woken", hist]
                print(f"bench: round {r + 1}/{a.rounds}: {tool}", file=sys.stderr)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                acc[tool] = merge(acc[tool], parse_hist(hist))
                if tool == "ontime":
                    acc["ontime_all_planned"] = merge(acc["ontime_all_planned"], parse_hist(hist_all))
    finally:
        if load:
            os.killpg(load.pid, signal.SIGKILL)
            load.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    res = {tool: percentiles(*acc[tool]) for tool in acc}
    ratio = {}
    for k in ("p50_us", "p99_us", "p99.9_us", "p99.99_us", "max_us"):
        c, o = res["cyclictest"].get(k), res["ontime"].get(k)
        ratio[k] = round(o / c, 3) if c and o is not None else None
    out = {
        "bench": "cyclic-vs-cyclictest",
        "settings": {"rounds": a.rounds, "duration_s": a.duration, "interval_us": a.interval_us,
                     "priority": a.priority, "cpu": a.cpu, "load": a.load},
        "planned_wakeups_per_tool": planned,
        "cyclictest": res["cyclictest"],
        "cyclictest_periods_missing": planned - res["cyclictest"]["count"],
        "ontime": res["ontime"],
        "ontime_all_planned_wakeups": res["ontime_all_planned"],
        "ratio_ontime_over_cyclictest": ratio,
        "target": "ontime p99.99 <= 1.05 x cyclictest p99.99",
        "target_met": ratio["p99.99_us"] is not None and ratio["p99.99_us"] <= 1.05,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
