"""What one session may see and run: its profile, its agent and, for a
sub-agent's worker session, its parent.

A session's **tool filter** admits a tool name when the session's profile
allows it, its agent's globs select it and (for a worker) its parent's
filter admits it too; a worker never sees ``dispatch_subagent``. The
dispatcher uses the filter both to list tools (what the model is offered,
``GET /sessions/{id}/tools``) and to look a call's tool up, so a hidden tool
is ``not_found`` (DispatchSession.tool_filter).

A session's **policy** (``SessionPolicy``) decides each call in this order:

1. a tool the filter hides: ``deny`` (a second wall behind the look-up);
2. the server's policy with the profile's policy and then the session's
   overrides layered over it (Profile.policy_for, PolicyConfig.merged);
3. for a worker: the stricter of that and its parent's decision, so a
   sub-agent is never allowed more than the session that started it;
4. the sandbox floor (an execute call outside the sandbox asks);
5. the profile's interactivity: a non-interactive profile (``ci``) refuses
   what would ask (Profile.settle), after every other rule.

``mode_for`` is steps 1-3: the dispatcher applies steps 4 and 5 itself
(``sandbox_floor``, then ``DispatchSession.profile.settle``), so its refusal
names the non-interactive profile; ``settled`` is all five (a parent's
decision, and the "only tightens" check, use it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from dispatcher.pipeline.profiles import (
    DEFAULT_PROFILE,
    Profile,
    ProfileConfig,
    UnknownProfile,
    resolve_profile,
)
from dispatcher.policy import (
    STRICTNESS,
    ConfirmMode,
    PolicyConfig,
    PolicyQuery,
    RulePolicy,
    loosened_calls,
    sandbox_floor,
)
from dispatcher.tools.agents import DISPATCH_SUBAGENT, SUBAGENT_GROUP
from server.agents import Agent, AgentConfig, UnknownAgent, resolve_agent
from server.errors import Forbidden, InvalidRequest
from server.store import SessionRecord

# How deep parents are followed; workers cannot dispatch, so 2 is the real depth.
MAX_DEPTH = 4

ToolFilter = Callable[[str], bool]


class SessionPolicy:
    """The confirmation policy of one session; see the module docstring."""

    def __init__(
        self,
        base: RulePolicy,
        *,
        profile: Profile,
        visible: ToolFilter,
        parent: SessionPolicy | None = None,
        sandboxed: bool,
    ) -> None:
        self.base = base
        self.profile = profile
        self.visible = visible
        self.parent = parent
        self.sandboxed = sandboxed

    @property
    def config(self) -> PolicyConfig:
        """The layered policy configuration (the profile's over the server's)."""
        return self.base.config

    @property
    def runs_everything(self) -> bool:
        # Only when every layer chose to run everything (the yolo preset).
        parent_runs = self.parent is None or bool(getattr(self.parent, "runs_everything", False))
        return self.base.runs_everything and parent_runs and self.profile.interactive

    def mode_for(self, query: PolicyQuery) -> ConfirmMode:
        """Steps 1-3: what the dispatcher asks. It applies the sandbox floor
        and the profile's ``settle`` itself (DispatchSession.profile), so a
        refusal there names the non-interactive profile."""
        if not self.visible(query.tool_name):
            return ConfirmMode.DENY
        mode = self.base.mode_for(query)
        if self.parent is not None:
            # The parent's final word, its own floor and interactivity included.
            theirs = self.parent.settled(query)
            if STRICTNESS[theirs] > STRICTNESS[mode]:
                mode = theirs
        return mode

    def settled(self, query: PolicyQuery) -> ConfirmMode:
        """Steps 1-5: the final mode of a call in this session."""
        mode = sandbox_floor(
            self.mode_for(query), query.side_effects, sandboxed=self.sandboxed, policy=self
        )
        return self.profile.settle(mode)


class _Settled:
    """A SessionPolicy seen through its final modes (for comparisons)."""

    def __init__(self, policy: SessionPolicy) -> None:
        self.policy = policy

    @property
    def runs_everything(self) -> bool:
        # Seen by loosened_calls: lifting the sandbox floor is a loosening too.
        return self.policy.runs_everything

    def mode_for(self, query: PolicyQuery) -> ConfirmMode:
        return self.policy.settled(query)


@dataclass(frozen=True, slots=True)
class SessionAccess:
    """A session's agent, profile, tool filter, policy and hidden tool groups."""

    agent: Agent | None
    profile: Profile
    tool_filter: ToolFilter
    policy: SessionPolicy
    hidden_groups: frozenset[str]


class AccessConfig(Protocol):
    """The configuration sections access is decided from (a ``Config`` is one)."""

    @property
    def agents(self) -> Mapping[str, AgentConfig]: ...
    @property
    def profiles(self) -> Mapping[str, ProfileConfig]: ...
    @property
    def policy(self) -> PolicyConfig: ...


def chosen_agent(config: AccessConfig, name: str | None) -> Agent:
    """The agent a request names (None: ``build``); 422 naming the known ones."""
    try:
        return resolve_agent(name, config.agents)
    except UnknownAgent as exc:
        raise InvalidRequest(str(exc), field="agent") from None


def chosen_profile(config: AccessConfig, name: str | None) -> Profile:
    """The profile a request names; 422 naming the known ones."""
    try:
        return resolve_profile(name, config.profiles)
    except UnknownProfile as exc:
        raise InvalidRequest(str(exc), field="profile") from None


def access_for(
    config: AccessConfig,
    record: SessionRecord,
    *,
    sandboxed: bool,
    parent: SessionAccess | None = None,
) -> SessionAccess:
    """The access of a stored session. A session stored before sessions had
    agents (``agent`` None) runs as before: every tool of the ``full``
    profile (or of its stored profile)."""
    agent = resolve_agent(record.agent, config.agents) if record.agent is not None else None
    profile = resolve_profile(record.profile, config.profiles)
    worker = record.parent_session_id is not None

    def tool_filter(name: str) -> bool:
        if worker and name == DISPATCH_SUBAGENT:
            return False
        if not profile.allows(name):
            return False
        if agent is not None and not agent.allows(name):
            return False
        return parent is None or parent.tool_filter(name)

    base = RulePolicy(effective_policy_config(config, profile, record))
    policy = SessionPolicy(
        base,
        profile=profile,
        visible=tool_filter,
        parent=parent.policy if parent is not None else None,
        sandboxed=sandboxed,
    )
    hidden = frozenset({SUBAGENT_GROUP}) if worker else frozenset()
    return SessionAccess(agent, profile, tool_filter, policy, hidden)


def effective_policy_config(
    config: AccessConfig, profile: Profile, record: SessionRecord
) -> PolicyConfig:
    """The policy configuration of a session: the server's, the profile's
    layered over it, the session's own overrides last (checked at creation:
    a user token's only tighten)."""
    return profile.policy_for(config.policy).merged(record.policy_overrides)


def shown_policy(config: AccessConfig, record: SessionRecord) -> PolicyConfig:
    """The policy configuration ``GET /sessions/{id}`` shows; the server's
    with the overrides when the stored profile left the configuration."""
    try:
        profile = resolve_profile(record.profile, config.profiles)
    except UnknownProfile:
        return config.policy.merged(record.policy_overrides)
    return effective_policy_config(config, profile, record)


def access_with_parents(
    config: AccessConfig,
    record: SessionRecord,
    *,
    sandboxed: bool,
    get_session: Callable[[str], SessionRecord | None],
) -> SessionAccess:
    """``access_for`` with the chain of parents resolved through ``get_session``.

    A worker outlives a deleted parent (its owner may still start turns on
    it), and its own profile may be looser than the server's policy (``test``
    runs as ``ci``, which a user token may not pick): so a parent that is
    gone is stood in for by a session of the server's policy as it is
    (profile ``full``, no overrides), and the worker stays bounded by that."""
    chain = [record]
    while chain[-1].parent_session_id is not None and len(chain) < MAX_DEPTH:
        parent = get_session(chain[-1].parent_session_id)
        if parent is None:
            gone = chain[-1]
            parent = SessionRecord(
                id=str(gone.parent_session_id),
                workspace=gone.workspace,
                owner=gone.owner,
                profile=DEFAULT_PROFILE,
            )
        chain.append(parent)
    access: SessionAccess | None = None
    for item in reversed(chain):
        access = access_for(config, item, sandboxed=sandboxed, parent=access)
    assert access is not None
    return access


def check_profile_only_tightens(
    config: AccessConfig,
    access: SessionAccess,
    *,
    tool_names: list[str],
    workspace: str,
) -> None:
    """Forbidden unless ``access`` (a session a user token asks for: its
    profile, its agent's tools, its policy overrides) is at least as strict
    as the server's policy for every call: a user token may pick a tighter
    profile, never a looser one."""
    loosened = loosened_calls(
        RulePolicy(config.policy),
        _Settled(access.policy),
        tool_names=tool_names,
        workspace=workspace,
    )
    if loosened:
        shown = "; ".join(loosened[:5]) + (" ..." if len(loosened) > 5 else "")
        agent = f" (agent {access.agent.name!r})" if access.agent is not None else ""
        raise Forbidden(
            f"profile {access.profile.name!r}{agent} is looser than the server's policy, and a "
            f"user token may only pick a profile that tightens it; these calls would be "
            f"loosened: {shown}",
            field="profile",
        )
