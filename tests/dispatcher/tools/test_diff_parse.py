"""The unified-diff parser and the pure-Python applier, without the tool."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.tools.files.textdiff import unified_file_diff
from dispatcher.tools.patch.diff_apply import HunkFailed, apply_file_patch
from dispatcher.tools.patch.diff_parse import (
    PatchMalformed,
    parse_unified_diff,
    render_unified_diff,
)

GIT_DIFF = """\
diff --git a/src/app.py b/src/app.py
index 83db48f..bf269f4 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 import os
-x = 1
+x = 2
 print(x)
diff --git a/new.txt b/new.txt
new file mode 100644
--- /dev/null
+++ b/new.txt
@@ -0,0 +1,2 @@
+hello
+world
"""


def test_git_style_headers_and_status() -> None:
    files = parse_unified_diff(GIT_DIFF)
    assert [(f.old_path, f.new_path, f.status) for f in files] == [
        ("src/app.py", "src/app.py", "modified"),
        (None, "new.txt", "created"),
    ]
    assert files[0].hunks[0].old_lines == ["import os", "x = 1", "print(x)"]
    assert files[0].hunks[0].new_lines == ["import os", "x = 2", "print(x)"]


def test_plain_diff_headers_with_timestamps_and_quoted_names() -> None:
    text = (
        "--- old/file.txt\t2024-01-01 00:00:00.000000000 +0000\n"
        "+++ new/file.txt\t2024-01-02 00:00:00.000000000 +0000\n"
        "@@ -1 +1 @@\n-a\n+b\n"
        '--- "a/we\\tird \\303\\251.txt"\n'
        '+++ "b/we\\tird \\303\\251.txt"\n'
        "@@ -1 +1 @@\n-c\n+d\n"
    )
    files = parse_unified_diff(text)
    assert (files[0].old_path, files[0].new_path) == ("old/file.txt", "new/file.txt")
    assert files[1].new_path == "we\tird é.txt"


def test_counts_are_corrected_from_the_body() -> None:
    # Header says 2 old lines, body has 3; and a second under-counted hunk.
    text = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n c\n+B\n@@ -9,1 +9,1 @@\n x\n-y\n+Y\n"
    files = parse_unified_diff(text)
    hunks = files[0].hunks
    assert [ln.op + ln.text for ln in hunks[0].lines] == [" a", "-b", " c", "+B"]
    assert [ln.op + ln.text for ln in hunks[1].lines] == [" x", "-y", "+Y"]
    assert hunks[0].counts_corrected and hunks[1].counts_corrected
    assert "@@ -9,2 +9,2 @@" in render_unified_diff(files)


def test_no_newline_markers() -> None:
    text = (
        "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        "\\ No newline at end of file\n"
    )
    hunk = parse_unified_diff(text)[0].hunks[0]
    assert hunk.old_no_newline and hunk.new_no_newline


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("@@ -1 +1 @@\n-a\n+b\n", "before any '---'/'\\+\\+\\+' file header"),
        ("just some prose\n", "contains no hunks"),
        ("--- a/x\n+++ b/y\nrename from x\n", "renames and copies are not supported"),
        ("--- a/x\n+++ b/x\nGIT binary patch\n", "binary patches"),
        ("--- a/x\n+++ b/x\n@@ -1,a +1 @@\n-a\n", "malformed hunk header"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "both sides"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(PatchMalformed, match=message):
        parse_unified_diff(text)


def test_headerless_hunk_with_default_path() -> None:
    files = parse_unified_diff("@@ -1 +1 @@\n-a\n+b\n", default_path="f.txt")
    assert files[0].new_path == "f.txt"


def _apply(original: str | None, diff: str) -> str | None:
    return apply_file_patch("f", original, parse_unified_diff(diff)[0]).text


def test_apply_with_offset_finds_nearest_match() -> None:
    original = "".join(f"{i}\n" for i in range(1, 31))
    # The header says line 5, the context is really at line 20.
    diff = "--- a/f\n+++ b/f\n@@ -5,3 +5,3 @@\n 19\n-20\n+twenty\n 21\n"
    assert _apply(original, diff) == original.replace("20\n", "twenty\n")


def test_apply_keeps_and_changes_final_newline() -> None:
    assert (
        _apply(
            "a\nb", "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        )
        == "a\nc\n"
    )
    assert (
        _apply("a\nb\n", "--- a/f\n+++ b/f\n@@ -2 +2 @@\n-b\n+c\n\\ No newline at end of file\n")
        == "a\nc"
    )
    assert _apply("a\nb\n", "--- a/f\n+++ b/f\n@@ -1,2 +1 @@\n a\n-b\n") == "a\n"


def test_apply_crlf_file_with_lf_patch() -> None:
    original = "a\r\nb\r\nc\r\n"
    assert (
        _apply(original, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n") == "a\r\nB\r\nc\r\n"
    )


def test_apply_create_and_delete() -> None:
    assert _apply(None, "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n") == "x\ny\n"
    assert _apply("x\ny\n", "--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n") is None


def test_apply_failure_names_the_hunk_and_line() -> None:
    with pytest.raises(HunkFailed, match=r"hunk #1 .* expected 'b' at line 2 but found 'B'"):
        _apply("a\nB\nc\n", "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+x\n c\n")


def test_apply_refuses_partial_delete() -> None:
    with pytest.raises(HunkFailed, match="would remain"):
        _apply("x\ny\nz\n", "--- a/f\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n")


# -- round trip: our diffs are valid input for our applier ---------------------

_lines = st.lists(st.sampled_from(["a", "b", "c", "", "  x", "d\r"]), max_size=30)


@settings(max_examples=200, deadline=None)
@given(before=_lines, after=_lines, end_a=st.booleans(), end_b=st.booleans())
def test_unified_file_diff_round_trips(
    before: list[str], after: list[str], end_a: bool, end_b: bool
) -> None:
    old = "\n".join(before) + ("\n" if end_a and before else "")
    new = "\n".join(after) + ("\n" if end_b and after else "")
    diff = unified_file_diff("f", old, new)
    if old == new:
        assert diff == ""
        return
    result = apply_file_patch("f", old, parse_unified_diff(diff)[0]).text
    assert result == new


def test_unified_file_diff_numbers_lines_in_the_whole_file() -> None:
    before = "".join(f"{i}\n" for i in range(1, 50_001))
    after = before.replace("40000\n", "forty thousand\n")
    diff = unified_file_diff("big", before, after)
    assert "@@ -39997,7 +39997,7 @@" in diff
    assert diff.count("\n") == 2 + 1 + 7 + 1
