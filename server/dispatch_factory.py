"""Builds the dispatcher's view of a session (a ``DispatchSession``).

One factory, made by the server's services (server/runtime.py) from the
configuration, the sandbox decided at start-up, the memory store and the
event publisher; the session registry calls it the first time a session is
used (also after a restart). It opens the workspace, builds the session's
sandbox and policy, and hands each tool its configuration section as
``tool_options`` keyed by section name (``shell``, ``memory``): the tools say
which section they read (``options_section``), the server names no tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher import DispatchSession, RulePolicy, WorkspaceFileAPI
from dispatcher.publisher import EventPublisher
from dispatcher.sandbox import Sandbox, SandboxConfig, SandboxUnavailable
from dispatcher.tools.knowledge.store import MemoryStore
from server.config import Config
from server.errors import Conflict
from server.memory_service import memory_section
from server.roots import protected_overlap, real
from server.store import SessionRecord

SHELL_SECTION = "shell"


class DispatchSessionFactory:
    """Makes a session's DispatchSession; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        sandbox_config: SandboxConfig | None,
        memory_store: MemoryStore | None,
        publisher: EventPublisher,
    ) -> None:
        self.config = config
        self.sandbox_config = sandbox_config  # None: the sandbox is off
        self.memory_store = memory_store
        self.publisher = publisher

    def __call__(self, record: SessionRecord) -> DispatchSession:
        """A new DispatchSession for ``record``; Conflict when its workspace
        cannot be used any more (protected, gone, or hidden from the sandbox)."""
        cfg = self.config
        problem = protected_overlap(real(record.workspace), cfg)
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
                sandbox = Sandbox(self.sandbox_config, workspace.workspace_root)
            except SandboxUnavailable as exc:
                # The workspace contains or lies in a hidden path (a
                # credential folder): no sandbox could run there unexposed.
                raise Conflict(str(exc), code="workspace_hidden") from None
        return DispatchSession(
            session_id=record.id,
            workspace=workspace,
            # Stored overrides were checked when the session was created.
            policy=RulePolicy(cfg.policy.merged(record.policy_overrides)),
            max_concurrency=cfg.dispatcher.max_concurrency,
            confirmation_timeout=cfg.confirmation_timeout,
            tool_options=self.tool_options(record, workspace.workspace_root),
            sandbox=sandbox,
        )

    def tool_options(self, record: SessionRecord, workspace: str) -> dict[str, Mapping[str, Any]]:
        """The configuration sections a session's tools read, by section name."""
        shell = self.config.workspaces.shell
        sections: dict[str, Mapping[str, Any]] = {
            SHELL_SECTION: {"allowed_only": shell.allowed_only, "timeout": shell.timeout},
            **memory_section(
                self.memory_store,
                session_id=record.id,
                workspace=workspace,
                owner=record.owner,
                publisher=self.publisher,
            ),
        }
        return sections
