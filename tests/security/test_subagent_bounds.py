"""Property: a sub-agent never gets more than the session that started it.

For every parent profile (built in, plus an admin's loose one) and every
sub-agent type, over every registered-looking tool name, side-effect class
and rating: the worker sees no tool its parent cannot see, never sees
``dispatch_subagent`` (no recursion), and its final mode for each call is at
least as strict as the parent's. A read-only parent's worker can neither
write nor run anything. Pure computation over server/session_access.py.
"""

from __future__ import annotations

import itertools

import pytest

from dispatcher.policy import STRICTNESS, ConfirmMode, PolicyQuery
from dispatcher.tool import CallRating
from protocol.canonical import SideEffects
from server.agents import resolve_agent, subagent_types
from server.config import Config
from server.session_access import access_for, access_with_parents
from server.store import SessionRecord

TOOLS = [
    "read_file",
    "write_file",
    "patch_file",
    "apply_patch",
    "delete_file",
    "shell",
    "run_command",
    "git_commit",
    "git_diff",
    "memory_add",
    "dispatch_subagent",
    "mcp_any_tool",
]
CONFIG = Config.model_validate(
    {"profiles": {"loose": {"policy": {"preset": "yolo"}}}, "policy": {"preset": "confirm-all"}}
)
PARENT_PROFILES = ["read-only", "dev", "ci", "full", "loose"]


def _sessions(profile: str, agent_type: str) -> dict[str, SessionRecord]:
    """The parent (a build session with ``profile``) and its worker, as the
    sub-agent service stores it: the agent type's own profile."""
    parent = SessionRecord(id="p", workspace="/w", owner="u", agent="build", profile=profile)
    child = SessionRecord(
        id="c",
        workspace="/w",
        owner="u",
        agent=agent_type,
        profile=resolve_agent(agent_type, CONFIG.agents).profile,
        parent_session_id="p",
    )
    return {"p": parent, "c": child}


@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize("agent_type", subagent_types(CONFIG.agents))
@pytest.mark.parametrize("profile", PARENT_PROFILES)
def test_a_worker_is_bounded_by_its_parent(profile: str, agent_type: str, sandboxed: bool) -> None:
    records = _sessions(profile, agent_type)
    parent = access_with_parents(CONFIG, records["p"], sandboxed=sandboxed, get_session=records.get)
    child = access_with_parents(CONFIG, records["c"], sandboxed=sandboxed, get_session=records.get)
    assert not child.tool_filter("dispatch_subagent")
    for tool in TOOLS:
        if child.tool_filter(tool):
            assert parent.tool_filter(tool), (tool, "visible to the worker only")
    ratings: list[CallRating | None] = [None, *CallRating]
    for tool, effect, rating in itertools.product(TOOLS, SideEffects, ratings):
        q = PolicyQuery(tool, effect, rating, "/w")
        theirs, mine = parent.policy.settled(q), child.policy.settled(q)
        assert STRICTNESS[mine] >= STRICTNESS[theirs], (tool, effect, rating, theirs, mine)
        if profile == "read-only" and effect in (SideEffects.WRITE, SideEffects.EXECUTE):
            assert mine is ConfirmMode.DENY, (tool, effect, rating, mine)
    if profile == "read-only":
        writers = {"write_file", "patch_file", "apply_patch", "delete_file", "shell"}
        assert not any(child.tool_filter(t) for t in writers | {"run_command", "git_commit"})


@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize("agent_type", subagent_types(Config().agents))
def test_a_worker_whose_parent_is_gone_is_bounded_by_the_servers_policy(
    agent_type: str, sandboxed: bool
) -> None:
    # A worker outlives a deleted parent and its owner may drive it directly:
    # its own profile (`test` runs as `ci`) must not become reachable unbounded.
    config = Config()
    records = _sessions("full", agent_type)
    del records["p"]
    orphan = access_with_parents(config, records["c"], sandboxed=sandboxed, get_session=records.get)
    server = access_for(
        config,
        SessionRecord(id="s", workspace="/w", owner="u", profile="full"),
        sandboxed=sandboxed,
    )
    assert not orphan.tool_filter("dispatch_subagent")
    ratings: list[CallRating | None] = [None, *CallRating]
    for tool, effect, rating in itertools.product(TOOLS, SideEffects, ratings):
        q = PolicyQuery(tool, effect, rating, "/w")
        theirs, mine = server.policy.settled(q), orphan.policy.settled(q)
        assert STRICTNESS[mine] >= STRICTNESS[theirs], (tool, effect, rating, theirs, mine)
