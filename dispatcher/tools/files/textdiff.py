"""Unified diffs of one file's change, fast on large files.

difflib compares every line with every other, which on a file of 100 000
lines takes seconds even when one line changed. The lines an edit did not
touch are equal at both ends, so they are cut off first (keeping the context
lines) and only the changed middle goes to difflib; the hunk headers are
shifted back to the file's real line numbers. A last line without a newline
gets git's "\\ No newline at end of file" marker, so the diff stays valid
input for apply_patch and ``patch``.

This is the one place a unified diff is made from two texts (write and
patch results, confirmation previews, dry-run plans); ``changed_lines``
is the one place one is measured.
"""

from __future__ import annotations

import difflib
import re

CONTEXT = 3
_HEADER = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def unified_file_diff(
    rel: str,
    before: str,
    after: str,
    *,
    created: bool = False,
    deleted: bool = False,
) -> str:
    """The diff turning ``before`` into ``after`` ('' when they are equal)."""
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    shortest = min(len(a), len(b))
    prefix = 0
    while prefix < shortest and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    start = max(0, prefix - CONTEXT)
    keep_suffix = max(0, suffix - CONTEXT)
    lines = difflib.unified_diff(
        a[start : len(a) - keep_suffix],
        b[start : len(b) - keep_suffix],
        fromfile="/dev/null" if created else f"a/{rel}",
        tofile="/dev/null" if deleted else f"b/{rel}",
        n=CONTEXT,
    )
    out: list[str] = []
    for line in lines:
        if start and line.startswith("@@"):
            line = _shift(line, start)
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def changed_lines(diff: str) -> int:
    """Lines a unified diff adds or removes (file headers not counted)."""
    return sum(
        1
        for line in diff.splitlines()
        if line[:1] in ("+", "-") and not line.startswith(("+++ ", "--- "))
    )


def _shift(header: str, offset: int) -> str:
    m = _HEADER.match(header)
    if m is None:
        return header
    old = int(m[1]) + offset
    new = int(m[3]) + offset
    return f"@@ -{old}{m[2] or ''} +{new}{m[4] or ''} @@" + header[m.end() :]
