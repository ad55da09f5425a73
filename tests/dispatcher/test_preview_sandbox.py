"""A preview that starts a process runs it in the session's sandbox.

apply_patch's preview falls back to GNU patch when the built-in applier
cannot apply a hunk exactly; that run happens before anyone has approved the
call, so it must not run on the host when the session has a sandbox. The
dispatcher hands ``preview`` the session's sandbox, and plugin previews
written before that keyword existed (``preview(input, workspace)``) keep
working through the registry's ProtocolToolAdapter.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    ConfirmationPreview,
    DispatchSession,
    RulePolicy,
    ToolDispatcher,
    WorkspaceFileAPI,
)
from dispatcher.registry import ProtocolToolAdapter
from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.tools import ApplyPatchTool
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import RecordingPublisher, WriteTool

BWRAP = shutil.which("bwrap")
NUMBERS = "".join(f"{i}\n" for i in range(1, 21))
# Context line 7 no longer matches exactly: only GNU patch (with fuzz) applies it.
FUZZY = "--- a/n.txt\n+++ b/n.txt\n@@ -7,5 +7,5 @@\n 7\n 8\n-9\n+nine\n 10\n 11\n"


def _logging_bwrap(folder: Path) -> tuple[str, Path]:
    """The real bwrap behind a shim that records the argv it was given."""
    log = folder / "bwrap-argv.log"
    shim = folder / "bwrap"
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {log}\nexec {BWRAP} "$@"\n')
    shim.chmod(0o755)
    return str(shim), log


@pytest.mark.skipif(
    BWRAP is None or shutil.which("patch") is None, reason="needs bubblewrap and GNU patch"
)
async def test_apply_patch_preview_runs_patch_in_the_sandbox(
    dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    workspace: WorkspaceFileAPI,
    tmp_path: Path,
) -> None:
    edited = NUMBERS.replace("7\n", "seven (edited)\n")
    workspace.write("n.txt", edited)
    shim, log = _logging_bwrap(tmp_path)
    session = DispatchSession(
        session_id="sess_preview",
        workspace=workspace,
        policy=RulePolicy(),
        sandbox=Sandbox(SandboxConfig(shim), workspace.workspace_root),
    )
    dispatcher.register(ApplyPatchTool)
    call = ToolUseBlock(id="tu_p", name="apply_patch", input={"patch": FUZZY})
    task = asyncio.create_task(dispatcher.dispatch(call, session, turn_id="turn_1"))
    requested = await publisher.wait_for("tool.confirmation_requested")
    # The preview was made by GNU patch, and that patch ran under bwrap.
    assert "+nine" in requested.data["preview"]["text"]
    argv = log.read_text().splitlines()
    assert "--unshare-pid" in argv and "--unshare-net" in argv
    assert any(Path(a).name == "patch" for a in argv)
    dispatcher.broker.resolve(
        requested.data["request_id"], "deny", scope="once", resolved_by="test"
    )
    result = await task
    assert result.is_error
    assert workspace.read("n.txt") == edited


class KeywordPreview(WriteTool):
    """A preview that asks for the sandbox."""

    async def preview(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, sandbox: Sandbox | None = None
    ) -> ConfirmationPreview:
        return ConfirmationPreview(text=f"sandbox={sandbox is not None}")


class KwargsPreview(WriteTool):
    """A preview that takes any keyword."""

    async def preview(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, **extra: Any
    ) -> ConfirmationPreview:
        return ConfirmationPreview(text=f"keys={sorted(extra)}")


async def test_preview_hooks_get_the_sandbox_only_when_they_take_it(
    workspace: WorkspaceFileAPI, tmp_path: Path
) -> None:
    box = Sandbox(SandboxConfig(str(tmp_path / "bwrap")), workspace.workspace_root)
    args = {"path": "a.txt", "content": "hi"}
    # A plugin written before the keyword: called with (input, workspace) only.
    legacy = await ProtocolToolAdapter(WriteTool()).preview(args, workspace, sandbox=box)
    assert legacy is not None and legacy.text == "+hi"
    keyword = await ProtocolToolAdapter(KeywordPreview()).preview(args, workspace, sandbox=box)
    assert keyword is not None and keyword.text == "sandbox=True"
    off = await ProtocolToolAdapter(KeywordPreview()).preview(args, workspace)
    assert off is not None and off.text == "sandbox=False"
    kwargs = await ProtocolToolAdapter(KwargsPreview()).preview(args, workspace, sandbox=box)
    assert kwargs is not None and kwargs.text == "keys=['sandbox']"
