#!/usr/bin/env python3
"""Markdown table of a `[net]` results directory (document 003): per run
setting and flow, the worst repetition's end-to-end delay percentiles, the
misses and losses summed over repetitions, the longest wait of the flow's
class in the bottleneck's queue (relay.json's delay_by_class: the flow's
channel, or best effort without one; document 003's experiment 1 reports
this), the longest stamp-to-check delay of the flow's channel (net.json:
the network path alone, from the sender's veth, i.e. after a guest's
VMM, to the receiving interface), and what best effort got.
Usage: scripts/net-table.py results/doc-003
"""
import collections, glob, json, os, sys


def ms(v):
    return "-" if v is None else f"{v / 1e6:.3f}"


def pct(summary, name):
    for p in summary["percentiles_ns"]:
        if p["name"] == name:
            return p["value_ns"]
    return None


def main(root):
    rows = collections.OrderedDict()
    be = collections.defaultdict(list)
    for d in sorted(glob.glob(os.path.join(root, "runs", "*", "run.json"))):
        rec = json.load(open(d))
        run = os.path.dirname(d)
        label = ", ".join(f"{k}={v}" for k, v in rec["vars"]) or "(no sweep)"
        try:
            checks = {c["id"]: c["counts"].get("delay_max_ns") for c in json.load(open(os.path.join(run, "net.json")))["channels"]}
        except (OSError, ValueError, KeyError):
            checks = {}
        try:
            by_class = (json.load(open(os.path.join(run, "relay.json"))).get("channels") or {}).get("delay_by_class", {})
        except (OSError, ValueError):
            by_class = {}
        total = 0.0
        for f in rec["net"].get("best_effort", []):
            s = json.load(open(os.path.join(run, f)))["end"]["sum"]
            total += s["bits_per_second"] * (1 - s.get("lost_percent", 0) / 100) / 1e6
        if rec["net"].get("best_effort"):
            be[label].append(total)
        for f in rec["net"]["flows"]:
            key = (label, f["name"])
            r = rows.setdefault(key, {"deadline": f["deadline_ns"], "runs": 0, "p50": 0, "p99": 0, "p999": 0,
                                      "max": 0, "misses": 0, "lost": 0, "received": 0, "jitter": 0,
                                      "channel": None, "refused": f.get("refused"), "queue": None, "check": None})
            if f.get("channel") is not None:
                r["channel"] = f["channel"]
            cls = by_class.get(f"channel {f['channel']}" if f.get("channel") is not None else "best effort")
            if cls and cls.get("max_ns") is not None:
                r["queue"] = max(r["queue"] or 0, cls["max_ns"])
            chk = checks.get(f.get("channel"))
            if chk is not None:
                r["check"] = max(r["check"] or 0, chk)
            if not f.get("result"):
                continue
            res = json.load(open(os.path.join(run, f["result"])))
            s = res["delay"]
            r["runs"] += 1
            for k, n in (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")):
                r[k] = max(r[k], pct(s, n) or 0)
            r["max"] = max(r["max"], s["max_ns"] or 0)
            r["jitter"] = max(r["jitter"], res["jitter_ns"])
            r["misses"] += res["misses"]
            r["lost"] += res["lost"]
            r["received"] += res["received"]
    print("| setting | flow | channel | deadline | p50 ms | p99 ms | p99.9 ms | max ms | max / deadline | jitter ms | misses / received | lost | queue wait max ms | stamp-to-check max ms | best effort Mbit/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (label, name), r in rows.items():
        chan = r["channel"] if r["channel"] is not None else ("refused" if r["refused"] else "none")
        b = be.get(label)
        bes = f"{min(b):.1f}-{max(b):.1f}" if b else "-"
        ratio = f"{r['max'] / r['deadline'] * 100:.0f} %" if r["runs"] else "-"
        print(f"| {label} | {name} | {chan} | {r['deadline'] / 1e6:g} ms | {ms(r['p50'])} | {ms(r['p99'])} | {ms(r['p999'])} | "
              f"{ms(r['max'])} | {ratio} | {ms(r['jitter'])} | {r['misses']} / {r['received']} | {r['lost']} | {ms(r['queue'])} | {ms(r['check'])} | {bes} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
