"""What the dispatcher keeps per session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.confirmations import RememberedAnswer
from dispatcher.pipeline.dry_run import PlannedAction
from dispatcher.pipeline.guardrails import Guardrails, TurnCounter
from dispatcher.pipeline.hooks import HookRunner
from dispatcher.pipeline.profiles import Profile
from dispatcher.policy import ConfirmationPolicy, ConfirmMode, RulePolicy
from dispatcher.sandbox import Sandbox
from dispatcher.tool import CallRating
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects

DEFAULT_CONCURRENCY = 4
DEFAULT_CONFIRMATION_TIMEOUT = 300.0

# What a decision is kept under: the tool, its class, the call's rating.
DecisionKey = tuple[str, SideEffects, CallRating | None]


@dataclass(slots=True)
class PolicyModes:
    """The policy's mode for a call (``mode_for`` and the sandbox floor) kept
    per (tool, class, rating), so a session's calls of one tool ask the
    policy once (benchmarks/dispatch_overhead.py shows the per-call query
    and floor as a share of a no-op call).

    Invalidation: the kept modes hold only for the policy object, the
    sandbox-or-not and the workspace object they were decided under; when
    any of the three is another (a session's policy replaced, its sandbox
    switched), ``get`` drops them all. A policy's ``mode_for`` must
    therefore answer the same query the same way for as long as it is the
    session's policy (ConfirmationPolicy says so). What depends on the call
    itself (unknown effects, the profile's ``settle``) is never kept.
    """

    policy: ConfirmationPolicy | None = None
    sandboxed: bool = False
    workspace: WorkspaceFileAPI | None = None
    modes: dict[DecisionKey, ConfirmMode] = field(default_factory=dict)

    def get(self, session: DispatchSession, key: DecisionKey) -> ConfirmMode | None:
        """The kept mode, or None (and every mode dropped if what they were
        decided under changed)."""
        sandboxed = session.sandbox is not None
        if (
            session.policy is not self.policy
            or sandboxed is not self.sandboxed
            or session.workspace is not self.workspace
        ):
            self.modes.clear()
            self.policy, self.sandboxed, self.workspace = (
                session.policy,
                sandboxed,
                session.workspace,
            )
            return None
        return self.modes.get(key)


@dataclass(slots=True)
class DispatchSession:
    """A session as the dispatcher sees it: workspace, policy, limits, memory of
    answers given ``for the session``."""

    session_id: str
    workspace: WorkspaceFileAPI
    policy: ConfirmationPolicy = field(default_factory=RulePolicy)
    max_concurrency: int = DEFAULT_CONCURRENCY
    confirmation_timeout: float = DEFAULT_CONFIRMATION_TIMEOUT
    # Tool groups this session must not see (e.g. memory tools for workers).
    hidden_groups: frozenset[str] = frozenset()
    # Per-tool options handed to each call's ToolContext.options.
    tool_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The sandbox every process of this session runs in; None when it is off
    # (then no execute-class call runs without a confirmation, yolo aside).
    sandbox: Sandbox | None = None
    # (tool name, grant key) -> remembered answer (scope "session", or a
    # prompt_once answer). The grant key is the tool's name for most tools;
    # the shell's are each command's program and subcommand (see GrantScope).
    remembered: dict[tuple[str, str], RememberedAnswer] = field(default_factory=dict)
    # -- the execution pipeline (specs/pipeline.md); None / empty: the stage is skipped.
    # Deterministic rules checked before hooks and confirmation.
    guardrails: Guardrails | None = None
    # pre_tool_use / post_tool_use hooks (and the server's other hook events).
    hooks: HookRunner | None = None
    # The permission profile: which tools are visible, and ``settle`` (a
    # non-interactive profile refuses what would ask).
    profile: Profile | None = None
    # An agent's tool list: a name it returns False for is neither advertised
    # nor callable (the call ends ``not_found``).
    tool_filter: Callable[[str], bool] | None = None
    # Every call of this session is a dry-run (a turn may also ask for one).
    dry_run: bool = False
    # turn_id -> actions a dry-run recorded; the server pops a turn's at its end.
    planned: dict[str, list[PlannedAction]] = field(default_factory=dict)
    # The running turns that are dry-runs (the server adds and removes them):
    # the hooks such a turn runs outside tool calls see the workspace read-only.
    dry_run_turns: set[str] = field(default_factory=set)
    # turn_id -> distinct paths modified (guardrails.max_files_modified);
    # dropped by ToolDispatcher.end_turn.
    turn_counters: dict[str, TurnCounter] = field(default_factory=dict)
    # The policy's decisions, kept per tool and rating (see PolicyModes).
    policy_modes: PolicyModes = field(default_factory=PolicyModes)
    semaphore: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.semaphore = asyncio.Semaphore(self.max_concurrency)
