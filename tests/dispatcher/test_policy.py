"""The layered confirmation policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher import CallRating, ConfirmMode, PolicyConfig, PolicyQuery, RulePolicy
from dispatcher.policy import AutoAllowPolicy, sandbox_floor
from protocol.canonical import SideEffects

E = SideEffects


def q(
    effect: SideEffects, *, tool: str = "t", rating: CallRating | None = None, ws: str = "/w"
) -> PolicyQuery:
    return PolicyQuery(tool, effect, rating, ws)


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("confirm-sensitive", ["auto", "auto", "prompt", "prompt", "prompt"]),
        ("confirm-all", ["prompt"] * 5),
        ("yolo", ["auto"] * 5),
    ],
)
def test_presets(preset: str, expected: list[str]) -> None:
    policy = RulePolicy(PolicyConfig(preset=preset))  # type: ignore[arg-type]
    effects = [E.NONE, E.READ, E.WRITE, E.EXECUTE, E.NETWORK]
    assert [policy.mode_for(q(e)).value for e in effects] == expected


def test_ratings_follow_the_seed_table() -> None:
    sensitive = RulePolicy(PolicyConfig())
    assert sensitive.mode_for(q(E.EXECUTE, rating=CallRating.SAFE)) is ConfirmMode.AUTO
    assert sensitive.mode_for(q(E.EXECUTE, rating=CallRating.DEV)) is ConfirmMode.PROMPT
    assert sensitive.mode_for(q(E.EXECUTE, rating=CallRating.DANGEROUS)) is ConfirmMode.PROMPT
    every = RulePolicy(PolicyConfig(preset="confirm-all"))
    assert every.mode_for(q(E.EXECUTE, rating=CallRating.SAFE)) is ConfirmMode.PROMPT


def test_rating_never_lifts_a_deny() -> None:
    policy = RulePolicy(PolicyConfig(default={E.EXECUTE: ConfirmMode.DENY}))
    assert policy.mode_for(q(E.EXECUTE, rating=CallRating.SAFE)) is ConfirmMode.DENY


def test_per_tool_has_the_last_word() -> None:
    policy = RulePolicy(
        PolicyConfig(
            preset="yolo", per_tool={"git_status": ConfirmMode.PROMPT, "rm": ConfirmMode.DENY}
        )
    )
    assert policy.mode_for(q(E.READ, tool="git_status")) is ConfirmMode.PROMPT
    assert policy.mode_for(q(E.WRITE, tool="rm")) is ConfirmMode.DENY
    assert policy.mode_for(q(E.WRITE, tool="other")) is ConfirmMode.AUTO


def test_trusted_workspaces_lower_the_bar_but_keep_overrides(tmp_path: Path) -> None:
    trusted = tmp_path / "trusted"
    (trusted / "sub").mkdir(parents=True)
    policy = RulePolicy(
        PolicyConfig(
            trusted_workspaces=[str(trusted)],
            trusted_workspace_overrides={E.WRITE: ConfirmMode.AUTO, E.EXECUTE: ConfirmMode.PROMPT},
        )
    )
    assert policy.mode_for(q(E.WRITE, ws=str(trusted / "sub"))) is ConfirmMode.AUTO
    assert policy.mode_for(q(E.EXECUTE, ws=str(trusted))) is ConfirmMode.PROMPT
    assert policy.mode_for(q(E.WRITE, ws=str(tmp_path / "trusted-not"))) is ConfirmMode.PROMPT


def test_merged_overrides_and_bad_values() -> None:
    base = PolicyConfig(per_tool={"a": ConfirmMode.AUTO})
    merged = base.merged({"per_tool": {"b": "deny"}, "preset": "confirm-all"})
    assert merged.per_tool == {"a": ConfirmMode.AUTO, "b": ConfirmMode.DENY}
    assert merged.preset == "confirm-all"
    with pytest.raises(ValueError, match="preset"):
        base.merged({"preset": "reckless"})
    with pytest.raises(ValueError, match="unknown_key"):
        base.merged({"unknown_key": 1})


def test_loosened_calls_finds_every_loosening_and_accepts_tightening() -> None:
    from dispatcher.policy import loosened_calls

    base = RulePolicy(PolicyConfig())
    tighter = RulePolicy(PolicyConfig(preset="confirm-all", per_tool={"shell": ConfirmMode.DENY}))
    assert loosened_calls(base, tighter, tool_names=["shell"], workspace="/w") == []
    yolo = RulePolicy(PolicyConfig(preset="yolo"))
    found = loosened_calls(base, yolo, tool_names=["shell"], workspace="/w")
    assert "shell (write): prompt -> auto" in found
    assert "<any other tool> (execute, rated dangerous): prompt -> auto" in found
    # A per-tool auto loosens that tool only; a rating-only change is caught too.
    one = RulePolicy(PolicyConfig(per_tool={"write_file": ConfirmMode.AUTO}))
    found = loosened_calls(base, one, tool_names=["write_file", "shell"], workspace="/w")
    assert found and all(line.startswith("write_file ") for line in found)
    rated = RulePolicy(PolicyConfig(ratings={CallRating.DEV: ConfirmMode.AUTO}))
    found = loosened_calls(base, rated, tool_names=[], workspace="/w")
    assert found == [
        f"<any other tool> ({e}, rated dev): prompt -> auto"
        for e in ("write", "execute", "network")
    ]


@pytest.mark.parametrize("mode", list(ConfirmMode))
@pytest.mark.parametrize("effect", list(SideEffects))
def test_the_sandbox_floor(mode: ConfirmMode, effect: SideEffects) -> None:
    """Outside a sandbox an execute-class call is at least PROMPT; nothing
    else moves, and the floor never lowers a mode."""
    policy = RulePolicy()
    boxed = sandbox_floor(mode, effect, sandboxed=True, policy=policy)
    bare = sandbox_floor(mode, effect, sandboxed=False, policy=policy)
    assert boxed is mode
    if effect is SideEffects.EXECUTE and mode in (ConfirmMode.AUTO, ConfirmMode.PROMPT_ONCE):
        assert bare is ConfirmMode.PROMPT
    else:
        assert bare is mode


def test_only_the_explicit_run_everything_choice_skips_the_floor() -> None:
    auto, execute = ConfirmMode.AUTO, SideEffects.EXECUTE
    yolo = RulePolicy(PolicyConfig(preset="yolo"))
    assert sandbox_floor(auto, execute, sandboxed=False, policy=yolo) is auto
    assert sandbox_floor(auto, execute, sandboxed=False, policy=AutoAllowPolicy()) is auto
    loose = RulePolicy(PolicyConfig(per_tool={"shell": ConfirmMode.AUTO}))
    assert sandbox_floor(auto, execute, sandboxed=False, policy=loose) is ConfirmMode.PROMPT
