"""The execution pipeline wired into the tool call's road (dispatcher.py,
call.py): guardrails, pre/post hooks, dry-run, output validation, the
profile's visibility and interactivity, an agent's tool filter.

Real parts: the built-in file, patch and shell tools on a real workspace,
hooks as real shell commands (in the real sandbox where bubblewrap works).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    AutoAllowPolicy,
    DispatchSession,
    RulePolicy,
    ToolContext,
    ToolDispatcher,
    ToolOutput,
    ToolRegistrationError,
    WorkspaceFileAPI,
)
from dispatcher.call import CallState, ToolCall
from dispatcher.pipeline.guardrails import GuardrailConfig, Guardrails
from dispatcher.pipeline.hooks import HookContext, HookEvent, HookRunner, HooksConfig
from dispatcher.pipeline.profiles import resolve_profile
from dispatcher.policy import PolicyConfig
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from dispatcher.tools import (
    ApplyPatchTool,
    DeleteFileTool,
    PatchFileTool,
    ReadFileTool,
    ShellTool,
    WriteFileTool,
)
from protocol.canonical import SideEffects, ToolDefinition, ToolResultBlock, ToolUseBlock
from tests.dispatcher.support import Recorded, RecordingPublisher, schema

BWRAP = shutil.which("bwrap")
BWRAP_OK = BWRAP is not None and probe(BWRAP)[0] is not None
HOOK_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
TURN = "turn_1"


# -- fixtures ------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path) -> WorkspaceFileAPI:
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".env").write_text("SECRET=1\n")
    (root / "notes.txt").write_text("one\ntwo\n")
    return WorkspaceFileAPI(root, allow_delete=True)


@pytest.fixture
def dispatcher(publisher: RecordingPublisher) -> ToolDispatcher:
    tools = ToolDispatcher(publisher)
    for factory in (
        ReadFileTool,
        WriteFileTool,
        PatchFileTool,
        ApplyPatchTool,
        DeleteFileTool,
        ShellTool,
    ):
        tools.register(factory)
    return tools


def session_of(ws: WorkspaceFileAPI, publisher: RecordingPublisher, **kw: Any) -> DispatchSession:
    """A session that runs everything unasked (the stages under test decide),
    in the real sandbox when bubblewrap works here."""
    sandbox = None
    if BWRAP_OK:
        assert BWRAP is not None
        sandbox = Sandbox(SandboxConfig(BWRAP), ws.workspace_root)
    guardrails = kw.pop("guardrails", None)
    hooks = kw.pop("hooks", None)
    return DispatchSession(
        "sess_p",
        ws,
        policy=kw.pop("policy", AutoAllowPolicy()),
        sandbox=sandbox,
        guardrails=Guardrails(GuardrailConfig.model_validate(guardrails))
        if guardrails is not None
        else None,
        hooks=HookRunner(HooksConfig.model_validate(hooks), base_env=HOOK_ENV, publisher=publisher)
        if hooks is not None
        else None,
        **kw,
    )


def use(name: str, input: dict[str, Any], id: str = "tu_1") -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input)


def text(result: ToolResultBlock) -> str:
    return result.text()


def failed(publisher: RecordingPublisher, tool_use_id: str) -> Recorded:
    [event] = [
        e
        for e in publisher.events
        if e.type == "tool.failed" and e.data["tool_use_id"] == tool_use_id
    ]
    return event


def checksum(root: str) -> str:
    """Every file's path and bytes under the workspace."""
    digest = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as fh:
                digest.update(fh.read())
    return digest.hexdigest()


ENV_PATCH = "--- a/.env\n+++ b/.env\n@@ -1 +1 @@\n-SECRET=1\n+SECRET=2\n"


# -- guardrails -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "input"),
    [
        ("write_file", {"path": ".env", "content": "SECRET=2\n"}),
        ("patch_file", {"path": ".env", "old_str": "SECRET=1", "new_str": "SECRET=2"}),
        ("apply_patch", {"patch": ENV_PATCH}),
        ("delete_file", {"path": ".env"}),
        ("shell", {"command": "cat .env > x"}),
        ("shell", {"command": "sh -c 'cp ./sub/../.env leak'"}),
    ],
    ids=["write_file", "patch_file", "apply_patch", "delete_file", "shell", "shell-nested"],
)
async def test_a_protected_file_is_refused_and_the_event_names_the_rule(
    dispatcher: ToolDispatcher,
    ws: WorkspaceFileAPI,
    publisher: RecordingPublisher,
    name: str,
    input: dict[str, Any],
) -> None:
    session = session_of(ws, publisher, guardrails={"protected_files": [".env"]})
    before = checksum(ws.workspace_root)
    result = await dispatcher.dispatch(use(name, input), session, turn_id=TURN)
    assert result.is_error and "protected_files" in text(result) and ".env" in text(result)
    event = failed(publisher, "tu_1")
    assert event.data["error_class"] == "permission_denied"
    assert event.data["blocked_by"] == {"kind": "guardrail", "name": "protected_files"}
    # Refused before anything ran or asked.
    assert "tool.called" not in publisher.types()
    assert checksum(ws.workspace_root) == before


async def test_an_unprotected_write_passes_the_guardrails(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, guardrails={"protected_files": [".env", "secrets/**"]})
    result = await dispatcher.dispatch(
        use("write_file", {"path": "app.txt", "content": "ok\n"}), session, turn_id=TURN
    )
    assert not result.is_error, text(result)
    assert (Path(ws.workspace_root) / "app.txt").read_text() == "ok\n"
    assert publisher.types() == ["tool.called", "tool.completed"]


async def test_a_blocked_command_regex_refuses_the_shell_call(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, guardrails={"blocked_commands": [r"git\s+push\b.*--force"]})
    result = await dispatcher.dispatch(
        use("shell", {"command": "git push origin main --force"}), session, turn_id=TURN
    )
    assert result.is_error and "blocked_commands" in text(result)
    assert failed(publisher, "tu_1").data["blocked_by"] == {
        "kind": "guardrail",
        "name": "blocked_commands",
    }
    ok = await dispatcher.dispatch(
        use("shell", {"command": "echo fine"}, id="tu_2"), session, turn_id=TURN
    )
    assert not ok.is_error and "fine" in text(ok)


async def test_max_lines_changed_refuses_a_large_edit(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, guardrails={"max_lines_changed": 3})
    big = "".join(f"line {i}\n" for i in range(10))
    result = await dispatcher.dispatch(
        use("write_file", {"path": "big.txt", "content": big}), session, turn_id=TURN
    )
    assert result.is_error and "max_lines_changed" in text(result) and "10 lines" in text(result)
    assert not (Path(ws.workspace_root) / "big.txt").exists()
    small = await dispatcher.dispatch(
        use("write_file", {"path": "small.txt", "content": "a\nb\n"}, id="tu_2"),
        session,
        turn_id=TURN,
    )
    assert not small.is_error, text(small)


async def test_max_files_modified_holds_across_concurrent_calls_of_one_turn(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, guardrails={"max_files_modified": 2})
    blocks = [
        use("write_file", {"path": f"f{i}.txt", "content": f"{i}\n"}, id=f"tu_{i}")
        for i in range(5)
    ]
    results = await dispatcher.dispatch_all(blocks, session, turn_id=TURN)
    ok = [r for r in results if not r.is_error]
    refused = [r for r in results if r.is_error]
    assert len(ok) == 2 and len(refused) == 3
    assert all("max_files_modified" in text(r) for r in refused)
    written = sorted(n for n in os.listdir(ws.workspace_root) if n.startswith("f"))
    assert len(written) == 2
    # Writing the same files again stays within the limit; a third does not.
    again = await dispatcher.dispatch(
        use("write_file", {"path": written[0], "content": "x\n"}, id="tu_again"),
        session,
        turn_id=TURN,
    )
    assert not again.is_error, text(again)
    third = await dispatcher.dispatch(
        use("write_file", {"path": "other.txt", "content": "x\n"}, id="tu_third"),
        session,
        turn_id=TURN,
    )
    assert third.is_error and "max_files_modified" in text(third)
    # The next turn starts from zero once the server ends this one.
    dispatcher.end_turn(session, TURN)
    assert TURN not in session.turn_counters
    fresh = await dispatcher.dispatch(
        use("write_file", {"path": "f9.txt", "content": "9\n"}, id="tu_next"),
        session,
        turn_id="turn_2",
    )
    assert not fresh.is_error, text(fresh)


async def test_a_code_rule_warns_with_the_result_or_blocks(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    rules = [
        {"pattern": r"print\(", "message": "no print", "severity": "warn"},
        {"pattern": r"eval\(", "message": "no eval", "severity": "block"},
    ]
    session = session_of(ws, publisher, guardrails={"code_rules": rules})
    warned = await dispatcher.dispatch(
        use("write_file", {"path": "a.py", "content": "print(1)\n"}), session, turn_id=TURN
    )
    assert not warned.is_error
    assert "[Guardrail warning (code_rules)]: a.py: no print" in text(warned)
    [warning] = [e for e in publisher.events if e.type == "guardrail.warning"]
    assert warning.data == {
        "rule": "code_rules",
        "message": "a.py: no print",
        "tool_use_id": "tu_1",
    }
    # Published before the call ran, once.
    types = publisher.types("tu_1")
    assert types == ["guardrail.warning", "tool.called", "tool.completed"]
    completed = publisher.first("tool.completed")
    assert "no print" in completed.data["content"][-1]["text"]

    blocked = await dispatcher.dispatch(
        use("write_file", {"path": "b.py", "content": "eval(x)\n"}, id="tu_2"),
        session,
        turn_id=TURN,
    )
    assert blocked.is_error and "no eval" in text(blocked)
    assert failed(publisher, "tu_2").data["blocked_by"] == {
        "kind": "guardrail",
        "name": "code_rules",
    }
    assert not (Path(ws.workspace_root) / "b.py").exists()


# -- hooks ------------------------------------------------------------------------------


async def test_a_pre_hook_exit_2_blocks_with_its_stderr_as_the_reason(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    hook = {
        "name": "no-generated",
        "matcher": "write_file",
        "command": 'echo "generated files are read-only" >&2; exit 2',
    }
    session = session_of(ws, publisher, hooks={"pre_tool_use": [hook]})
    result = await dispatcher.dispatch(
        use("write_file", {"path": "gen.txt", "content": "x"}), session, turn_id=TURN
    )
    assert result.is_error
    assert "Blocked by hook no-generated: generated files are read-only" in text(result)
    event = failed(publisher, "tu_1")
    assert event.data["error_class"] == "permission_denied"
    assert event.data["blocked_by"] == {"kind": "hook", "name": "no-generated"}
    [ran] = [e for e in publisher.events if e.type == "hook.completed"]
    assert ran.data["hook"] == "no-generated" and ran.data["event"] == "pre_tool_use"
    assert ran.data["decision"] == "block" and ran.data["exit_code"] == 2
    assert ran.data["tool_use_id"] == "tu_1" and ran.turn_id == TURN
    assert not (Path(ws.workspace_root) / "gen.txt").exists()
    # A read tool the matcher does not name is untouched.
    read = await dispatcher.dispatch(
        use("read_file", {"path": "notes.txt"}, id="tu_2"), session, turn_id=TURN
    )
    assert not read.is_error
    assert len([e for e in publisher.events if e.type == "hook.completed"]) == 1


async def test_a_pre_hook_rewrites_the_input_which_is_checked_again(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    # The hook reads the input from stdin and moves the write under out/.
    rewrite = (
        'python3 -c \'import json,sys; d=json.load(sys.stdin)["tool_input"]; '
        'd["path"]="out/"+d["path"]; '
        'print(json.dumps({"updatedInput": d, "additionalContext": "moved under out/"}))\''
    )
    session = session_of(
        ws,
        publisher,
        hooks={"pre_tool_use": [{"name": "relocate", "matcher": "write_file", "command": rewrite}]},
        guardrails={"protected_files": ["out/.env"]},
    )
    result = await dispatcher.dispatch(
        use("write_file", {"path": "a.txt", "content": "hello\n"}), session, turn_id=TURN
    )
    assert not result.is_error, text(result)
    root = Path(ws.workspace_root)
    assert (root / "out" / "a.txt").read_text() == "hello\n" and not (root / "a.txt").exists()
    assert "[Hook relocate]: moved under out/" in text(result)
    assert publisher.first("tool.called").data["input"]["path"] == "out/a.txt"

    # The rewritten input meets the guardrails again.
    refused = await dispatcher.dispatch(
        use("write_file", {"path": ".env", "content": "X=1\n"}, id="tu_2"), session, turn_id=TURN
    )
    assert refused.is_error
    assert failed(publisher, "tu_2").data["blocked_by"] == {
        "kind": "guardrail",
        "name": "protected_files",
    }
    assert not (root / "out" / ".env").exists()


async def test_an_invalid_rewrite_fails_as_a_validation_error(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    bad = 'echo \'{"updatedInput": {"path": 5}}\''
    session = session_of(
        ws, publisher, hooks={"pre_tool_use": [{"name": "broken", "command": bad}]}
    )
    result = await dispatcher.dispatch(
        use("write_file", {"path": "a.txt", "content": "x"}), session, turn_id=TURN
    )
    assert result.is_error and "broken" in text(result)
    event = failed(publisher, "tu_1")
    assert event.data["error_class"] == "validation_error"
    assert "/content" in event.data["message"] or "/path" in event.data["message"]
    assert "tool.called" not in publisher.types()
    assert not (Path(ws.workspace_root) / "a.txt").exists()


async def test_a_failing_post_hook_lint_reaches_the_model(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    lint = {
        "name": "lint",
        "matcher": "write_file|patch_file|apply_patch",
        "file_patterns": ["*.py"],
        # A ruff-style report: file:line: message, exit 1 on findings.
        "command": "grep -n 'print(' {file} | sed 's|^|'{file}':|; s|$| T201 print found|'"
        " | grep . && exit 1; exit 0",
    }
    session = session_of(ws, publisher, hooks={"post_tool_use": [lint]})
    result = await dispatcher.dispatch(
        use("write_file", {"path": "src/m.py", "content": "x = 1\nprint(x)\n"}),
        session,
        turn_id=TURN,
    )
    assert not result.is_error
    body = text(result)
    assert "[Hook lint: FAILED (exit 1)]\nsrc/m.py:2:print(x) T201 print found" in body
    [ran] = [e for e in publisher.events if e.type == "hook.completed"]
    assert ran.data["decision"] == "error" and ran.data["exit_code"] == 1
    assert ran.data["event"] == "post_tool_use" and ran.data["tool_use_id"] == "tu_1"
    # The event the clients see carries the same text as the model's result.
    assert (
        "[Hook lint: FAILED (exit 1)]"
        in publisher.first("tool.completed").data["content"][-1]["text"]
    )
    # A clean file and a file the patterns do not name add nothing.
    clean = await dispatcher.dispatch(
        use("write_file", {"path": "src/ok.py", "content": "x = 1\n"}, id="tu_2"),
        session,
        turn_id=TURN,
    )
    other = await dispatcher.dispatch(
        use("write_file", {"path": "doc.md", "content": "print(\n"}, id="tu_3"),
        session,
        turn_id=TURN,
    )
    assert "[Hook" not in text(clean) and "[Hook" not in text(other)
    runs = [e for e in publisher.events if e.type == "hook.completed"]
    assert [r.data["tool_use_id"] for r in runs] == ["tu_1", "tu_2"]


# -- dry-run ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["turn", "session"])
async def test_a_dry_run_plans_writes_and_commands_and_runs_reads(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher, where: str
) -> None:
    session = session_of(ws, publisher, dry_run=where == "session")
    before = checksum(ws.workspace_root)
    blocks = [
        use("read_file", {"path": "notes.txt"}, id="tu_read"),
        use("write_file", {"path": "notes/a.txt", "content": "a\nb\n"}, id="tu_write"),
        use("shell", {"command": "npm test > out.txt"}, id="tu_shell"),
        use("delete_file", {"path": "notes.txt"}, id="tu_delete"),
    ]
    results = await dispatcher.dispatch_all(blocks, session, turn_id=TURN, dry_run=where == "turn")
    assert not any(r.is_error for r in results)
    read, write, shell, delete = results
    assert "two" in text(read)
    assert text(write) == "[dry-run] Recorded, not executed: write_file notes/a.txt (+2 lines)"
    assert text(shell) == "[dry-run] Recorded, not executed: shell: npm test > out.txt"
    assert "delete_file notes.txt" in text(delete)
    assert checksum(ws.workspace_root) == before
    plan = [a.as_dict() for a in session.planned[TURN]]
    assert [a["tool_use_id"] for a in plan] == ["tu_write", "tu_shell", "tu_delete"]
    planned = [e.data for e in publisher.events if e.type == "tool.planned"]
    assert planned == plan
    # Planned calls never run: no tool.called, no tool.completed for them.
    assert publisher.types("tu_write") == ["tool.planned"]
    assert publisher.types("tu_read") == ["tool.called", "tool.completed"]


async def test_a_dry_run_still_applies_guardrails(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, guardrails={"protected_files": [".env"]})
    result = await dispatcher.dispatch(
        use("write_file", {"path": ".env", "content": "X"}), session, turn_id=TURN, dry_run=True
    )
    assert result.is_error and TURN not in session.planned


async def test_a_dry_run_asks_nobody_about_calls_it_only_records(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    """The default policy asks before a write; a dry-run records that it would
    ask instead of stopping for a person, and still refuses what is denied."""
    session = session_of(
        ws, publisher, policy=RulePolicy(PolicyConfig(per_tool={"delete_file": "deny"}))
    )
    before = checksum(ws.workspace_root)
    write, delete = await asyncio.wait_for(
        dispatcher.dispatch_all(
            [
                use("write_file", {"path": "notes/a.txt", "content": "a\n"}, id="tu_w"),
                use("delete_file", {"path": "notes.txt"}, id="tu_d"),
            ],
            session,
            turn_id=TURN,
            dry_run=True,
        ),
        timeout=30,
    )
    assert not write.is_error and "Recorded, not executed" in text(write)
    assert delete.is_error and failed(publisher, "tu_d").data["error_class"] == "permission_denied"
    assert not [e for e in publisher.events if e.type == "tool.confirmation_requested"]
    [planned] = [e.data for e in publisher.events if e.type == "tool.planned"]
    assert planned["tool_use_id"] == "tu_w" and planned["needs_confirmation"] is True
    assert [a.needs_confirmation for a in session.planned[TURN]] == [True]
    assert checksum(ws.workspace_root) == before


# -- output schemas ---------------------------------------------------------------------------


class CountTool:
    """Returns the structured data it is told to (a tool with a bug when told so)."""

    definition = ToolDefinition(
        name="count",
        description="Counts.",
        input_schema=schema({"data": {"type": "object"}}, ["data"]),
        side_effects=SideEffects.READ,
        output_schema=schema(
            {
                "count": {"type": "integer"},
                "items": {"type": "array", "items": {"type": "string"}},
            },
            ["count"],
        ),
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text("counted", data=input["data"])

    async def cancel(self) -> bool:
        return True


class FreeformTool(CountTool):
    definition = CountTool.definition.model_copy(update={"name": "freeform", "output_schema": None})


async def test_structured_output_is_validated_and_published(
    dispatcher: ToolDispatcher,
    ws: WorkspaceFileAPI,
    publisher: RecordingPublisher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispatcher.register(CountTool)
    dispatcher.register(FreeformTool)
    session = session_of(ws, publisher)
    good = await dispatcher.dispatch(
        use("count", {"data": {"count": 2, "items": ["a", "b"]}}), session, turn_id=TURN
    )
    assert not good.is_error
    assert publisher.first("tool.completed").data["structured"] == {
        "count": 2,
        "items": ["a", "b"],
    }
    with caplog.at_level(logging.ERROR, logger="toolrelay.dispatcher"):
        bad = await dispatcher.dispatch(
            use("count", {"data": {"count": 2, "items": ["a", 3]}}, id="tu_2"),
            session,
            turn_id=TURN,
        )
    assert bad.is_error and "/items/1" in text(bad)
    event = failed(publisher, "tu_2")
    assert event.data["error_class"] == "execution_error" and "/items/1" in event.data["message"]
    assert any(
        "count" in r.getMessage() and "output_schema" in r.getMessage() for r in caplog.records
    )
    # Without an output_schema, data passes through as it is.
    free = await dispatcher.dispatch(
        use("freeform", {"data": {"anything": [1]}}, id="tu_3"), session, turn_id=TURN
    )
    assert not free.is_error
    done = [e for e in publisher.events if e.type == "tool.completed"]
    assert done[-1].data["structured"] == {"anything": [1]}


def test_an_output_schema_outside_the_subset_refuses_registration() -> None:
    class Bad(CountTool):
        definition = CountTool.definition.model_copy(
            update={
                "name": "bad",
                "output_schema": {"type": "object", "properties": {"x": {"pattern": "a+"}}},
            }
        )

    with pytest.raises(ToolRegistrationError, match=r"output_schema|pattern at '/properties/x"):
        ToolDispatcher().register(Bad)


# -- profiles and tool filters ----------------------------------------------------------------


async def test_the_ci_profile_refuses_what_would_ask(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    ci = resolve_profile("ci")
    session = DispatchSession(
        "sess_ci", ws, policy=RulePolicy(ci.policy_for(PolicyConfig())), profile=ci
    )
    # No sandbox: every command would need a person, and ci has none to ask.
    result = await dispatcher.dispatch(use("shell", {"command": "echo hi"}), session, turn_id=TURN)
    assert result.is_error and "'ci'" in text(result) and "non-interactive" in text(result)
    assert failed(publisher, "tu_1").data["error_class"] == "permission_denied"
    assert "tool.confirmation_requested" not in publisher.types()
    # What it allows unasked runs.
    read = await dispatcher.dispatch(
        use("read_file", {"path": "notes.txt"}, id="tu_2"), session, turn_id=TURN
    )
    assert not read.is_error
    # Tools outside its list are neither listed nor callable; the shell, whose
    # every call would ask here (no sandbox), is denied outright: not offered.
    names = [d.name for d in dispatcher.definitions_for(session)]
    assert "read_file" in names and "shell" not in names and "write_file" not in names
    hidden = await dispatcher.dispatch(
        use("write_file", {"path": "x", "content": ""}, id="tu_3"), session, turn_id=TURN
    )
    assert failed(publisher, "tu_3").data["error_class"] == "not_found" and hidden.is_error


async def test_a_tool_hidden_by_the_tool_filter_is_not_listed_and_not_found(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    session = session_of(ws, publisher, tool_filter=lambda name: name != "shell")
    assert "shell" not in [d.name for d in dispatcher.definitions_for(session)]
    assert "shell" not in [e.name for e in dispatcher.entries_for(session)]
    assert "read_file" in [d.name for d in dispatcher.definitions_for(session)]
    result = await dispatcher.dispatch(use("shell", {"command": "echo hi"}), session, turn_id=TURN)
    assert result.is_error
    assert failed(publisher, "tu_1").data["error_class"] == "not_found"


# -- the states --------------------------------------------------------------------------------


def record_moves(monkeypatch: pytest.MonkeyPatch) -> list[CallState]:
    """Every state a call moves to, in order (the setter wrapped)."""
    moves: list[CallState] = []
    prop = vars(ToolCall)["state"]
    assert isinstance(prop, property) and prop.fget is not None and prop.fset is not None
    fset = prop.fset

    def setter(call: ToolCall, new: CallState) -> None:
        moves.append(new)
        fset(call, new)

    monkeypatch.setattr(ToolCall, "state", property(prop.fget, setter))
    return moves


@pytest.mark.parametrize("parts", ["none", "empty"])
async def test_an_unconfigured_session_takes_the_short_road(
    dispatcher: ToolDispatcher,
    ws: WorkspaceFileAPI,
    publisher: RecordingPublisher,
    monkeypatch: pytest.MonkeyPatch,
    parts: str,
) -> None:
    """No guardrails, hooks or dry-run: the call skips those states and
    publishes exactly what it did before the pipeline existed. "empty": the
    parts exist but check nothing per call (only quality gates, only
    session hooks), as the server builds them from a config without those."""
    moves = record_moves(monkeypatch)
    if parts == "none":
        session = session_of(ws, publisher)
    else:
        session = session_of(
            ws,
            publisher,
            guardrails={"quality_gates": [{"name": "t", "command": "true"}]},
            hooks={"session_start": [{"name": "hello", "command": "true"}]},
        )
    result = await dispatcher.dispatch(
        use("write_file", {"path": "a.txt", "content": "x"}), session, turn_id=TURN
    )
    assert not result.is_error
    assert moves == [CallState.VALIDATED, CallState.QUEUED, CallState.RUNNING, CallState.COMPLETED]
    assert publisher.types() == ["tool.called", "tool.completed"]
    assert session.turn_counters == {} and session.planned == {}


async def test_a_configured_call_passes_every_stage_in_order(
    dispatcher: ToolDispatcher,
    ws: WorkspaceFileAPI,
    publisher: RecordingPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    moves = record_moves(monkeypatch)
    session = session_of(
        ws,
        publisher,
        guardrails={"protected_files": [".env"], "max_files_modified": 5},
        hooks={
            "pre_tool_use": [{"name": "pre", "command": "exit 0"}],
            "post_tool_use": [{"name": "post", "command": "exit 0"}],
        },
    )
    result = await dispatcher.dispatch(
        use("write_file", {"path": "a.txt", "content": "x"}), session, turn_id=TURN
    )
    assert not result.is_error, text(result)
    assert moves == [
        CallState.VALIDATED,
        CallState.GUARDED,
        CallState.PRE_HOOKED,
        CallState.QUEUED,
        CallState.RUNNING,
        CallState.POST_HOOKED,
        CallState.COMPLETED,
    ]
    assert publisher.types() == [
        "hook.completed",
        "tool.called",
        "hook.completed",
        "tool.completed",
    ]
    assert session.turn_counters[TURN].paths == {"a.txt"}


async def test_the_hook_runner_reports_every_run_for_server_hooks_too(
    ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    """Non-tool events (session_start, budget_warning, ...) go through the
    same runner and the same publisher: one hook.completed per run."""
    runner = HookRunner(
        HooksConfig.model_validate(
            {
                "session_start": [
                    {"name": "hello", "command": "exit 0"},
                    {"name": "bad", "command": "exit 3"},
                ]
            }
        ),
        base_env=HOOK_ENV,
        publisher=publisher,
    )
    context = HookContext(session_id="sess_h", workspace=ws.workspace_root, turn_id=None)
    results = await runner.run(HookEvent.SESSION_START, context, sandbox=None)
    assert [r.decision for r in results] == ["allow", "error"]
    events = [e for e in publisher.events if e.type == "hook.completed"]
    assert [(e.data["hook"], e.data["decision"], e.data["exit_code"]) for e in events] == [
        ("hello", "allow", 0),
        ("bad", "error", 3),
    ]
    assert all(e.session_id == "sess_h" and e.turn_id is None for e in events)
    assert all(
        e.data["event"] == "session_start" and e.data.get("tool_use_id") is None for e in events
    )


def test_what_counts_as_configured() -> None:
    """The server hands a session Guardrails / a HookRunner only when there is
    something for them to do, so an unconfigured session skips the stages."""
    assert not GuardrailConfig().checks_calls
    gates_only = {"quality_gates": [{"name": "t", "command": "true"}]}
    assert not GuardrailConfig.model_validate(gates_only).checks_calls
    assert GuardrailConfig.model_validate({"max_files_modified": 3}).checks_calls
    assert GuardrailConfig.model_validate({"protected_files": [".env"]}).checks_calls
    assert not HooksConfig().configured
    assert HooksConfig.model_validate(
        {"session_end": [{"name": "bye", "command": "true"}]}
    ).configured


async def test_cancelling_a_call_in_its_pre_hook_stops_the_hook(
    dispatcher: ToolDispatcher, ws: WorkspaceFileAPI, publisher: RecordingPublisher
) -> None:
    # The hook says where it is, then would hold the call for a minute.
    hook = {"name": "slow", "command": "echo $$ > hook.pid; exec sleep 60", "timeout": 120}
    session = session_of(ws, publisher, hooks={"pre_tool_use": [hook]})
    session.sandbox = None  # the hook's pid must be one this test can see
    job = asyncio.ensure_future(
        dispatcher.dispatch(
            use("write_file", {"path": "a.txt", "content": "x"}), session, turn_id=TURN
        )
    )
    pid_file = Path(ws.workspace_root) / "hook.pid"
    for _ in range(1000):  # at most about 10 s
        if await asyncio.to_thread(lambda: pid_file.exists() and pid_file.read_text()):
            break
        await asyncio.sleep(0.01)
    pid = int(await asyncio.to_thread(pid_file.read_text))
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert failed(publisher, "tu_1").data["error_class"] == "cancelled"
    assert not (Path(ws.workspace_root) / "a.txt").exists()
    # The hook's process group was killed with the call (bounded wait for the reaper).
    for _ in range(500):  # at most about 10 s
        if not await asyncio.to_thread(_alive, pid):
            break
        await asyncio.sleep(0.02)
    assert not _alive(pid), "the pre-hook outlived its cancelled call"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): it is gone once its state says so.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
