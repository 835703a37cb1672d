#!/usr/bin/env python3
"""Decodes a Perfetto trace with Perfetto's own definitions (the PyPI
perfetto package's compiled perfetto_trace.proto) and prints what it holds
as JSON: the scheduling events per kind and CPU, the threads named, the
track descriptors and the late-event slices. Fails on a field Perfetto's
definitions do not know (an encoding error of ours). Used by
crates/cli/tests/explain.rs; run with /var/cache/ontime/perfetto/bin/python.
"""
import json
import sys

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace


def unknown(msg, path="Trace"):
    """Paths of fields the definitions do not know, anywhere in msg."""
    found = [path] if len(unknown_fields.UnknownFieldSet(msg)) else []
    for field, value in msg.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        values = value if repeated else [value]
        for i, v in enumerate(values):
            found.extend(unknown(v, f"{path}.{field.name}[{i}]"))
    return found


def main():
    trace = Trace()
    with open(sys.argv[1], "rb") as f:
        trace.ParseFromString(f.read())
    bad = unknown(trace)
    if bad:
        sys.exit(f"perfetto-check: fields Perfetto does not define: {bad[:5]}")
    out = {"switches": 0, "wakings": 0, "cpus": [], "threads": {}, "tracks": [], "slices": [], "kernel": None}
    cpus = set()
    open_slices = {}
    for p in trace.packet:
        if p.HasField("system_info"):
            out["kernel"] = p.system_info.utsname.release
        if p.HasField("process_tree"):
            for t in p.process_tree.threads:
                out["threads"][str(t.tid)] = {"name": t.name, "tgid": t.tgid}
        if p.HasField("ftrace_events"):
            cpus.add(p.ftrace_events.cpu)
            for e in p.ftrace_events.event:
                if e.HasField("sched_switch"):
                    out["switches"] += 1
                elif e.HasField("sched_waking"):
                    out["wakings"] += 1
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            out["tracks"].append({"uuid": d.uuid, "parent": d.parent_uuid, "name": d.name,
                                  "tid": d.thread.tid if d.HasField("thread") else None})
        if p.HasField("track_event"):
            if not p.trusted_packet_sequence_id:
                sys.exit("perfetto-check: a track event without a packet sequence")
            t = p.track_event
            if t.type == t.TYPE_SLICE_BEGIN:
                open_slices[t.track_uuid] = (p.timestamp, t.name)
            elif t.type == t.TYPE_SLICE_END:
                begin, name = open_slices.pop(t.track_uuid)
                out["slices"].append({"track": t.track_uuid, "begin": begin, "end": p.timestamp, "name": name})
    out["cpus"] = sorted(cpus)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
