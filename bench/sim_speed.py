#!/usr/bin/env python3
"""Simulator speed: 20 crawler tenants at 200 polls/s each on 8
simulated CPUs for 20 simulated minutes (4.8 M polls, enough for p99.999),
timed end to end through `ontime sim`. Writes a raw result
(bench/benchresult.py): the simulated seconds, the wall seconds and the
polls simulated; `ontime bench report` computes the speed (simulated /
wall, "x real time") and judges the target (>= 100 x real time: 20
minutes in at most 12 s).
Usage: bench/sim_speed.py [--minutes 20] [--out FILE]
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

from benchresult import BenchResult, timed_json, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROW = "ontime sim"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--out", help="also write the result to this file")
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
    res = BenchResult("sim_speed", "Simulator speed", sys.argv)
    res.metric("simulated", "s", value("simulated_s"))
    res.metric("wall", "s", value("wall_s"))
    res.metric("polls", "", value("polls"))
    res.metric("x real time", "x", value("simulated_s", per="wall_s"))
    res.target(">= 100 x real time", value_of(ROW, "x real time"), at_least=100)
    res.method(f"`ontime sim --cpus 8 --json` on a scenario of 20 crawler tenants (1 vCPU each) at 200 polls/s, "
               f"1.4 ms of work per poll, for {seconds} simulated seconds; simulated is the scenario's duration "
               "(an input), wall the command's time from start to exit (time.monotonic), polls the sum of the "
               "tenants' polls in its output; x real time is simulated over wall. No peer simulates this.")
    table = f"20 tenants x 200 polls/s, 8 CPUs, {seconds} s"
    with tempfile.TemporaryDirectory() as d:
        p = pathlib.Path(d) / "speed.toml"
        p.write_text(scen)
        print(f"sim_speed: simulating {seconds} s", file=sys.stderr)
        wall, runs = timed_json([exe, "sim", p, "--cpus", "8", "--json"])
    polls = sum(t["polls"] for t in runs[0]["tenants"])
    res.round(table, ROW, values={"simulated_s": seconds, "wall_s": wall, "polls": polls})
    res.write(args.out)


if __name__ == "__main__":
    main()
