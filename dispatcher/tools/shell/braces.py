"""Bash brace expansion of one word, for the rules: ``rm -rf /{,}`` is
``rm -rf / /`` to the blocklist. Bounded, so a crafted word cannot make the
check slow.
"""

from __future__ import annotations

import re

MAX_BRACE_WORDS = 256


def expand_braces(text: str) -> list[str]:
    """Bash brace expansion of one word: ``/{,}`` -> ``["/", "/"]``,
    ``a{b,c}d`` -> ``["abd", "acd"]``, ``{1..3}`` -> the end points.

    Applied to quoted words too (we no longer know which characters were
    quoted): that only ever shows the rules more words, never fewer.
    Bounded: past MAX_BRACE_WORDS results the rest are dropped."""
    out = _expand(text, 0)
    return [w for w in out if w] if out != [text] else [text]


def _expand(text: str, depth: int) -> list[str]:
    """Every word the first expandable brace group of ``text`` stands for."""
    if depth > 8 or "{" not in text:
        return [text]
    for start, c in enumerate(text):
        if c != "{" or (start > 0 and text[start - 1] in "$\\"):
            continue
        level = 0
        commas: list[int] = []
        end = -1
        for j in range(start, len(text)):
            if text[j] == "{":
                level += 1
            elif text[j] == "}":
                level -= 1
                if level == 0:
                    end = j
                    break
            elif text[j] == "," and level == 1:
                commas.append(j)
        if end == -1:
            return [text]
        inner = text[start + 1 : end]
        if commas:
            bounds = [start, *commas, end]
            options = [text[bounds[k] + 1 : bounds[k + 1]] for k in range(len(bounds) - 1)]
        elif re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(\.\.-?\d+)?", inner):
            options = inner.split("..")[:2]
        else:
            continue
        prefix, suffix = text[:start], text[end + 1 :]
        results: list[str] = []
        for option in options:
            for tail in _expand(suffix, depth + 1):
                for mid in _expand(option, depth + 1):
                    results.append(prefix + mid + tail)
                    if len(results) >= MAX_BRACE_WORDS:
                        return results
        return results
    return [text]
