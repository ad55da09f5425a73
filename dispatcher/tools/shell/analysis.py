"""What the shell rules conclude about a command line, and where it runs.

``Analysis`` gathers the blocklist's verdicts, the rating, the parts (scope
keys for session grants) and the paths a line writes; ``Where`` is the
workspace and working folder that arguments are resolved against, and
``points_outside`` is the one test of whether a word names a path outside
it. Every layer of the rules (blocklist.py, rating.py, rules.py) reports
into these shapes, so they live apart from all of them.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from dataclasses import dataclass, field

from dispatcher.tool import CallRating
from dispatcher.tools.shell.tokens import Word

_ORDER = {CallRating.SAFE: 0, CallRating.DEV: 1, CallRating.DANGEROUS: 2}
HARMLESS_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
MAX_GLOB_MATCHES = 256
GLOB = re.compile(r"[*?\[]")


def max_rating(a: CallRating, b: CallRating) -> CallRating:
    """The stricter of two ratings."""
    return a if _ORDER[a] >= _ORDER[b] else b


@dataclass(frozen=True, slots=True)
class Where:
    """Where a command runs: the real paths of the workspace root and of the
    working directory. With it, arguments are resolved (symlinks included);
    without it, only their spelling is judged."""

    workspace: str
    cwd: str

    @classmethod
    def of(cls, workspace: str, cwd: str | None = None) -> Where:
        root = os.path.realpath(workspace)
        return cls(root, os.path.realpath(os.path.join(root, cwd or ".")))

    def contains(self, real: str) -> bool:
        return real == self.workspace or real.startswith(self.workspace.rstrip(os.sep) + os.sep)


@dataclass(frozen=True, slots=True)
class Part:
    """One simple command of a line: its scope key (``git status``, ``ls``)
    and its own rating. A session grant covers a part with the same key and
    a rating no higher than the granted one."""

    key: str
    rating: CallRating


@dataclass(slots=True)
class Analysis:
    """What the rules concluded about one command line.

    ``writes``: the workspace paths, as written (relative to the command's
    working folder), that the line's redirections, option values (``sort
    -o.env`` -> ``.env``, ``--output=.env``) and written operands (``tee
    F``, ``uniq IN OUT``, ``black src``: a folder stands for files under
    it) would write, in order; a ``cd`` earlier in the line is not
    followed. Targets outside the workspace are not listed (they rate the
    line dangerous). ``writes_unknown``: the line writes
    somewhere no static reading can name (``> $F``, ``file -C``)."""

    blocked: list[str] = field(default_factory=list)
    rating: CallRating = CallRating.SAFE
    programs: set[str] = field(default_factory=set)
    parts: list[Part] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    writes_unknown: bool = False

    def merge(self, other: Analysis) -> None:
        for reason in other.blocked:
            if reason not in self.blocked:
                self.blocked.append(reason)
        self.rating = max_rating(self.rating, other.rating)
        self.programs |= other.programs
        self.parts.extend(other.parts)
        self.writes.extend(w for w in other.writes if w not in self.writes)
        self.writes_unknown = self.writes_unknown or other.writes_unknown

    def lift(self, rating: CallRating) -> None:
        self.rating = max_rating(self.rating, rating)

    def block(self, reason: str) -> None:
        if reason not in self.blocked:
            self.blocked.append(reason)
        self.rating = CallRating.DANGEROUS


def points_outside(word: Word, where: Where | None = None) -> bool:
    """An argument naming a path outside the workspace: absolute, ``~``,
    ``..`` escaping, a glob component that can match ``..``, or (with
    ``where``) a path that resolves through a symlink out of it."""
    text = word.text
    if text.startswith("--") and "=" in text:
        text = text.split("=", 1)[1]
    elif text.startswith("-"):
        # A value glued to a short option: -f/etc/passwd, -f~/x, -f../x.
        cut = min((k for k in (text.find("/"), text.find("~")) if k > 0), default=-1)
        if cut == -1 and ".." not in text:
            return False
        text = text[cut:] if cut != -1 else text[text.index("..") :]
    if text in HARMLESS_SINKS or not text:
        return False
    if text.startswith(("/", "~")):
        return True
    components = text.split("/")
    if any(GLOB.search(c) and fnmatch.fnmatchcase("..", c) for c in components):
        return True
    if where is None:
        return ".." in components
    target = os.path.normpath(os.path.join(where.cwd, text))
    if not where.contains(target):
        return True
    if GLOB.search(text):
        matches = glob.glob(glob.escape(where.cwd) + "/" + text)[:MAX_GLOB_MATCHES]
        return any(not where.contains(os.path.realpath(m)) for m in matches)
    return not where.contains(os.path.realpath(os.path.join(where.cwd, text)))
