#!/usr/bin/env python3
"""Simulator speed: 20 crawler tenants at 200 polls/s each on 8
simulated CPUs for 20 simulated minutes (4.8 M polls, enough for p99.999),
timed end to end through `ontime sim`. Prints one JSON document with the
wall time and the ratio of simulated to real time (target: >= 100, i.e. at
most 12 s). Usage: bench/sim_speed.py [--minutes 20]
"""
import argparse
import json
import pathlib
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    args = ap.parse_args()
    exe = ROOT / "target/release/ontime"
    subprocess.run(["cargo", "build", "--release", "--locked", "-q"], cwd=ROOT, check=True)
    seconds = int(args.minutes * 60)
    scen = f"""name = "sim-speed"
duration = "{seconds}s"
[host]
relay_delay = "10ms"
[tenant]
count = 20
vcpus = 1
[tenant.crawl]
rate = 200
work_per_poll = "1.4ms"
"""
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "speed.toml"
        p.write_text(scen)
        t0 = time.monotonic()
        out = subprocess.run([str(exe), "sim", str(p), "--cpus", "8", "--json"],
                             check=True, capture_output=True, text=True).stdout
        wall = time.monotonic() - t0
    runs = json.loads(out)
    polls = sum(t["polls"] for t in runs[0]["tenants"])
    print(json.dumps({
        "tenants": 20, "polls_per_second_each": 200, "cpus": 8,
        "simulated_s": seconds, "polls": polls, "wall_s": round(wall, 3),
        "ratio_simulated_to_real": round(seconds / wall, 1),
        "target": "ratio >= 100 (20 simulated minutes in <= 12 s)",
    }, indent=2))


if __name__ == "__main__":
    main()
