"""OpenAI Chat Completions (and compatible servers) behind the canonical interface."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import AsyncGenerator, Hashable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import httpx2
import openai
from openai._models import construct_type
from openai._types import RequestOptions
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from adapters.base import (
    MessageCompleted,
    ModelRequest,
    StopReason,
    StreamEvent,
    TextDelta,
    ToolUseReady,
    ToolUseStarted,
    Usage,
)
from adapters.errors import (
    ProviderError,
    ProviderRejectedRequest,
    ProviderResponseInvalid,
    ProviderTimeout,
    ProviderUnreachable,
    StreamInterrupted,
    error_for_status,
)
from adapters.openai_wire import build_request
from adapters.retry import RetryPolicy, Sleep, with_retries
from adapters.sdk_client import SDKClientOwner
from adapters.tool_args import parse_tool_arguments
from protocol.canonical import ContentBlock, Message, TextBlock, ToolUseBlock

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
}

UNNAMED_TOOL = "unnamed_tool"
# Chunks parsed between two yields to the event loop (the `turn` benchmark's
# loop lag, benchmarks/turn_model.py; figures in benchmarks/README.md).
YIELD_EVERY_CHUNKS = 8
# What create() passes to the SDK's post: authenticate with the bearer key.
_STREAM_OPTIONS: RequestOptions = {"security": {"bearer_auth": True}}


class OpenAIAdapter(SDKClientOwner[openai.AsyncOpenAI]):
    """Streams replies through ``AsyncOpenAI.chat.completions.create(stream=True)``.

    ``provider`` is ``"openai"`` or ``"openai-compatible"``; the latter is the
    same code pointed at another ``base_url`` and sends ``max_tokens`` (the
    name every compatible server knows) instead of ``max_completion_tokens``.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str,
        base_url: str | None = None,
        provider: str = "openai",
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        http_client: httpx2.AsyncClient | None = None,
        include_usage: bool = True,
        max_tokens_field: str | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model id")
        self.model = model
        self.provider = provider
        self.name = f"{provider}/{model}"
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._include_usage = include_usage
        self._max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if provider == "openai" else "max_tokens"
        )
        self._api_key = api_key
        self._base_url = base_url
        self._timeout = timeout
        self._http_client = http_client
        self._init_client(eager=http_client is not None)

    def _build_client(self) -> openai.AsyncOpenAI:
        _prime_chunk_parsing()
        return openai.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self._base_url,
            timeout=httpx2.Timeout(self._timeout, connect=min(self._timeout, 10.0)),
            max_retries=0,
            http_client=self._http_client,
        )

    def _pool_key(self) -> Hashable:
        return ("openai", self.provider, self._base_url, self._api_key, self._timeout)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one reply; see :class:`adapters.base.ModelAdapter`."""
        body = build_request(
            request,
            self.model,
            max_tokens_field=self._max_tokens_field,
            include_usage=self._include_usage,
        )
        async with aclosing(
            with_retries(lambda: self._attempt(body), self.retry, sleep=self._sleep)
        ) as events:
            async for event in events:
                yield event

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[StreamEvent, None]:
        try:
            client = await self._sdk()
            # The SDK's own post, not chat.completions.create(): create() first walks
            # the whole request (every message, every tool schema) through its
            # TypedDict transform, CPU on the event loop per call (the `turn`
            # benchmark, benchmarks/turn_model.py; figures in benchmarks/README.md),
            # which returns our body unchanged: build_request already makes plain
            # JSON. Sending, auth, errors and stream parsing are the SDK's as before.
            sdk_stream = await client.post(
                "/chat/completions",
                body={**body, "stream": True},
                options=_STREAM_OPTIONS,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=openai.AsyncStream[ChatCompletionChunk],
            )
        except Exception as exc:
            raise classify_error(exc, mid_stream=False, provider=self.provider) from exc
        assembler = _ReplyAssembler(self.provider)
        async with sdk_stream:
            iterator = sdk_stream.__aiter__()
            for count in itertools.count(1):
                try:
                    chunk = await anext(iterator)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    raise classify_error(exc, mid_stream=True, provider=self.provider) from exc
                for event in assembler.feed(chunk):
                    yield event
                if count % YIELD_EVERY_CHUNKS == 0:
                    # One network read can hold a whole reply; the SDK parses its
                    # chunks without giving the loop back. Let other
                    # sessions' callbacks run between slices.
                    await asyncio.sleep(0)
        if assembler.finish_reason is None:
            raise StreamInterrupted(
                "the stream ended without a finish_reason", provider=self.provider
            )
        yield assembler.completed()


_primed = False


def _prime_chunk_parsing() -> None:
    """Parse one chunk of each shape once, in the worker thread that builds the
    client: the SDK's first parse of a chunk type fills its type caches, which
    would otherwise happen on the event loop in the first turn (the `turn`
    benchmark's cold first turn, benchmarks/turn_model.py)."""
    global _primed
    if _primed:
        return
    call = {"index": 0, "id": "c", "type": "function", "function": {"name": "n", "arguments": "{}"}}
    delta = {"role": "assistant", "content": "x", "refusal": None, "tool_calls": [call]}
    head = {"id": "p", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    for sample in (
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
    ):
        construct_type(type_=ChatCompletionChunk, value={**head, **sample})
    _primed = True


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    announced: bool = False


class _ReplyAssembler:
    """Assembles text and tool calls (by index, possibly interleaved) from chunks."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.text: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.ready: list[ToolUseBlock] = []
        self.malformed: dict[str, str] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()

    def feed(self, chunk: Any) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if chunk.usage is not None:
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
            )
        if not chunk.choices:
            return events
        choice = chunk.choices[0]
        delta = choice.delta
        if delta is not None:
            # A refusal is the model's answer too; it is shown as text.
            for piece in (delta.content, getattr(delta, "refusal", None)):
                if piece:
                    self.text.append(piece)
                    events.append(TextDelta(piece))
            for call_delta in delta.tool_calls or []:
                events.extend(self._call_delta(call_delta))
        if choice.finish_reason is not None and self.finish_reason is None:
            self.finish_reason = choice.finish_reason
            events.extend(self._close_calls())
        return events

    def _call_delta(self, call_delta: Any) -> list[StreamEvent]:
        pending = self.calls.setdefault(call_delta.index, _PendingCall())
        if call_delta.id and not pending.id:
            pending.id = call_delta.id
        function = call_delta.function
        if function is not None:
            # Names arrive whole in the first delta; later repeats are ignored.
            if function.name and not pending.name:
                pending.name = function.name
            if function.arguments:
                pending.arguments.append(function.arguments)
        if not pending.announced and pending.id and pending.name:
            pending.announced = True
            return [ToolUseStarted(id=pending.id, name=pending.name)]
        return []

    def _close_calls(self) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        for index in sorted(self.calls):
            pending = self.calls[index]
            call_id = pending.id or f"call_{secrets.token_hex(12)}"
            arguments, problem = parse_tool_arguments("".join(pending.arguments))
            name = pending.name
            if not name:
                name = UNNAMED_TOOL
                problem = "the model sent a tool call without a function name"
            if problem is not None:
                self.malformed[call_id] = problem
            block = ToolUseBlock(id=call_id, name=name, input=arguments)
            self.ready.append(block)
            events.append(ToolUseReady(block))
        return events

    def completed(self) -> MessageCompleted:
        content: list[ContentBlock] = []
        text = "".join(self.text)
        if text:
            content.append(TextBlock(text=text))
        content.extend(self.ready)
        raw = self.finish_reason
        stop: StopReason = _FINISH_REASONS.get(raw or "", "other")
        # Some compatible servers say "stop" even when they made tool calls.
        if self.ready and stop == "end_turn":
            stop = "tool_use"
        return MessageCompleted(
            message=Message(role="assistant", content=content),
            stop_reason=stop,
            usage=self.usage,
            malformed_tool_uses=dict(self.malformed),
            raw_stop_reason=raw,
        )


def classify_error(exc: BaseException, *, mid_stream: bool, provider: str) -> ProviderError:
    """Map an SDK or transport exception onto the closed ProviderError set."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        body_type, message = _error_body(exc.body, exc.message)
        return error_for_status(
            exc.status_code,
            message,
            provider=provider,
            headers=exc.response.headers,
            body_type=body_type,
        )
    if isinstance(exc, openai.APITimeoutError | httpx2.TimeoutException):
        return ProviderTimeout(f"timed out: {exc}", provider=provider)
    if isinstance(exc, openai.APIConnectionError | httpx2.TransportError):
        cause = exc.__cause__ or exc
        if mid_stream:
            return StreamInterrupted(f"the stream broke off: {cause}", provider=provider)
        return ProviderUnreachable(f"cannot reach the provider: {cause}", provider=provider)
    if isinstance(exc, openai.APIResponseValidationError | ValueError):
        return ProviderResponseInvalid(f"unreadable reply: {exc}", provider=provider)
    if isinstance(exc, openai.APIError):
        # An error object sent inside a 200 stream.
        body_type, message = _error_body(exc.body, exc.message)
        return error_for_status(200, message, provider=provider, body_type=body_type)
    if isinstance(exc, openai.OpenAIError):
        return ProviderRejectedRequest(str(exc), provider=provider)
    raise exc


def _error_body(body: object, fallback: str) -> tuple[str | None, str]:
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code")
            message = error.get("message")
            return (
                kind if isinstance(kind, str) else None,
                message if isinstance(message, str) and message else fallback,
            )
    return None, fallback
