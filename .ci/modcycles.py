#!/usr/bin/env python3
"""Import cycles between the non-test source files of each Rust crate in a workspace.

Reads `use crate::a::b` / `crate::a::b::Name` paths in each src file (test modules cut off at
`#[cfg(test)]`), maps them to the file that defines the module, and prints each strongly
connected component of more than one file, then the same between top-level module folders.
Exit 1 when any exists. Part of .ci/run's lint: `python3 .ci/modcycles.py [WORKSPACE]`.
Conservative: a `crate::` path in a doc comment counts as an import too.

Wings: in a crate listed in WINGS, each named top-level module has a rank; every other module
is the floor (rank 0). A module may import one of a lower rank only (the floor: the floor too),
so wings import each other only downward and the floor imports no wing. Each import against
that is printed and fails the check as a cycle does.
"""
import pathlib, re, sys

def files_of(crate):
    src = crate / "src"
    out = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        if "bin" in parts or "tests" in parts or f.name == "tests.rs":
            continue
        out[tuple(parts)] = f
    return out

def deps(text, mods, here):
    text = text.split("#[cfg(test)]")[0]
    found = set()
    for m in re.finditer(r"crate::((?:\w+::)*\w+)", text):
        parts = tuple(m.group(1).split("::"))
        for n in range(len(parts), 0, -1):
            if parts[:n] in mods:
                if parts[:n] != here:
                    found.add(parts[:n])
                break
    for m in re.finditer(r"\bsuper::((?:\w+::)*\w+)", text):
        parts = here[:-1] + tuple(m.group(1).split("::"))
        for n in range(len(parts), 0, -1):
            if parts[:n] in mods and parts[:n] != here:
                found.add(parts[:n]); break
    return found

def sccs(graph):
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(comp)
    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index: visit(v)
    return out

# crate folder -> {top-level module: rank}; the crate root (lib.rs, main.rs) may import anything.
WINGS = {
    "operator": {"agent": 1, "reconcile": 2, "aggregated": 2},
}

def upward(crate_name, graph):
    ranks = WINGS.get(crate_name)
    if not ranks:
        return []
    out = []
    for m, ds in sorted(graph.items()):
        if not m:
            continue
        rm = ranks.get(m[0], 0)
        for d in sorted(ds):
            if not d or d[0] == m[0]:
                continue
            rd = ranks.get(d[0], 0)
            if rd > rm or (rd == rm and rm > 0):
                out.append("%s upward import between wings: %s -> %s" % (crate_name, "::".join(m), "::".join(d)))
    return out

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
bad = []
for cargo in sorted(root.glob("*/Cargo.toml")) + sorted(root.glob("*/*/Cargo.toml")):
    crate = cargo.parent
    if not (crate / "src").is_dir():
        continue
    mods = files_of(crate)
    graph = {m: deps(f.read_text(errors="replace"), mods, m) for m, f in mods.items()}
    bad.extend(upward(str(crate.relative_to(root)), graph))
    for comp in sccs(graph):
        if len(comp) > 1:
            bad.append("%s files: %s" % (crate.relative_to(root), ", ".join(sorted("::".join(c) or "lib" for c in comp))))
    # the same one level up: folders (top-level modules) that import each other
    top = {}
    for m, ds in graph.items():
        if not m:
            continue
        top.setdefault(m[:1], set()).update(d[:1] for d in ds if d and d[:1] != m[:1])
    for k in list(top):
        top[k] = {d for d in top[k] if d in top}
    for comp in sccs(top):
        names = sorted(c[0] for c in comp)
        if len(comp) > 1 and any((crate / "src" / n).is_dir() for n in names):
            bad.append("%s modules: %s" % (crate.relative_to(root), ", ".join(names)))
for b in bad:
    print(b)
print("%d import cycle(s) between source files or module folders, or upward import(s) between wings" % len(bad))
sys.exit(1 if bad else 0)
