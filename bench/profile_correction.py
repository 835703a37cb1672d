#!/usr/bin/env python3
"""Document 002's correction against the run alone, repeated.

The validation test (crates/profile/tests/validation.rs) checks what is
exact on one run: steal equals the kernel's run delay, the corrected time
equals the kernel's on-CPU count. Whether the corrected time of a tenant
that shared its CPU equals its time *alone* (document 002: within 3 %)
compares two runs taken at different moments, and this VM's speed alone
moves by a third between runs, so it is measured here, with its spread,
not asserted in a test.

Each round: the compute program (crates/profile/tests/compute.c) alone on
the last CPU (elapsed less its own run delay), then three copies pinned to
that CPU under `ontime profile record --pid`, each's corrected time =
elapsed - steal from `ontime profile report --json`. Prints one JSON
document: per round the alone time and the three corrected times, and the
median, min and max of corrected/alone. Needs root and cc.
Usage: bench/profile_correction.py [--rounds 5]
"""
import argparse, json, os, pathlib, statistics, subprocess, sys, tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROUNDS_OF_WORK, UNIT = "130", "1000000"


def build(tmp):
    exe = tmp / "compute"
    subprocess.run(["cc", "-O0", "-g", "-fno-omit-frame-pointer", "-o", str(exe),
                    str(ROOT / "crates/profile/tests/compute.c")], check=True)
    return exe


def pinned(exe, cpu, wait):
    args = [str(exe), ROUNDS_OF_WORK, UNIT] + (["wait"] if wait else [])
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))


def outcome(p):
    out, _ = p.communicate(timeout=120)
    elapsed, on_cpu, run_delay = (int(x) for x in out.split())
    return elapsed, on_cpu, run_delay


def one_round(exe, ontime, cpu, tmp):
    elapsed, _, run_delay = outcome(pinned(exe, cpu, False))
    alone = elapsed - run_delay
    procs = [pinned(exe, cpu, True) for _ in range(3)]
    rec = tmp / "p.otrec"
    cmd = [ontime, "profile", "record", "-F", "250", "-o", str(rec)]
    for i, p in enumerate(procs):
        cmd += ["--pid", f"t{i}={p.pid}"]
    recorder = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for line in recorder.stderr:  # ready once it says it records
        if line.startswith("ontime: recording"):
            break
    else:
        sys.exit(f"profile record did not start: {recorder.wait()}")
    for p in procs:
        p.stdin.write(b"g")
        p.stdin.flush()
    ran = [outcome(p) for p in procs]
    recorder.send_signal(2)
    recorder.wait(timeout=60)
    report = json.loads(subprocess.run([ontime, "profile", "report", str(rec), "--json"],
                                       check=True, capture_output=True, text=True).stdout)
    tenants = {t["name"]: t for t in report["tenants"]}
    corrected = [ran[i][0] - tenants[f"t{i}"]["steal_runqueue_ns"] for i in range(3)]
    return alone, corrected


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("profile_correction: needs root (BPF recorder and perf sampling)")
    ontime = str(ROOT / "target/release/ontime")
    subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=ROOT, check=True)
    cpu = os.cpu_count() - 1
    rounds, ratios = [], []
    with tempfile.TemporaryDirectory() as d:
        exe = build(pathlib.Path(d))
        for _ in range(a.rounds):
            alone, corrected = one_round(exe, ontime, cpu, pathlib.Path(d))
            rounds.append({"alone_ns": alone, "corrected_ns": corrected})
            ratios += [c / alone for c in corrected]
            print(f"alone {alone / 1e6:.1f} ms, corrected {[round(c / 1e6, 1) for c in corrected]} ms",
                  file=sys.stderr)
    print(json.dumps({
        "rounds": rounds,
        "corrected_over_alone": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
        "document_002": "within 3 %",
    }, indent=1))


if __name__ == "__main__":
    main()
