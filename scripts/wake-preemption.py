#!/usr/bin/env python3
"""Of the wake-ups the kernel queued behind a busy CPU while another CPU
idled (observe's `onto_busy_while_idle`), how the woken thread got that
CPU: by preempting the occupant (it was still runnable when switched out,
F_PREV_RUNNABLE), because the occupant went to sleep (the waker blocking
right after a sync wake-up), or by moving; and how long it waited. Per
pair (woken comm <- occupant comm). Then how long preempted threads
waited, and where the tracked threads' run-queue wait comes from (how it
began, who held the CPU, whether another CPU idled). Reads ontime
recordings (.otrec).

    scripts/wake-preemption.py results/doc-000-tenants/runs/000-*/observe.otrec
"""
import json
import struct
import sys
from collections import defaultdict

KIND_SWITCH, KIND_WAKEUP = 1, 2
F_PREV_RUNNABLE = 1
AT_ONCE_NS = 50_000


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"OTREC\0":
        raise SystemExit(f"{path}: not an ontime recording")
    off, events, threads = 8, [], {}
    while off + 8 <= len(data):
        kind, n = struct.unpack_from("<II", data, off)
        body = data[off + 8 : off + 8 + n]
        off += 8 + n
        if kind == 2:
            events.extend(struct.iter_unpack("<QIIIHBB", body[: len(body) // 24 * 24]))
        elif kind == 3:
            for t in json.loads(body):
                threads[t["tid"]] = t
    events.sort(key=lambda e: e[0])
    return events, threads


def name(threads, tid):
    """A thread's role: the lab's relay is "ontime-relay0", the
    simulator's "relay"; untracked threads are "other"."""
    if tid == 0:
        return "idle"
    t = threads.get(tid)
    if not t or t.get("group") is None:
        return "other"
    comm = t.get("comm") or "tracked"
    return "relay" if "relay" in comm else comm


def analyse(path, pairs):
    events, threads = read(path)
    occupant = {}
    pending = {}  # woken tid -> (t, cpu, occupant)
    for ts, a, b, c, cpu, kind, flags in events:
        if kind == KIND_SWITCH:
            prev, nxt = a, b
            w = pending.pop(nxt, None)
            if w:
                t0, wcpu, occ = w
                key = (name(threads, nxt), name(threads, occ))
                d = pairs[key]
                wait = ts - t0
                if cpu != wcpu:
                    d["moved"] += 1
                elif prev == occ and flags & F_PREV_RUNNABLE:
                    d["preempted" if wait <= AT_ONCE_NS else "preempted_late"] += 1
                    d["waits"].append(wait)
                elif prev == occ:
                    d["occupant_slept" if wait <= AT_ONCE_NS else "occupant_slept_late"] += 1
                    d["waits"].append(wait)
                else:
                    d["other"] += 1
                    d["waits"].append(wait)
            occupant[cpu] = nxt
        elif kind == KIND_WAKEUP:
            tid, tcpu = a, c
            if tid not in threads:
                continue
            occ = occupant.get(tcpu)
            if occ is None or occ == 0:
                continue
            if not any(o == 0 for cc, o in occupant.items() if cc != tcpu):
                continue
            pending[tid] = (ts, tcpu, occ)


def main():
    if not sys.argv[1:]:
        sys.exit(__doc__)
    pairs = defaultdict(lambda: defaultdict(int) | {"waits": []})
    for p in sys.argv[1:]:
        analyse(p, pairs)
    cols = ("preempted", "preempted_late", "occupant_slept", "occupant_slept_late", "moved", "other")
    print("woken <- occupant | " + " | ".join(cols) + " | wait p50 / p99 us")
    for key, d in sorted(pairs.items(), key=lambda kv: -sum(v for k, v in kv[1].items() if k != "waits")):
        if "other" in key:
            continue
        w = sorted(d["waits"])
        q = lambda p: w[min(len(w) - 1, int(p * len(w)))] / 1e3 if w else 0
        print(f"{key[0]} <- {key[1]} | " + " | ".join(str(d[c]) for c in cols) + f" | {q(0.5):.0f} / {q(0.99):.0f}")
    print()
    preempted_waits(sys.argv[1:])
    print()
    queue_waits(sys.argv[1:])



def preempted_waits(paths):
    """Tracked threads switched out still runnable (preempted): how long
    until they run again, per (preempted <- preemptor, where it ran next)."""
    out = defaultdict(list)
    for path in paths:
        events, threads = read(path)
        out_since = {}
        for ts, a, b, c, cpu, kind, flags in events:
            if kind != KIND_SWITCH:
                continue
            prev, nxt = a, b
            if nxt in out_since:
                t0, by, pcpu = out_since.pop(nxt)
                out[(name(threads, nxt), name(threads, by), "same" if pcpu == cpu else "moved")].append(ts - t0)
            if prev in threads and flags & F_PREV_RUNNABLE:
                out_since[prev] = (ts, nxt, cpu)
    print("preempted <- by (where it ran next) | count | wait p50 / p90 / p99 / max us")
    for key, w in sorted(out.items(), key=lambda kv: -len(kv[1])):
        if "other" in key[:2]:
            continue
        w.sort()
        q = lambda p: w[min(len(w) - 1, int(p * len(w)))] / 1e3
        print(f"{key[0]} <- {key[1]} ({key[2]}) | {len(w)} | {q(0.5):.0f} / {q(0.9):.0f} / {q(0.99):.0f} / {w[-1] / 1e3:.0f}")

def occupant_name(threads, tid):
    """Any thread the recording names (untracked ones too, by comm)."""
    if tid == 0:
        return "idle"
    t = threads.get(tid)
    if t and t.get("group") is None and t.get("comm") and not t["comm"].startswith("tid "):
        return t["comm"]
    return name(threads, tid)


def queue_waits(paths):
    """Where the tracked threads' run-queue wait comes from: ms per second
    per thread, by how the wait began (woken onto a busy CPU, or
    preempted), who held the CPU then, whether another CPU idled at that
    moment and whether the thread ran next on another CPU."""
    total = defaultdict(lambda: [0, 0])
    seconds = defaultdict(float)
    for path in paths:
        events, threads = read(path)
        if not events:
            continue
        cpus = 1 + max(e[4] for e in events)
        tracked = {t for t, v in threads.items() if v.get("group") is not None}
        span = (events[-1][0] - events[0][0]) / 1e9
        for t in tracked:
            seconds[name(threads, t)] += span
        occupant, since = {}, {}

        def idle_elsewhere(cpu):
            return any(occupant.get(c, 0) == 0 for c in range(cpus) if c != cpu)

        for ts, a, b, c, cpu, kind, flags in events:
            if kind == KIND_SWITCH:
                prev, nxt = a, b
                if nxt in since:
                    t0, how, wcpu, occ, idle = since.pop(nxt)
                    key = (name(threads, nxt), how, occupant_name(threads, occ), idle, wcpu != cpu)
                    total[key][0] += ts - t0
                    total[key][1] += 1
                if prev in tracked and flags & F_PREV_RUNNABLE:
                    since[prev] = (ts, "preempted", cpu, nxt, idle_elsewhere(cpu))
                occupant[cpu] = nxt
            elif kind == KIND_WAKEUP and a in tracked:
                occ = occupant.get(c, 0)
                if occ != 0:
                    since[a] = (ts, "woken", c, occ, idle_elsewhere(c))
    print("waiting | began | CPU held by | another CPU idle | ran next elsewhere | ms/s per thread | count | mean us")
    for key, (ns, n) in sorted(total.items(), key=lambda kv: -kv[1][0])[:20]:
        if key[0] == "other":
            continue
        per = ns / 1e6 / max(seconds[key[0]], 1e-9)
        print(f"{key[0]} | {key[1]} | {key[2]} | {'yes' if key[3] else 'no'} | {'yes' if key[4] else 'no'} | {per:.2f} | {n} | {ns / n / 1e3:.0f}")


if __name__ == "__main__":
    main()
