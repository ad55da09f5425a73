"""Sub-agents: the server's side of ``dispatch_subagent`` (specs/agents.md).

``SubagentService`` implements the tool's ``SubagentRunner``. For one
delegation it:

1. checks the request: the caller is not itself a worker, the agent type
   exists and is marked ``subagent``;
2. creates the **worker session**: a child of the caller (stored with
   ``parent_session_id``), on the same workspace, owned by the same token,
   running as the agent type with its profile. Its conversation starts
   empty: the only message it ever sees is the task (and the context the
   caller passed). Its DispatchSession is built like any other (same
   sandbox); its tools and policy are bounded by the parent's
   (server/session_access.py) and it never sees ``dispatch_subagent``;
3. mirrors the child's events onto the parent's stream (below);
4. starts one message turn on it through the turn supervisor, so the
   child's turn is an ordinary turn: stored, cancellable, recovered after a
   crash, its confirmations answered on the child session's endpoints;
5. waits for it, cancelling it when the parent's call is cancelled (the
   parent turn cancelled or deleted, the call's timeout, shutdown);
6. reports the answer (the last assistant text), the tools it called, the
   files it read, its steps and token usage, and adds that usage to the
   parent turn's (``TurnContext.add_subagent_usage``).

**Budget.** A worker spends its parent's budget (server/tree_budget.py):
it is admitted (step 2) only while the parent's tree is under
``limits.max_tokens``, else the call ends ``permission_denied`` and no
session is created; each of its model calls reserves from the tree's
ledger, so a worker is stopped before the model call that the tree can no
longer afford (its turn fails ``budget_exhausted`` and the report says
why); its tokens reach the parent session's ``tokens_used`` call by call.

**Events on the parent's stream.** The child's events are published on the
child's own stream as usual; a ``Mirror`` subscribes to that stream (from
its first event) and re-publishes each one on the parent's stream: the same
type and ``turn_id`` (the child's turn), its data with
``subagent_session_id``, ``agent_type``, ``subagent_session_seq``,
``parent_turn_id`` and ``parent_tool_use_id`` added. Both streams get
their ``session_seq`` from the bus as every event does, so both stay
gapless; the copy follows its original (it is made once the original is
durable). Before the tool call returns, the mirror catches up with
everything the child published up to its turn's end, so a client sees the
child's ``turn.completed`` before the parent's ``tool.completed`` for the
delegation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolExecutionError, ToolPermissionDenied, ToolValidationFailed
from dispatcher.tools.agents import SubagentReport, SubagentRequest, SubagentStatus
from eventbus import Bus, EventBusError, SubscriberTooSlow
from eventbus.subscription import Subscription
from server.agents import AgentConfig, UnknownAgent, resolve_agent, subagent_types
from server.auth import Principal
from server.errors import ApiError
from server.session_registry import publish_session_created
from server.store import SessionRecord, Store, TurnRecord, TurnStatus
from server.tree_budget import TreeBudgets
from server.turn_supervisor import new_id

if TYPE_CHECKING:
    from server.turn_supervisor import TurnSupervisor

log = logging.getLogger("toolrelay.subagents")

# Keys added to a mirrored event's data.
SUBAGENT_SESSION_ID = "subagent_session_id"
# How long the end of a delegation waits for the mirror to catch up, and for
# a cancelled child turn to wind down (both normally take milliseconds).
MIRROR_DRAIN_S = 5.0
CANCEL_WAIT_S = 30.0


def is_mirrored(data: dict[str, Any]) -> bool:
    """Whether an event's data is a sub-agent's event mirrored onto its
    parent's stream (counted once, on the child: see server/observer.py)."""
    return SUBAGENT_SESSION_ID in data


class Mirror:
    """Re-publishes one child session's events on its parent's stream; see
    the module docstring. Started before the child's first event."""

    def __init__(
        self,
        bus: Bus,
        *,
        child_id: str,
        parent_id: str,
        parent_turn_id: str,
        parent_tool_use_id: str,
        agent_type: str,
    ) -> None:
        self._bus = bus
        self.child_id = child_id
        self.parent_id = parent_id
        self._marks = {
            SUBAGENT_SESSION_ID: child_id,
            "agent_type": agent_type,
            "parent_turn_id": parent_turn_id,
            "parent_tool_use_id": parent_tool_use_id,
        }
        self.forwarded = 0  # the child's session_seq mirrored so far
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sub = await self._bus.subscribe(session_id=self.child_id, after=0)
        self._task = asyncio.create_task(self._run(sub), name=f"mirror-{self.child_id}")

    async def _run(self, sub: Subscription) -> None:
        # Bounded: a subscription cut off as too slow is resumed from its
        # cursor, at most a few times (the mirror never waits on a network).
        for _ in range(8):
            try:
                async with sub:
                    async for record in sub:
                        self._forward(record.text, record.session_seq)
                return
            except SubscriberTooSlow as exc:
                after = exc.last_cursor if exc.last_cursor is not None else self.forwarded
                sub = await self._bus.subscribe(session_id=self.child_id, after=after)
            except EventBusError as exc:
                log.warning("mirroring %s stopped: %s", self.child_id, exc)
                return

    def _forward(self, text: str, session_seq: int) -> None:
        envelope = json.loads(text)
        data = {**envelope["data"], **self._marks, "subagent_session_seq": session_seq}
        try:
            self._bus.publish(
                envelope["type"], data, session_id=self.parent_id, turn_id=envelope["turn_id"]
            )
        except EventBusError as exc:  # the bus is closing: nothing more can be shown
            log.warning("mirroring %s stopped: %s", self.child_id, exc)
        self.forwarded = session_seq
        self._progress.set()

    async def drain(self, within: float = MIRROR_DRAIN_S) -> None:
        """Wait (bounded) until every event the child published so far is mirrored."""
        target = self._bus.last_session_seq(self.child_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self.forwarded < target:
                    self._progress.clear()
                    await self._progress.wait()

    async def close(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


class SubagentService:
    """The server's ``SubagentRunner``; see the module docstring.

    Its parts come late (the supervisor is built after the dispatch-session
    factory that hands this service to the tool), so they are reached
    through ``turns``."""

    def __init__(
        self,
        agents: Mapping[str, AgentConfig],
        *,
        store: Callable[[], Store],
        bus: Callable[[], Bus],
        turns: Callable[[], TurnSupervisor],
        budgets: TreeBudgets,
    ) -> None:
        # The configured agents (``agents``): which of them may be sub-agents.
        self._agents = agents
        self._store = store
        self._bus = bus
        self._turns = turns
        # The same ledgers the agent loop's turns reserve from (server/runtime.py).
        self._budgets = budgets

    async def run(self, request: SubagentRequest, cancel: asyncio.Event) -> SubagentReport:
        parent = self._store().get_session(request.parent_session_id)
        if parent is None:
            raise ToolExecutionError("the calling session no longer exists")
        if parent.parent_session_id is not None:
            raise ToolPermissionDenied("a sub-agent cannot dispatch sub-agents")
        agent_type = request.agent_type
        known = subagent_types(self._agents)
        try:
            agent = resolve_agent(agent_type, self._agents)
        except UnknownAgent:
            agent = None
        if agent is None or not agent.config.subagent:
            raise ToolValidationFailed(
                f"agent_type {agent_type!r} is not a sub-agent type; use one of: "
                + ", ".join(known)
            )
        child = SessionRecord(
            id=new_id("ses"),
            workspace=parent.workspace,
            owner=parent.owner,
            name=f"{agent_type} sub-agent of {parent.id}",
            model=agent.config.model or parent.model,
            # The parent's overrides carry over; its policy bounds the child anyway.
            policy_overrides=parent.policy_overrides,
            agent=agent_type,
            profile=agent.profile,
            parent_session_id=parent.id,
            # A dry-run parent (its session or this turn) plans only: its worker
            # must plan too, or a delegated shell/write call would run for real.
            dry_run=parent.dry_run or self._turn_is_dry_run(request),
        )
        # Child start: refused (permission_denied, nothing created) over budget.
        leave = self._budgets.admit_worker(parent)
        try:
            return await self._mirrored(request, parent, child, agent_type, cancel)
        finally:
            leave()  # child stop

    async def _mirrored(
        self,
        request: SubagentRequest,
        parent: SessionRecord,
        child: SessionRecord,
        agent_type: str,
        cancel: asyncio.Event,
    ) -> SubagentReport:
        mirror = Mirror(
            self._bus(),
            child_id=child.id,
            parent_id=parent.id,
            parent_turn_id=request.parent_turn_id,
            parent_tool_use_id=request.tool_use_id,
            agent_type=agent_type,
        )
        await mirror.start()  # before the child's first event
        try:
            return await self._delegate(request, parent, child, mirror, cancel)
        finally:
            await mirror.close()

    async def _delegate(
        self,
        request: SubagentRequest,
        parent: SessionRecord,
        child: SessionRecord,
        mirror: Mirror,
        cancel: asyncio.Event,
    ) -> SubagentReport:
        store, bus, turns = self._store(), self._bus(), self._turns()
        principal = Principal(
            token_name=parent.owner, role="user", client_name=f"subagent:{parent.id}"
        )
        try:
            store.add_session(child)
            publish_session_created(
                bus,
                child,
                principal.client_name,
                {"agent": child.agent, "profile": child.profile, "parent_session_id": parent.id},
            )
            turn = turns.start(principal, child, {"message": task_message(request)})
        except ApiError as exc:
            raise ToolExecutionError(f"the sub-agent could not start: {exc.message}") from None
        active = turns.active(child.id)
        task = active.task if active is not None and active.id == turn.id else None
        cancelled = False
        if task is not None:
            try:
                cancelled = await _wait_or_cancel(task, cancel)
            except asyncio.CancelledError:
                # The parent's call was cancelled from outside (its timeout, a
                # shutdown): the child's turn ends too before this call does.
                await asyncio.shield(_cancel_child(turns, principal, child, turn.id, task))
                raise
            if cancelled:
                await _cancel_child(turns, principal, child, turn.id, task)
        await mirror.drain()
        ended = store.get_turn(turn.id, session_id=child.id)
        report = _report(store, child, turn.id, ended)
        if report.usage:
            self._roll_up(request, dict(report.usage))
        return report

    def _turn_is_dry_run(self, request: SubagentRequest) -> bool:
        """Whether the parent turn that dispatches is a dry-run: the running
        turn's word, else the stored turn's; when neither can be found the
        answer is the cautious one: yes."""
        active = self._turns().active(request.parent_session_id)
        running = active.context if active is not None else None
        if active is not None and active.id == request.parent_turn_id and running is not None:
            return running.dry_run
        stored = self._store().get_turn(
            request.parent_turn_id, session_id=request.parent_session_id
        )
        return True if stored is None else stored.dry_run

    def _roll_up(self, request: SubagentRequest, usage: dict[str, int]) -> None:
        """Add the child's tokens to the parent turn's usage, if it still runs
        (the parent session's ``tokens_used`` got them call by call)."""
        active = self._turns().active(request.parent_session_id)
        if active is None or active.id != request.parent_turn_id or active.context is None:
            return
        active.context.add_subagent_usage(usage)


def task_message(request: SubagentRequest) -> str:
    """The child's one user message: the task, then the caller's context."""
    if not request.context:
        return request.task
    return f"{request.task}\n\nContext from the agent that asked:\n{request.context}"


async def _wait_or_cancel(task: asyncio.Task[None], cancel: asyncio.Event) -> bool:
    """Wait for the child's turn; True when ``cancel`` was set first."""
    if cancel.is_set():
        return True
    waiter = asyncio.create_task(cancel.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    return not task.done()


async def _cancel_child(
    turns: TurnSupervisor,
    principal: Principal,
    child: SessionRecord,
    turn_id: str,
    task: asyncio.Task[None],
) -> None:
    """Cancel the child's turn and wait (bounded) for it to end."""
    with contextlib.suppress(ApiError):  # it ended meanwhile
        await turns.cancel(principal, child, turn_id)
    await asyncio.wait({task}, timeout=CANCEL_WAIT_S)


def _report(
    store: Store,
    child: SessionRecord,
    turn_id: str,
    ended: TurnRecord | None,
) -> SubagentReport:
    """What the child did, read back from its stored conversation and turn."""
    answer = ""
    steps = 0
    tools: dict[str, int] = {}
    files: list[str] = []
    for stored in store.turn_messages(child.id, turn_id):
        content = stored.message.get("content", [])
        if stored.message.get("role") != "assistant":
            continue
        steps += 1
        texts = [b.get("text", "") for b in content if b.get("type") == "text"]
        if any(t.strip() for t in texts):
            answer = "".join(texts).strip()
        for block in content:
            if block.get("type") != "tool_use":
                continue
            name = str(block.get("name"))
            tools[name] = tools.get(name, 0) + 1
            path = block.get("input", {}).get("path")
            if name == "read_file" and isinstance(path, str) and path not in files:
                files.append(path)
    status = ended.status if ended is not None else None
    outcome: SubagentStatus
    if status is TurnStatus.COMPLETED:
        outcome = "completed"
    elif status is TurnStatus.CANCELLED:
        outcome = "cancelled"
    else:
        outcome = "failed"
    why: str | None = None
    if outcome != "completed":
        if ended is None or status is TurnStatus.RUNNING:
            why = "its turn did not end in time"
        else:
            why = ended.message or ended.reason
    usage = (ended.usage if ended is not None else None) or {}
    return SubagentReport(
        session_id=child.id,
        agent_type=child.agent or "",
        status=outcome,
        answer=answer,
        steps=steps,
        tools_called=tools,
        files_read=tuple(files),
        usage={k: int(v) for k, v in usage.items() if isinstance(v, int)},
        message=why,
    )
