"""Which workspace paths a sandbox makes read-only or hides, found at each spawn.

``guardrails.protected_files`` and ``workspaces.shell.sandbox_hide_files``
are globs relative to the workspace (the guardrails' dialect, globs.py: a
pattern without ``/`` names a file anywhere; a pattern matching a folder
covers what is inside it). A mount needs a path, so before each sandboxed
spawn the globs are expanded against the workspace as it is then:

- a pattern with no glob characters is looked up directly (no walk);
- a pattern made of a literal folder and only ``*``/``**`` after it
  (``secrets/**``) names that folder: it is mounted whole, so files created
  in it later are covered too;
- any other pattern (``*.pem``, and the "anywhere" form of ``.env``) needs a
  walk of the workspace: breadth first, symbolic links never followed,
  bounded by ``MAX_SCAN_ENTRIES`` entries (what lies past the bound is not
  looked at: say so, never hang a spawn on a huge tree).

A protected path that does not exist gets no mount: nothing is ever
created in the workspace for it (a placeholder would be a file the user
never made, in their checkout). A sandboxed process can then create it;
the guardrail still refuses a call that names it, and what such a process
creates is a new file: no secret is there to overwrite (specs/security.md,
"What is not guaranteed").

A spawn whose workspace is bound read-only (searches, git's reads) needs no
read-only binds: ``expand(root, read_only=False)`` looks for the hidden
globs only. The walk keeps its folder listings between spawns
(dispatcher/sandbox_scan.py): a spawn lstats each folder it reaches and
lists again only those that changed. A hidden glob is also looked for
inside a protected folder (``*.pem`` under ``secrets/**``): the read-only
bind shows that folder, the hidden mount on top covers the match.

What a spawn must pin: every folder between the workspace root and a match
(outermost first). A folder that holds a mount can still be renamed, and a
fresh folder of the old name would then hold a fresh, writable file; a
folder that is itself a mount point cannot be renamed or removed (EBUSY).

Every path here is real (no symbolic link on the way), checked with lstat;
``Found.identities`` records each one's (device, inode) so the sandbox can
verify, inside, that the mount it got is the file it looked at (a
concurrently running process could swap a name for a symbolic link between
this look and bubblewrap's mount).
"""

from __future__ import annotations

import itertools
import os
import posixpath
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from wcmatch import glob

from dispatcher.pipeline.globs import FLAGS, PathGlobs
from dispatcher.sandbox_scan import Entry, Listing, ListingCache

# Entries (files and folders) one spawn's walk may look at; past it the walk
# stops (deep matches past the bound are not covered: specs/security.md).
MAX_SCAN_ENTRIES = 20_000
# Mounts one spawn may add for the globs: past it the spawn is refused
# (each mount costs bubblewrap a syscall or three and the kernel a mount).
MAX_MATCHES = 512


class TooManyMatches(Exception):
    """The globs name more paths than one sandbox will mount."""


@dataclass(frozen=True, slots=True)
class WorkspaceGlobs:
    """Workspace-relative globs every sandbox of a server enforces with mounts:
    ``read_only`` (``guardrails.protected_files``) and ``hidden``
    (``workspaces.shell.sandbox_hide_files``: content replaced by an empty one)."""

    read_only: tuple[str, ...] = ()
    hidden: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.read_only or self.hidden)


NO_FILES = WorkspaceGlobs()


@dataclass(slots=True)
class Found:
    """What one expansion found: real absolute paths, each existing."""

    read_only: list[str] = field(default_factory=list)
    hidden_files: list[str] = field(default_factory=list)
    hidden_dirs: list[str] = field(default_factory=list)
    pinned: list[str] = field(default_factory=list)  # outermost first
    identities: list[tuple[str, int, int]] = field(default_factory=list)
    truncated: bool = False  # the walk stopped at MAX_SCAN_ENTRIES


class _Patterns:
    """One glob list, split by how it is found (see the module docstring).

    The walk matches each entry once (inside a folder a list covers, that
    list is not matched again, so parents never need matching): a pattern
    without ``/`` against the entry's name, the others against its relative
    path, each list as one
    regular expression translated by wcmatch (the guardrails' dialect). Per
    entry that is about a microsecond, where ``PathGlobs.matches`` (parents
    included) takes some 30 (benchmarks/sandbox_binds.py)."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.globs = PathGlobs(patterns)
        self.literals: list[str] = []  # literal paths (relative)
        self.folders: list[str] = []  # literal folders covered whole
        self.needs_walk = False
        names: list[str] = []
        paths: list[str] = []
        for pattern in self.globs.patterns:
            clean = pattern.strip().lstrip("/").removeprefix("./").rstrip("/") or "."
            (paths if "/" in clean else names).append(clean)
            parts = clean.split("/")
            literal = list(itertools.takewhile(lambda p: not glob.is_magic(p, flags=FLAGS), parts))
            if len(literal) == len(parts):
                self.literals.append(clean)
                # Without a "/", the guardrail's pattern also names it anywhere.
                self.needs_walk |= "/" not in clean
            elif literal and _only_stars(parts[len(literal) :]):
                self.folders.append("/".join(literal))
            else:
                self.needs_walk = True
        self._names = _regex(names)
        self._paths = _regex(paths)

    def covers(self, rel: str, name: str) -> bool:
        """Whether the entry at ``rel`` (named ``name``) is covered, its
        parents being known not to be."""
        if self._names is not None and self._names.match(name):
            return True
        return (self._paths is not None and self._paths.match(rel) is not None) or (
            rel in self.folders
        )


def _regex(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    included, _ = glob.translate(patterns, flags=FLAGS)
    return re.compile("|".join(f"(?:{rx})" for rx in included))


def _only_stars(parts: list[str]) -> bool:
    return all(p in ("*", "**") for p in parts)


class WorkspaceMatcher:
    """Compiled once per sandbox (one workspace); ``expand`` runs at each
    spawn, from any thread, its walk cached (dispatcher/sandbox_scan.py)."""

    def __init__(self, globs: WorkspaceGlobs, *, now: Callable[[], int] = time.time_ns) -> None:
        self.read_only = _Patterns(globs.read_only)
        self.hidden = _Patterns(globs.hidden)
        self.listings = ListingCache(self._classify, now=now)

    def __bool__(self) -> bool:
        return bool(self.read_only.globs or self.hidden.globs)

    def expand(self, root: str, *, read_only: bool = True) -> Found:
        """The paths of workspace ``root`` (real, absolute) to mount; with
        ``read_only=False`` (a read-only workspace bind) the hidden ones only.
        Creates nothing. TooManyMatches when more than MAX_MATCHES paths
        would be mounted."""
        found = Found()
        ro: dict[str, os.stat_result] = {}
        hidden: dict[str, os.stat_result] = {}
        if read_only:
            _lookup(root, (*self.read_only.literals, *self.read_only.folders), ro)
        _lookup(root, (*self.hidden.literals, *self.hidden.folders), hidden)
        if self.hidden.needs_walk or (read_only and self.read_only.needs_walk):
            with self.listings.walk(root) as list_folder:
                found.truncated = self._walk(list_folder, read_only, ro, hidden)
        if len(ro) + len(hidden) > MAX_MATCHES:
            raise TooManyMatches(
                f"the protected and hidden file patterns match {len(ro) + len(hidden)} paths "
                f"in {root}, more than the {MAX_MATCHES} one sandbox mounts; use a folder "
                "pattern (secrets/**) instead of many files"
            )
        _fill(found, root, ro, hidden)
        return found

    def _classify(self, rel: str, name: str) -> tuple[bool, bool]:
        if self.hidden.covers(rel, name):
            return True, False
        return False, self.read_only.covers(rel, name)

    def _walk(
        self,
        list_folder: Callable[[str], Listing | None],
        with_read_only: bool,
        ro: dict[str, os.stat_result],
        hidden: dict[str, os.stat_result],
    ) -> bool:
        """Breadth first from the root, never following a link; a hidden
        folder is not entered, a read-only one only to look for hidden
        globs (what it holds is bound with it). True when the bound
        (MAX_SCAN_ENTRIES entries) stopped it."""
        enter_read_only = self.hidden.needs_walk
        queue: deque[tuple[str, bool]] = deque([("", False)])  # (folder, inside a read-only one)
        seen = 0
        while queue:
            rel_dir, inside_ro = queue.popleft()
            listing = list_folder(rel_dir)
            if listing is None:
                continue
            room = MAX_SCAN_ENTRIES - seen
            for entry in listing.entries:
                if entry.index >= room:
                    return True
                # Joined by hand: a warm walk is mostly this loop (posixpath.join
                # costs a quarter of it, benchmarks/sandbox_binds.py "warm").
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.hidden:
                    hidden.setdefault(rel, _stat(entry))
                    continue
                covered = with_read_only and entry.read_only and not inside_ro
                if covered and not entry.is_link:
                    ro.setdefault(rel, _stat(entry))
                if entry.is_dir and (enter_read_only or not covered):
                    queue.append((rel, inside_ro or covered))
            seen += listing.size
            if seen > MAX_SCAN_ENTRIES:
                return True
        return False


def _stat(entry: Entry) -> os.stat_result:
    assert entry.stat is not None  # covered entries carry their lstat
    return entry.stat


def _lookup(root: str, rels: Iterable[str], into: dict[str, os.stat_result]) -> None:
    """Literal paths, looked up directly: those that exist (real) go ``into``."""
    for rel in rels:
        st = _lstat_real(root, rel)
        if st is not None:
            into[rel] = st


def _lstat_real(root: str, rel: str) -> os.stat_result | None:
    """lstat of ``root/rel`` when it exists and no component is a link."""
    path = os.path.join(root, rel)
    if os.path.realpath(path) != os.path.normpath(path):
        return None
    try:
        return os.lstat(path)
    except OSError:
        return None


def _fill(
    found: Found,
    root: str,
    ro: dict[str, os.stat_result],
    hidden: dict[str, os.stat_result],
) -> None:
    """Sort matches into mounts: drop what a covered folder already holds,
    pin the folders above the rest (not those inside a read-only folder,
    which cannot be renamed anyway)."""
    ro_dirs = [rel for rel, st in ro.items() if stat.S_ISDIR(st.st_mode)]
    pins: dict[str, None] = {}
    for rel in sorted(ro, key=lambda r: (r.count("/"), r)):
        if _inside_any(rel, ro_dirs):
            continue
        _add_pins(pins, rel, ro_dirs)
        found.read_only.append(os.path.join(root, rel))
        found.identities.append((os.path.join(root, rel), ro[rel].st_dev, ro[rel].st_ino))
    for rel in sorted(hidden, key=lambda r: (r.count("/"), r)):
        mode = hidden[rel].st_mode
        if stat.S_ISLNK(mode):
            continue  # a link's target is judged by its own name
        _add_pins(pins, rel, ro_dirs)
        target = found.hidden_dirs if stat.S_ISDIR(mode) else found.hidden_files
        target.append(os.path.join(root, rel))
    pinned: list[tuple[str, int, int]] = []
    for rel in sorted(pins, key=lambda r: (r.count("/"), r)):
        pin = _lstat_real(root, rel)
        if pin is None or not stat.S_ISDIR(pin.st_mode):
            continue
        found.pinned.append(os.path.join(root, rel))
        pinned.append((os.path.join(root, rel), pin.st_dev, pin.st_ino))
    found.identities[:0] = pinned


def _inside_any(rel: str, folders: list[str]) -> bool:
    return any(rel != f and rel.startswith(f + "/") for f in folders)


def _add_pins(pins: dict[str, None], rel: str, ro_dirs: list[str]) -> None:
    parent = posixpath.dirname(rel)
    while parent:
        if parent in ro_dirs or _inside_any(parent, ro_dirs):
            break
        pins.setdefault(parent, None)
        parent = posixpath.dirname(parent)
