"""The Anthropic Messages API behind the canonical interface (official SDK, streaming)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncGenerator, Hashable
from contextlib import aclosing
from typing import Any

import anthropic
import httpx2
from anthropic._models import construct_type
from anthropic.types import RawMessageStreamEvent

from adapters.anthropic_wire import build_request
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
    ProviderAuthFailed,
    ProviderError,
    ProviderRejectedRequest,
    ProviderResponseInvalid,
    ProviderTimeout,
    ProviderUnreachable,
    StreamInterrupted,
    error_for_status,
)
from adapters.retry import RetryPolicy, Sleep, with_retries
from adapters.sdk_client import SDKClientOwner
from adapters.tool_args import parse_tool_arguments
from protocol.canonical import ContentBlock, Message, TextBlock, ToolUseBlock

PROVIDER = "anthropic"

logger = logging.getLogger(__name__)

# Stream events parsed between two yields to the event loop.
YIELD_EVERY_EVENTS = 8

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    # The context window ran out mid-reply: as truncated as a max_tokens stop.
    "model_context_window_exceeded": "max_tokens",
}


class AnthropicAdapter(SDKClientOwner[anthropic.AsyncAnthropic]):
    """Streams Claude replies through ``AsyncAnthropic.messages.create(stream=True)``.

    The SDK's own retries are off; :class:`~adapters.retry.RetryPolicy` decides.
    ``timeout`` bounds connecting and each wait for stream bytes, not the whole reply.
    """

    provider = PROVIDER

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        auth_token: str | None = None,
        base_url: str | None = None,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        http_client: httpx2.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model id")
        self.model = model
        self.name = f"{PROVIDER}/{model}"
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._warned_sampling = False
        self._api_key = api_key
        self._auth_token = auth_token
        self._base_url = base_url
        self._timeout = timeout
        self._http_client = http_client
        self._init_client(eager=http_client is not None)

    def _build_client(self) -> anthropic.AsyncAnthropic:
        _prime_event_parsing()
        return anthropic.AsyncAnthropic(
            api_key=self._api_key,
            auth_token=self._auth_token,
            base_url=self._base_url,
            timeout=httpx2.Timeout(self._timeout, connect=min(self._timeout, 10.0)),
            max_retries=0,
            http_client=self._http_client,
        )

    def _pool_key(self) -> Hashable:
        return (PROVIDER, self._base_url, self._api_key, self._auth_token, self._timeout)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one reply; see :class:`adapters.base.ModelAdapter`."""
        body = build_request(request, self.model)
        settings = request.settings
        if (settings.temperature is not None or settings.top_p is not None) and not (
            self._warned_sampling
        ):
            self._warned_sampling = True
            logger.warning(
                "%s: temperature/top_p are not sent; the Anthropic API refuses them", self.name
            )
        async with aclosing(
            with_retries(lambda: self._attempt(body), self.retry, sleep=self._sleep)
        ) as events:
            async for event in events:
                yield event

    async def _attempt(self, body: dict[str, Any]) -> AsyncGenerator[StreamEvent, None]:
        try:
            client = await self._sdk()
            sdk_stream = await client.messages.create(**body, stream=True)
        except Exception as exc:
            raise classify_error(exc, mid_stream=False) from exc
        async with sdk_stream:
            assembler = _ReplyAssembler()
            iterator = sdk_stream.__aiter__()
            for count in itertools.count(1):
                if count % YIELD_EVERY_EVENTS == 0:
                    # One network read can hold a whole reply; the SDK parses its
                    # events without giving the loop back. Let other sessions'
                    # callbacks run between slices.
                    await asyncio.sleep(0)
                try:
                    raw = await anext(iterator)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    if assembler.completed is not None:
                        break  # the message is whole; only the response's tail failed
                    raise classify_error(exc, mid_stream=True) from exc
                if assembler.completed is not None:
                    continue  # nothing follows message_stop but the end of the body
                for event in assembler.feed(raw):
                    yield event
            if assembler.completed is not None:
                # Read to the end of the body first: a response closed before its
                # end takes its connection down with it, and the next call (the
                # next step, the next turn) would have to open a new one.
                yield assembler.completed
                return
        raise StreamInterrupted(
            "the stream ended before message_stop", provider=PROVIDER, retryable=True
        )


_primed = False


def _prime_event_parsing() -> None:
    """Parse one stream event of each kind once, in the worker thread that builds
    the client: the SDK's first parse fills its type caches, which would
    otherwise happen on the event loop in the first turn (figures in
    benchmarks/README.md, "Adapters")."""
    global _primed
    if _primed:
        return
    usage = {"input_tokens": 1, "output_tokens": 1}
    message = {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": []}
    for sample in (
        {"type": "message_start", "message": {**message, "stop_reason": None, "usage": usage}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{}"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage},
        {"type": "message_stop"},
        # Not in the union: the SDK's fallback for it is the slowest first parse.
        {"type": "ping"},
    ):
        construct_type(type_=RawMessageStreamEvent, value=sample)
    _primed = True


class _ReplyAssembler:
    """Turns Anthropic raw stream events into canonical stream events."""

    def __init__(self) -> None:
        self.blocks: dict[int, ContentBlock] = {}
        self.text: dict[int, list[str]] = {}
        self.tool_heads: dict[int, tuple[str, str]] = {}
        self.tool_json: dict[int, list[str]] = {}
        self.malformed: dict[str, str] = {}
        self.input_tokens = 0
        self.output_tokens = 0
        self.raw_stop: str | None = None
        self.completed: MessageCompleted | None = None

    def feed(self, event: Any) -> list[StreamEvent]:
        kind = getattr(event, "type", None)
        if kind == "message_start":
            usage = event.message.usage
            self.input_tokens = _total_input(usage)
            self.output_tokens = usage.output_tokens or 0
        elif kind == "content_block_start":
            return self._start_block(event.index, event.content_block)
        elif kind == "content_block_delta":
            return self._delta(event.index, event.delta)
        elif kind == "content_block_stop":
            return self._stop_block(event.index)
        elif kind == "message_delta":
            if event.delta.stop_reason is not None:
                self.raw_stop = event.delta.stop_reason
            self.output_tokens = event.usage.output_tokens
            if event.usage.input_tokens is not None:
                self.input_tokens = _total_input(event.usage)
        elif kind == "message_stop":
            self._finish()
        return []

    def _start_block(self, index: int, block: Any) -> list[StreamEvent]:
        if block.type == "text":
            self.text[index] = [block.text] if block.text else []
            return [TextDelta(block.text)] if block.text else []
        if block.type == "tool_use":
            if not block.id or not block.name:
                raise ProviderResponseInvalid(
                    f"content block {index}: tool_use without id or name", provider=PROVIDER
                )
            self.tool_heads[index] = (block.id, block.name)
            self.tool_json[index] = []
            return [ToolUseStarted(id=block.id, name=block.name)]
        # Thinking and server-side tool blocks have no canonical form; they are skipped.
        return []

    def _delta(self, index: int, delta: Any) -> list[StreamEvent]:
        if delta.type == "text_delta" and index in self.text:
            self.text[index].append(delta.text)
            return [TextDelta(delta.text)] if delta.text else []
        if delta.type == "input_json_delta" and index in self.tool_json:
            self.tool_json[index].append(delta.partial_json)
        return []

    def _stop_block(self, index: int) -> list[StreamEvent]:
        if index in self.text:
            text = "".join(self.text.pop(index))
            if text:
                self.blocks[index] = TextBlock(text=text)
            return []
        if index in self.tool_heads:
            tool_id, name = self.tool_heads.pop(index)
            arguments, problem = parse_tool_arguments("".join(self.tool_json.pop(index)))
            if problem is not None:
                self.malformed[tool_id] = problem
            block = ToolUseBlock(id=tool_id, name=name, input=arguments)
            self.blocks[index] = block
            return [ToolUseReady(block)]
        return []

    def _finish(self) -> None:
        if self.text or self.tool_heads:
            raise StreamInterrupted(
                "message_stop arrived while content blocks were still open", provider=PROVIDER
            )
        message = Message(role="assistant", content=[self.blocks[i] for i in sorted(self.blocks)])
        stop: StopReason = _STOP_REASONS.get(self.raw_stop or "", "other")
        self.completed = MessageCompleted(
            message=message,
            stop_reason=stop,
            usage=Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
            malformed_tool_uses=dict(self.malformed),
            raw_stop_reason=self.raw_stop,
        )


def _total_input(usage: Any) -> int:
    # Cached prompt tokens are billed input too; the API reports them apart.
    return int(
        (usage.input_tokens or 0)
        + (getattr(usage, "cache_creation_input_tokens", None) or 0)
        + (getattr(usage, "cache_read_input_tokens", None) or 0)
    )


def classify_error(exc: BaseException, *, mid_stream: bool) -> ProviderError:
    """Map an SDK or transport exception onto the closed ProviderError set."""
    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or str(exc)
        return error_for_status(
            exc.status_code,
            message,
            provider=PROVIDER,
            headers=exc.response.headers,
            body_type=exc.type,
        )
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return ProviderTimeout(f"timed out: {exc}", provider=PROVIDER)
    if mid_stream and isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return StreamInterrupted(f"the stream broke off: {exc}", provider=PROVIDER)
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        cause = exc.__cause__ or exc
        return ProviderUnreachable(f"cannot reach the provider: {cause}", provider=PROVIDER)
    if isinstance(exc, anthropic.APIResponseValidationError | ValueError):
        return ProviderResponseInvalid(f"unreadable reply: {exc}", provider=PROVIDER)
    if isinstance(exc, anthropic.CredentialsError):
        return ProviderAuthFailed(str(exc), provider=PROVIDER)
    if isinstance(exc, anthropic.AnthropicError):
        return ProviderRejectedRequest(str(exc), provider=PROVIDER)
    raise exc
