#!/usr/bin/env python3
"""Checks the links of the repository's Markdown files (and of the built guide).

Every Markdown file git knows (plus new ones under docs/src) is read; each inline link
`[text](target)` and reference definition `[name]: target` outside code blocks and
code spans must be relative (docs never link outside the repository), name a file or
directory that exists, and, with `#anchor`, a heading of that Markdown file (headings
are turned into anchors as mdBook and GitHub do). With `--book DIR`, the built guide's
HTML is checked the same way: every relative `href` must name a file of the book or of
the repository. Prints each broken link as `file:line: why` and exits 1 if there is
one.

    scripts/check-links.py [--book docs/book]
"""
import html
import os
import re
import subprocess
import sys
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:|^//")
INLINE = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
HREF = re.compile(r"""(?:href|src)\s*=\s*["']([^"']*)["']""")


def slug(text):
    """A heading's anchor, as mdBook's normalize_id and GitHub make it."""
    text = re.sub(r"<[^>]*>", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = text.replace("`", "").strip().lower()
    out = []
    for ch in text:
        if ch.isalnum() or ch in "_-":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def markdown_lines(path):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            stripped = line.lstrip()
            m = re.match(r"(`{3,}|~{3,})", stripped)
            if m:
                if fence is None:
                    fence = m.group(1)[0] * len(m.group(1))
                    continue
                if stripped.startswith(fence):
                    fence = None
                    continue
            if fence is not None:
                continue
            yield n, re.sub(r"(`+)(?:(?!\1).)*?\1", lambda c: " " * len(c.group(0)), line)


anchor_cache = {}


def anchors(path):
    if path not in anchor_cache:
        seen = {}
        names = set()
        for _, line in markdown_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            if s in seen:
                seen[s] += 1
                names.add("%s-%d" % (s, seen[s]))
            else:
                seen[s] = 0
                names.add(s)
        # Explicit anchors: <a name="x"> or id="x".
        with open(path, encoding="utf-8") as f:
            for m in re.finditer(r"""(?:name|id)\s*=\s*["']([^"']+)["']""", f.read()):
                names.add(m.group(1))
        anchor_cache[path] = names
    return anchor_cache[path]


def check_target(source, target, errors, where):
    if not target or target.startswith("{{"):
        return
    if EXTERNAL.match(target):
        errors.append("%s: links outside the repository: %s" % (where, target))
        return
    path, _, anchor = target.partition("#")
    path = unquote(path)
    if path:
        full = os.path.normpath(os.path.join(os.path.dirname(source), path))
    else:
        full = source
    if not full.startswith(ROOT + os.sep) and full != ROOT:
        errors.append("%s: leaves the repository: %s" % (where, target))
        return
    if not os.path.exists(full):
        errors.append("%s: no such file: %s" % (where, target))
        return
    if anchor and full.endswith(".md") and anchor not in anchors(full):
        errors.append("%s: no heading for #%s in %s" % (where, anchor, os.path.relpath(full, ROOT)))


def markdown_files():
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    return sorted(os.path.join(ROOT, p) for p in listed if os.path.exists(os.path.join(ROOT, p)))


def check_markdown(errors):
    files = markdown_files()
    for path in files:
        for n, line in markdown_lines(path):
            where = "%s:%d" % (os.path.relpath(path, ROOT), n)
            for m in INLINE.finditer(line):
                check_target(path, m.group(1), errors, where)
            m = REFDEF.match(line)
            if m:
                check_target(path, m.group(1), errors, where)
    return len(files)


def check_book(book, errors):
    book = os.path.abspath(book)
    count = 0
    for dirpath, _, names in os.walk(book):
        for name in names:
            if not name.endswith(".html"):
                continue
            page = os.path.join(dirpath, name)
            count += 1
            with open(page, encoding="utf-8") as f:
                text = f.read()
            for m in HREF.finditer(text):
                target = html.unescape(m.group(1))
                if not target or target.startswith("#") or EXTERNAL.match(target):
                    # Links out of the book come from mdBook's own theme (its
                    # repository button is off); the sources are checked above.
                    continue
                path = unquote(target.partition("#")[0].partition("?")[0])
                if not path:
                    continue
                full = os.path.normpath(os.path.join(dirpath, path))
                if not os.path.exists(full):
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append("%s:%d: no such file: %s" % (os.path.relpath(page, ROOT), line, target))
    return count


def main(argv):
    book = None
    if argv[:1] == ["--book"] and len(argv) == 2:
        book = argv[1]
    elif argv:
        sys.exit(__doc__)
    errors = []
    files = check_markdown(errors)
    pages = check_book(book, errors) if book else 0
    for e in errors:
        print(e)
    summary = "check-links: %d Markdown files" % files
    if book:
        summary += ", %d pages of %s" % (pages, os.path.relpath(os.path.abspath(book), ROOT))
    print("%s: %d broken link(s)" % (summary, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
