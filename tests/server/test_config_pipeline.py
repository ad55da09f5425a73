"""The execution pipeline's sections in the configuration file:
guardrails, hooks, profiles, limits; errors name the offending key."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.pipeline.guardrails import Guardrails
from dispatcher.pipeline.hooks import HookEvent
from dispatcher.pipeline.profiles import resolve_profile
from dispatcher.tool import ToolEffects
from server.config import ConfigInvalid, load_config

TEAM = """
guardrails:
  protected_files: [".env", "secrets/**"]
  blocked_commands: ["git push --force"]
  max_lines_changed: 500
  max_files_modified: 20
  code_rules:
    - {pattern: "eval\\\\(", message: "no eval", severity: block}
  quality_gates:
    - {name: tests, command: "pytest -q", required: true, timeout: 300}
hooks:
  post_tool_use:
    - name: python-lint
      command: "ruff check {file} --no-fix"
      matcher: "write_file|patch_file|apply_patch"
      file_patterns: ["*.py"]
      timeout: 15
profiles:
  reviewer:
    tools: ["read_file", "list_dir", "search_*", "git_diff"]
    policy: {preset: confirm-all}
limits: {max_tokens: 200000}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_design_example_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, TEAM), env={})
    rails = Guardrails(config.guardrails)
    assert (
        rails.check(
            ToolEffects(writes=("app/.env",))
        ).blocked_by
        == "protected_files"
    )
    assert rails.quality_gates[0].name == "tests"
    assert [h.name for h in config.hooks.for_event(HookEvent.POST_TOOL_USE)] == ["python-lint"]
    reviewer = resolve_profile("reviewer", config.profiles)
    assert reviewer.allows("search_code") and not reviewer.allows("write_file")
    assert reviewer.policy_for(config.policy).preset == "confirm-all"
    assert config.limits.max_tokens == 200000 and config.limits.warning_at() == 160000


def test_defaults_are_empty_and_loosen_nothing() -> None:
    config = load_config(None, env={})
    assert config.guardrails.protected_files == [] and config.guardrails.max_lines_changed is None
    assert config.hooks.for_event(HookEvent.PRE_TOOL_USE) == []
    assert config.profiles == {} and config.limits.max_tokens is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("guardrails:\n  blocked_commands: ['(']\n", "guardrails.blocked_commands: Value error, "
         "blocked command '(' is not a valid regular expression"),
        ("guardrails:\n  code_rules: [{pattern: '[a', severity: warn}]\n",
         "guardrails.code_rules.0.pattern"),
        ("guardrails:\n  code_rules: [{pattern: 'x', severity: loud}]\n",
         "guardrails.code_rules.0.severity"),
        ("guardrails:\n  protected: ['.env']\n", "guardrails.protected: unknown key"),
        ("guardrails:\n  max_lines_changed: 0\n", "guardrails.max_lines_changed"),
        ("hooks:\n  post_edit: []\n", "hooks.post_edit: unknown key"),
        ("hooks:\n  pre_tool_use: [{name: a, command: x, matcher: '('}]\n",
         "hooks.pre_tool_use.0.matcher"),
        ("hooks:\n  pre_tool_use: [{name: a}]\n", "hooks.pre_tool_use.0.command"),
        ("profiles:\n  r: {tools: [read_file], polcy: {}}\n", "profiles.r.polcy: unknown key"),
        ("profiles:\n  r: {policy: {preset: lax}}\n", "profiles.r.policy.preset"),
        ("profiles:\n  'a b': {}\n", "profile name 'a b'"),
        ("limits: {max_tokens: 10}\n", "limits.max_tokens"),
        ("limits: {max_token: 1000}\n", "limits.max_token: unknown key"),
    ],
)  # fmt: skip
def test_errors_name_the_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigInvalid) as err:
        load_config(write(tmp_path, text), env={})
    assert expected in str(err.value)
