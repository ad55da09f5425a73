"""The memory tools and their store: add, search (FTS5 bm25), replace,
consolidate, delete; scoping by workspace and owner; events; persistence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher import WorkspaceFileAPI
from dispatcher.errors import ToolError
from dispatcher.memory import MemoryNotFound, MemoryScope, MemoryStore
from dispatcher.memory.store import fts_query, jaccard
from dispatcher.tools.knowledge.memory import (
    MemoryAddTool,
    MemoryConsolidateTool,
    MemoryDeleteTool,
    MemoryReplaceTool,
    MemorySearchTool,
)
from protocol.payloads import Payload
from tests.dispatcher.tools.support import run_tool, text_of

Events = list[tuple[str, dict[str, Any], str | None]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    (tmp_path / "data").mkdir()
    s = MemoryStore.open(tmp_path / "data" / "memory.sqlite3")
    try:
        yield s
    finally:
        s.close()


class Session:
    """A session's view: its workspace, its owner's scope, the events it published."""

    def __init__(self, store: MemoryStore, ws: WorkspaceFileAPI, owner: str, sid: str) -> None:
        self.ws = ws
        self.events: Events = []
        self.scope = MemoryScope(store, ws.workspace_root, owner, sid, self._publish)

    def _publish(self, payload: Payload, turn_id: str | None) -> None:
        # Recorded as clients read it: the keys the publisher set.
        data = payload.model_dump(mode="json", exclude_unset=True)
        self.events.append((str(payload.event_type), data, turn_id))

    async def call(self, factory: Any, **input: Any) -> Any:
        options = {"memory": self.scope}
        return await run_tool(factory, input, self.ws, options=options)


@pytest.fixture
def ws(root: Path) -> WorkspaceFileAPI:
    return WorkspaceFileAPI(root)


async def test_add_search_replace_delete(store: MemoryStore, ws: WorkspaceFileAPI) -> None:
    s = Session(store, ws, "alice", "sess_1")
    added = await s.call(MemoryAddTool, content="Tests run with `pytest -q` from the repo root",
                         tags=["testing"])  # fmt: skip
    mid = added.data["id"]
    assert mid.startswith("mem_") and mid in text_of(added)
    await s.call(MemoryAddTool, content="The database migrations live in db/migrations")
    await s.call(MemoryAddTool, content="Deploys happen on Fridays; tests must pass first")

    found = await s.call(MemorySearchTool, query="how to run tests")
    ids = [r["id"] for r in found.data["results"]]
    assert ids[0] == mid  # two matching words (porter: run/tests) rank above one
    assert len(ids) == 2  # the migrations note matches no word
    scores = [r["score"] for r in found.data["results"]]
    assert scores == sorted(scores, reverse=True)

    await s.call(MemoryReplaceTool, id=mid, content="Tests run with `make test` (wraps pytest)")
    found = await s.call(MemorySearchTool, query="make")
    assert [r["id"] for r in found.data["results"]] == [mid]
    assert found.data["results"][0]["tags"] == ["testing"]  # kept when not given
    assert (await s.call(MemorySearchTool, query="-q")).data["results"] == []  # "q" is gone

    await s.call(MemoryDeleteTool, id=mid)
    assert (await s.call(MemorySearchTool, query="make")).data["results"] == []
    with pytest.raises(ToolError, match="no memory"):
        await s.call(MemoryDeleteTool, id=mid)

    kinds = [(t, d["memory_id"]) for t, d, _ in s.events if t != "memory.added"]
    assert kinds == [("memory.replaced", mid), ("memory.deleted", mid)]
    assert [t for t, _, _ in s.events].count("memory.added") == 3
    assert all(turn == "turn_1" for _, _, turn in s.events)
    replaced = next(d for t, d, _ in s.events if t == "memory.replaced")
    assert replaced["previous_preview"].startswith("Tests run with `pytest")


async def test_search_input_is_never_fts_syntax(store: MemoryStore, ws: WorkspaceFileAPI) -> None:
    s = Session(store, ws, "alice", "sess_1")
    await s.call(MemoryAddTool, content="NEAR AND OR NOT are words here")
    for query in ['"', "NEAR(", "content:x", "a OR", "*", "(((", "-"]:
        out = await s.call(MemorySearchTool, query=query)
        assert isinstance(out.data["results"], list)
    assert fts_query("  ") is None
    assert fts_query('say "hi"') == '"say" OR "hi"'


async def test_scoped_to_the_workspace_and_the_owner(
    store: MemoryStore, tmp_path: Path, ws: WorkspaceFileAPI
) -> None:
    other_root = tmp_path / "other"
    other_root.mkdir()
    alice = Session(store, ws, "alice", "sess_a")
    bob_same_ws = Session(store, ws, "bob", "sess_b")
    alice_other_ws = Session(store, WorkspaceFileAPI(other_root), "alice", "sess_c")
    mid = (await alice.call(MemoryAddTool, content="the secret build flag is FAST=1")).data["id"]
    for stranger in (bob_same_ws, alice_other_ws):
        assert (await stranger.call(MemorySearchTool, query="secret flag")).data["results"] == []
        with pytest.raises(ToolError, match="no memory"):
            await stranger.call(MemoryReplaceTool, id=mid, content="hijacked")
        with pytest.raises(ToolError, match="no memory"):
            await stranger.call(MemoryDeleteTool, id=mid)
        assert (await stranger.call(MemoryConsolidateTool)).data["merges"] == []
    assert store.get(mid).content == "the secret build flag is FAST=1"
    assert [m.id for m in store.memories(owner="alice")] == [mid]
    assert store.memories(owner="bob") == []


async def test_consolidate_merges_duplicates_and_near_duplicates(
    store: MemoryStore, ws: WorkspaceFileAPI
) -> None:
    s = Session(store, ws, "alice", "sess_1")

    async def add(content: str, *tags: str) -> str:
        out = await s.call(MemoryAddTool, content=content, tags=list(tags))
        mid: str = out.data["id"]
        return mid

    a = await add("Use ruff for linting.", "style")
    b = await add("use RUFF for linting", "tools")  # same words, other case/punctuation
    c = await add(
        "The API server listens on port 8765 by default and serves the dashboard", "server"
    )
    d = await add("The API server listens on port 8765 by default and serves the dashboard too")
    e = await add("Releases are tagged from main")
    out = await s.call(MemoryConsolidateTool)
    merges = {(m["kept"]["id"], tuple(m["merged_ids"]), m["reason"]) for m in out.data["merges"]}
    assert merges == {(a, (b,), "identical"), (c, (d,), "near_duplicate")}
    assert out.data["removed"] == 2
    kept_a = store.get(a)
    assert kept_a.tags == ("style", "tools")
    assert store.get(c).content.endswith("dashboard too")  # the longer text wins
    assert {m.id for m in store.memories(owner="alice")} == {a, c, e}
    (event,) = [d for t, d, _ in s.events if t == "memory.consolidated"]
    assert event["removed"] == 2 and len(event["merges"]) == 2
    # Nothing left to merge: no second event.
    again = await s.call(MemoryConsolidateTool)
    assert again.data["merges"] == [] and "nothing to merge" in text_of(again)
    assert [t for t, _, _ in s.events].count("memory.consolidated") == 1
    assert jaccard("a b c d e", "a b c d f") < 0.8 <= jaccard("a b c d e", "a b c d e")


async def test_memories_survive_reopening_the_store(tmp_path: Path, ws: WorkspaceFileAPI) -> None:
    path = tmp_path / "mem.sqlite3"
    first = MemoryStore.open(path)
    s1 = Session(first, ws, "alice", "sess_1")
    mid = (await s1.call(MemoryAddTool, content="Prefer pathlib over os.path")).data["id"]
    first.close()
    second = MemoryStore.open(path)
    try:
        s2 = Session(second, ws, "alice", "sess_2")
        found = await s2.call(MemorySearchTool, query="pathlib")
        assert [r["id"] for r in found.data["results"]] == [mid]
    finally:
        second.close()


async def test_bad_input_and_missing_store(store: MemoryStore, ws: WorkspaceFileAPI) -> None:
    s = Session(store, ws, "alice", "sess_1")
    with pytest.raises(ToolError, match="empty"):
        await s.call(MemoryAddTool, content="   ")
    with pytest.raises(ToolError, match="not available"):
        await run_tool(MemoryAddTool, {"content": "x"}, ws)
    with pytest.raises(MemoryNotFound):
        store.delete("mem_nope")
