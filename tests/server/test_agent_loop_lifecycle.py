"""The agent loop around its edges: the offline default, configuration, the step
limit, session deletion, shutdown and crashes mid-turn, and a conversation
that carries on across restarts. Real server subprocesses throughout."""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerFactory, ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    AGENT_CONFIG,
    MODELS,
    agent_env,
    fake_provider,
    fake_provider_server,
    message_turn,
    provider,
    system_prompt_sent,
    tool_results_sent,
    user_texts_sent,
)
from tests.server.support import Stream, new_session, wait_turn

STEP_LIMIT = 2
CUSTOM_PROMPT = "You are a terse test agent. Workspace: {workspace}. Answer in one word."


@pytest.fixture(scope="module")
def scripted_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``toolrelay serve`` as a user without any provider key would start it."""
    srv = ServerProcess(tmp_path_factory.mktemp("scripted"), env={"TOOLRELAY_EVENT_DEBUG": "1"})
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def limited_server(
    tmp_path_factory: pytest.TempPathFactory, fake_provider_server: FakeProviderServer
) -> Iterator[ServerProcess]:
    """A fake-backed server with a small step limit, its own prompt and token cap."""
    config = {
        **AGENT_CONFIG,
        "model": {"max_steps": STEP_LIMIT, "system_prompt": CUSTOM_PROMPT, "max_tokens": 1234},
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("limited"), config=config, env=agent_env(fake_provider_server)
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


# -- the offline default ------------------------------------------------------------------


async def test_scripted_session_end_to_end_with_no_key(
    scripted_server: ServerProcess, workspace: Path
) -> None:
    (workspace / "notes.md").write_text("remember the milk\n")
    srv = scripted_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        assert (await http.get(f"/sessions/{sid}")).json()["model"] is None
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "read notes.md\nlist .")
            done = await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert done["data"]["model"] == "scripted"
    assert done["data"]["steps"] == 2
    assert turn["usage"]["input_tokens"] > 0 and turn["usage"]["output_tokens"] > 0
    assert [r["is_error"] for r in turn["results"]] == [False, False]
    assert "remember the milk" in turn["results"][0]["content"][0]["text"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "2 of 2 tool calls succeeded" in messages[-1]["content"][0]["text"]
    streamed = "".join(e["data"]["text"] for e in stream.of("message.delta"))
    assert "2 of 2 tool calls succeeded" in streamed


async def test_a_bad_model_string_is_refused_at_session_creation(
    scripted_server: ServerProcess, workspace: Path
) -> None:
    async with scripted_server.client("alice") as http:
        response = await http.post(
            "/sessions", json={"workspace": str(workspace), "model": "gemini/pro"}
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "model"
    assert "gemini/pro" in error["message"] and "anthropic/<model>" in error["message"]


async def test_a_provider_without_its_key_is_refused_at_creation(
    scripted_server: ServerProcess, workspace: Path
) -> None:
    """Session creation checks what it can: a model whose provider has no key
    configured is a 422 naming the missing variable, not a later failed turn."""
    async with scripted_server.client("alice") as http:
        response = await http.post(
            "/sessions", json={"workspace": str(workspace), "model": "anthropic/claude-nokey"}
        )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "model"
    assert "ANTHROPIC_API_KEY" in error["message"] and "anthropic/claude-nokey" in error["message"]


# -- configuration and the step limit -------------------------------------------------------


async def test_step_limit_stops_the_turn_and_the_next_message_continues(
    limited_server: ServerProcess,
    fake_provider: FakeProviderServer,
    provider: str,
    workspace: Path,
) -> None:
    fake_provider.plan(
        *(
            Reply.tool_calls(ToolCall("list_dir", {"path": "."}, id=f"call_step{n}"))
            for n in range(STEP_LIMIT)
        ),
        Reply.text("Done listing."),
    )
    srv = limited_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS[provider])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "List forever")
            failed = await stream.until("turn.failed")
            turn = await wait_turn(http, sid, tid)
            assert len(fake_provider.requests) == STEP_LIMIT
            tid2 = await message_turn(http, sid, "Stop now")
            done = await stream.until("turn.completed")
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]

    data = failed["data"]
    assert data["reason"] == "step_limit" and data["steps"] == STEP_LIMIT
    assert "model.max_steps" in data["message"]
    assert data["usage"] == {"input_tokens": 12 * STEP_LIMIT, "output_tokens": 34 * STEP_LIMIT}
    assert turn["status"] == "failed" and turn["reason"] == "step_limit"
    assert turn["usage"] == data["usage"]
    assert [r["tool_use_id"] for r in turn["results"]] == ["call_step0", "call_step1"]
    assert done["turn_id"] == tid2 and done["data"]["steps"] == 1
    # Every call was answered, so the next turn's request is a valid conversation.
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "user", "assistant"]
    last = fake_provider.requests[-1]
    assert set(tool_results_sent(last)) == {"call_step0", "call_step1"}
    assert user_texts_sent(last) == ["List forever", "Stop now"]

    first = fake_provider.requests[0]
    assert system_prompt_sent(first) == CUSTOM_PROMPT.replace("{workspace}", str(workspace))
    token_field = "max_tokens" if provider == "anthropic" else "max_completion_tokens"
    assert first.body[token_field] == 1234


async def test_deleting_the_session_mid_stream_closes_the_provider_connection(
    limited_server: ServerProcess, fake_provider: FakeProviderServer, workspace: Path
) -> None:
    fake_provider.plan(Reply.text("slow " * 100, chunk_size=3, event_delay=0.05))
    srv = limited_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS["openai"])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            await message_turn(http, sid, "Talk slowly")
            await stream.until("message.delta")
            assert (await http.delete(f"/sessions/{sid}")).status_code == 204
            cancelled = await stream.until("turn.cancelled")
            assert cancelled["data"]["reason"] == "session deleted"
            await stream.until("session.deleted")
    record = await fake_provider.wait_for_outcome(0, {"disconnected"})
    assert record.events_sent < record.events_planned


# -- restarts -------------------------------------------------------------------------------


async def test_shutdown_aborts_the_stream_and_the_conversation_survives_a_restart(
    server_factory: ServerFactory, fake_provider: FakeProviderServer, workspace: Path
) -> None:
    (workspace / "a.txt").write_text("first file\n")
    srv = server_factory(AGENT_CONFIG, env=agent_env(fake_provider))
    model = MODELS["anthropic"]
    fake_provider.plan(
        Reply.tool_calls(ToolCall("read_file", {"path": "a.txt"}, id="toolu_read_a")),
        Reply.text("It says first file."),
        Reply.text("slow " * 100, chunk_size=3, event_delay=0.05),
    )
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=model)
        tid1 = await message_turn(http, sid, "Read a.txt")
        assert (await wait_turn(http, sid, tid1))["status"] == "completed"
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid2 = await message_turn(http, sid, "Now talk slowly")
            await stream.until("message.delta", lambda e: e["turn_id"] == tid2)
    srv.stop()  # SIGTERM: graceful shutdown with the model mid-stream
    record = await fake_provider.wait_for_outcome(2, {"disconnected"})
    assert record.events_sent < record.events_planned

    srv.start()
    fake_provider.plan(Reply.text("Still here."))
    async with srv.client("alice") as http:
        turn2 = await wait_turn(http, sid, tid2)
        assert turn2["status"] == "failed" and turn2["reason"] == "server_shutdown"
        tid3 = await message_turn(http, sid, "Are you still there?")
        assert (await wait_turn(http, sid, tid3))["status"] == "completed"
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    # The restarted server sent the whole stored conversation to the model.
    last = fake_provider.requests[-1]
    assert user_texts_sent(last) == ["Read a.txt", "Now talk slowly", "Are you still there?"]
    assert tool_results_sent(last) == {"toolu_read_a": ("first file\n", False)}
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "user", "assistant"]


async def test_a_crash_mid_tool_leaves_a_conversation_the_model_can_continue(
    server_factory: ServerFactory, fake_provider: FakeProviderServer, workspace: Path
) -> None:
    srv = server_factory(AGENT_CONFIG, env=agent_env(fake_provider))
    fake_provider.plan(
        Reply.tool_calls(ToolCall("block", {"seconds": 600}, id="call_block")),
    )
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace, model=MODELS["openai"])
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await message_turn(http, sid, "Block")
            await stream.until("tool.output_delta")
    srv.kill()  # SIGKILL: no shutdown code runs
    srv.start()
    fake_provider.plan(Reply.text("The block was interrupted."))
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "failed" and turn["reason"] == "server_restart"
        tid2 = await message_turn(http, sid, "What happened?")
        assert (await wait_turn(http, sid, tid2))["status"] == "completed"
    text, is_error = tool_results_sent(fake_provider.requests[-1])["call_block"]
    assert is_error is True and text.startswith("Interrupted")
    assert user_texts_sent(fake_provider.requests[-1]) == ["Block", "What happened?"]


async def test_environment_alone_points_the_server_at_an_openai_compatible_endpoint(
    server_factory: ServerFactory, fake_provider: FakeProviderServer, workspace: Path
) -> None:
    # What a user with a local vLLM/Ollama server sets: no key, no code, no session model.
    env = {
        "OPENAI_BASE_URL": fake_provider.openai_base_url,
        "TOOLRELAY_MODEL": "openai-compatible/local-llm",
    }
    srv = server_factory(env=env)
    fake_provider.plan(Reply.text("Hello from the local model."))
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        tid = await message_turn(http, sid, "hi")
        turn = await wait_turn(http, sid, tid)
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert turn["status"] == "completed", turn
    assert messages[-1]["content"][0]["text"] == "Hello from the local model."
    [request] = fake_provider.requests
    assert request.protocol == "openai"
    assert request.body["model"] == "local-llm"
    assert request.body["max_tokens"] == 4096  # compatible servers get the classic field
    assert request.headers["authorization"] == "Bearer not-needed"
