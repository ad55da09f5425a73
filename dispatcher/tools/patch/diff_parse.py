"""Parse unified diffs (plain ``diff -u`` and ``git diff`` flavours).

The parser is lenient where models are often wrong and strict where guessing
would be dangerous: hunk line counts that disagree with the hunk body are
corrected from the body, but renames, copies and binary patches are refused,
and a hunk before any file header needs an explicit target path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dispatcher.errors import ToolExecutionError

_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


class PatchMalformed(ToolExecutionError):
    """The patch text is not a unified diff this tool can apply."""


@dataclass(slots=True)
class HunkLine:
    """One body line: op is ' ' (context), '-' (removed) or '+' (added)."""

    op: str
    text: str
    # A "\ No newline at end of file" marker followed this line.
    no_newline: bool = False


@dataclass(slots=True)
class Hunk:
    """One ``@@`` section: where it claims to start, and its body lines."""

    old_start: int
    new_start: int
    lines: list[HunkLine]
    # 1-based line of the @@ header in the patch text, for error messages.
    patch_line: int
    counts_corrected: bool = False

    @property
    def old_lines(self) -> list[str]:
        return [ln.text for ln in self.lines if ln.op != "+"]

    @property
    def new_lines(self) -> list[str]:
        return [ln.text for ln in self.lines if ln.op != "-"]

    @property
    def old_no_newline(self) -> bool:
        old = [ln for ln in self.lines if ln.op != "+"]
        return bool(old) and old[-1].no_newline

    @property
    def new_no_newline(self) -> bool:
        new = [ln for ln in self.lines if ln.op != "-"]
        return bool(new) and new[-1].no_newline

    def header(self) -> str:
        old_n, new_n = len(self.old_lines), len(self.new_lines)
        return f"@@ -{self.old_start},{old_n} +{self.new_start},{new_n} @@"


@dataclass(slots=True)
class FilePatch:
    """The hunks for one file. A path of None stands for /dev/null."""

    old_path: str | None
    new_path: str | None
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.old_path is None:
            return "created"
        if self.new_path is None:
            return "deleted"
        return "modified"


def parse_unified_diff(text: str, *, default_path: str | None = None) -> list[FilePatch]:
    """Every file section of ``text``; raises PatchMalformed naming the line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    files: list[FilePatch] = []
    current: FilePatch | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old = _header_path(line[4:])
            new = _header_path(lines[i + 1][4:])
            old, new = _strip_git_prefixes(old, new)
            if old is None and new is None:
                raise PatchMalformed(f"line {i + 1}: both sides of the file header are /dev/null")
            current = FilePatch(old, new)
            files.append(current)
            i += 2
            continue
        if line.startswith("@@"):
            if current is None:
                if default_path is None:
                    raise PatchMalformed(
                        f"line {i + 1}: a hunk comes before any '---'/'+++' file header; "
                        "add the headers or give the path argument"
                    )
                current = FilePatch(default_path, default_path)
                files.append(current)
            hunk, i = _parse_hunk(lines, i)
            current.hunks.append(hunk)
            continue
        for prefix in ("rename from", "rename to", "copy from", "copy to"):
            if line.startswith(prefix):
                raise PatchMalformed(
                    f"line {i + 1}: renames and copies are not supported; "
                    "write the new file and delete the old one instead"
                )
        if line.startswith(("GIT binary patch", "Binary files ")):
            raise PatchMalformed(f"line {i + 1}: binary patches are not supported")
        # Anything else (diff --git, index, mode lines, prose) carries nothing we need.
        i += 1
    files = [f for f in files if f.hunks]
    if not files:
        raise PatchMalformed("the patch contains no hunks ('@@ -a,b +c,d @@' sections)")
    return files


def _parse_hunk(lines: list[str], start: int) -> tuple[Hunk, int]:
    match = _HUNK_HEADER.match(lines[start])
    if match is None:
        raise PatchMalformed(
            f"line {start + 1}: malformed hunk header {lines[start][:80]!r}; "
            "expected '@@ -start,count +start,count @@'"
        )
    old_start, old_count = int(match[1]), int(match[2] if match[2] is not None else 1)
    new_start, new_count = int(match[3]), int(match[4] if match[4] is not None else 1)
    hunk = Hunk(old_start, new_start, [], start + 1)
    old_seen = new_seen = 0
    i = start + 1
    # First the body the header's counts promise.
    while i < len(lines) and (old_seen < old_count or new_seen < new_count):
        line = lines[i]
        if _starts_new_section(lines, i):
            break
        if line.startswith("\\"):
            if hunk.lines:
                hunk.lines[-1].no_newline = True
            i += 1
            continue
        op, body = (" ", "") if line == "" else (line[0], line[1:])
        if op not in " +-":
            break
        hunk.lines.append(HunkLine(op, body))
        old_seen += op != "+"
        new_seen += op != "-"
        i += 1
    if old_seen != old_count or new_seen != new_count:
        hunk.counts_corrected = True
    # Then lines that plainly continue the hunk although the counts said
    # stop (models under-count); dropping them would lose changes silently.
    while i < len(lines):
        line = lines[i]
        if line.startswith("\\"):
            if hunk.lines:
                hunk.lines[-1].no_newline = True
            i += 1
            continue
        if line == "" or line[0] not in " +-" or _starts_new_section(lines, i):
            break
        hunk.lines.append(HunkLine(line[0], line[1:]))
        hunk.counts_corrected = True
        i += 1
    if not hunk.lines:
        raise PatchMalformed(f"line {start + 1}: the hunk has no body")
    return hunk, i


def _starts_new_section(lines: list[str], i: int) -> bool:
    line = lines[i]
    if line.startswith(("@@", "diff --git ")):
        return True
    return line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _header_path(raw: str) -> str | None:
    value = raw.split("\t", 1)[0].rstrip("\r")
    value = _c_unquote(value) if value.startswith('"') else value.rstrip()
    if value == "/dev/null":
        return None
    if not value:
        raise PatchMalformed("a file header has an empty path")
    return value


def _strip_git_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's ``a/`` and ``b/`` prefixes (what ``patch -p1`` does for git diffs)."""
    old_ok = old is None or old.startswith("a/")
    new_ok = new is None or new.startswith("b/")
    if old_ok and new_ok:
        return (old[2:] if old else None, new[2:] if new else None)
    return old, new


def _c_unquote(quoted: str) -> str:
    """Undo git's C-style quoting of a path with unusual characters."""
    body = quoted[1 : quoted.rindex('"')] if quoted.count('"') >= 2 else quoted[1:]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in _C_ESCAPES:
                out.append(_C_ESCAPES[nxt])
                i += 2
                continue
            if body[i + 1 : i + 4].isdigit() and len(body[i + 1 : i + 4]) == 3:
                out.append(int(body[i + 1 : i + 4], 8) & 0xFF)
                i += 4
                continue
        out.extend(ch.encode("utf-8"))
        i += 1
    return out.decode("utf-8", errors="surrogateescape")


def render_unified_diff(files: list[FilePatch]) -> str:
    """Re-emit parsed patches with exact counts (what the system ``patch`` gets)."""
    out: list[str] = []
    for fp in files:
        out.append(f"--- {fp.old_path if fp.old_path is not None else '/dev/null'}")
        out.append(f"+++ {fp.new_path if fp.new_path is not None else '/dev/null'}")
        for hunk in fp.hunks:
            out.append(hunk.header())
            for ln in hunk.lines:
                out.append(ln.op + ln.text)
                if ln.no_newline:
                    out.append("\\ No newline at end of file")
    return "\n".join(out) + "\n"
