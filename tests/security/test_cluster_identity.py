"""Attack: reach another user's session through a replica that does not own
it, by forging what the forwarding layer uses to say "this request comes from
another replica, as this caller".

Two real replicas (A, B) on one real redis-server; two user tokens. Frank's
session lives on A. Gina talks to B (which forwards session requests to A)
with her own token plus every header an attacker might guess the forwarding
layer reads; without any token those headers must not authenticate either.
The all-sessions stream on B must not carry Frank's events to Gina; a
sentinel (Gina's own session, created after Frank's turn) bounds the read.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx2
import pytest
from websockets.exceptions import InvalidStatus

from tests.cluster.conftest import RedisServer
from tests.harness import ServerProcess
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

FRANK = "frank-" + secrets.token_hex(16)
GINA = "gina-" + secrets.token_hex(16)
ADMIN = "cluster-admin-" + secrets.token_urlsafe(16)
# Names a forwarding layer could plausibly trust, with values naming Frank or A.
FORGED = {
    "x-toolrelay-forwarded": "1",
    "x-toolrelay-replica": "A",
    "x-toolrelay-principal": '{"token_name": "frank", "role": "admin"}',
    "x-toolrelay-token-name": "frank",
    "x-toolrelay-role": "admin",
    "x-forwarded-user": "frank",
    "x-forwarded-for": "127.0.0.1",
    "x-client-name": "frank",
}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster_roots").resolve()


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory, roots: Path
) -> Iterator[dict[str, ServerProcess]]:
    root = tmp_path_factory.mktemp("cluster_identity")
    redis = RedisServer(root / "redis")
    redis.start()
    users = [
        {"name": name, "token": token, "role": "user", "allowed_roots": [str(roots)]}
        for name, token in (("frank", FRANK), ("gina", GINA))
    ]
    started: dict[str, ServerProcess] = {}
    try:
        for name in ("A", "B"):
            srv = ServerProcess(
                root / name,
                config={"auth": {"tokens": users}},
                token=ADMIN,
                extra_args=("--redis", redis.url, "--replica-id", name),
            )
            started[name] = srv
            srv.start()
        yield started
    finally:
        for srv in started.values():
            if srv.running:
                srv.stop()
        redis.stop()


def ws_url(srv: ServerProcess, path: str, token: str, **query: Any) -> str:
    return f"{srv.ws_base}{path}?{urlencode({'token': token, **query})}"


async def test_a_user_cannot_reach_another_users_session_through_a_non_owner_replica(
    replicas: dict[str, ServerProcess], roots: Path
) -> None:
    a, b = replicas["A"], replicas["B"]
    ws = roots / f"frank-{secrets.token_hex(4)}"
    ws.mkdir()
    (ws / "secret.txt").write_text("frank's secret\n", encoding="utf-8")
    async with a.client("frank", token=FRANK) as frank:
        sid = await new_session(frank, ws)
        tid = await start_turn(frank, sid, use("t1", "read_file", path="secret.txt"))
        assert (await wait_turn(frank, sid, tid))["status"] == "completed"

    # Through B, Frank reaches it: B forwards to A (the path under attack).
    async with b.client("frank", token=FRANK) as frank_on_b:
        seen = await frank_on_b.get(f"/sessions/{sid}")
    assert seen.status_code == 200 and seen.headers["x-toolrelay-replica"] == "A"
    base = b.base_url
    routes = [
        ("GET", f"/sessions/{sid}", None),
        ("GET", f"/sessions/{sid}/messages", None),
        ("GET", f"/sessions/{sid}/turns/{tid}", None),
        ("GET", f"/sessions/{sid}/clients", None),
        ("GET", f"/sessions/{sid}/tools", None),
        ("POST", f"/sessions/{sid}/turns", {"tool_uses": [use("t2", "read_file", path="x")]}),
        ("POST", f"/sessions/{sid}/turns/{tid}/cancel", None),
        ("DELETE", f"/sessions/{sid}", None),
    ]
    async with httpx2.AsyncClient(base_url=base, timeout=10.0) as http:
        for method, path, body in routes:
            as_gina = await http.request(
                method, path, json=body, headers={**FORGED, "Authorization": f"Bearer {GINA}"}
            )
            assert as_gina.status_code == 404, (method, path, as_gina.text)
            assert "secret" not in as_gina.text
            anonymous = await http.request(method, path, json=body, headers=FORGED)
            assert anonymous.status_code == 401, (method, path, anonymous.text)
        # Nor is it listed.
        listed = await http.get("/sessions", headers={"Authorization": f"Bearer {GINA}"})
        assert sid not in {s["id"] for s in listed.json()["sessions"]}
    # The session's own stream is refused on B.
    with pytest.raises(InvalidStatus) as refused:
        await Stream.open(ws_url(b, f"/sessions/{sid}/events", GINA, after=0))
    assert refused.value.response.status_code == 404
    # The all-sessions stream on B: Gina's replay holds her own session, not Frank's.
    mine = roots / f"gina-{secrets.token_hex(4)}"
    mine.mkdir()
    async with b.client("gina", token=GINA) as gina:
        own = await new_session(gina, mine)
    async with await Stream.open(
        ws_url(b, "/events", GINA, after=0), per_session=False, after=0
    ) as stream:
        await stream.until("session.created", lambda e: e["session_id"] == own)
    assert {e["session_id"] for e in stream.events} == {own}
    # Frank's session is untouched by all of it.
    async with a.client("frank", token=FRANK) as frank:
        assert (await frank.get(f"/sessions/{sid}")).status_code == 200
        turns = (await frank.get(f"/sessions/{sid}/turns/{tid}")).json()
    assert turns["status"] == "completed"
