#!/usr/bin/env python3
"""Cost per context switch: ontime observe (BPF and perf fallback) vs perf sched record.

The lab benchmark (observe_overhead.py) can only count each recorder's own
process; the work done inside the kernel at every tracepoint hit escapes it
for perf. This one measures that too: `perf bench sched pipe` pinned to CPU 0
(two tasks ping-ponging, two switches per operation) runs with no recorder,
then under each recorder, alternating: ontime with BPF recording everything
(--all), ontime with BPF filtering for an empty cgroup (every switch is of
an untracked task, the common case on a shared host), ontime's perf
fallback, and perf sched record -a; and the slowdown per operation is the
in-kernel cost. The recorder's own process runs on CPU 1; its threads'
on-CPU time during the workload (schedstat) is added. Prints one JSON document: per recorder the kernel-side
and reader cost per switch, and ratios to perf sched record.
Needs root. Usage: bench/observe_switch_cost.py [--rounds 5] [--ops 200000]
"""
import argparse, json, os, pathlib, re, signal, statistics, subprocess, sys, tempfile, time

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=200000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("observe_switch_cost: needs root (BPF, perf -a)")
    if (os.cpu_count() or 1) < 2:
        sys.exit("observe_switch_cost: needs two CPUs (workload on 0, recorder on 1)")
    exe = ROOT / "target/release/ontime"
    if not exe.exists():
        subprocess.run(["cargo", "build", "--release", "--locked"], cwd=ROOT, check=True)
    global EMPTY_CGROUP
    modes = ["off", "ontime-bpf", "ontime-bpf-cgroup", "ontime-perf", "perf-sched"]
    runs = {m: [] for m in modes}
    root = next((p for p in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup")
                 if pathlib.Path(p, "cgroup.procs").exists()), None)
    if root is None:
        sys.exit("observe_switch_cost: no cgroup hierarchy found")
    EMPTY_CGROUP = pathlib.Path(root, f"ontime-bench-{os.getpid()}")
    EMPTY_CGROUP.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="ontime-switch-cost-") as d:
            tmp = pathlib.Path(d)
            for r in range(args.rounds):
                for m in modes:
                    res = run_once(m, exe, args.ops, tmp)
                    runs[m].append(res)
                    print(f"round {r + 1}/{args.rounds} {m}: {res['usecs_per_op']:.3f} us/op", file=sys.stderr)
    finally:
        EMPTY_CGROUP.rmdir()
    switches_per_op = 2
    base = statistics.median(x["usecs_per_op"] for x in runs["off"])
    out = {"workload": f"taskset -c 0 perf bench sched pipe -l {args.ops}", "rounds": args.rounds,
           "baseline_usecs_per_op": base, "recorders": {}}
    for m in modes[1:]:
        us = statistics.median(x["usecs_per_op"] for x in runs[m])
        switches = args.ops * switches_per_op
        d = {"usecs_per_op": us,
             # The workload's slowdown: work done in the tracepoints on its CPU.
             "kernel_side_ns_per_switch": max(0.0, (us - base) * 1000 / switches_per_op),
             # The recorder process's CPU during the workload, on the other CPU.
             "reader_ns_per_switch": statistics.median(x["recorder_cpu_ns"] for x in runs[m]) / switches}
        if m.startswith("ontime"):
            d["events"] = statistics.median(x["events"] for x in runs[m])
            d["lost"] = sum(x["lost"] for x in runs[m])
        d["total_ns_per_switch"] = d["kernel_side_ns_per_switch"] + d["reader_ns_per_switch"]
        out["recorders"][m] = d
    ps = out["recorders"]["perf-sched"]["total_ns_per_switch"]
    for m in ("ontime-bpf", "ontime-bpf-cgroup", "ontime-perf"):
        if ps > 0:
            out[f"ratio_{m.replace('-', '_')}_over_perf_sched"] = out["recorders"][m]["total_ns_per_switch"] / ps
    out["target"] = "ontime at most half of perf sched record's cost"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
