"""Attack: hooks, quality gates and stdio MCP servers running workspace
content unsandboxed, and unasked, because bubblewrap cannot run here (the
usual case in a container under Docker's default seccomp profile).

Before this, the server started anyway: a repository's ``lint.sh`` run by a
hook had the whole host, writable. Now start-up stops with one line and
exit code 2 (a configuration error) unless the admin set
``workspaces.shell.sandbox: false`` knowingly. "Cannot run" is real: the
real CLI in a subprocess whose PATH finds a ``bwrap`` that fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import REPO_ROOT, ServerProcess

RUN_TIMEOUT = 60
HOOK = {"post_tool_use": [{"name": "lint", "command": "sh ./lint.sh", "matcher": "write_file"}]}
GATE = {"quality_gates": [{"name": "tests", "command": "sh ./test.sh"}]}
MCP = {"files": {"command": sys.executable, "args": ["-c", "pass"]}}


@pytest.fixture
def broken_path(tmp_path: Path) -> str:
    """A PATH whose first ``bwrap`` cannot create a sandbox."""
    folder = tmp_path / "bin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', os.defpath)}"


def _serve(tmp_path: Path, config: dict[str, Any], path: str) -> subprocess.CompletedProcess[str]:
    srv = ServerProcess(tmp_path / "srv", config=config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLRELAY_")}
    env.update({"PATH": path, "PYTHONPATH": str(REPO_ROOT), "TOOLRELAY_TOKEN": srv.token})
    return subprocess.run(
        srv.command(),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize(
    "config",
    [{"hooks": HOOK}, {"guardrails": GATE}, {"mcp_servers": MCP}],
    ids=["hooks", "quality_gates", "stdio_mcp"],
)
def test_start_refuses_unasked_runners_without_a_sandbox(
    tmp_path: Path, broken_path: str, config: dict[str, Any]
) -> None:
    done = _serve(tmp_path, config, broken_path)
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "sandbox cannot run here" in lines[0]
    assert "workspaces.shell.sandbox: false" in lines[0]
    assert "toolrelay is serving" not in done.stdout


def test_sandbox_false_is_the_admins_knowing_choice(tmp_path: Path, broken_path: str) -> None:
    config = {"hooks": HOOK, "workspaces": {"shell": {"sandbox": False}}}
    srv = ServerProcess(tmp_path / "srv", config=config, env={"PATH": broken_path})
    srv.start()
    try:
        assert "Sandbox:   off (turned off by workspaces.shell.sandbox: false)" in srv.stdout()
    finally:
        srv.stop()


def test_without_unasked_runners_the_server_starts_sandbox_off(
    tmp_path: Path, broken_path: str
) -> None:
    """Shell commands then each ask for a confirmation: nothing runs unasked."""
    srv = ServerProcess(tmp_path / "srv", env={"PATH": broken_path})
    srv.start()
    try:
        assert "Sandbox:   off (bwrap failed" in srv.stdout()
    finally:
        srv.stop()
