#!/usr/bin/env python3
"""Prints a markdown table of a document-004 sweep (lab results directory
with [tenant.io] and [observe] io): per cell (the swept values, repetitions
pooled) the tools' throughput, mean of the tenants, as mean (min-max) over
the repetitions; what the guest cache and the host cache absorbed of the
reads (mean over repetitions and tenants); and the read requests at the
guest's virtual disk per application read with their mean size (document
004's figures 9-10; for a QEMU guest its own block layer). Used for
docs/results.md:
    scripts/io-table.py results/doc-004-vm
"""
import json
import os
import sys
from collections import OrderedDict


def load(p):
    with open(p) as f:
        return json.load(f)


def main(root):
    cells = OrderedDict()
    runs = sorted(os.listdir(os.path.join(root, "runs")))
    for name in runs:
        d = os.path.join(root, "runs", name)
        try:
            rec = load(os.path.join(d, "run.json"))
        except (OSError, ValueError):
            continue
        if rec.get("error") or not rec.get("complete", True):
            continue
        key = tuple(v for _, v in rec.get("vars", []))
        tput = []
        for t in rec.get("tenants", []):
            f = t.get("result")
            if not f:
                continue
            try:
                r = load(os.path.join(d, f))
            except (OSError, ValueError):
                continue
            if "throughput_bps" in r:
                tput.append(r["throughput_bps"])
        if not tput:
            continue
        c = cells.setdefault(key, {"tput": [], "guest": [], "host": [], "app": 0, "vops": 0, "vbytes": 0})
        c["tput"].append(sum(tput) / len(tput) / 1048576)
        try:
            io = load(os.path.join(d, "io.json"))
        except (OSError, ValueError):
            io = {"tenants": []}
        for t in io["tenants"]:
            ab = t.get("absorption", {})
            g = (ab.get("guest_cache_reads") or {}).get("share")
            h = (ab.get("host_cache_reads") or {}).get("share")
            if g is not None:
                c["guest"].append(g)
            if h is not None:
                c["host"].append(h)
            virt = (t.get("inside_guest") or {}).get("block") or t.get("virtual_disk", {})
            c["app"] += t["application"]["read"]["ops"]
            c["vops"] += virt["read"]["ops"]
            c["vbytes"] += virt["read"]["bytes"]
    if not cells:
        sys.exit(f"{root}: no finished I/O runs")
    keys = [k for k, _ in load(os.path.join(root, "runs", runs[0], "run.json")).get("vars", [])]
    print("| " + " | ".join(keys) + " | reps | MiB/s mean (min-max) | guest cache absorbed (reads) | host cache absorbed (reads) | virtual reads per read | mean virtual read |")
    print("|" + "---|" * (len(keys) + 6))
    mean = lambda v: sum(v) / len(v) if v else None
    pct = lambda v: "-" if v is None else "%.0f %%" % (v * 100)
    for k, c in cells.items():
        t = c["tput"]
        per = "%.2f" % (c["vops"] / c["app"]) if c["app"] else "-"
        size = "%.0f KiB" % (c["vbytes"] / c["vops"] / 1024) if c["vops"] else "-"
        print("| " + " | ".join(k) + " | %d | %.1f (%.1f-%.1f) | %s | %s | %s | %s |" % (
            len(t), mean(t), min(t), max(t), pct(mean(c["guest"])), pct(mean(c["host"])), per, size))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
