"""Builds the dispatcher's view of a session (a ``DispatchSession``).

One factory, made by the server's services (server/runtime.py) from the
configuration, the sandbox decided at start-up, the memory store and the
event publisher; the session registry calls it the first time a session is
used (also after a restart). It opens the workspace, builds the session's
sandbox and policy, and hands each tool its configuration section as
``tool_options`` keyed by section name (``shell``, ``memory``): the tools say
which section they read (``options_section``), the server names no tool.

The sandbox of a session owned by a ``user`` token is isolated
(``isolation_for``): it hides every allowed root that is not this token's
(other tokens' ``allowed_roots``, and ``workspaces.allowed_roots`` not
containing the workspace) and, read at each spawn, every other session's
workspace. Admin tokens' sessions see the host as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from dispatcher import DispatchSession, WorkspaceFileAPI
from dispatcher.memory import MemoryService
from dispatcher.pipeline.guardrails import GuardrailConfig, Guardrails
from dispatcher.pipeline.hooks import HookRunner, HooksConfig
from dispatcher.pipeline.profiles import UnknownProfile
from dispatcher.publisher import EventPublisher
from dispatcher.sandbox import Isolation, Sandbox, SandboxConfig, SandboxUnavailable
from dispatcher.tools.agents import AGENTS_SECTION, SubagentRunner
from server.agents import UnknownAgent
from server.auth import GENERATED_TOKEN_NAME
from server.config import AuthSection, DispatcherSection, WorkspacesSection
from server.errors import Conflict
from server.memory_service import memory_section
from server.roots import Protected, is_within, real
from server.session_access import AccessConfig, SessionAccess, access_with_parents
from server.store import SessionRecord

SHELL_SECTION = "shell"


class FactoryConfig(AccessConfig, Protocol):
    """The configuration sections a session's dispatcher view is built from
    (a ``Config`` is one)."""

    @property
    def guardrails(self) -> GuardrailConfig: ...
    @property
    def hooks(self) -> HooksConfig: ...
    @property
    def workspaces(self) -> WorkspacesSection: ...
    @property
    def auth(self) -> AuthSection: ...
    @property
    def dispatcher(self) -> DispatcherSection: ...
    @property
    def confirmation_timeout(self) -> float: ...
    @property
    def protected(self) -> Protected: ...


class DispatchSessionFactory:
    """Makes a session's DispatchSession; see the module docstring."""

    def __init__(
        self,
        config: FactoryConfig,
        *,
        sandbox_config: SandboxConfig | None,
        memory_store: MemoryService | None,
        publisher: EventPublisher,
        subagent_runner: SubagentRunner | None = None,
        get_session: Callable[[str], SessionRecord | None] | None = None,
        live_workspaces: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        # Every live session's workspace, read at each spawn of a user
        # token's sandbox (isolation); None: no session is hidden.
        self.live_workspaces = live_workspaces
        # dispatch_subagent's runner (server/subagents.py), handed to the tool
        # in the ``agents`` options section; None: no sub-agents.
        self.subagent_runner = subagent_runner
        # Finds a worker's parent, whose access bounds the worker's.
        self.get_session = get_session
        self.config = config
        self.sandbox_config = sandbox_config  # None: the sandbox is off
        self.memory_store = memory_store
        self.publisher = publisher
        # The execution pipeline's parts, compiled once and shared by every
        # session (they hold no per-session state); the runner publishes
        # every hook.completed.
        self.guardrails = Guardrails(config.guardrails)
        self.hooks = HookRunner(config.hooks, publisher=publisher)

    def __call__(self, record: SessionRecord) -> DispatchSession:
        """A new DispatchSession for ``record``; Conflict when its workspace
        cannot be used any more (protected, gone, or hidden from the sandbox)."""
        cfg = self.config
        problem = cfg.protected.overlap(real(record.workspace))
        if problem is not None:
            # Stored before the protected paths were enforced: it gets no dispatcher.
            raise Conflict(
                f"session {record.id!r} cannot run: its workspace {record.workspace!r} "
                f"is not allowed: {problem}",
                code="workspace_forbidden",
            )
        try:
            workspace = WorkspaceFileAPI(record.workspace, allow_delete=cfg.workspaces.allow_delete)
        except NotADirectoryError:
            raise Conflict(
                f"the workspace {record.workspace!r} of session {record.id!r} no longer exists",
                code="workspace_missing",
            ) from None
        sandbox = None
        if self.sandbox_config is not None:
            try:
                sandbox = Sandbox(
                    self.sandbox_config,
                    workspace.workspace_root,
                    isolation=self.isolation_for(record.owner, workspace.workspace_root),
                )
            except SandboxUnavailable as exc:
                # The workspace contains or lies in a hidden path (a
                # credential folder): no sandbox could run there unexposed.
                raise Conflict(str(exc), code="workspace_hidden") from None
        # Its agent, profile and parent (server/session_access.py).
        access = self.access(record, sandboxed=sandbox is not None)
        return DispatchSession(
            session_id=record.id,
            workspace=workspace,
            # Its profile and stored overrides were checked when it was created.
            policy=access.policy,
            profile=access.profile,
            tool_filter=access.tool_filter,
            hidden_groups=access.hidden_groups,
            max_concurrency=cfg.dispatcher.max_concurrency,
            confirmation_timeout=cfg.confirmation_timeout,
            tool_options=self.tool_options(record, workspace.workspace_root, access),
            sandbox=sandbox,
            dry_run=record.dry_run,
            guardrails=self.guardrails,
            hooks=self.hooks,
        )

    def isolation_for(self, owner: str, workspace_root: str) -> Isolation | None:
        """What the sandbox of ``owner``'s session hides (see the module
        docstring); None for an admin token. A token no longer configured
        counts as a user (isolated): only a known admin sees everything."""
        cfg = self.config
        token = next((t for t in cfg.auth.tokens if t.name == owner), None)
        admin = token.role == "admin" if token is not None else owner == GENERATED_TOKEN_NAME
        if admin:
            return None
        own = {real(r) for r in token.allowed_roots} if token is not None else set()
        common = [real(r) for r in cfg.workspaces.allowed_roots]
        others = [real(r) for t in cfg.auth.tokens if t.name != owner for r in t.allowed_roots]
        kept = own | {r for r in common if is_within(workspace_root, r)}
        roots = dict.fromkeys(r for r in (*others, *common) if r not in kept)
        return Isolation(roots=tuple(roots), live_workspaces=self.live_workspaces)

    def access(self, record: SessionRecord, *, sandboxed: bool) -> SessionAccess:
        """What the session may see and run (server/session_access.py);
        Conflict when its stored agent or profile is no longer configured."""
        try:
            return access_with_parents(
                self.config,
                record,
                sandboxed=sandboxed,
                get_session=self.get_session or (lambda _: None),
            )
        except (UnknownAgent, UnknownProfile) as exc:
            raise Conflict(
                f"session {record.id!r} cannot run: {exc}", code="agent_unavailable"
            ) from None

    def tool_options(
        self, record: SessionRecord, workspace: str, access: SessionAccess | None = None
    ) -> dict[str, Mapping[str, Any]]:
        """The configuration sections a session's tools read, by section name."""
        shell = self.config.workspaces.shell
        agent = access.agent if access is not None else None
        # An agent may make the shell refuse dangerous commands (test).
        allowed_only = shell.allowed_only or (
            agent is not None and agent.config.refuse_dangerous_commands
        )
        sections: dict[str, Mapping[str, Any]] = {
            SHELL_SECTION: {"allowed_only": allowed_only, "timeout": shell.timeout},
            **memory_section(
                self.memory_store,
                session_id=record.id,
                workspace=workspace,
                owner=record.owner,
                publisher=self.publisher,
            ),
        }
        if self.subagent_runner is not None and record.parent_session_id is None:
            sections[AGENTS_SECTION] = {"runner": self.subagent_runner}
        return sections
