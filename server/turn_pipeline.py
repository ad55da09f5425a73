"""What the execution pipeline adds around a turn, outside any single tool
call (specs/pipeline.md, "The server's part"): the lifecycle hooks the
server runs (``session_start``/``session_end``, ``pre_llm_call``/
``post_llm_call``, ``on_error``, ``budget_warning``, ``context_compress``,
``agent_complete``), the session's token budget (``limits.max_tokens``),
context compression (``limits.context_tokens``) and quality gates
(``guardrails.quality_gates``).

Pure parts live in dispatcher/pipeline/; this module only applies them to a
session: hooks run through the session's HookRunner (which publishes each
``hook.completed``), gates through ``run_quality_gates`` (each outcome is
published here, the one place ``quality_gate.completed`` comes from).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher import DispatchSession
from dispatcher.pipeline.gates import GateConsent, GateResult, run_quality_gates
from dispatcher.pipeline.hooks import HookEvent, HookResult
from dispatcher.publisher import EventPublisher
from protocol.canonical import (
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from protocol.payloads import QualityGateCompleted

log = logging.getLogger("toolrelay.pipeline")

# The cheap size estimate: about four characters per token (no tokenizer is
# loaded for it; the provider's own count is what the budget uses).
CHARS_PER_TOKEN = 4
# What an image counts as in the estimate (its base64 is not text the model reads).
IMAGE_CHARS = 4_000


async def run_hooks(
    session: DispatchSession,
    event: HookEvent,
    *,
    turn_id: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> list[HookResult]:
    """Run the session's hooks of ``event`` (none configured: nothing runs).

    The HookRunner publishes one ``hook.completed`` per run. A hook that
    cannot run is a warning in the log and never an exception here: at
    these events a hook informs (only ``pre_llm_call`` may block, and the
    caller decides what a block means)."""
    runner = session.hooks
    if runner is None:
        return []
    try:
        results = await runner.run_lifecycle(
            event,
            session_id=session.session_id,
            workspace=session.workspace.workspace_root,
            sandbox=session.sandbox,
            # A dry-run changes nothing, its lifecycle hooks included.
            read_only=session.dry_run or (turn_id is not None and turn_id in session.dry_run_turns),
            turn_id=turn_id,
            extra=extra,
        )
    except Exception:
        log.exception("%s hooks of session %s failed to run", event.value, session.session_id)
        return []
    for result in results:
        if result.decision == "error":
            log.warning(
                "%s hook %r of session %s: %s",
                event.value,
                result.name,
                session.session_id,
                result.reason or f"exit {result.exit_code}",
            )
    return results


def blocking_hook(results: Sequence[HookResult]) -> HookResult | None:
    """The hook that blocked (exit 2 at a pre_ event), if one did."""
    return next((r for r in results if r.decision == "block"), None)


# -- the token budget ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetStep:
    """What one model call's usage did to the session's budget."""

    used: int
    # The call carried the total over ``warning_at`` (budget_warning fires once).
    crossed_warning: bool
    # The total reached ``max_tokens``: no further model call this session.
    exhausted: bool


def budget_step(
    before: int, after: int, max_tokens: int | None, warning_at: int | None
) -> BudgetStep:
    """Classify the move from ``before`` to ``after`` tokens. The total only
    grows, so "crossed" is true for exactly one call in a session's life."""
    crossed = warning_at is not None and before < warning_at <= after
    exhausted = max_tokens is not None and after >= max_tokens
    return BudgetStep(after, crossed, exhausted)


def budget_message(used: int, max_tokens: int) -> str:
    return (
        f"the session's token budget is used up: {used} of {max_tokens} tokens "
        "(limits.max_tokens, input and output tokens across its turns); raise the limit "
        "or start a new session"
    )


# -- context compression ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Compression:
    """The messages to send and what was elided to fit them."""

    messages: list[Message]
    elided: int
    elided_chars: int
    tokens_before: int
    tokens_after: int


def estimate_tokens(messages: Sequence[Message], system: str = "") -> int:
    """A cheap size estimate of a request: characters / 4."""
    return (len(system) + sum(_message_chars(m) for m in messages)) // CHARS_PER_TOKEN


def compress(messages: list[Message], system: str, limit_tokens: int | None) -> Compression:
    """Elide older tool results, oldest first, until the estimate fits
    ``limit_tokens``. The last tool message (the results the model is about
    to read) is never elided; nor is anything else (the user's words, the
    assistant's calls). An elided result keeps its place and its error flag,
    its content becomes ``[elided: N chars of <tool> output]``. ``messages``
    is not changed: the stored conversation keeps everything."""
    if limit_tokens is None:
        # No context budget: nothing to estimate (this runs before every model call).
        return Compression(messages, 0, 0, 0, 0)
    before = estimate_tokens(messages, system)
    if before <= limit_tokens:
        return Compression(messages, 0, 0, before, before)
    last_tool = max((i for i, m in enumerate(messages) if m.role == "tool"), default=-1)
    names: dict[str, str] = {}
    excess = (before - limit_tokens) * CHARS_PER_TOKEN
    out = list(messages)
    elided = saved = elided_chars = 0
    for position, message in enumerate(messages):
        if saved >= excess:
            break
        if message.role == "assistant":
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    names[block.id] = block.name
            continue
        if message.role != "tool" or position == last_tool:
            continue
        content = list(message.content)
        changed = False
        for at, block in enumerate(content):
            if saved >= excess or not isinstance(block, ToolResultBlock):
                continue
            chars = sum(_block_chars(b) for b in block.content)
            note = f"[elided: {chars} chars of {names.get(block.tool_use_id, 'tool')} output]"
            if chars <= len(note):
                continue
            content[at] = block.model_copy(update={"content": [TextBlock(text=note)]})
            saved += chars - len(note)
            elided_chars += chars
            elided += 1
            changed = True
        if changed:
            out[position] = message.model_copy(update={"content": content})
    after = before - saved // CHARS_PER_TOKEN
    return Compression(out, elided, elided_chars, before, after)


def _message_chars(message: Message) -> int:
    return sum(_block_chars(b) for b in message.content)


def _block_chars(block: object) -> int:
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ToolUseBlock):
        return len(block.name) + len(json.dumps(block.input, ensure_ascii=False))
    if isinstance(block, ToolResultBlock):
        return sum(_block_chars(b) for b in block.content)
    if isinstance(block, ImageBlock):
        return IMAGE_CHARS
    return 0


# -- quality gates --------------------------------------------------------------


async def run_gates(
    session: DispatchSession,
    publisher: EventPublisher,
    *,
    turn_id: str,
    consent: GateConsent | None = None,
) -> list[GateResult]:
    """Run the session's quality gates (none configured: none run) in its
    workspace and sandbox, each after ``consent`` (server/gate_consent.py)
    unless marked ``auto``, and publish each outcome as
    ``quality_gate.completed``."""
    guardrails = session.guardrails
    gates = guardrails.quality_gates if guardrails is not None else []
    if not gates:
        return []
    results = await run_quality_gates(
        gates, session.workspace.workspace_root, session.sandbox, consent=consent
    )
    for result in results:
        publisher.emit(
            QualityGateCompleted(
                name=result.name,
                passed=result.passed,
                exit_code=result.exit_code,
                output=result.output,
                required=result.required,
            ),
            session_id=session.session_id,
            turn_id=turn_id,
        )
    return results


def gates_summary(results: Sequence[GateResult]) -> list[dict[str, Any]]:
    """The gates' outcome as the turn record keeps it (without the output,
    which the events carry)."""
    return [
        {"name": r.name, "passed": r.passed, "exit_code": r.exit_code, "required": r.required}
        for r in results
    ]
