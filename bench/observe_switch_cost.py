#!/usr/bin/env python3
"""Cost per context switch: ontime observe (BPF and perf fallback) vs perf sched record.

The lab benchmark (observe_overhead.py) can only count each recorder's own
process; the work done inside the kernel at every tracepoint hit escapes it
for perf. This one measures that too: `perf bench sched pipe` pinned to CPU 0
(two tasks ping-ponging, two switches per operation) runs with no recorder,
then under each recorder, alternating: ontime with BPF recording everything
(--all), ontime with BPF filtering for an empty cgroup (every switch is of
an untracked task, the common case on a shared host), ontime's perf
fallback, and perf sched record -a. The recorder's own process runs on CPU
1. Each round keeps the workload's us per operation and the recorder
threads' on-CPU time during it (schedstat); `ontime bench report` derives
the kernel side (the slowdown against no recorder), the reader's and the
total cost per switch and the ratios to perf sched record.
Writes a raw result (schema ontime-bench/1, bench/benchresult.py) on stdout
and to --out FILE. Needs root.
Usage: bench/observe_switch_cost.py [--rounds 5] [--ops 200000] [--out FILE]
"""
import argparse, json, os, pathlib, re, signal, subprocess, sys, tempfile, time

from benchresult import BenchResult, over, ratio_of, value

ROOT = pathlib.Path(__file__).resolve().parent.parent


def workload(ops):
    """usecs per op of a pipe ping-pong pinned to CPU 0."""
    out = subprocess.run(["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(ops)],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"([\d.]+) usecs/op", out)
    if not m:
        sys.exit(f"observe_switch_cost: unexpected perf bench output: {out}")
    return float(m.group(1))


# A cgroup with no task in it: every switch is of an untracked task, the
# in-kernel filter's common case on a host (the lab's other tasks).
EMPTY_CGROUP = None


def recorder_cmd(mode, exe, tmp):
    if mode == "ontime-bpf-cgroup":
        return [str(exe), "observe", "record", "--cgroup", f"empty={EMPTY_CGROUP}", "-o", str(tmp / "r.otrec"), "--json"]
    if mode == "ontime-bpf":
        return [str(exe), "observe", "record", "--all", "--mechanism", "bpf", "-o", str(tmp / "r.otrec"), "--json"]
    if mode == "ontime-perf":
        return [str(exe), "observe", "record", "--all", "--mechanism", "perf", "-o", str(tmp / "r.otrec"), "--json"]
    if mode == "perf-sched":
        return ["perf", "sched", "record", "-a", "-q", "-o", str(tmp / "perf.data")]
    return None


def process_cpu_ns(pid):
    """On-CPU time of every thread of a process so far (schedstat, ns)."""
    total = 0
    for t in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def run_once(mode, exe, ops, tmp):
    cmd = recorder_cmd(mode, exe, tmp)
    if cmd is None:
        return {"usecs_per_op": workload(ops)}
    summary = tmp / "summary.json"
    with open(summary, "w") as so:
        rec = subprocess.Popen(["taskset", "-c", "1"] + cmd, stdout=so, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # attached: BPF loaded, perf buffers mapped, start-up work done
    if rec.poll() is not None:
        sys.exit(f"observe_switch_cost: {mode} exited early ({rec.returncode})")
    cpu0 = process_cpu_ns(rec.pid)
    us = workload(ops)
    cpu1 = process_cpu_ns(rec.pid)
    rec.send_signal(signal.SIGINT)
    rec.wait(timeout=60)
    res = {"usecs_per_op": us, "recorder_cpu_ns": cpu1 - cpu0}
    if mode.startswith("ontime"):
        try:
            s = json.loads(summary.read_text())
            res["events"] = s["events"]
            res["lost"] = s["lost"]
        except (ValueError, KeyError):
            sys.exit(f"observe_switch_cost: {mode} gave no summary")
    for f in tmp.iterdir():
        f.unlink()
    return res


# The row each mode writes, in the order a round runs them.
ROWS = {
    "off": "none",
    "ontime-bpf": "ontime, BPF, --all",
    "ontime-bpf-cgroup": "ontime, BPF, --cgroup (nothing tracked)",
    "ontime-perf": "ontime, perf fallback, --all",
    "perf-sched": "perf sched record -a",
}
SWITCHES_PER_OP = 2


def declare(res, ops):
    """The columns, ratios and targets `ontime bench report` computes."""
    res.metric("us/op", "us", value("us_per_op"))
    # The workload's slowdown: work done in the tracepoints on its CPU.
    res.metric("kernel ns/switch", "ns", over("us_per_op", baseline="none", scale=1000 / SWITCHES_PER_OP))
    # The recorder's own CPU over the workload's fixed switch count.
    res.metric("reader ns/switch", "ns", value("recorder_cpu_ns", per="switches"))
    res.metric("total ns/switch", "ns",
               over("us_per_op", baseline="none", scale=1000 / SWITCHES_PER_OP, plus="reader ns/switch"))
    res.metric("events", "", value("events"))
    res.metric("lost", "", value("lost"))
    peer = ROWS["perf-sched"]
    for m in ("ontime-bpf", "ontime-bpf-cgroup", "ontime-perf"):
        res.ratio("total ns/switch", ROWS[m], peer)
    res.target("ontime (BPF, --all) <= 0.5 x perf sched record, total ns/switch",
               ratio_of("total ns/switch", ROWS["ontime-bpf"], peer), at_most=0.5)
    res.target("ontime (BPF, cgroup filter) <= 0.5 x perf sched record, total ns/switch",
               ratio_of("total ns/switch", ROWS["ontime-bpf-cgroup"], peer), at_most=0.5)
    res.method(f"Workload: `taskset -c 0 perf bench sched pipe -l {ops}`, two tasks ping-ponging on CPU 0, "
               f"{SWITCHES_PER_OP} context switches per operation; each recorder's process runs on CPU 1.")
    res.method("Kernel side: the workload's slowdown per switch against the same round's run with no recorder, "
               "which counts the work each recorder does inside the kernel at every switch (perf sched record "
               "does most of its work there); reader: the recorder threads' on-CPU time (schedstat) while the "
               "workload ran (recorder_cpu_ns) over the workload's fixed switch count (switches: --ops x 2, kept "
               "in every round); total: the two added, round by round.")
    res.method("Each round runs the five configurations one after another (none, ontime BPF --all, ontime BPF "
               "with a cgroup filter, ontime's perf fallback, perf sched record -a), so rounds pair. ontime runs "
               "with its defaults (no BPF run-time statistics); the cgroup filter's cgroup is empty, so every "
               "switch is of an untracked task (the filter's cost).")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200000)
    ap.add_argument("--out", default=None, help="also write the result to FILE")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("observe_switch_cost: needs root (BPF, perf -a)")
    if (os.cpu_count() or 1) < 2:
        sys.exit("observe_switch_cost: needs two CPUs (workload on 0, recorder on 1)")
    exe = ROOT / "target/release/ontime"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    global EMPTY_CGROUP
    root = next((p for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup")
                 if pathlib.Path(p, "cgroup.procs").exists()), None)
    if root is None:
        sys.exit("observe_switch_cost: no cgroup hierarchy found")
    res = BenchResult("observe_switch_cost", "ontime observe vs perf sched record: cost per context switch", sys.argv)
    declare(res, args.ops)
    switches = args.ops * SWITCHES_PER_OP
    EMPTY_CGROUP = pathlib.Path(root, f"ontime-bench-{os.getpid()}")
    EMPTY_CGROUP.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="ontime-switch-cost-") as d:
            tmp = pathlib.Path(d)
            for r in range(args.rounds):
                for m in ROWS:
                    got = run_once(m, exe, args.ops, tmp)
                    values = {"us_per_op": got["usecs_per_op"], "switches": switches}
                    for k in ("recorder_cpu_ns", "events", "lost"):
                        if k in got:
                            values[k] = got[k]
                    res.round("context switches", ROWS[m], values=values)
                    print(f"round {r + 1}/{args.rounds} {m}: {got['usecs_per_op']:.3f} us/op", file=sys.stderr)
    finally:
        EMPTY_CGROUP.rmdir()
    res.write(args.out)


if __name__ == "__main__":
    main()
