"""The payloads a tool call's moves publish: one builder per event type.

``dispatcher.call`` maps each state move to these builders (its ``ENTERING``
and ``LEAVING`` tables); nothing else builds ``tool.*`` events. Each builder
reads the call and returns the typed payloads (protocol.payloads) the move
means. Tool output in events is bounded by the call's
``max_event_output_bytes`` (dispatcher.event_output); the result block the
model sees keeps all of it.

The events every call publishes (``tool.called``, ``tool.completed``) and the
streamed ``tool.output_delta`` are ``Checked``: their data is assembled from
values already checked and handed to ``EventPublisher.publish`` without
building the payload model, which ``benchmarks/dispatch_overhead.py`` shows
is a large share of a call's overhead (figures in benchmarks/README.md,
"Dispatcher stages"). The bus's debug mode (on in every server test) checks
that data against the model, and tests/dispatcher/test_call_events.py checks
that it names every field. Every other event is a validated payload model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from dispatcher.errors import ToolErrorClass
from dispatcher.event_output import bounded_blocks, bounded_text, utf8_size
from dispatcher.tool import ToolOutput
from protocol.canonical import ImageBlock, TextBlock
from protocol.catalog import EventType
from protocol.payloads import GuardrailWarning as GuardrailWarningEvent
from protocol.payloads import (
    Payload,
    ToolConfirmationRequested,
    ToolConfirmationResolved,
    ToolFailed,
    ToolInputInvalid,
    ToolPlanned,
)

if TYPE_CHECKING:
    from dispatcher.call import ToolCall
    from dispatcher.confirmations import ConfirmationRequest, Resolution


class Checked(NamedTuple):
    """An event whose data (every field of its payload model) the call
    assembled from checked values: published as the data dict (module docstring)."""

    type: EventType
    data: dict[str, Any]


# What a move publishes: validated payloads, or checked data.
Event = Payload | Checked


def request_event(request: ConfirmationRequest) -> ToolConfirmationRequested:
    """The one builder of ``tool.confirmation_requested``: a call's question,
    and (server/gate_consent.py) a quality gate's, which no call carries."""
    return ToolConfirmationRequested(**request.event_data())


def resolution_event(resolution: Resolution, tool_use_id: str) -> ToolConfirmationResolved:
    """The one builder of ``tool.confirmation_resolved``: a call's own answer, and
    (server/cluster.py) a lost replica's pending requests that a survivor ends
    ``cancelled`` when no call is left to answer them."""
    return ToolConfirmationResolved(**resolution.event_data(tool_use_id))


# -- by the move (dispatcher.call.ENTERING / LEAVING) ------------------------------


def warnings(call: ToolCall) -> list[Event]:
    """``guardrail.warning`` for each warning not published yet."""
    notes = call.pipeline
    if notes is None:
        return []
    fresh = notes.warnings[notes.published :]
    notes.published = len(notes.warnings)
    return [
        GuardrailWarningEvent(rule=w.rule, message=w.message, tool_use_id=call.tool_use.id)
        for w in fresh
    ]


def requested(call: ToolCall) -> list[Event]:
    assert call.consent is not None, "set the request before asking"
    return [request_event(call.consent.request)]


def resolved(call: ToolCall) -> list[Event]:
    """The answer, when one came (not when the turn's own task was cancelled)."""
    consent = call.consent
    if consent is None or consent.resolution is None:
        return []
    return [resolution_event(consent.resolution, call.tool_use.id)]


def planned(call: ToolCall) -> list[Event]:
    action = call.outcome.planned
    assert action is not None, "record the plan before ending as planned"
    return [ToolPlanned(**action.as_dict())]


def called(call: ToolCall) -> list[Event]:
    entry = call.entry
    assert entry is not None
    rating = call.derived.rating
    data = {
        "tool_use_id": call.tool_use.id,
        "tool_name": entry.name,
        "side_effects": entry.definition.side_effects.value,
        "rating": rating.value if rating is not None else None,
        "input": call.tool_use.input,
    }
    return [Checked(EventType.TOOL_CALLED, data)]


def completed(call: ToolCall) -> list[Event]:
    """Every field of ``tool.completed`` (clients rely on each key)."""
    output = call.outcome.output
    assert output is not None
    limit = call.max_event_output_bytes
    content, output_bytes, truncated = _event_content(output, limit)
    # Validated against the output_schema when the tool declares one.
    structured, structured_bytes = output.data, None
    if structured is not None:
        structured, structured_bytes = bounded_structured(structured, limit)
    data = {
        "tool_use_id": call.tool_use.id,
        "tool_name": call.tool_use.name,
        "duration_ms": call.timing.duration_ms(),
        "content": content,
        "files_modified": output.files_modified,
        "command_executed": output.command_executed,
        "metadata": output.metadata,
        "truncated": truncated,
        "output_bytes": output_bytes,
        "structured": structured,
        "structured_truncated": structured_bytes is not None,
        "structured_bytes": structured_bytes,
    }
    return [Checked(EventType.TOOL_COMPLETED, data)]


def ended(call: ToolCall) -> list[Event]:
    """``tool.input_invalid`` for refused input, else ``tool.failed``."""
    outcome = call.outcome
    if outcome.invalid is not None:
        invalid = ToolInputInvalid(
            tool_use_id=call.tool_use.id, tool_name=call.tool_use.name, errors=outcome.invalid
        )
        return [invalid]
    if outcome.output is not None:
        return [ToolFailed(**_reported_failure(call, outcome.output))]
    return [ToolFailed(**_failure(call))]


def output_delta(call: ToolCall, stream: str, text: str) -> Checked:
    """A chunk of a running tool's output, cut to the event limit."""
    shown, size = bounded_text(text, call.max_event_output_bytes)
    data: dict[str, Any] = {"tool_use_id": call.tool_use.id, "stream": stream, "text": shown}
    if size is not None:
        data["truncated"] = True
        data["output_bytes"] = size
    return Checked(EventType.TOOL_OUTPUT_DELTA, data)


# -- parts -------------------------------------------------------------------------


def _reported_failure(call: ToolCall, output: ToolOutput) -> dict[str, Any]:
    """``tool.failed`` for a failure the tool returned as a value."""
    limit = call.max_event_output_bytes
    _, output_bytes, truncated = bounded_blocks(_blocks_json(output), limit)
    return {
        "tool_use_id": call.tool_use.id,
        "tool_name": call.tool_use.name,
        "error_class": ToolErrorClass.EXECUTION_ERROR.value,
        "message": bounded_text(output_text(output), limit)[0],
        "duration_ms": call.timing.duration_ms(),
        "partial_output": None,
        "metadata": output.metadata,
        "truncated": truncated,
        "output_bytes": output_bytes,
    }


def _failure(call: ToolCall) -> dict[str, Any]:
    """``tool.failed`` for an error raised on the road."""
    err = call.outcome.error
    assert err is not None
    limit = call.max_event_output_bytes
    partial_output = err.partial_output
    data: dict[str, Any] = {
        "tool_use_id": call.tool_use.id,
        "tool_name": call.tool_use.name,
        "error_class": err.error_class.value,
        "message": bounded_text(err.message, limit)[0],
        "duration_ms": call.timing.duration_ms(),
        "partial_output": partial_output,
    }
    if call.outcome.blocked_by is not None:
        data["blocked_by"] = call.outcome.blocked_by
    if partial_output:
        # The event carries at most the limit of it; the result keeps all.
        shown, size = bounded_text(partial_output, limit)
        if size is not None:
            data.update(partial_output=shown, truncated=True, output_bytes=size)
    return data


def _blocks_json(output: ToolOutput) -> list[dict[str, Any]]:
    return [_block_json(block) for block in output.content]


def _block_json(block: TextBlock | ImageBlock) -> dict[str, Any]:
    """A block as JSON; a text block's built by hand, as ``model_dump`` gives
    it (text blocks allow no other keys): benchmarks/dispatch_overhead.py
    shows ``model_dump`` as a measurable share of every call."""
    if type(block) is TextBlock:
        return {"type": "text", "text": block.text}
    return block.model_dump()


def _event_content(output: ToolOutput, limit: int) -> tuple[list[dict[str, Any]], int, bool]:
    """``bounded_blocks`` of the output's blocks, with a shortcut for the usual
    output (text only, within the limit): sizes from ``isascii`` instead of
    an encode per block. benchmarks/dispatch_overhead.py shows the general
    path as one of the largest shares of a no-op call (benchmarks/README.md,
    "Dispatcher stages"); tests/dispatcher/test_call_events.py keeps the two
    equal."""
    out: list[dict[str, Any]] = []
    total = 0
    for block in output.content:
        if type(block) is not TextBlock:
            break
        text = block.text
        total += len(text) if text.isascii() else utf8_size(text)
        out.append({"type": "text", "text": text})
    else:
        if total <= limit:
            return out, total, False
    return bounded_blocks(_blocks_json(output), limit)


def output_text(output: ToolOutput) -> str:
    """The text blocks of an output, joined."""
    return "".join(b.text for b in output.content if isinstance(b, TextBlock))


def bounded_structured(
    data: dict[str, Any], limit: int
) -> tuple[dict[str, Any] | None, int | None]:
    """``(structured as tool.completed carries it, its JSON size if left out)``:
    past ``limit`` bytes of JSON the event carries null, as it cuts content
    (the model's result is not affected). Data orjson cannot encode is left
    as it is: the bus refuses it with the same error as before."""
    try:
        size = len(orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS))
    except TypeError:
        return data, None
    return (data, None) if size <= limit else (None, size)
