"""GNU patch (apply_patch's fuzzy fallback) runs in the session's sandbox:
the "system" host view, the workspace read-only, the scratch tree writable.

The sandbox's bwrap is the real one behind a logging shim, so the test sees
the command line patch really ran under, and the result proves it worked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dispatcher import ToolExecutionError, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.tools import ApplyPatchTool
from tests.dispatcher.tools.support import run_tool

BWRAP = shutil.which("bwrap")
pytestmark = pytest.mark.skipif(
    BWRAP is None or shutil.which("patch") is None, reason="needs bubblewrap and GNU patch"
)
NUMBERS = "".join(f"{i}\n" for i in range(1, 21))
FUZZY = "--- a/n.txt\n+++ b/n.txt\n@@ -7,5 +7,5 @@\n 7\n 8\n-9\n+nine\n 10\n 11\n"


def _logging_bwrap(folder: Path) -> tuple[str, Path]:
    log = folder / "bwrap-argv.log"
    shim = folder / "bwrap"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\nexec {BWRAP} "$@"\n')
    shim.chmod(0o755)
    return str(shim), log


async def test_fuzzy_patch_runs_in_the_sandbox(
    root: Path, ws: WorkspaceFileAPI, tmp_path: Path
) -> None:
    (root / "n.txt").write_text(NUMBERS.replace("7\n", "seven (edited)\n"))
    shim, log = _logging_bwrap(tmp_path)
    box = Sandbox(SandboxConfig(shim), ws.workspace_root)
    out = await run_tool(ApplyPatchTool, {"patch": FUZZY}, ws, sandbox=box)
    assert out.metadata["applier"] == "system_patch"
    assert "fuzz" in out.metadata["patch_messages"]
    assert (root / "n.txt").read_text() == NUMBERS.replace("7\n", "seven (edited)\n").replace(
        "9\n", "nine\n", 1
    )
    argv = log.read_text().splitlines()
    assert "--unshare-pid" in argv and "--unshare-net" in argv
    # The system view: never the whole host.
    assert not any(argv[i : i + 3] == ["--ro-bind", "/", "/"] for i in range(len(argv)))
    assert "/root" not in argv and "/home" not in argv
    # The workspace read-only; the scratch (under the fresh /tmp) writable after it.
    ws_at = argv.index(ws.workspace_root)
    assert argv[ws_at - 1] == "--ro-bind"
    scratch = next(a for a in argv if Path(a).name.startswith("toolrelay-patch-"))
    assert argv[argv.index(scratch) - 1] == "--bind"
    assert argv.index("/tmp") < argv.index(scratch)


async def test_a_sandbox_that_cannot_start_fails_the_patch(
    root: Path, ws: WorkspaceFileAPI, tmp_path: Path
) -> None:
    (root / "n.txt").write_text(NUMBERS.replace("7\n", "seven (edited)\n"))
    broken = Sandbox(SandboxConfig(str(tmp_path / "missing-bwrap")), ws.workspace_root)
    with pytest.raises(ToolExecutionError, match="No file was changed"):
        await run_tool(ApplyPatchTool, {"patch": FUZZY}, ws, sandbox=broken)
    assert (root / "n.txt").read_text() == NUMBERS.replace("7\n", "seven (edited)\n")
