"""TurnSupervisor: the one place that starts, drives, ends, cancels, stops and
recovers turns.

A session runs at most one turn at a time. The supervisor stores the turn,
runs its runner (server/turns.py) in a background task, and, whatever
happened, ends it in the order that keeps the state store and the event log
agreeing ("Crash ordering" in specs/server-api.md). Which end a turn takes is
decided by its state machine (server/turn_state.py), which also publishes
every ``turn.*`` event. After a crash, :meth:`TurnSupervisor.recover` ends
the turns the store still says are running.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from dispatcher import DispatchSession, ToolDispatcher
from dispatcher.pipeline.hooks import HookEvent
from dispatcher.publisher import EventPublisher
from protocol.canonical import Message
from server.auth import Principal
from server.errors import Conflict, NotFound, NotImplementedYet, StorageUnavailable
from server.store import (
    MessageRecord,
    SessionRecord,
    Store,
    TurnCancelReason,
    TurnFailureReason,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from server.turn_pipeline import run_hooks
from server.turn_state import RESTART_MESSAGE, Turn, TurnEnd, TurnPhase
from server.turns import ToolUsesRunner, TurnContext, TurnOutcome, TurnRunner, interrupted_result

log = logging.getLogger("toolrelay.sessions")

# Failures on_error hooks do not run for: the server is going away (a hook
# would hold up the shutdown) or the turn's task was cut off.
_NO_ON_ERROR = frozenset(
    {
        TurnFailureReason.SERVER_SHUTDOWN,
        TurnFailureReason.SERVER_RESTART,
        TurnFailureReason.INTERRUPTED,
    }
)

# How long a cancel request waits for the turn to wind down before answering 202.
CANCEL_WAIT = 2.0

StorageFault = Callable[[], "str | None"]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def check_storage(storage_fault: StorageFault | None) -> None:
    """Refuse new work with a 503 naming the cause while storage is failing."""
    cause = storage_fault() if storage_fault is not None else None
    if cause is not None:
        raise StorageUnavailable(
            f"the server cannot record new work while its storage is failing: {cause}; "
            "it retries by itself, try again later",
            cause=cause,
        )


class TurnSupervisor:
    """See the module docstring. ``dispatch_session`` gives a session's
    DispatchSession (the session registry's); ``wait_durable`` waits until
    every event published so far would survive a crash (the bus's
    ``durable``: in the event ring or the log); ``storage_fault``
    says what fails the storage now (None: healthy)."""

    def __init__(
        self,
        *,
        store: Store,
        dispatcher: ToolDispatcher,
        publisher: EventPublisher,
        dispatch_session: Callable[[SessionRecord], DispatchSession],
        message_runner: TurnRunner | None = None,
        wait_durable: Callable[[], Awaitable[None]] | None = None,
        storage_fault: StorageFault | None = None,
    ) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self.publisher = publisher
        self.message_runner = message_runner
        self.tool_uses_runner: TurnRunner = ToolUsesRunner()
        self._dispatch_session = dispatch_session
        self._wait_durable = wait_durable
        self._storage_fault = storage_fault
        self._active: dict[str, Turn] = {}
        self._closing = False

    # -- queries ------------------------------------------------------------

    def running_count(self) -> int:
        return len(self._active)

    def active(self, session_id: str) -> Turn | None:
        """The running turn of a session, if any."""
        return self._active.get(session_id)

    def check_storage(self) -> None:
        check_storage(self._storage_fault)

    def get(self, record: SessionRecord, turn_id: str) -> TurnRecord:
        turn = self.store.get_turn(turn_id, session_id=record.id)
        if turn is None:
            raise NotFound(f"no turn {turn_id!r} in session {record.id!r}")
        return turn

    def to_json(self, turn: TurnRecord) -> dict[str, Any]:
        data = turn.to_json()
        active = self._active.get(turn.session_id)
        data["cancel_requested"] = (
            active is not None and active.id == turn.id and active.cancel_requested
        )
        return data

    # -- start --------------------------------------------------------------

    def start(
        self, principal: Principal, record: SessionRecord, request: dict[str, Any]
    ) -> TurnRecord:
        """Store the turn and start it in the background; 409 while another runs."""
        if self._closing:
            raise Conflict("the server is shutting down", code="shutting_down")
        self.check_storage()
        runner, kind = self._runner_for(request)
        running = self._active.get(record.id)
        if running is not None:
            raise Conflict(
                f"turn {running.id!r} is still running in this session; wait for it "
                "to end or cancel it",
                code="turn_in_progress",
                turn_id=running.id,
            )
        dispatch_session = self._dispatch_session(record)
        # A dry-run turn: asked for in the request or the session is one.
        dry_run = bool(request.get("dry_run")) or record.dry_run
        turn_record = TurnRecord(
            id=new_id("turn"),
            session_id=record.id,
            number=self.store.next_turn_number(record.id),
            kind=kind,
            status=TurnStatus.RUNNING,
            request=request,
            created_by=principal.client_name,
            dry_run=dry_run,
        )
        self.store.add_turn(turn_record)
        turn_id = turn_record.id
        if dry_run:
            dispatch_session.dry_run_turns.add(turn_id)
        context = TurnContext(
            session_id=record.id,
            turn_id=turn_id,
            request=request,
            dispatch_session=dispatch_session,
            dispatcher=self.dispatcher,
            publisher=self.publisher,
            append_message=lambda message: self._append(record.id, turn_id, message),
            dry_run=dry_run,
        )
        turn = Turn(record=turn_record, publisher=self.publisher, context=context)
        self._active[record.id] = turn
        started: dict[str, Any] = {
            "source": kind,
            "number": turn_record.number,
            "created_by": principal.client_name,
        }
        if kind == "tool_uses":
            started["tool_use_ids"] = [b["id"] for b in request["tool_uses"]]
        if dry_run:
            started["dry_run"] = True
        turn.start(started)
        turn.task = asyncio.create_task(self._drive(turn, context, runner), name=f"turn-{turn_id}")
        return turn_record

    def _runner_for(self, request: dict[str, Any]) -> tuple[TurnRunner, TurnKind]:
        """The runner of the request's kind of turn (501 without the agent loop)."""
        if "tool_uses" in request:
            return self.tool_uses_runner, "tool_uses"
        if self.message_runner is None:
            raise NotImplementedYet(
                'turns with {"message": ...} need the agent loop, which this server '
                'does not provide yet; send {"tool_uses": [...]} to play the model yourself'
            )
        return self.message_runner, "message"

    def _append(self, session_id: str, turn_id: str, message: Message) -> MessageRecord:
        return self.store.append_message(
            session_id, message.model_dump(mode="json"), turn_id=turn_id
        )

    # -- cancel -------------------------------------------------------------

    async def cancel(
        self, principal: Principal, record: SessionRecord, turn_id: str
    ) -> tuple[TurnRecord, bool]:
        """Cancel a running turn's tools and pending confirmations. Returns the turn
        and whether it has ended by the time this returns (bounded wait)."""
        stored = self.get(record, turn_id)
        turn = self._active.get(record.id)
        if turn is None or turn.id != turn_id:
            raise Conflict(
                f"turn {turn_id!r} is not running (status: {stored.status})",
                code="turn_not_running",
                status=stored.status,
            )
        self._request_cancel(turn, principal.client_name, TurnCancelReason.CANCELLED)
        ended = await self._wait_for(turn, CANCEL_WAIT)
        return self.get(record, turn_id), ended

    async def end_for_deletion(self, session_id: str, by: str) -> None:
        """Cancel a session's running turn (``session deleted``) and wait for its end."""
        turn = self._active.get(session_id)
        if turn is not None:
            self._request_cancel(turn, by, TurnCancelReason.SESSION_DELETED)
            await self._wait_for(turn, None)

    def _request_cancel(self, turn: Turn, by: str, reason: TurnCancelReason) -> None:
        turn.request_cancel(by, reason)
        if turn.canceller is None:
            turn.canceller = asyncio.create_task(self._cancel_work(turn), name=f"cancel-{turn.id}")

    async def _cancel_work(self, turn: Turn) -> None:
        if turn.context is not None:
            turn.context.cancel_requested.set()
        # Settles pending confirmations as "cancelled" and stops running tools
        # (waiting up to the dispatcher's grace period for stubborn ones).
        await self.dispatcher.cancel_session_tools(turn.session_id)
        task = turn.task
        if task is None or task.done():
            return
        # A runner that is not inside a tool call (e.g. streaming from a model)
        # gets a moment to notice cancel_requested, then its task is cancelled.
        done, _ = await asyncio.wait({task}, timeout=CANCEL_WAIT)
        if not done:
            task.cancel()

    async def _wait_for(self, turn: Turn, limit: float | None) -> bool:
        task = turn.task
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=limit)
        return bool(done)

    # -- drive and finish ---------------------------------------------------

    async def _drive(self, turn: Turn, ctx: TurnContext, runner: TurnRunner) -> None:
        outcome: TurnOutcome | None = None
        failure: str | None = None
        failure_reason = TurnFailureReason.INTERNAL_ERROR
        interrupted = False
        try:
            outcome = await runner.run(ctx)
        except asyncio.CancelledError:
            interrupted = True
        except Exception as exc:
            if isinstance(exc, StorageUnavailable):
                log.warning("turn %s failed: %s", ctx.turn_id, exc.message)
                failure = exc.message
                failure_reason = TurnFailureReason.STORAGE_UNAVAILABLE
            else:
                log.exception("turn %s failed", ctx.turn_id)
                failure = f"internal error: {type(exc).__name__}; details are in the server log"
        finally:
            try:
                await self._finish(turn, ctx, outcome, failure, failure_reason, interrupted)
            finally:
                # Whatever happened, the session may take a new turn again.
                self._active.pop(ctx.session_id, None)
        if interrupted and turn.stop_reason is None and turn.cancelled_by is None:
            # A cancellation nobody asked for (not a cancel, not a shutdown) is passed on.
            raise asyncio.CancelledError

    async def _finish(
        self,
        turn: Turn,
        ctx: TurnContext,
        outcome: TurnOutcome | None,
        failure: str | None,
        failure_reason: TurnFailureReason,
        interrupted: bool,
    ) -> None:
        """End the turn, in the order that keeps the log and the store agreeing
        (see "Crash ordering" in specs/server-api.md): the conversation is
        completed and the results stored first, then the terminal event is
        published and awaited until durable, and only then does the store say
        how the turn ended. A crash in between leaves the store saying
        ``running``, which recovery reconciles with the log. One piece: that
        order is the point, and split up it would no longer read top to bottom."""
        results = [r.model_dump(mode="json") for r in outcome.results] if outcome else None
        usage = outcome.usage if outcome and outcome.usage is not None else ctx.usage
        plan = self._end_dispatch(ctx)
        gates = outcome.quality_gates if outcome is not None else None
        end = turn.decide(
            outcome,
            failure,
            failure_reason,
            interrupted,
            usage,
            results=len(results or []),
            plan=plan,
        )
        hook_cut_short = await self._on_error_hooks(ctx, end)
        # After the last hook of the turn (on_error): its dry-run ends here.
        ctx.dispatch_session.dry_run_turns.discard(ctx.turn_id)
        try:
            if end.status is not TurnStatus.COMPLETED:
                # The runner may have been cut short (a storage fault, a cancellation
                # between appends): every tool_use of this turn gets a result.
                await self._storage_retry(lambda: self._answer_orphans(ctx.session_id, ctx.turn_id))
            await self._storage_retry(
                lambda: self.store.set_turn_outcome(
                    ctx.turn_id, results=results, usage=usage, plan=plan, quality_gates=gates
                )
            )
            turn.end(end)
            if self._wait_durable is not None:
                await self._wait_durable()
            await self._storage_retry(
                # The results were stored above (set_turn_outcome, as references
                # into the conversation): not matched and written a second time.
                lambda: self.store.finish_turn(
                    ctx.turn_id,
                    status=end.status,
                    reason=end.reason,
                    usage=usage,
                    message=end.message,
                )
            )
        except Exception as exc:
            # The bus stopped (its failure ends the process, or shutdown raced the
            # turn) or the store stayed unwritable until shutdown: the store keeps
            # "running", and recovery at the next start ends the turn in both.
            log.warning("turn %s ended %s but not durably: %s", ctx.turn_id, end.status, exc)
        if hook_cut_short:
            raise asyncio.CancelledError

    async def _on_error_hooks(self, ctx: TurnContext, end: TurnEnd) -> bool:
        """Run the ``on_error`` hooks of a failed turn (not while closing, and
        not for the reasons in _NO_ON_ERROR). True if a shutdown cancelled the
        task during them: the caller records the end first, then re-raises."""
        if end.status is not TurnStatus.FAILED or end.reason in _NO_ON_ERROR or self._closing:
            return False
        try:
            await run_hooks(
                ctx.dispatch_session,
                HookEvent.ON_ERROR,
                turn_id=ctx.turn_id,
                extra={"reason": str(end.reason), "message": end.message},
            )
        except asyncio.CancelledError:
            return True
        return False

    def _end_dispatch(self, ctx: TurnContext) -> list[dict[str, Any]] | None:
        """Tell the dispatcher the turn ended (its per-turn counters go) and
        take the turn's dry-run plan (None for a turn that is not a dry-run)."""
        session = ctx.dispatch_session
        actions = session.planned.pop(ctx.turn_id, [])
        try:
            self.dispatcher.end_turn(session, ctx.turn_id)
        except Exception:  # bookkeeping only: never stands in the way of the turn's end
            log.exception("ending turn %s in the dispatcher failed", ctx.turn_id)
        if not ctx.dry_run:
            return None
        # Calls of one message are recorded as they finish, concurrently: the
        # plan is given in the order the calls were made.
        order: dict[str, int] = {}
        for message in self.store.turn_messages(ctx.session_id, ctx.turn_id):
            for block in message.message.get("content", []):
                if block.get("type") == "tool_use":
                    order.setdefault(block["id"], len(order))
        ordered = sorted(actions, key=lambda a: order.get(a.tool_use_id, len(order)))
        return [action.as_dict() for action in ordered]

    async def _storage_retry(self, write: Callable[[], object]) -> None:
        """Run a store write, retrying with backoff through a storage fault (the
        turn's end must reach the store once the fault clears); gives up at
        shutdown, leaving the rest to recovery at the next start."""
        delay = 0.05
        while True:
            try:
                write()
                return
            except StorageUnavailable as exc:
                if self._closing:
                    raise
                log.warning("retrying in %.2fs: %s", delay, exc.message)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    # -- lifecycle ----------------------------------------------------------

    async def shutdown(self, *, budget: float) -> None:
        """End every running turn as failed (``server_shutdown``), within ``budget`` s."""
        self._closing = True
        turns = list(self._active.values())
        for turn in turns:
            turn.request_stop(TurnFailureReason.SERVER_SHUTDOWN)
            if turn.context is not None:
                turn.context.cancel_requested.set()
            self.dispatcher.broker.cancel_session(turn.session_id)
        cancels = [self.dispatcher.cancel_session_tools(t.session_id) for t in turns]
        if cancels:
            try:
                async with asyncio.timeout(budget):
                    await asyncio.gather(*cancels)
            except TimeoutError:
                log.warning("tools still running at shutdown; their turns are cancelled")
        tasks = [t.task for t in turns if t.task is not None and not t.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=budget)

    async def recover(
        self, turn_ends: Callable[[list[str]], Awaitable[dict[str, str]]]
    ) -> list[TurnRecord]:
        """After a crash, end every turn the store still says is ``running``.

        ``turn_ends`` looks the turns' terminal events up in the durable log.
        A turn whose end is logged (the previous run died after logging it but
        before the store caught up) takes that end in the store, and no second
        terminal event is published. Any other turn fails with
        ``server_restart``: its ``turn.failed`` is published and made durable
        before the store records it, so a crash during recovery is recovered
        the same way. Either way each of its tool_use blocks without a result
        gets an error result, matched within the turn."""
        running = self.store.running_turns()
        if not running:
            return []
        logged = await turn_ends([t.id for t in running])
        recovered: list[TurnRecord] = []
        to_fail: list[TurnRecord] = []
        for record in running:
            self._answer_orphans(record.session_id, record.id)
            text = logged.get(record.id)
            if text is None:
                to_fail.append(record)
                continue
            end = json.loads(text)
            status = TurnStatus(end["type"].removeprefix("turn."))
            end_data = end.get("data", {})
            ended = self.store.finish_turn(
                record.id,
                status=status,
                reason=end_data.get("reason"),
                message=end_data.get("message") if status is TurnStatus.FAILED else None,
            )
            if ended is not None:
                recovered.append(ended)
        restart = TurnFailureReason.SERVER_RESTART
        restart_end = TurnEnd(
            TurnPhase.FAILED, restart, {"reason": restart.value, "message": RESTART_MESSAGE}
        )
        for record in to_fail:
            Turn(record=record, publisher=self.publisher).end(restart_end)
        if to_fail and self._wait_durable is not None:
            await self._wait_durable()
        for record in to_fail:
            ended = self.store.finish_turn(
                record.id,
                status=restart_end.status,
                reason=restart_end.reason,
                message=restart_end.message,
            )
            if ended is not None:
                recovered.append(ended)
        return recovered

    def _answer_orphans(self, session_id: str, turn_id: str) -> None:
        """Give every tool_use block of one turn that has no result an error result.

        Matching is within the turn and in order: each tool_result answers the
        oldest open tool_use with its id, so an id reused by another turn (or
        by a later step of this one) is never taken for an answer to this call.
        """
        open_calls: list[str] = []
        for message in self.store.turn_messages(session_id, turn_id):
            for block in message.message.get("content", []):
                if block.get("type") == "tool_use":
                    open_calls.append(block["id"])
                elif block.get("type") == "tool_result" and block["tool_use_id"] in open_calls:
                    open_calls.remove(block["tool_use_id"])
        if not open_calls:
            return
        reason = "the server stopped before the call finished"
        results = [interrupted_result(tid, reason) for tid in open_calls]
        self.store.append_message(
            session_id,
            Message(role="tool", content=list(results)).model_dump(mode="json"),
            turn_id=turn_id,
        )
