"""Attack: a user token's approved shell command reads another user's files.

Two ``user`` tokens with disjoint ``allowed_roots`` share one server. Before
this, the sandbox showed the whole host read-only, so alice's command (run
after alice approved it) could ``cat`` bob's files and ``ls`` bob's root, and
the workspace of any other live session. Now a user token's sandbox hides
every root that is not its own and every other session's workspace; an
admin token's sandbox is unchanged.

The roots live under /var/tmp, never /tmp: the sandbox's /tmp is a fresh
tmpfs, where bob's files would be invisible whatever the isolation did.
Real server subprocess, real second token, real bubblewrap.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.harness import ServerProcess
from tests.server.support import new_session, result_text, start_turn, use

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

ALICE = "alice-" + secrets.token_hex(16)
BOB = "bob-" + secrets.token_hex(16)
MARK = "BOB-SECRET-" + secrets.token_hex(8)
ADMIN_MARK = "ADMIN-SECRET-" + secrets.token_hex(8)
WAIT = 30.0


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="toolrelay-iso-") as folder:
        root = Path(folder).resolve()
        for name in ("alice", "bob", "admin-ws"):
            (root / name).mkdir()
        (root / "bob" / "secret.txt").write_text(MARK + "\n", encoding="utf-8")
        (root / "bob" / "ws").mkdir()
        (root / "alice" / "ws").mkdir()
        (root / "admin-ws" / "notes.txt").write_text(ADMIN_MARK + "\n", encoding="utf-8")
        yield root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, place: Path) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        "auth": {
            "tokens": [
                {
                    "name": "alice",
                    "token": ALICE,
                    "role": "user",
                    "allowed_roots": [str(place / "alice")],
                },
                {
                    "name": "bob",
                    "token": BOB,
                    "role": "user",
                    "allowed_roots": [str(place / "bob")],
                },
            ]
        },
        # Every shell command asks: each attack below is one alice approved.
        "policy": {"default": {"execute": "prompt"}},
    }
    srv = ServerProcess(tmp_path_factory.mktemp("isolation"), config=config)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _approved_shell(http: httpx2.AsyncClient, sid: str, command: str) -> str:
    """Run ``command`` in session ``sid``, approving every confirmation it
    asks for; the tool result's text."""
    tid = await start_turn(http, sid, use("t1", "shell", command=command))
    async with asyncio.timeout(WAIT):
        while True:
            turn = (await http.get(f"/sessions/{sid}/turns/{tid}")).json()
            if turn["status"] != "running":
                break
            pending = (await http.get(f"/sessions/{sid}/confirmations")).json()["confirmations"]
            for request in pending:
                await http.post(
                    f"/sessions/{sid}/turns/{tid}/confirmations/{request['request_id']}",
                    json={"decision": "allow"},
                )
            await asyncio.sleep(0.05)
    assert turn["status"] == "completed", turn
    return "\n".join(result_text(r) for r in turn["results"])


def _attack(place: Path) -> str:
    bob = place / "bob"
    return (
        f"cat {bob}/secret.txt; cat {place}/admin-ws/notes.txt; "
        f"echo LS-BEGIN; ls -1a {bob} {place}/admin-ws 2>/dev/null; echo LS-END; "
        f"grep -r SECRET {place} 2>/dev/null; echo DONE"
    )


async def test_a_user_cannot_read_another_users_root_or_session(
    server: ServerProcess, place: Path
) -> None:
    # A live admin session elsewhere, and bob's own session in his root.
    async with server.client("root") as admin:
        await new_session(admin, place / "admin-ws")
    async with server.client("bob", token=BOB) as bob:
        await new_session(bob, place / "bob" / "ws")
    async with server.client("alice", token=ALICE) as alice:
        sid = await new_session(alice, place / "alice" / "ws")
        text = await _approved_shell(alice, sid, _attack(place))
    assert "DONE" in text, text  # the command ran to its end
    assert MARK not in text and ADMIN_MARK not in text, text
    listing = text.split("LS-BEGIN", 1)[1].split("LS-END", 1)[0]
    assert "secret.txt" not in listing and "notes.txt" not in listing, text


async def test_bob_reads_his_own_root(server: ServerProcess, place: Path) -> None:
    """Control: the file is readable to its owner, so the attack above could
    have found it."""
    async with server.client("bob", token=BOB) as bob:
        sid = await new_session(bob, place / "bob" / "ws")
        text = await _approved_shell(bob, sid, f"cat {place}/bob/secret.txt")
    assert MARK in text, text


async def test_an_admin_session_is_unchanged(server: ServerProcess, place: Path) -> None:
    async with server.client("root") as admin:
        sid = await new_session(admin, place / "admin-ws")
        text = await _approved_shell(admin, sid, f"cat {place}/bob/secret.txt")
    assert MARK in text, text
