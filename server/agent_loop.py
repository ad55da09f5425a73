"""The agent loop: turns started with ``{"message": ...}``, where the model drives.

One turn is a bounded, linear loop:

1. append the user's message to the session's conversation;
2. call the session's model with the whole conversation and the session's tools,
   streaming its text as ``message.delta`` events;
3. append the assistant message (``message.completed``); if it asked for no
   tools, the turn is complete;
4. run every tool call of that message through the dispatcher at once (the
   session's concurrency cap bounds how many run together); calls whose
   arguments were not a JSON object are not run but answered with a
   validation error, so the model can correct itself;
5. append the tool message and go back to 2 -- at most ``model.max_steps``
   model calls per turn, after which the turn fails with reason ``step_limit``.

The execution pipeline's part of a turn (server/turn_pipeline.py,
specs/pipeline.md "The server's part"): before each model call the budget of
the session's tree (the session, or a worker's parent, with its workers:
server/tree_budget.py) is reserved from (``limits.max_tokens``: at 100 % the
turn fails with ``budget_exhausted``), older tool results are elided from what is sent when
the conversation outgrows ``limits.context_tokens`` (``context_compress``
hooks), and ``pre_llm_call`` hooks run (exit 2 fails the turn with
``blocked_by_hook``); after it ``post_llm_call`` hooks run and the usage is
added to the session's total (``budget_warning`` hooks once past the warning
ratio). When the model ends with no tool calls, the quality gates run, each
asking first as a shell command of the session would unless marked
``auto`` (server/gate_consent.py); a required gate that ran and failed is
given back to the model for one more round (once per turn); then
``agent_complete`` hooks run.

A provider error ends the turn as ``turn.failed`` (reason ``model_error``,
with the error's kind and message); it never escapes as an exception. A
cancellation (client, session deletion, shutdown) aborts the model stream by
cancelling the task that reads it, which closes the provider's HTTP response,
and the dispatcher cancels the running tools; every tool call already in the
conversation still gets a result, so the conversation stays valid for the
next turn, also after a restart (it lives in the server's SQLite store).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from adapters.base import (
    MessageCompleted,
    ModelAdapter,
    ModelRequest,
    ModelSettings,
    RetryScheduled,
    TextDelta,
    Usage,
)
from adapters.clients import ProviderClients, SharedClientAdapter
from adapters.errors import (
    AdapterError,
    AdapterMisconfigured,
    ProviderError,
    ProviderResponseInvalid,
    RequestNotConvertible,
)
from adapters.registry import create_adapter, default_model, parse_model
from dispatcher.pipeline.budget import TOKENS, LimitsConfig, Settled
from dispatcher.pipeline.gates import failed_required, gate_report
from dispatcher.pipeline.hooks import HookEvent
from protocol.canonical import Message, TextBlock, ToolResultBlock, ToolUseBlock
from protocol.payloads import MessageDelta, ModelRetry
from server import turn_pipeline
from server.agents import UnknownAgent, prompt_memories, resolve_agent
from server.config import Config
from server.gate_consent import SessionGateConsent
from server.schemas import InputLimitExceeded, check_json_limits
from server.store import SessionRecord, Store, TurnFailureReason
from server.tree_budget import TreeBudgets, TurnBudget
from server.turns import (
    RunnerParts,
    TurnContext,
    TurnFailure,
    TurnOutcome,
    answer_unanswered,
)

if TYPE_CHECKING:
    from dispatcher.memory import MemoryService

log = logging.getLogger("toolrelay.agent")

DEFAULT_SYSTEM_PROMPT = """\
You are a careful software engineer working as a coding agent. Your workspace \
is the directory {workspace}; every path you give a tool is relative to it, \
and tools cannot reach outside it.

How to work:
- Look before you change: read the files involved, list directories, search \
the code. Do not guess at file contents.
- Make small, focused edits, and keep the project's existing style.
- When it helps, run the tests or a command to check your work.
- A tool error is information: read it, fix the call, and try again.
- Some calls need a person's approval. If one is denied, the result gives the \
reason; respect it and change your plan instead of repeating the call.
- Ask for several independent tool calls in one reply when you can; they run \
at the same time.

When the task is done, reply briefly: what you changed, how you checked it, \
and anything left open."""

AdapterFactory = Callable[[str], ModelAdapter]

# The adapter module each provider needs; importing one loads its SDK.
_SDK_MODULES = {
    "anthropic": "adapters.anthropic_adapter",
    "openai": "adapters.openai_adapter",
    "openai-compatible": "adapters.openai_adapter",
}


class AgentLoop:
    """Runs ``{"message": ...}`` turns (a :class:`server.turns.TurnRunner`).

    ``adapter_factory`` builds the model adapter for a model string; by default
    :func:`adapters.registry.create_adapter` with ``env`` (the process
    environment unless given), so keys and endpoints come from
    ``ANTHROPIC_*``/``OPENAI_*`` variables (the keys as the registry captured
    them at start-up). A fresh, cheap adapter serves each turn, but its SDK
    client comes from :attr:`clients`: one per provider, endpoint and key,
    built off the event loop and kept, with its open connections, for the
    server's life. :meth:`start` imports the default model's SDK and builds its
    client before the first turn; :meth:`aclose` closes them all at shutdown.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        *,
        env: Mapping[str, str] | None = None,
        adapter_factory: AdapterFactory | None = None,
        memories: MemoryService | None = None,
        budgets: TreeBudgets | None = None,
    ) -> None:
        # Every turn's model calls draw from its tree's budget (shared with
        # the sub-agent service, which admits workers against it).
        self.budgets = budgets or TreeBudgets(config.limits, lambda: store)
        # Agents (specs/agents.md): each session's prompt and step limit.
        self._agents = config.agents
        self._configured_prompt = config.model.system_prompt
        self._memories = memories
        self._store = store
        self._env: Mapping[str, str] = os.environ if env is None else env
        self._default_model = config.model.default
        self._system_prompt = config.model.system_prompt or DEFAULT_SYSTEM_PROMPT
        self._max_steps = config.model.max_steps
        self._settings = ModelSettings(max_tokens=config.model.max_tokens)
        self._limits = config.limits
        self._adapter_factory = adapter_factory or self._create_adapter
        self.clients = ProviderClients()
        self._conversations = _Conversations(store)

    async def start(self) -> None:
        """Import the default model's SDK and build its client, off the event loop,
        so the first turn pays for neither. A model that cannot be set up is
        reported by the turns that use it, not here."""
        model = self.model_for(None)
        try:
            await _import_sdk_off_loop(model)
            adapter = self._adapter_factory(model)
            await _use_shared_client(adapter, self.clients)
        except AdapterError as error:
            log.warning("model %r is not ready: %s", model, error)
            return
        await _close(adapter)

    async def aclose(self) -> None:
        """Close every provider client (part of the server's shutdown)."""
        await self.clients.aclose()

    def _create_adapter(self, model: str) -> ModelAdapter:
        return create_adapter(model, env=self._env)

    def model_for(self, session_model: str | None) -> str:
        """The session's model, else the configured default, else what the environment picks."""
        return session_model or self._default_model or default_model(self._env)

    def system_prompt(self, workspace: str) -> str:
        # replace(), not format(): a configured prompt may hold other braces.
        return self._system_prompt.replace("{workspace}", workspace)

    async def _agent_setup(self, session: SessionRecord) -> tuple[str, int]:
        """The system prompt and step limit of a turn: the session's agent's,
        with the workspace's newest memories when it asks for them. A session
        stored before agents (or whose agent left the config) uses the server's."""
        if session.agent is None:
            return self.system_prompt(session.workspace), self._max_steps
        try:
            agent = resolve_agent(session.agent, self._agents)
        except UnknownAgent:
            return self.system_prompt(session.workspace), self._max_steps
        memories: list[str] = []
        if agent.config.memories_in_prompt:
            # SQLite: off the event loop, as every memory-store call.
            memories = await asyncio.to_thread(
                prompt_memories,
                self._memories,
                workspace=session.workspace,
                owner=session.owner,
                count=agent.config.memories_in_prompt,
            )
        prompt = agent.system_prompt(
            session.workspace, server_prompt=self._configured_prompt, memories=memories
        )
        return prompt, agent.config.max_steps or self._max_steps

    async def run(self, ctx: TurnContext) -> TurnOutcome:
        session = self._store.get_session(ctx.session_id)
        if session is None:  # deleted between the request and the task starting
            return _failed(TurnFailureReason.SESSION_MISSING, "the session no longer exists", {})
        model = self.model_for(session.model)
        user = Message(role="user", content=[TextBlock(text=str(ctx.request["message"]))])
        _append(ctx, user)
        try:
            await _import_sdk_off_loop(model)
            adapter = self._adapter_factory(model)
        except AdapterError as error:
            return _model_failure(ctx, error, model=model, step=0)
        try:
            await _use_shared_client(adapter, self.clients)
        except AdapterError as error:
            return _model_failure(ctx, error, model=model, step=0)
        conversation = self._conversations.load(ctx.session_id)
        system, max_steps = await self._agent_setup(session)
        try:
            with self.budgets.turn(session) as budget:
                turn = _Turn(
                    ctx,
                    adapter,
                    model=model,
                    system=system,
                    settings=self._settings,
                    max_steps=max_steps,
                    budget=budget,
                    limits=self._limits,
                )
                return await turn.run(conversation)
        finally:
            await _close(adapter)


class _Conversations:
    """The conversations of recently active sessions, kept parsed between turns.

    A turn reads only the messages stored since the session's last turn
    started (``Store.messages_after``) instead of the whole conversation: at
    160 messages (0.9 MB) a full read and parse took ~15 ms on the event loop.
    What the store holds stays the truth: anything appended by any path is
    read back by index. Messages are frozen, so the cached list is shared and
    each turn gets its own copy to extend. At most ``MAX_SESSIONS`` are kept
    (least recently used first out).
    """

    MAX_SESSIONS = 64

    def __init__(self, store: Store) -> None:
        self._store = store
        self._held: OrderedDict[str, tuple[int, list[Message]]] = OrderedDict()

    def load(self, session_id: str) -> list[Message]:
        """The whole conversation, as a new list the caller may extend."""
        last, messages = self._held.pop(session_id, (-1, []))
        new = self._store.messages_after(session_id, last)
        if new:
            messages = [*messages, *(Message.model_validate(m.message) for m in new)]
            last = new[-1].index
        self._held[session_id] = (last, messages)
        while len(self._held) > self.MAX_SESSIONS:
            self._held.popitem(last=False)
        return list(messages)


class _Turn:
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
                return _model_failure(ctx, error, model=self.model, step=self.steps, turn=self)
            finally:
                self.budget.release(grant)  # no usage reported (once settled: no-op)
            if completed is None:  # cancelled while the model was streaming
                return self.outcome()
            self._add_usage(completed.usage)
            await self._after_llm_call(completed)
            assistant, malformed = _held_to_limits(completed.message, completed.malformed_tool_uses)
            if assistant.content:
                # An empty reply is left out: providers refuse empty messages.
                _append(ctx, assistant)
                conversation.append(assistant)
            uses = assistant.tool_uses()
            if not uses:
                report = await self._quality_gates()
                if report is not None and not ctx.cancel_requested.is_set():
                    # One more round: the model reads the failed gates' report.
                    feedback = Message(role="user", content=[TextBlock(text=report)])
                    _append(ctx, feedback)
                    conversation.append(feedback)
                    continue
                await turn_pipeline.run_hooks(
                    ctx.dispatch_session,
                    HookEvent.AGENT_COMPLETE,
                    turn_id=ctx.turn_id,
                    extra={"steps": self.steps, "stop_reason": completed.stop_reason},
                )
                return self.outcome(stop_reason=completed.stop_reason)
            results = await self._run_tools(uses, malformed)
            tool_message = Message(role="tool", content=list(results))
            _append(ctx, tool_message)
            conversation.append(tool_message)
            self.results.extend(results)
        message = (
            f"the turn made {self.max_steps} model calls, the per-turn limit (model.max_steps), "
            "and the model still wanted tools; the tool results are in the conversation, so "
            "send another message to let it continue"
        )
        return _failed(TurnFailureReason.STEP_LIMIT, message, self.details(), turn=self)

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
        return _failed(TurnFailureReason.BLOCKED_BY_HOOK, message, details, turn=self)

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
        return _failed(TurnFailureReason.BUDGET_EXHAUSTED, message, details, turn=self)

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


def _append(ctx: TurnContext, message: Message) -> None:
    ctx.append_message(message)
    ctx.publish_message(message)


def _failed(
    reason: TurnFailureReason, message: str, details: dict[str, Any], *, turn: _Turn | None = None
) -> TurnOutcome:
    if turn is None:
        return TurnOutcome(results=[], failure=TurnFailure(reason, message, details))
    return TurnOutcome(
        results=turn.results,
        usage=turn.usage(),
        failure=TurnFailure(reason, message, details),
        quality_gates=turn.gates,
    )


def _model_failure(
    ctx: TurnContext, error: AdapterError, *, model: str, step: int, turn: _Turn | None = None
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
    return _failed(TurnFailureReason.MODEL_ERROR, f"{where} failed: {text}", details, turn=turn)


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


async def _import_sdk_off_loop(model: str) -> None:
    """Import the provider's SDK in a worker thread the first time it is needed.

    Importing the anthropic SDK takes about a second (openai about 0.4 s); done
    on the event loop, the first turn of a provider would stall every session's
    stream for that long. A bad model string is left for the factory to report.
    """
    try:
        provider, _ = parse_model(model)
    except AdapterMisconfigured:
        return
    module = _SDK_MODULES.get(provider)
    if module is not None and module not in sys.modules:
        await asyncio.to_thread(importlib.import_module, module)


async def _use_shared_client(adapter: ModelAdapter, clients: ProviderClients) -> None:
    """Give a provider adapter its SDK client from the server's pool.

    Only the first use of a provider/endpoint/key builds a client (in a worker
    thread); every later turn reuses it and its open connections. A client
    that cannot be built (a malformed base URL, the pool closed by a shutdown)
    is an AdapterMisconfigured, so the turn fails as a model error."""
    if not isinstance(adapter, SharedClientAdapter):
        return
    try:
        await adapter.use_clients(clients)
    except Exception as exc:
        raise AdapterMisconfigured(f"cannot set up the provider client: {exc}") from exc


async def _close(adapter: ModelAdapter) -> None:
    """Release what the adapter holds of its own (bounded: never hangs a turn); a
    client it took from the pool stays open for the next turn."""
    aclose = getattr(adapter, "aclose", None)
    if aclose is None:
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5.0):
            await aclose()


def agent_loop_factory(parts: RunnerParts) -> AgentLoop:
    """The ``message_runner_factory`` of ``create_app``: the agent loop on the
    server's configuration and store."""
    return AgentLoop(parts.config, parts.store, memories=parts.memories, budgets=parts.budgets)
