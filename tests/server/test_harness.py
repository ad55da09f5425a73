"""The test harness itself: the in-process variant, and restarts keeping the address."""

from __future__ import annotations

from pathlib import Path

from tests.harness import InProcessServer, ServerFactory
from tests.server.support import new_session


async def test_in_process_server_serves_the_same_app(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with InProcessServer(tmp_path / "srv") as srv:
        async with srv.client("me") as http:
            assert (await http.get("/healthz")).json()["status"] == "ok"
            sid = await new_session(http, workspace)
            assert (await http.get(f"/sessions/{sid}")).json()["workspace"] == str(workspace)
            assert (
                await http.get("/sessions", headers={"Authorization": "Bearer x"})
            ).status_code == 401


async def test_restart_keeps_port_token_and_data(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    srv = server_factory()
    port, token, first_pid = srv.port, srv.token, srv.pid
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with srv.client() as http:
        sid = await new_session(http, workspace)
    srv.restart(hard=True)
    assert (srv.port, srv.token) == (port, token)
    assert srv.pid != first_pid and srv.running
    async with srv.client() as http:
        assert (await http.get(f"/sessions/{sid}")).status_code == 200
