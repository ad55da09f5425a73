"""Confinement of tokens, attacked over the real HTTP API of real servers.

- A user token opens sessions only under its allowed roots: not on ``/``, the
  config file's folder, the data dir, a path outside, nor through a symbolic
  link inside its root that points outside; a user token with no roots opens
  none, and the start-up log names it.
- Nobody (admin included) opens a session on ``/``, on a folder holding the
  data dir or a config file, or inside the data dir; a session stored before
  that rule gets no dispatcher.
- ``scripted:<path>`` models: a FIFO answers a clear 422 at once (and a FIFO
  swapped in later fails the turn, not the server), files outside the
  workspace and the scripts folder are refused, errors never quote the file.
- Tokens in every encoding of ``?token=`` are kept out of the access log.
- A child process of a shell call cannot see ``TOOLRELAY_TOKEN`` or a provider
  key, not even in ``/proc/<server>/environ``; the adapters still work.

The servers' own files live in a temporary folder outside pytest's base temp
dir, so that no test workspace can ever hold them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.fakes.fake_providers import FakeProviderServer, Reply
from tests.fakes.fixtures import fake_provider, fake_provider_server  # noqa: F401
from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.server.support import WAIT, Stream, new_session, start_turn, use, wait_turn

ALICE = "alice-" + secrets.token_hex(16)
NOBODY = "nobody-" + secrets.token_hex(16)
SECRET_LINE = "password: do-not-quote-me-0123456789"


class Layout:
    """Folders of one confined server: its files, a user's root, places outside."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.server_root = self.root / "cfg"  # holds config.yaml and the logs
        self.data_dir = self.root / "state" / "data"
        self.alice = self.root / "alice"
        self.workspace = self.alice / "ws"
        self.outside = self.root / "outside"
        self.scripts = self.root / "scripts"
        for folder in (self.workspace, self.outside, self.scripts):
            folder.mkdir(parents=True)
        (self.outside / "s.yaml").write_text("- outside\n")
        (self.scripts / "hello.yaml").write_text("- hello from the scripts folder\n")
        os.symlink(self.outside, self.alice / "link-out")
        os.symlink(self.server_root, self.outside / "link-to-cfg")

    @property
    def config_file(self) -> Path:
        return self.server_root / "config.yaml"


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    root = Path(tempfile.mkdtemp(prefix="toolrelay-confine-"))
    try:
        yield Layout(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def confined(layout: Layout) -> Iterator[ServerProcess]:
    tokens = [
        {"name": "alice", "token": ALICE, "role": "user", "allowed_roots": [str(layout.alice)]},
        {"name": "nobody", "token": NOBODY, "role": "user"},
    ]
    cfg = config(
        auth={"tokens": tokens},
        model={"scripts_dir": str(layout.scripts)},
        workspaces={"shell": {"enabled": False}},
    )
    srv = ServerProcess(
        layout.server_root,
        config=cfg,
        env=DEBUG_ENV,
        extra_args=("--data-dir", str(layout.data_dir)),
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _refused(http: httpx2.AsyncClient, workspace: str, status: int, **body: Any) -> str:
    response = await http.post("/sessions", json={"workspace": workspace, **body})
    assert response.status_code == status, (workspace, body, response.text)
    error = response.json()["error"]
    assert error["field"] == ("model" if "model" in body else "workspace"), error
    message: str = error["message"]
    return message


async def test_a_user_token_stays_inside_its_roots(confined: ServerProcess, layout: Layout) -> None:
    async with confined.client(token=ALICE) as alice, confined.client(token=NOBODY) as nobody:
        await new_session(alice, layout.workspace)
        for target in (
            "/",
            str(layout.server_root),  # the config file's folder
            str(layout.config_file),
            str(layout.data_dir),
            str(layout.data_dir.parent),
            str(layout.outside),
            str(layout.alice / "link-out"),  # inside the root by name, outside for real
            str(layout.alice / "link-out" / "link-to-cfg"),
            str(layout.alice / ".." / "outside"),
            "/no/such/dir",  # refused before existence is checked: nothing learned
        ):
            message = await _refused(alice, target, 403)
            assert "outside the allowed roots" in message and "allowed_roots" in message
            # A user is not told where the server keeps its secrets.
            assert "data dir" not in message and "config file" not in message

        message = await _refused(nobody, str(layout.workspace), 403)
        assert "'nobody' has no allowed roots" in message
        assert "auth.tokens[].allowed_roots" in message and "workspaces.allowed_roots" in message
        assert (await nobody.get("/sessions")).json()["sessions"] == []
    log = confined.stderr()
    warning = next(line for line in log.splitlines() if "cannot create sessions" in line)
    assert "nobody" in warning and "alice" not in warning


async def test_nobody_opens_a_session_on_the_servers_secrets(
    confined: ServerProcess, layout: Layout
) -> None:
    inner = layout.data_dir / "inner"
    inner.mkdir(exist_ok=True)
    async with confined.client() as admin:
        assert "filesystem root /" in await _refused(admin, "/", 422)
        cases = {
            str(layout.root): "contains",  # holds both
            str(layout.server_root): f"contains a config file of the server ({layout.config_file})",
            str(layout.outside / "link-to-cfg"): f"({layout.config_file})",
            str(layout.data_dir.parent): f"contains the server's data dir ({layout.data_dir})",
            str(layout.data_dir): f"({layout.data_dir})",
            str(inner): f"lies inside the server's data dir ({layout.data_dir})",
        }
        for target, expected in cases.items():
            message = await _refused(admin, target, 422)
            assert expected in message, (target, message)
        # An admin token is not confined otherwise.
        await new_session(admin, layout.outside)


async def test_scripted_models_read_only_safe_files(
    confined: ServerProcess, layout: Layout
) -> None:
    ws = layout.workspace
    fifo = ws / "pipe.yaml"
    if not fifo.exists():
        os.mkfifo(fifo)
    (ws / "bad.yaml").write_text(f"- fine\n{SECRET_LINE}\n")
    (ws / "shape.yaml").write_text(f"- {{content: [], {SECRET_LINE}}}\n")
    (ws / "big.yaml").write_bytes(b"- " + b"x" * (1024 * 1024 + 1) + b"\n")
    link = ws / "escape.yaml"
    if not link.exists():
        os.symlink(layout.outside / "s.yaml", link)
    async with confined.client(token=ALICE) as alice, confined.client() as admin:
        # A FIFO nobody writes to: a blocking open would hang the server.
        creating = asyncio.create_task(
            alice.post("/sessions", json={"workspace": str(ws), "model": f"scripted:{fifo}"})
        )
        assert (await admin.get("/healthz")).status_code == 200
        response = await creating
        assert response.status_code == 422, response.text
        assert "not a regular file (it is a FIFO)" in response.json()["error"]["message"]

        for script, expected in (
            (str(layout.outside / "s.yaml"), "outside the session's workspace or model.scripts"),
            (str(link), "outside the session's workspace"),  # the link is resolved
            ("../../outside/s.yaml", "outside the session's workspace"),
            (str(ws / "bad.yaml"), "line 2, column 1"),
            (str(ws / "shape.yaml"), "reply 1: a key that is not allowed here"),
            (str(ws / "big.yaml"), f"limit of {1024 * 1024} bytes"),
            (str(ws / "missing.yaml"), "No such file"),
        ):
            message = await _refused(alice, str(ws), 422, model=f"scripted:{script}")
            assert expected in message, (script, message)
            assert "do-not-quote-me" not in message and "password" not in message

        # From the scripts folder, or inside the workspace (relative: from its root).
        await new_session(alice, ws, model=f"scripted:{layout.scripts / 'hello.yaml'}")
        (ws / "play.yaml").write_text("- hello from the workspace\n")
        sid = await new_session(alice, ws, model="scripted:play.yaml")
        session = (await alice.get(f"/sessions/{sid}")).json()
        assert session["model"] == f"scripted:{ws / 'play.yaml'}"
        turn = await _message_turn(alice, sid, "hi")
        assert turn["status"] == "completed", turn
        texts = await _assistant_texts(alice, sid)
        assert texts == ["hello from the workspace"]

        # A FIFO swapped in after the session was created fails that turn only.
        (ws / "play.yaml").unlink()
        os.mkfifo(ws / "play.yaml")
        turn = await _message_turn(alice, sid, "again")
        assert turn["status"] == "failed" and turn["reason"] == "model_error", turn
        url = confined.ws_url(f"/sessions/{sid}/events", after=0)
        async with await Stream.open(url, after=0, proxy=None) as stream:
            failed = await stream.until("turn.failed", lambda e: e["turn_id"] == turn["id"])
        assert "not a regular file (it is a FIFO)" in failed["data"]["message"]
        assert (await admin.get("/healthz")).status_code == 200


async def _message_turn(http: httpx2.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    response = await http.post(f"/sessions/{sid}/turns", json={"message": text})
    assert response.status_code == 202, response.text
    return await wait_turn(http, sid, response.json()["turn_id"])


async def _assistant_texts(http: httpx2.AsyncClient, sid: str) -> list[str]:
    messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    return [
        "".join(b.get("text", "") for b in m["content"])
        for m in messages
        if m["role"] == "assistant"
    ]


async def test_encoded_query_tokens_never_reach_the_access_log(confined: ServerProcess) -> None:
    token = confined.token
    # The server decodes the query as parse_qs does: %74oken is "token", accepted.
    accepted = f"{confined.ws_base}/events?after=0&%74oken={token}"
    async with connect(accepted, open_timeout=WAIT, proxy=None):
        pass
    for query in (f"TOKEN={token}", f"ToKeN={token}&token=", f"%54oken={token}"):
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"{confined.ws_base}/events?{query}", open_timeout=WAIT, proxy=None)
        assert refused.value.response.status_code == 401
    async with httpx2.AsyncClient(base_url=confined.base_url, timeout=WAIT) as anon:
        for query in (
            f"token={token}",
            f"%74%6f%6b%65%6e={token}",
            f"x=1&token=a&token={token}",
            f"t={token.replace('-', '%2D')}",
            f"to%6Ben={token[:8]}+{token[8:]}",
        ):
            assert (await anon.get(f"/healthz?{query}&marker=1")).status_code == 200
    # Each request is logged once its answer went out; wait (bounded) for the last.
    async with asyncio.timeout(WAIT):
        while confined.stderr().count("marker=1") < 5:  # noqa: ASYNC110 (a file, not an event)
            await asyncio.sleep(0.02)
    log = confined.stderr()
    assert "%74oken=***" in log and "%74%6f%6b%65%6e=***" in log
    assert token not in log and token[8:] not in log
    assert token.replace("-", "%2D") not in log


async def test_children_never_see_the_token_or_provider_keys(
    tmp_path: Path,
    fake_provider: FakeProviderServer,  # noqa: F811
) -> None:
    root = Path(tempfile.mkdtemp(prefix="toolrelay-env-"))
    key = "sk-provider-" + secrets.token_hex(12)
    other = "other-" + secrets.token_hex(12)
    cfg = config(
        policy={"preset": "yolo"},
        # Unsandboxed on purpose: the worst case, where a child could read the
        # server's /proc entry.
        workspaces={"shell": {"sandbox": False}},
    )
    env = {
        **DEBUG_ENV,
        **fake_provider.env(api_key=key),
        "SOMETOOL_API_KEY": other,
    }
    srv = ServerProcess(root / "srv", config=cfg, env=env)
    try:
        srv.start()
        secrets_ = (srv.token, key, other)
        environ = await asyncio.to_thread(Path(f"/proc/{srv.pid}/environ").read_bytes)
        for value in secrets_:
            assert value.encode() not in environ
        assert b"TOOLRELAY_EVENT_DEBUG=1" in environ  # the rest is untouched
        workspace = tmp_path / "ws"
        workspace.mkdir()
        async with srv.client() as http:
            sid = await new_session(http, workspace, model="anthropic/claude-fake-1")
            command = f"env; cat /proc/{srv.pid}/environ | tr '\\0' '\\n'; cat /proc/$PPID/environ"
            tid = await start_turn(http, sid, use("e", "shell", command=command))
            turn = await wait_turn(http, sid, tid)
            assert turn["status"] == "completed", turn
            output = str(turn["results"])
            assert "TOOLRELAY_EVENT_DEBUG=1" in output  # it did read the server's environ
            for value in secrets_:
                assert value not in output

            # The adapters kept the key they need.
            fake_provider.plan(Reply.text("keys still work"))
            turn = await _message_turn(http, sid, "hello")
            assert turn["status"] == "completed", turn
            (sent,) = fake_provider.requests
            # (x-api-key or a bearer header, depending on the SDK version)
            assert any(key in value for value in sent.headers.values())
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)


async def test_a_stored_session_on_a_protected_path_gets_no_dispatcher(tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(prefix="toolrelay-stored-"))
    try:
        project = root / "project"
        project.mkdir()
        srv = ServerProcess(root / "srv", config=config(), env=DEBUG_ENV)
        srv.start()
        try:
            async with srv.client() as http:
                sid = await new_session(http, project)
                tid = await start_turn(http, sid, use("e", "rl_echo", text="before"))
                assert (await wait_turn(http, sid, tid))["status"] == "completed"
            # Restarted with its config file inside the session's workspace (as an
            # older server allowed): the session stays visible, but cannot run.
            assert srv.config_path is not None
            moved = project / "config.yaml"
            shutil.copy(srv.config_path, moved)
            srv.config_path = moved
            srv.restart()
            async with srv.client() as http:
                assert (await http.get(f"/sessions/{sid}")).status_code == 200
                for method, path, body in (
                    ("GET", f"/sessions/{sid}/tools", None),
                    ("POST", f"/sessions/{sid}/turns", {"tool_uses": [use("e", "rl_echo")]}),
                ):
                    response = await http.request(method, path, json=body)
                    assert response.status_code == 409, response.text
                    error = response.json()["error"]
                    assert error["code"] == "workspace_forbidden"
                    assert f"contains a config file of the server ({moved})" in error["message"]
                assert (await http.delete(f"/sessions/{sid}")).status_code == 204
        finally:
            srv.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
