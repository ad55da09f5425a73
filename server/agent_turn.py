"""One running agent turn (``AgentTurn``): its model calls, tool rounds and
the pipeline's checks between them, as the agent loop (server/agent_loop.py)
describes step by step; and the outcomes a turn ends with.

Kept apart from the loop, which builds the adapter, the conversation and the
prompt of each turn and then hands the turn to this module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from contextlib import aclosing
from typing import Any

from adapters.base import (
    MessageCompleted,
    ModelAdapter,
    ModelRequest,
    ModelSettings,
    RetryScheduled,
    TextDelta,
    Usage,
)
from adapters.errors import (
    AdapterError,
    AdapterMisconfigured,
    ProviderError,
    ProviderResponseInvalid,
    RequestNotConvertible,
)
from dispatcher.pipeline.budget import TOKENS, LimitsConfig, Settled
from dispatcher.pipeline.gates import failed_required, gate_report
from dispatcher.pipeline.hooks import HookEvent
from protocol.canonical import Message, TextBlock, ToolResultBlock, ToolUseBlock
from protocol.payloads import MessageDelta, ModelRetry
from server import turn_pipeline
from server.gate_consent import SessionGateConsent
from server.schemas import InputLimitExceeded, check_json_limits
from server.store import TurnFailureReason
from server.tree_budget import TurnBudget
from server.turns import TurnContext, TurnFailure, TurnOutcome, answer_unanswered

log = logging.getLogger("toolrelay.agent")


class AgentTurn:
    """The state of one running turn: its conversation, usage and step count."""

    def __init__(
        self,
        ctx: TurnContext,
        adapter: ModelAdapter,
        *,
        model: str,
        system: str,
        settings: ModelSettings,
        max_steps: int,
        budget: TurnBudget,
        limits: LimitsConfig | None = None,
    ) -> None:
        self.ctx = ctx
        self.adapter = adapter
        self.model = model
        self.system = system
        self.settings = settings
        self.max_steps = max_steps
        self.input_tokens = 0
        self.output_tokens = 0
        self.steps = 0
        self.results: list[ToolResultBlock] = []
        self.limits = limits or LimitsConfig()
        # The tree's budget: reserved before each model call, settled after.
        self.budget = budget
        self.settled: Settled | None = None
        # Elided results at the last model call: context_compress fires when it changes.
        self.elided = 0
        # A failing required gate goes back to the model at most once per turn.
        self.gates_retried = False
        self.gates: list[dict[str, Any]] | None = None

    async def run(self, conversation: list[Message]) -> TurnOutcome:
        """Loop until the model stops asking for tools; ``conversation`` includes
        the user's new message."""
        ctx = self.ctx
        while self.steps < self.max_steps:
            if ctx.cancel_requested.is_set():
                return self.outcome()
            if self.budget.exhausted():
                return self._budget_exhausted()
            self.steps += 1
            # Read per model call: the list may change mid-turn (MCP list_changed).
            tools = ctx.dispatcher.definitions_for(ctx.dispatch_session)
            messages = await self._fit_context(conversation)
            request = ModelRequest(
                system=self.system, messages=messages, tools=tools, settings=self.settings
            )
            blocked = await self._pre_llm_call()
            if blocked is not None:
                return blocked
            grant = await self.budget.reserve(request, ctx.cancel_requested)
            if grant is None:  # the tree's budget is used up, or the turn was cancelled
                return self.outcome() if ctx.cancel_requested.is_set() else self._budget_exhausted()
            try:
                completed = await self._call_model(request)
                if completed is not None:
                    self.settled = self.budget.settle(grant, completed.usage)
            except AdapterError as error:
                return model_failure(ctx, error, model=self.model, step=self.steps, turn=self)
            finally:
                self.budget.release(grant)  # no usage reported (once settled: no-op)
            if completed is None:  # cancelled while the model was streaming
                return self.outcome()
            self._add_usage(completed.usage)
            await self._after_llm_call(completed)
            assistant, malformed = _held_to_limits(completed.message, completed.malformed_tool_uses)
            if assistant.content:
                # An empty reply is left out: providers refuse empty messages.
                append_message(ctx, assistant)
                conversation.append(assistant)
            uses = assistant.tool_uses()
            if not uses:
                ended = await self._no_more_tools(completed.stop_reason, conversation)
                if ended is None:
                    continue  # one more round: the model reads the failed gates' report
                return ended
            results = await self._run_tools(uses, malformed)
            tool_message = Message(role="tool", content=list(results))
            append_message(ctx, tool_message)
            conversation.append(tool_message)
            self.results.extend(results)
        message = (
            f"the turn made {self.max_steps} model calls, the per-turn limit (model.max_steps), "
            "and the model still wanted tools; the tool results are in the conversation, so "
            "send another message to let it continue"
        )
        return failed_outcome(TurnFailureReason.STEP_LIMIT, message, self.details(), turn=self)

    async def _no_more_tools(
        self, stop_reason: str | None, conversation: list[Message]
    ) -> TurnOutcome | None:
        """The model asked for no tools: run the quality gates; a required gate
        that failed goes back to the model (None: one more round), else the
        ``agent_complete`` hooks run and the turn completes."""
        ctx = self.ctx
        report = await self._quality_gates()
        if report is not None and not ctx.cancel_requested.is_set():
            feedback = Message(role="user", content=[TextBlock(text=report)])
            append_message(ctx, feedback)
            conversation.append(feedback)
            return None
        await turn_pipeline.run_hooks(
            ctx.dispatch_session,
            HookEvent.AGENT_COMPLETE,
            turn_id=ctx.turn_id,
            extra={"steps": self.steps, "stop_reason": stop_reason},
        )
        return self.outcome(stop_reason=stop_reason)

    # -- the pipeline around a model call ---------------------------------------

    async def _fit_context(self, conversation: list[Message]) -> list[Message]:
        """What to send: the conversation, its older tool results elided when
        it outgrows ``limits.context_tokens`` (context_compress hooks run when
        the number elided changes)."""
        fitted = turn_pipeline.compress(conversation, self.system, self.limits.context_tokens)
        if fitted.elided and fitted.elided != self.elided:
            await turn_pipeline.run_hooks(
                self.ctx.dispatch_session,
                HookEvent.CONTEXT_COMPRESS,
                turn_id=self.ctx.turn_id,
                extra={
                    "step": self.steps,
                    "elided": fitted.elided,
                    "elided_chars": fitted.elided_chars,
                    "estimated_tokens_before": fitted.tokens_before,
                    "estimated_tokens_after": fitted.tokens_after,
                    "context_tokens": self.limits.context_tokens,
                },
            )
        self.elided = fitted.elided
        return fitted.messages

    async def _pre_llm_call(self) -> TurnOutcome | None:
        """Run pre_llm_call hooks; a block (exit 2) fails the turn, naming the hook."""
        ctx = self.ctx
        results = await turn_pipeline.run_hooks(
            ctx.dispatch_session,
            HookEvent.PRE_LLM_CALL,
            turn_id=ctx.turn_id,
            extra={"step": self.steps, "model": self.model},
        )
        hook = turn_pipeline.blocking_hook(results)
        if hook is None:
            return None
        message = f"pre_llm_call hook {hook.name!r} blocked model call {self.steps}: {hook.reason}"
        details = {**self.details(), "blocked_by": {"kind": "hook", "name": hook.name}}
        return failed_outcome(TurnFailureReason.BLOCKED_BY_HOOK, message, details, turn=self)

    async def _after_llm_call(self, completed: MessageCompleted) -> None:
        """post_llm_call hooks, then the budget (usage is already counted)."""
        ctx = self.ctx
        usage = completed.usage
        await turn_pipeline.run_hooks(
            ctx.dispatch_session,
            HookEvent.POST_LLM_CALL,
            turn_id=ctx.turn_id,
            extra={
                "step": self.steps,
                "model": self.model,
                "stop_reason": completed.stop_reason,
                "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
            },
        )
        # The tree's total crossed the warning ratio with this call (once per
        # tree: the call of whichever session, parent or worker, carried it).
        settled, warn_at = self.settled, self.limits.warning_at()
        if settled is not None and settled.crossed(TOKENS, warn_at):
            used = settled.after[TOKENS]
            log.info(
                "session %s used %d of %s tokens", ctx.session_id, used, self.limits.max_tokens
            )
            await turn_pipeline.run_hooks(
                ctx.dispatch_session,
                HookEvent.BUDGET_WARNING,
                turn_id=ctx.turn_id,
                extra={
                    "tokens_used": used,
                    "max_tokens": self.limits.max_tokens,
                    "warning_ratio": self.limits.warning_ratio,
                    "budget_session_id": self.budget.root_id,
                },
            )

    def _budget_exhausted(self) -> TurnOutcome:
        used, max_tokens = self.budget.used, self.limits.max_tokens
        message = self.budget.exhausted_message(turn_pipeline.budget_message(used, max_tokens or 0))
        details = {**self.details(), "tokens_used": used, "max_tokens": max_tokens}
        if self.budget.shared:
            details["budget_session_id"] = self.budget.root_id
        return failed_outcome(TurnFailureReason.BUDGET_EXHAUSTED, message, details, turn=self)

    async def _quality_gates(self) -> str | None:
        """Run the gates when the model is done; the report for the model when
        a required gate failed and this turn has not had its extra round yet.
        A dry-run turn changed nothing, so it runs none."""
        ctx = self.ctx
        if ctx.dry_run:
            return None
        # Each gate not marked ``auto`` asks first, as a shell command would.
        consent = SessionGateConsent(
            ctx.dispatch_session, ctx.dispatcher.broker, ctx.publisher, ctx.turn_id
        )
        results = await turn_pipeline.run_gates(
            ctx.dispatch_session, ctx.publisher, turn_id=ctx.turn_id, consent=consent
        )
        if not results:
            return None
        self.gates = turn_pipeline.gates_summary(results)
        if self.gates_retried or not failed_required(results):
            return None
        self.gates_retried = True
        return (
            gate_report(results)
            + "\n\nThe quality gates above failed. Fix the problems, then reply when done."
        )

    # -- one model call -------------------------------------------------------

    async def _call_model(self, request: ModelRequest) -> MessageCompleted | None:
        """Stream one reply; None if the turn was cancelled first.

        The stream is read in its own task so that a cancellation can stop it
        at once: cancelling that task closes the provider's HTTP response.
        """
        ctx = self.ctx
        if ctx.cancel_requested.is_set():
            return None
        reader = asyncio.create_task(
            self._read_stream(request), name=f"model-{ctx.turn_id}-{self.steps}"
        )
        cancelled = asyncio.create_task(ctx.cancel_requested.wait())
        try:
            await asyncio.wait({reader, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancelled.cancel()
            if not reader.done():
                reader.cancel()
                await asyncio.wait({reader})
            if not reader.cancelled():
                reader.exception()  # retrieved here, so an abandoned error is not logged
        if reader.cancelled():
            return None
        return reader.result()

    async def _read_stream(self, request: ModelRequest) -> MessageCompleted:
        ctx = self.ctx
        final: MessageCompleted | None = None
        async with aclosing(self.adapter.stream(request)) as events:
            async for event in events:
                if isinstance(event, TextDelta):
                    if event.text:
                        ctx.emit(MessageDelta(text=event.text, step=self.steps))
                elif isinstance(event, MessageCompleted):
                    final = event
                elif isinstance(event, RetryScheduled):
                    # The adapter logs the failure too; this line ties it to the turn.
                    log.info(
                        "turn %s step %d: model call retry %d in %.2fs after %s",
                        ctx.turn_id,
                        self.steps,
                        event.attempt,
                        event.delay,
                        event.error.kind,
                    )
                    error = event.error
                    ctx.emit(
                        ModelRetry(
                            attempt=event.attempt,
                            error_kind=error.kind,
                            delay_s=round(event.delay, 3),
                            provider=error.provider,
                            status_code=error.status_code,
                            step=self.steps,
                        )
                    )
        if final is None:
            raise ProviderResponseInvalid(
                "the reply stream ended without a completed message", provider=self.adapter.name
            )
        return final

    # -- tools ------------------------------------------------------------------

    async def _run_tools(
        self, uses: Sequence[ToolUseBlock], malformed: Mapping[str, str]
    ) -> list[ToolResultBlock]:
        """One result per call, in call order. Malformed calls are answered, not run."""
        ctx = self.ctx
        answers: dict[int, ToolResultBlock] = {}
        runnable: list[tuple[int, ToolUseBlock]] = []
        for position, block in enumerate(uses):
            reason = malformed.get(block.id)
            if reason is not None:
                answers[position] = _malformed_result(ctx, block, reason)
            else:
                runnable.append((position, block))
        if runnable and ctx.cancel_requested.is_set():
            for position, block in runnable:
                answers[position] = _cancelled_result(ctx, block)
        elif runnable:
            blocks = [block for _, block in runnable]
            try:
                dispatched = await ctx.dispatch_all(blocks)
            except asyncio.CancelledError:
                # The task was cancelled (shutdown): still answer every call.
                answer_unanswered(ctx, list(uses), "the turn stopped before the call finished")
                raise
            for (position, _), result in zip(runnable, dispatched, strict=True):
                answers[position] = result
        return [answers[position] for position in range(len(uses))]

    # -- bookkeeping ----------------------------------------------------------

    def _add_usage(self, usage: Usage) -> None:
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.ctx.usage = self.usage()

    def usage(self) -> dict[str, int]:
        # The turn's sub-agents' tokens count too (dispatch_subagent).
        extra = self.ctx.subagent_usage
        return {
            "input_tokens": self.input_tokens + extra.get("input_tokens", 0),
            "output_tokens": self.output_tokens + extra.get("output_tokens", 0),
        }

    def details(self) -> dict[str, Any]:
        return {"model": self.model, "steps": self.steps}

    def outcome(self, *, stop_reason: str | None = None) -> TurnOutcome:
        details = self.details()
        if stop_reason is not None:
            details["stop_reason"] = stop_reason
        if self.gates is not None:
            details["quality_gates"] = self.gates
        return TurnOutcome(
            results=self.results, usage=self.usage(), details=details, quality_gates=self.gates
        )


# -- helpers --------------------------------------------------------------------------


def append_message(ctx: TurnContext, message: Message) -> None:
    ctx.append_message(message)
    ctx.publish_message(message)


def failed_outcome(
    reason: TurnFailureReason,
    message: str,
    details: dict[str, Any],
    *,
    turn: AgentTurn | None = None,
) -> TurnOutcome:
    if turn is None:
        return TurnOutcome(results=[], failure=TurnFailure(reason, message, details))
    return TurnOutcome(
        results=turn.results,
        usage=turn.usage(),
        failure=TurnFailure(reason, message, details),
        quality_gates=turn.gates,
    )


def model_failure(
    ctx: TurnContext, error: AdapterError, *, model: str, step: int, turn: AgentTurn | None = None
) -> TurnOutcome:
    """A turn ended by the model layer: reason ``model_error`` and the error's kind."""
    details: dict[str, Any] = {"model": model, "steps": step, "error_kind": _kind(error)}
    if isinstance(error, ProviderError):
        details["provider"] = error.provider
        details["status_code"] = error.status_code
        details["retryable"] = error.retryable
        text = str(error)
    else:
        text = error.message
    where = f"model call {step}" if step else f"setting up model {model!r}"
    log.warning("turn %s failed at %s: %s", ctx.turn_id, where, text)
    return failed_outcome(
        TurnFailureReason.MODEL_ERROR, f"{where} failed: {text}", details, turn=turn
    )


def _kind(error: AdapterError) -> str:
    if isinstance(error, ProviderError):
        return error.kind
    if isinstance(error, AdapterMisconfigured):
        return "config"
    if isinstance(error, RequestNotConvertible):
        return "request_conversion"
    return "adapter"


def _held_to_limits(
    message: Message, malformed: Mapping[str, str]
) -> tuple[Message, dict[str, str]]:
    """The model's message with each tool_use input held to the input limits
    (server.schemas.INPUT_LIMITS, as at the HTTP boundary), and the calls not
    to run. An input over a limit (nested too deep, a huge array or string) is
    replaced by ``{}`` before anything stores it, so no later read of the
    conversation can fail on it, and its call is answered like malformed
    arguments: a validation error naming the limit, so the model can retry."""
    problems = dict(malformed)
    content = list(message.content)
    changed = False
    for position, block in enumerate(content):
        if not isinstance(block, ToolUseBlock) or block.id in problems:
            continue
        try:
            check_json_limits(block.input, "input")
        except InputLimitExceeded as exc:
            problems[block.id] = f"tool arguments break an input limit: {exc}"
            content[position] = ToolUseBlock(id=block.id, name=block.name, input={})
            changed = True
    if not changed:
        return message, problems
    return message.model_copy(update={"content": content}), problems


def _malformed_result(ctx: TurnContext, block: ToolUseBlock, reason: str) -> ToolResultBlock:
    """Answer a call whose arguments were not a JSON object, so the model can retry it."""
    return ctx.dispatcher.refuse(block, ctx.dispatch_session, turn_id=ctx.turn_id, reason=reason)


def _cancelled_result(ctx: TurnContext, block: ToolUseBlock) -> ToolResultBlock:
    """Answer a call the turn was cancelled before it could start."""
    return ctx.dispatcher.cancelled_before_start(block, ctx.dispatch_session, turn_id=ctx.turn_id)
