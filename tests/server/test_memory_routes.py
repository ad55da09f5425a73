"""Memory and code tools through a real server: a memory kept in one session is
found in a later session of the same workspace (and by nobody else), every
change is an event on the session's stream, and GET /memory / DELETE
/memory/{id} show and remove memories with user and admin tokens."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.harness import ServerProcess
from tests.server.conftest import BASE_CONFIG, DEBUG_ENV
from tests.server.support import Stream, new_session, result_text, start_turn, wait_turn

ALICE = "alice-mem-" + secrets.token_hex(12)
BOB = "bob-mem-" + secrets.token_hex(12)
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "sample_repo"


@pytest.fixture(scope="module")
def mem_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        **BASE_CONFIG,
        "workspaces": {"allowed_roots": [str(tmp_path_factory.getbasetemp())]},
        "auth": {
            "tokens": [
                {"name": "alice", "token": ALICE, "role": "user"},
                {"name": "bob", "token": BOB, "role": "user"},
            ]
        },
    }
    # The data dir must lie outside every allowed root.
    root = Path(tempfile.mkdtemp(prefix="toolrelay-mem-"))
    srv = ServerProcess(root, config=config, env=DEBUG_ENV).start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _call(http: httpx2.AsyncClient, sid: str, tool: str, **input: Any) -> dict[str, Any]:
    call = {"id": "t_" + secrets.token_hex(4), "name": tool, "input": input}
    tid = await start_turn(http, sid, call)
    turn = await wait_turn(http, sid, tid)
    assert turn["status"] == "completed", turn
    result: dict[str, Any] = turn["results"][0]
    return result


async def test_a_memory_outlives_its_session_and_stays_with_its_owner(
    mem_server: ServerProcess, workspace: Path
) -> None:
    srv = mem_server
    async with (
        srv.client("alice-cli", token=ALICE) as alice,
        srv.client("bob-cli", token=BOB) as bob,
        srv.client("admin-cli") as admin,
    ):
        first = await new_session(alice, workspace)
        async with await Stream.open(
            srv.ws_url(f"/sessions/{first}/events", after=0, token=False),
            additional_headers={"Authorization": f"Bearer {ALICE}"},
        ) as stream:
            # Memory tools declare side effects "none": no confirmation is asked.
            added = await _call(
                alice, first, "memory_add", content="Run the linter with ruff check .",
                tags=["lint"],
            )  # fmt: skip
            assert added["is_error"] is False
            event = await stream.until("memory.added")
            mid = event["data"]["memory_id"]
            assert mid in result_text(added)
            assert event["data"]["owner"] == "alice" and event["data"]["tags"] == ["lint"]
            assert stream.of("tool.confirmation_requested") == []
        # A later session of the same workspace and owner finds it.
        later = await new_session(alice, workspace)
        found = await _call(alice, later, "memory_search", query="linter")
        assert mid in result_text(found)
        # Bob, same workspace: nothing.
        bobs = await new_session(bob, workspace)
        assert "no memory matches" in result_text(
            await _call(bob, bobs, "memory_search", query="linter")
        )
        await _call(bob, bobs, "memory_add", content="Bob's own note")

        # GET /memory: a user sees only its own; the admin sees both (or one owner's).
        mine = (await alice.get("/memory", params={"workspace": str(workspace)})).json()
        assert [m["id"] for m in mine["memories"]] == [mid]
        assert mine["memories"][0]["content"] == "Run the linter with ruff check ."
        assert (await alice.get("/memory", params={"owner": "bob"})).json()["memories"][0][
            "owner"
        ] == "alice"  # owner= is ignored for a user token
        everyone = (await admin.get("/memory", params={"workspace": str(workspace)})).json()
        assert sorted(m["owner"] for m in everyone["memories"]) == ["alice", "bob"]
        only_bob = (await admin.get("/memory", params={"owner": "bob"})).json()["memories"]
        assert [m["owner"] for m in only_bob] == ["bob"]
        elsewhere = (await alice.get("/memory", params={"workspace": "/nonexistent"})).json()
        assert elsewhere["memories"] == []

        # DELETE: not another user's (404, as if it did not exist); one's own; admin any.
        assert (await bob.delete(f"/memory/{mid}")).status_code == 404
        async with await Stream.open(
            srv.ws_url(f"/sessions/{first}/events", token=False),
            additional_headers={"Authorization": f"Bearer {ALICE}"},
        ) as stream:
            assert (await alice.delete(f"/memory/{mid}")).status_code == 204
            deleted = await stream.until("memory.deleted")
            assert deleted["data"]["memory_id"] == mid
            assert deleted["data"]["deleted_by"] == "alice"
        assert (await alice.delete(f"/memory/{mid}")).status_code == 404
        bob_mid = only_bob[0]["id"]
        assert (await admin.delete(f"/memory/{bob_mid}")).status_code == 204
        assert (await admin.get("/memory")).json()["memories"] == []
        assert (await httpx2.AsyncClient(base_url=srv.base_url).get("/memory")).status_code == 401


async def test_code_tools_in_a_session_on_the_sample_repository(
    mem_server: ServerProcess, tmp_path: Path
) -> None:
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo)
    async with mem_server.client("alice-cli", token=ALICE) as alice:
        sid = await new_session(alice, repo)
        tools = {t["name"]: t for t in (await alice.get(f"/sessions/{sid}/tools")).json()["tools"]}
        for name in ("list_symbols", "find_symbol", "find_references", "dependency_graph",
                     "retrieve_doc", "memory_add", "memory_search"):  # fmt: skip
            assert name in tools, name
        assert tools["memory_add"]["side_effects"] == "none"
        found = await _call(alice, sid, "find_symbol", name="UserService")
        assert "python/app/service.py:4 class UserService" in result_text(found)
        refs = await _call(alice, sid, "find_references", name="NewStore")
        assert "go/main.go:10" in result_text(refs)
        doc = await _call(alice, sid, "retrieve_doc", query="where are values stored")
        assert "docs/architecture.md" in result_text(doc)


async def test_an_edit_through_the_server_shows_in_the_next_code_query(
    mem_server: ServerProcess, tmp_path: Path
) -> None:
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo)
    async with mem_server.client("admin-cli") as admin:
        created = await admin.post(
            "/sessions",
            json={"workspace": str(repo), "policy": {"per_tool": {"patch_file": "auto"}}},
        )
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        before = await _call(admin, sid, "find_symbol", name="make_user")
        assert "python/app/models.py:12 function make_user" in result_text(before)
        patched = await _call(
            admin, sid, "patch_file", path="python/app/models.py",
            old_str="def make_user(", new_str="def build_user(",
        )  # fmt: skip
        assert patched["is_error"] is False
        assert "no definition" in result_text(
            await _call(admin, sid, "find_symbol", name="make_user")
        )
        after = await _call(admin, sid, "find_symbol", name="build_user")
        assert "python/app/models.py:12 function build_user" in result_text(after)
