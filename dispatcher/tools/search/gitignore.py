"""A small .gitignore matcher (the rules of gitignore(5) that matter for
listing and searching a working tree).

Rules from ``.git/info/exclude`` and every ``.gitignore`` between the
workspace root and a path apply to it, shallower files first, and the last
matching rule wins; ``!`` re-includes. A pattern with a '/' before its end is
anchored to its .gitignore's folder, one without matches a name at any depth,
and a trailing '/' matches folders only. As in git, a file inside an ignored
folder cannot be re-included: the walker never enters ignored folders.
Only the workspace's own files count; ignore files above the workspace root
and the user's global excludes file do not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dispatcher.tools.search.globbing import glob_to_regex


@dataclass(frozen=True, slots=True)
class IgnoreRule:
    """One pattern line, compiled; ``base`` is its .gitignore's folder ('' = root)."""

    regex: re.Pattern[str]
    negate: bool
    dir_only: bool
    # No '/' before the end: the pattern is matched against the last
    # path component only, as git does.
    basename_only: bool
    base: str
    source: str


def parse_gitignore(text: str, base: str = "") -> list[IgnoreRule]:
    """Compile every pattern of one ignore file whose folder is ``base``."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw
        if not line or line.startswith("#"):
            continue
        # Trailing spaces are dropped unless escaped with a backslash.
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        if dir_only:
            line = line[:-1]
        if not line:
            continue
        anchored = "/" in line
        if anchored:
            # Only one leading '/' anchors; git matches any further one literally.
            body = _anchored_regex(line[1:] if line.startswith("/") else line)
        else:
            body = glob_to_regex(line)
        regex = re.compile(body + r"\Z", re.DOTALL)
        rules.append(IgnoreRule(regex, negate, dir_only, not anchored, base, raw))
    return rules


def _anchored_regex(pattern: str) -> str:
    """Git compares the literal head of an anchored pattern (up to the first
    wildcard) separately and wildmatches only the rest, so a ``**`` right after
    that head starts a component: ``a**/b`` matches ``ab`` and ``a/x/b`` in git.
    Doing the same split here keeps this matcher in step with git."""
    cut = len(pattern)
    for k, ch in enumerate(pattern):
        if ch in "*?[\\":
            cut = k
            break
    return re.escape(pattern[:cut]) + glob_to_regex(pattern[cut:])


def is_ignored(rules: list[IgnoreRule], rel_path: str, is_dir: bool) -> bool:
    """Whether ``rel_path`` (relative to the workspace root) is ignored by ``rules``
    (ordered shallow to deep). Does not look at the path's parent folders."""
    ignored = False
    for rule in rules:
        if rule.base:
            prefix = rule.base + "/"
            if not rel_path.startswith(prefix):
                continue
            sub = rel_path[len(prefix) :]
        else:
            sub = rel_path
        if rule.dir_only and not is_dir:
            continue
        if rule.basename_only:
            sub = sub.rsplit("/", 1)[-1]
        if rule.regex.match(sub):
            ignored = not rule.negate
    return ignored
