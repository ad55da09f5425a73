"""Session creation and deletion, over the real HTTP API of a real server
with the sandbox on.

- A workspace that is, contains or lies inside a path the sandbox hides
  (``workspaces.shell.sandbox_hide``: a credentials folder, or ``$HOME``
  holding ``~/.ssh``) is refused at creation with 422 naming that path, also
  through a symbolic link; a neighbour of it is fine.
- Deleting a session closes its workspace's root descriptor, even while
  something still references the workspace (so it does not wait for the
  garbage collector), and the server's descriptor count does not grow over
  50 create/use/delete cycles.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from server.app import create_app
from server.auth import Principal, TokenRegistry
from server.config import load_config
from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.server.support import new_session

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
CYCLES = 50


class Layout:
    """A fake home with a credentials folder, a configured secret folder, and
    a place for ordinary workspaces."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.home = self.root / "home"
        self.ssh = self.home / ".ssh"  # hidden by the default "~/.ssh"
        self.secrets = self.root / "vault" / "secrets"  # hidden by the config
        self.work = self.root / "work"
        for folder in (self.ssh / "keys", self.secrets / "inner", self.work / "ws"):
            folder.mkdir(parents=True)
        os.symlink(self.secrets, self.work / "link-to-secrets")


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    root = Path(tempfile.mkdtemp(prefix="toolrelay-hidden-"))
    try:
        yield Layout(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sandboxed(layout: Layout) -> Iterator[ServerProcess]:
    cfg = config(
        # sandbox: true, so the test fails loudly rather than testing nothing.
        workspaces={"shell": {"sandbox": True, "sandbox_hide": ["~/.ssh", str(layout.secrets)]}},
    )
    srv = ServerProcess(
        layout.root / "server", config=cfg, env={**DEBUG_ENV, "HOME": str(layout.home)}
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _refused(http: httpx2.AsyncClient, workspace: Path, hidden: Path) -> None:
    response = await http.post("/sessions", json={"workspace": str(workspace)})
    assert response.status_code == 422, (workspace, response.text)
    error = response.json()["error"]
    assert error["field"] == "workspace", error
    assert str(hidden) in error["message"], error


@needs_bwrap
async def test_workspaces_touching_a_hidden_path_are_refused_at_creation(
    sandboxed: ServerProcess, layout: Layout
) -> None:
    async with sandboxed.client() as http:
        await _refused(http, layout.ssh, layout.ssh)  # is it
        await _refused(http, layout.ssh / "keys", layout.ssh)  # lies inside it
        await _refused(http, layout.home, layout.ssh)  # $HOME, holding ~/.ssh
        await _refused(http, layout.secrets, layout.secrets)
        await _refused(http, layout.secrets / "inner", layout.secrets)
        await _refused(http, layout.secrets.parent, layout.secrets)
        await _refused(http, layout.work / "link-to-secrets", layout.secrets)
        # A neighbour is an ordinary workspace, and its sandbox starts.
        session_id = await new_session(http, layout.work / "ws")
        tools = await http.get(f"/sessions/{session_id}/tools")
        assert tools.status_code == 200, tools.text


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@needs_bwrap
async def test_deleting_sessions_releases_their_workspace_descriptors(
    sandboxed: ServerProcess, layout: Layout
) -> None:
    workspace = layout.work / "ws"

    async def cycle(http: httpx2.AsyncClient) -> None:
        session_id = await new_session(http, workspace)
        # Building the session's dispatcher opens the workspace root descriptor.
        tools = await http.get(f"/sessions/{session_id}/tools")
        assert tools.status_code == 200, tools.text
        deleted = await http.delete(f"/sessions/{session_id}")
        assert deleted.status_code == 204, deleted.text

    async with sandboxed.client() as http:
        for _ in range(3):  # warm-up: lazily opened files, the HTTP connection
            await cycle(http)
        before = _fd_count(sandboxed.pid)
        for _ in range(CYCLES):
            await cycle(http)
        after = _fd_count(sandboxed.pid)
    # A leak costs one descriptor per cycle; a couple of spare ones for
    # descriptors that come and go (a log rotation, a socket) are noise.
    assert after <= before + 2, (before, after)


async def test_delete_closes_the_workspace_descriptor_at_once(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    cfg = load_config(
        None,
        env={"TOOLRELAY_TOKEN": "t" * 24},
        overrides={
            "server.data_dir": str(tmp_path / "data"),
            "server.port": 0,
            "workspaces.shell.sandbox": False,
        },
    )
    runtime = create_app(cfg, TokenRegistry(cfg.auth.tokens)).state.runtime
    await runtime.start()
    try:
        admin = Principal(token_name="admin", role="admin", client_name="test")
        record = await runtime.sessions.create(admin, workspace=str(workspace))
        ws = runtime.sessions.dispatch_session(record).workspace
        assert ws._finalizer.alive  # the root descriptor is open
        await runtime.sessions.delete(admin, record.id)
        # Closed by the delete itself, though this test still holds the object.
        assert not ws._finalizer.alive
    finally:
        await runtime.stop()
