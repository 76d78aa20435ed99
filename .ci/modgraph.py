#!/usr/bin/env python3
"""The module graph of a crate: which file names which other file's items.

Reads every .rs file under SRC (default crates/tollgate-proxy/src), takes each
`crate::a::b` path (and `super::x` from a module below) as an edge from that
file's module to the deepest module of the path that is a file, and prints the
strongly connected components with more than one module: the import cycles.
  .ci/modgraph.py [SRC]          cycles, largest first; then cycles among the
                                 top-level folders (a folder is a layer: what
                                 its files name may not name it back)
  .ci/modgraph.py SRC --edges M  what module M names, and what names it
  .ci/modgraph.py SRC --layers a,b,c
                                 also: the top-level folders a, b, c are layers,
                                 lowest first, and a module in one may name
                                 only its own layer and those before it
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "crates/tollgate-proxy/src"
mods = {}
for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, src)[:-3].split(os.sep)
        if rel[-1] in ("lib", "main"):
            rel = rel[:-1]
        elif rel[-1] == "mod":
            rel = rel[:-1]
        mods["::".join(rel)] = path

# `#[path = "x_tests.rs"] mod tests;` files are part of their parent's tests.
def module_of(parts):
    """The deepest known module that `parts` (a path below crate) names."""
    for n in range(len(parts), 0, -1):
        m = "::".join(parts[:n])
        if m in mods:
            return m
    return None

edges = {m: set() for m in mods}
for m, path in mods.items():
    text = open(path, encoding="utf-8").read()
    # Leave out test modules at the end of a file, and comments.
    text = re.sub(r"//[^\n]*", "", text)
    cut = re.search(r"#\[cfg\(test\)\]\s*(#\[path[^\]]*\]\s*)?mod tests", text)
    if cut:
        text = text[: cut.start()]
    for p in re.findall(r"\bcrate((?:::\w+)+)", text):
        t = module_of(p.strip(":").split("::"))
        if t and t != m and not m.startswith(t + "::") and t != "":
            edges[m].add(t)
    here = m.split("::") if m else []
    for p in re.findall(r"\bsuper((?:::\w+)+)", text):
        base = here[:-1]
        t = module_of(base + p.strip(":").split("::"))
        if t and t != m:
            edges[m].add(t)

# Tarjan's strongly connected components.
index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges[v]:
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
        out.append(comp)
def components(nodes, graph):
    """Tarjan's strongly connected components of `graph` over `nodes`."""
    index.clear(); low.clear(); on.clear(); stack.clear(); out.clear(); counter[0] = 0
    global edges
    saved, edges = edges, graph
    for v in nodes:
        if v not in index:
            visit(v)
    edges = saved
    return list(out)

out_modules = components(list(mods), edges)
# The folder graph: each module stands for its top-level folder (a file
# directly under SRC stands for itself; lib.rs and main.rs for nothing).
folders = {}
for m, ts in edges.items():
    a = m.split("::")[0]
    if not a:
        continue
    folders.setdefault(a, set())
    for t in ts:
        b = t.split("::")[0]
        if b and b != a:
            folders[a].add(b)
            folders.setdefault(b, set())
out_folders = components(list(folders), folders)

if "--edges" in sys.argv:
    m = sys.argv[sys.argv.index("--edges") + 1]
    print(f"{m} names: {', '.join(sorted(edges[m]))}")
    print(f"named by: {', '.join(sorted(k for k, v in edges.items() if m in v))}")
    sys.exit(0)
cycles = sorted((c for c in out_modules if len(c) > 1), key=len, reverse=True)
for c in cycles:
    print(f"cycle of {len(c)} modules: {' '.join(sorted(c))}")
print(f"{len(mods)} modules, {sum(len(c) for c in cycles)} in cycles")
folder_cycles = [c for c in out_folders if len(c) > 1]
for c in folder_cycles:
    print(f"cycle of {len(c)} folders: {' '.join(sorted(c))}")
print(f"{len(folders)} top-level folders and files, {sum(len(c) for c in folder_cycles)} in cycles")
upward = []
if "--layers" in sys.argv:
    order = sys.argv[sys.argv.index("--layers") + 1].split(",")
    rank = {f: i for i, f in enumerate(order)}
    for f in order:
        if f not in folders:
            print(f"layer {f}: no such top-level folder or file")
            upward.append(f)
    for m, ts in sorted(edges.items()):
        a = m.split("::")[0]
        for t in sorted(ts):
            b = t.split("::")[0]
            if a in rank and b in rank and rank[b] > rank[a]:
                upward.append(m)
                print(f"upward import: {m} ({a}) names {t} ({b})")
    print(f"{len(order)} layers, {len(upward)} upward imports")
sys.exit(1 if cycles or folder_cycles or upward else 0)
