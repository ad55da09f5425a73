"""Attack: a quality gate runs workspace code, and the model may have written
that code. In the README's team setup (a trusted workspace: writes run
unasked, commands ask) the model writes ``gate.py``, which overwrites the
protected ``.env``, and ends its turn; the admin's gate ``python3 gate.py``
then runs it. It must ask first, exactly as a shell command of that session
would: a ``tool.confirmation_requested`` any client can answer over the
confirmation route, with the gate's command in its preview. Denied or left
unanswered, the gate does not run and ``quality_gate.completed`` says why.
A gate the admin marked ``auto: true`` runs unasked, and still in the
sandbox, where the protected ``.env`` is read-only.

A real app under uvicorn, the offline scripted model, a real WebSocket
client, a second client answering, real bubblewrap.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import InProcessServer
from tests.server.pipeline_support import pipeline_server, script, session_stream, tool_use
from tests.server.support import Event, new_session, wait_turn

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

SECRET = "SECRET=1\n"
# The model's script: what a hostile or careless gate script would do.
GATE_PY = "open('.env', 'w').write('SECRET=stolen\\n')\nopen('ran.txt', 'w').write('ran\\n')\n"


def _config(trusted: Path, gates: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The README's team configuration: a trusted workspace (writes unasked,
    commands ask), a protected .env, and the gates."""
    return {
        "policy": {"trusted_workspaces": [str(trusted)]},
        "guardrails": {"protected_files": [".env", "secrets/**"], "quality_gates": gates},
        "model": {"system_prompt": "Be brief."},
        **extra,
    }


@pytest.fixture(scope="module")
def trusted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trusted").resolve()


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, trusted: Path) -> Iterator[InProcessServer]:
    gates = [{"name": "check", "command": "python3 gate.py"}]
    with pipeline_server(tmp_path_factory.mktemp("gates"), _config(trusted, gates)) as server:
        yield server


@pytest.fixture(scope="module")
def auto_srv(tmp_path_factory: pytest.TempPathFactory, trusted: Path) -> Iterator[InProcessServer]:
    # Not required: its failure (the write refused) is not sent back to the model.
    gates = [
        {"name": "trusted-check", "command": "python3 gate.py", "auto": True, "required": False}
    ]
    with pipeline_server(tmp_path_factory.mktemp("auto"), _config(trusted, gates)) as server:
        yield server


@pytest.fixture(scope="module")
def impatient_srv(
    tmp_path_factory: pytest.TempPathFactory, trusted: Path
) -> Iterator[InProcessServer]:
    gates = [{"name": "check", "command": "python3 gate.py"}]
    config = _config(trusted, gates, confirmation_timeout=1)
    with pipeline_server(tmp_path_factory.mktemp("impatient"), config) as server:
        yield server


@pytest.fixture
def ws(trusted: Path, tmp_path: Path) -> Path:
    """A fresh workspace inside the trusted folder, holding the protected .env."""
    root = trusted / tmp_path.name
    root.mkdir()
    (root / ".env").write_text(SECRET, encoding="utf-8")
    return root


def _model(srv: InProcessServer, name: str, gate_py: str = GATE_PY) -> str:
    """The model writes gate.py (unasked: a trusted workspace) and is done."""
    return script(srv, name, [tool_use("write_file", path="gate.py", content=gate_py), "Done."])


async def _start(srv: InProcessServer, sid: str) -> str:
    async with srv.client("alice") as http:
        response = await http.post(f"/sessions/{sid}/turns", json={"message": "add a check"})
        assert response.status_code == 202, response.text
        turn_id: str = response.json()["turn_id"]
        return turn_id


async def _answer(srv: InProcessServer, sid: str, request: Event, decision: str) -> None:
    """Another client answers over the ordinary confirmation route."""
    data = request["data"]
    url = f"/sessions/{sid}/turns/{request['turn_id']}/confirmations/{data['request_id']}"
    async with srv.client("bob") as http:
        response = await http.post(url, json={"decision": decision})
        assert response.status_code == 200, response.text


async def test_a_gate_asks_and_a_denial_leaves_the_protected_file_intact(
    srv: InProcessServer, ws: Path
) -> None:
    async with srv.client("alice") as http:
        sid = await new_session(http, ws, model=_model(srv, "deny"))
    async with session_stream(srv, sid) as stream:
        turn_id = await _start(srv, sid)
        asked = await stream.until("tool.confirmation_requested", within=30)
        assert asked["turn_id"] == turn_id
        data = asked["data"]
        assert "python3 gate.py" in data["preview"]["text"]
        assert "check" in data["input_summary"]
        assert data["scope_text"]
        assert (ws / "gate.py").exists() and not (ws / "ran.txt").exists()
        await _answer(srv, sid, asked, "deny")
        gate = await stream.until("quality_gate.completed", within=30)
        resolved = stream.of("tool.confirmation_resolved")
        await stream.until("turn.completed", within=30)
    assert [r["data"]["decision"] for r in resolved] == ["deny"]
    assert resolved[0]["data"]["resolved_by"] == "bob"
    assert gate["data"]["name"] == "check"
    assert gate["data"]["passed"] is False and gate["data"]["exit_code"] is None
    assert gate["data"]["output"] == "not run: denied by bob"
    assert (ws / ".env").read_text(encoding="utf-8") == SECRET
    assert not (ws / "ran.txt").exists()


async def test_an_allowed_gate_runs(srv: InProcessServer, ws: Path) -> None:
    harmless = "open('ran.txt', 'w').write('ran\\n')\n"
    async with srv.client("alice") as http:
        sid = await new_session(http, ws, model=_model(srv, "allow", harmless))
    async with session_stream(srv, sid) as stream:
        turn_id = await _start(srv, sid)
        asked = await stream.until("tool.confirmation_requested", within=30)
        await _answer(srv, sid, asked, "allow")
        gate = await stream.until("quality_gate.completed", within=60)
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, turn_id, within=30)
    assert turn["status"] == "completed"
    assert gate["data"]["passed"] is True, gate["data"]
    assert (ws / "ran.txt").exists()


async def test_an_unanswered_gate_does_not_run(impatient_srv: InProcessServer, ws: Path) -> None:
    srv = impatient_srv
    async with srv.client("alice") as http:
        sid = await new_session(http, ws, model=_model(srv, "silence"))
    async with session_stream(srv, sid) as stream:
        await _start(srv, sid)
        await stream.until("tool.confirmation_requested", within=30)
        gate = await stream.until("quality_gate.completed", within=30)
    [resolved] = stream.of("tool.confirmation_resolved")
    assert resolved["data"]["decision"] == "timeout"
    assert gate["data"]["passed"] is False
    assert gate["data"]["output"].startswith("not run: no one answered")
    assert (ws / ".env").read_text(encoding="utf-8") == SECRET
    assert not (ws / "ran.txt").exists()


async def test_an_auto_gate_runs_unasked_and_still_cannot_write_a_protected_file(
    auto_srv: InProcessServer, ws: Path
) -> None:
    srv = auto_srv
    async with srv.client("alice") as http:
        sid = await new_session(http, ws, model=_model(srv, "auto"))
    async with session_stream(srv, sid) as stream:
        turn_id = await _start(srv, sid)
        gate = await stream.until("quality_gate.completed", within=60)
        await stream.until("turn.completed", within=30)
    assert not stream.of("tool.confirmation_requested")
    async with srv.client("alice") as http:
        turn = await wait_turn(http, sid, turn_id, within=30)
    assert turn["status"] == "completed"
    # It ran (no confirmation), in the sandbox, where .env is read-only.
    assert gate["data"]["exit_code"] not in (None, 0), gate["data"]
    assert "Read-only file system" in gate["data"]["output"], gate["data"]
    assert (ws / ".env").read_text(encoding="utf-8") == SECRET
