"""The one interface every model adapter implements, and the events it streams.

An adapter turns a :class:`ModelRequest` (system prompt, canonical messages,
tool definitions, settings) into an async stream of :data:`StreamEvent`:

* :class:`TextDelta` -- a piece of assistant text, in order;
* :class:`ToolUseStarted` -- progress: the model began a tool call (optional);
* :class:`ToolUseReady` -- one tool call, its input fully parsed;
* :class:`RetryScheduled` -- a failed attempt is about to be retried (only ever
  before any of the events above, so a retry never duplicates output);
* :class:`MessageCompleted` -- always last: the whole canonical assistant
  message, why it stopped, token usage, and the tool calls whose arguments
  were not a JSON object.

Failures raise :class:`adapters.errors.AdapterError` subclasses out of the
iterator. Cancelling the consuming task, or ``aclose()`` on the iterator,
closes the provider's HTTP stream before the cancellation completes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from adapters.errors import ProviderError
from protocol.canonical import Message, ToolDefinition, ToolUseBlock

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "other"]


class ModelSettings(BaseModel):
    """Sampling settings for one model call; providers get only what is set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop_sequences: tuple[str, ...] = ()


class ModelRequest(BaseModel):
    """Everything one model call needs, in canonical form."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str | None = None
    messages: list[Message]
    tools: list[ToolDefinition] = Field(default_factory=list)
    settings: ModelSettings = Field(default_factory=ModelSettings)


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens billed for one model call (estimated for the scripted model)."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of assistant text; the pieces concatenate to the message text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolUseStarted:
    """The model began a tool call; its input is still streaming."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class ToolUseReady:
    """A tool call whose input is complete (``{}`` if it was malformed)."""

    block: ToolUseBlock


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """Attempt ``attempt`` failed with ``error``; the next starts after ``delay`` s."""

    attempt: int
    delay: float
    error: ProviderError


@dataclass(frozen=True, slots=True)
class MessageCompleted:
    """The last event of every successful stream.

    ``malformed_tool_uses`` maps a tool_use id to a description of why its
    arguments were unusable; that block is in ``message`` with input ``{}`` and
    the agent loop answers it with a validation_error result instead of
    dispatching it. ``raw_stop_reason`` is the provider's own word.
    """

    message: Message
    stop_reason: StopReason
    usage: Usage
    malformed_tool_uses: Mapping[str, str] = field(default_factory=dict)
    raw_stop_reason: str | None = None


StreamEvent = TextDelta | ToolUseStarted | ToolUseReady | RetryScheduled | MessageCompleted

# Events that carry model output; once one is yielded a stream is never retried.
CONTENT_EVENTS: tuple[type, ...] = (TextDelta, ToolUseStarted, ToolUseReady, MessageCompleted)


@runtime_checkable
class ModelAdapter(Protocol):
    """A model provider behind the canonical interface.

    ``name`` is the model string the adapter was made for (``"anthropic/<model>"``,
    ``"scripted"`` ...). ``stream`` is an async generator: iterate it to run
    the call; close it or cancel the consumer to abort the call.
    """

    name: str

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]: ...
