#!/usr/bin/env python3
"""Prints a markdown table of a lab results directory: per run, the swept values,
the worst tenant's p99 / p99.9 / max (interval error or wake-up latency), missed
polls or overruns, and the relay's measured delay p99. Used for docs/results.md:
    scripts/results-table.py results/doc-001
"""
import json
import os
import sys


def fmt(ns):
    if ns is None: return "n/a"
    if ns < 1e6: return "%.0f us" % (ns/1e3)
    return "%.1f ms" % (ns/1e6)
def pct(s, n):
    for p in s.get("percentiles_ns", []):
        if p["name"] == n: return p["value_ns"]
def table(d):
    runs = sorted(os.listdir(os.path.join(d, "runs")))
    out = []
    first = json.load(open(os.path.join(d, "runs", runs[0], "run.json")))
    crawl = first["workload"] == "crawl"
    keys = [k for k, _ in first["vars"]]
    out.append("| " + " | ".join(keys) + " | worst tenant p99 | p99.9 | max | %s | relay delay p99 |" % ("missed" if crawl else "overruns"))
    out.append("|" + "---|" * (len(keys) + 5))
    for r in runs:
        rec = json.load(open(os.path.join(d, "runs", r, "run.json")))
        p99 = p999 = mx = 0; miss = 0; any999 = True
        for t in rec["tenants"]:
            if not t["result"]: continue
            v = json.load(open(os.path.join(d, "runs", r, t["result"])))
            s = v["interval_error"] if crawl else v["latency"]
            p99 = max(p99, pct(s, "p99") or 0)
            x = pct(s, "p99.9")
            if x is None: any999 = False
            else: p999 = max(p999, x)
            mx = max(mx, s["max_ns"] or 0)
            miss += v.get("missed", v.get("overruns", 0))
        relay = pct(rec["relay"]["delay"], "p99") if rec.get("relay") else None
        vals = [v for _, v in rec["vars"]]
        out.append("| " + " | ".join(vals) + " | %s | %s | %s | %d | %s |" % (fmt(p99), fmt(p999) if any999 else "n/a", fmt(mx), miss, fmt(relay)))
    return "\n".join(out)
print(table(sys.argv[1]))
