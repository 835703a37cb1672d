#!/usr/bin/env python3
"""Measured vs simulated runs of lab results directories, as Markdown: per
setting, the worst tenant's interval error p99 and p99.9 over the lab's
repetitions (median and spread) and the simulator's (`ontime sim SCENARIO
--into RESULTS`, one simulated run per measured one), whether the
simulated median agrees, missed polls, and for every cell that disagrees
the scheduler figures of both sides (observe's work conservation: vCPU
time queued while a CPU idled, the tenants' run-queue wait per second, and
where waking threads were queued: the share of wake-ups put behind a busy
CPU while another idled, and of those the share that preempted at once).
Lab runs analysed before ontime counted wake-ups get them from their
recording (`ontime observe report --json`, cached as wakeups.json beside
it; ONTIME names the binary, default target/release/ontime).

A cell agrees when the simulated median lies within a factor of 2 of the
lab's median or inside the lab's spread (its smallest to largest
repetition), issue 24's rule.

    scripts/sim-vs-lab.py results/doc-000-tenants [results/plan-proof ...]
    scripts/sim-vs-lab.py --json results/...     # the counts, machine-readable
"""
import glob
import json
import os
import statistics
import subprocess
import sys

ONTIME = os.environ.get("ONTIME") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "ontime")

PERCENTILES = ("p99", "p99.9")


def worst(run_dir, rec):
    """The worst tenant's percentiles and the missed polls of one run."""
    w, missed = {}, 0
    for t in rec["tenants"]:
        if not t.get("result"):
            continue
        with open(os.path.join(run_dir, t["result"])) as f:
            j = json.load(f)
        for p in j["interval_error"]["percentiles_ns"]:
            if p["value_ns"] is not None:
                w[p["name"]] = max(w.get(p["name"], 0), p["value_ns"])
        missed += j["missed"]
    return w, missed


def scheduler_figures(run_dir):
    """From the run's observe.json: the share of queued vCPU time that
    passed while a CPU idled, and the tenants' mean run-queue wait (ms per
    second per tenant)."""
    f = os.path.join(run_dir, "observe.json")
    if not os.path.exists(f):
        return None
    with open(f) as fh:
        o = json.load(fh)
    wc = o.get("work_conservation") or {}
    queued = wc.get("queued_ns") or 0
    idle_share = (wc.get("queued_while_idle_ns") or 0) / queued if queued else 0.0
    tenants = [g for g in o.get("groups", []) if g.get("kind") == "tenant"]
    duration_s = (o.get("recording", {}).get("duration_ns") or 0) / 1e9
    wait = (
        statistics.mean(g.get("run_delay_ns", 0) for g in tenants) / 1e6 / max(duration_s, 1e-9)
        if tenants
        else 0.0
    )
    return {"queued_while_idle": idle_share, "wait_ms_per_s": wait, "wakeups": wakeups(run_dir, wc)}


def wakeups(run_dir, wc):
    """The wake-up placement counts of a run: from its observe.json, else
    from its recording (cached)."""
    if wc.get("wakeups"):
        return wc["wakeups"]
    cache = os.path.join(run_dir, "wakeups.json")
    rec = os.path.join(run_dir, "observe.otrec")
    if os.path.exists(cache):
        with open(cache) as fh:
            return json.load(fh)
    if not os.path.exists(rec) or not os.path.exists(ONTIME):
        return None
    p = subprocess.run([ONTIME, "observe", "report", "--json", rec], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    w = (json.loads(p.stdout).get("work_conservation") or {}).get("wakeups")
    if w:
        with open(cache, "w") as fh:
            json.dump(w, fh)
    return w


def key_of(rec):
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in rec["vars"])


def load(results):
    """Per setting, per side ('lab' or 'sim'), one entry per run."""
    rows = {}
    for d in sorted(glob.glob(os.path.join(results, "runs", "*"))):
        f = os.path.join(d, "run.json")
        if not os.path.exists(f):
            continue
        with open(f) as fh:
            rec = json.load(fh)
        if not rec.get("simulated") and not rec.get("complete", True):
            continue
        src = "sim" if rec.get("simulated") else "lab"
        w, missed = worst(d, rec)
        rows.setdefault(key_of(rec), {}).setdefault(src, []).append(
            {"w": w, "missed": missed, "sched": scheduler_figures(d), "vars": rec["vars"]}
        )
    return rows


def ms(v):
    return f"{v / 1e6:.2f}"


def cell(lab, sim, p):
    """(text, agrees or None when a side has no value)."""
    lv = [r["w"][p] for r in lab if p in r["w"]]
    sv = [r["w"][p] for r in sim if p in r["w"]]
    if not lv or not sv:
        return "n/a", None
    lmed, smed = statistics.median(lv), statistics.median(sv)
    lo, hi = min(lv), max(lv)
    ratio = smed / lmed if lmed else float("inf")
    ok = 0.5 <= ratio <= 2.0 or lo <= smed <= hi
    spread = f"{ms(lmed)} ({ms(lo)}-{ms(hi)})" if len(lv) > 1 else ms(lmed)
    return f"{spread} | {ms(smed)} | {ratio:.2f}{'' if ok else ' ✗'}", ok


def first_missed(rows):
    """The first tenant count with missed polls (median over the
    repetitions), per side and per the other settings (None: never);
    empty when the scenario sweeps no tenant count."""
    firsts = {}
    for v in rows.values():
        for src, runs in v.items():
            vars_ = {k.rsplit(".", 1)[-1]: val for k, val in runs[0]["vars"]}
            if "count" not in vars_:
                return {}
            rest = ", ".join(f"{k}={val}" for k, val in vars_.items() if k != "count")
            f = firsts.setdefault(rest, {"lab": None, "sim": None})
            count = int(vars_["count"])
            if statistics.median(r["missed"] for r in runs) > 0 and (f[src] is None or count < f[src]):
                f[src] = count
    return firsts


def report(results):
    rows = load(results)
    name = os.path.basename(os.path.normpath(results))
    out = [f"### {name}", ""]
    out.append("| setting | runs lab / sim | lab p99 median (spread) | sim p99 | ratio | lab p99.9 median (spread) | sim p99.9 | ratio | missed lab / sim |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    agree = total = 0
    off = []
    for key, v in rows.items():
        lab, sim = v.get("lab", []), v.get("sim", [])
        if not lab or not sim:
            continue
        texts = []
        bad = []
        for p in PERCENTILES:
            text, ok = cell(lab, sim, p)
            texts.append(text if ok is not None else "n/a | n/a | -")
            if ok is not None:
                total += 1
                agree += ok
                if not ok:
                    bad.append(p)
        missed = f"{statistics.median(r['missed'] for r in lab):g} / {statistics.median(r['missed'] for r in sim):g}"
        out.append(f"| {key} | {len(lab)} / {len(sim)} | {texts[0]} | {texts[1]} | {missed} |")
        if bad:
            off.append((key, bad, lab, sim))
    out.append("")
    out.append(f"{agree} of {total} cells agree (simulated median within a factor of 2 of the lab's median, or inside the lab's spread); ✗ marks the others.")
    firsts = first_missed(rows)
    if firsts:
        out.append("")
        out.append("Polls first missed at (tenant count, median over repetitions):")
        for rest, f in firsts.items():
            same = "same" if f["lab"] == f["sim"] else "DIFFERENT"
            out.append(f"- {rest or 'all'}: lab {f['lab'] or 'never'}, sim {f['sim'] or 'never'} ({same})")
    if off:
        out.append("")
        out.append("Cells that disagree, with the scheduler figures of both sides (queued vCPU time that passed while a CPU idled; tenants' run-queue wait, ms per s per tenant; wake-ups queued behind a busy CPU while another idled, and how many of them preempted at once; medians):")
        for key, bad, lab, sim in off:
            def figs(rs):
                s = [r["sched"] for r in rs if r["sched"]]
                if not s:
                    return "no observe.json"
                q = statistics.median(x["queued_while_idle"] for x in s)
                wt = statistics.median(x["wait_ms_per_s"] for x in s)
                text = f"{100 * q:.0f} % queued while a CPU idled, wait {wt:.1f} ms/s"
                w = [x["wakeups"] for x in s if x.get("wakeups") and x["wakeups"].get("wakeups")]
                if w:
                    behind = statistics.median(x["onto_busy_while_idle"] / x["wakeups"] for x in w)
                    pre = statistics.median(
                        x["preempted_at_once"] / x["onto_busy_while_idle"] for x in w if x["onto_busy_while_idle"]
                    ) if any(x["onto_busy_while_idle"] for x in w) else 0.0
                    text += f", {100 * behind:.0f} % of wake-ups behind a busy CPU while one idled ({100 * pre:.0f} % of them preempting at once)"
                return text
            out.append(f"- {key} ({', '.join(bad)}): lab {figs(lab)}; sim {figs(sim)}")
    return "\n".join(out), agree, total


def main():
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    if not args or any(a.startswith("-") for a in args):
        sys.exit(__doc__)
    summary = {}
    all_agree = all_total = 0
    for results in args:
        text, agree, total = report(results)
        summary[os.path.basename(os.path.normpath(results))] = {"agree": agree, "cells": total}
        all_agree += agree
        all_total += total
        if not as_json:
            print(text)
            print()
    if as_json:
        print(json.dumps({"scenarios": summary, "agree": all_agree, "cells": all_total}, indent=2))
    else:
        share = 100 * all_agree / all_total if all_total else 0
        print(f"All: {all_agree} of {all_total} cells agree ({share:.0f} %; target 90 %).")


if __name__ == "__main__":
    main()
