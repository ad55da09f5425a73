"""Attack: change the workspace during a dry-run through what still runs.

A dry-run records write/execute/network calls instead of running them, but
read calls run, and so do hooks, which run workspace content (here the
repository's own ``hook.sh``, as `npm run lint` would). The hostile script
writes into the workspace from every hook event a turn reaches; with the
sandbox those hooks see the workspace read-only, so the workspace stays
byte for byte what it was, for a dry-run session and a dry-run turn alike.
A non-dry-run turn on the same server shows the script does write when it
may (so the test can fail).

An in-process server, the scripted model, real bubblewrap.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import InProcessServer
from tests.server.pipeline_support import (
    AUTO_POLICY,
    checksums,
    pipeline_server,
    run_message_turn,
    script,
)
from tests.server.support import new_session

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

EVENTS = ("session_start", "pre_llm_call", "post_llm_call", "pre_tool_use", "post_tool_use")
# Workspace content: writes a file named after the hook event, and says whether
# this is a dry-run, into the workspace; exits 0 either way (exit 2 would block
# the call, and the plan is checked too).
HOOK_SH = 'echo "$TOOLRELAY_DRY_RUN" > "hooked-$TOOLRELAY_EVENT.txt" || true\nexit 0\n'


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    hooks = {event: [{"name": f"repo-{event}", "command": "sh ./hook.sh"}] for event in EVENTS}
    config: dict[str, Any] = {"policy": AUTO_POLICY, "hooks": hooks}
    with pipeline_server(tmp_path_factory.mktemp("dry_run_hooks"), config) as server:
        yield server


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    (root / "hook.sh").write_text(HOOK_SH, encoding="utf-8")
    (root / "notes.txt").write_text("plan me\n", encoding="utf-8")
    return root


def _model(srv: InProcessServer, name: str) -> str:
    return script(
        srv,
        name,
        [
            {
                "content": [
                    {"type": "tool_use", "name": "read_file", "input": {"path": "notes.txt"}},
                    {
                        "type": "tool_use",
                        "name": "write_file",
                        "input": {"path": "out.txt", "content": "x\n"},
                    },
                    {"type": "tool_use", "name": "shell", "input": {"command": "touch ran.txt"}},
                ]
            },
            "Planned.",
        ],
    )


@pytest.mark.parametrize("level", ["session", "turn"])
async def test_nothing_in_the_workspace_changes_in_a_dry_run(
    srv: InProcessServer, ws: Path, level: str
) -> None:
    before = checksums(ws)
    async with srv.client() as http:
        body: dict[str, Any] = {"model": _model(srv, f"dry-{level}")}
        if level == "session":
            body["dry_run"] = True
        sid = await new_session(http, ws, **body)
        if level == "turn":
            # session_start ran for a session that is not a dry-run: writable,
            # rightly. The dry-run is the turn: it starts from here.
            assert (ws / "hooked-session_start.txt").read_text().strip() == "0"
            before = checksums(ws)
        turn = await run_message_turn(http, sid, "plan", dry_run=level == "turn")
    assert turn["status"] == "completed", turn
    assert [a["tool_name"] for a in turn["plan"]] == ["write_file", "shell"]
    assert checksums(ws) == before


async def test_the_same_hooks_write_outside_a_dry_run(srv: InProcessServer, ws: Path) -> None:
    async with srv.client() as http:
        sid = await new_session(http, ws, model=_model(srv, "real"))
        turn = await run_message_turn(http, sid, "do it")
    assert turn["status"] == "completed", turn
    assert (ws / "out.txt").exists() and (ws / "ran.txt").exists()
    for event in EVENTS:
        assert (ws / f"hooked-{event}.txt").read_text().strip() == "0", event
