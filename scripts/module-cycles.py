#!/usr/bin/env python3
"""Fails when files of one crate import each other in a loop.

A module that reaches, through `crate::` paths, a module that reaches it
back makes the two one unit in all but name: neither can be understood,
tested or moved alone. This lists each such loop (a strongly connected set
of a crate's files) and exits 1 when there is one in a crate named on the
command line (default: every crate).

A file's `#[cfg(test)]` modules are left out: a test may drive its module
through one that depends on it (a scheduler model's tests run it in the
engine) without the two being one unit in what the crate builds.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def modules(crate: Path):
    """Top-level module name -> text of its files (src/x.rs and src/x/**)."""
    src = crate / "src"
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src)
        top = rel.parts[0].removesuffix(".rs")
        if top in ("lib", "main"):
            continue
        mods.setdefault(top, "")
        mods[top] += without_tests(f.read_text())
    return mods


def without_tests(text):
    """The file without its `#[cfg(test)]` modules, laid out as rustfmt
    lays out a top-level module: from the attribute to the first line that
    is a lone closing brace."""
    lines, out, skipping = text.split("\n"), [], False
    for i, line in enumerate(lines):
        if not skipping and line.startswith("#[cfg(test)]"):
            following = lines[i + 1] if i + 1 < len(lines) else ""
            skipping = re.match(r"(pub(\([a-z]+\))? )?mod \w+ \{$", following) is not None
        if not skipping:
            out.append(line)
        elif line == "}":
            skipping = False
    return "\n".join(out)


def edges(mods):
    out = {m: set() for m in mods}
    for m, text in mods.items():
        # Strip comments so a doc link does not count as an import.
        code = re.sub(r"//[^\n]*", "", text)
        for name in re.findall(r"\bcrate::([a-z_][a-z0-9_]*)", code):
            if name in mods and name != m:
                out[m].add(name)
        # `use super::x` from a child module of m is still m's own.
    return out


def cycles(graph):
    """Tarjan's strongly connected components with more than one member."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    names = sys.argv[1:] or sorted(p.name for p in (ROOT / "crates").iterdir() if (p / "src").is_dir())
    bad = 0
    for name in names:
        for comp in cycles(edges(modules(ROOT / "crates" / name))):
            print(f"module-cycles: crates/{name}: {', '.join(comp)} import each other in a loop")
            bad += 1
    if bad:
        sys.exit(1)
    print(f"module-cycles: no import loops in {len(names)} crate(s)")


if __name__ == "__main__":
    main()
