"""SessionManager: sessions, their dispatcher state, and the one turn each may run.

Routes call it after authentication; it enforces visibility (a ``user`` token
sees only the sessions it created: any other id is "not found"), the
one-turn-at-a-time rule, cancellation, graceful shutdown and recovery after
a crash. Durable facts go to the Store; live state (the DispatchSession with
its remembered approvals, the running turn's task) stays in memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from adapters.errors import AdapterConfigError
from adapters.registry import default_model, parse_model, process_environment
from adapters.scripted_script import load_script
from dispatcher import DispatchSession, PolicyConfig, RulePolicy, ToolDispatcher, WorkspaceFileAPI
from dispatcher.policy import loosened_calls
from dispatcher.publisher import EventPublisher
from dispatcher.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
from dispatcher.tools.knowledge.store import MemoryStore
from protocol.canonical import Message, ToolDefinition
from server.auth import Principal
from server.config import Config
from server.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    NotImplementedYet,
    StorageUnavailable,
)
from server.memory_service import memory_tool_options
from server.roots import is_within, protected_overlap, real
from server.store import (
    MessageRecord,
    SessionRecord,
    Store,
    TurnKind,
    TurnRecord,
    TurnStatus,
)
from server.turns import ToolUsesRunner, TurnContext, TurnOutcome, TurnRunner, interrupted_result

log = logging.getLogger("toolrelay.sessions")

# How long a cancel request waits for the turn to wind down before answering 202.
CANCEL_WAIT = 2.0
SHELL_TOOLS = ("shell", "run_command")


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


@dataclass(slots=True)
class ActiveTurn:
    """The running turn of a session."""

    record: TurnRecord
    context: TurnContext
    task: asyncio.Task[None] | None = None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    stop_reason: str | None = None  # set on shutdown: the turn fails with it
    canceller: asyncio.Task[None] | None = None


class SessionManager:
    """See the module docstring."""

    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        dispatcher: ToolDispatcher,
        publisher: EventPublisher,
        message_runner: TurnRunner | None = None,
        sandbox_config: SandboxConfig | None = None,
        wait_durable: Callable[[], Awaitable[None]] | None = None,
        storage_fault: Callable[[], str | None] | None = None,
    ) -> None:
        self.sandbox_config = sandbox_config  # None: the sandbox is off (Runtime decides)
        # Waits until every event published so far is in the durable log (the
        # bus's flush); a turn's end reaches the store only after that.
        self._wait_durable = wait_durable
        # What fails the storage now (None: healthy); new work is refused then.
        self._storage_fault = storage_fault
        # The memory tools' store (set by the Runtime; None: no memory tools).
        self.memory_store: MemoryStore | None = None
        self.config = config
        self.store = store
        self.dispatcher = dispatcher
        self.publisher = publisher
        self.message_runner = message_runner
        self.tool_uses_runner: TurnRunner = ToolUsesRunner()
        self._dispatch_sessions: dict[str, DispatchSession] = {}
        self._active: dict[str, ActiveTurn] = {}
        self._owners: dict[str, str] = {}
        self._closing = False

    # -- sessions ---------------------------------------------------------

    async def create(
        self,
        principal: Principal,
        *,
        workspace: str,
        name: str | None = None,
        policy: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> SessionRecord:
        """Check and store a new session. A ``scripted:<path>`` model is checked
        here (where it is, what it is, that it parses), in a worker thread:
        a client-chosen file never blocks the event loop."""
        self.check_storage()  # 503 while storage fails: its event could not be logged
        root = self._check_workspace(workspace, principal)
        if model is not None:
            try:
                provider, script = parse_model(model)
            except AdapterConfigError as exc:
                raise InvalidRequest(exc.message, field="model") from None
            if provider == "scripted" and script:
                real_script = self._check_script_place(script, root)
                try:
                    await asyncio.to_thread(load_script, real_script)
                except AdapterConfigError as exc:
                    raise InvalidRequest(exc.message, field="model") from None
                # Stored resolved: each turn re-reads exactly this path, never
                # following a link (see adapters/scripted_script.py).
                model = f"scripted:{real_script}"
            missing = _missing_provider_setting(provider)
            if missing:
                raise InvalidRequest(
                    f"model {model!r} cannot be used: {missing} is not configured on the server",
                    field="model",
                )
        overrides = dict(policy or {})
        effective = self._effective_policy(overrides)  # reject bad overrides before storing
        if overrides and not principal.is_admin:
            self._check_only_tightens(effective, root)
        record = SessionRecord(
            id=new_id("ses"),
            workspace=root,
            owner=principal.token_name,
            name=name,
            model=model,
            policy_overrides=overrides,
        )
        self.store.add_session(record)
        self._owners[record.id] = record.owner
        self.publisher.publish(
            "session.created",
            {
                "workspace": record.workspace,
                "name": record.name,
                "owner": record.owner,
                "model": record.model,
                "created_by": principal.client_name,
            },
            session_id=record.id,
        )
        return record

    def _check_workspace(self, workspace: str, principal: Principal | None = None) -> str:
        """The workspace's real path, if it may be one: inside the roots of
        ``principal`` (checked first, so a user token learns nothing about
        paths outside them), an existing directory, and not protected
        (server/roots.py)."""
        if not workspace or "\x00" in workspace:
            raise InvalidRequest("workspace must be a non-empty path", field="workspace")
        if not os.path.isabs(os.path.expanduser(workspace)):
            raise InvalidRequest(
                f"workspace {workspace!r} must be an absolute path", field="workspace"
            )
        root = real(workspace)
        if principal is not None:
            self._check_roots(workspace, root, principal)
        if not os.path.exists(root):
            raise InvalidRequest(f"workspace {workspace!r} does not exist", field="workspace")
        if not os.path.isdir(root):
            raise InvalidRequest(f"workspace {workspace!r} is not a directory", field="workspace")
        problem = protected_overlap(root, self.config)
        if problem is not None:
            raise InvalidRequest(
                f"workspace {workspace!r} cannot be used: {problem}", field="workspace"
            )
        self._check_hidden(workspace, root)
        return root

    def _check_hidden(self, workspace: str, root: str) -> None:
        """InvalidRequest naming the path when real directory ``root`` is,
        contains or lies inside a path the sandbox hides (the runtime's list:
        data dir, config files, ``workspaces.shell.sandbox_hide`` folders such
        as ~/.ssh). No sandbox could run there without exposing it, so the
        client hears it now rather than as a 409 at first use. The rule is the
        sandbox's own (building one raises), so the two never disagree. With
        the sandbox off nothing is hidden and nothing is refused here."""
        if self.sandbox_config is None:
            return
        try:
            Sandbox(self.sandbox_config, root)
        except SandboxUnavailable as exc:
            raise InvalidRequest(
                f"workspace {workspace!r} cannot be used: {exc} "
                "(see workspaces.shell.sandbox_hide)",
                field="workspace",
            ) from None

    def _check_roots(self, workspace: str, root: str, principal: Principal) -> None:
        """Forbidden unless real path ``root`` lies in the caller's roots: its
        token's own and ``workspaces.allowed_roots``. A user token with none may
        create no session; an admin token with none is not confined."""
        own = list(principal.allowed_roots)
        common = list(self.config.workspaces.allowed_roots)
        if not own and not common:
            if principal.is_admin:
                return
            raise Forbidden(
                f"user token {principal.token_name!r} has no allowed roots, so it cannot create "
                "sessions: the admin must set auth.tokens[].allowed_roots for it or "
                "workspaces.allowed_roots",
                field="workspace",
            )
        if not any(is_within(root, real(a)) for a in (*own, *common)):
            keys = " or ".join(
                k
                for k, roots in (
                    (f"auth.tokens[{principal.token_name}].allowed_roots", own),
                    ("workspaces.allowed_roots", common),
                )
                if roots
            )
            raise Forbidden(
                f"workspace {workspace!r} is outside the allowed roots ({keys})",
                field="workspace",
            )

    def _check_script_place(self, script: str, root: str) -> str:
        """The real path of a session's ``scripted:<path>`` script, if it lies in
        ``model.scripts_dir`` or in the workspace ``root`` (a relative path is
        taken inside the workspace); InvalidRequest naming the path otherwise."""
        if "\x00" in script:
            raise InvalidRequest("the script path of model 'scripted:' holds a NUL", field="model")
        path = real(os.path.join(root, script) if not os.path.isabs(script) else script)
        places = [root]
        if self.config.model.scripts_dir is not None:
            places.append(real(self.config.model.scripts_dir))
        if not any(is_within(path, place) for place in places):
            where = "the session's workspace" + (
                " or model.scripts_dir" if self.config.model.scripts_dir is not None else ""
            )
            raise InvalidRequest(
                f"script {script!r} (resolved to {path}) is outside {where}; a scripted "
                "model may only play a script from there",
                field="model",
            )
        return path

    def _refuse_protected(self, record: SessionRecord) -> None:
        """Conflict when a stored session's workspace (from before the protected
        paths were enforced) touches one: such a session gets no dispatcher."""
        problem = protected_overlap(real(record.workspace), self.config)
        if problem is not None:
            raise Conflict(
                f"session {record.id!r} cannot run: its workspace {record.workspace!r} "
                f"is not allowed: {problem}",
                code="workspace_forbidden",
            )

    def _check_only_tightens(self, effective: PolicyConfig, workspace: str) -> None:
        """A user token may make its sessions stricter than the server's policy,
        never looser: otherwise any user could opt out of confirmations."""
        loosened = loosened_calls(
            RulePolicy(self.config.policy),
            RulePolicy(effective),
            tool_names=self.dispatcher.names(),
            workspace=workspace,
        )
        if loosened:
            shown = "; ".join(loosened[:5]) + (" ..." if len(loosened) > 5 else "")
            raise Forbidden(
                "policy overrides from a user token may only tighten the server's policy; "
                f"these calls would be loosened: {shown}",
                field="policy",
            )

    def _effective_policy(self, overrides: dict[str, Any]) -> PolicyConfig:
        try:
            return self.config.policy.merged(overrides)
        except ValidationError as exc:
            details = "; ".join(
                f"policy.{'.'.join(str(p) for p in e['loc'])}: "
                + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
                for e in exc.errors()
            )
            raise InvalidRequest(f"invalid policy overrides: {details}", field="policy") from None

    def get(self, principal: Principal, session_id: str) -> SessionRecord:
        """The session, if this caller may see it; NotFound otherwise (the same
        answer whether it does not exist or belongs to someone else)."""
        record = self.store.get_session(session_id)
        if record is None or not principal.can_see(record.owner):
            raise NotFound(f"no session {session_id!r}")
        return record

    def list_visible(self, principal: Principal) -> list[SessionRecord]:
        owner = None if principal.is_admin else principal.token_name
        return self.store.list_sessions(owner=owner)

    def owner_of(self, session_id: str) -> str | None:
        """The token name that created a session (also after it was deleted)."""
        owner = self._owners.get(session_id)
        if owner is None:
            owner = self.store.owner_of(session_id)
            if owner is not None:
                self._owners[session_id] = owner
        return owner

    async def delete(self, principal: Principal, session_id: str) -> SessionRecord:
        record = self.get(principal, session_id)
        active = self._active.get(session_id)
        if active is not None:
            self._request_cancel(active, principal.client_name, "session deleted")
            await self._wait_for(active, None)
        self.store.delete_session(session_id)
        dispatch = self._dispatch_sessions.pop(session_id, None)
        if dispatch is not None:
            await self._release(dispatch)
        self.publisher.publish(
            "session.deleted",
            {"reason": "deleted", "deleted_by": principal.client_name},
            session_id=session_id,
        )
        return record

    async def _release(self, session: DispatchSession) -> None:
        """Close a deleted session's workspace root descriptor, once no call of
        it uses that descriptor any more: calls outside a turn (an MCP
        ``tools/call``) are cancelled first. Closing under a running call would
        be worse than a leak: the number could be reused by another open
        directory and the call's walks would start there. So a call that
        outlives the cancel grace keeps it, and the workspace's finalizer
        closes it when the last reference goes."""
        sid = session.session_id
        if self.dispatcher.in_flight(sid):
            await self.dispatcher.cancel_session_tools(sid)
        if self.dispatcher.in_flight(sid):
            log.warning(
                "session %s deleted with a call still running; its workspace stays open", sid
            )
            return
        session.workspace.close()

    def resolved_model(self, model: str | None) -> str:
        """The model a message turn of a session with ``model`` would use now: its
        own, else the server's default (``model.default``, else what the provider
        keys pick). A running turn resolved it the same way at its start."""
        model_for = getattr(self.message_runner, "model_for", None)
        if callable(model_for):
            return str(model_for(model))
        return model or self.config.model.default or default_model(process_environment())

    def to_json(self, record: SessionRecord) -> dict[str, Any]:
        active = self._active.get(record.id)
        return {
            "id": record.id,
            "name": record.name,
            "workspace": record.workspace,
            "owner": record.owner,
            "model": record.model,
            "resolved_model": self.resolved_model(record.model),
            "policy": self._effective_policy(record.policy_overrides).model_dump(mode="json"),
            "policy_overrides": record.policy_overrides,
            "created_at": record.created_at,
            "status": "running" if active is not None else "idle",
            "current_turn_id": active.record.id if active is not None else None,
        }

    def dispatch_session(self, record: SessionRecord) -> DispatchSession:
        """The dispatcher's view of a session, built on first use (also after a restart:
        approvals given "for the session" live in memory and start empty then)."""
        session = self._dispatch_sessions.get(record.id)
        if session is None:
            self._refuse_protected(record)
            cfg = self.config
            shell = cfg.workspaces.shell
            shell_options = {"allowed_only": shell.allowed_only, "timeout": shell.timeout}
            try:
                workspace = WorkspaceFileAPI(
                    record.workspace, allow_delete=cfg.workspaces.allow_delete
                )
            except NotADirectoryError:
                raise Conflict(
                    f"the workspace {record.workspace!r} of session {record.id!r} no longer exists",
                    code="workspace_missing",
                ) from None
            sandbox = None
            if self.sandbox_config is not None:
                try:
                    sandbox = Sandbox(self.sandbox_config, workspace.workspace_root)
                except SandboxUnavailable as exc:
                    # The workspace contains or lies in a hidden path (a
                    # credential folder): no sandbox could run there unexposed.
                    raise Conflict(str(exc), code="workspace_hidden") from None
            session = DispatchSession(
                session_id=record.id,
                workspace=workspace,
                policy=RulePolicy(self._effective_policy(record.policy_overrides)),
                max_concurrency=cfg.dispatcher.max_concurrency,
                confirmation_timeout=cfg.confirmation_timeout,
                tool_options={
                    **{name: shell_options for name in SHELL_TOOLS},
                    **memory_tool_options(
                        self.memory_store,
                        session_id=record.id,
                        workspace=workspace.workspace_root,
                        owner=record.owner,
                        publisher=self.publisher,
                    ),
                },
                sandbox=sandbox,
            )
            self._dispatch_sessions[record.id] = session
        return session

    def tools(self, record: SessionRecord) -> list[ToolDefinition]:
        return self.dispatcher.definitions_for(self.dispatch_session(record))

    def messages(self, record: SessionRecord) -> list[MessageRecord]:
        return self.store.messages(record.id)

    # -- turns ------------------------------------------------------------

    def running_count(self) -> int:
        return len(self._active)

    def active_turn(self, session_id: str) -> ActiveTurn | None:
        return self._active.get(session_id)

    def start_turn(
        self, principal: Principal, record: SessionRecord, request: dict[str, Any]
    ) -> TurnRecord:
        """Store the turn and start it in the background; 409 while another runs."""
        if self._closing:
            raise Conflict("the server is shutting down", code="shutting_down")
        self.check_storage()
        runner: TurnRunner
        kind: TurnKind
        if "tool_uses" in request:
            runner, kind = self.tool_uses_runner, "tool_uses"
        else:
            if self.message_runner is None:
                raise NotImplementedYet(
                    'turns with {"message": ...} need the agent loop, which this server '
                    'does not provide yet; send {"tool_uses": [...]} to play the model yourself'
                )
            runner, kind = self.message_runner, "message"
        running = self._active.get(record.id)
        if running is not None:
            raise Conflict(
                f"turn {running.record.id!r} is still running in this session; wait for it "
                "to end or cancel it",
                code="turn_in_progress",
                turn_id=running.record.id,
            )
        dispatch_session = self.dispatch_session(record)
        turn = TurnRecord(
            id=new_id("turn"),
            session_id=record.id,
            number=self.store.next_turn_number(record.id),
            kind=kind,
            status="running",
            request=request,
            created_by=principal.client_name,
        )
        self.store.add_turn(turn)
        context = TurnContext(
            session_id=record.id,
            turn_id=turn.id,
            request=request,
            dispatch_session=dispatch_session,
            dispatcher=self.dispatcher,
            publisher=self.publisher,
            append_message=lambda message: self._append(record.id, turn.id, message),
        )
        active = ActiveTurn(record=turn, context=context)
        self._active[record.id] = active
        started: dict[str, Any] = {
            "source": kind,
            "number": turn.number,
            "created_by": principal.client_name,
        }
        if kind == "tool_uses":
            started["tool_use_ids"] = [b["id"] for b in request["tool_uses"]]
        self.publisher.publish("turn.started", started, session_id=record.id, turn_id=turn.id)
        active.task = asyncio.create_task(self._drive(active, runner), name=f"turn-{turn.id}")
        return turn

    def _append(self, session_id: str, turn_id: str, message: Message) -> MessageRecord:
        return self.store.append_message(
            session_id, message.model_dump(mode="json"), turn_id=turn_id
        )

    def get_turn(self, record: SessionRecord, turn_id: str) -> TurnRecord:
        turn = self.store.get_turn(turn_id, session_id=record.id)
        if turn is None:
            raise NotFound(f"no turn {turn_id!r} in session {record.id!r}")
        return turn

    def turn_json(self, turn: TurnRecord) -> dict[str, Any]:
        data = turn.to_json()
        active = self._active.get(turn.session_id)
        data["cancel_requested"] = (
            active is not None and active.record.id == turn.id and active.cancelled_by is not None
        )
        return data

    async def cancel_turn(
        self, principal: Principal, record: SessionRecord, turn_id: str
    ) -> tuple[TurnRecord, bool]:
        """Cancel a running turn's tools and pending confirmations. Returns the turn
        and whether it has ended by the time this returns (bounded wait)."""
        turn = self.get_turn(record, turn_id)
        active = self._active.get(record.id)
        if active is None or active.record.id != turn_id:
            raise Conflict(
                f"turn {turn_id!r} is not running (status: {turn.status})",
                code="turn_not_running",
                status=turn.status,
            )
        self._request_cancel(active, principal.client_name, "cancelled")
        ended = await self._wait_for(active, CANCEL_WAIT)
        return self.get_turn(record, turn_id), ended

    def _request_cancel(self, active: ActiveTurn, by: str, reason: str) -> None:
        if active.cancelled_by is None and active.stop_reason is None:
            active.cancelled_by = by
            active.cancel_reason = reason
        if active.canceller is None:
            active.canceller = asyncio.create_task(
                self._cancel_work(active), name=f"cancel-{active.record.id}"
            )

    async def _cancel_work(self, active: ActiveTurn) -> None:
        active.context.cancel_requested.set()
        # Settles pending confirmations as "cancelled" and stops running tools
        # (waiting up to the dispatcher's grace period for stubborn ones).
        await self.dispatcher.cancel_session_tools(active.record.session_id)
        task = active.task
        if task is None or task.done():
            return
        # A runner that is not inside a tool call (e.g. streaming from a model)
        # gets a moment to notice cancel_requested, then its task is cancelled.
        done, _ = await asyncio.wait({task}, timeout=CANCEL_WAIT)
        if not done:
            task.cancel()

    async def _wait_for(self, active: ActiveTurn, limit: float | None) -> bool:
        task = active.task
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=limit)
        return bool(done)

    async def _drive(self, active: ActiveTurn, runner: TurnRunner) -> None:
        ctx = active.context
        outcome: TurnOutcome | None = None
        failure: str | None = None
        failure_reason = "internal_error"
        interrupted = False
        try:
            outcome = await runner.run(ctx)
        except asyncio.CancelledError:
            interrupted = True
        except Exception as exc:
            if isinstance(exc, StorageUnavailable):
                log.warning("turn %s failed: %s", ctx.turn_id, exc.message)
                failure = exc.message
                failure_reason = "storage_unavailable"
            else:
                log.exception("turn %s failed", ctx.turn_id)
                failure = f"internal error: {type(exc).__name__}; details are in the server log"
        finally:
            try:
                await self._finish(active, outcome, failure, interrupted, failure_reason)
            finally:
                # Whatever happened, the session may take a new turn again.
                self._active.pop(ctx.session_id, None)
        if interrupted and active.stop_reason is None and active.cancelled_by is None:
            raise asyncio.CancelledError

    async def _finish(
        self,
        active: ActiveTurn,
        outcome: TurnOutcome | None,
        failure: str | None,
        interrupted: bool,
        failure_reason: str = "internal_error",
    ) -> None:
        """End the turn, in the order that keeps the log and the store agreeing
        (see "Crash ordering" in specs/server-api.md): the conversation is
        completed and the results stored first, then the terminal event is
        published and awaited until durable, and only then does the store say
        how the turn ended. A crash in between leaves the store saying
        ``running``, which recovery reconciles with the log."""
        ctx = active.context
        results = [r.model_dump(mode="json") for r in outcome.results] if outcome else None
        usage = outcome.usage if outcome and outcome.usage is not None else ctx.usage
        status: TurnStatus
        data: dict[str, Any]
        if active.stop_reason is not None:
            status, reason = "failed", active.stop_reason
            data = {"reason": reason, "message": "the server stopped while the turn was running"}
        elif active.cancelled_by is not None:
            status, reason = "cancelled", active.cancel_reason or "cancelled"
            data = {"reason": reason, "cancelled_by": active.cancelled_by}
            if usage is not None:
                data["usage"] = usage
        elif failure is not None:
            status, reason = "failed", failure_reason
            data = {"reason": reason, "message": failure}
        elif outcome is not None and outcome.failure is not None:
            # The runner ended the turn on an error it handled (a provider error, a step limit).
            status, reason = "failed", outcome.failure.reason
            data = {
                **outcome.failure.details,
                "reason": reason,
                "message": outcome.failure.message,
                "usage": usage,
            }
        elif interrupted:
            status, reason = "failed", "interrupted"
            data = {"reason": reason, "message": "the turn's task was cancelled"}
        else:
            status, reason = "completed", None
            errors = sum(1 for r in outcome.results if r.is_error) if outcome else 0
            data = {"usage": usage, "results": len(results or []), "errors": errors}
            if outcome is not None:
                data.update(outcome.details)
        try:
            if status != "completed":
                # The runner may have been cut short (a storage fault, a cancellation
                # between appends): every tool_use of this turn gets a result.
                await self._storage_retry(lambda: self._answer_orphans(ctx.session_id, ctx.turn_id))
            await self._storage_retry(
                lambda: self.store.set_turn_outcome(ctx.turn_id, results=results, usage=usage)
            )
            self.publisher.publish(
                f"turn.{status}", data, session_id=ctx.session_id, turn_id=ctx.turn_id
            )
            if self._wait_durable is not None:
                await self._wait_durable()
            await self._storage_retry(
                # The results were stored above (set_turn_outcome, as references
                # into the conversation): not matched and written a second time.
                lambda: self.store.finish_turn(
                    ctx.turn_id,
                    status=status,
                    reason=reason,
                    usage=usage,
                    message=data.get("message") if status == "failed" else None,
                )
            )
        except Exception as exc:
            # The bus stopped (its failure ends the process, or shutdown raced the
            # turn) or the store stayed unwritable until shutdown: the store keeps
            # "running", and recovery at the next start ends the turn in both.
            log.warning("turn %s ended %s but not durably: %s", ctx.turn_id, status, exc)

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

    def check_storage(self) -> None:
        """Refuse new work with a 503 naming the cause while storage is failing."""
        cause = self._storage_fault() if self._storage_fault is not None else None
        if cause is not None:
            raise StorageUnavailable(
                f"the server cannot record new work while its storage is failing: {cause}; "
                "it retries by itself, try again later",
                cause=cause,
            )

    # -- lifecycle --------------------------------------------------------

    async def shutdown(self, *, budget: float) -> None:
        """End every running turn as failed (``server_shutdown``), within ``budget`` s."""
        self._closing = True
        actives = list(self._active.values())
        for active in actives:
            active.stop_reason = "server_shutdown"
            active.context.cancel_requested.set()
            self.dispatcher.broker.cancel_session(active.record.session_id)
        cancels = [self.dispatcher.cancel_session_tools(a.record.session_id) for a in actives]
        if cancels:
            try:
                async with asyncio.timeout(budget):
                    await asyncio.gather(*cancels)
            except TimeoutError:
                log.warning("tools still running at shutdown; their turns are cancelled")
        tasks = [a.task for a in actives if a.task is not None and not a.task.done()]
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
        for turn in running:
            self._answer_orphans(turn.session_id, turn.id)
            text = logged.get(turn.id)
            if text is None:
                to_fail.append(turn)
                continue
            end = json.loads(text)
            status: TurnStatus = end["type"].removeprefix("turn.")
            end_data = end.get("data", {})
            ended = self.store.finish_turn(
                turn.id,
                status=status,
                reason=end_data.get("reason"),
                message=end_data.get("message") if status == "failed" else None,
            )
            if ended is not None:
                recovered.append(ended)
        for turn in to_fail:
            self.publisher.publish(
                "turn.failed",
                {"reason": "server_restart", "message": RESTART_MESSAGE},
                session_id=turn.session_id,
                turn_id=turn.id,
            )
        if to_fail and self._wait_durable is not None:
            await self._wait_durable()
        for turn in to_fail:
            ended = self.store.finish_turn(
                turn.id, status="failed", reason="server_restart", message=RESTART_MESSAGE
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


RESTART_MESSAGE = "the server stopped unexpectedly while the turn was running"

# What each provider needs from the server's environment (as captured at
# start-up: keys are removed from os.environ then, see adapters/registry.py).
_PROVIDER_SETTINGS = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "openai": ("OPENAI_API_KEY",),
    "openai-compatible": ("OPENAI_BASE_URL",),
}


def _missing_provider_setting(provider: str) -> str | None:
    """The variable(s) a provider needs and the server lacks, or None."""
    names = _PROVIDER_SETTINGS.get(provider)
    if not names:
        return None
    env = process_environment()
    if any(env.get(name) for name in names):
        return None
    return " or ".join(names)
