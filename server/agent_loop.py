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

This module chooses each turn's model, prompt and step limit and keeps the
provider clients; the turn's steps run in server/agent_turn.py (``AgentTurn``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from adapters.base import ModelAdapter, ModelSettings
from adapters.clients import ProviderClients, SharedClientAdapter
from adapters.errors import AdapterError, AdapterMisconfigured
from adapters.registry import ADAPTER_MODULES, create_adapter, default_model, parse_model
from dispatcher.pipeline.budget import LimitsConfig
from protocol.canonical import Message, TextBlock
from server.agent_turn import AgentTurn, append_message, failed_outcome, model_failure
from server.agents import (
    BUILD_PROMPT,
    AgentConfig,
    UnknownAgent,
    prompt_memories,
    resolve_agent,
)
from server.config import ModelSection
from server.store import SessionRecord, Store, TurnFailureReason
from server.tree_budget import TreeBudgets
from server.turns import RunnerParts, TurnContext, TurnOutcome

if TYPE_CHECKING:
    from dispatcher.memory import MemoryService

log = logging.getLogger("toolrelay.agent")

AdapterFactory = Callable[[str], ModelAdapter]


class LoopConfig(Protocol):
    """The configuration sections the agent loop reads (a ``Config`` is one)."""

    @property
    def model(self) -> ModelSection: ...
    @property
    def agents(self) -> Mapping[str, AgentConfig]: ...
    @property
    def limits(self) -> LimitsConfig: ...


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
        config: LoopConfig,
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
        # The one default prompt (the build agent's) unless the config sets one.
        self._system_prompt = config.model.system_prompt or BUILD_PROMPT
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
            return failed_outcome(
                TurnFailureReason.SESSION_MISSING, "the session no longer exists", {}
            )
        model = self.model_for(session.model)
        user = Message(role="user", content=[TextBlock(text=str(ctx.request["message"]))])
        append_message(ctx, user)
        try:
            await _import_sdk_off_loop(model)
            adapter = self._adapter_factory(model)
        except AdapterError as error:
            return model_failure(ctx, error, model=model, step=0)
        try:
            await _use_shared_client(adapter, self.clients)
        except AdapterError as error:
            return model_failure(ctx, error, model=model, step=0)
        conversation = self._conversations.load(ctx.session_id)
        system, max_steps = await self._agent_setup(session)
        try:
            with self.budgets.turn(session) as budget:
                turn = AgentTurn(
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
    module = ADAPTER_MODULES.get(provider)
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
