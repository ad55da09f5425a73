"""Shared builders for the adapter tests."""

from __future__ import annotations

import threading
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from adapters.anthropic_adapter import AnthropicAdapter
from adapters.base import MessageCompleted, ModelAdapter, ModelRequest, StreamEvent
from adapters.errors import ProviderResponseInvalid
from adapters.openai_adapter import OpenAIAdapter
from adapters.retry import RetryPolicy
from protocol.canonical import (
    Message,
    SideEffects,
    TextBlock,
    ToolDefinition,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.fakes.fake_providers import FakeProviderServer

# Short waits so retry tests stay fast; no jitter so delays are exact.
FAST_RETRY = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.2, jitter=0.0)

READ_FILE = ToolDefinition(
    name="read_file",
    description="Read a text file from the workspace.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string", "description": "relative path"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    side_effects=SideEffects.READ,
)
LIST_DIR = ToolDefinition(
    name="list_dir",
    description="List a directory.",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    side_effects=SideEffects.READ,
)


def make_adapter(
    kind: str, fake: FakeProviderServer, *, retry: RetryPolicy = FAST_RETRY, **options: Any
) -> AnthropicAdapter | OpenAIAdapter:
    """An adapter of ``kind`` (anthropic, openai, openai-compatible) aimed at ``fake``."""
    if kind == "anthropic":
        return AnthropicAdapter(
            "claude-test",
            api_key="sk-test",
            base_url=fake.anthropic_base_url,
            retry=retry,
            **options,
        )
    return OpenAIAdapter(
        "gpt-test",
        api_key="sk-test",
        base_url=fake.openai_base_url,
        provider=kind,
        retry=retry,
        **options,
    )


def user(text: str) -> Message:
    return Message(role="user", content=[TextBlock(text=text)])


def request(
    *messages: Message, tools: list[ToolDefinition] | None = None, **kw: Any
) -> ModelRequest:
    return ModelRequest(messages=list(messages), tools=tools or [], **kw)


def tool_turn(uses: list[ToolUseBlock], results: list[ToolResultBlock]) -> list[Message]:
    """The assistant tool-call message and the tool message answering it."""
    return [
        Message(role="assistant", content=list(uses)),
        Message(role="tool", content=list(results)),
    ]


async def collect(adapter: ModelAdapter, req: ModelRequest) -> list[StreamEvent]:
    """Every event of one call, in order."""
    return [event async for event in adapter.stream(req)]


def final(events: list[StreamEvent]) -> MessageCompleted:
    last = events[-1]
    assert isinstance(last, MessageCompleted), f"last event is {last!r}"
    return last


class CountingProvider(FakeProviderServer):
    """The fake provider, also keeping each request's client address."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[tuple[str, int]] = []
        self._peer_lock = threading.Lock()

    async def _handle(self, request: Request, protocol: str) -> Response:
        if request.client is not None:
            with self._peer_lock:
                self.peers.append((request.client.host, request.client.port))
        return await super()._handle(request, protocol)


async def complete(adapter: ModelAdapter, request: ModelRequest) -> MessageCompleted:
    """Run one call to the end and return its final event (deltas are dropped).

    Only tests need a call without its stream; the agent loop always streams.
    """
    stream = adapter.stream(request)
    found: MessageCompleted | None = None
    try:
        async for event in stream:
            if isinstance(event, MessageCompleted):
                found = event
    finally:
        await stream.aclose()
    if found is None:
        raise ProviderResponseInvalid(
            "the stream ended without a completed message", provider=adapter.name
        )
    return found
