#!/usr/bin/env python3
"""Placement speed: `ontime plan examples/plan-200.toml` (200 crawler
tenants onto 8-core hosts, every host simulated long enough to support
p99.999, beside packing by 1 s mean CPU), timed end to end, a few times.
Writes a raw result (bench/benchresult.py): each run's wall seconds and
the hosts the plan used; `ontime bench report` computes the median and
judges the target (<= 60 s for 200 tenants). No peer places tenants by
simulated tail latency.
Usage: bench/plan_speed.py [--repeat 3] [--out FILE]
"""
import argparse
import pathlib
import sys

from benchresult import BenchResult, timed_json, value, value_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROW = "ontime plan"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--input", default=str(ROOT / "examples/plan-200.toml"))
    ap.add_argument("--out", help="also write the result to this file")
    args = ap.parse_args()
    exe = ROOT / "target/release/ontime"
    if not exe.exists():
        sys.exit(f"bench: {exe} is missing: cargo build --release")
    res = BenchResult("plan_speed", "Placement speed", sys.argv)
    res.metric("wall", "s", value("wall_s"))
    res.metric("hosts", "", value("hosts"))
    res.target("<= 60 s for 200 tenants", value_of(ROW, "wall"), at_most=60)
    res.method(f"`ontime plan {pathlib.Path(args.input).relative_to(ROOT)} --json`, {args.repeat} times one after "
               "another; wall is the command's time from start to exit (time.monotonic), hosts the hosts of the "
               "placement it chose.")
    table = pathlib.Path(args.input).stem
    for i in range(args.repeat):
        print(f"plan_speed: run {i + 1}/{args.repeat}", file=sys.stderr)
        wall, plan = timed_json([exe, "plan", args.input, "--json"])
        hosts = plan.get("hosts")
        res.round(table, ROW, values={"wall_s": wall, "hosts": len(hosts) if isinstance(hosts, list) else None})
    res.write(args.out)


if __name__ == "__main__":
    main()
