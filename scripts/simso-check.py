#!/usr/bin/env python3
"""ontime's simulator engine against an independent one, SimSo (LAAS-CNRS,
PyPI `simso`): random periodic task sets (UUniFast-discard utilisations,
integer milliseconds) run under global fixed priorities (rate monotonic)
and global EDF on 1 and 2 CPUs by both; every job's completion must be the
same, and so every deadline miss.

    scripts/simso-check.py [--sets 100] [--seed 1] [--ontime target/release/ontime]

Runs under the Python that has SimSo: scripts/setup.sh installs it into
/var/cache/ontime/simso (a virtual environment), and the script re-runs
itself there when the calling Python lacks it. Prints one line per
configuration and a JSON summary last; exits 1 on the first difference,
with the task set that shows it (a TOML file `ontime sim tasks` reads).

Tie-breaking is implementation-defined (SimSo's EDF takes the lowest task
index among equal deadlines, ontime and Linux the earliest queued), so the
sets are built without ties: periods and deadlines are multiples of 10 ms
and task i is first released at i + 1 ms, so no two tasks' absolute
deadlines coincide (distinct residues mod 10), and rate-monotonic
priorities are unique.
"""
import argparse
import contextlib
import io
import json
import os
import random
import subprocess
import sys
import tempfile

VENV = "/var/cache/ontime/simso"
MS = 1_000_000


def ensure_simso():
    try:
        import simso  # noqa: F401
    except ImportError:
        py = os.path.join(VENV, "bin", "python")
        if os.path.exists(py) and os.path.realpath(sys.executable) != os.path.realpath(py):
            os.execv(py, [py] + sys.argv)
        sys.exit(f"simso-check: SimSo is not installed: run scripts/setup.sh (it makes {VENV})")


def uunifast_discard(rng, n, total):
    """Bini and Buttazzo's UUniFast, drawing again while a task exceeds 1."""
    while True:
        us, left = [], total
        for i in range(1, n):
            nxt = left * rng.random() ** (1.0 / (n - i))
            us.append(left - nxt)
            left = nxt
        us.append(left)
        if all(0 < u <= 1 for u in us):
            return us


def task_set(rng, cpus):
    n = rng.randint(2, 5) if cpus == 1 else rng.randint(3, 7)
    total = rng.uniform(0.4 * cpus, 1.05 * cpus)
    tasks = []
    for i, u in enumerate(uunifast_discard(rng, n, total)):
        period = 10 * rng.randint(1, 10)
        wcet = min(period, max(1, round(u * period)))
        # Half the sets constrained deadlines (a multiple of 10 at or above
        # the WCET), the rest implicit.
        deadline = period if rng.random() < 0.5 else 10 * rng.randint(-(-wcet // 10), period // 10)
        tasks.append({"name": f"t{i}", "wcet": wcet, "period": period, "deadline": deadline, "offset": i + 1})
    # Rate monotonic, unique: shorter period first, then lower index.
    ranked = sorted(range(n), key=lambda i: (tasks[i]["period"], i))
    for rank, i in enumerate(ranked):
        tasks[i]["priority"] = n - rank
    return tasks


def toml(tasks):
    out = []
    for t in tasks:
        out.append(
            f'[[task]]\nname = "{t["name"]}"\nwcet = "{t["wcet"]}ms"\nperiod = "{t["period"]}ms"\n'
            f'deadline = "{t["deadline"]}ms"\noffset = "{t["offset"]}ms"\npriority = {t["priority"]}\n'
        )
    return "\n".join(out)


def run_simso(tasks, cpus, sched, horizon_ms):
    from simso.configuration import Configuration
    from simso.core import Model

    c = Configuration()
    c.duration = horizon_ms * c.cycles_per_ms
    for i, t in enumerate(tasks):
        c.add_task(
            name=t["name"], identifier=i + 1, period=t["period"], activation_date=t["offset"],
            wcet=t["wcet"], deadline=t["deadline"], abort_on_miss=False, data={"priority": t["priority"]},
        )
    for p in range(cpus):
        c.add_processor(name=f"cpu{p}", identifier=p + 1)
    c.scheduler_info.clas = {"fp": "simso.schedulers.FP", "edf": "simso.schedulers.EDF"}[sched]
    c.check_all()
    m = Model(c)
    # SimSo 0.8.5's EDF prints every decision.
    with contextlib.redirect_stdout(io.StringIO()):
        m.run_model()
    assert c.cycles_per_ms == MS, "SimSo's cycles are ns only at 1e6 cycles per ms"
    jobs = {}
    for t in m.results.tasks:
        for j in t.jobs:
            release = round(j.activation_date * MS)
            if release >= horizon_ms * MS:
                continue
            end = j.end_date
            jobs[(t.name, release)] = end if end is not None and end < horizon_ms * MS else None
    return jobs


def run_ontime(ontime, set_file, cpus, sched, horizon_ms, tmp):
    csv = os.path.join(tmp, "jobs.csv")
    model = {"fp": "fifo", "edf": "edf"}[sched]
    subprocess.run(
        [ontime, "sim", "tasks", set_file, "--model", model, "--cpus", str(cpus),
         "--horizon", f"{horizon_ms}ms", "--jobs", csv, "--json"],
        check=True, stdout=subprocess.DEVNULL,
    )
    jobs = {}
    with open(csv) as f:
        next(f)
        for line in f:
            name, release, done = line.strip().split(",")
            done = int(done)
            jobs[(name, int(release))] = done if done < horizon_ms * MS else None
    return jobs


def releases(tasks, horizon_ms):
    for t in tasks:
        r = t["offset"]
        while r < horizon_ms:
            yield t, r * MS
            r += t["period"]


def compare(tasks, ours, theirs, horizon_ms):
    """Differences, and the deadline misses each counts."""
    diffs, misses = [], [0, 0]
    for t, release in releases(tasks, horizon_ms):
        key = (t["name"], release)
        a, b = ours.get(key), theirs.get(key)
        if a != b:
            diffs.append(f"{t['name']} released {release / MS:g} ms: ontime {fmt(a)}, SimSo {fmt(b)}")
        deadline = release + t["deadline"] * MS
        for i, done in enumerate((a, b)):
            if (done is None and deadline < horizon_ms * MS) or (done is not None and done > deadline):
                misses[i] += 1
    return diffs, misses


def fmt(ns):
    return "not done" if ns is None else f"done at {ns / MS:g} ms"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=100, help="task sets per CPU count (default 100)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--horizon-ms", type=int, default=1000)
    ap.add_argument("--ontime", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "ontime"))
    a = ap.parse_args()
    ensure_simso()
    if not os.path.exists(a.ontime):
        sys.exit(f"simso-check: no ontime binary at {a.ontime}: cargo build --release, or give --ontime")
    rng = random.Random(a.seed)
    summary = {"sets": 0, "runs": 0, "identical": 0, "jobs": 0, "misses_ontime": 0, "misses_simso": 0,
               "runs_with_misses": 0, "seed": a.seed, "horizon_ms": a.horizon_ms}
    with tempfile.TemporaryDirectory() as tmp:
        for cpus in (1, 2):
            for k in range(a.sets):
                tasks = task_set(rng, cpus)
                set_file = os.path.join(tmp, "set.toml")
                with open(set_file, "w") as f:
                    f.write(toml(tasks))
                summary["sets"] += 1
                for sched in ("fp", "edf"):
                    ours = run_ontime(a.ontime, set_file, cpus, sched, a.horizon_ms, tmp)
                    theirs = run_simso(tasks, cpus, sched, a.horizon_ms)
                    diffs, misses = compare(tasks, ours, theirs, a.horizon_ms)
                    summary["runs"] += 1
                    summary["jobs"] += sum(1 for _ in releases(tasks, a.horizon_ms))
                    summary["misses_ontime"] += misses[0]
                    summary["misses_simso"] += misses[1]
                    summary["runs_with_misses"] += misses[1] > 0
                    u = sum(t["wcet"] / t["period"] for t in tasks)
                    if diffs:
                        keep = os.path.abspath(f"simso-check-{cpus}cpu-{sched}-set{k}.toml")
                        with open(keep, "w") as f:
                            f.write(toml(tasks))
                        print(f"simso-check: {cpus} CPU(s) {sched} set {k} (U = {u:.2f}) DIFFERS in {len(diffs)} job(s):")
                        for d in diffs[:10]:
                            print(f"  {d}")
                        print(f"  the set: {keep} (ontime sim tasks {keep} --model "
                              f"{'fifo' if sched == 'fp' else 'edf'} --cpus {cpus} --horizon {a.horizon_ms}ms --jobs j.csv)")
                        print(json.dumps(summary))
                        sys.exit(1)
                    summary["identical"] += 1
            print(f"simso-check: {cpus} CPU(s): {a.sets} sets under fp and edf, every job identical")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
