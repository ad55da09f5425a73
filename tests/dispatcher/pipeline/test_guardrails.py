"""Guardrails on plain data and on calls derived from real tool inputs
against a real workspace (symlinks, an existing file to diff against)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from dispatcher.pipeline.guardrails import (
    GuardrailConfig,
    Guardrails,
    ProposedCall,
    TurnCounter,
    command_paths,
)
from dispatcher.pipeline.proposed import proposed_call
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects

W = SideEffects.WRITE
X = SideEffects.EXECUTE


def rails(**config: object) -> Guardrails:
    return Guardrails(GuardrailConfig.model_validate(config))


def shell(command: str, cwd: str = ".") -> ProposedCall:
    return ProposedCall("shell", X, command=command, cwd=cwd)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"blocked_commands": ["git push (--force"]}, "git push (--force"),
        ({"code_rules": [{"pattern": "eval(", "severity": "warn"}]}, "eval("),
        ({"protected_files": [""]}, "''"),
    ],
)
def test_a_bad_pattern_is_a_config_error_naming_it(config: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError) as err:
        GuardrailConfig.model_validate(config)
    assert named in str(err.value)


def test_protected_files_refuse_writes_at_any_depth_and_inside_folders() -> None:
    g = rails(protected_files=[".env", "secrets/**", "config/*.{key,pem}"])
    for path in [".env", "app/.env", "secrets/a/b.txt", "config/tls.pem"]:
        verdict = g.check(ProposedCall("write_file", W, paths_modified=(path,)))
        assert verdict.blocked_by == "protected_files", path
        assert verdict.blocked_by_data() == {"kind": "guardrail", "name": "protected_files"}
        assert path in verdict.message
    for path in ["env", ".env.example", "secretsx/a", "config/tls.crt", "src/main.py"]:
        assert g.check(ProposedCall("write_file", W, paths_modified=(path,))).allowed, path


@pytest.mark.parametrize(
    "command",
    [
        "cat ./.env",
        "echo x > secrets/token",
        "cp a src/../.env",
        "sh -c 'rm -f .env'",
        "echo $(cat .env)",
        "tool --out=secrets/k",
        "r\\m .e''nv",
        "cd sub && cat ../.env",
    ],
)
def test_shell_commands_naming_a_protected_path_are_refused(command: str) -> None:
    g = rails(protected_files=[".env", "secrets/**"])
    assert g.check(shell(command)).blocked_by == "protected_files", command


def test_shell_commands_not_naming_one_pass_and_cwd_counts() -> None:
    g = rails(protected_files=[".env", "secrets/**"])
    for command in ["ls -la", "pytest -q tests", "cat src/env.py", "grep -r secret src"]:
        assert g.check(shell(command)).allowed, command
    # From the folder "sub", "../.env" is the root's .env; ".env" is sub/.env, also protected.
    assert g.check(shell("cat ../.env", cwd="sub")).blocked_by == "protected_files"
    assert g.check(shell("cat ../../outside", cwd="sub")).allowed


def test_absolute_and_symlinked_arguments_resolve_through_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "k").write_text("x")
    os.symlink("secrets", root / "innocent")
    real = os.path.realpath(root)
    assert "secrets/k" in command_paths(f"cat {real}/secrets/k", ".", real)
    assert "secrets/k" in command_paths("cat innocent/k", ".", real)
    ws = WorkspaceFileAPI(root)
    g = rails(protected_files=["secrets/**"])
    call = proposed_call("shell", {"command": "cat innocent/k"}, X, ws)
    assert g.check(call).blocked_by == "protected_files"
    # A write through the link is caught by the physical path.
    call = proposed_call("write_file", {"path": "innocent/k", "content": "y"}, W, ws)
    assert "secrets/k" in call.paths_modified
    assert g.check(call).blocked_by == "protected_files"


def test_blocked_commands_are_regexes_searched_in_the_text() -> None:
    g = rails(blocked_commands=[r"git\s+push\s+.*--force", "^npm publish"])
    verdict = g.check(shell("git   push origin main --force"))
    assert verdict.blocked_by == "blocked_commands"
    assert "git" in verdict.message
    assert g.check(shell("npm publish --dry-run")).blocked_by == "blocked_commands"
    assert g.check(shell("git push origin main")).allowed
    assert g.check(ProposedCall("write_file", W, paths_modified=("a",))).allowed


def test_max_lines_changed_uses_the_diff_against_the_current_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    ws = WorkspaceFileAPI(root)
    g = rails(max_lines_changed=5)
    text = (root / "a.txt").read_text()
    small = proposed_call(
        "write_file", {"path": "a.txt", "content": text.replace("line 50\n", "fifty\n")}, W, ws
    )
    assert small.lines_changed == 2  # one removed, one added: not 100 + 100
    assert g.check(small).allowed
    big = proposed_call("write_file", {"path": "new.txt", "content": "x\n" * 6}, W, ws)
    assert big.lines_changed == 6
    verdict = g.check(big)
    assert verdict.blocked_by == "max_lines_changed"
    assert "6" in verdict.message and "5" in verdict.message


def test_max_files_modified_counts_distinct_paths_per_turn() -> None:
    g = rails(max_files_modified=2)
    turn = TurnCounter()
    assert g.check(ProposedCall("write_file", W, paths_modified=("a",)), turn).allowed
    assert g.check(ProposedCall("patch_file", W, paths_modified=("./a",)), turn).allowed
    assert g.check(ProposedCall("write_file", W, paths_modified=("b",)), turn).allowed
    verdict = g.check(ProposedCall("write_file", W, paths_modified=("c",)), turn)
    assert verdict.blocked_by == "max_files_modified"
    assert turn.paths == {"a", "b"}  # a refused call reserves nothing
    assert g.check(ProposedCall("write_file", W, paths_modified=("c",)), TurnCounter()).allowed


def test_code_rules_block_or_warn_on_written_content() -> None:
    g = rails(
        code_rules=[
            {"pattern": r"eval\(", "message": "no eval", "severity": "block"},
            {"pattern": r"print\(", "message": "use logging", "severity": "warn",
             "file_patterns": ["*.py"]},
        ]
    )  # fmt: skip
    verdict = g.check(
        ProposedCall("write_file", W, paths_modified=("x.py",), added_text=(("x.py", "eval(1)"),))
    )
    assert verdict.blocked_by == "code_rules" and "no eval" in verdict.message
    verdict = g.check(
        ProposedCall("write_file", W, paths_modified=("x.py",), added_text=(("x.py", "print(1)"),))
    )
    assert verdict.allowed
    assert [(w.rule, w.path) for w in verdict.warnings] == [("code_rules", "x.py")]
    assert "use logging" in verdict.warnings[0].message
    assert verdict.warnings[0].event_data("tu_1") == {
        "rule": "code_rules", "message": "x.py: use logging", "tool_use_id": "tu_1"
    }  # fmt: skip
    # The warn rule is limited to *.py files.
    verdict = g.check(
        ProposedCall("write_file", W, paths_modified=("x.md",), added_text=(("x.md", "print(1)"),))
    )
    assert verdict.allowed and not verdict.warnings


def test_apply_patch_is_checked_on_its_added_lines_and_every_file() -> None:
    patch = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n keep\n-old = 1\n+x = eval(s)\n"
        "--- a/.env\n+++ b/.env\n@@ -1 +1 @@\n-A=1\n+A=2\n"
    )
    call = proposed_call("apply_patch", {"patch": patch}, W)
    assert set(call.paths_modified) == {"src/app.py", ".env"}
    assert call.lines_changed == 4
    assert ("src/app.py", "x = eval(s)\n") in call.added_text
    assert rails(protected_files=[".env"]).check(call).blocked_by == "protected_files"
    rules = rails(code_rules=[{"pattern": r"eval\(", "severity": "block"}])
    assert rules.check(call).blocked_by == "code_rules"
    # A context line containing the pattern is not content being written.
    only_context = "--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n eval(1)\n-a\n+b\n"
    assert rules.check(proposed_call("apply_patch", {"patch": only_context}, W)).allowed


def test_other_derivations() -> None:
    call = proposed_call("patch_file", {"path": "./a.py", "old_str": "x", "new_str": "y\nz"}, W)
    assert call.paths_modified == ("a.py",)
    assert call.lines_changed == 3
    assert call.added_text == (("a.py", "y\nz"),)
    assert proposed_call("delete_file", {"path": "d/../e"}, W).paths_modified == ("e",)
    assert proposed_call("apply_patch", {"patch": "not a diff"}, W).paths_modified == ()
    assert proposed_call("read_file", {"path": ".env"}, SideEffects.READ).paths_modified == ()
    assert proposed_call("run_command", {"command": "cat .env"}, X).command_paths == (".env",)
