"""Attack: write past ``protected_files`` and the edit limits with a tool the
pipeline does not know by name.

Before tools declared their effects, the guardrails saw only the calls of
tools they knew by name (write_file, patch_file, delete_file, apply_patch,
shell). So:

(a) ``git_branch`` switch, in a trusted workspace (writes run unasked), to a
    branch where ``.env`` differs rewrote the protected ``.env``;
(b) a plugin tool of class write wrote ``.env`` unasked;
(c) ``max_lines_changed`` did not apply to a plugin's write;
(5) a confirmation of a branch switch did not say which files it changes.

Real parts: the real dispatcher and built-in git tools, real git in the real
bubblewrap sandbox where it works here, a plugin loaded from a file through
``load_plugins`` (the plugin mechanism), answers through the real broker.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    DispatchSession,
    PolicyConfig,
    RulePolicy,
    ToolDispatcher,
    WorkspaceFileAPI,
    load_plugins,
)
from dispatcher.pipeline.guardrails import GuardrailConfig, Guardrails
from dispatcher.sandbox import Sandbox, SandboxConfig, probe
from dispatcher.tools import ApplyPatchTool, GitBranchTool, GitCommitTool, ShellTool
from protocol.canonical import ToolUseBlock
from tests.dispatcher.support import Recorded, RecordingPublisher

BWRAP = shutil.which("bwrap")
BWRAP_OK = BWRAP is not None and probe(BWRAP)[0] is not None
GIT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/nonexistent",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
TURN = "turn_1"
SECRET = "SECRET=main\n"


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=root, env=GIT_ENV, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """main: .env (SECRET=main), app.py; branch evil: .env replaced, app.py
    changed, new.txt added; branch docs: only README.md added."""
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".env").write_text(SECRET)
    (root / "app.py").write_text("print(1)\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "main")
    git(root, "switch", "-q", "-c", "evil")
    (root / ".env").write_text("SECRET=attacker\n")
    (root / "app.py").write_text("print(2)\n")
    (root / "new.txt").write_text("n\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "evil")
    git(root, "switch", "-q", "main")
    git(root, "switch", "-q", "-c", "docs")
    (root / "README.md").write_text("docs\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "docs")
    git(root, "switch", "-q", "main")
    assert (root / ".env").read_text() == SECRET
    return root


def session_of(root: Path, *, trusted: bool = True, **guardrails: Any) -> DispatchSession:
    """A session on ``root``: trusted (writes unasked, the README's team setup)
    or the default policy, in the real sandbox when bubblewrap works here."""
    sandbox = None
    if BWRAP_OK:
        assert BWRAP is not None
        sandbox = Sandbox(SandboxConfig(BWRAP), str(root))
    config = PolicyConfig(trusted_workspaces=[str(root)] if trusted else [])
    return DispatchSession(
        "sess_fx",
        WorkspaceFileAPI(root),
        policy=RulePolicy(config),
        sandbox=sandbox,
        guardrails=Guardrails(GuardrailConfig.model_validate(guardrails)) if guardrails else None,
        confirmation_timeout=30,
    )


def use(name: str, input: dict[str, Any], id: str = "tu_1") -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input)


def failed(publisher: RecordingPublisher, tool_use_id: str) -> Recorded:
    [event] = [
        e
        for e in publisher.events
        if e.type == "tool.failed" and e.data["tool_use_id"] == tool_use_id
    ]
    return event


async def answer(
    dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    decision: str,
    *,
    count: int = 1,
    scope: str = "once",
) -> Recorded:
    """Wait (bounded) for the count-th confirmation request and answer it."""
    asked = await publisher.wait_for("tool.confirmation_requested", count, within=30)
    dispatcher.broker.resolve(
        asked.data["request_id"],
        decision,  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        resolved_by="tester",
    )
    return asked


# -- (a) git_branch switch past protected_files --------------------------------------


@pytest.fixture
def git_dispatcher(publisher: RecordingPublisher) -> ToolDispatcher:
    tools = ToolDispatcher(publisher)
    tools.register(GitBranchTool)
    tools.register(GitCommitTool)
    return tools


@pytest.fixture
def publisher() -> RecordingPublisher:
    return RecordingPublisher()


async def test_a_branch_switch_that_rewrites_a_protected_file_is_refused(
    repo: Path, git_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(repo, protected_files=[".env"])
    result = await git_dispatcher.dispatch(
        use("git_branch", {"action": "switch", "name": "evil"}), session, turn_id=TURN
    )
    assert result.is_error
    event = failed(publisher, "tu_1")
    assert event.data["blocked_by"] == {"kind": "guardrail", "name": "protected_files"}
    assert ".env" in event.data["message"]
    # Nobody was asked, nothing ran: the file and the branch are as they were.
    assert "tool.confirmation_requested" not in publisher.types()
    assert (repo / ".env").read_text() == SECRET
    assert git(repo, "branch", "--show-current").strip() == "main"


async def test_a_branch_switch_that_leaves_protected_files_alone_runs(
    repo: Path, git_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(repo, protected_files=[".env"])
    result = await git_dispatcher.dispatch(
        use("git_branch", {"action": "switch", "name": "docs"}), session, turn_id=TURN
    )
    assert not result.is_error, result.text()
    assert git(repo, "branch", "--show-current").strip() == "docs"
    # A commit writes .git only: not refused by a protected .env either.
    (repo / "notes.txt").write_text("x\n")
    committed = await git_dispatcher.dispatch(
        use("git_commit", {"message": "notes", "all": True}, "tu_2"), session, turn_id=TURN
    )
    assert not committed.is_error, committed.text()


async def test_max_files_modified_counts_the_files_a_switch_changes(
    repo: Path, git_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(repo, max_files_modified=2)
    result = await git_dispatcher.dispatch(
        use("git_branch", {"action": "switch", "name": "evil"}), session, turn_id=TURN
    )
    assert result.is_error
    assert failed(publisher, "tu_1").data["blocked_by"]["name"] == "max_files_modified"
    assert (repo / ".env").read_text() == SECRET


async def test_the_confirmation_of_a_switch_lists_the_files_it_changes(
    repo: Path, git_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(repo, trusted=False)
    task = asyncio.create_task(
        git_dispatcher.dispatch(
            use("git_branch", {"action": "switch", "name": "evil"}), session, turn_id=TURN
        )
    )
    asked = await answer(git_dispatcher, publisher, "deny")
    assert sorted(asked.data["projected_modifications"]) == [".env", "app.py", "new.txt"]
    assert ".env" in asked.data["preview"]["text"]
    assert (await task).is_error
    assert (repo / ".env").read_text() == SECRET


async def test_a_switch_whose_branch_moved_after_the_check_is_refused(
    repo: Path, git_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    """The person approved the files the switch changed when asked; if the
    branch moves while they read, the switch does not run."""
    session = session_of(repo, trusted=False)
    task = asyncio.create_task(
        git_dispatcher.dispatch(
            use("git_branch", {"action": "switch", "name": "docs"}), session, turn_id=TURN
        )
    )
    await publisher.wait_for("tool.confirmation_requested", within=30)
    git(repo, "branch", "-f", "docs", "evil")  # docs now rewrites .env
    await answer(git_dispatcher, publisher, "allow")
    result = await task
    assert result.is_error and "moved" in result.text()
    assert (repo / ".env").read_text() == SECRET


# -- (b) and (c): plugin tools ----------------------------------------------------------

STAMP_SOURCE = textwrap.dedent(
    """
    from typing import Any
    from dispatcher import ToolOutput
    from protocol.canonical import SideEffects, ToolDefinition


    class Stamp:
        '''A protocol-only plugin of class write: writes ``text`` to ``target``
        and says nothing of what it touches.'''

        definition = ToolDefinition(
            name="stamp",
            description="Writes a file.",
            input_schema={
                "type": "object",
                "properties": {"target": {"type": "string"}, "text": {"type": "string"}},
                "required": ["target", "text"],
                "additionalProperties": False,
            },
            side_effects=SideEffects.WRITE,
        )

        async def execute(self, input: dict[str, Any], context: Any) -> ToolOutput:
            context.workspace_files.write(input["target"], input["text"])
            return ToolOutput.text("stamped", files_modified=[input["target"]])

        async def cancel(self) -> bool:
            return False
    """
)
SCRIBE_SOURCE = textwrap.dedent(
    """
    from typing import Any
    from dispatcher import BaseTool, ToolOutput
    from dispatcher.tool import ToolEffects, declared_paths
    from effects_attack_stamp import Stamp


    class Scribe(BaseTool):
        '''A BaseTool plugin that declares its effects: the file and its lines.'''

        definition = Stamp.definition.model_copy(update={"name": "scribe"})

        async def effects(self, input, workspace, *, sandbox=None, prepared=None):
            text = input["text"]
            return ToolEffects(
                writes=declared_paths(input["target"], workspace),
                added_text=((input["target"], text),),
                lines_changed=text.count("\\n"),
                summary=f"scribe {input['target']}",
            )

        async def execute(self, input: dict[str, Any], context: Any) -> ToolOutput:
            context.workspace_files.write(input["target"], input["text"])
            return ToolOutput.text("written", files_modified=[input["target"]])
    """
)
PLUGIN_MODULES = ("effects_attack_stamp", "effects_attack_scribe")


@pytest.fixture
def plugin_dispatcher(tmp_path: Path, publisher: RecordingPublisher) -> Iterator[ToolDispatcher]:
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "effects_attack_stamp.py").write_text(STAMP_SOURCE)
    (folder / "effects_attack_scribe.py").write_text(SCRIBE_SOURCE)
    sys.path.insert(0, str(folder))
    try:
        tools = ToolDispatcher(publisher)
        errors = load_plugins(
            tools,
            import_paths=["effects_attack_stamp:Stamp", "effects_attack_scribe:Scribe"],
            entry_points_group=None,
        )
        # Before tools declared effects the second could not load: the
        # stamp tests still show the hole on their own.
        assert "stamp" in tools.names(), errors
        tools.register(ApplyPatchTool)
        yield tools
    finally:
        sys.path.remove(str(folder))
        for name in PLUGIN_MODULES:
            sys.modules.pop(name, None)


@pytest.fixture
def plain_ws(tmp_path: Path) -> Path:
    root = tmp_path / "plain"
    root.mkdir()
    (root / ".env").write_text(SECRET)
    (root / "a.txt").write_text("".join(f"{i}\n" for i in range(20)))
    return root


async def test_a_write_plugin_with_unknown_effects_asks_and_a_deny_keeps_the_file(
    plain_ws: Path, plugin_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    # Trusted: a write-class call would run unasked, were its effects known.
    session = session_of(plain_ws, protected_files=[".env"])
    call = use("stamp", {"target": ".env", "text": "SECRET=attacker\n"})
    task = asyncio.create_task(plugin_dispatcher.dispatch(call, session, turn_id=TURN))
    asked = await answer(plugin_dispatcher, publisher, "deny")
    assert asked.data["preview"]["text"].startswith("effects unknown: this tool may write any file")
    assert asked.data["projected_modifications"] == []
    result = await task
    assert result.is_error
    assert failed(publisher, "tu_1").data["error_class"] == "user_denied"
    assert (plain_ws / ".env").read_text() == SECRET


async def test_a_session_grant_does_not_cover_unknown_effects_while_files_are_protected(
    plain_ws: Path, plugin_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(plain_ws, protected_files=[".env"])
    first = use("stamp", {"target": "a.txt", "text": "ok\n"}, "tu_1")
    task = asyncio.create_task(plugin_dispatcher.dispatch(first, session, turn_id=TURN))
    asked = await answer(plugin_dispatcher, publisher, "allow", scope="session")
    assert "asked again" in asked.data["scope_text"]
    assert not (await task).is_error
    second = use("stamp", {"target": ".env", "text": "SECRET=attacker\n"}, "tu_2")
    task = asyncio.create_task(plugin_dispatcher.dispatch(second, session, turn_id=TURN))
    await answer(plugin_dispatcher, publisher, "deny", count=2)
    assert (await task).is_error
    assert (plain_ws / ".env").read_text() == SECRET


async def test_a_plugin_that_declares_its_effects_is_held_to_protected_files(
    plain_ws: Path, plugin_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(plain_ws, protected_files=[".env"])
    os.symlink(".env", plain_ws / "innocent")
    for n, target in enumerate([".env", "innocent"]):
        call = use("scribe", {"target": target, "text": "SECRET=attacker\n"}, f"tu_{n}")
        assert (await plugin_dispatcher.dispatch(call, session, turn_id=TURN)).is_error
        assert failed(publisher, f"tu_{n}").data["blocked_by"]["name"] == "protected_files"
    assert (plain_ws / ".env").read_text() == SECRET
    # Known effects that touch no protected file run unasked in the trusted workspace.
    ok = use("scribe", {"target": "b.txt", "text": "fine\n"}, "tu_ok")
    assert not (await plugin_dispatcher.dispatch(ok, session, turn_id=TURN)).is_error
    assert "tool.confirmation_requested" not in publisher.types()


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


PATCH_6 = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n-0\n-1\n-2\n+x\n+y\n+z\n"


@pytest.mark.parametrize(
    ("name", "input"),
    [
        pytest.param("apply_patch", {"patch": PATCH_6}, id="apply_patch"),
        pytest.param("scribe", {"target": "c.txt", "text": "l\n" * 6}, id="declaring-plugin"),
    ],
)
async def test_max_lines_changed_applies_to_every_tool_that_declares_lines(
    plain_ws: Path,
    plugin_dispatcher: ToolDispatcher,
    publisher: RecordingPublisher,
    name: str,
    input: dict[str, Any],
) -> None:
    before = snapshot(plain_ws)
    session = session_of(plain_ws, max_lines_changed=5)
    result = await plugin_dispatcher.dispatch(use(name, input), session, turn_id=TURN)
    assert result.is_error
    event = failed(publisher, "tu_1")
    assert event.data["blocked_by"] == {"kind": "guardrail", "name": "max_lines_changed"}
    assert "6 lines" in event.data["message"]
    assert snapshot(plain_ws) == before


async def test_max_lines_changed_asks_about_a_write_whose_size_is_unknown(
    plain_ws: Path, plugin_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(plain_ws, max_lines_changed=5)
    call = use("stamp", {"target": "c.txt", "text": "l\n" * 60})
    task = asyncio.create_task(plugin_dispatcher.dispatch(call, session, turn_id=TURN))
    await answer(plugin_dispatcher, publisher, "deny")
    assert (await task).is_error
    assert not (plain_ws / "c.txt").exists()


# -- the shell's declared writes ----------------------------------------------------------


@pytest.fixture
def shell_dispatcher(publisher: RecordingPublisher) -> ToolDispatcher:
    tools = ToolDispatcher(publisher)
    tools.register(ShellTool)
    return tools


@pytest.mark.parametrize(
    "command",
    ["sort -o.env a.txt", "sort -uo .env a.txt", "sort --output=.env a.txt", "sort --o=.env a.txt"],
)
async def test_a_shell_option_that_writes_a_protected_file_is_refused(
    plain_ws: Path, shell_dispatcher: ToolDispatcher, publisher: RecordingPublisher, command: str
) -> None:
    session = session_of(plain_ws, protected_files=[".env"])
    call = use("shell", {"command": command})
    result = await shell_dispatcher.dispatch(call, session, turn_id=TURN)
    assert result.is_error
    assert failed(publisher, "tu_1").data["blocked_by"]["name"] == "protected_files"
    assert (plain_ws / ".env").read_text() == SECRET


async def test_the_files_a_command_writes_count_for_max_files_modified(
    plain_ws: Path, shell_dispatcher: ToolDispatcher, publisher: RecordingPublisher
) -> None:
    session = session_of(plain_ws, max_files_modified=1)
    command = "sort -o out1.txt a.txt && sort a.txt > out2.txt"
    call = use("shell", {"command": command})
    result = await shell_dispatcher.dispatch(call, session, turn_id=TURN)
    assert result.is_error
    assert failed(publisher, "tu_1").data["blocked_by"]["name"] == "max_files_modified"
    assert not (plain_ws / "out1.txt").exists() and not (plain_ws / "out2.txt").exists()
