"""The shell's rating as an attacker tries it: commands that look like reads
but run programs, read outside the workspace, follow links out of it or list
other processes must not be ``safe``; plain reads must stay ``safe``. Then
the same corpus routed through the real dispatcher and policy: with a
sandbox, safe runs unasked and the rest asks; without one, everything asks.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from dispatcher import (
    CallRating,
    DispatchSession,
    RulePolicy,
    ToolDispatcher,
    ToolOutput,
    WorkspaceFileAPI,
)
from dispatcher.sandbox import Sandbox, SandboxConfig
from dispatcher.tool import ToolContext
from dispatcher.tools import ShellTool
from dispatcher.tools.shell.rules import rate_command
from protocol.canonical import ToolUseBlock
from protocol.payloads import Payload

NOT_SAFE = [
    # options that run another program
    "rg --pre=cat needle",
    "rg --pre cat needle",
    "rg --pre-glob '*.md' --pre ./x needle",
    "rg -z needle",
    "rg --search-zip needle",
    "rg --hostname-bin=id needle",
    "sort --compress-program=sh README.md",
    "sort --compress-prog=sh README.md",
    "git grep -O needle",
    "git grep --open-files-in-pager=vim needle",
    "git -c core.pager=sh log",
    "git --exec-path=. status",
    "find . -exec cat {} \\;",
    "find . -execdir ls \\;",
    "find . -ok ls \\;",
    "find . -fprint out.txt",
    "fd -x cat",
    "fd --exec-batch cat",
    "ag --pager=sh needle",
    "xargs cat",
    "ls | xargs cat",
    "echo a | xargs echo",
    "tar --to-command=sh -xf a.tar",
    "tar -I sh -xf a.tar",
    "tar --use-compress-program=sh -cf a.tar src",
    "less README.md",
    "man ls",
    "LESSOPEN='|sh %s' less README.md",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print | \"sh\"}' README.md",
    "sed -n '1e id' README.md",
    "sed 'w out.txt' README.md",
    "vim -c ':!id' README.md",
    "ex -c '!id' README.md",
    "ssh -o ProxyCommand=id host",
    "rsync -e sh a b",
    "zip -T -TT id a.zip README.md",
    "cloc --extract-with=sh .",
    "file -z a.gz",
    # the environment: programs obey it
    "env ls",
    "env -i ls",
    "FOO=1 ls",
    "env FOO=1 cat README.md",
    "GIT_CONFIG_GLOBAL=x.cfg git --version",
    "nohup ls",
    "PATH=.:$PATH; ls",
    "xargs -a /etc/passwd echo",
    "HOME=../crafted git --version",
    # the shell's own git: the workspace's .git/config can run programs
    "git status",
    "git log --oneline",
    "git diff",
    "git show HEAD",
    "git branch",
    "git ls-files",
    # paths outside the workspace: absolute, .., ~, globs, braces, option values
    "cat /etc/passwd",
    "cat ../outside.txt",
    "cat src/../../outside.txt",
    "cat ~/.ssh/id_rsa",
    "ls .?/",
    "cat .*/outside.txt",
    "cat {/etc/passwd,README.md}",
    "cat $(echo /etc/passwd)",
    "diff --to-file=/etc/passwd README.md",
    "grep -f/etc/passwd README.md",
    "rg --ignore-file=/etc/passwd needle",
    "timeout 5 cat /etc/passwd",
    "sh -c 'cat /etc/passwd'",
    # redirections from or to outside
    "cat < /etc/passwd",
    "cat < ../outside.txt",
    "wc -l < passwd_link",
    "echo x > /tmp/y",
    "echo x > ../y",
    # symlinks out of the workspace
    "cat passwd_link",
    "ls link_out",
    "cat link_out/hostname",
    "head -c 10 link_out/passwd",
    "grep -r needle link_out",
    "cat *_link",
    # recursive searches that follow links
    "grep -R needle .",
    "grep --dereference-recursive needle .",
    "rg -L needle",
    "rg --follow needle",
    "find -L . -name x",
    "find . -follow",
    "du -L",
    "ls -L",
    "tree -l",
    "diff -r src other",
    # process listings
    "ps",
    "ps aux",
    "top -b -n1",
    "pgrep -a python",
    "pstree",
    # programs that are workspace content, whatever their name
    "./ls",
    "src/cat README.md",
    # package managers read workspace config that runs programs
    "python3 -m pip list",
    "npm list",
    "yarn --version",
    "cargo metadata",
    "go env",
]

SAFE = [
    "ls",
    "ls -la",
    "ls src",
    "cat README.md",
    "cat inner_link/app.py",
    "grep -r TODO .",
    "grep -rn needle src",
    "rg needle",
    "rg -n needle src",
    "head -n 5 README.md",
    "wc -l src/app.py",
    "echo hi",
    "pwd",
    "find . -name '*.py'",
    "ls | wc -l",
    "cat README.md | sort | uniq -c",
    "tree",
    "env",
    "printenv",
    "sort README.md",
    "diff README.md src/app.py",
    "git --version",
    "python3 --version",
    "stat README.md",
    "du -sh src",
    "echo x > /dev/null",
    "ls 2>&1",
    "md5sum README.md",
    "cat src/*.py",
    "timeout 5 cat README.md",
]


@pytest.fixture
def workspace(tmp_path: Path) -> WorkspaceFileAPI:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# readme\nneedle\n")
    (root / "src" / "app.py").write_text("print('hi')\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    os.symlink("/etc", root / "link_out")
    os.symlink("/etc/passwd", root / "passwd_link")
    os.symlink("src", root / "inner_link")  # inside: fine to follow
    return WorkspaceFileAPI(root)


def test_the_corpus_is_large() -> None:
    assert len(NOT_SAFE) >= 60 and len(SAFE) >= 20
    assert not set(NOT_SAFE) & set(SAFE)


@pytest.mark.parametrize("command", NOT_SAFE)
def test_not_safe(command: str, workspace: WorkspaceFileAPI) -> None:
    result = rate_command(command, workspace=workspace.workspace_root)
    assert result.blocked == [], command
    assert result.rating is not CallRating.SAFE, command


@pytest.mark.parametrize("command", SAFE)
def test_stays_safe(command: str, workspace: WorkspaceFileAPI) -> None:
    result = rate_command(command, workspace=workspace.workspace_root)
    assert result.blocked == [], command
    assert result.rating is CallRating.SAFE, command


def test_env_entries_lift_every_safe_command(workspace: WorkspaceFileAPI) -> None:
    for command in SAFE[:5]:
        result = rate_command(command, workspace=workspace.workspace_root, env_names=["HOME"])
        assert result.rating is CallRating.DEV, command


def test_a_symlink_swapped_in_changes_the_rating(workspace: WorkspaceFileAPI) -> None:
    root = Path(workspace.workspace_root)
    assert rate_command("cat notes", workspace=str(root)).rating is CallRating.SAFE
    os.symlink("/etc/hostname", root / "notes")
    assert rate_command("cat notes", workspace=str(root)).rating is CallRating.DANGEROUS


class DryShell(ShellTool):
    """The real shell's hooks (rate, preview, scope) with an execute that
    starts nothing: this file tests the routing, not the running."""

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(f"would run {input['command']}")


class DenyingPublisher:
    """Records events; answers every confirmation request with a deny, at
    once, through the dispatcher's real broker."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.dispatcher: ToolDispatcher | None = None

    def publish(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None:
        self.events.append((type, dict(data)))
        if type == "tool.confirmation_requested" and self.dispatcher is not None:
            broker, request_id = self.dispatcher.broker, data["request_id"]
            asyncio.get_running_loop().call_soon(
                lambda: broker.resolve(request_id, "deny", resolved_by="test")
            )

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        data = payload.model_dump(mode="json", exclude_unset=True)
        self.publish(str(payload.event_type), data, session_id=session_id, turn_id=turn_id)

    def asked(self) -> set[str]:
        return {d["tool_use_id"] for t, d in self.events if t == "tool.confirmation_requested"}

    def ran(self) -> set[str]:
        return {d["tool_use_id"] for t, d in self.events if t == "tool.called"}


async def _route(workspace: WorkspaceFileAPI, sandboxed: bool) -> tuple[set[str], set[str]]:
    """Dispatch every corpus command in one session; (asked, ran unasked) ids."""
    publisher = DenyingPublisher()
    dispatcher = ToolDispatcher(publisher)
    publisher.dispatcher = dispatcher
    dispatcher.register(DryShell)
    sandbox = Sandbox(SandboxConfig("/usr/bin/bwrap"), workspace.workspace_root)
    session = DispatchSession(
        "s", workspace, policy=RulePolicy(), sandbox=sandbox if sandboxed else None
    )
    calls = [
        ToolUseBlock(id=f"c{i}", name="shell", input={"command": c})
        for i, c in enumerate(SAFE + NOT_SAFE)
    ]
    results = await dispatcher.dispatch_all(calls, session, turn_id="t")
    assert len(results) == len(calls)
    asked = publisher.asked()
    return asked, publisher.ran() - asked


async def test_with_a_sandbox_safe_runs_unasked_and_the_rest_asks(
    workspace: WorkspaceFileAPI,
) -> None:
    asked, unasked = await _route(workspace, sandboxed=True)
    safe_ids = {f"c{i}" for i in range(len(SAFE))}
    other_ids = {f"c{i}" for i in range(len(SAFE), len(SAFE) + len(NOT_SAFE))}
    assert unasked == safe_ids
    assert asked == other_ids


async def test_without_a_sandbox_everything_asks(workspace: WorkspaceFileAPI) -> None:
    asked, unasked = await _route(workspace, sandboxed=False)
    assert unasked == set()
    assert len(asked) == len(SAFE) + len(NOT_SAFE)
