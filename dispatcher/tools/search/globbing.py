"""Glob patterns with gitignore's rules, translated to regular expressions.

``*`` and ``?`` never cross a ``/``; ``[...]`` is a character class (``!`` or
``^`` negates); a backslash escapes the next character; ``**`` as a whole path
component matches any number of folders (``**/x``, ``a/**/b``, ``a/**``).
Any other ``**`` behaves like ``*``. Dotfiles are not special.

User globs (the ``file_pattern`` of find_files, grep and search_code) also
take braces: ``*.{ts,tsx}`` is expanded by bracex (the expander wcmatch
uses) into ``*.ts`` and ``*.tsx`` before translation. .gitignore patterns
are not expanded: git has no braces. wcmatch's own matcher is slower here
(benchmarks/glob_matching.py; figures in benchmarks/README.md), so only its
brace expansion is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import bracex

from dispatcher.errors import ToolValidationFailed

# Alternatives one user glob may expand to; '{a,b}{c,d}...' grows fast.
MAX_BRACE_EXPANSION = 256

_CLASSES = {
    "alnum": r"a-zA-Z0-9",
    "alpha": r"a-zA-Z",
    "digit": r"0-9",
    "lower": r"a-z",
    "upper": r"A-Z",
    "space": r" \t\n\r\f\v",
    "xdigit": r"0-9a-fA-F",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
}


def glob_to_regex(pattern: str) -> str:
    """The regex body (no anchors) matching what ``pattern`` matches."""
    out: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            j = i
            while j < n and pattern[j] == "*":
                j += 1
            stars = j - i
            at_start = i == 0 or pattern[i - 1] == "/"
            at_end = j == n or pattern[j] == "/"
            if stars >= 2 and at_start and at_end:
                if j == n:
                    # 'a/**' (or a bare '**'): everything below.
                    out.append(".*")
                    i = j
                else:
                    # '**/' : zero or more whole folders.
                    out.append("(?:.*/)?")
                    i = j + 1
                continue
            out.append("[^/]*")
            i = j
        elif ch == "?":
            out.append("[^/]")
            i += 1
        elif ch == "[":
            cls, i = _char_class(pattern, i)
            out.append(cls)
        elif ch == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(ch))
            i += 1
    return "".join(out)


def _char_class(pattern: str, start: int) -> tuple[str, int]:
    """Translate ``[...]`` at ``start``; an unclosed '[' is a literal."""
    i = start + 1
    n = len(pattern)
    negate = False
    if i < n and pattern[i] in "!^":
        negate = True
        i += 1
    parts: list[str] = []
    first = True
    while i < n and (pattern[i] != "]" or first):
        first = False
        if pattern.startswith("[:", i):
            end = pattern.find(":]", i + 2)
            name = pattern[i + 2 : end] if end != -1 else ""
            if name in _CLASSES:
                parts.append(_CLASSES[name])
                i = end + 2
                continue
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        if i + 2 < n and pattern[i + 1] == "-" and pattern[i + 2] != "]":
            # git's wildmatch tests the first character on its own before the
            # range, so a reversed range (z-a) matches just 'z'; re would refuse it.
            if ch <= pattern[i + 2]:
                parts.append(f"{re.escape(ch)}-{re.escape(pattern[i + 2])}")
            else:
                parts.append(re.escape(ch))
            i += 3
            continue
        parts.append(re.escape(ch))
        i += 1
    if i >= n:
        return re.escape("["), start + 1
    body = "".join(parts)
    # A class never matches '/', as in git's wildmatch with WM_PATHNAME.
    return (f"[^/{body}]" if negate else f"(?!/)[{body}]"), i + 1


@lru_cache(maxsize=512)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A compiled full-match regex for ``pattern`` against a '/'-separated path."""
    return re.compile(glob_to_regex(pattern) + r"\Z", re.DOTALL)


def glob_matches(pattern: str, path: str) -> bool:
    """Whether ``pattern`` matches the whole of ``path``."""
    return compile_glob(pattern).match(path) is not None


@lru_cache(maxsize=256)
def compile_user_glob(pattern: str) -> Callable[[str], bool]:
    """A test of a relative path against a user glob: braces expanded, then
    each alternative without '/' matches the last path component and each
    one with '/' the whole path (with ``**`` across folders)."""
    try:
        alternatives = bracex.expand(pattern, keep_escapes=True, limit=MAX_BRACE_EXPANSION)
    except bracex.ExpansionLimitException:
        raise ToolValidationFailed(
            f"glob {pattern!r} expands to more than {MAX_BRACE_EXPANSION} patterns"
        ) from None
    by_path = [glob_to_regex(a) for a in alternatives if "/" in a]
    by_name = [glob_to_regex(a) for a in alternatives if "/" not in a]
    path_rx = re.compile("(?:" + "|".join(by_path) + r")\Z", re.DOTALL)
    name_rx = re.compile("(?:" + "|".join(by_name) + r")\Z", re.DOTALL)
    # The common cases get a single test (this runs once per file walked).
    if not by_path:
        return lambda rel: name_rx.match(rel.rsplit("/", 1)[-1]) is not None
    if not by_name:
        return lambda rel: path_rx.match(rel) is not None
    return lambda rel: bool(name_rx.match(rel.rsplit("/", 1)[-1]) or path_rx.match(rel))


def name_or_path_match(pattern: str, rel_path: str) -> bool:
    """Whether user glob ``pattern`` matches ``rel_path`` (see compile_user_glob)."""
    return compile_user_glob(pattern)(rel_path)
