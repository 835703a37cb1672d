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
crosses the virtual disk, so the block probes fire too). Reported per case:
median fio IOPS with each tool, the throughput loss against no recorder,
the ratio of each ontime mode's loss to its perf peer's, and the events per
second ontime handled with how many lost. Targets: the default
mode loses at most 2 % with O_DIRECT and 10 % with page-cache hits. Prints one JSON document. Needs root, fio, perf.
Usage: bench/io_overhead.py [--rounds 5] [--seconds 5] [--cases cached,direct]
"""
import argparse, json, os, pathlib, re, signal, statistics, subprocess, sys, time

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
TARGET_LOSS = {"cached": 0.10, "direct": 0.02}


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--cases", default="cached,direct", help="cached, direct or both")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("io_overhead: needs root (cgroups, loop devices, BPF)")
    for tool in ("fio", "perf"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            sys.exit(f"io_overhead: {tool} is not installed (scripts/setup.sh)")
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    tmp = pathlib.Path(sh("mktemp -d"))
    result = {"bench": "io_overhead", "rounds": a.rounds, "seconds": a.seconds, "cases": {}}
    with Rig() as rig:
        rig.fio(2, False)  # lay the file out and warm the cache
        cases = [c for c in (("cached", False), ("direct", True)) if c[0] in a.cases.split(",")]
        for case, direct in cases:
            iops = {t: [] for t in TOOLS}
            rates = {t: [] for t in PEER}
            lost = {t: 0 for t in PEER}
            for _ in range(a.rounds):
                for tool in TOOLS:
                    p = None if tool == "none" else recorder(tool, rig, tmp)
                    v = rig.fio(a.seconds, direct)
                    if p is not None:
                        out = stop(p)
                        if tool in PEER:
                            s = json.loads(out)
                            secs = (s["end_ns"] - s["start_ns"]) / 1e9
                            rates[tool].append(s["events"] / secs)
                            lost[tool] += s["lost"]
                    iops[tool].append(v)
            med = {t: statistics.median(v) for t, v in iops.items()}
            loss = {t: 1 - med[t] / med["none"] for t in TOOLS if t != "none"}
            result["cases"][case] = {
                "iops_median": med,
                "throughput_loss_pct": {t: round(v * 100, 2) for t, v in loss.items()},
                "loss_ratio_to_perf_peer": {
                    t: round(loss[t] / loss[peer], 2) if loss[peer] > 0 else None for t, peer in PEER.items()
                },
                "events_per_s_median": {t: round(statistics.median(r)) for t, r in rates.items()},
                "events_lost": lost,
                "target_loss_pct": TARGET_LOSS[case] * 100,
                "target_met": loss["ontime"] <= TARGET_LOSS[case],
            }
    sh(f"rm -rf {tmp}")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
