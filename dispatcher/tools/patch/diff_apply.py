"""Apply parsed hunks to text, in pure Python.

Context must match exactly (no fuzz); a hunk may sit at another line than its
header says (the nearest exact match wins, as GNU patch's offset search does).
A file with CRLF line ends also takes a patch written with bare LF lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.tools.patch.diff_parse import FilePatch, Hunk


class HunkFailed(Exception):
    """A hunk's context or removed lines are not in the file."""

    def __init__(self, path: str, index: int, hunk: Hunk, detail: str) -> None:
        super().__init__(f"{path}: hunk #{index} ({hunk.header()}) does not apply: {detail}")
        self.path = path
        self.index = index


@dataclass(slots=True)
class AppliedFile:
    """The new text of one file (None when the patch deletes it) and where each
    hunk landed, as offsets from the line its header named."""

    text: str | None
    offsets: list[int]


def split_lines(text: str) -> tuple[list[str], bool]:
    """Lines without their '\\n', and whether the text ended with one."""
    if not text:
        return [], False
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
        return lines, True
    return lines, False


def apply_file_patch(path: str, original: str | None, patch: FilePatch) -> AppliedFile:
    """The result of applying every hunk of ``patch`` to ``original``
    (None when the file does not exist); raises HunkFailed."""
    lines, ends_with_newline = split_lines(original or "")
    crlf = _uses_crlf(lines) and not any(
        ln.text.endswith("\r") for h in patch.hunks for ln in h.lines
    )
    out: list[str] = []
    pos = 0
    drift = 0
    offsets: list[int] = []
    final_newline = ends_with_newline
    for number, hunk in enumerate(patch.hunks, start=1):
        old = hunk.old_lines
        new = hunk.new_lines
        if crlf:
            old = [x + "\r" for x in old]
            new = [x + "\r" for x in new]
        declared = hunk.old_start if not old else hunk.old_start - 1
        at = _find(lines, old, max(pos, declared + drift), pos)
        if at is None:
            raise HunkFailed(path, number, hunk, _mismatch(lines, old, max(0, declared)))
        if hunk.old_no_newline and (at + len(old) != len(lines) or ends_with_newline):
            raise HunkFailed(
                path, number, hunk, "it expects the file to end without a newline, but it does not"
            )
        offsets.append(at - declared)
        drift = at - declared
        out.extend(lines[pos:at])
        out.extend(new)
        pos = at + len(old)
        if pos == len(lines):
            # The hunk reaches the end of the file, so it decides the final newline.
            # A hunk that only removes the last lines leaves an earlier line, which
            # had a newline, at the end.
            final_newline = not hunk.new_no_newline if new else True
    out.extend(lines[pos:])
    if patch.status == "deleted":
        if out:
            raise HunkFailed(
                path,
                len(patch.hunks),
                patch.hunks[-1],
                f"the patch deletes the file but {len(out)} of its lines would remain",
            )
        return AppliedFile(None, offsets)
    if not out:
        return AppliedFile("", offsets)
    return AppliedFile("\n".join(out) + ("\n" if final_newline else ""), offsets)


def _uses_crlf(lines: list[str]) -> bool:
    if not lines:
        return False
    return sum(1 for x in lines if x.endswith("\r")) * 2 > len(lines)


def _find(lines: list[str], block: list[str], expected: int, floor: int) -> int | None:
    """The start of the exact match of ``block`` nearest to ``expected``, not before ``floor``."""
    last_start = len(lines) - len(block)
    if last_start < floor:
        return None
    if not block:
        return min(max(expected, floor), len(lines))
    expected = min(max(expected, floor), last_start)
    first = block[0]
    n = len(block)
    for distance in range(0, max(expected - floor, last_start - expected) + 1):
        for candidate in (expected - distance, expected + distance) if distance else (expected,):
            if (
                floor <= candidate <= last_start
                and lines[candidate] == first
                and lines[candidate : candidate + n] == block
            ):
                return candidate
    return None


def _mismatch(lines: list[str], block: list[str], at: int) -> str:
    """Why ``block`` is not at line ``at``: the first differing line, quoted."""
    if at >= len(lines):
        return f"the file has only {len(lines)} lines"
    for i, want in enumerate(block):
        have = lines[at + i] if at + i < len(lines) else None
        if have != want:
            got = "end of file" if have is None else repr(have[:80])
            return (
                f"expected {want[:80]!r} at line {at + i + 1} but found {got}, "
                "and no exact match elsewhere"
            )
    return "its lines are out of order with the previous hunk"
