"""Dry-run through the server (session-level and turn-level), and the
effective call timeout of every tool in ``GET /sessions/{id}/tools``.

A real app in this process with a config file, the offline scripted model
driving the turn, events read on a real WebSocket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher.tools.shell.tool import MAX_TIMEOUT
from tests.harness import InProcessServer
from tests.server.pipeline_support import (
    AUTO_POLICY,
    checksums,
    pipeline_server,
    run_message_turn,
    script,
    session_stream,
)
from tests.server.plugin_tools import PLUGINS
from tests.server.support import new_session, result_text, use, wait_turn

CONFIG = {
    "policy": AUTO_POLICY,
    "plugins": {"import_paths": PLUGINS, "entry_points": False},
    # grep: a built-in read tool; note: a plugin; shell: a self-timed tool.
    "dispatcher": {"tool_timeouts": {"grep": 7, "note": 9, "shell": 42}},
}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    with pipeline_server(tmp_path_factory.mktemp("dry_run"), CONFIG) as server:
        yield server


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    (root / "src").mkdir(parents=True)
    (root / "notes.txt").write_text("the plan: write out.txt, then test\n", encoding="utf-8")
    (root / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    return root


async def test_a_dry_run_turn_plans_writes_and_commands_and_changes_nothing(
    srv: InProcessServer, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path)
    model = script(
        srv,
        "plan",
        [
            {
                "content": [
                    {"type": "tool_use", "name": "read_file", "input": {"path": "notes.txt"}},
                    {
                        "type": "tool_use",
                        "name": "write_file",
                        "input": {"path": "out.txt", "content": "one\ntwo\n"},
                    },
                    {"type": "tool_use", "name": "shell", "input": {"command": "touch made.txt"}},
                ]
            },
            "Planned: a file and a command.",
        ],
    )
    before = checksums(workspace)
    async with srv.client("planner") as http:
        sid = await new_session(http, workspace, model=model)
        async with session_stream(srv, sid) as stream:
            turn = await run_message_turn(http, sid, "plan it", dry_run=True)
            completed = await stream.until("turn.completed")
    assert checksums(workspace) == before
    assert turn["status"] == "completed" and turn["dry_run"] is True
    plan = turn["plan"]
    assert [(p["tool_name"], p["summary"]) for p in plan] == [
        ("write_file", "write_file out.txt (+2 lines)"),
        ("shell", "shell: touch made.txt"),
    ]
    assert plan[1]["input"] == {"command": "touch made.txt"}
    assert completed["data"]["plan"] == plan
    planned = stream.of("tool.planned")
    assert sorted(e["data"]["tool_name"] for e in planned) == ["shell", "write_file"]
    # The read ran; the model was told the other two were recorded.
    by_id = {r["tool_use_id"]: result_text(r) for r in turn["results"]}
    assert "the plan: write out.txt" in by_id[stream.of("tool.completed")[0]["data"]["tool_use_id"]]
    recorded = [t for t in by_id.values() if t.startswith("[dry-run] Recorded, not executed")]
    assert len(recorded) == 2
    started = stream.of("turn.started")[0]
    assert started["data"]["dry_run"] is True


async def test_a_dry_run_session_plans_every_turn_and_says_so(
    srv: InProcessServer, tmp_path: Path
) -> None:
    workspace = _workspace(tmp_path)
    before = checksums(workspace)
    async with srv.client("planner") as http:
        sid = await new_session(http, workspace, dry_run=True)
        shown = (await http.get(f"/sessions/{sid}")).json()
        assert shown["dry_run"] is True
        r = await http.post(
            f"/sessions/{sid}/turns",
            json={"tool_uses": [use("tu_w", "write_file", path="src/app.py", content="x\n")]},
        )
        assert r.status_code == 202, r.text
        turn = await wait_turn(http, sid, r.json()["turn_id"])
        # An ordinary session beside it: a turn-level dry-run with tool_uses.
        other = await new_session(http, workspace)
        assert (await http.get(f"/sessions/{other}")).json()["dry_run"] is False
        r = await http.post(
            f"/sessions/{other}/turns",
            json={
                "tool_uses": [use("tu_d", "write_file", path="new.txt", content="a")],
                "dry_run": True,
            },
        )
        assert r.status_code == 202, r.text
        other_turn = await wait_turn(http, other, r.json()["turn_id"])
        listed = (await http.get(f"/sessions/{other}/turns")).json()["turns"]
    assert checksums(workspace) == before
    assert turn["dry_run"] is True
    assert [p["summary"] for p in turn["plan"]] == ["write_file src/app.py (+1 lines)"]
    assert other_turn["request"]["dry_run"] is True
    assert [p["tool_use_id"] for p in other_turn["plan"]] == ["tu_d"]
    assert listed[0]["plan"] == other_turn["plan"]


async def test_an_ordinary_turn_has_no_plan(srv: InProcessServer, tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    async with srv.client("writer") as http:
        sid = await new_session(http, workspace)
        r = await http.post(
            f"/sessions/{sid}/turns",
            json={"tool_uses": [use("tu_w", "write_file", path="real.txt", content="x\n")]},
        )
        turn = await wait_turn(http, sid, r.json()["turn_id"])
    assert turn["dry_run"] is False and turn["plan"] is None
    assert (workspace / "real.txt").read_text(encoding="utf-8") == "x\n"


async def test_the_tools_listing_shows_each_effective_timeout(
    srv: InProcessServer, tmp_path: Path
) -> None:
    async with srv.client("lister") as http:
        sid = await new_session(http, _workspace(tmp_path))
        tools = (await http.get(f"/sessions/{sid}/tools")).json()["tools"]
    timeouts = {t["name"]: t["timeout_s"] for t in tools}
    # The spec's defaults by side effects ...
    assert timeouts["read_file"] == 60 and timeouts["write_file"] == 60
    assert timeouts["git_status"] == 60
    # ... a self-timed tool's backstop above its own maximum ...
    assert timeouts["run_command"] == MAX_TIMEOUT + 10
    # ... and configured overrides used exactly, for built-ins and plugins alike.
    assert timeouts["grep"] == 7 and timeouts["note"] == 9 and timeouts["shell"] == 42
