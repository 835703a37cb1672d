#!/usr/bin/env python3
"""Measured vs simulated runs of one lab results directory, as a Markdown
table: per setting, the worst tenant's interval error p99 and p99.9 in the
lab and in the simulator (`ontime sim SCENARIO --into RESULTS`), their
ratio, whether it is within a factor of 2, and missed polls.

    scripts/sim-vs-lab.py results/doc-000-tenants
"""
import glob
import json
import os
import sys


def worst(run_dir, rec):
    w, missed = {}, 0
    for t in rec["tenants"]:
        if not t.get("result"):
            continue
        j = json.load(open(os.path.join(run_dir, t["result"])))
        for p in j["interval_error"]["percentiles_ns"]:
            if p["value_ns"] is not None:
                w[p["name"]] = max(w.get(p["name"], 0), p["value_ns"])
        missed += j["missed"]
    return w, missed


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = {}
    for d in sorted(glob.glob(os.path.join(sys.argv[1], "runs", "*"))):
        f = os.path.join(d, "run.json")
        if not os.path.exists(f):
            continue
        rec = json.load(open(f))
        key = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in rec["vars"])
        src = "sim" if rec.get("simulated") else "lab"
        rows.setdefault(key, {})[src] = worst(d, rec)
    print("| setting | lab p99 | sim p99 | ratio | lab p99.9 | sim p99.9 | ratio | missed lab / sim |")
    print("|---|---|---|---|---|---|---|---|")
    agree = total = 0
    for key, v in rows.items():
        if "lab" not in v or "sim" not in v:
            continue
        (lw, lm), (sw, sm) = v["lab"], v["sim"]
        cells = []
        for p in ("p99", "p99.9"):
            a, b = lw.get(p), sw.get(p)
            if a is None or b is None:
                cells += ["n/a", "n/a", "-"]
                continue
            r = b / a if a else float("inf")
            ok = 0.5 <= r <= 2.0 or (a < 1_000_000 and b < 1_000_000)
            total += 1
            agree += ok
            cells += [f"{a / 1e6:.2f} ms", f"{b / 1e6:.2f} ms", f"{r:.2f}{'' if ok else ' ✗'}"]
        print(f"| {key} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {cells[4]} | {cells[5]} | {lm} / {sm} |")
    print(f"\n{agree} of {total} percentiles within a factor of 2 (both below 1 ms counts as agreeing); ✗ marks the others.")


if __name__ == "__main__":
    main()
