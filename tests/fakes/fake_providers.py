"""A local fake of the Anthropic and OpenAI HTTP APIs, for tests with the real SDKs.

One FastAPI app, served by uvicorn on 127.0.0.1 in a background thread, speaks
both wire protocols with their real SSE streaming formats:

* ``POST /v1/messages`` -- Anthropic Messages: ``message_start``, ``ping``,
  ``content_block_start`` / ``content_block_delta`` (``text_delta``,
  ``input_json_delta``) / ``content_block_stop``, ``message_delta`` (stop
  reason and usage), ``message_stop``;
* ``POST /v1/chat/completions`` -- OpenAI Chat Completions chunks: role chunk,
  content deltas, ``tool_calls`` deltas split across chunks (by index, optionally
  interleaved), a finish chunk, a usage chunk, ``data: [DONE]``.

A test plans what the next requests get (:meth:`FakeProviderServer.plan`): a
:class:`Reply` (text and tool calls, rendered in whichever protocol is asked,
optionally slow, cut mid-way, ended early, or broken by an in-stream error
event) or an :class:`HttpError` (429 with retry-after, 401, 500 ...). Every
request body is recorded (:attr:`FakeProviderServer.requests`), with how its
stream ended, so tests can assert what the SDKs sent and when a client hung up.

A request arriving with nothing planned gets a 400 naming the problem, and is
counted in :attr:`FakeProviderServer.unplanned`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/chat/completions"

Outcome = Literal[
    "pending", "completed", "cut", "ended_early", "error_event", "disconnected", "http_error"
]


@dataclass(frozen=True)
class ToolCall:
    """A tool call in a planned reply; ``raw_arguments`` is sent verbatim (malformed JSON)."""

    name: str
    input: Mapping[str, Any] | None = None
    raw_arguments: str | None = None
    id: str | None = None

    def arguments_text(self) -> str:
        if self.raw_arguments is not None:
            return self.raw_arguments
        return json.dumps(dict(self.input or {}))


@dataclass(frozen=True)
class Text:
    """Text in a planned reply."""

    text: str


@dataclass(frozen=True)
class Reply:
    """A streamed reply, rendered in the protocol of the endpoint that is called.

    ``stop_reason`` uses canonical names (end_turn, tool_use, max_tokens,
    stop_sequence) and defaults to tool_use when there are tool calls;
    ``raw_stop_reason`` sends a provider word as is. ``chunk_size`` is how many
    characters each text or argument delta carries. Faults: ``cut_after`` drops
    the connection after that many SSE events; ``end_after`` ends the stream
    cleanly but early; ``error_event_after`` sends the provider's in-stream error
    event (``error_type``) after that many events; ``event_delay`` pauses
    between events (a slow stream).
    """

    parts: tuple[Text | ToolCall, ...]
    stop_reason: str | None = None
    raw_stop_reason: str | None = None
    input_tokens: int = 12
    output_tokens: int = 34
    chunk_size: int = 5
    interleave_tool_calls: bool = False
    cut_after: int | None = None
    end_after: int | None = None
    error_event_after: int | None = None
    error_type: str = "overloaded_error"
    event_delay: float = 0.0

    @classmethod
    def text(cls, text: str, **options: Any) -> Reply:
        return cls(parts=(Text(text),), **options)

    @classmethod
    def tool_calls(cls, *calls: ToolCall, text: str | None = None, **options: Any) -> Reply:
        parts: tuple[Text | ToolCall, ...] = ((Text(text),) if text else ()) + calls
        return cls(parts=parts, **options)

    def canonical_stop(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(p, ToolCall) for p in self.parts) else "end_turn"


_DEFAULT_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class HttpError:
    """A non-streamed error response in the provider's own error body format."""

    status: int
    message: str = "planned error"
    error_type: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def rate_limited(cls, retry_after: float) -> HttpError:
        return cls(429, "rate limited", headers={"retry-after": str(retry_after)})

    def type_name(self) -> str:
        return self.error_type or _DEFAULT_ERROR_TYPES.get(self.status, "api_error")


Plan = Reply | HttpError


@dataclass
class RecordedRequest:
    """One request the fake received, and how its response ended."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    outcome: Outcome = "pending"
    events_sent: int = 0
    events_planned: int = 0

    @property
    def protocol(self) -> Literal["anthropic", "openai"]:
        return "anthropic" if self.path == ANTHROPIC_PATH else "openai"


class _CutConnection(Exception):
    """Raised inside a response body to make uvicorn drop the connection."""


class _QuietCuts(logging.Filter):
    # uvicorn logs every exception escaping an app; a planned cut is not news.
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, _CutConnection)


# -- rendering ---------------------------------------------------------------


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(data: Mapping[str, Any] | str, event: str | None = None) -> str:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n"


_ANTHROPIC_STOPS = {"end_turn", "tool_use", "max_tokens", "stop_sequence"}
_OPENAI_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
}


def render_anthropic(reply: Reply, *, model: str, ids: Iterator[int]) -> list[str]:
    """The SSE events of ``reply`` as the Anthropic Messages API streams them."""
    message: dict[str, Any] = {
        "id": f"msg_fake_{next(ids)}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1},
    }
    events = [
        _sse({"type": "message_start", "message": message}, "message_start"),
        _sse({"type": "ping"}, "ping"),
    ]
    for index, part in enumerate(reply.parts):
        start: dict[str, Any]
        if isinstance(part, Text):
            start = {"type": "text", "text": ""}
            deltas = [
                {"type": "text_delta", "text": piece}
                for piece in _chunks(part.text, reply.chunk_size)
            ]
        else:
            start = {
                "type": "tool_use",
                "id": part.id or f"toolu_fake_{next(ids)}",
                "name": part.name,
                "input": {},
            }
            # The API opens every tool input with an empty partial_json.
            pieces = ["", *_chunks(part.arguments_text(), reply.chunk_size)]
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in pieces]
        events.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        events.extend(
            _sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        )
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    stop = reply.raw_stop_reason or reply.canonical_stop()
    if reply.raw_stop_reason is None and stop not in _ANTHROPIC_STOPS:
        raise ValueError(f"unknown canonical stop reason {stop!r}")
    events.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": reply.output_tokens},
            },
            "message_delta",
        )
    )
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return events


def render_openai(
    reply: Reply, *, model: str, ids: Iterator[int], include_usage: bool
) -> list[str]:
    """The SSE events of ``reply`` as Chat Completions streams them."""
    completion_id = f"chatcmpl-fake-{next(ids)}"
    created = int(time.time())

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
        return _sse(
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    calls = [p for p in reply.parts if isinstance(p, ToolCall)]
    for part in reply.parts:
        if isinstance(part, Text):
            events.extend(
                chunk({"content": piece}) for piece in _chunks(part.text, reply.chunk_size)
            )
    heads: list[str] = []
    bodies: list[list[str]] = []
    for index, call in enumerate(calls):
        call_id = call.id or f"call_fake_{next(ids)}"
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        heads.append(chunk({"tool_calls": [opening]}))
        bodies.append(
            [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                for piece in _chunks(call.arguments_text(), reply.chunk_size)
            ]
        )
    if reply.interleave_tool_calls:
        events.extend(heads)
        for round_ in range(max((len(b) for b in bodies), default=0)):
            events.extend(b[round_] for b in bodies if round_ < len(b))
    else:
        for head, body in zip(heads, bodies, strict=True):
            events.append(head)
            events.extend(body)
    finish = reply.raw_stop_reason or _OPENAI_FINISH[reply.canonical_stop()]
    events.append(chunk({}, finish))
    if include_usage:
        usage = {
            "prompt_tokens": reply.input_tokens,
            "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        }
        events.append(
            _sse(
                {
                    "id": completion_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        )
    events.append(_sse("[DONE]"))
    return events


def _error_body(protocol: str, error_type: str, message: str) -> dict[str, Any]:
    if protocol == "anthropic":
        return {"type": "error", "error": {"type": error_type, "message": message}}
    return {"error": {"message": message, "type": error_type, "code": None, "param": None}}


# -- the server --------------------------------------------------------------


class FakeProviderServer:
    """The fake provider app on a free 127.0.0.1 port, in a background thread.

    Use as a context manager (or ``start()``/``stop()``). ``reset()`` clears
    plans and records between tests.
    """

    def __init__(self, *, max_stream_seconds: float = 15.0) -> None:
        self._lock = threading.Lock()
        self._plans: deque[Plan] = deque()
        self._requests: list[RecordedRequest] = []
        self._ids = iter(range(1, 1_000_000_000))
        self._unplanned = 0
        self._closing = threading.Event()
        self.max_stream_seconds = max_stream_seconds
        self.app = self._build_app()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle

    def start(self, *, startup_timeout: float = 10.0) -> FakeProviderServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            loop="asyncio",
            http="h11",
            timeout_graceful_shutdown=2,
        )
        logging.getLogger("uvicorn.error").addFilter(_QuietCuts())
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-provider", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + startup_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the fake provider server did not start")
            time.sleep(0.01)
        return self

    def stop(self, *, timeout: float = 10.0) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError("the fake provider server did not stop in time")
        self._server = None
        self._thread = None

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what tests use

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """The base_url for ``AsyncAnthropic`` (it appends /v1/messages)."""
        return self.base_url

    @property
    def openai_base_url(self) -> str:
        """The base_url for ``AsyncOpenAI`` (it appends /chat/completions)."""
        return f"{self.base_url}/v1"

    def env(self, *, api_key: str = "test-key") -> dict[str, str]:
        """Environment variables that point both SDKs (and create_adapter) here."""
        return {
            "ANTHROPIC_API_KEY": api_key,
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "OPENAI_API_KEY": api_key,
            "OPENAI_BASE_URL": self.openai_base_url,
        }

    def plan(self, *plans: Plan) -> None:
        """Queue what the next requests get, in order (any endpoint)."""
        with self._lock:
            self._plans.extend(plans)

    def pending(self) -> int:
        """How many planned responses no request has taken yet."""
        with self._lock:
            return len(self._plans)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received since the last reset, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def unplanned(self) -> int:
        with self._lock:
            return self._unplanned

    def reset(self) -> None:
        with self._lock:
            self._plans.clear()
            self._requests.clear()
            self._unplanned = 0

    async def wait_for_outcome(
        self, index: int, outcomes: set[str], *, within: float = 60.0
    ) -> RecordedRequest:
        """Wait (polling, bounded) until request ``index`` ended in one of ``outcomes``."""
        deadline = time.monotonic() + within
        while True:
            with self._lock:
                record = self._requests[index] if index < len(self._requests) else None
                if record is not None and record.outcome in outcomes:
                    return record
            if time.monotonic() > deadline:
                state = record.outcome if record is not None else "no such request"
                raise TimeoutError(f"request {index} did not reach {sorted(outcomes)}: {state}")
            await asyncio.sleep(0.01)

    # -- the app

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="fake model providers")

        @app.post(ANTHROPIC_PATH)
        async def anthropic_messages(request: Request) -> Response:
            return await self._handle(request, "anthropic")

        @app.post(OPENAI_PATH)
        async def openai_chat(request: Request) -> Response:
            return await self._handle(request, "openai")

        return app

    async def _handle(self, request: Request, protocol: str) -> Response:
        body = await request.json()
        record = RecordedRequest(path=request.url.path, headers=dict(request.headers), body=body)
        with self._lock:
            self._requests.append(record)
            plan = self._plans.popleft() if self._plans else None
            if plan is None:
                self._unplanned += 1
        if plan is None:
            record.outcome = "http_error"
            return JSONResponse(
                _error_body(
                    protocol,
                    "invalid_request_error",
                    f"fake provider: no reply planned for request #{len(self.requests)}",
                ),
                status_code=400,
            )
        if isinstance(plan, HttpError):
            record.outcome = "http_error"
            return JSONResponse(
                _error_body(protocol, plan.type_name(), plan.message),
                status_code=plan.status,
                headers=dict(plan.headers),
            )
        model = str(body.get("model", "fake-model"))
        with self._lock:
            if protocol == "anthropic":
                events = render_anthropic(plan, model=model, ids=self._ids)
            else:
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                events = render_openai(
                    plan, model=model, ids=self._ids, include_usage=include_usage
                )
        record.events_planned = len(events)
        return StreamingResponse(
            self._stream(plan, events, record, protocol),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache"},
        )

    async def _stream(
        self, plan: Reply, events: list[str], record: RecordedRequest, protocol: str
    ) -> AsyncIterator[bytes]:
        started = time.monotonic()
        finished = False
        try:
            for position, event in enumerate(events):
                if plan.cut_after is not None and position >= plan.cut_after:
                    record.outcome = "cut"
                    finished = True
                    raise _CutConnection(f"planned cut after {position} events")
                if plan.end_after is not None and position >= plan.end_after:
                    record.outcome = "ended_early"
                    finished = True
                    return
                if plan.error_event_after is not None and position >= plan.error_event_after:
                    error = _error_body(protocol, plan.error_type, "planned in-stream error")
                    record.outcome = "error_event"
                    finished = True
                    yield _sse(error, "error" if protocol == "anthropic" else None).encode()
                    return
                yield event.encode()
                record.events_sent = position + 1
                if plan.event_delay:
                    # Bounded: a slow stream never outlives max_stream_seconds or the server.
                    if self._closing.is_set() or (
                        time.monotonic() - started > self.max_stream_seconds
                    ):
                        record.outcome = "ended_early"
                        finished = True
                        return
                    await asyncio.sleep(plan.event_delay)
            record.outcome = "completed"
            finished = True
        finally:
            # Cancelled by Starlette when the client hangs up mid-stream.
            if not finished:
                record.outcome = "disconnected"
