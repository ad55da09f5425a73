"""A per-workspace symbol index, built in the background and kept fresh.

One ``CodeIndex`` per workspace root (shared by every session on it, so a
second session does not parse the repository again). The first query starts
a build in a daemon thread: a descriptor-based, .gitignore-aware walk
(walk.Walk), then every source file opened by
descriptor (open_candidates), parsed with tree-sitter and folded into two
inverted maps (name -> definitions, name -> referencing lines). Queries wait
for the build, reporting progress, then answer from the maps.

Freshness, two ways:

- Edits through our tools: the dispatcher reports every call's
  ``files_modified`` to ``note_modified`` (the server passes it as the
  dispatcher's ``on_files_modified``), which marks those files dirty in the
  index of the session's workspace. The next query re-reads just them (a
  new file, whose .gitignore status a full walk decides, triggers a full
  check instead). So write_file, patch_file, apply_patch and git tools are
  reflected in the very next answer, at the cost of a stat per file.
- Edits by anything else (a shell command, the user's editor): a full check
  re-walks the workspace and compares each file's (mtime_ns, size), taken
  from the walk's own fstatat, with what was indexed (no file is opened
  unless it changed). It runs before a query when the last one is older than
  ten times its own duration (at most 5 s): on a small repository that is
  every query, on 10,000 files about every 2 s, so checking never costs more
  than about a tenth of the time. The ``rescan_interval`` option fixes the
  interval instead (0: check before every query).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dispatcher.errors import ToolError
from dispatcher.tools.code.extract import FileFacts, Symbol, extract
from dispatcher.tools.code.languages import language_for
from dispatcher.tools.code.resolve import ImportResolver
from dispatcher.tools.search.candidates import (
    Candidate,
    open_candidates,
    read_fd,
)
from dispatcher.tools.search.walk import Entry, Walk
from dispatcher.workspace import WorkspaceFileAPI

MAX_FILE_BYTES = 1024 * 1024  # larger files are generated or vendored: not parsed
MAX_FILES = 100_000
MAX_INDEXES = 8  # workspaces kept in memory at once (least recently used dropped)
# The automatic full-check interval: this many times the last check's duration ...
AUTO_INTERVAL_FACTOR = 10.0
AUTO_INTERVAL_MAX = 5.0  # ... but never longer than this (seconds)
MAX_TRACKED_SESSIONS = 4096


@dataclass(slots=True)
class _Indexed:
    mtime_ns: int
    size: int
    facts: FileFacts


@dataclass(slots=True)
class Progress:
    """Where a build stands: ``state`` is idle, building, ready or failed."""

    state: str = "idle"
    done: int = 0
    total: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass(slots=True)
class RefreshStats:
    """What one freshness check found and re-parsed."""

    checked: int = 0
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


class CodeIndex:
    """Definitions, references and imports of every source file of one workspace."""

    def __init__(self, root: str, *, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.progress = Progress()
        self._ws: WorkspaceFileAPI | None = None
        # Guards everything below and the build/refresh: queries hold it
        # while they read the maps, so they never see half an update.
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._files: dict[str, _Indexed] = {}
        self._defs: dict[str, dict[str, list[Symbol]]] = {}
        self._refs: dict[str, dict[str, tuple[int, ...]]] = {}
        self._last_refresh = 0.0
        self._scan_seconds = 0.0  # how long the last full check took
        # Files our tools modified since the last refresh (note_modified);
        # its own lock, as note_modified runs on the event loop and must not wait.
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self.skipped: dict[str, str] = {}
        self.truncated = False
        self.go_modules: dict[str, str] = {}  # folder of a go.mod -> its module path

    # -- building ---------------------------------------------------------

    def start(self) -> None:
        """Start the background build unless it is running or done."""
        # Unlocked first look: called on the event loop, it must not wait
        # for a build or a refresh that holds the lock.
        if self._thread is not None and self.progress.state in ("building", "ready"):
            return
        with self._lock:
            if self._thread is not None and self.progress.state in ("building", "ready"):
                return
            self.progress = Progress(state="building")
            self._ready.clear()
            self._thread = threading.Thread(
                target=self._build, name=f"code-index:{os.path.basename(self.root)}", daemon=True
            )
            self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Whether the build finished (ready or failed) within ``timeout`` seconds."""
        return self._ready.wait(timeout)

    def _workspace(self) -> WorkspaceFileAPI:
        if self._ws is None:
            self._ws = WorkspaceFileAPI(self.root)
        return self._ws

    def _build(self) -> None:
        started = time.perf_counter()
        try:
            with self._lock:
                self._scan(on_progress=self._set_progress)
                self._last_refresh = time.monotonic()
                self._scan_seconds = time.perf_counter() - started
                self.progress.state = "ready"
        except Exception as exc:  # the build thread must report, not die silently
            self.progress.state = "failed"
            self.progress.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.progress.seconds = round(time.perf_counter() - started, 3)
            self._ready.set()

    def _set_progress(self, done: int, total: int) -> None:
        self.progress.done, self.progress.total = done, total

    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Note files our tools modified: the next refresh re-reads them."""
        with self._dirty_lock:
            self._dirty.update(paths)

    def refresh(self, *, min_interval: float | None = None) -> RefreshStats | None:
        """Bring the index up to date (see the module docstring): the dirty
        files, and everything when the last full check is older than
        ``min_interval`` (None: the automatic interval). None if nothing
        was checked."""
        with self._lock:
            if self.progress.state != "ready":
                return None
            with self._dirty_lock:
                dirty, self._dirty = self._dirty, set()
            dirty = {p for p in dirty if language_for(p) is not None}
            if min_interval is None:
                min_interval = min(AUTO_INTERVAL_MAX, AUTO_INTERVAL_FACTOR * self._scan_seconds)
            due = time.monotonic() - self._last_refresh >= min_interval
            if due or any(p not in self._files for p in dirty):
                started = time.perf_counter()
                stats = self._scan(on_progress=None)
                self._scan_seconds = time.perf_counter() - started
                self._last_refresh = time.monotonic()
                return stats
            if dirty:
                return self._refresh_paths(sorted(dirty))
            return None

    def _refresh_paths(self, paths: list[str]) -> RefreshStats:
        """Re-read indexed files named by a tool: changed ones re-parsed,
        vanished or no longer regular ones dropped."""
        ws = self._workspace()
        stats = RefreshStats(checked=len(paths))
        for rel in paths:
            try:
                fd = ws.open_file(rel, os.O_RDONLY | os.O_NONBLOCK)
            except (ToolError, OSError):
                self._remove(rel)
                stats.removed.append(rel)
                continue
            try:
                st = os.fstat(fd)
                known = self._files.get(rel)
                if known is not None and (known.mtime_ns, known.size) == (
                    st.st_mtime_ns,
                    st.st_size,
                ):
                    continue
                data = (
                    read_fd(fd, self.max_file_bytes)
                    if stat.S_ISREG(st.st_mode) and st.st_size <= self.max_file_bytes
                    else None
                )
            finally:
                os.close(fd)
            self._remove(rel)
            language = language_for(rel)
            if data is None or language is None:
                stats.removed.append(rel)
                continue
            self._add(rel, _Indexed(st.st_mtime_ns, st.st_size, extract(language, data)))
            stats.updated.append(rel)
        return stats

    def _scan(self, on_progress: Callable[[int, int], None] | None) -> RefreshStats:
        """A full check: walk the workspace, re-read what changed, drop what went."""
        ws = self._workspace()
        sources, go_mods = self._walk_sources(ws)
        self._read_go_modules(ws, go_mods)
        stats = RefreshStats(checked=len(sources))
        seen = {cand.rel for cand, _ in sources}
        # Only files whose (mtime, size) differ from the index are opened;
        # a linked file (no mtime from the walk) is always re-checked.
        changed = [
            (i, cand)
            for i, (cand, mtime) in enumerate(sources)
            if (known := self._files.get(cand.rel)) is None
            or mtime is None
            or (known.mtime_ns, known.size) != (mtime, cand.size)
        ]
        total = len(changed)
        if on_progress is not None:
            on_progress(0, total)
        for done, (_, cand, fd) in enumerate(
            open_candidates(ws, changed, self.max_file_bytes), start=1
        ):
            try:
                st = os.fstat(fd)
                known = self._files.get(cand.rel)
                if known is not None and (known.mtime_ns, known.size) == (
                    st.st_mtime_ns,
                    st.st_size,
                ):
                    continue
                data = read_fd(fd, self.max_file_bytes)
            finally:
                os.close(fd)
            if on_progress is not None and done % 200 == 0:
                on_progress(done, total)
            self._remove(cand.rel)
            if data is None:
                continue
            language = language_for(cand.rel)
            assert language is not None
            self._add(cand.rel, _Indexed(st.st_mtime_ns, st.st_size, extract(language, data)))
            stats.updated.append(cand.rel)
        if on_progress is not None:
            on_progress(total, total)
        for rel in [r for r in self._files if r not in seen]:
            self._remove(rel)
            stats.removed.append(rel)
        return stats

    def _walk_sources(
        self, ws: WorkspaceFileAPI
    ) -> tuple[list[tuple[Candidate, int | None]], list[Candidate]]:
        """The source files to index with their mtime from the walk (None for a
        link), and the go.mod files; notes what is skipped or truncated."""
        walk = _StatWalk(ws, ".", recursive=True, respect_gitignore=True, sizes=True)
        sources: list[tuple[Candidate, int | None]] = []
        go_mods: list[Candidate] = []
        skipped: dict[str, str] = {}
        with walk:
            for entry in walk:
                if entry.is_dir or entry.target_is_dir:
                    continue
                cand = Candidate(entry.rel, entry.size, entry.is_symlink)
                if cand.name == "go.mod":
                    go_mods.append(cand)
                if language_for(entry.rel) is None:
                    continue
                if entry.size > self.max_file_bytes:
                    skipped[entry.rel] = f"larger than {self.max_file_bytes} bytes"
                    continue
                if len(sources) >= MAX_FILES:
                    self.truncated = True
                    break
                sources.append((cand, walk.mtimes.pop(entry.rel, None)))
        self.skipped = skipped
        return sources, go_mods

    def _read_go_modules(self, ws: WorkspaceFileAPI, mods: list[Candidate]) -> None:
        """Each go.mod's module path (its ``module`` line), by folder: Go
        import paths are resolved against them."""
        modules: dict[str, str] = {}
        for cand in mods:
            try:
                text = ws.read_bytes(cand.rel)[:65536].decode("utf-8", "replace")
            except (ToolError, OSError):
                continue
            for line in text.splitlines():
                words = line.split("//", 1)[0].split()
                if len(words) == 2 and words[0] == "module":
                    modules[cand.folder] = words[1].strip('"')
                    break
        self.go_modules = modules

    def _add(self, rel: str, entry: _Indexed) -> None:
        self._files[rel] = entry
        for sym in entry.facts.symbols:
            self._defs.setdefault(sym.name, {}).setdefault(rel, []).append(sym)
        for name, lines in entry.facts.references.items():
            self._refs.setdefault(name, {})[rel] = lines

    def _remove(self, rel: str) -> None:
        old = self._files.pop(rel, None)
        if old is None:
            return
        for sym in old.facts.symbols:
            by_file = self._defs.get(sym.name)
            if by_file is not None:
                by_file.pop(rel, None)
                if not by_file:
                    del self._defs[sym.name]
        for name in old.facts.references:
            uses = self._refs.get(name)
            if uses is not None:
                uses.pop(rel, None)
                if not uses:
                    del self._refs[name]

    # -- queries (call with the index ready; each takes the lock) ----------

    @property
    def file_count(self) -> int:
        return len(self._files)

    def facts(self, rel: str) -> FileFacts | None:
        with self._lock:
            entry = self._files.get(rel)
            return entry.facts if entry is not None else None

    def definitions(
        self, name: str, *, kind: str | None = None, under: str = "."
    ) -> list[tuple[str, Symbol]]:
        """(file, symbol) for every definition of ``name`` below ``under``."""
        with self._lock:
            out = [
                (rel, sym)
                for rel, syms in self._defs.get(name, {}).items()
                if _below(rel, under)
                for sym in syms
                if kind is None or sym.kind == kind
            ]
        out.sort(key=lambda item: (item[0], item[1].line))
        return out

    def references(self, name: str, *, under: str = ".") -> list[tuple[str, tuple[int, ...]]]:
        """(file, lines) for every file below ``under`` that uses ``name``."""
        with self._lock:
            out = [
                (rel, lines)
                for rel, lines in self._refs.get(name, {}).items()
                if _below(rel, under)
            ]
        out.sort()
        return out

    def read_lines(self, rel: str) -> list[str]:
        """The file's lines, read through the workspace API ([] if unreadable)."""
        try:
            data = self._workspace().read_bytes(rel)
        except (ToolError, OSError):
            return []
        return data.decode("utf-8", "replace").splitlines()

    def import_edges(self) -> list[dict[str, Any]]:
        """Every import of every file, resolved to a workspace file or folder
        where the language's rules find one (``to`` is None otherwise)."""
        with self._lock:
            files = {rel: entry.facts for rel, entry in self._files.items()}
            go_modules = dict(self.go_modules)
        resolver = ImportResolver(files.keys(), go_modules)
        edges: list[dict[str, Any]] = []
        for rel in sorted(files):
            facts = files[rel]
            for imp in facts.imports:
                target = resolver.resolve(rel, facts.language, imp)
                edges.append({"from": rel, "to": target, "module": imp.module, "line": imp.line})
        return edges

    def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(OSError):
                self._ws.close()


class _StatWalk(Walk):
    """The listing tools' walk, keeping each regular file's mtime as well.

    ``Walk`` with ``sizes`` already stats every file relative to its folder's
    descriptor; ``os.DirEntry`` caches that result, so asking again here is
    free. The freshness check then needs no open per unchanged file."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.mtimes: dict[str, int] = {}
        super().__init__(*args, **kwargs)

    def _entry(self, level: Any, dirent: os.DirEntry[str]) -> Entry | None:
        entry = super()._entry(level, dirent)
        if entry is not None and not entry.is_dir and not entry.is_symlink:
            with contextlib.suppress(OSError):
                self.mtimes[entry.rel] = dirent.stat(follow_symlinks=False).st_mtime_ns
        return entry


def _below(rel: str, under: str) -> bool:
    return under in (".", "") or rel == under or rel.startswith(under.rstrip("/") + "/")


_registry: OrderedDict[str, CodeIndex] = OrderedDict()
_registry_lock = threading.Lock()


def index_for(root: str) -> CodeIndex:
    """The shared index of the workspace at ``root`` (created on first use)."""
    with _registry_lock:
        index = _registry.get(root)
        if index is None:
            index = _registry[root] = CodeIndex(root)
            while len(_registry) > MAX_INDEXES:
                _, dropped = _registry.popitem(last=False)
                dropped.close()
        else:
            _registry.move_to_end(root)
        return index


_session_roots: OrderedDict[str, str] = OrderedDict()


def note_session(session_id: str, root: str) -> None:
    """Remember which workspace a session's code tools index, so
    note_modified can route that session's modified files to it."""
    with _registry_lock:
        _session_roots[session_id] = root
        _session_roots.move_to_end(session_id)
        while len(_session_roots) > MAX_TRACKED_SESSIONS:
            _session_roots.popitem(last=False)


def note_modified(session_id: str, paths: Iterable[str]) -> None:
    """Mark files a session's tool modified as dirty in its workspace's index
    (nothing if that session has no index). The dispatcher calls it for every
    call that reports modified files, on the event loop: a dict look-up and a
    set update."""
    with _registry_lock:
        root = _session_roots.get(session_id)
        index = _registry.get(root) if root is not None else None
    if index is not None:
        index.mark_dirty(paths)


def forget(root: str) -> None:
    """Drop the index of ``root`` (tests; a workspace that went away)."""
    with _registry_lock:
        index = _registry.pop(root, None)
    if index is not None:
        index.close()
