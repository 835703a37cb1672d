#!/usr/bin/env python3
"""Where the lab host's kernel puts a waking crawler or relay, by what ran where
as it woke: the CPU it last ran on (prev) and the other one, each idle,
running a fair thread or a real-time one (the relay and the gateway at
their policies in the run's run.json), and whether the wake-up event came
from prev's CPU or the other's (a waker keeps its CPU while it wakes a
thread), and who woke it (recordings since session 24 carry the thread
current at the wake-up: the relay, the gateway, a crawler, none for an
interrupt on an idle CPU; older ones show "-"). Prints, per situation,
how many wake-ups stayed on prev and how many went to the other CPU.
Two-CPU runs only; reads ontime recordings (.otrec) with the run.json
beside them, the lab's and the simulator's (`ontime sim --into`) alike.

This is what `MeasuredWakeups::leave_real_time` in the simulator's Linux
model rests on (docs/sim.md, session 24): a crawler whose last CPU runs a
real-time thread leaves it, for an idle CPU always and for one running a
fair thread mostly.

    scripts/wake-placement.py results/NAME/runs/*/observe.otrec
"""
import importlib.util
import json
import os
import sys
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("wake_preemption", os.path.join(HERE, "wake-preemption.py"))
wp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wp)

KIND_SWITCH, KIND_WAKEUP = 1, 2


def real_time_threads(path, threads):
    """Tids of the run's relay and gateway threads when their policy is
    not SCHED_OTHER."""
    try:
        with open(os.path.join(os.path.dirname(path), "run.json")) as f:
            host = json.load(f)["config"]["host"]
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"wake-placement: {path}: no readable run.json beside it ({e})")
    roles = []
    if host.get("relay_policy", "other") != "other":
        roles.append("relay")
    if host.get("gateway_policy", "other") != "other":
        roles.append("gw-")
    return {tid for tid, t in threads.items() if any(r in (t.get("comm") or "") for r in roles)}


def role(threads, tid, woken):
    """Who woke a crawler: the relay, the gateway, the crawler's own
    tenant, another crawler, none (an interrupt on an idle CPU)."""
    if tid == 0:
        return "none"
    t = threads.get(tid, {})
    comm = t.get("comm") or ""
    if "relay" in comm:
        return "relay"
    if comm.startswith("gw-"):
        return "gateway"
    if t.get("group") is not None and t.get("group") == threads.get(woken, {}).get("group"):
        return "own tenant"
    if "crawl" in comm:
        return "other crawler" if "crawl" in (threads.get(woken, {}).get("comm") or "") else "crawler"
    return "other"


def situations(path, counts):
    events, threads = wp.read(path)
    rt = real_time_threads(path, threads)
    wakers = any(e[5] == KIND_WAKEUP and e[2] != 0 for e in events)

    def cls(tid):
        return "idle" if tid == 0 else "real-time" if tid in rt else "fair"

    occupant, last = {}, {}
    for ts, a, b, c, cpu, kind, flags in events:
        if kind == KIND_SWITCH:
            occupant[cpu] = b
            last[b] = cpu
        elif kind == KIND_WAKEUP:
            tid, target = a, c
            comm = threads.get(tid, {}).get("comm") or ""
            woken = "crawler" if "crawl" in comm else "relay" if "relay" in comm else None
            if woken is None:
                continue
            prev = last.get(tid)
            if prev is None or prev > 1 or target > 1:
                continue
            other = 1 - prev
            key = (
                woken,
                role(threads, b, tid) if wakers else "-",
                "prev" if cpu == prev else "other",
                cls(occupant.get(prev, 0)),
                cls(occupant.get(other, 0)),
            )
            counts[key]["prev" if target == prev else "other"] += 1


def main():
    if not sys.argv[1:]:
        sys.exit(__doc__)
    counts = defaultdict(Counter)
    for p in sys.argv[1:]:
        situations(p, counts)
    print("woken | by | from the CPU | prev CPU runs | other CPU runs | stayed on prev | went to other | share moved")
    print("---|---|---|---|---|---|---|---")
    for key in sorted(counts, key=lambda k: -sum(counts[k].values())):
        c = counts[key]
        n = c["prev"] + c["other"]
        if n < 20:
            continue
        print(" | ".join(key) + f" | {c['prev']} | {c['other']} | {100 * c['other'] / n:.0f} %")


if __name__ == "__main__":
    main()
