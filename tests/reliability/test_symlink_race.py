"""Symlink swaps racing the file tools (issue 10, "check-then-use on paths").

A real process inside the workspace (what a sandboxed shell command can do)
swaps, as fast as it can and atomically (renameat2 RENAME_EXCHANGE):

- ``ws/dir``: a real folder <-> a symlink to an outside folder holding a
  canary secret and a ``target.txt`` like the one inside;
- ``ws/file.txt``: a regular file <-> a symlink to the outside secret.

Meanwhile read_file / write_file / patch_file / apply_patch are called, each
for a bounded stretch, through the real tools and a real ToolContext. The
canary must never appear in any result, and the outside tree must be the same
afterwards (same names, same bytes). Each tool must also have hit the swapped
state (a ``permission_denied`` escape) a few times: that is what proves the
race really ran, so the test cannot pass vacuously.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dispatcher import ToolError, WorkspaceEscape, WorkspaceFileAPI
from dispatcher.tool import ToolFactory
from dispatcher.tools import ApplyPatchTool, PatchFileTool, ReadFileTool, WriteFileTool
from tests.dispatcher.tools.support import run_tool, text_of

CANARY = "CANARY-7f3a9c-outside-secret"
RACE_SECONDS = 2.0
MAX_CALLS = 20_000
SWAPPER_SECONDS = 30.0  # the swapper's own bound, should the test not stop it

# The swapper: exchanges each pair of names atomically, forever (until its
# deadline); puts a symlink back when a tool's rename replaced one with a
# regular file, so the race keeps its two states.
SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
ws, outside, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
os.chdir(ws)
pairs = [(b"dir", b"dir_spare", outside), (b"file.txt", b"file_spare", outside + "/secret.txt")]
deadline = time.monotonic() + seconds
swaps = 0
while time.monotonic() < deadline:
    for a, b, link_to in pairs:
        if not (os.path.islink(a) or os.path.islink(b)):
            os.symlink(link_to, b".relink")
            os.rename(b".relink", b)
        if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            sys.exit("renameat2: errno %d" % ctypes.get_errno())
        swaps += 1
    if swaps % 64 == 0:
        time.sleep(0.0001)
"""


@dataclass
class Tally:
    """What the calls of one tool met."""

    ok: int = 0
    escapes: int = 0
    other_errors: int = 0


def tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root`` (not following links) with a hash of its content."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            if os.path.islink(full):
                out[rel] = "link:" + os.readlink(full)
            elif os.path.isdir(full):
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return out


@pytest.fixture
def arena(tmp_path: Path) -> Iterator[tuple[WorkspaceFileAPI, Path]]:
    """The workspace and outside folders, with the swapper running."""
    ws_root = tmp_path.resolve() / "ws"
    outside = tmp_path.resolve() / "outside"
    ws_root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text(f"x = 1\n{CANARY}\n")
    (outside / "target.txt").write_text(f"x = 1\n{CANARY}\n")
    (ws_root / "dir").mkdir()
    (ws_root / "dir" / "target.txt").write_text("x = 1\n")
    (ws_root / "file.txt").write_text("x = 1\n")
    os.symlink(outside, ws_root / "dir_spare")
    os.symlink(outside / "secret.txt", ws_root / "file_spare")
    before = tree_digest(outside)
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws_root), str(outside), str(SWAPPER_SECONDS)],
        stderr=subprocess.PIPE,
    )
    try:
        yield WorkspaceFileAPI(ws_root), outside
    finally:
        alive = proc.poll() is None
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert alive, f"the swapper stopped early: {err.decode(errors='replace')}"
    assert tree_digest(outside) == before, "a file outside the workspace was created or changed"


async def race(
    ws: WorkspaceFileAPI,
    factory: ToolFactory,
    make_input: Callable[[int], dict[str, object]],
    check: Callable[[str], None] = lambda _text: None,
) -> Tally:
    """Call one tool for RACE_SECONDS (at most MAX_CALLS times)."""
    tally = Tally()
    deadline = time.monotonic() + RACE_SECONDS
    for i in range(MAX_CALLS):
        if time.monotonic() > deadline:
            break
        try:
            out = await run_tool(factory, make_input(i), ws)
        except WorkspaceEscape:
            tally.escapes += 1
            continue
        except ToolError as err:
            assert CANARY not in err.message
            tally.other_errors += 1
            continue
        text = text_of(out)
        assert CANARY not in text
        assert CANARY not in repr(out.metadata) + repr(out.data)
        check(text)
        tally.ok += 1
        if i % 16 == 0:
            await asyncio.sleep(0)  # let the loop breathe, as a server would
    return tally


def assert_exercised(tally: Tally) -> None:
    # Both states were met: some calls went through, some met the swapped link.
    assert tally.ok > 0, tally
    assert tally.escapes > 0, tally


RaceCase = Callable[[WorkspaceFileAPI], Awaitable[Tally]]


async def read_case(ws: WorkspaceFileAPI) -> Tally:
    names = ["dir/target.txt", "file.txt"]

    def check(text: str) -> None:
        assert text.startswith("x = "), text

    return await race(ws, ReadFileTool, lambda i: {"path": names[i % 2]}, check)


async def write_case(ws: WorkspaceFileAPI) -> Tally:
    names = ["dir/target.txt", "file.txt", "dir/new.txt"]
    return await race(ws, WriteFileTool, lambda i: {"path": names[i % 3], "content": f"x = {i}\n"})


async def patch_file_case(ws: WorkspaceFileAPI) -> Tally:
    # Alternating 1 -> 2 and 2 -> 1: the outside copies hold "x = 1" too, so
    # a patch that escaped would change them.
    def make(i: int) -> dict[str, object]:
        a, b = ("1", "2") if (i // 2) % 2 == 0 else ("2", "1")
        return {
            "path": ["dir/target.txt", "file.txt"][i % 2],
            "old_str": f"x = {a}",
            "new_str": f"x = {b}",
        }

    return await race(ws, PatchFileTool, make)


async def apply_patch_case(ws: WorkspaceFileAPI) -> Tally:
    def make(i: int) -> dict[str, object]:
        if i % 3 == 2:  # a creation: would land outside through the link
            return {"patch": f"--- /dev/null\n+++ b/dir/c{i}.txt\n@@ -0,0 +1 @@\n+new {i}\n"}
        a, b = ("1", "2") if (i // 3) % 2 == 0 else ("2", "1")
        name = "dir/target.txt" if i % 3 == 0 else "file.txt"
        return {"patch": f"--- a/{name}\n+++ b/{name}\n@@ -1 +1 @@\n-x = {a}\n+x = {b}\n"}

    return await race(ws, ApplyPatchTool, make)


CASES: dict[str, RaceCase] = {
    "read_file": read_case,
    "write_file": write_case,
    "patch_file": patch_file_case,
    "apply_patch": apply_patch_case,
}


@pytest.mark.parametrize("tool", sorted(CASES))
async def test_file_tools_never_leave_the_workspace_under_a_swap_race(
    arena: tuple[WorkspaceFileAPI, Path], tool: str
) -> None:
    ws, _outside = arena
    tally = await CASES[tool](ws)
    print(f"{tool}: {tally}")
    assert_exercised(tally)
