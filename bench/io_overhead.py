#!/usr/bin/env python3
"""Cost of the I/O recorder: fio 4 KiB random reads in a tenant, without a
recorder, with `ontime io record` in each mode and with `perf record` on the
same tracepoints as each mode (the peer), alternating in rounds. Modes:
"ontime" (the default: block requests, the threads' I/O counters, no syscall
tracepoint; peer "perf-block" on the block tracepoints), "ontime-merges"
(`--merges`: also every bio, its merges and splits; peer "perf-merges" on
the same tracepoints) and "ontime-calls" (`--calls`: every file call through
the syscall tracepoints; peer "perf").

The tenant is a cgroup (cpu + memory) with an image-file disk on a loop
device, ext4, as the lab makes it. Two cases: "cached" (a 64 MiB file that
fits the tenant's memory: every read is a page-cache hit, the highest call
rate and so the recorder's worst case) and "direct" (O_DIRECT: every read
crosses the virtual disk, so the block probes fire too). Each round keeps
fio's IOPS per tool and the events ontime recorded and lost; `ontime bench
report` derives the throughput loss against no recorder, the ratios of
each ontime mode's loss to its perf peer's and the verdicts on the targets
(the default mode loses at most 2 % with O_DIRECT and 10 % with page-cache
hits). Writes a raw result (schema ontime-bench/1, bench/benchresult.py)
on stdout and to --out FILE. Needs root, fio, perf.
Usage: bench/io_overhead.py [--rounds 5] [--seconds 5] [--cases cached,direct] [--out FILE]
"""
import argparse, json, os, pathlib, signal, subprocess, sys, time

from benchresult import BenchResult, over, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "ontime-iobench"
BLOCK_EVENTS = ["block:block_rq_issue", "block:block_rq_complete"]
BIO_EVENTS = ["block:block_bio_queue", "block:block_bio_backmerge", "block:block_bio_frontmerge",
              "block:block_split"]
PERF_EVENTS = {
    "perf": ",".join(["syscalls:sys_enter_pread64", "syscalls:sys_exit_pread64",
                      "syscalls:sys_enter_read", "syscalls:sys_exit_read"] + BLOCK_EVENTS),
    "perf-block": ",".join(BLOCK_EVENTS + ["sched:sched_process_exit"]),
    "perf-merges": ",".join(BLOCK_EVENTS + BIO_EVENTS + ["sched:sched_process_exit"]),
}
TOOLS = ("none", "ontime", "perf-block", "ontime-merges", "perf-merges", "ontime-calls", "perf")
PEER = {"ontime": "perf-block", "ontime-merges": "perf-merges", "ontime-calls": "perf"}
# Each tool's row.
ROWS = {"none": "none", "ontime": "ontime (default)", "perf-block": "perf-block", "ontime-merges": "ontime --merges",
        "perf-merges": "perf-merges", "ontime-calls": "ontime --calls", "perf": "perf (calls)"}
# Each case's table and the default mode's largest throughput loss, %.
CASES = {"cached": ("page-cache hits", 10.0), "direct": ("O_DIRECT", 2.0)}


def sh(cmd):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout.strip()


class Rig:
    def __init__(self):
        v2 = pathlib.Path("/sys/fs/cgroup/cgroup.controllers").exists()
        self.cgroups = [pathlib.Path(f"/sys/fs/cgroup/{NAME}")] if v2 else [
            pathlib.Path(f"/sys/fs/cgroup/cpu/{NAME}"), pathlib.Path(f"/sys/fs/cgroup/memory/{NAME}")]
        self.image = pathlib.Path(f"/var/tmp/{NAME}.img")
        self.mount = pathlib.Path(f"/mnt/{NAME}")
        self.loop = None

    def __enter__(self):
        for c in self.cgroups:
            c.mkdir(parents=True, exist_ok=True)
        mem = self.cgroups[-1]
        (mem / ("memory.max" if len(self.cgroups) == 1 else "memory.limit_in_bytes")).write_text(str(512 << 20))
        sh(f"truncate -s 512M {self.image}")
        sh(f"mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 {self.image}")
        self.loop = sh(f"losetup --find --show {self.image}")
        self.mount.mkdir(parents=True, exist_ok=True)
        sh(f"mount {self.loop} {self.mount}")
        return self

    def __exit__(self, *exc):
        subprocess.run(["umount", str(self.mount)], capture_output=True)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
        for p in (self.image,):
            try:
                p.unlink()
            except OSError:
                pass
        for c in reversed(self.cgroups):
            try:
                c.rmdir()
            except OSError:
                pass
        try:
            self.mount.rmdir()
        except OSError:
            pass

    def fio(self, seconds, direct):
        join = "; ".join(f"echo $$ > {c}/{'cgroup.procs' if (c / 'cgroup.procs').exists() else 'tasks'}"
                         for c in self.cgroups)
        out = sh(f"{join}; exec fio --name=b --directory={self.mount} --filename=f --size=64M --bs=4k "
                 f"--rw=randread --direct={int(direct)} --ioengine=psync --invalidate=0 --runtime={seconds} "
                 f"--time_based --output-format=json")
        j = json.loads(out[out.index("{"):])["jobs"][0]["read"]
        return j["iops"]


def recorder(tool, rig, tmp):
    if tool.startswith("ontime"):
        exe = ROOT / "target/release/ontime"
        calls = {"ontime-calls": ["--calls"], "ontime-merges": ["--merges"]}.get(tool, [])
        p = subprocess.Popen([str(exe), "io", "record", *calls, "--cgroup", f"t={rig.cgroups[0]}",
                              "--disk", f"t={rig.image}", "-o", str(tmp / "b.otrec"), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            line = p.stderr.readline()
            if "ontime: recording" in line:
                return p
            if not line and p.poll() is not None:
                sys.exit(f"io_overhead: ontime io record failed: {p.stderr.read()}")
        sys.exit("io_overhead: ontime io record did not start")
    p = subprocess.Popen(["perf", "record", "-q", "-a", "-e", PERF_EVENTS[tool], "-o", str(tmp / "perf.data")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    return p


def stop(p):
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    return out


def declare(res, a, cases):
    """The columns, ratios and targets `ontime bench report` computes."""
    res.metric("IOPS", "IOPS", value("iops"))
    # (none - tool) / none, as %: the throughput the recorder took.
    res.metric("throughput loss", "%", over("iops", baseline="none", scale=-100, relative=True))
    # The events ontime recorded over fio's fixed run time.
    res.metric("events/s", "", value("events", per="seconds"))
    res.metric("lost", "", value("lost"))
    for t, peer in PEER.items():
        res.ratio("throughput loss", ROWS[t], ROWS[peer])
    for case in cases:
        table, bound = CASES[case]
        res.target(f"default mode throughput loss <= {bound:g} % with {table}",
                   value_of(ROWS["ontime"], "throughput loss"), at_most=bound, table=table)
    res.method(f"fio: 4 KiB random reads of a 64 MiB file, psync, one job, {a.seconds} s per run, in a tenant "
               "cgroup (cpu + memory, 512 MiB) on an ext4 image file behind a loop device, as the lab makes it; "
               "page-cache hits: the file cached in the tenant's memory; O_DIRECT: every read crosses the "
               "virtual disk.")
    res.method("Each round runs no recorder, then each `ontime io record` mode followed by its peer, `perf record "
               "-a` on the same tracepoints as that mode (default: the block request tracepoints; --merges: also "
               "the bio queue, merge and split tracepoints; --calls: also the read and pread64 syscall "
               "tracepoints), so rounds pair; throughput loss is against the same round's run with no recorder.")
    res.method("events/s: the events ontime recorded (events) over fio's fixed run time (seconds: --seconds, kept "
               "in every round); lost: the events ontime's ring dropped.")


def main():
    ap = argparse.ArgumentParser(description="Cost of the I/O recorder per mode, beside perf record on the same tracepoints.")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--cases", default="cached,direct", help="cached, direct or both")
    ap.add_argument("--out", default=None, help="also write the result to FILE")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("io_overhead: needs root (cgroups, loop devices, BPF)")
    for tool in ("fio", "perf"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"io_overhead: {tool} is not installed (scripts/setup.sh)")
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    cases = [c for c in (("cached", False), ("direct", True)) if c[0] in a.cases.split(",")]
    if not cases:
        sys.exit("io_overhead: --cases names neither cached nor direct")
    res = BenchResult("io_overhead", "I/O recorder cost per mode: ontime io record vs perf record", sys.argv)
    declare(res, a, [c for c, _ in cases])
    tmp = pathlib.Path(sh("mktemp -d"))
    with Rig() as rig:
        rig.fio(2, False)  # lay the file out and warm the cache
        for case, direct in cases:
            table = CASES[case][0]
            for r in range(a.rounds):
                for tool in TOOLS:
                    p = None if tool == "none" else recorder(tool, rig, tmp)
                    values = {"iops": rig.fio(a.seconds, direct), "seconds": a.seconds}
                    if p is not None:
                        out = stop(p)
                        if tool in PEER:
                            s = json.loads(out)
                            values.update(events=s["events"], lost=s["lost"], unpaired_lost=s.get("unpaired_lost"),
                                          reader_cpu_ns=s.get("reader_cpu_ns"), start_ns=s["start_ns"],
                                          end_ns=s["end_ns"])
                    res.round(table, ROWS[tool], values=values)
                    print(f"{case} round {r + 1}/{a.rounds} {tool}: {values['iops']:.0f} IOPS", file=sys.stderr)
    sh(f"rm -rf {tmp}")
    res.write(a.out)


if __name__ == "__main__":
    main()
