"""SessionRegistry: the sessions, who may see them, and where they may live.

Routes call it after authentication. It creates, lists, gets and deletes
sessions and publishes their ``session.*`` events; it enforces visibility (a
``user`` token sees only the sessions it created: any other id is "not
found"), the workspace rules (allowed roots, protected and sandbox-hidden
paths) and the policy rule for user tokens (overrides may only tighten). It
keeps each session's DispatchSession, built on first use by the factory the
server's services give it (server/dispatch_factory.py). Turns are the
supervisor's (server/turn_supervisor.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from adapters.errors import AdapterMisconfigured
from adapters.registry import PROVIDER_SETTINGS, default_model, parse_model, process_environment
from adapters.scripted_script import load_script
from dispatcher import DispatchSession, PolicyConfig, RulePolicy, ToolDispatcher
from dispatcher.pipeline.profiles import DEFAULT_PROFILE
from dispatcher.policy import loosened_calls
from dispatcher.publisher import EventPublisher
from dispatcher.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
from protocol.canonical import ToolDefinition
from protocol.payloads import SessionCreated, SessionDeleted
from protocol.validation_errors import describe_errors
from server.auth import Principal
from server.config import ModelSection, WorkspacesSection
from server.errors import Forbidden, InvalidRequest, NotFound
from server.roots import Protected, is_within, real
from server.session_access import (
    AccessConfig,
    access_for,
    check_profile_only_tightens,
    chosen_agent,
    chosen_profile,
    shown_policy,
)
from server.store import MessageRecord, SessionRecord, Store
from server.turn_supervisor import TurnSupervisor, new_id

log = logging.getLogger("toolrelay.sessions")


def publish_session_created(
    publisher: EventPublisher,
    record: SessionRecord,
    created_by: str,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """The one publisher of ``session.created``: the registry's sessions and
    the children server/subagents.py starts (``extra``: their agent, profile
    and parent). Keys beyond ``workspace`` travel as the payload's extras."""
    keys: dict[str, Any] = {
        "name": record.name,
        "owner": record.owner,
        "model": record.model,
        "created_by": created_by,
        **(extra or {}),
    }
    publisher.emit(SessionCreated(workspace=record.workspace, **keys), session_id=record.id)


class RegistryConfig(AccessConfig, Protocol):
    """The configuration sections sessions are created and checked with
    (a ``Config`` is one)."""

    @property
    def model(self) -> ModelSection: ...
    @property
    def workspaces(self) -> WorkspacesSection: ...
    @property
    def protected(self) -> Protected: ...


class SessionRegistry:
    """See the module docstring."""

    def __init__(
        self,
        *,
        config: RegistryConfig,
        store: Store,
        dispatcher: ToolDispatcher,
        publisher: EventPublisher,
        turns: TurnSupervisor,
        dispatch_session_factory: Callable[[SessionRecord], DispatchSession],
        sandbox_config: SandboxConfig | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.dispatcher = dispatcher
        self.publisher = publisher
        self.turns = turns
        self.sandbox_config = sandbox_config  # None: the sandbox is off
        self._make_dispatch_session = dispatch_session_factory
        self._dispatch_sessions: dict[str, DispatchSession] = {}
        self._owners: dict[str, str] = {}

    async def create(
        self,
        principal: Principal,
        *,
        workspace: str,
        name: str | None = None,
        policy: Mapping[str, Any] | None = None,
        model: str | None = None,
        dry_run: bool = False,
        agent: str | None = None,
        profile: str | None = None,
    ) -> SessionRecord:
        """Check and store a new session. A ``scripted:<path>`` model is checked
        here (where it is, what it is, that it parses), in a worker thread:
        a client-chosen file never blocks the event loop."""
        self.turns.check_storage()  # 503 while storage fails: its event could not be logged
        root = self._check_workspace(workspace, principal)
        if model is not None:
            model = await self._checked_model(model, root)
        overrides = dict(policy or {})
        effective = self._effective_policy(overrides)  # reject bad overrides before storing
        if overrides and not principal.is_admin:
            self._check_only_tightens(effective, root)
        # The agent (default build) and its profile unless one is named.
        chosen = chosen_agent(self.config, agent)
        profile_name = chosen_profile(self.config, profile or chosen.profile).name
        record = SessionRecord(
            id=new_id("ses"),
            workspace=root,
            owner=principal.token_name,
            name=name,
            # The agent's model (the admin's config: trusted) when none is asked for.
            model=model if model is not None else chosen.config.model,
            policy_overrides=overrides,
            agent=chosen.name,
            profile=profile_name,
            dry_run=dry_run,
        )
        if not principal.is_admin:
            self._check_profile_tightens(record)
        self.store.add_session(record)
        self._owners[record.id] = record.owner
        publish_session_created(
            self.publisher,
            record,
            principal.client_name,
            {"agent": record.agent, "profile": record.profile},
        )
        return record

    async def _checked_model(self, model: str, root: str) -> str:
        """``model`` as stored, or InvalidRequest: its provider must be
        configured, and a scripted file must lie in the workspace and parse
        (read in a worker thread)."""
        try:
            provider, script = parse_model(model)
        except AdapterMisconfigured as exc:
            raise InvalidRequest(exc.message, field="model") from None
        if provider == "scripted" and script:
            real_script = self._check_script_place(script, root)
            try:
                await asyncio.to_thread(load_script, real_script)
            except AdapterMisconfigured as exc:
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
        return model

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
        problem = self.config.protected.overlap(root)
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

    def _check_profile_tightens(self, record: SessionRecord) -> None:
        """A user token may pick a profile (or an agent whose profile) at least
        as strict as the server's policy, never a looser one: the same rule as
        for policy overrides, with the tools the profile hides counted as denied."""
        access = access_for(self.config, record, sandboxed=self.sandbox_config is not None)
        check_profile_only_tightens(
            self.config, access, tool_names=self.dispatcher.names(), workspace=record.workspace
        )

    def _effective_policy(self, overrides: dict[str, Any]) -> PolicyConfig:
        try:
            return self.config.policy.merged(overrides)
        except ValidationError as exc:
            details = "; ".join(describe_errors(exc, prefix="policy."))
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
        await self.turns.end_for_deletion(session_id, principal.client_name)
        self.store.delete_session(session_id)
        dispatch = self._dispatch_sessions.pop(session_id, None)
        if dispatch is not None:
            await self._release(dispatch)
        self.publisher.emit(
            SessionDeleted(reason="deleted", deleted_by=principal.client_name),
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
        model_for = getattr(self.turns.message_runner, "model_for", None)
        if callable(model_for):
            return str(model_for(model))
        return model or self.config.model.default or default_model(process_environment())

    def to_json(self, record: SessionRecord) -> dict[str, Any]:
        active = self.turns.active(record.id)
        return {
            "id": record.id,
            "name": record.name,
            "workspace": record.workspace,
            "owner": record.owner,
            "model": record.model,
            "resolved_model": self.resolved_model(record.model),
            "policy": shown_policy(self.config, record).model_dump(mode="json"),
            "policy_overrides": record.policy_overrides,
            "created_at": record.created_at,
            "status": "running" if active is not None else "idle",
            "current_turn_id": active.id if active is not None else None,
            **self._agent_json(record),
            "dry_run": record.dry_run,
            "tokens_used": record.tokens_used,
        }

    def _agent_json(self, record: SessionRecord) -> dict[str, Any]:
        """The agent, profile and family of a session (specs/agents.md)."""
        return {
            "agent": record.agent,
            "profile": record.profile or DEFAULT_PROFILE,
            "parent_session_id": record.parent_session_id,
            "children": self.store.children_of(record.id),
        }

    def dispatch_session(self, record: SessionRecord) -> DispatchSession:
        """The dispatcher's view of a session, built on first use (also after a restart:
        approvals given "for the session" live in memory and start empty then)."""
        session = self._dispatch_sessions.get(record.id)
        if session is None:
            session = self._make_dispatch_session(record)
            self._dispatch_sessions[record.id] = session
        return session

    def tools(self, record: SessionRecord) -> list[ToolDefinition]:
        return self.dispatcher.definitions_for(self.dispatch_session(record))

    def messages(self, record: SessionRecord) -> list[MessageRecord]:
        return self.store.messages(record.id)


def _missing_provider_setting(provider: str) -> str | None:
    """The variable(s) a provider needs and the server lacks, or None."""
    # As captured at start-up: keys are removed from os.environ then.
    names = PROVIDER_SETTINGS.get(provider)
    if not names:
        return None
    env = process_environment()
    if any(env.get(name) for name in names):
        return None
    return " or ".join(names)
