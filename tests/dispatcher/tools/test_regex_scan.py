"""regex_scan's whole-text step never loses a line: its answers equal a plain
line-by-line search with Python's ``re`` (the syntax search_code promises)."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Generator

from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.tools.search.candidates import Candidate
from dispatcher.tools.search.regex_scan import compile_pattern, scan

# Patterns that cross lines, anchor, look around or back-reference: the
# cases where a whole-text match and a line's own match could differ.
PATTERNS = [
    r"a",
    r"^a",
    r"b$",
    r"a\s*b",
    r"a[^z]*b|x",
    r"(?s)a.*b",
    r"\bab\b",
    r"(a)\1",
    r"(?<=a)b",
    r"(?<!a)b",
    r"a(?!b)",
    r"^$",
    r"\Aa",
    r"b\Z",
    r"x*",
    r"(?m)^b",
    r"[\s\S]b",
]
texts = st.lists(st.text(alphabet="ab x\r", max_size=6), max_size=8).map("\n".join)


def _opened(data: bytes) -> Generator[tuple[int, Candidate, int], None, None]:
    with tempfile.TemporaryFile() as fh:
        fh.write(data)
        fh.flush()
        fh.seek(0)
        yield 0, Candidate("f.txt", len(data)), os.dup(fh.fileno())


def _expected(pattern: str, text: str) -> list[tuple[int, int]]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    rx = re.compile(pattern)
    found = []
    for i, line in enumerate(lines):
        m = rx.search(line[:-1] if line.endswith("\r") else line)
        if m is not None:
            found.append((i + 1, m.start() + 1))
    return found


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PATTERNS), texts)
def test_scan_agrees_with_re_line_by_line(pattern: str, text: str) -> None:
    result = scan(
        _opened(text.encode()),
        compile_pattern(pattern, ignore_case=False),
        context=0,
        limit=1000,
        file_timeout=5.0,
        max_slow=1,
        max_bytes=1 << 20,
        cancelled=lambda: False,
    )
    assert [(m["line"], m["column"]) for m in result.matches] == _expected(pattern, text)


def test_lookaround_and_anchor_patterns_skip_the_whole_text_step() -> None:
    assert compile_pattern(r"a(?!b)", ignore_case=False).whole is None
    assert compile_pattern(r"\Aa", ignore_case=False).whole is None
    assert compile_pattern(r"a\s*b", ignore_case=False).whole is not None
