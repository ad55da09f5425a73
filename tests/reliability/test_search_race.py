"""Searches and listings against a process that swaps symbolic links under
their feet: nothing outside the workspace is ever read or listed.

A real swapping process (its own interpreter, no cooperation with the test)
flips ``ws/sub`` between a real folder and a link to an outside folder, and
``ws/f.txt`` between a file and a link to an outside file, as fast as it can
(atomically, with ``renameat2(RENAME_EXCHANGE)`` where the kernel has it).
Every outside thing carries a canary string, in its content and in a file
name. grep (every backend), search_code, find_files and list_dir run
through the real tools, with and without the session's sandbox, for a
bounded time each; no result, metadata or error may carry the canary.
Each test also counts the calls that met the swapped state (a listing or a
search that saw the link side of the flip, or a start folder refused as a
link out), so it proves the race was run, not dodged.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dispatcher import ToolContext, WorkspaceFileAPI
from dispatcher.errors import ToolError
from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.tool import Tool
from dispatcher.tools import FindFilesTool, GrepTool, ListDirTool, SearchCodeTool

CANARY = "CANARY-a91c"
RACE_SECONDS = 2.0
MAX_CALLS = 400

SWAPPER = textwrap.dedent(
    """
    import ctypes, os, sys, time
    ws, park, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2

    def exchange(a, b):
        if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) == 0:
            return
        # No renameat2: a plain two-step swap (a brief window with no name).
        tmp = b + ".tmp"
        os.rename(a, tmp)
        os.rename(b, a)
        os.rename(tmp, b)

    pairs = [(os.path.join(ws, "sub"), os.path.join(park, "sub")),
             (os.path.join(ws, "f.txt"), os.path.join(park, "f.txt"))]
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    flips = 0
    while time.monotonic() < deadline:
        for a, b in pairs:
            exchange(a, b)
        flips += 1
        if flips % 7 == 0:
            time.sleep(0.0002)  # let each state last a little now and then
    print(flips, flush=True)
    """
)


@dataclass
class Tally:
    calls: int = 0
    swapped: int = 0
    errors: int = 0


@pytest.fixture
def race_tree(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """ws/ (sub/inner.txt, f.txt, a few bystanders) and park/ holding the
    link twins that the swapper exchanges with them."""
    root = tmp_path.resolve() / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "inner.txt").write_text("needle inside\n")
    (root / "f.txt").write_text("needle file\n")
    for i in range(5):
        (root / f"b{i}.txt").write_text(f"needle bystander {i}\n")
    outside = tmp_path.resolve() / "outside"
    outside.mkdir()
    (outside / "inner.txt").write_text(f"needle {CANARY} folder\n")
    (outside / f"{CANARY}.txt").write_text(f"needle {CANARY} name\n")
    (tmp_path / "secret.txt").write_text(f"needle {CANARY} token file\n")
    park = tmp_path.resolve() / "park"
    park.mkdir()
    (park / "sub").symlink_to(outside)
    (park / "f.txt").symlink_to(tmp_path.resolve() / "secret.txt")
    yield root, park


class Swapper:
    """The swapping process; started and stopped by this test only (by PID)."""

    def __init__(self, root: Path, park: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SWAPPER, str(root), str(park), str(RACE_SECONDS * 4 + 10)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> int:
        """Stop it and return how many flips it made (0 if it was killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        tail = self.proc.stdout.read().strip()
        return int(tail) if tail.isdigit() else 0


def _context(ws: WorkspaceFileAPI, sandbox: Sandbox | None, options: dict[str, Any]) -> ToolContext:
    return ToolContext(
        session_id="race",
        turn_id="t",
        tool_use_id="tu",
        workspace_path=ws.workspace_root,
        workspace_files=ws,
        options=options,
        sandbox=sandbox,
    )


def _sandbox(root: Path) -> Sandbox:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    return Sandbox(SandboxConfig(bwrap=bwrap), str(root))


async def _race(
    root: Path,
    park: Path,
    tool: type[Tool],
    inputs: list[tuple[dict[str, Any], tuple[str, ...]]],
    options: dict[str, Any],
    sandbox: Sandbox | None,
) -> Tally:
    """Call ``tool`` with each of ``inputs`` (an input and the paths its full,
    unswapped answer names) in turn for RACE_SECONDS while the swapper runs;
    fail on any canary; count calls that saw the swap."""
    ws = WorkspaceFileAPI(root)
    tally = Tally()
    swapper = Swapper(root, park)
    try:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline and tally.calls < MAX_CALLS:
            input, expected = inputs[tally.calls % len(inputs)]
            tally.calls += 1
            try:
                out = await tool().execute(dict(input), _context(ws, sandbox, options))
            except ToolError as exc:
                # A start path met as a link out is refused: the swapped state.
                assert CANARY not in exc.message, exc.message
                tally.errors += 1
                tally.swapped += 1
                continue
            blob = "".join(getattr(b, "text", "") for b in out.content) + json.dumps(
                [out.metadata, out.data]
            )
            assert CANARY not in blob, blob
            # A full answer names every expected path; one that lacks any met
            # the link side of a flip (or the instant between).
            if any(path not in blob for path in expected):
                tally.swapped += 1
    finally:
        flips = swapper.stop()
        ws.close()
    assert flips != 0 or tally.calls > 0
    return tally


def _check(tally: Tally) -> None:
    print(f"calls {tally.calls}, saw the swapped state {tally.swapped}, errors {tally.errors}")
    assert tally.calls >= 3
    # The race was run: some calls met the link side, and not every call did
    # (or the tool would simply be broken).
    assert tally.swapped > 0, tally
    assert tally.swapped < tally.calls, tally


BOTH = ("f.txt", "sub/inner.txt")
GREP_INPUTS: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    ({"pattern": "needle", "max_results": 500}, BOTH),
    ({"pattern": "needle", "path": "sub"}, ("sub/inner.txt",)),
    ({"pattern": "needle", "path": "f.txt"}, ("f.txt",)),
    ({"pattern": "NEEDLE", "respect_gitignore": False, "case_sensitive": False}, BOTH),
]


@pytest.mark.parametrize("sandboxed", [False, True], ids=["no-sandbox", "sandbox"])
@pytest.mark.parametrize("backend", ["rg", "grep", "python"])
async def test_grep_races(race_tree: tuple[Path, Path], backend: str, sandboxed: bool) -> None:
    root, park = race_tree
    if backend != "python" and shutil.which(backend) is None:
        pytest.skip(f"{backend} is not installed")
    sandbox = _sandbox(root) if sandboxed else None
    tally = await _race(root, park, GrepTool, GREP_INPUTS, {"backend": backend}, sandbox)
    _check(tally)


@pytest.mark.parametrize("sandboxed", [False, True], ids=["no-sandbox", "sandbox"])
async def test_search_code_races(race_tree: tuple[Path, Path], sandboxed: bool) -> None:
    root, park = race_tree
    sandbox = _sandbox(root) if sandboxed else None
    inputs: list[tuple[dict[str, Any], tuple[str, ...]]] = [
        ({"pattern": r"needle\b.*", "max_results": 500, "context_lines": 1}, BOTH),
        ({"pattern": "needle", "path": "sub"}, ("sub/inner.txt",)),
        ({"pattern": "needle", "path": "f.txt"}, ("f.txt",)),
    ]
    tally = await _race(root, park, SearchCodeTool, inputs, {}, sandbox)
    _check(tally)


async def test_find_files_races(race_tree: tuple[Path, Path]) -> None:
    root, park = race_tree
    inputs: list[tuple[dict[str, Any], tuple[str, ...]]] = [
        ({"pattern": "*.txt", "max_results": 500}, BOTH),
        ({"pattern": "*", "path": "sub"}, ("sub/inner.txt",)),
        ({"pattern": "*", "respect_gitignore": False}, BOTH),
    ]
    tally = await _race(root, park, FindFilesTool, inputs, {}, None)
    _check(tally)


async def test_list_dir_races(race_tree: tuple[Path, Path]) -> None:
    root, park = race_tree
    inputs: list[tuple[dict[str, Any], tuple[str, ...]]] = [
        ({"recursive": True}, BOTH),
        ({"path": "sub", "recursive": True}, ("sub/inner.txt",)),
        ({"recursive": True, "pattern": "**/*.txt"}, BOTH),
    ]
    tally = await _race(root, park, ListDirTool, inputs, {}, None)
    _check(tally)


def test_the_swapper_really_swaps(race_tree: tuple[Path, Path]) -> None:
    """Guard for the guard: while the swapper runs, reading by name (what the
    old tools did) does reach the canary."""
    root, park = race_tree
    swapper = Swapper(root, park)
    hits = 0
    try:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline and hits == 0:
            for name in ("f.txt", "sub/inner.txt"):
                with contextlib.suppress(OSError):
                    hits += CANARY in (root / name).read_text()
    finally:
        swapper.stop()
    assert hits > 0
