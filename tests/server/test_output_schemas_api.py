"""Output schemas through the server, in-process over HTTP (ASGI): the session's
tool list shows each tool's output_schema, and a git_log call's structured
result reaches the event stream as ``tool.completed.data.structured``, valid
against that schema, while the model's result stays readable text."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft7Validator

from dispatcher.tools.git.tools import GitLogTool
from server.app import create_app
from server.auth import TokenRegistry
from server.config import load_config
from server.runtime import Services
from tests.dispatcher.tools.support import git
from tests.server.support import WAIT, use

TOKEN = "test-admin-output-schemas-0123456789"


@dataclass
class App:
    runtime: Services
    http: httpx2.AsyncClient
    workspace: Path


@pytest.fixture
async def app(tmp_path: Path, workspace: Path) -> AsyncIterator[App]:
    config = load_config(
        None,
        env={"TOOLRELAY_TOKEN": TOKEN},
        overrides={"server.data_dir": str(tmp_path / "data"), "server.port": 0},
    )
    application = create_app(config, TokenRegistry(config.auth.tokens))
    runtime: Services = application.state.runtime
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "README.md").write_text("# Project\n")
    git(workspace, "add", ".")
    git(workspace, "commit", "-q", "-m", "initial commit")
    await runtime.start()
    try:
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=application),
            base_url="http://toolrelay.test",
            headers={"Authorization": f"Bearer {TOKEN}", "X-Client-Name": "schemas"},
            timeout=WAIT,
        ) as http:
            yield App(runtime, http, workspace)
    finally:
        await runtime.stop()


async def test_tool_list_shows_output_schemas_and_events_carry_structured_data(
    app: App,
) -> None:
    r = await app.http.post("/sessions", json={"workspace": str(app.workspace)})
    assert r.status_code == 201, r.text
    sid = str(r.json()["id"])

    listed = (await app.http.get(f"/sessions/{sid}/tools")).json()["tools"]
    tools = {t["name"]: t for t in listed}
    assert tools["git_log"]["output_schema"] == GitLogTool.definition.output_schema
    assert tools["read_file"]["output_schema"] is None  # text only: nothing declared

    r = await app.http.post(
        f"/sessions/{sid}/turns", json={"tool_uses": [use("tu_log", "git_log")]}
    )
    assert r.status_code == 202, r.text
    tid = r.json()["turn_id"]
    async with asyncio.timeout(WAIT):
        for _ in range(1000):
            turn = (await app.http.get(f"/sessions/{sid}/turns/{tid}")).json()
            if turn["status"] != "running":
                break
            await asyncio.sleep(0.02)
    assert turn["status"] == "completed", turn

    # The session's events from its start; bounded by WAIT and by count.
    completed: dict[str, Any] | None = None
    sub = await app.runtime.bus.subscribe(session_id=sid, after=0)
    try:
        async with asyncio.timeout(WAIT):
            for _ in range(200):
                record = await anext(sub)
                if record.type == "tool.completed":
                    completed = record.event.data
                    break
    finally:
        await sub.aclose()
    assert completed is not None and completed["tool_use_id"] == "tu_log"
    structured = completed["structured"]
    schema = GitLogTool.definition.output_schema
    assert schema is not None
    assert list(Draft7Validator(schema).iter_errors(structured)) == []
    assert [c["subject"] for c in structured["commits"]] == ["initial commit"]
    # The model reads a line per commit, not the JSON.
    text = "".join(b.get("text", "") for b in completed["content"])
    assert text.endswith("initial commit") and "{" not in text
