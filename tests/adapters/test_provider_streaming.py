"""The Anthropic and OpenAI adapters through the real SDKs against the fake provider.

Every test runs once per protocol; what differs is only how the wire looks.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.anthropic_adapter import AnthropicAdapter
from adapters.base import (
    MessageCompleted,
    RetryScheduled,
    TextDelta,
    ToolUseReady,
    ToolUseStarted,
)
from adapters.errors import (
    ProviderAuthFailed,
    ProviderRateLimited,
    ProviderRejectedRequest,
    ProviderTimeout,
    ProviderUnavailable,
    ProviderUnreachable,
    StreamInterrupted,
)
from adapters.openai_adapter import OpenAIAdapter
from adapters.retry import RetryPolicy
from protocol.canonical import ImageBlock, Message, TextBlock, ToolUseBlock, text_result
from tests.adapters.helpers import (
    FAST_RETRY,
    LIST_DIR,
    READ_FILE,
    collect,
    complete,
    final,
    make_adapter,
    request,
    tool_turn,
    user,
)
from tests.fakes.fake_providers import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    FakeProviderServer,
    HttpError,
    RecordedRequest,
    Reply,
    ToolCall,
)

Adapter = AnthropicAdapter | OpenAIAdapter


@pytest.fixture(params=["anthropic", "openai"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def adapter(kind: str, fake_provider: FakeProviderServer) -> AsyncIterator[Adapter]:
    made = make_adapter(kind, fake_provider)
    yield made
    await made.aclose()


def wire_messages(record: RecordedRequest) -> list[dict[str, Any]]:
    return list(record.body["messages"])


def text_of(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_text_reply_streams_in_pieces(
    kind: str, adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("Hello from the fake provider.", chunk_size=4))
    events = await collect(adapter, request(user("hi"), system="Be brief."))

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 8
    assert text_of(events) == "Hello from the fake provider."
    done = final(events)
    assert done.message == Message(
        role="assistant", content=[TextBlock(text="Hello from the fake provider.")]
    )
    assert done.stop_reason == "end_turn"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (12, 34)
    assert done.malformed_tool_uses == {}

    (sent,) = fake_provider.requests
    assert sent.path == (ANTHROPIC_PATH if kind == "anthropic" else OPENAI_PATH)
    assert sent.body["stream"] is True
    if kind == "anthropic":
        assert sent.body["system"] == "Be brief."
        assert sent.body["max_tokens"] == 4096
        assert wire_messages(sent) == [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]}
        ]
    else:
        assert sent.body["max_completion_tokens"] == 4096
        assert sent.body["stream_options"] == {"include_usage": True}
        assert wire_messages(sent) == [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ]
    # Both SDKs (at these versions) send the key as a bearer token.
    assert sent.headers["authorization"] == "Bearer sk-test"


async def test_two_step_tool_loop(
    kind: str, adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(
        Reply.tool_calls(ToolCall("read_file", {"path": "notes.md"}), text="Reading."),
        Reply.text("The notes say hello."),
    )
    first = await collect(adapter, request(user("what do my notes say?"), tools=[READ_FILE]))

    started = [e for e in first if isinstance(e, ToolUseStarted)]
    ready = [e for e in first if isinstance(e, ToolUseReady)]
    assert [s.name for s in started] == ["read_file"]
    assert [r.block.input for r in ready] == [{"path": "notes.md"}]
    assert started[0].id == ready[0].block.id
    assert first.index(started[0]) < first.index(ready[0])
    reply = final(first)
    assert reply.stop_reason == "tool_use"
    assert reply.message.text() == "Reading."
    assert reply.message.tool_uses() == [ready[0].block]

    use = ready[0].block
    conversation = [
        user("what do my notes say?"),
        reply.message,
        Message(role="tool", content=[text_result(use.id, "hello")]),
    ]
    second = await collect(adapter, request(*conversation, tools=[READ_FILE]))
    assert final(second).message.text() == "The notes say hello."
    assert final(second).stop_reason == "end_turn"

    first_sent, second_sent = fake_provider.requests
    if kind == "anthropic":
        assert first_sent.body["tools"] == [
            {
                "name": "read_file",
                "description": READ_FILE.description,
                "input_schema": READ_FILE.input_schema,
            }
        ]
        assert wire_messages(second_sent)[1:] == [
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": use.id, "name": "read_file", "input": use.input},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.id,
                        "content": [{"type": "text", "text": "hello"}],
                    }
                ],
            },
        ]
    else:
        assert first_sent.body["tools"] == [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": READ_FILE.description,
                    "parameters": READ_FILE.input_schema,
                },
            }
        ]
        assistant, tool = wire_messages(second_sent)[1:]
        assert assistant["content"] == "Reading."
        assert assistant["tool_calls"] == [
            {
                "id": use.id,
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps(use.input)},
            }
        ]
        assert tool == {"role": "tool", "tool_call_id": use.id, "content": "hello"}


@pytest.mark.parametrize("interleave", [False, True])
async def test_parallel_tool_calls_arrive_in_order(
    adapter: Adapter, fake_provider: FakeProviderServer, interleave: bool
) -> None:
    calls = [
        ToolCall("read_file", {"path": "a.txt"}),
        ToolCall("read_file", {"path": "b/c.txt"}),
        ToolCall("list_dir", {"path": "."}),
    ]
    fake_provider.plan(Reply.tool_calls(*calls, chunk_size=3, interleave_tool_calls=interleave))
    events = await collect(adapter, request(user("look"), tools=[READ_FILE, LIST_DIR]))

    blocks = [e.block for e in events if isinstance(e, ToolUseReady)]
    assert [(b.name, b.input) for b in blocks] == [(c.name, dict(c.input or {})) for c in calls]
    assert len({b.id for b in blocks}) == 3
    assert [e.id for e in events if isinstance(e, ToolUseStarted)] == [b.id for b in blocks]
    assert final(events).message.tool_uses() == blocks
    assert final(events).stop_reason == "tool_use"


async def test_tool_error_and_denial_are_fed_back(
    kind: str, adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("I see, I will not write it."))
    uses = [
        ToolUseBlock(id="tu_1", name="read_file", input={"path": "missing.txt"}),
        ToolUseBlock(id="tu_2", name="write_file", input={"path": "x", "content": "y"}),
    ]
    results = [
        text_result("tu_1", "file not found: missing.txt", is_error=True),
        text_result("tu_2", "user denied the call: not in this folder, please", is_error=True),
    ]
    await collect(adapter, request(user("go"), *tool_turn(uses, results)))

    (sent,) = fake_provider.requests
    if kind == "anthropic":
        answer = wire_messages(sent)[-1]
        assert answer["role"] == "user"
        assert [(b["tool_use_id"], b.get("is_error")) for b in answer["content"]] == [
            ("tu_1", True),
            ("tu_2", True),
        ]
        assert answer["content"][1]["content"] == [
            {"type": "text", "text": "user denied the call: not in this folder, please"}
        ]
    else:
        tool_messages = [m for m in wire_messages(sent) if m["role"] == "tool"]
        assert tool_messages == [
            {
                "role": "tool",
                "tool_call_id": "tu_1",
                "content": "ERROR: file not found: missing.txt",
            },
            {
                "role": "tool",
                "tool_call_id": "tu_2",
                "content": "ERROR: user denied the call: not in this folder, please",
            },
        ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"path": "a.txt"', "not valid JSON"),
        ('["a.txt"]', "must be a JSON object, got an array"),
        ('"a.txt"', "must be a JSON object, got a string"),
    ],
)
async def test_malformed_arguments_are_reported_not_raised(
    adapter: Adapter, fake_provider: FakeProviderServer, raw: str, expected: str
) -> None:
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("read_file", raw_arguments=raw), ToolCall("list_dir", {"path": "."})
        )
    )
    events = await collect(adapter, request(user("go"), tools=[READ_FILE, LIST_DIR]))

    done = final(events)
    bad, good = done.message.tool_uses()
    assert bad.input == {}
    assert good.input == {"path": "."}
    assert list(done.malformed_tool_uses) == [bad.id]
    assert expected in done.malformed_tool_uses[bad.id]
    assert raw[:10] in done.malformed_tool_uses[bad.id]


async def test_tool_call_without_arguments_gets_empty_input(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.tool_calls(ToolCall("list_dir", raw_arguments="")))
    done = final(await collect(adapter, request(user("go"), tools=[LIST_DIR])))
    assert done.message.tool_uses()[0].input == {}
    assert done.malformed_tool_uses == {}


async def test_rate_limit_then_success_honours_retry_after(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(HttpError.rate_limited(0.05), Reply.text("finally"))
    events = await collect(adapter, request(user("hi")))

    retries = [e for e in events if isinstance(e, RetryScheduled)]
    assert len(retries) == 1
    assert retries[0].attempt == 1
    assert retries[0].delay == pytest.approx(0.05)
    assert isinstance(retries[0].error, ProviderRateLimited)
    assert retries[0].error.retry_after == pytest.approx(0.05)
    assert events.index(retries[0]) == 0
    assert text_of(events) == "finally"
    assert len(fake_provider.requests) == 2


async def test_retry_after_longer_than_the_cap_is_capped(
    kind: str, fake_provider: FakeProviderServer
) -> None:
    adapter = make_adapter(kind, fake_provider, retry=RetryPolicy(max_delay=0.02, jitter=0.0))
    fake_provider.plan(HttpError.rate_limited(30), Reply.text("ok"))
    events = await collect(adapter, request(user("hi")))
    await adapter.aclose()
    (retry,) = [e for e in events if isinstance(e, RetryScheduled)]
    assert retry.delay == pytest.approx(0.02)


async def test_unauthorised_is_not_retried(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(HttpError(401, "invalid x-api-key"), Reply.text("never sent"))
    with pytest.raises(ProviderAuthFailed) as caught:
        await collect(adapter, request(user("hi")))
    assert caught.value.status_code == 401
    assert caught.value.retryable is False
    assert "invalid x-api-key" in str(caught.value)
    assert len(fake_provider.requests) == 1
    assert fake_provider.pending() == 1


async def test_bad_request_is_not_retried(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(HttpError(400, "model not supported"), Reply.text("never sent"))
    with pytest.raises(ProviderRejectedRequest, match="model not supported"):
        await collect(adapter, request(user("hi")))
    assert len(fake_provider.requests) == 1
    fake_provider.reset()


async def test_server_errors_exhaust_the_retries(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(HttpError(500), HttpError(503), HttpError(529, "Overloaded"))
    with pytest.raises(ProviderUnavailable) as caught:
        await collect(adapter, request(user("hi")))
    assert caught.value.status_code == 529
    assert len(fake_provider.requests) == FAST_RETRY.max_retries + 1


async def test_stream_cut_after_output_is_classified_and_not_retried(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    # Event 6 is well inside the text for both protocols.
    fake_provider.plan(Reply.text("a fairly long reply " * 5, chunk_size=3, cut_after=6))
    fake_provider.plan(Reply.text("must not be used"))
    seen: list[Any] = []
    with pytest.raises(StreamInterrupted):
        async for event in adapter.stream(request(user("hi"))):
            seen.append(event)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert not any(isinstance(e, RetryScheduled | MessageCompleted) for e in seen)
    assert [r.outcome for r in fake_provider.requests] == ["cut"]
    fake_provider.reset()


async def test_stream_cut_before_output_is_retried(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("lost", cut_after=1), Reply.text("second try"))
    events = await collect(adapter, request(user("hi")))
    assert isinstance(events[0], RetryScheduled)
    assert isinstance(events[0].error, StreamInterrupted)
    assert text_of(events) == "second try"
    assert [r.outcome for r in fake_provider.requests] == ["cut", "completed"]


async def test_stream_ending_without_its_terminal_event_is_interrupted(
    kind: str, fake_provider: FakeProviderServer
) -> None:
    adapter = make_adapter(kind, fake_provider, retry=RetryPolicy(max_retries=0))
    fake_provider.plan(Reply.text("half a reply that goes on", chunk_size=2, end_after=8))
    with pytest.raises(StreamInterrupted):
        await collect(adapter, request(user("hi")))
    await adapter.aclose()
    assert [r.outcome for r in fake_provider.requests] == ["ended_early"]


async def test_in_stream_error_event_is_classified_and_retried(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(
        Reply.text("x", error_event_after=1, error_type="overloaded_error"), Reply.text("ok")
    )
    events = await collect(adapter, request(user("hi")))
    assert isinstance(events[0], RetryScheduled)
    assert isinstance(events[0].error, ProviderUnavailable)
    assert text_of(events) == "ok"


async def test_cancelling_the_consumer_closes_the_http_stream(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("slow " * 100, chunk_size=2, event_delay=0.05))
    first_delta = asyncio.Event()
    deltas = 0

    async def consume() -> None:
        nonlocal deltas
        async for event in adapter.stream(request(user("hi"))):
            if isinstance(event, TextDelta):
                deltas += 1
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    record = await fake_provider.wait_for_outcome(0, {"disconnected"}, within=60)
    assert record.events_sent < record.events_planned
    assert deltas < 250


async def test_aclose_on_the_stream_closes_the_http_stream(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("slow " * 100, chunk_size=2, event_delay=0.05))
    stream = adapter.stream(request(user("hi")))
    async for event in stream:
        if isinstance(event, TextDelta):
            break
    await stream.aclose()
    record = await fake_provider.wait_for_outcome(0, {"disconnected"}, within=60)
    assert record.events_sent < record.events_planned


async def test_read_timeout_is_classified(kind: str, fake_provider: FakeProviderServer) -> None:
    adapter = make_adapter(kind, fake_provider, retry=RetryPolicy(max_retries=0), timeout=0.3)
    fake_provider.plan(Reply.text("late", event_delay=2.0))
    with pytest.raises(ProviderTimeout):
        await collect(adapter, request(user("hi")))
    await adapter.aclose()


async def test_unreachable_provider_is_a_connection_error(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # The port was free a moment ago and nothing listens on it now.
    retry = RetryPolicy(max_retries=1, base_delay=0.01)
    adapter: Adapter = (
        AnthropicAdapter("claude-test", api_key="k", base_url=url, retry=retry)
        if kind == "anthropic"
        else OpenAIAdapter("gpt-test", api_key="k", base_url=f"{url}/v1", retry=retry)
    )
    events: list[Any] = []
    with pytest.raises(ProviderUnreachable):
        async for event in adapter.stream(request(user("hi"))):
            events.append(event)
    await adapter.aclose()
    assert [type(e) for e in events] == [RetryScheduled]


# (planned canonical stop, provider's raw word) -> (anthropic result, openai result)
STOP_CASES = [
    (("max_tokens", None, None), ("max_tokens", "max_tokens")),
    # OpenAI says "stop" both for a natural end and for a stop sequence.
    (("stop_sequence", None, None), ("stop_sequence", "end_turn")),
    ((None, "refusal", "content_filter"), ("other", "other")),
    ((None, "model_context_window_exceeded", "length"), ("max_tokens", "max_tokens")),
]


@pytest.mark.parametrize(("plan", "expected"), STOP_CASES)
async def test_stop_reasons_are_mapped(
    kind: str,
    adapter: Adapter,
    fake_provider: FakeProviderServer,
    plan: tuple[str | None, str | None, str | None],
    expected: tuple[str, str],
) -> None:
    stop, raw_anthropic, raw_openai = plan
    raw = raw_anthropic if kind == "anthropic" else raw_openai
    fake_provider.plan(Reply.text("cut sh", stop_reason=stop, raw_stop_reason=raw))
    done = final(await collect(adapter, request(user("hi"))))
    assert done.stop_reason == (expected[0] if kind == "anthropic" else expected[1])
    assert done.raw_stop_reason == (raw or done.raw_stop_reason)
    assert done.raw_stop_reason is not None


async def test_settings_and_images_reach_the_wire(
    kind: str, adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    from adapters.base import ModelSettings

    fake_provider.plan(Reply.text("a cat"))
    picture = Message(
        role="user",
        content=[
            TextBlock(text="what is this?"),
            ImageBlock(media_type="image/png", data="iVBORw0="),
        ],
    )
    settings = ModelSettings(max_tokens=64, temperature=0.2, stop_sequences=("END",))
    await collect(adapter, request(picture, settings=settings))

    (sent,) = fake_provider.requests
    (message,) = [m for m in wire_messages(sent) if m["role"] == "user"]
    if kind == "anthropic":
        # The API version the SDK speaks refuses sampling parameters.
        assert "temperature" not in sent.body
        assert sent.body["max_tokens"] == 64
        assert sent.body["stop_sequences"] == ["END"]
        assert message["content"][1] == {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0="},
        }
    else:
        assert sent.body["temperature"] == 0.2
        assert sent.body["max_completion_tokens"] == 64
        assert sent.body["stop"] == ["END"]
        assert message["content"][1] == {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,iVBORw0="},
        }


async def test_complete_returns_the_final_event(
    adapter: Adapter, fake_provider: FakeProviderServer
) -> None:
    fake_provider.plan(Reply.text("done"))
    done = await complete(adapter, request(user("hi")))
    assert done.message.text() == "done"


async def test_openai_compatible_sends_max_tokens(fake_provider: FakeProviderServer) -> None:
    adapter = make_adapter("openai-compatible", fake_provider)
    assert adapter.name == "openai-compatible/gpt-test"
    fake_provider.plan(Reply.text("local model says hi"))
    events = await collect(adapter, request(user("hi")))
    await adapter.aclose()
    assert text_of(events) == "local model says hi"
    (sent,) = fake_provider.requests
    assert sent.body["max_tokens"] == 4096
    assert "max_completion_tokens" not in sent.body
