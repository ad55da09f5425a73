"""Shared parts of the execution-pipeline tests (tests/server/test_pipeline_*.py):
a real app under uvicorn in this process (``InProcessServer``) with a
config file, the offline scripted model playing a YAML script that lives
outside the workspace (``model.scripts_dir``), and a real WebSocket client
on the session's stream."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import yaml

from tests.harness import InProcessServer
from tests.server.support import Event, Stream, wait_turn

# Writes and commands run unasked, so a test never has to answer a prompt
# (the sandbox is on wherever bubblewrap works, which lets the shell run).
AUTO_POLICY: dict[str, Any] = {"default": {"write": "auto", "execute": "auto"}}


@contextmanager
def pipeline_server(root: Path, config: dict[str, Any]) -> Iterator[InProcessServer]:
    """An in-process server with ``config`` (the YAML file's shape) plus a
    scripts dir under ``root``; stopped at exit."""
    scripts = root / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    model = {**config.get("model", {}), "scripts_dir": str(scripts)}
    srv = InProcessServer(root / "server", config={**config, "model": model})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def script(srv: InProcessServer, name: str, replies: list[Any]) -> str:
    """Write a script for the scripted model; the model string that plays it."""
    scripts = Path(srv.config.model.scripts_dir or "")
    path = scripts / f"{name}.yaml"
    path.write_text(yaml.safe_dump(replies), encoding="utf-8")
    return f"scripted:{path}"


def tool_use(name: str, **tool_input: Any) -> dict[str, Any]:
    """A scripted reply asking for one tool call."""
    return {"content": [{"type": "tool_use", "name": name, "input": tool_input}]}


@asynccontextmanager
async def session_stream(srv: InProcessServer, session_id: str) -> AsyncIterator[Stream]:
    """The session's event stream from its first event (a real WebSocket)."""
    stream = await Stream.open(srv.ws_url(f"/sessions/{session_id}/events", after=0))
    try:
        yield stream
    finally:
        await stream.close()


async def run_message_turn(
    http: httpx2.AsyncClient, session_id: str, text: str, **body: Any
) -> Event:
    """Start a model-driven turn and wait (bounded) until it ends."""
    response = await http.post(f"/sessions/{session_id}/turns", json={"message": text, **body})
    assert response.status_code == 202, response.text
    return await wait_turn(http, session_id, response.json()["turn_id"], within=30)


def checksums(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> sha256), and every folder."""
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root) + "/"] = "dir"
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = hashlib.sha256(handle.read()).hexdigest()
    return found
