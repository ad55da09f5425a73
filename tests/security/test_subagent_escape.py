"""Attack: a dry-run parent delegates to a sub-agent that can run the shell.

A dry-run promises that nothing in the workspace changes. ``dispatch_subagent``
itself changes nothing (side effects ``none``), so the dry-run lets it run;
the worker session it starts must then be a dry-run too, or its shell and
write calls would run for real under the parent's "plan only" turn.

A real server subprocess, the real anthropic SDK against the fake provider,
the sandbox as the server detects it.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    AGENT_CONFIG,
    MODELS,
    agent_env,
    fake_provider,
    fake_provider_server,
    tool_results_sent,
)
from tests.server.pipeline_support import AUTO_POLICY, checksums
from tests.server.support import new_session, start_turn, use, wait_turn

MODEL = MODELS["anthropic"]


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_provider_server: FakeProviderServer
) -> Iterator[ServerProcess]:
    # Shell commands run unasked: without the dry-run nothing would stop them.
    config: dict[str, Any] = {**AGENT_CONFIG, "policy": AUTO_POLICY}
    srv = ServerProcess(
        tmp_path_factory.mktemp("subagent_escape"),
        config=config,
        env=agent_env(fake_provider_server),
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / f"ws-{secrets.token_hex(4)}"
    root.mkdir()
    (root / "notes.txt").write_text("keep me\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("level", ["session", "turn"])
async def test_a_dry_run_parents_sub_agent_changes_nothing(
    server: ServerProcess, fake_provider: FakeProviderServer, ws: Path, level: str
) -> None:
    before = checksums(ws)
    fake_provider.plan(
        # The child (a `test` sub-agent: shell allowed) tries to change the workspace.
        Reply.tool_calls(
            ToolCall("shell", {"command": "echo pwned > made.txt"}, id="c_shell"),
            ToolCall("run_command", {"command": "touch", "args": ["ran.txt"]}, id="c_run"),
        ),
        Reply.text("Done."),
    )
    async with server.client("alice") as http:
        body: dict[str, Any] = {"model": MODEL}
        if level == "session":
            body["dry_run"] = True
        parent = await new_session(http, ws, **body)
        delegate = use("call_sub", "dispatch_subagent", task="run the tests", agent_type="test")
        if level == "session":
            tid = await start_turn(http, parent, delegate)
        else:
            response = await http.post(
                f"/sessions/{parent}/turns", json={"tool_uses": [delegate], "dry_run": True}
            )
            assert response.status_code == 202, response.text
            tid = response.json()["turn_id"]
        turn = await wait_turn(http, parent, tid)
        child = (await http.get(f"/sessions/{parent}")).json()["children"][0]
        shown = (await http.get(f"/sessions/{child}")).json()
    assert turn["status"] == "completed", turn
    # The property: the workspace is byte for byte what it was.
    assert checksums(ws) == before
    assert not (ws / "made.txt").exists() and not (ws / "ran.txt").exists()
    # ... because the worker session is a dry-run too (its calls were planned).
    assert shown["dry_run"] is True
    results = tool_results_sent(fake_provider.requests[-1])
    assert "[dry-run]" in results["c_shell"][0]
