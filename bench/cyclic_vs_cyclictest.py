#!/usr/bin/env python3
"""Benchmark: ontime cyclic vs cyclictest, same settings and load, alternating.

Both tools write a histogram in cyclictest's -h layout (1 us bins); this
script keeps each round's bins, overflow count and maximum as the tools
wrote them, and `ontime bench report` computes every percentile and ratio
from them. cyclictest leaves out the periods it overran; ontime counts each
as a sample with its full lateness. So the row "ontime" is ontime's
histogram of wake-ups that happened (--histfile-woken), counted as
cyclictest counts, and the ratio is taken against it; the row "ontime, all
planned" counts every planned wake-up. The load (stress-ng) is started once
by this script and runs through every round of both tools.

Writes a raw result (schema ontime-bench/1, bench/benchresult.py) on stdout
and to --out FILE; progress on stderr. Needs root.
Target: ontime p99.99 <= 1.05 x cyclictest p99.99.
"""
import argparse, os, shutil, signal, subprocess, sys, tempfile, time

from benchresult import BenchResult, count, histogram, maximum, quantile, ratio_of, value

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOADS = {
    "none": [],
    "kernel": ["--shm", "1", "--vm", "1", "--vm-bytes", "128M", "--switch", "1", "--yield", "1", "--timer", "1", "--sem", "1"],
    "io": ["--hdd", "1", "--hdd-bytes", "64M", "--sync-file", "1", "--io", "1", "--dentry", "1"],
    "net": ["--udp", "1"],
}
LOADS["mixed"] = LOADS["kernel"] + LOADS["io"] + LOADS["net"]

CYCLICTEST, ONTIME, ONTIME_ALL = "cyclictest", "ontime", "ontime, all planned"


def table_name(load):
    return "idle" if load == "none" else f"{load} load"


def parse_hist(path):
    """Thread 0 of a cyclictest -h layout file, as written: {"bins": {us: count},
    "overflow", "max_us", "total"} ("total": the file's own "# Total" count of
    in-bin samples, None where it has none)."""
    bins, overflow, max_us, total = {}, 0, None, None
    with open(path) as f:
        for line in f:
            if line.startswith("# Histogram Overflows:"):
                overflow = int(line.split(":")[1].split()[0])
            elif line.startswith("# Max Latencies:"):
                max_us = int(line.split(":")[1].split()[0])
            elif line.startswith("# Total:"):
                total = int(line.split(":")[1].split()[0])
            elif line[:1].isdigit():
                parts = line.split()
                if len(parts) >= 2 and int(parts[1]):
                    bins[int(parts[0])] = bins.get(int(parts[0]), 0) + int(parts[1])
    if total is not None and total != sum(bins.values()):
        sys.exit(f"bench: {path}: '# Total: {total}' disagrees with its bins ({sum(bins.values())})")
    return {"bins": bins, "overflow": overflow, "max_us": max_us, "total": total}


def round_of(h, planned):
    """One round's record: the histogram and the counts the tool wrote."""
    woken = sum(h["bins"].values()) + h["overflow"]
    return {"values": {"planned": planned, "woken": woken},
            "histograms": {"latency": histogram(h["bins"], 1.0, h["overflow"], 0, h["max_us"])}}


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
    ap.add_argument("--out", help="also write the result to this file")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (SCHED_FIFO, mlockall)")
    for tool in ("cyclictest", "stress-ng"):
        if not shutil.which(tool):
            sys.exit(f"bench: {tool} is missing: run scripts/setup.sh")
    if not os.path.exists(a.ontime):
        sys.exit(f"bench: {a.ontime} is missing: cargo build --release")

    # Taken before the load starts: the host as it was.
    res = BenchResult("cyclic_vs_cyclictest", "ontime cyclic vs cyclictest", sys.argv)
    table = table_name(a.load)
    res.metric("count", "", count("latency"))
    for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999)):
        res.metric(name, "us", quantile("latency", q))
    res.metric("max", "us", maximum("latency"))
    res.metric("left out", "", value("planned", minus="woken"))
    for name in ("p50", "p99", "p99.9", "p99.99", "max"):
        res.ratio(name, ONTIME, CYCLICTEST)
    res.target("ontime p99.99 <= 1.05 x cyclictest", ratio_of("p99.99", ONTIME, CYCLICTEST), at_most=1.05)
    res.method(f"Both tools run with the same flags (-m -p {a.priority} -i {a.interval_us} -a {a.cpu} -t 1 "
               f"-D {a.duration}s -h {a.bins}), alternating in turns of {a.duration} s, cyclictest first in each round; "
               + ("no load." if a.load == "none" else
                  f"one stress-ng load ({a.load}: {' '.join(LOADS[a.load])}) started once runs through every turn of both."))
    res.method("Both sides' histograms are the 1-us bins of cyclictest's -h layout as each tool wrote them, "
               "with its overflow count and its maximum, read by one parser; every statistic is taken from them.")
    res.method("cyclictest leaves out the periods it overran. The row ontime is ontime's --histfile-woken histogram "
               "(wake-ups that happened), counted as cyclictest counts, and the ratios and the target use it; "
               "the row \"ontime, all planned\" counts every planned wake-up, an overrun one with its full lateness.")
    res.method("planned = the turn's duration / the interval; left out = planned - the wake-ups the tool's file "
               "counts (bins and overflow).")

    tmp = tempfile.mkdtemp(prefix="ontime-bench-")
    common = ["-m", "-p", str(a.priority), "-i", str(a.interval_us), "-a", str(a.cpu), "-t", "1", "-D", f"{a.duration}s", "-h", str(a.bins)]
    load = None
    if LOADS[a.load]:
        load = subprocess.Popen(["stress-ng", *LOADS[a.load], "--temp-path", tmp, "--quiet", "--timeout",
                                 f"{a.rounds * a.duration * 2 + 120}s"], start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
    planned = a.duration * 1_000_000 // a.interval_us
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
                if tool == "cyclictest":
                    res.round(table, CYCLICTEST, **round_of(parse_hist(hist), planned))
                else:
                    res.round(table, ONTIME, **round_of(parse_hist(hist), planned))
                    res.round(table, ONTIME_ALL, **round_of(parse_hist(hist_all), planned))
    finally:
        if load:
            os.killpg(load.pid, signal.SIGKILL)
            load.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    res.write(a.out)


if __name__ == "__main__":
    main()
