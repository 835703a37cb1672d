"""The raw result every bench/*.py script writes (schema ontime-bench/1).

A script drives the tools and keeps what they measured, per table (a
condition: a load, a rate, a mode), tool and round: plain values and
histograms. It computes no figure a claim rests on: rates and shares
(value(key, per=..., scale=...)), medians, ranges, percentiles of
histograms, ratios and target verdicts are computed by
`ontime bench report FILE` (crates/report/src/bench.rs holds
the schema, typed). Use:

    res = BenchResult("cyclic_vs_cyclictest", "ontime cyclic vs cyclictest", sys.argv)
    res.metric("p99.99", "us", quantile("latency", 0.9999))
    res.metric("CPU", "%", value("cpu_s", per="seconds", scale=100))  # raw terms, the report divides
    res.round("idle", "ontime", values={"cpu_s": 0.24, "seconds": 20}, histograms={"latency": hist})
    res.ratio("p99.99", "ontime", "cyclictest")
    res.target("ontime p99.99 <= 1.05 x cyclictest", ratio_of("p99.99", "ontime", "cyclictest"), at_most=1.05)
    res.write(args.out)   # and prints it on stdout
"""
import datetime
import json
import math
import os
import shlex
import subprocess
import sys

SCHEMA = "ontime-bench/1"


def value(key, minus=None, per=None, scale=1.0):
    """(values[key] - values[minus]) * scale / values[per] of each round, the
    optional parts where given; the cell: median (min-max) over the rounds."""
    v = {"from": "value", "key": key, "scale": float(scale)}
    if minus is not None:
        v["minus"] = minus
    if per is not None:
        v["per"] = per
    return v


def over(key, baseline, scale=1.0, relative=False, plus=None, per=None):
    """What a row adds over the table's `baseline` row, round by round:
    (values[key] - baseline's) * scale, each side first divided by its own
    values[per] where given (rows that ran for different lengths), /
    baseline's when relative, + the same round's value of the metric named
    `plus` (a value() metric)."""
    v = {"from": "over", "key": key, "baseline": baseline, "scale": float(scale), "relative": bool(relative)}
    if plus is not None:
        v["plus"] = plus
    if per is not None:
        v["per"] = per
    return v


def quantile(histogram, q, or_value=None):
    """Quantile q of the rounds' pooled histograms; a row without the
    histogram uses its own figure values[or_value] (a tool that computes
    the quantile itself from all its samples, e.g. `ontime crawl --json`)."""
    v = {"from": "quantile", "histogram": histogram, "q": q}
    if or_value is not None:
        v["or_value"] = or_value
    return v


def count(histogram):
    return {"from": "count", "histogram": histogram}


def maximum(histogram, or_value=None):
    """The largest sample of the pooled histograms; a row without them uses values[or_value]."""
    v = {"from": "max", "histogram": histogram}
    if or_value is not None:
        v["or_value"] = or_value
    return v


def ratio_of(metric, ours, peer):
    return {"on": "ratio", "metric": metric, "ours": ours, "peer": peer}


def value_of(tool, metric):
    return {"on": "value", "tool": tool, "metric": metric}


def histogram(bins, bin_width=1.0, overflow=0, unbounded=0, max_value=None):
    """bins: a list of counts per bin (dense) or a dict {bin index: count}."""
    if isinstance(bins, dict):
        items = sorted((int(i), int(c)) for i, c in bins.items() if c)
    else:
        items = [(i, int(c)) for i, c in enumerate(bins) if c]
    h = {"bin_width": float(bin_width), "bins": [[i, c] for i, c in items],
         "overflow": int(overflow), "unbounded": int(unbounded)}
    if max_value is not None:
        h["max"] = float(max_value)
    return h


def histogram_of(samples, bin_width=1.0, unbounded=0):
    """Bins raw samples (in the metric's unit) of a tool that gives no histogram."""
    bins = {}
    top = None
    for s in samples:
        i = int(s // bin_width) if s > 0 else 0
        bins[i] = bins.get(i, 0) + 1
        top = s if top is None else max(top, s)
    return histogram(bins, bin_width, 0, unbounded, top)


def _sched_pipe_us():
    try:
        out = subprocess.run(["perf", "bench", "sched", "pipe", "-l", "50000"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.stdout.splitlines():
        if "usecs/op" in line:
            try:
                return float(line.split()[0])
            except ValueError:
                return None
    return None


def children_cpu_s():
    """User + system seconds of the script's waited-for children so far
    (a child's own children included once it has waited for them)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_json(cmd, cwd=None):
    """Runs a command that prints JSON; returns (wall seconds from start to
    exit on time.monotonic, the parsed output)."""
    import time
    t0 = time.monotonic()
    out = subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, cwd=cwd).stdout
    return time.monotonic() - t0, json.loads(out)


class BenchResult:
    def __init__(self, bench, title, argv):
        """argv: sys.argv of the script, kept as the command that made the file."""
        script = os.path.relpath(os.path.abspath(argv[0]), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open("/proc/loadavg") as f:
            load = float(f.read().split()[0])
        self.doc = {
            "schema": SCHEMA,
            "bench": bench,
            "title": title,
            "command": " ".join(["sudo", script] + [shlex.quote(a) for a in argv[1:]]),
            "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "host": {"kernel": os.uname().release, "cpus": os.cpu_count() or 0, "load_before": load,
                     "sched_pipe_us": _sched_pipe_us()},
            "metrics": [],
            "tables": [],
            "ratios": [],
            "targets": [],
            "method": [],
        }

    def metric(self, name, unit, source):
        self.doc["metrics"].append({"name": name, "unit": unit, "source": source})

    def method(self, sentence):
        self.doc["method"].append(sentence)

    def round(self, table, tool, values=None, histograms=None):
        """Appends one round of `tool` in `table` (created in first-use order)."""
        t = self.round_table(table)
        row = next((r for r in t["rows"] if r["tool"] == tool), None)
        if row is None:
            row = {"tool": tool, "rounds": []}
            t["rows"].append(row)
        # JSON has no NaN or infinity: a value a tool did not give is null.
        clean = {k: (None if v is None or not math.isfinite(float(v)) else float(v)) for k, v in (values or {}).items()}
        row["rounds"].append({"values": clean, "histograms": histograms or {}})

    def not_alternated(self, table):
        """Marks a table whose rows ran one after another, not in turn: its
        rows then compare by their medians, not round by round."""
        self.round_table(table)["alternated"] = False

    def round_table(self, table):
        t = next((t for t in self.doc["tables"] if t["name"] == table), None)
        if t is None:
            t = {"name": table, "alternated": True, "rows": []}
            self.doc["tables"].append(t)
        return t

    def ratio(self, metric, ours, peer):
        self.doc["ratios"].append({"metric": metric, "ours": ours, "peer": peer})

    def target(self, name, judged, at_most=None, at_least=None, table=None):
        t = {"name": name, "judged": judged}
        if at_most is not None:
            t["at_most"] = at_most
        if at_least is not None:
            t["at_least"] = at_least
        if table is not None:
            t["table"] = table
        self.doc["targets"].append(t)

    def write(self, path):
        """Writes the result to `path` (whole or not at all) and prints it on stdout."""
        text = json.dumps(self.doc, indent=1, allow_nan=False)
        if path:
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.write(text + "\n")
            os.replace(tmp, path)
            print(f"bench: wrote {path}; `ontime bench report {path}` prints its tables",
                  file=sys.stderr)
        print(text)
