"""What the dispatcher keeps per session."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatcher.confirmations import RememberedAnswer
from dispatcher.policy import ConfirmationPolicy, RulePolicy
from dispatcher.sandbox import Sandbox
from dispatcher.workspace import WorkspaceFileAPI

DEFAULT_CONCURRENCY = 4
DEFAULT_CONFIRMATION_TIMEOUT = 300.0


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
    semaphore: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.semaphore = asyncio.Semaphore(self.max_concurrency)
