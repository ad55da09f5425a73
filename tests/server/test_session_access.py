"""What a session may see and run: profile, agent and parent (server/session_access.py)."""

from __future__ import annotations

import pytest

from dispatcher.policy import ConfirmMode, PolicyQuery
from dispatcher.tool import CallRating
from protocol.canonical import SideEffects
from server.agents import BUILD_PROMPT, EDITING_HIERARCHY, resolve_agent, subagent_types
from server.config import Config
from server.errors import Forbidden, InvalidRequest
from server.session_access import (
    access_for,
    access_with_parents,
    check_profile_only_tightens,
    chosen_agent,
    chosen_profile,
)
from server.store import SessionRecord

TOOLS = [
    "read_file",
    "write_file",
    "patch_file",
    "apply_patch",
    "shell",
    "git_diff",
    "git_commit",
    "find_symbol",
    "dispatch_subagent",
    "memory_add",
]


def record(
    sid: str, *, agent: str | None, profile: str | None, parent: str | None = None, **policy: object
) -> SessionRecord:
    return SessionRecord(
        id=sid,
        workspace="/w",
        owner="alice",
        agent=agent,
        profile=profile,
        parent_session_id=parent,
        policy_overrides=dict(policy),
    )


def query(tool: str, effect: SideEffects, rating: CallRating | None = None) -> PolicyQuery:
    return PolicyQuery(tool, effect, rating, "/w")


def test_visibility_is_profile_and_agent_and_parent() -> None:
    config = Config()
    build = access_for(config, record("p", agent="build", profile="full"), sandboxed=True)
    assert [t for t in TOOLS if build.tool_filter(t)] == TOOLS
    plan = access_for(config, record("q", agent="plan", profile="read-only"), sandboxed=True)
    assert [t for t in TOOLS if plan.tool_filter(t)] == ["read_file", "git_diff", "find_symbol"]
    # An explorer under the build parent: its own list; never dispatch_subagent.
    child = record("c", agent="explore", profile="read-only", parent="p")
    explore = access_for(config, child, sandboxed=True, parent=build)
    assert [t for t in TOOLS if explore.tool_filter(t)] == ["read_file", "find_symbol"]
    assert explore.hidden_groups == frozenset({"subagents"})
    # A tester under a plan parent: the parent's list bounds it (no shell).
    tester = access_for(
        config, record("t", agent="test", profile="ci", parent="q"), sandboxed=True, parent=plan
    )
    assert [t for t in TOOLS if tester.tool_filter(t)] == ["read_file"]
    assert tester.policy.mode_for(query("shell", SideEffects.EXECUTE)) is ConfirmMode.DENY


def test_a_worker_is_never_allowed_more_than_its_parent() -> None:
    config = Config()
    parents = {"p": record("p", agent="build", profile="full", per_tool={"read_file": "prompt"})}
    child = record("c", agent="explore", profile="read-only", parent="p")
    access = access_with_parents(config, child, sandboxed=True, get_session=parents.get)
    assert access.policy.mode_for(query("read_file", SideEffects.READ)) is ConfirmMode.PROMPT
    assert access.policy.mode_for(query("write_file", SideEffects.WRITE)) is ConfirmMode.DENY


def test_the_ci_profile_refuses_what_would_ask() -> None:
    config = Config()
    tester = access_for(config, record("t", agent="test", profile="ci"), sandboxed=True)
    shell = tester.policy
    assert shell.settled(query("shell", SideEffects.EXECUTE, CallRating.DEV)) is ConfirmMode.AUTO
    dangerous = query("shell", SideEffects.EXECUTE, CallRating.DANGEROUS)
    # The dispatcher settles the prompt itself (naming the profile) ...
    assert shell.mode_for(dangerous) is ConfirmMode.PROMPT
    assert shell.settled(dangerous) is ConfirmMode.DENY
    # Outside a sandbox the floor would ask; nobody is there, so it is refused.
    bare = access_for(config, record("t", agent="test", profile="ci"), sandboxed=False)
    assert bare.policy.settled(query("shell", SideEffects.EXECUTE, CallRating.SAFE)) is (
        ConfirmMode.DENY
    )


def test_a_user_token_may_only_tighten() -> None:
    config = Config.model_validate({"profiles": {"loose": {"policy": {"preset": "yolo"}}}})
    tight = access_for(config, record("a", agent="build", profile="read-only"), sandboxed=True)
    check_profile_only_tightens(config, tight, tool_names=TOOLS, workspace="/w")
    loose = access_for(config, record("b", agent="build", profile="loose"), sandboxed=True)
    with pytest.raises(Forbidden, match=r"profile 'loose'.*prompt -> auto"):
        check_profile_only_tightens(config, loose, tool_names=TOOLS, workspace="/w")


def test_unknown_names_list_the_known_ones() -> None:
    config = Config()
    with pytest.raises(InvalidRequest, match="known agents: build, explore, plan, review, test"):
        chosen_agent(config, "wizard")
    with pytest.raises(InvalidRequest, match="known profiles: ci, dev, full, read-only"):
        chosen_profile(config, "god")
    assert subagent_types() == ["explore", "review", "test"]


def test_prompts() -> None:
    assert EDITING_HIERARCHY in BUILD_PROMPT
    build = resolve_agent("build")
    assert build.system_prompt("/w", memories=["use uv"]).endswith("- use uv")
    assert build.system_prompt("/w", server_prompt="Mine: {workspace}") == "Mine: /w"
    assert "/w" in resolve_agent("explore").system_prompt("/w", server_prompt="ignored")
