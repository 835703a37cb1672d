#!/usr/bin/env python3
"""Prints a markdown table of a lab results directory: per run, the swept values,
the worst tenant's p99 / p99.9 / max (interval error or wake-up latency), missed
polls or overruns, the relay's measured delay p99, and the figures that explain
them: from observe.json the worst tenant's 100 ms peak and 1 s mean CPU, its
steal (share of vCPU time), contention p99 and the host I/O path's 100 ms
minimum; for crawl runs the gateway's handler-minus-kernel stamp p99 and the
crawler's measured CPU per poll and network rate. With --tail also p99.99 and
p99.999 (runs long enough to support them). Used for docs/results.md:
    scripts/results-table.py results/doc-001 [--tail]
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


def usage(g, window):
    for u in g.get("usage", []):
        if u["window_ns"] == window: return u
    return {}


def scheduler(run_dir, rec):
    """(peak 100 ms, mean 1 s, steal, contention p99, host I/O min) or Nones."""
    o = rec.get("observe") or {}
    if not o.get("analysis"): return None
    try:
        a = json.load(open(os.path.join(run_dir, o["analysis"])))
    except OSError:
        return None
    # A native run has no tenant cgroup to record: no scheduler view.
    tenants = [g for g in a["groups"] if g["kind"] == "tenant" and g.get("on_cpu_ns")]
    if not tenants: return None
    host = [g for g in a["groups"] if g["kind"] == "host-io"]
    peak = max((usage(g, 100_000_000).get("max") or 0 for g in tenants), default=None)
    mean = max((usage(g, 1_000_000_000).get("mean") or 0 for g in tenants), default=None)
    steal = max(((g.get("time_shares") or {}).get("steal_pct", 0) for g in tenants), default=None)
    cont = max((g["contention"]["any"]["p99_ns"] or 0 for g in tenants), default=None)
    hmin = usage(host[0], 100_000_000).get("min") if host else None
    return peak, mean, steal, cont, hmin


def table(d, tail):
    runs = sorted(os.listdir(os.path.join(d, "runs")))
    out = []
    first = json.load(open(os.path.join(d, "runs", runs[0], "run.json")))
    crawl = first["workload"] == "crawl"
    keys = [k for k, _ in first["vars"]]
    tails = ["p99.99", "p99.999"] if tail else []
    head = keys + ["worst tenant p99", "p99.9"] + tails + ["max", "missed" if crawl else "overruns", "relay delay p99",
                   "peak 100 ms (CPUs)", "mean 1 s", "steal", "contention p99", "host I/O min"]
    if crawl:
        head += ["stamp gap p99", "CPU/poll", "net kbit/s"]
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "---|" * len(head))
    for r in runs:
        run_dir = os.path.join(d, "runs", r)
        rec = json.load(open(os.path.join(run_dir, "run.json")))
        if rec.get("simulated"):
            continue  # measured runs only: scripts/sim-vs-lab.py compares
        p99 = p999 = mx = 0; miss = 0; any999 = True; cpp = []; net = []
        worst_tail = {n: 0 for n in tails}
        for t in rec["tenants"]:
            if not t["result"]: continue
            v = json.load(open(os.path.join(run_dir, t["result"])))
            s = v["interval_error"] if crawl else v["latency"]
            p99 = max(p99, pct(s, "p99") or 0)
            x = pct(s, "p99.9")
            if x is None: any999 = False
            else: p999 = max(p999, x)
            mx = max(mx, s["max_ns"] or 0)
            for n in tails:
                v_ = pct(s, n)
                worst_tail[n] = None if v_ is None or worst_tail[n] is None else max(worst_tail[n], v_)
            miss += v.get("missed", v.get("overruns", 0))
            res = v.get("resources") or {}
            if res.get("cpu_per_poll_ns"): cpp.append(res["cpu_per_poll_ns"])
            if res.get("net_kbit_per_s"): net.append(res["net_kbit_per_s"])
        relay = pct(rec["relay"]["delay"], "p99") if rec.get("relay") else None
        vals = [v for _, v in rec["vars"]]
        row = vals + [fmt(p99), fmt(p999) if any999 else "n/a"] + [fmt(worst_tail[n]) for n in tails] + [fmt(mx), str(miss), fmt(relay)]
        sch = scheduler(run_dir, rec)
        if sch:
            peak, mean, steal, cont, hmin = sch
            f2 = lambda v: "n/a" if v is None else "%.2f" % v
            row += [f2(peak), f2(mean), "n/a" if steal is None else "%.1f%%" % steal, fmt(cont), f2(hmin)]
        else:
            row += ["n/a"] * 5
        if crawl:
            g = rec.get("gateway") or {}
            gap = pct(g.get("stamps", {}).get("user_minus_kernel", {}), "p99")
            row += [fmt(gap), fmt(max(cpp)) if cpp else "n/a", "%.0f" % max(net) if net else "n/a"]
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


print(table(sys.argv[1], "--tail" in sys.argv[2:]))
