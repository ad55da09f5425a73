"""The offline ``scripted`` model: the default when no provider key is set.

It plays either a script (see :mod:`adapters.scripted_script`) or, without
one, the demo rule set (see :mod:`adapters.scripted_rules`). It streams like a
real model: text in several deltas, ToolUseStarted/ToolUseReady per call,
then MessageCompleted with an estimated usage. Replies depend only on the
conversation, so the same request always gets the same reply, ids included:
the n-th tool call of a conversation is ``toolu_scripted_<n>``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path

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
from adapters.errors import ProviderRejectedRequest
from adapters.scripted_rules import rule_reply
from adapters.scripted_script import ScriptReply, ScriptText, load_script
from adapters.tool_args import parse_tool_arguments
from protocol.canonical import ContentBlock, Message, TextBlock, ToolUseBlock

PROVIDER = "scripted"
TOOL_ID_PREFIX = "toolu_scripted_"

# Split points between a whitespace run and the next word: pieces keep their spaces.
_WORD_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")


class ScriptedAdapter:
    """An offline model driven by a script, or by the demo rules when given none.

    ``words_per_delta`` sets how finely text is streamed; ``delta_delay``
    (seconds, default 0) paces the deltas so a demo visibly streams.
    """

    provider = PROVIDER

    def __init__(
        self,
        script: Sequence[ScriptReply] | None = None,
        *,
        name: str = PROVIDER,
        words_per_delta: int = 3,
        delta_delay: float = 0.0,
    ) -> None:
        if words_per_delta < 1:
            raise ValueError(f"words_per_delta must be >= 1, got {words_per_delta}")
        if delta_delay < 0:
            raise ValueError(f"delta_delay must be >= 0, got {delta_delay}")
        self.name = name
        self.script = list(script) if script is not None else None
        # A script still to read (see deferred()): loaded by the first stream().
        self._pending_path: str | None = None
        self._words_per_delta = words_per_delta
        self._delta_delay = delta_delay

    @classmethod
    def from_file(
        cls, path: str | Path, *, words_per_delta: int = 3, delta_delay: float = 0.0
    ) -> ScriptedAdapter:
        """A scripted model playing the script at ``path``, read now (blocking: from
        async code use :meth:`deferred`)."""
        return cls(
            load_script(path),
            name=f"{PROVIDER}:{path}",
            words_per_delta=words_per_delta,
            delta_delay=delta_delay,
        )

    @classmethod
    def deferred(
        cls, path: str | Path, *, words_per_delta: int = 3, delta_delay: float = 0.0
    ) -> ScriptedAdapter:
        """A scripted model that reads the script at ``path`` when it first streams,
        in a worker thread: building it does no I/O, so it is safe on the event
        loop. A script that cannot be read fails that stream with
        AdapterMisconfigured."""
        adapter = cls(
            [], name=f"{PROVIDER}:{path}", words_per_delta=words_per_delta, delta_delay=delta_delay
        )
        adapter._pending_path = str(path)
        return adapter

    async def load(self) -> None:
        """Read a deferred script now (off the event loop); no-op otherwise."""
        path = self._pending_path
        if path is not None:
            self.script = await asyncio.to_thread(load_script, path)
            self._pending_path = None

    def reply_for(self, request: ModelRequest) -> ScriptReply:
        """The reply this model gives to ``request`` (before streaming)."""
        if self.script is None:
            return rule_reply(request.messages, request.tools)
        position = sum(1 for m in request.messages if m.role == "assistant")
        if position >= len(self.script):
            raise ProviderRejectedRequest(
                f"the script has {len(self.script)} replies and the conversation asks "
                f"for reply {position + 1}",
                provider=PROVIDER,
            )
        return self.script[position]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream the reply; see :class:`adapters.base.ModelAdapter`."""
        await self.load()
        reply = self.reply_for(request)
        next_id = 1 + sum(len(m.tool_uses()) for m in request.messages)
        blocks: list[ContentBlock] = []
        malformed: dict[str, str] = {}
        for item in reply.content:
            if isinstance(item, ScriptText):
                for piece in self._pieces(item.text):
                    await self._pace()
                    yield TextDelta(piece)
                if item.text:
                    blocks.append(TextBlock(text=item.text))
                continue
            tool_id = item.id or f"{TOOL_ID_PREFIX}{next_id}"
            next_id += 1
            await self._pace()
            yield ToolUseStarted(id=tool_id, name=item.name)
            arguments = item.input or {}
            if item.raw_input is not None:
                arguments, problem = parse_tool_arguments(item.raw_input)
                if problem is not None:
                    malformed[tool_id] = problem
            block = ToolUseBlock(id=tool_id, name=item.name, input=arguments)
            blocks.append(block)
            yield ToolUseReady(block)
        message = Message(role="assistant", content=blocks)
        has_tools = any(isinstance(b, ToolUseBlock) for b in blocks)
        stop: StopReason = reply.stop_reason or ("tool_use" if has_tools else "end_turn")
        yield MessageCompleted(
            message=message,
            stop_reason=stop,
            usage=Usage(
                input_tokens=_estimate_tokens(_request_chars(request)),
                output_tokens=_estimate_tokens(len(message.model_dump_json())),
            ),
            malformed_tool_uses=malformed,
            raw_stop_reason=stop,
        )

    def _pieces(self, text: str) -> list[str]:
        words = [w for w in _WORD_BOUNDARY.split(text) if w]
        step = self._words_per_delta
        return ["".join(words[i : i + step]) for i in range(0, len(words), step)]

    async def _pace(self) -> None:
        # Even with no delay, yield to the loop so a cancellation lands between deltas.
        await asyncio.sleep(self._delta_delay)


def _request_chars(request: ModelRequest) -> int:
    chars = len(request.system or "")
    chars += sum(len(m.model_dump_json()) for m in request.messages)
    chars += sum(len(json.dumps(t.input_schema)) + len(t.description) for t in request.tools)
    return chars


def _estimate_tokens(chars: int) -> int:
    # About four characters per token; only an estimate, there is no tokenizer here.
    return math.ceil(chars / 4)
