"""The walk's cache (dispatcher/sandbox_scan.py) finds what a fresh walk finds.

A state machine creates, removes and renames files and folders (names the
globs match among them: ``.env``, ``*.pem``, ``secrets/``, ``deploy/*.key``)
between expansions, and after every step compares the expansion of one
long-lived matcher (its cache warm) with that of a new one (no cache).

The cache's premise is that a folder's times move when an entry changes.
The machine makes that hold to the nanosecond: after each change it sets
the changed folders' mtime to a value no folder had before (on a real
clock two changes in one tick leave equal times; the racy rule covers that
and has its own test below). Its clock runs an hour ahead unless a rule
puts it back, so that the listings are trusted and the cache is used.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dispatcher import sandbox_files, sandbox_scan
from dispatcher.sandbox_files import WorkspaceGlobs, WorkspaceMatcher

GLOBS = WorkspaceGlobs(
    read_only=(".env", "secrets/**", "config/prod.yml", "deploy/*.key"),
    hidden=("*.pem",),
)
NAMES = (".env", "a.pem", "k.key", "x.txt", "prod.yml", "secrets", "config", "deploy", "app")
HOUR_NS = 3600 * 1_000_000_000
PAST_NS = 1_000_000_000 * 1_000_000_000  # 2001: older than any racy window


class CacheMachine(RuleBasedStateMachine):
    """Random changes to a workspace, interleaved with expansions."""

    def __init__(self) -> None:
        super().__init__()
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="toolrelay-scan-"))
        self.ahead = HOUR_NS
        self.matcher = WorkspaceMatcher(GLOBS, now=lambda: time.time_ns() + self.ahead)
        self.stamps = 0

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _folders(self) -> list[str]:
        found = (os.path.join(top, d) for top, dirs, _ in os.walk(self.root) for d in dirs)
        return [self.root, *sorted(p for p in found if not os.path.islink(p))]

    def _entries(self) -> list[str]:
        return sorted(
            os.path.join(top, name)
            for top, dirs, files in os.walk(self.root)
            for name in (*dirs, *files)
        )

    def _changed(self, *folders: str) -> None:
        """The premise: each changed folder's time moves to a new value."""
        for folder in folders:
            self.stamps += 1
            stamp = PAST_NS + self.stamps * 1_000
            os.utime(folder, ns=(stamp, stamp), follow_symlinks=False)

    @rule(data=st.data(), name=st.sampled_from(NAMES), folder=st.booleans())
    def create(self, data: st.DataObject, name: str, folder: bool) -> None:
        parent = data.draw(st.sampled_from(self._folders()))
        path = os.path.join(parent, name)
        if os.path.lexists(path):
            return
        if folder:
            os.mkdir(path)
        else:
            Path(path).write_text("x", encoding="utf-8")
        self._changed(parent)

    @rule(data=st.data(), name=st.sampled_from(NAMES))
    def link(self, data: st.DataObject, name: str) -> None:
        parent = data.draw(st.sampled_from(self._folders()))
        path = os.path.join(parent, name)
        if not os.path.lexists(path):
            os.symlink(".", path)
            self._changed(parent)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        entries = self._entries()
        if not entries:
            return
        path = data.draw(st.sampled_from(entries))
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        self._changed(os.path.dirname(path))

    @rule(data=st.data(), name=st.sampled_from(NAMES))
    def rename(self, data: st.DataObject, name: str) -> None:
        entries = self._entries()
        if not entries:
            return
        source = data.draw(st.sampled_from(entries))
        parent = data.draw(st.sampled_from(self._folders()))
        target = os.path.join(parent, name)
        if os.path.lexists(target) or (parent + os.sep).startswith(source + os.sep):
            return
        os.rename(source, target)
        self._changed(os.path.dirname(source), parent)

    @rule(ahead=st.sampled_from([0, HOUR_NS]))
    def clock(self, ahead: int) -> None:
        self.ahead = ahead

    @rule(read_only=st.booleans())
    def expand_again(self, read_only: bool) -> None:
        self._compare(read_only)

    @invariant()
    def same_as_a_fresh_walk(self) -> None:
        self._compare(True)

    def _compare(self, read_only: bool) -> None:
        fresh = WorkspaceMatcher(GLOBS).expand(self.root, read_only=read_only)
        assert self.matcher.expand(self.root, read_only=read_only) == fresh
        assert read_only or not fresh.read_only


CacheMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cached_walk_equals_a_fresh_walk = CacheMachine.TestCase


class BoundedCacheMachine(CacheMachine):
    """The same, with a walk bound of a few entries: truncated walks (which
    folders are reached, which entries counted) agree too."""

    BOUND = 7

    def __init__(self) -> None:
        super().__init__()
        self.saved = sandbox_files.MAX_SCAN_ENTRIES
        sandbox_files.MAX_SCAN_ENTRIES = self.BOUND

    def teardown(self) -> None:
        sandbox_files.MAX_SCAN_ENTRIES = self.saved
        super().teardown()

    @invariant()
    def bounded(self) -> None:
        assert len(self.matcher.listings) <= self.BOUND + 1  # the root, and a folder per entry


BoundedCacheMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_a_bounded_cached_walk_equals_a_fresh_walk = BoundedCacheMachine.TestCase


# -- what the cache spares, and when it does not trust itself ------------------------


@pytest.fixture
def listed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The folders listed (scandir) while the test runs."""
    calls: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        calls.append(path)
        return real(path)

    monkeypatch.setattr(sandbox_scan.os, "scandir", counting)
    yield calls


def _tree(root: Path, when: int) -> None:
    for rel in ("src/a/m.py", "src/b/m.py", "app/.env", "certs/c.pem"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x", encoding="utf-8")
    for folder in (root, *(p for p in root.rglob("*") if p.is_dir())):
        os.utime(folder, ns=(when, when))


def test_a_warm_walk_lists_no_unchanged_folder(tmp_path: Path, listed: list[str]) -> None:
    root = tmp_path.resolve()
    _tree(root, PAST_NS)
    listed.clear()
    matcher = WorkspaceMatcher(GLOBS, now=lambda: time.time_ns() + HOUR_NS)
    first = matcher.expand(str(root))
    assert len(listed) == 6  # the root, src, src/a, src/b, app, certs
    listed.clear()
    assert matcher.expand(str(root)) == first
    assert listed == []
    (root / "src" / "a" / ".env").write_text("new", encoding="utf-8")
    found = matcher.expand(str(root))
    assert listed == [str(root / "src" / "a")]
    assert str(root / "src" / "a" / ".env") in found.read_only


def test_a_folder_changed_within_the_racy_window_is_listed_again(
    tmp_path: Path, listed: list[str]
) -> None:
    """Two changes within one clock tick leave a folder's times equal: a
    folder changed less than RACY_NS before it was listed is listed again."""
    root = tmp_path.resolve()
    now = time.time_ns() + HOUR_NS
    _tree(root, PAST_NS)
    os.utime(root / "src" / "a", ns=(now - 1, now - 1))  # changed just now, says the clock
    matcher = WorkspaceMatcher(GLOBS, now=lambda: now)
    matcher.expand(str(root))
    listed.clear()
    matcher.expand(str(root))
    assert listed == [str(root / "src" / "a")]


def test_threads_expanding_at_once_agree(tmp_path: Path) -> None:
    """Searches expand from worker threads while the shell expands on the
    loop: one lock makes each walk and its cache update one step."""
    root = tmp_path.resolve()
    _tree(root, PAST_NS)
    matcher = WorkspaceMatcher(GLOBS, now=lambda: time.time_ns() + HOUR_NS)
    fresh = WorkspaceMatcher(GLOBS).expand(str(root))
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda _: matcher.expand(str(root)), range(40)))
    assert all(f == fresh for f in found)
