"""Tool input the model emits is held to the same limits as input over HTTP.

A model that streams arguments nested 10,000 levels deep, nested just past the
limit, or holding a huge array gets a validation error result naming the limit
for that call (the call does not run, the turn goes on), and nothing stored
makes a later read of the conversation or the turns fail.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    MODELS,
    agent_server,
    fake_provider,
    fake_provider_server,
    message_turn,
    provider,
    tool_results_sent,
)
from tests.server.support import Stream, new_session, wait_turn


def _nested(levels: int) -> str:
    return '{"path": ' + "[" * levels + "]" * levels + "}"


# The provider SDK parses the 200 KB array streamed in small deltas: seconds on
# an idle machine, far more on a busy one. Its waits use WAIT; this is the cap.
@pytest.mark.timeout(300)
async def test_model_tool_input_over_the_limits_gets_a_validation_error(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("delta\n")
    huge_array = json.dumps({"path": list(range(20_000))})
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("read_file", raw_arguments=_nested(10_000), id="call_abyss"),
            ToolCall("read_file", raw_arguments=_nested(40), id="call_deep"),
            ToolCall("read_file", raw_arguments=huge_array, id="call_wide"),
            ToolCall("read_file", {"path": "notes.md"}, id="call_fine"),
        ),
        Reply.text("Done."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Read it")
            await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
        # Every later read of the session still answers.
        messages = await http.get(f"/sessions/{sid}/messages")
        turns = await http.get(f"/sessions/{sid}/turns")
        one = await http.get(f"/sessions/{sid}/turns/{tid}")
    assert messages.status_code == 200, messages.text
    assert turns.status_code == 200, turns.text
    assert one.status_code == 200, one.text
    assert turn["status"] == "completed", turn

    invalid = {e["data"]["tool_use_id"] for e in stream.of("tool.input_invalid")}
    assert invalid == {"call_abyss", "call_deep", "call_wide"}
    called = [e["data"]["tool_use_id"] for e in stream.of("tool.called")]
    assert called == ["call_fine"], "no call over a limit may run"

    # The model is told which limit each call broke, and can retry.
    sent = tool_results_sent(fake_provider.requests[1])
    assert sent["call_fine"] == ("delta\n", False)
    text, is_error = sent["call_deep"]
    assert is_error and "input.path" in text and "nests deeper than 32 levels" in text
    text, is_error = sent["call_wide"]
    assert is_error and "has 20000 items; at most 10000 are allowed" in text
    text, is_error = sent["call_abyss"]
    assert is_error and "nest too deeply" in text and "nesting depth limit" in text

    # What was stored is the call with empty input, not the oversized one.
    stored = {
        b["id"]: b["input"]
        for m in messages.json()["messages"]
        for b in m["content"]
        if b["type"] == "tool_use"
    }
    assert stored == {
        "call_abyss": {},
        "call_deep": {},
        "call_wide": {},
        "call_fine": {"path": "notes.md"},
    }
    assert [r["is_error"] for r in turn["results"]] == [True, True, True, False]
