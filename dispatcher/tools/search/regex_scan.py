r"""search_code's matching: a Python regular expression, line by line, over
files opened by descriptor, with a time budget per file.

The ``regex`` module (compiled with ``regex.V0``, its ``re``-compatible
mode) takes a ``timeout=`` on every search and raises TimeoutError when it
runs out, so a catastrophic pattern such as ``(a|aa)+$`` costs one file's
budget, not the server. It releases the GIL while it matches a ``str``, so
the scan, run in a worker thread, never stalls the event loop either. It
needs no child process, no sandbox for one and no reaper.

A timed search costs more per call than an untimed one, which line by line
would make a full scan slower than a killable child process doing the same
job (benchmarks/regex_search.py; figures in benchmarks/README.md). So each file
is first searched whole, once, in MULTILINE mode: a pattern that matches
some line also matches the whole text there (``^``/``$`` meet at line
ends, ``.`` stops at them, the same characters surround the match), so a
file with no whole-text match has no matching line and costs one call.
Only files that pass go line by line. That implication fails for
constructs that can see past a line's edge and then refuse, or that anchor
on the string's own ends (``\A``, ``\Z``, negative lookarounds, atomic
groups, possessive quantifiers, conditionals, backtracking verbs): patterns
holding any of them skip the whole-text step. benchmarks/regex_search.py
measures both against the child process.

No name is ever opened here: files come from ``open_candidates`` (folder by
folder from the workspace root, ``O_NOFOLLOW``), so a link swapped in after
the walk cannot make the search read outside the workspace.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import regex

from dispatcher.tools.search.candidates import Candidate, read_text_files

# Characters of a line (and of each context line) kept in a match record.
MAX_LINE_CHARS = 2000


@dataclass(slots=True)
class ScanResult:
    """What a scan found, which files ran out of time, and whether it gave up."""

    matches: list[dict[str, Any]] = field(default_factory=list)
    slow_files: list[str] = field(default_factory=list)
    stopped_early: bool = False


# Pattern text that may match a line yet not the whole text (see above).
# Searched for literally, so an escaped or bracketed look-alike also turns
# the whole-text step off: that costs speed, never a match.
_LINE_BOUND = (
    "\\A",
    "\\Z",
    "\\z",
    "\\G",
    "(?!",
    "(?<!",
    "(?>",
    "(?(",
    "(*",
    "*+",
    "++",
    "?+",
    "}+",
)
# Share of a file's time budget the whole-text step may use before the
# file is searched line by line anyway (a pattern such as (\w+\s?)+$ can be
# slow across lines yet quick on each line).
WHOLE_TEXT_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class LinePattern:
    """A compiled search_code pattern: ``line`` decides, ``whole`` (when the
    pattern allows it) rules out files with no matching line in one call."""

    line: regex.Pattern[str]
    whole: regex.Pattern[str] | None


def compile_pattern(pattern: str, *, ignore_case: bool) -> LinePattern:
    """The pattern as Python's ``re`` reads it; raises ``regex.error``."""
    flags = regex.V0 | (regex.IGNORECASE if ignore_case else 0)
    line = regex.compile(pattern, flags)
    if any(token in pattern for token in _LINE_BOUND):
        return LinePattern(line, None)
    return LinePattern(line, regex.compile(pattern, flags | regex.MULTILINE))


def scan(
    opened: Generator[tuple[int, Candidate, int], None, None],
    rx: LinePattern,
    *,
    context: int,
    limit: int,
    file_timeout: float,
    max_slow: int,
    max_bytes: int,
    cancelled: Callable[[], bool],
) -> ScanResult:
    """Search each open file (closing its descriptor) until ``limit`` matches;
    ``opened`` is closed at the end, in the thread that iterated it.

    A file that exceeds ``file_timeout`` seconds is reported in
    ``slow_files`` and contributes no match; after ``max_slow`` of them the
    scan stops early. Blocking: run it in a worker thread.
    """
    result = ScanResult()
    with contextlib.closing(opened):
        _scan_files(
            opened, result, rx, context, limit, file_timeout, max_slow, max_bytes, cancelled
        )
    return result


def _scan_files(
    opened: Iterator[tuple[int, Candidate, int]],
    result: ScanResult,
    rx: LinePattern,
    context: int,
    limit: int,
    file_timeout: float,
    max_slow: int,
    max_bytes: int,
    cancelled: Callable[[], bool],
) -> None:
    for _, cand, data in read_text_files(opened, max_bytes, cancelled):
        try:
            found = _scan_text(data, rx, context, limit - len(result.matches), file_timeout)
        except TimeoutError:
            result.slow_files.append(cand.rel)
            if len(result.slow_files) >= max_slow:
                result.stopped_early = True
                break
            continue
        result.matches.extend({"path": cand.rel, **m} for m in found)
        if len(result.matches) >= limit:
            break


def _scan_text(
    data: bytes, rx: LinePattern, context: int, limit: int, budget: float
) -> list[dict[str, Any]]:
    """Matches in one file; TimeoutError once ``budget`` seconds are spent."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in lines]
    deadline = time.monotonic() + budget
    candidates: Iterable[int] = range(len(lines))
    if rx.whole is not None:
        with contextlib.suppress(TimeoutError):  # slow across lines: try every line
            candidates = _candidate_lines(lines, rx.whole, budget * WHOLE_TEXT_SHARE)
    found: list[dict[str, Any]] = []
    for i in candidates:
        line = lines[i]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        m = rx.line.search(line, timeout=left)
        if m is None:
            continue
        found.append(
            {
                "line": i + 1,
                "column": m.start() + 1,
                "text": line[:MAX_LINE_CHARS],
                "before": [x[:MAX_LINE_CHARS] for x in lines[max(0, i - context) : i]],
                "after": [x[:MAX_LINE_CHARS] for x in lines[i + 1 : i + 1 + context]],
            }
        )
        if len(found) >= limit:
            break
    return found


def _candidate_lines(lines: list[str], whole: regex.Pattern[str], budget: float) -> list[int]:
    """Indexes of the lines some whole-text match touches, in order."""
    starts = list(itertools.accumulate((len(line) + 1 for line in lines), initial=0))
    found: list[int] = []
    if not lines:
        return found
    for m in whole.finditer("\n".join(lines), timeout=budget):
        first = bisect.bisect_right(starts, m.start()) - 1
        last = min(len(lines) - 1, bisect.bisect_right(starts, max(m.start(), m.end() - 1)) - 1)
        for index in range(max(first, found[-1] + 1 if found else 0), last + 1):
            found.append(index)
    return found
