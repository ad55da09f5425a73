"""Guardrails on plain data (ToolEffects) and on the effects real tools
declare for real inputs against a real workspace (symlinks, an existing file
to diff against)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from dispatcher.pipeline.guardrails import GuardrailConfig, Guardrails, TurnCounter
from dispatcher.tool import BaseTool, ToolEffects
from dispatcher.tools import (
    ApplyPatchTool,
    DeleteFileTool,
    PatchFileTool,
    ReadFileTool,
    RunCommandTool,
    ShellTool,
    WriteFileTool,
)
from dispatcher.tools.shell.paths import command_paths
from dispatcher.workspace import WorkspaceFileAPI


@pytest.fixture
def empty_ws(tmp_path: Path) -> WorkspaceFileAPI:
    root = tmp_path / "empty"
    root.mkdir()
    return WorkspaceFileAPI(root)


async def effects_of(tool: BaseTool, input: dict[str, object], ws: WorkspaceFileAPI) -> ToolEffects:
    return await tool.effects(dict(input), ws)


def writes(*paths: str, added: tuple[tuple[str, str], ...] = ()) -> ToolEffects:
    return ToolEffects(writes=paths, added_text=added)


def rails(**config: object) -> Guardrails:
    return Guardrails(GuardrailConfig.model_validate(config))


def shell(command: str, cwd: str = ".") -> ToolEffects:
    named = tuple(command_paths(command, cwd))
    return ToolEffects(commands=(command,), cwd=cwd, command_paths=named)


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
        verdict = g.check(writes(path), tool_name="write_file")
        assert verdict.blocked_by == "protected_files", path
        assert verdict.blocked_by_data() == {"kind": "guardrail", "name": "protected_files"}
        assert path in verdict.message and "write_file" in verdict.message
    for path in ["env", ".env.example", "secretsx/a", "config/tls.crt", "src/main.py"]:
        assert g.check(writes(path)).allowed, path
    # Deleting is modifying.
    assert g.check(ToolEffects(deletes=(".env",))).blocked_by == "protected_files"


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


@pytest.fixture
def linked(tmp_path: Path) -> str:
    """A workspace with secrets/k and a link innocent -> secrets; its real path."""
    root = tmp_path / "ws"
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "k").write_text("x")
    os.symlink("secrets", root / "innocent")
    return os.path.realpath(root)


def test_absolute_and_symlinked_arguments_resolve_through_the_workspace(linked: str) -> None:
    assert "secrets/k" in command_paths(f"cat {linked}/secrets/k", ".", linked)
    assert "secrets/k" in command_paths("cat innocent/k", ".", linked)


async def test_declared_effects_follow_links_inside_the_workspace(linked: str) -> None:
    ws = WorkspaceFileAPI(linked)
    g = rails(protected_files=["secrets/**"])
    call = await effects_of(ShellTool(), {"command": "cat innocent/k"}, ws)
    assert g.check(call).blocked_by == "protected_files"
    # A write through the link is caught by the physical path.
    call = await effects_of(WriteFileTool(), {"path": "innocent/k", "content": "y"}, ws)
    assert "secrets/k" in call.writes
    assert g.check(call).blocked_by == "protected_files"


def test_blocked_commands_are_regexes_searched_in_the_text() -> None:
    g = rails(blocked_commands=[r"git\s+push\s+.*--force", "^npm publish"])
    verdict = g.check(shell("git   push origin main --force"))
    assert verdict.blocked_by == "blocked_commands"
    assert "git" in verdict.message
    assert g.check(shell("npm publish --dry-run")).blocked_by == "blocked_commands"
    assert g.check(shell("git push origin main")).allowed
    assert g.check(writes("a")).allowed


async def test_max_lines_changed_uses_the_diff_against_the_current_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(100)))
    ws = WorkspaceFileAPI(root)
    g = rails(max_lines_changed=5)
    text = (root / "a.txt").read_text()
    small = await effects_of(
        WriteFileTool(), {"path": "a.txt", "content": text.replace("line 50\n", "fifty\n")}, ws
    )
    assert small.lines_changed == 2  # one removed, one added: not 100 + 100
    assert g.check(small).allowed
    big = await effects_of(WriteFileTool(), {"path": "new.txt", "content": "x\n" * 6}, ws)
    assert big.lines_changed == 6
    verdict = g.check(big)
    assert verdict.blocked_by == "max_lines_changed"
    assert "6" in verdict.message and "5" in verdict.message


def test_max_files_modified_counts_distinct_paths_per_turn() -> None:
    g = rails(max_files_modified=2)
    turn = TurnCounter()
    assert g.check(writes("a"), turn).allowed
    assert g.check(writes("./a"), turn).allowed
    assert g.check(writes("b"), turn).allowed
    verdict = g.check(writes("c"), turn)
    assert verdict.blocked_by == "max_files_modified"
    assert turn.paths == {"a", "b"}  # a refused call reserves nothing
    assert g.check(writes("c"), TurnCounter()).allowed
    assert g.check(ToolEffects(deletes=("c",)), turn).blocked_by == "max_files_modified"


def test_code_rules_block_or_warn_on_written_content() -> None:
    g = rails(
        code_rules=[
            {"pattern": r"eval\(", "message": "no eval", "severity": "block"},
            {"pattern": r"print\(", "message": "use logging", "severity": "warn",
             "file_patterns": ["*.py"]},
        ]
    )  # fmt: skip
    verdict = g.check(writes("x.py", added=(("x.py", "eval(1)"),)))
    assert verdict.blocked_by == "code_rules" and "no eval" in verdict.message
    verdict = g.check(writes("x.py", added=(("x.py", "print(1)"),)))
    assert verdict.allowed
    assert [(w.rule, w.path) for w in verdict.warnings] == [("code_rules", "x.py")]
    assert "use logging" in verdict.warnings[0].message
    assert verdict.warnings[0].event_data("tu_1") == {
        "rule": "code_rules", "message": "x.py: use logging", "tool_use_id": "tu_1"
    }  # fmt: skip
    # The warn rule is limited to *.py files.
    verdict = g.check(writes("x.md", added=(("x.md", "print(1)"),)))
    assert verdict.allowed and not verdict.warnings


async def test_apply_patch_is_checked_on_its_added_lines_and_every_file(
    empty_ws: WorkspaceFileAPI,
) -> None:
    patch = (
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n keep\n-old = 1\n+x = eval(s)\n"
        "--- a/.env\n+++ b/.env\n@@ -1 +1 @@\n-A=1\n+A=2\n"
    )
    call = await effects_of(ApplyPatchTool(), {"patch": patch}, empty_ws)
    assert set(call.writes) == {"src/app.py", ".env"}
    assert call.lines_changed == 4
    assert ("src/app.py", "x = eval(s)\n") in call.added_text
    assert rails(protected_files=[".env"]).check(call).blocked_by == "protected_files"
    rules = rails(code_rules=[{"pattern": r"eval\(", "severity": "block"}])
    assert rules.check(call).blocked_by == "code_rules"
    # A context line containing the pattern is not content being written.
    only_context = "--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n eval(1)\n-a\n+b\n"
    context_call = await effects_of(ApplyPatchTool(), {"patch": only_context}, empty_ws)
    assert rules.check(context_call).allowed


async def test_other_derivations(empty_ws: WorkspaceFileAPI) -> None:
    ws = empty_ws
    patch = {"path": "./a.py", "old_str": "x", "new_str": "y\nz"}
    call = await effects_of(PatchFileTool(), patch, ws)
    assert call.writes == ("a.py",)
    assert call.lines_changed == 3
    assert call.added_text == (("a.py", "y\nz"),)
    deleted = await effects_of(DeleteFileTool(), {"path": "d/../e"}, ws)
    assert deleted.deletes == ("e",) and deleted.modified == ("e",)
    assert (await effects_of(ApplyPatchTool(), {"patch": "not a diff"}, ws)).modified == ()
    assert (await effects_of(ReadFileTool(), {"path": ".env"}, ws)).modified == ()
    ran = await effects_of(RunCommandTool(), {"command": "cat .env"}, ws)
    assert ran.command_paths == (".env",) and ran.commands == ("cat .env",)


def test_unknown_effects_ask_while_any_rule_is_set_and_are_not_counted() -> None:
    unknown = ToolEffects.not_known("plugin_x(a=1)")
    turn = TurnCounter()
    verdict = rails(protected_files=[".env"], max_files_modified=1).check(
        unknown, turn, tool_name="plugin_x"
    )
    assert verdict.allowed and verdict.ask is not None
    assert "effects unknown" in verdict.ask and "protected_files" in verdict.ask
    assert turn.paths == set()
    # Without per-call rules (quality gates only) nothing asks.
    assert rails().check(unknown).ask is None


async def test_the_shell_declares_what_its_rules_say_it_writes(empty_ws: WorkspaceFileAPI) -> None:
    glued = await effects_of(ShellTool(), {"command": "sort -o.env a", "cwd": "sub"}, empty_ws)
    assert glued.writes == ("sub/.env",) and not glued.unknown
    assert rails(protected_files=[".env"]).check(glued).blocked_by == "protected_files"
    dynamic = await effects_of(ShellTool(), {"command": "echo x > $F"}, empty_ws)
    assert dynamic.unknown
    assert rails(protected_files=[".env"]).check(dynamic).ask is not None
