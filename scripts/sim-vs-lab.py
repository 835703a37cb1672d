#!/usr/bin/env python3
"""Measured vs simulated runs of lab results directories, as Markdown: per
setting, the worst tenant's interval error p99 and p99.9 over the lab's
repetitions (median and spread) and the simulator's (`ontime sim SCENARIO
--into RESULTS`, one simulated run per measured one), whether the
simulated median agrees, missed polls, and for every cell that disagrees
the scheduler figures of both sides (observe's work conservation: vCPU
time queued while a CPU idled, the tenants' run-queue wait per second, and
where waking threads were queued: the share of wake-ups put behind a busy
CPU while another idled, and of those the shares that preempted at once
and that took the CPU from their waker as it went to sleep).
Lab runs analysed before session 21 get them from their
recording (`ontime observe report --json`, cached as wakeups.json beside
it; ONTIME names the binary, default target/release/ontime).

A cell agrees when the simulated median lies within a factor of 2 of the
lab's median or inside the lab's spread (its smallest to largest
repetition), issue 24's rule.

    scripts/sim-vs-lab.py results/doc-000-tenants [results/plan-proof ...]
    scripts/sim-vs-lab.py --json results/...     # the counts, machine-readable

The lab runs behind the published table are committed, without their
scheduler recordings (observe.otrec) and with their histogram logs cut to
their headers, as docs/results/sim/lab-runs.tar.xz, so a fresh clone
reproduces the table without the lab's hour:

    scripts/sim-vs-lab.py --reference [--json] [--seed N]   # issue 24's table
    scripts/sim-vs-lab.py --reference s21    # one session's runs (s25, s28 too)
    scripts/sim-vs-lab.py --reference c31    # doc-000-clock: bursts on the second
    scripts/sim-vs-lab.py --reference t31    # session 31's doc-000-tenants alone
    scripts/sim-vs-lab.py --lab-vs-lab s21 s25      # the lab against itself
    scripts/sim-vs-lab.py --pack OUT.tar.xz results/doc-000-tenants ...
    scripts/sim-vs-lab.py --reference --report DIR   # and the figures

--report DIR also writes `ontime lab report` of each scenario, measured
and simulated runs together, into DIR/NAME (report.html and the PNGs;
the "Simulated vs measured" figures show the table's medians and
spreads; docs/results/sim/*.png are these).

--reference alone unpacks the lab runs of sessions 21, 25 and 28 (nine
runs per setting on three VMs of one kind: the lab's spread as issue 24
asks it known, where one session's three runs differ from another
session's in a quarter of the cells), each simulated with its own
session's calibration, into a temporary directory; --reference s21 takes
one session's (names joined by commas pool), simulates
every scenario in it from scenarios/NAME.toml beside the measured runs
(`ontime sim ... --calibration CALIBRATION --into`, the session's own:
the tenants start as measured and get the real-time budget the run
recorded; session 21's runs predate that record, so it is given as
`--tenant-rt-budget 900ms`, what the lab set on that host) and prints
the table; nothing is written into the repository. --lab-vs-lab puts
the second session's lab runs where the simulator's would be.
"""
import glob
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

ONTIME = os.environ.get("ONTIME") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "ontime")

PERCENTILES = ("p99", "p99.9")

# The name of the second column: the simulator, or (--lab-vs-lab) a later
# session's lab runs judged by the same rule.
SECOND = "sim"

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SIM_RESULTS = os.path.join(REPO, "docs", "results", "sim")
REFERENCE = os.path.join(SIM_RESULTS, "lab-runs.tar.xz")
CALIBRATION = os.path.join(SIM_RESULTS, "calibration.json")
# Each session's lab runs of the scenarios behind the table, the
# calibration fitted from that session's doc-000-tenants runs (the VM
# under the lab differed: session 25's had ~1.7x the kernel path costs),
# and the real-time budget its lab gave the tenants' cgroups when its runs
# do not record it: session 21's host had RT group scheduling (cgroup v1
# with cpu.rt_runtime_us, CONFIG_RT_GROUP_SCHED=y), so `ontime lab` gave
# the tenants 900 ms of real-time time per second between them, and its
# runs predate run.json's environment.tenant_rt_runtime_us, which
# `ontime sim --into` reads.
REFERENCE_PACKS = {
    "s21": (REFERENCE, CALIBRATION, "900ms"),
    "s25": (os.path.join(SIM_RESULTS, "lab-runs-s25.tar.xz"), os.path.join(SIM_RESULTS, "calibration-s25.json"), None),
    "s28": (os.path.join(SIM_RESULTS, "lab-runs-s28.tar.xz"), os.path.join(SIM_RESULTS, "calibration-s28.json"), None),
    # Session 31's doc-000-clock runs (crawlers bursting on the second, not
    # one of the four scenarios of the target), simulated with the
    # calibration fitted from the same VM's doc-000-tenants runs (t31): a
    # burst's send lag is not the host's noise, so bursting runs cannot be
    # calibrated from themselves.
    "c31": (os.path.join(SIM_RESULTS, "lab-runs-clock-s31.tar.xz"), os.path.join(SIM_RESULTS, "calibration-s31.json"), None),
    "t31": (os.path.join(SIM_RESULTS, "lab-runs-tenants-s31.tar.xz"), os.path.join(SIM_RESULTS, "calibration-s31.json"), None),
}
# Issue 24's basis: the three sessions that ran the four scenarios, pooled.
DEFAULT_REFERENCE = ("s21", "s25", "s28")
# What the table and `ontime sim --into` read of a lab run, besides the
# tenants' results and the headers of their histogram logs (whose start
# times place the simulated tenants as the measured ones started); the
# recordings and the histograms over time stay out.
PACKED = ("run.json", "observe.json", "wakeups.json", "relay.json", "gateway.json")


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
    # Per vCPU thread and second: how often it waited for a CPU (each wait
    # a preemption or a wake-up behind another) and ran on another CPU
    # than the last (observe.json has `migrations` since session 32).
    vcpus = [t for g in tenants for t in g.get("threads", []) if t.get("vcpu")]
    per_s = lambda k: statistics.median(t[k] for t in vcpus) / max(duration_s, 1e-9) if vcpus and all(k in t for t in vcpus) else None
    return {
        "queued_while_idle": idle_share,
        "wait_ms_per_s": wait,
        "wakeups": wakeups(run_dir, wc),
        "vcpu_waits_per_s": per_s("waits"),
        "vcpu_migrations_per_s": per_s("migrations"),
    }


def wakeups(run_dir, wc):
    """The wake-up placement counts of a run: from its recording analysed
    again (cached as wakeups.json) unless its observe.json already tells a
    preemption from a sleeping waker (`occupant_slept_at_once`, session
    21) and counts the wake-ups pulled to the waker's CPU (session 33);
    else what observe.json has."""
    w = wc.get("wakeups")
    cache = os.path.join(run_dir, "wakeups.json")
    rec = os.path.join(run_dir, "observe.otrec")
    if os.path.exists(cache):
        with open(cache) as fh:
            return json.load(fh)
    if w and "occupant_slept_at_once" in w and ("waker_elsewhere_both_busy" in w or not os.path.exists(rec)):
        return w
    if not os.path.exists(rec) or not os.path.exists(ONTIME):
        return w
    p = subprocess.run([ONTIME, "observe", "report", "--json", rec], capture_output=True, text=True)
    if p.returncode != 0:
        return w
    w = (json.loads(p.stdout).get("work_conservation") or {}).get("wakeups")
    if w:
        with open(cache, "w") as fh:
            json.dump(w, fh)
    return w


def key_of(rec):
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in rec["vars"])


def records(results):
    """(run directory, run record) of every run under `results`, measured
    or simulated; measured runs that did not complete are left out."""
    for d in sorted(glob.glob(os.path.join(results, "runs", "*"))):
        f = os.path.join(d, "run.json")
        if not os.path.exists(f):
            continue
        with open(f) as fh:
            rec = json.load(fh)
        if not rec.get("simulated") and not rec.get("complete", True):
            continue
        yield d, rec


def load(results):
    """Per setting, per side ('lab' or 'sim'), one entry per run."""
    rows = {}
    for d, rec in records(results):
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
    out.append(f"| setting | runs lab / {SECOND} | lab p99 median (spread) | {SECOND} p99 | ratio | lab p99.9 median (spread) | {SECOND} p99.9 | ratio | missed lab / {SECOND} |")
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
            out.append(f"- {rest or 'all'}: lab {f['lab'] or 'never'}, {SECOND} {f['sim'] or 'never'} ({same})")
    if off:
        out.append("")
        out.append("Cells that disagree, with the scheduler figures of both sides (queued vCPU time that passed while a CPU idled; tenants' run-queue wait, ms per s per tenant; a vCPU thread's waits for a CPU and moves between CPUs per second, where recorded; wake-ups queued behind a busy CPU while another idled, and how many of them preempted at once or took the CPU from their waker as it slept; where recorded, of the wake-ups by another busy CPU than the woken thread's busy last one, the share queued on the waker's CPU; medians):")
        for key, bad, lab, sim in off:
            def figs(rs):
                s = [r["sched"] for r in rs if r["sched"]]
                if not s:
                    return "no observe.json"
                q = statistics.median(x["queued_while_idle"] for x in s)
                wt = statistics.median(x["wait_ms_per_s"] for x in s)
                text = f"{100 * q:.0f} % queued while a CPU idled, wait {wt:.1f} ms/s"
                for k, what in (("vcpu_waits_per_s", "waits"), ("vcpu_migrations_per_s", "moves between CPUs")):
                    v = [x[k] for x in s if x.get(k) is not None]
                    if v:
                        text += f", {statistics.median(v):.1f} {what} per vCPU and s"
                w = [x["wakeups"] for x in s if x.get("wakeups") and x["wakeups"].get("wakeups")]
                if w:
                    behind = statistics.median(x["onto_busy_while_idle"] / x["wakeups"] for x in w)
                    queued = [x for x in w if x["onto_busy_while_idle"]]
                    pre = statistics.median(x["preempted_at_once"] / x["onto_busy_while_idle"] for x in queued) if queued else 0.0
                    slept = statistics.median(x.get("occupant_slept_at_once", 0) / x["onto_busy_while_idle"] for x in queued) if queued else 0.0
                    text += f", {100 * behind:.0f} % of wake-ups behind a busy CPU while one idled ({100 * pre:.0f} % of them preempting at once, {100 * slept:.0f} % taking it from a waker going to sleep)"
                    pulled = [x["pulled_to_waker"] / x["waker_elsewhere_both_busy"] for x in w if x.get("waker_elsewhere_both_busy")]
                    if pulled:
                        text += f", {100 * statistics.median(pulled):.0f} % of wake-ups from another busy CPU pulled to the waker's"
                return text
            out.append(f"- {key} ({', '.join(bad)}): lab {figs(lab)}; {SECOND} {figs(sim)}")
    return "\n".join(out), agree, total


def add_header(tar, path, arcname):
    """A histogram log cut to its header: only its start time is read
    here (it places the simulated tenants), and the per-interval
    histograms would be most of the pack's size."""
    with open(path, "rb") as fh:
        head = b"".join(line for line in fh if line.startswith(b"#"))
    info = tarfile.TarInfo(arcname)
    info.size = len(head)
    info.mtime = int(os.path.getmtime(path))
    tar.addfile(info, io.BytesIO(head))


def pack(out, dirs):
    """The lab runs of `dirs` (no simulated runs, no recordings) as one
    tar.xz; each results directory under its own name."""
    tmp = out + ".tmp"
    n = 0
    with tarfile.open(tmp, "w:xz") as tar:
        for results in dirs:
            name = os.path.basename(os.path.normpath(results))
            for f in ("scenario.toml", "plan.json"):
                tar.add(os.path.join(results, f), arcname=f"{name}/{f}")
            for d, rec in records(results):
                if rec.get("simulated"):
                    continue
                base = f"{name}/runs/{os.path.basename(d)}"
                # The wake-up counts as this ontime analyses them, while
                # the recording is still at hand.
                scheduler_figures(d)
                for f in sorted(os.listdir(d)):
                    if f.startswith("t") and f.endswith(".hlog"):
                        add_header(tar, os.path.join(d, f), f"{base}/{f}")
                    elif f in PACKED or (f.startswith("t") and f.endswith(".json") and not f.endswith(".probe.json")):
                        tar.add(os.path.join(d, f), arcname=f"{base}/{f}")
                n += 1
    os.replace(tmp, out)
    print(f"{out}: {n} lab runs of {len(dirs)} scenario(s), {os.path.getsize(out) / 1e6:.1f} MB", file=sys.stderr)


def unpack(tar_path, into):
    """Unpacks a lab-run pack into `into`: a results directory per
    scenario."""
    with tarfile.open(tar_path) as tar:
        # The data filter (no links out, no devices) where Python has it.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)


def scenarios_in(d):
    return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n)) and not n.startswith("."))


def pool(parts, into, as_simulated=()):
    """Moves the runs of every results directory tree in `parts` into one
    tree `into`, a results directory per scenario; the runs of every part
    after the first get its number as a prefix (`r2-000-...`), and the
    measured runs of the parts in `as_simulated` (indices) are marked
    simulated (--lab-vs-lab)."""
    for i, part in enumerate(parts):
        for name in scenarios_in(part):
            dest = os.path.join(into, name)
            os.makedirs(os.path.join(dest, "runs"), exist_ok=True)
            for f in ("scenario.toml", "plan.json"):
                if not os.path.exists(os.path.join(dest, f)):
                    shutil.copy(os.path.join(part, name, f), dest)
            for run in sorted(os.listdir(os.path.join(part, name, "runs"))):
                to = os.path.join(dest, "runs", (f"r{i + 1}-" if i else "") + run)
                shutil.move(os.path.join(part, name, "runs", run), to)
                if i in as_simulated:
                    rec_path = os.path.join(to, "run.json")
                    with open(rec_path) as fh:
                        rec = json.load(fh)
                    rec["simulated"] = True
                    with open(rec_path, "w") as fh:
                        json.dump(rec, fh)


def simulate_beside(results, name, calibration, rt_budget, seed):
    """`ontime sim scenarios/NAME.toml --into RESULTS` with the host's
    calibration (and the real-time budget its lab gave the tenants, when
    the runs do not record it)."""
    scenario = os.path.join(REPO, "scenarios", name + ".toml")
    if not os.path.exists(scenario):
        sys.exit(f"sim-vs-lab: the packed runs of '{name}' have no scenarios/{name}.toml")
    print(f"sim-vs-lab: simulating {name} ({os.path.basename(calibration)})", file=sys.stderr)
    p = subprocess.run(
        [ONTIME, "sim", scenario, "--calibration", calibration, "--into", results]
        + (["--tenant-rt-budget", rt_budget] if rt_budget else [])
        + (["--seed", str(seed)] if seed is not None else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if p.returncode != 0:
        sys.exit(f"sim-vs-lab: ontime sim {name} failed:\n{p.stderr}")


def pooled(tars, prefix, each_part=None, as_simulated=()):
    """Unpacks each lab-run pack in `tars` into a temporary directory,
    calls `each_part(i, part)` on each unpacked tree, and pools them (see
    `pool`); returns (tmpdir, results dirs). The directory is removed if
    anything fails."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        parts = []
        for i, tar_path in enumerate(tars):
            part = os.path.join(tmp, f".part{i}")
            unpack(tar_path, part)
            if each_part:
                each_part(i, part)
            parts.append(part)
        pool(parts, tmp, as_simulated)
    except BaseException:
        shutil.rmtree(tmp)
        raise
    return tmp, [os.path.join(tmp, n) for n in scenarios_in(tmp)]


def from_reference(packs, seed=None):
    """The committed lab runs (one session's pack, or several pooled),
    each scenario simulated beside each session's runs with that
    session's calibration (with `--seed` when given)."""
    if not os.path.exists(ONTIME):
        sys.exit(f"sim-vs-lab: {ONTIME} is missing: build ontime first (cargo build --release)")

    def simulate(i, part):
        _, calibration, rt_budget = packs[i]
        for name in scenarios_in(part):
            simulate_beside(os.path.join(part, name), name, calibration, rt_budget, seed)

    return pooled([p[0] for p in packs], "ontime-sim-vs-lab-", simulate)


def lab_vs_lab(earlier, later):
    """The later session's lab runs in the second column, judged against
    the earlier session's by the same rule."""
    global SECOND
    SECOND = "later lab"
    return pooled((earlier, later), "ontime-lab-vs-lab-", as_simulated=(1,))


def take_option(args, name, what):
    """Removes `name VALUE` from args and returns VALUE (None when absent)."""
    if name not in args:
        return None
    i = args.index(name)
    if i + 1 >= len(args):
        sys.exit(f"sim-vs-lab: {name} takes {what}")
    value = args[i + 1]
    del args[i : i + 2]
    return value


def main():
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    seed = take_option(args, "--seed", "the simulator's seed; default 1")
    if seed is not None and not seed.isdigit():
        sys.exit("sim-vs-lab: --seed takes a whole number (the simulator's seed; default 1)")
    seed = None if seed is None else int(seed)
    report_dir = take_option(args, "--report", "a directory to write the reports into")
    if args[:1] == ["--pack"]:
        if len(args) < 3:
            sys.exit(__doc__)
        pack(args[1], args[2:])
        return
    tmp = None
    if args[:1] == ["--lab-vs-lab"]:
        if len(args) != 3:
            sys.exit(__doc__)
        packs = [REFERENCE_PACKS.get(a, (a,))[0] for a in args[1:]]
        tmp, args = lab_vs_lab(*packs)
    elif args[:1] == ["--reference"]:
        names = args[1].split(",") if len(args) > 1 else DEFAULT_REFERENCE
        packs = []
        for n in names:
            if n not in REFERENCE_PACKS:
                sys.exit(f"sim-vs-lab: --reference takes {', '.join(REFERENCE_PACKS)} or several joined by commas, not '{n}'")
            packs.append(REFERENCE_PACKS[n])
        tmp, args = from_reference(packs, seed)
    if not args or any(a.startswith("-") for a in args):
        sys.exit(__doc__)
    try:
        compare(args, as_json)
        if report_dir:
            write_reports(args, report_dir)
    finally:
        if tmp:
            shutil.rmtree(tmp)


def write_reports(results_dirs, into):
    """`ontime lab report` of each results directory into INTO/NAME."""
    for results in results_dirs:
        out = os.path.join(into, os.path.basename(os.path.normpath(results)))
        p = subprocess.run([ONTIME, "lab", "report", results, "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            sys.exit(f"sim-vs-lab: ontime lab report {results} failed:\n{p.stderr}")
        print(f"sim-vs-lab: wrote {out}/report.html", file=sys.stderr)


def compare(args, as_json):
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
        # One decimal: 70 of 78 is 89.7 %, short of the target, not "90 %".
        verdict = "met" if all_total and all_agree * 10 >= all_total * 9 else "not met"
        print(f"All: {all_agree} of {all_total} cells agree ({share:.1f} %; target 90 %: {verdict}).")


if __name__ == "__main__":
    main()
