"""Permission profiles: built-in tool sets, globs, policy layering, the
non-interactive ci profile, unknown names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dispatcher.pipeline.profiles import (
    ProfileConfig,
    UnknownProfile,
    profile_names,
    resolve_profile,
)
from dispatcher.policy import ConfirmMode, PolicyConfig, PolicyQuery, RulePolicy
from dispatcher.tool import CallRating
from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories
from protocol.canonical import SideEffects

ALL_TOOLS = [
    f().definition
    for f in [
        *builtin_tool_factories(shell_enabled=True, delete_enabled=True),
        *knowledge_tool_factories(memory_enabled=True),
    ]
]


def allowed(profile: str) -> set[str]:
    p = resolve_profile(profile)
    return {d.name for d in ALL_TOOLS if p.allows(d.name)}


def test_read_only_sees_only_tools_that_cannot_change_anything() -> None:
    names = allowed("read-only")
    assert {"read_file", "list_dir", "grep", "search_code", "git_diff", "find_symbol"} <= names
    by_name = {d.name: d for d in ALL_TOOLS}
    assert all(by_name[n].side_effects in (SideEffects.NONE, SideEffects.READ) for n in names)
    assert not names & {"write_file", "shell", "git_commit", "memory_add"}


def test_dev_edits_files_ci_runs_commands_full_has_everything() -> None:
    dev, ci, full = allowed("dev"), allowed("ci"), allowed("full")
    assert {"write_file", "patch_file", "apply_patch", "delete_file", "memory_add"} <= dev
    assert not dev & {"shell", "run_command", "git_commit"}
    assert {"shell", "run_command", "read_file"} <= ci and not ci & {"write_file", "git_commit"}
    assert full == {d.name for d in ALL_TOOLS}
    assert resolve_profile(None).name == "full"


def test_globs_select_tools() -> None:
    configured = {
        "reviewer": ProfileConfig.model_validate(
            {"tools": ["read_file", "search_*", "git_*", "mcp_github_*"]}
        )
    }
    p = resolve_profile("reviewer", configured)
    assert p.visible(["read_file", "search_code", "git_log", "mcp_github_get_issue", "shell",
                      "mcp_gitlab_x", "read_file2"]) == [
        "read_file", "search_code", "git_log", "mcp_github_get_issue"
    ]  # fmt: skip


def test_a_profile_policy_is_layered_over_the_servers() -> None:
    server = PolicyConfig.model_validate({"per_tool": {"grep": "deny"}})
    reviewer = resolve_profile(
        "reviewer",
        {"reviewer": ProfileConfig.model_validate({"policy": {"preset": "confirm-all"}})},
    )
    merged = reviewer.policy_for(server)
    assert merged.preset == "confirm-all" and merged.per_tool == {"grep": "deny"}
    assert resolve_profile("full").policy_for(server) is server
    read_only = RulePolicy(resolve_profile("read-only").policy_for(PolicyConfig()))
    query = PolicyQuery("anything", SideEffects.WRITE, None, "/ws")
    assert read_only.mode_for(query) is ConfirmMode.DENY


def test_ci_never_asks_it_runs_safe_and_dev_commands_and_refuses_the_rest() -> None:
    ci = resolve_profile("ci")
    policy = RulePolicy(ci.policy_for(PolicyConfig()))

    def final(rating: CallRating) -> ConfirmMode:
        mode = policy.mode_for(PolicyQuery("shell", SideEffects.EXECUTE, rating, "/ws"))
        return ci.settle(mode)

    assert final(CallRating.SAFE) is ConfirmMode.AUTO
    assert final(CallRating.DEV) is ConfirmMode.AUTO
    assert final(CallRating.DANGEROUS) is ConfirmMode.DENY
    assert ci.settle(ConfirmMode.PROMPT_ONCE) is ConfirmMode.DENY
    # An interactive profile leaves a prompt a prompt.
    assert resolve_profile("dev").settle(ConfirmMode.PROMPT) is ConfirmMode.PROMPT


def test_unknown_profiles_and_bad_entries_are_named() -> None:
    with pytest.raises(UnknownProfile, match=r"unknown profile 'nope'; known profiles: ci, dev"):
        resolve_profile("nope")
    assert profile_names({"mine": ProfileConfig()}) == ["ci", "dev", "full", "mine", "read-only"]
    with pytest.raises(ValidationError, match="tools"):
        ProfileConfig.model_validate({"tools": []})
    with pytest.raises(ValidationError, match=r"policy\.preset"):
        ProfileConfig.model_validate({"policy": {"preset": "lax"}})
