"""Workspace path globs, compiled once.

Patterns use wcmatch's glob dialect with ``**`` (any depth), braces
(``*.{ts,tsx}``) and ``*`` matching dot files too. As in ``.gitignore``, a
pattern without a ``/`` names a file anywhere (``.env`` also matches
``app/.env``, ``*.py`` matches ``src/a.py``), and a pattern matching a folder
covers everything inside it (``secrets`` covers ``secrets/key.pem``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from wcmatch import glob

FLAGS = glob.GLOBSTAR | glob.BRACE | glob.DOTGLOB


class PathGlobs:
    """A compiled set of path patterns matched against workspace-relative paths."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        expanded: list[str] = []
        for pattern in self.patterns:
            clean = pattern.strip().lstrip("/").removeprefix("./") or "."
            expanded.append(clean)
            if "/" not in clean.rstrip("/"):
                expanded.append("**/" + clean)
        self._matcher = glob.compile(expanded, flags=FLAGS) if expanded else None

    def __bool__(self) -> bool:
        return self._matcher is not None

    def matches(self, rel_path: str) -> bool:
        """Whether ``rel_path`` (workspace-relative, ``/`` separators) or one of
        its parent folders matches a pattern."""
        if self._matcher is None:
            return False
        path = posixpath.normpath(rel_path.replace("\\", "/")).lstrip("/")
        while path and path not in (".", ".."):
            if self._matcher.match(path):
                return True
            path = posixpath.dirname(path)
        return False

    def first_match(self, paths: Iterable[str]) -> str | None:
        """The first of ``paths`` that matches, or None."""
        for path in paths:
            if self.matches(path):
                return path
        return None


def check_globs(patterns: list[str]) -> list[str]:
    """Pydantic validator: every pattern compiles (the error names the bad one)."""
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip() or "\x00" in pattern:
            raise ValueError(f"{pattern!r} is not a usable glob pattern")
        try:
            glob.compile([pattern], flags=FLAGS)
        except Exception as exc:  # wcmatch raises plain ValueErrors of its own kinds
            raise ValueError(f"glob {pattern!r} does not compile: {exc}") from None
    return patterns
