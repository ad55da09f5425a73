"""The lifecycle hooks the server runs outside tool calls: session_start,
session_end, pre_llm_call / post_llm_call (with the step), on_error and
agent_complete, and a pre_llm_call block failing the turn with
``blocked_by_hook``. A real app in this process, the scripted model, a real
WebSocket client; each hook appends its stdin (the JSON context) to a file
in the workspace, its cwd."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import InProcessServer
from tests.server.pipeline_support import (
    pipeline_server,
    run_message_turn,
    script,
    session_stream,
    tool_use,
)
from tests.server.support import new_session

# Append the context (one JSON line) to hooks.jsonl in the workspace.
RECORD = "cat >> hooks.jsonl && echo >> hooks.jsonl"
# pre_llm_call blocks (exit 2) in a workspace holding a .no_model file.
GUARD = "test -f .no_model && { echo 'model calls are switched off here' >&2; exit 2; }; exit 0"


def _hooks() -> dict[str, Any]:
    events = (
        "session_start",
        "session_end",
        "pre_llm_call",
        "post_llm_call",
        "on_error",
        "agent_complete",
    )
    hooks: dict[str, Any] = {
        event: [{"name": f"rec-{event}", "command": RECORD}] for event in events
    }
    hooks["pre_llm_call"].append({"name": "model-switch", "command": GUARD})
    return hooks


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    config = {"model": {"system_prompt": "Be brief."}, "hooks": _hooks()}
    with pipeline_server(tmp_path_factory.mktemp("hooks"), config) as server:
        yield server


def _recorded(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / "hooks.jsonl"
    text = path.read_text("utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("notes\n", encoding="utf-8")
    return root


async def test_a_sessions_life_runs_its_hooks_in_order(
    srv: InProcessServer, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path)
    model = script(srv, "life", [tool_use("read_file", path="notes.txt"), "Read it."])
    async with srv.client("hooks") as http:
        sid = await new_session(http, workspace, model=model)
        # session_start ran before the answer.
        assert [r["event"] for r in _recorded(workspace)] == ["session_start"]
        async with session_stream(srv, sid) as stream:
            turn = await run_message_turn(http, sid, "read the notes")
            await stream.until("turn.completed")
            assert (await http.delete(f"/sessions/{sid}")).status_code == 204
            await stream.until("session.deleted")
    assert turn["status"] == "completed"
    recorded = _recorded(workspace)
    assert [(r["event"], r.get("extra", {}).get("step")) for r in recorded] == [
        ("session_start", None),
        ("pre_llm_call", 1),
        ("post_llm_call", 1),
        ("pre_llm_call", 2),
        ("post_llm_call", 2),
        ("agent_complete", None),
        ("session_end", None),
    ]
    assert all(r["session_id"] == sid for r in recorded)
    assert recorded[2]["extra"]["stop_reason"] == "tool_use"
    assert recorded[5]["extra"]["steps"] == 2
    # Every run is a hook.completed event on the session's stream, in the turn.
    completed = stream.of("hook.completed")
    in_turn = [e for e in completed if e["turn_id"] == turn["id"]]
    assert {e["data"]["event"] for e in in_turn} == {
        "pre_llm_call",
        "post_llm_call",
        "agent_complete",
    }
    assert all(e["data"]["decision"] == "allow" for e in completed)
    assert completed[-1]["data"]["event"] == "session_end"


async def test_a_failing_turn_runs_on_error(srv: InProcessServer, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    # One reply only: the second turn asks the model for one it does not have.
    model = script(srv, "short", ["Hello."])
    async with srv.client("hooks") as http:
        sid = await new_session(http, workspace, model=model)
        assert (await run_message_turn(http, sid, "hi"))["status"] == "completed"
        async with session_stream(srv, sid) as stream:
            failed = await run_message_turn(http, sid, "again")
            end = await stream.until("turn.failed")
    assert failed["reason"] == "model_error"
    on_error = [r for r in _recorded(workspace) if r["event"] == "on_error"]
    assert len(on_error) == 1 and on_error[0]["extra"]["reason"] == "model_error"
    # The hook ran before the turn's end was published.
    hooks = [e for e in stream.of("hook.completed") if e["data"]["event"] == "on_error"]
    assert len(hooks) == 1 and hooks[0]["turn_id"] == failed["id"]
    assert hooks[0]["session_seq"] < end["session_seq"]


async def test_a_pre_llm_call_block_fails_the_turn_naming_the_hook(
    srv: InProcessServer, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path)
    (workspace / ".no_model").write_text("", encoding="utf-8")
    model = script(srv, "blocked", ["never played"])
    async with srv.client("hooks") as http:
        sid = await new_session(http, workspace, model=model)
        async with session_stream(srv, sid) as stream:
            turn = await run_message_turn(http, sid, "hi")
            failed = await stream.until("turn.failed")
    assert turn["status"] == "failed" and turn["reason"] == "blocked_by_hook"
    assert "'model-switch'" in turn["message"]
    assert "model calls are switched off here" in turn["message"]
    assert failed["data"]["blocked_by"] == {"kind": "hook", "name": "model-switch"}
    assert turn["usage"] == {"input_tokens": 0, "output_tokens": 0}
    blocks = [e for e in stream.of("hook.completed") if e["data"]["decision"] == "block"]
    assert [e["data"]["hook"] for e in blocks] == ["model-switch"]
    # No model reply was asked for: no assistant message in the conversation.
    assert not stream.of("message.delta")
