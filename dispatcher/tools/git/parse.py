"""Parsers for git's machine-readable output (porcelain v2, --numstat -z,
log with separator bytes, for-each-ref). Paths are decoded as UTF-8; an
undecodable byte shows as U+FFFD rather than failing the whole call."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

_STATUS_WORDS = {
    ".": "unmodified",
    "M": "modified",
    "T": "type changed",
    "A": "added",
    "D": "deleted",
    "R": "renamed",
    "C": "copied",
    "U": "unmerged",
}
LOG_FORMAT = "%H%x1f%h%x1f%an%x1f%ae%x1f%aI%x1f%P%x1f%s%x1f%b%x1e"


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@dataclass(slots=True)
class BranchInfo:
    """The ``# branch.*`` headers of porcelain v2."""

    head: str | None = None  # None when detached
    oid: str | None = None  # None before the first commit
    upstream: str | None = None
    ahead: int | None = None
    behind: int | None = None


@dataclass(slots=True)
class StatusEntry:
    """One changed, untracked, ignored or conflicted path."""

    path: str
    kind: str  # changed | renamed | copied | unmerged | untracked | ignored
    index: str  # the staged change, as a word
    worktree: str  # the unstaged change, as a word
    orig_path: str | None = None


@dataclass(slots=True)
class Status:
    """A parsed ``git status``."""

    branch: BranchInfo = field(default_factory=BranchInfo)
    entries: list[StatusEntry] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "branch": asdict(self.branch),
            "entries": [asdict(e) for e in self.entries],
            "clean": not self.entries,
        }


def parse_status_v2(raw: bytes) -> Status:
    """``git status --porcelain=v2 --branch -z``."""
    status = Status()
    records = raw.split(b"\x00")
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if not rec:
            continue
        if rec.startswith(b"# "):
            _branch_header(status.branch, _text(rec[2:]))
            continue
        tag = rec[:1]
        if tag == b"1":
            fields = rec.split(b" ", 8)
            xy = _text(fields[1])
            status.entries.append(_entry(_text(fields[8]), "changed", xy))
        elif tag == b"2":
            fields = rec.split(b" ", 9)
            xy = _text(fields[1])
            kind = "renamed" if fields[8].startswith(b"R") else "copied"
            orig = _text(records[i]) if i < len(records) else None
            i += 1
            status.entries.append(_entry(_text(fields[9]), kind, xy, orig))
        elif tag == b"u":
            fields = rec.split(b" ", 10)
            status.entries.append(_entry(_text(fields[10]), "unmerged", _text(fields[1])))
        elif tag == b"?":
            status.entries.append(
                StatusEntry(_text(rec[2:]), "untracked", "unmodified", "untracked")
            )
        elif tag == b"!":
            status.entries.append(StatusEntry(_text(rec[2:]), "ignored", "unmodified", "ignored"))
    return status


def _branch_header(branch: BranchInfo, line: str) -> None:
    key, _, value = line.partition(" ")
    if key == "branch.oid":
        branch.oid = None if value == "(initial)" else value
    elif key == "branch.head":
        branch.head = None if value == "(detached)" else value
    elif key == "branch.upstream":
        branch.upstream = value
    elif key == "branch.ab":
        ahead, _, behind = value.partition(" ")
        branch.ahead = int(ahead.lstrip("+"))
        branch.behind = int(behind.lstrip("-"))


def _entry(path: str, kind: str, xy: str, orig: str | None = None) -> StatusEntry:
    padded = xy + ".."
    index, worktree = padded[0], padded[1]
    return StatusEntry(
        path,
        kind,
        _STATUS_WORDS.get(index, index),
        _STATUS_WORDS.get(worktree, worktree),
        orig,
    )


@dataclass(slots=True)
class NumstatEntry:
    """Lines added and removed in one file (None for binary files)."""

    path: str
    added: int | None  # None for binary files
    removed: int | None
    old_path: str | None = None

    @property
    def binary(self) -> bool:
        return self.added is None


def parse_numstat_z(raw: bytes) -> list[NumstatEntry]:
    """``git diff --numstat -z``: renames carry an empty path and two more records."""
    out: list[NumstatEntry] = []
    records = raw.split(b"\x00")
    i = 0
    while i < len(records):
        rec = records[i]
        i += 1
        if not rec:
            continue
        parts = rec.split(b"\t", 2)
        if len(parts) != 3:
            continue
        added = None if parts[0] == b"-" else int(parts[0])
        removed = None if parts[1] == b"-" else int(parts[1])
        if parts[2]:
            out.append(NumstatEntry(_text(parts[2]), added, removed))
        elif i + 1 < len(records):
            old, new = _text(records[i]), _text(records[i + 1])
            i += 2
            out.append(NumstatEntry(new, added, removed, old))
    return out


@dataclass(slots=True)
class Commit:
    """One commit of ``git log``."""

    sha: str
    short: str
    author: str
    email: str
    date: str
    parents: list[str]
    subject: str
    body: str


def parse_log(raw: bytes) -> list[Commit]:
    """``git log --format=LOG_FORMAT``."""
    commits: list[Commit] = []
    for rec in _text(raw).split("\x1e"):
        rec = rec.lstrip("\n")
        if not rec:
            continue
        f = rec.split("\x1f")
        if len(f) < 8:
            continue
        commits.append(
            Commit(f[0], f[1], f[2], f[3], f[4], f[5].split(), f[6], "\x1f".join(f[7:]).strip())
        )
    return commits


@dataclass(slots=True)
class Branch:
    """One local branch."""

    name: str
    commit: str
    current: bool
    upstream: str | None


BRANCH_FORMAT = "%(refname:short)%00%(objectname:short)%00%(HEAD)%00%(upstream:short)"


def parse_branches(raw: bytes) -> list[Branch]:
    """``git for-each-ref --format=BRANCH_FORMAT refs/heads``."""
    out: list[Branch] = []
    for line in raw.split(b"\n"):
        if not line:
            continue
        parts = line.split(b"\x00")
        if len(parts) < 4:
            continue
        out.append(
            Branch(_text(parts[0]), _text(parts[1]), parts[2] == b"*", _text(parts[3]) or None)
        )
    return out
