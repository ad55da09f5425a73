"""The agent loop end to end, once per provider protocol.

A real server subprocess runs ``{"message": ...}`` turns; inside it the real
anthropic / openai SDKs stream from the fake provider server on 127.0.0.1.
Each test plans the model's replies, watches the session's event stream, and
reads back what the SDKs sent, so "fed back to the model" is checked on the
wire, not inferred.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import httpx2
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.fake_providers import FakeProviderServer, HttpError, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    MODELS,
    agent_server,
    fake_provider,
    fake_provider_server,
    message_turn,
    provider,
    system_prompt_sent,
    tool_names_offered,
    tool_results_sent,
    user_texts_sent,
)
from tests.server.support import Stream, new_session, result_text, wait_turn


async def test_two_step_tool_loop_streams_and_records_usage(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("alpha beta\n")
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("read_file", {"path": "notes.md"}, id="call_read_1"),
            text="Let me read the notes.",
            input_tokens=100,
            output_tokens=20,
        ),
        Reply.text("The notes say alpha beta.", input_tokens=150, output_tokens=9),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "What do the notes say?")
            done = await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]

    usage = {"input_tokens": 250, "output_tokens": 29}
    assert turn["status"] == "completed" and turn["kind"] == "message"
    assert turn["usage"] == usage
    assert done["data"]["usage"] == usage
    assert done["data"]["steps"] == 2 and done["data"]["stop_reason"] == "end_turn"
    assert done["data"]["model"] == MODELS[provider]

    started = stream.of("turn.started")[0]
    assert started["data"]["source"] == "message"
    deltas = stream.of("message.delta")
    assert len(deltas) > 2, "text must stream in several deltas"
    by_step = {
        step: "".join(d["data"]["text"] for d in deltas if d["data"]["step"] == step)
        for step in (1, 2)
    }
    assert by_step == {1: "Let me read the notes.", 2: "The notes say alpha beta."}
    completed = [e["data"]["message"]["role"] for e in stream.of("message.completed")]
    assert completed == ["user", "assistant", "tool", "assistant"]
    # Linear: the second model call starts only after the tool finished.
    types = [e["type"] for e in stream.events]
    last_step_one = max(
        i for i, e in enumerate(stream.events) if e.get("data", {}).get("step") == 1
    )
    first_step_two = types.index("message.delta", types.index("tool.completed"))
    assert last_step_one < types.index("tool.called") < types.index("tool.completed")
    assert stream.events[first_step_two]["data"]["step"] == 2

    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert all(m["turn_id"] == tid for m in messages)
    assert messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "call_read_1",
        "name": "read_file",
        "input": {"path": "notes.md"},
    }
    assert turn["results"] == messages[2]["content"]

    first, second = fake_provider.requests
    assert first.protocol == provider and first.outcome == "completed"
    assert "read_file" in tool_names_offered(first)
    assert str(workspace) in system_prompt_sent(first)
    assert user_texts_sent(first) == ["What do the notes say?"]
    assert tool_results_sent(second) == {"call_read_1": ("alpha beta\n", False)}


async def test_parallel_tool_calls_run_together_capped_at_four(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    group = secrets.token_hex(4)
    calls = [
        ToolCall("rendezvous", {"group": group, "size": 4, "wait": 5}, id=f"call_r{i}")
        for i in range(6)
    ]
    fake_provider.plan(
        Reply.tool_calls(*calls, interleave_tool_calls=True, chunk_size=7),
        Reply.text("All six met."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        tid = await message_turn(http, sid, "Meet up.")
        turn = await wait_turn(http, sid, tid)
    assert turn["status"] == "completed", turn
    # Six calls, the first four all inside at once and never more: the session's cap.
    assert [result_text(r) for r in turn["results"]] == ["peak 4"] * 6
    assert [r["tool_use_id"] for r in turn["results"]] == [f"call_r{i}" for i in range(6)]
    sent = tool_results_sent(fake_provider.requests[1])
    assert list(sent) == [f"call_r{i}" for i in range(6)]
    assert set(sent.values()) == {("peak 4", False)}


async def test_tool_error_is_fed_back_to_the_model(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(
        Reply.tool_calls(ToolCall("read_file", {"path": "missing.txt"}, id="call_missing")),
        Reply.text("That file does not exist."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Read missing.txt")
            done = await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
    failed = stream.of("tool.failed")
    assert [f["data"]["tool_use_id"] for f in failed] == ["call_missing"]
    assert turn["status"] == "completed" and done["data"]["errors"] == 1
    text, is_error = tool_results_sent(fake_provider.requests[1])["call_missing"]
    assert is_error is True
    assert "missing.txt" in text
    assert text == result_text(turn["results"][0])


async def test_denied_confirmation_reaches_the_model_with_its_reason(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("write_file", {"path": "out.txt", "content": "hi\n"}, id="call_write")
        ),
        Reply.text("Understood, I will not write it."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Write out.txt")
            asked = await stream.until("tool.confirmation_requested")
            assert asked["data"]["tool_use_id"] == "call_write"
            response = await http.post(
                f"/sessions/{sid}/turns/{tid}/confirmations/{asked['data']['request_id']}",
                json={"decision": "deny", "message": "no writes before the review"},
            )
            assert response.status_code == 200, response.text
            await stream.until("turn.completed")
    assert not (workspace / "out.txt").exists()
    assert len(fake_provider.requests) == 2
    text, is_error = tool_results_sent(fake_provider.requests[1])["call_write"]
    assert is_error is True
    assert "no writes before the review" in text


async def test_malformed_arguments_get_a_validation_error_and_the_model_retries(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("gamma\n")
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("read_file", raw_arguments='{"path": "notes.md"', id="call_bad"),
            ToolCall("list_dir", {"path": "."}, id="call_list"),
        ),
        Reply.tool_calls(ToolCall("read_file", {"path": "notes.md"}, id="call_good")),
        Reply.text("It says gamma."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Read the notes")
            done = await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
    invalid = stream.of("tool.input_invalid")
    assert [e["data"]["tool_use_id"] for e in invalid] == ["call_bad"]
    assert "not valid JSON" in invalid[0]["data"]["errors"][0]["message"]
    called = [e["data"]["tool_use_id"] for e in stream.of("tool.called")]
    assert called == ["call_list", "call_good"], "the malformed call must not run"
    assert done["data"]["steps"] == 3

    sent = tool_results_sent(fake_provider.requests[1])
    text, is_error = sent["call_bad"]
    assert is_error is True
    assert "not valid JSON" in text and '{"path": "notes.md"' in text
    assert sent["call_list"] == ("notes.md", False)
    assert tool_results_sent(fake_provider.requests[2])["call_good"] == ("gamma\n", False)
    assert turn["status"] == "completed"
    assert [r["is_error"] for r in turn["results"]] == [True, False, False]


async def test_rate_limit_is_retried_then_succeeds(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(HttpError.rate_limited(0.05), Reply.text("Fine now."))
    srv = agent_server
    async with srv.client("alice") as http:
        before = await retries_counted(http, provider)
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Hello?")
            await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        # The observer counts just after the event is committed: poll, bounded.
        for _ in range(200):
            after = await retries_counted(http, provider)
            if after >= before + 1:
                break
            await asyncio.sleep(0.05)
    assert turn["status"] == "completed", turn
    assert [r.outcome for r in fake_provider.requests] == ["http_error", "completed"]
    assert messages[-1]["content"] == [{"type": "text", "text": "Fine now."}]
    # The retry is visible in the server log, tied to the turn ...
    assert f"turn {tid} step 1: model call retry 1" in srv.stderr()
    # ... as an event of the turn, before the reply ...
    (retry,) = stream.of("model.retry")
    assert retry["turn_id"] == tid
    assert retry["data"]["attempt"] == 1 and retry["data"]["error_kind"] == "rate_limit"
    assert retry["data"]["provider"] == provider and retry["data"]["delay_s"] >= 0
    types = [e["type"] for e in stream.events]
    assert types.index("model.retry") < types.index("message.delta")
    # ... and in /metrics.
    assert after == before + 1


async def retries_counted(http: httpx2.AsyncClient, provider: str) -> float:
    r = await http.get("/metrics")
    assert r.status_code == 200, r.text
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            if sample.name == "toolrelay_provider_retries_total" and sample.labels == {
                "provider": provider,
                "error_kind": "rate_limit",
            }:
                return sample.value
    return 0.0


async def test_stream_cut_midway_fails_the_turn_with_its_kind(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(Reply.text("word " * 40, chunk_size=4, cut_after=6))
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Say many words")
            failed = await stream.until("turn.failed")
        turn = await wait_turn(http, sid, tid)
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert stream.of("message.delta"), "the cut came after text was shown"
    data = failed["data"]
    assert data["reason"] == "model_error"
    assert data["error_kind"] == "stream_interrupted"
    assert data["provider"] == provider
    assert "stream_interrupted" in data["message"] and "model call 1" in data["message"]
    assert turn["status"] == "failed" and turn["reason"] == "model_error"
    # Text was already shown, so it was not retried (a retry could repeat it).
    assert [r.outcome for r in fake_provider.requests] == ["cut"]
    # Only complete messages enter the conversation.
    assert [m["role"] for m in messages] == ["user"]


async def test_auth_error_fails_the_turn_without_retrying(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(HttpError(401, "invalid x-api-key"))
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await message_turn(http, sid, "Hello")
            failed = await stream.until("turn.failed")
    assert failed["data"]["error_kind"] == "auth"
    assert failed["data"]["status_code"] == 401
    assert "invalid x-api-key" in failed["data"]["message"]
    assert len(fake_provider.requests) == 1


async def test_cancel_mid_stream_closes_the_provider_connection(
    agent_server: ServerProcess, fake_provider: FakeProviderServer, provider: str, workspace: Path
) -> None:
    fake_provider.plan(
        Reply.text("slow " * 100, chunk_size=3, event_delay=0.05),
        Reply.text("Here again."),
    )
    srv = agent_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Talk slowly")
            await stream.until("message.delta")
            response = await http.post(f"/sessions/{sid}/turns/{tid}/cancel")
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "cancelled"
            cancelled = await stream.until("turn.cancelled")
            assert cancelled["data"]["reason"] == "cancelled"
            assert cancelled["data"]["cancelled_by"] == "alice"
            record = await fake_provider.wait_for_outcome(0, {"disconnected"})
            assert record.events_sent < record.events_planned

            # The session goes on: the next turn sees the first message, not a partial reply.
            tid2 = await message_turn(http, sid, "Are you there?")
            await stream.until("turn.completed", lambda e: e["turn_id"] == tid2)
    assert stream.of("turn.failed") == []
    assert user_texts_sent(fake_provider.requests[1]) == ["Talk slowly", "Are you there?"]
