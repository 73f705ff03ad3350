#!/usr/bin/env python3
"""Import circles between the modules of each crate, from the source text.

A module is a source file (`src/a/b.rs` or `src/a/b/mod.rs` is `a::b`; `lib.rs`/`main.rs` is the
root). An edge `m -> n` is any path in `m`'s code that names `n` or an item inside it:
`crate::n::...`, `super::...` and `self::...` resolved against `m`, and `use` lists
(`use crate::a::{b, c::D}`) expanded. Test code is left out (files named `tests.rs` or under a
`tests/` directory of `src`, and everything after a `#[cfg(test)]` line), as are comments. A
path that names an item of the root (`crate::Thing`) is an edge to the root only when the root
defines it; re-exports make most such paths point at a leaf instead, and the root itself is
left out of the circles (it is the crate's front door: it declares every module and re-exports
their items, so every module "reaches" it by naming those items).

Prints every strongly connected component with more than one module (an import circle) for
each crate, and exits 1 if there is any; `--allow CRATE:MOD,MOD,...` accepts one known circle.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: every crates/*/)
"""
import os
import re
import sys


def modules(src):
    """Maps each module path (a tuple) to its file."""
    found = {}
    for dirpath, _, files in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        parts = [] if rel_dir == "." else rel_dir.split(os.sep)
        if "tests" in parts or "bin" in parts:
            continue
        for name in files:
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            stem = name[:-3]
            if stem in ("lib", "main") and not parts:
                path = ()
            elif stem == "mod":
                path = tuple(parts)
            else:
                path = tuple(parts + [stem])
            found[path] = os.path.join(dirpath, name)
    # Modules declared only for tests (`#[cfg(test)]` then `mod name;`) are test code.
    for path, file in list(found.items()):
        with open(file, encoding="utf-8") as f:
            text = f.read()
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            found.pop(path + (m.group(1),), None)
    return found


def code_of(file):
    """The file's text without comments and without test code: the item after each
    `#[cfg(test)]` line is left out (a `mod tests;` line, or a block to its closing brace),
    and what follows it is read again."""
    out = []
    with open(file, encoding="utf-8") as f:
        lines = [re.sub(r"//.*", "", line) for line in f]
    i = 0
    while i < len(lines):
        if lines[i].strip().startswith("#[cfg(test)]"):
            i += 1
            depth, opened = 0, False
            while i < len(lines):
                line = lines[i]
                depth += line.count("{") - line.count("}")
                opened = opened or "{" in line
                i += 1
                if (opened and depth <= 0) or (not opened and line.rstrip().endswith(";")):
                    break
            continue
        out.append(lines[i])
        i += 1
    return "".join(out)


USE = re.compile(r"\buse\s+([^;]+);", re.S)
PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def expand_use(tree):
    """`a::{b, c::{d, e}}` as the list of paths it names (brace lists expanded)."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, text):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(text):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(text[start:i])
                start = i + 1
        items.append(text[start:])
        for item in items:
            if not item:
                continue
            m = re.match(r"^(.*?)::\{(.*)\}$", item)
            if m:
                walk(prefix + m.group(1).split("::"), m.group(2))
            elif item.startswith("{") and item.endswith("}"):
                walk(prefix, item[1:-1])
            else:
                out.append(prefix + item.split(" as ")[0].split("::"))

    walk([], tree)
    return out


def resolve(base, segments, mods):
    """The longest known module that `segments` (already absolute) names."""
    segments = [s for s in segments if s not in ("*",)]
    for n in range(len(segments), -1, -1):
        cand = tuple(segments[:n])
        if cand in mods:
            return cand
    return None


def absolute(module, is_mod_file, head, rest):
    """An absolute path for `head::rest` written in `module`."""
    if head == "crate":
        return list(rest)
    here = list(module)
    if head == "self":
        return here + list(rest)
    # `super` in `a/b.rs` and in `a/b/mod.rs` both mean `a`.
    up = here[:-1]
    while rest and rest[0] == "super":
        up = up[:-1]
        rest = rest[1:]
    return up + list(rest)


def edges_of(module, file, mods):
    text = code_of(file)
    is_mod = os.path.basename(file) in ("mod.rs", "lib.rs", "main.rs")
    out = set()
    paths = []
    for m in USE.finditer(text):
        for p in expand_use(m.group(1)):
            if p and p[0] in ("crate", "super", "self"):
                paths.append((p[0], p[1:]))
    for m in PATH.finditer(text):
        paths.append((m.group(1), m.group(2).split("::")[1:]))
    for head, rest in paths:
        target = resolve(module, absolute(module, is_mod, head, rest), mods)
        if target is None or target == module or target == ():
            continue
        # A module naming its own descendant (declaring or re-exporting a child) is structure,
        # not an import.
        if target[: len(module)] == module:
            continue
        out.add(target)
    return out


def circles(graph):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            strong(v)
    return comps


def name(path):
    return "::".join(path) if path else "(root)"


def main(argv):
    allowed = set()
    dirs = []
    args = iter(argv)
    for arg in args:
        if arg == "--allow":
            allowed.add(next(args))
        else:
            dirs.append(arg)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if not dirs:
        crates = os.path.join(root, "crates")
        dirs = [os.path.join(crates, d) for d in sorted(os.listdir(crates))]
    found = 0
    for crate in dirs:
        src = os.path.join(crate, "src")
        if not os.path.isdir(src):
            continue
        mods = modules(src)
        graph = {m: edges_of(m, f, mods) for m, f in mods.items() if m != ()}
        crate_name = os.path.basename(os.path.normpath(crate))
        for comp in circles(graph):
            label = crate_name + ":" + ",".join(name(m) for m in comp)
            if label in allowed:
                continue
            found += 1
            print(f"{crate_name}: import circle between {', '.join(name(m) for m in comp)}")
            for m in comp:
                inside = sorted(name(t) for t in graph[m] if t in comp)
                print(f"    {name(m)} -> {', '.join(inside)}")
    if found:
        print(f"module-cycles: {found} import circle(s)")
        return 1
    print(f"module-cycles: no import circle in {len(dirs)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
