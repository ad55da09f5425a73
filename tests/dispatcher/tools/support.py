"""Helpers for calling built-in tools directly, the way the dispatcher does:
a fresh instance per call and a ToolContext built by hand."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dispatcher import ToolContext, ToolOutput, WorkspaceFileAPI
from dispatcher.sandbox import Sandbox
from dispatcher.tool import ToolFactory


@dataclass
class OutputLog:
    """Records (stream, text) chunks in the order a tool emits them."""

    chunks: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, stream: str, text: str) -> None:
        self.chunks.append((stream, text))

    def text(self, stream: str) -> str:
        return "".join(t for s, t in self.chunks if s == stream)


def make_context(
    ws: WorkspaceFileAPI,
    *,
    options: Mapping[str, Any] | None = None,
    emit: OutputLog | None = None,
    cancel_event: asyncio.Event | None = None,
    sandbox: Sandbox | None = None,
) -> ToolContext:
    return ToolContext(
        session_id="sess_tools",
        turn_id="turn_1",
        tool_use_id="tu_1",
        workspace_path=ws.workspace_root,
        workspace_files=ws,
        cancel_event=cancel_event or asyncio.Event(),
        options=options or {},
        emit_output=emit or OutputLog(),
        sandbox=sandbox,
    )


async def run_tool(
    factory: ToolFactory,
    input: dict[str, Any],
    ws: WorkspaceFileAPI,
    **context_kwargs: Any,
) -> ToolOutput:
    """One call on a fresh instance, as the dispatcher makes it."""
    tool = factory()
    return await tool.execute(input, make_context(ws, **context_kwargs))


def text_of(output: ToolOutput) -> str:
    return "".join(getattr(b, "text", "") for b in output.content)


GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(cwd: Path | str, *args: str) -> str:
    """Run the real git CLI for test set-up, isolated from the user's config."""
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout
