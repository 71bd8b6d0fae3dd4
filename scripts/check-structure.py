#!/usr/bin/env python3
"""Structure check for the crates (issue 36): files that outgrew one subject, and
import rings between modules of one crate.

(a) Every .rs file under crates/*/src longer than --max-lines (1,200) lines.
(b) Per crate, the graph of module-to-module references: `use crate::a::b`,
    `crate::a::b` paths in code, and `super::x` / `super::super::x` paths. A module is
    one file (foo.rs or foo/mod.rs); a reference to an item of a module counts as an
    edge to that module. References a module makes to its own ancestors (a child
    using its parent's items through `super::` or `crate::`) do not count: a child
    belongs to its parent. Neither do references into a module's own descendants.
    What counts is two modules outside each other's line referring to each other,
    directly or around a longer cycle. `#[cfg(test)]` test modules (tests.rs files
    and `mod tests { ... }` blocks) are left out: tests may reach anywhere.
    Each cycle (strongly connected component) is printed with one edge list.

Exit status 1 if any file is too long or any ring exists.

    scripts/check-structure.py                      every crate
    scripts/check-structure.py weft-client weft-rpc only the named crates
    scripts/check-structure.py --skip weft-proto    every crate but the named ones
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)
# `crate::a::b::c` or `super::super::x`, with `{...}` groups in `use` handled separately.
PATH_START = re.compile(r"(?<![A-Za-z0-9_:])(crate|super|self)((?:\s*::\s*" + IDENT + r")+)(\s*::\s*\{)?")


def strip_comments_and_strings(text):
    """Blank out comments, string and char literals (keeping newlines) so that paths
    inside docs or strings are not read as references."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'r(#*)"', text[i:i + 260]) if c == "r" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if m:
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            # A char literal ('a', '\n', '\u{..}'), not a lifetime ('a).
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def remove_test_blocks(text):
    """Drop `#[cfg(test)] mod name { ... }` blocks (after comments and strings are gone)."""
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*\{")
    while True:
        m = pattern.search(text)
        if not m:
            return text
        depth, j = 1, m.end()
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        text = text[:m.start()] + "\n" * text.count("\n", m.start(), j) + text[j:]


def test_module_names(text):
    """Names of `#[cfg(test)] mod x;` declarations (their files are left out)."""
    return set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text))


class Crate:
    def __init__(self, name, src):
        self.name, self.src = name, src
        self.files = {}  # module path (tuple) -> file path
        self.texts = {}  # module path -> cleaned text
        for root_file in ("lib.rs", "main.rs"):
            path = os.path.join(src, root_file)
            if os.path.exists(path):
                self.load((), path)
                break

    def load(self, module, path):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        clean = strip_comments_and_strings(raw)
        tests = test_module_names(clean)
        clean = remove_test_blocks(clean)
        self.files[module] = path
        self.texts[module] = clean
        directory = os.path.dirname(path)
        stem = os.path.splitext(os.path.basename(path))[0]
        if module and stem not in ("mod", "lib", "main"):
            directory = os.path.join(directory, stem)
        for name in MOD_DECL.findall(clean):
            if name in tests:
                continue
            for candidate in (os.path.join(directory, name + ".rs"), os.path.join(directory, name, "mod.rs")):
                if os.path.exists(candidate):
                    self.load(module + (name,), candidate)
                    break

    def resolve(self, segments):
        """The deepest known module named by a path's leading segments."""
        best = ()
        for k in range(1, len(segments) + 1):
            if tuple(segments[:k]) in self.files:
                best = tuple(segments[:k])
            else:
                break
        return best

    def references(self, module):
        text = self.texts[module]
        targets = set()
        for m in PATH_START.finditer(text):
            head = m.group(1)
            segments = [s.strip() for s in m.group(2).split("::") if s.strip()]
            if head == "crate":
                base = []
            elif head == "self":
                base = list(module)
            else:
                base = list(module[:-1])
                while segments and segments[0] == "super":
                    segments = segments[1:]
                    base = base[:-1]
            full = base + segments
            if m.group(3):  # `path::{a, b::c}` group: each member names a further path
                start = m.end()
                depth, j = 1, start
                while j < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                for item in re.findall(IDENT + r"(?:\s*::\s*" + IDENT + r")*", text[start:j - 1]):
                    parts = [p.strip() for p in item.split("::")]
                    if parts[0] == "self":
                        parts = parts[1:]
                    targets.add(self.resolve(full + parts))
            else:
                targets.add(self.resolve(full))
        # A module's own line (ancestors and descendants) is not a ring.
        return {t for t in targets if not (t == module[:len(t)] or module == t[:len(module)])}

    def graph(self):
        return {m: self.references(m) for m in self.files}


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def name(module):
    return "crate::" + "::".join(module) if module else "crate"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("crates", nargs="*", help="crate directory names under crates/ (default: all)")
    parser.add_argument("--skip", action="append", default=[], help="leave this crate out (repeatable)")
    parser.add_argument("--max-lines", type=int, default=1200)
    args = parser.parse_args()

    crates_dir = os.path.join(ROOT, "crates")
    names = args.crates or sorted(os.listdir(crates_dir))
    failed = False
    for crate_name in names:
        if crate_name in args.skip:
            continue
        src = os.path.join(crates_dir, crate_name, "src")
        if not os.path.isdir(src):
            if args.crates:
                print(f"check-structure: no crate {crate_name} under crates/", file=sys.stderr)
                failed = True
            continue
        for dirpath, _, filenames in os.walk(src):
            for filename in sorted(filenames):
                if filename.endswith(".rs"):
                    path = os.path.join(dirpath, filename)
                    with open(path, encoding="utf-8") as f:
                        lines = sum(1 for _ in f)
                    if lines > args.max_lines:
                        print(f"too long: {os.path.relpath(path, ROOT)}: {lines} lines (limit {args.max_lines})")
                        failed = True
        crate = Crate(crate_name, src)
        graph = crate.graph()
        for component in cycles(graph):
            failed = True
            members = set(component)
            print(f"import ring in {crate_name}: " + " <-> ".join(
                os.path.relpath(crate.files[m], src) for m in component))
            for m in component:
                for t in sorted(graph[m] & members):
                    print(f"    {os.path.relpath(crate.files[m], src)} -> {os.path.relpath(crate.files[t], src)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
