"""Quality gates (``guardrails.quality_gates``) when the agent finishes a
turn: each outcome is a ``quality_gate.completed`` event; a failing required
gate goes back to the model for one more round (once per turn); the turn
ends normally with the gates' outcome in its record. A real app in this
process, the scripted model, a real WebSocket client; the gates run in the
workspace (in the sandbox where bubblewrap works)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import InProcessServer
from tests.server.pipeline_support import (
    AUTO_POLICY,
    pipeline_server,
    run_message_turn,
    script,
    session_stream,
    tool_use,
)
from tests.server.support import new_session

MISSING = "test -f fixed.txt || { echo 'fixed.txt is missing'; exit 3; }"
CONFIG = {
    "policy": AUTO_POLICY,
    "model": {"system_prompt": "Be brief."},
    "guardrails": {
        "quality_gates": [
            {
                "name": "fixed",
                "command": "test -f fixed.txt || { echo 'fixed.txt is missing'; exit 3; }",
            },
            {"name": "advisory", "command": "echo 'style: fine'; exit 1", "required": False},
        ]
    },
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    with pipeline_server(tmp_path_factory.mktemp("gates"), CONFIG) as server:
        yield server


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    return root


async def test_a_failing_required_gate_gets_one_more_round(
    srv: InProcessServer, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path)
    model = script(
        srv,
        "fix",
        ["Done.", tool_use("write_file", path="fixed.txt", content="ok\n"), "Fixed it."],
    )
    async with srv.client("gates") as http:
        sid = await new_session(http, workspace, model=model)
        async with session_stream(srv, sid) as stream:
            turn = await run_message_turn(http, sid, "make it pass")
            completed = await stream.until("turn.completed")
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert turn["status"] == "completed"
    gates = [e["data"] for e in stream.of("quality_gate.completed")]
    assert [(g["name"], g["passed"]) for g in gates] == [
        ("fixed", False),
        ("advisory", False),
        ("fixed", True),
        ("advisory", False),
    ]
    assert gates[0]["exit_code"] == 3 and "fixed.txt is missing" in gates[0]["output"]
    # The model read the failed required gate (not the advisory one) as a user message.
    feedback = [m for m in messages if m["role"] == "user"][1]["content"][0]["text"]
    assert feedback.startswith("[Quality gate fixed: FAILED (exit 3)]")
    assert "advisory" not in feedback
    outcome = [(g["name"], g["passed"], g["required"]) for g in turn["quality_gates"]]
    assert outcome == [("fixed", True, True), ("advisory", False, False)]
    assert completed["data"]["quality_gates"] == turn["quality_gates"]
    assert completed["data"]["steps"] == 3


async def test_the_extra_round_is_given_once_per_turn(srv: InProcessServer, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    model = script(srv, "stubborn", ["Done.", "Still done."])
    async with srv.client("gates") as http:
        sid = await new_session(http, workspace, model=model)
        turn = await run_message_turn(http, sid, "make it pass")
    assert turn["status"] == "completed"
    assert [(g["name"], g["passed"]) for g in turn["quality_gates"]] == [
        ("fixed", False),
        ("advisory", False),
    ]
    assert turn["usage"]["output_tokens"] > 0
    assert not (workspace / "fixed.txt").exists()


async def test_a_dry_run_turn_runs_no_gates(srv: InProcessServer, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    model = script(srv, "dry", ["Nothing to do."])
    async with srv.client("gates") as http:
        sid = await new_session(http, workspace, model=model)
        turn = await run_message_turn(http, sid, "plan", dry_run=True)
    assert turn["status"] == "completed" and turn["quality_gates"] is None
    assert turn["plan"] == []
