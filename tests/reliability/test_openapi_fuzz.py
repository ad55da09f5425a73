"""schemathesis against the server's own ``/openapi.json``: no input it can
generate (valid or not) makes the server answer 5xx.

The server is locked down for this: sessions may only live in a temp dir,
every tool call needs a confirmation (nobody answers), the shell is off. So
whatever turns the fuzzer manages to start can touch nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok

from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import server_problems


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-workspaces").resolve()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory, sandbox: Path) -> Iterator[ServerProcess]:
    cfg = config(
        policy={"preset": "confirm-all"},
        workspaces={"allowed_roots": [str(sandbox)], "shell": {"enabled": False}},
        confirmation_timeout=1,
    )
    srv = ServerProcess(tmp_path_factory.mktemp("schemathesis"), config=cfg, env=DEBUG_ENV)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        # The fuzzing may not have broken anything on the way.
        assert not server_problems(srv), server_problems(srv)


def _real_session(srv: ServerProcess, sandbox: Path) -> tuple[str, str]:
    headers = srv.headers()
    created = httpx2.post(
        f"{srv.base_url}/sessions", json={"workspace": str(sandbox)}, headers=headers, timeout=10
    )
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    turn = httpx2.post(
        f"{srv.base_url}/sessions/{session_id}/turns",
        json={"tool_uses": [{"id": "t", "name": "rl_echo", "input": {"text": "x"}}]},
        headers=headers,
        timeout=10,
    )
    assert turn.status_code == 202, turn.text
    turn_id: str = turn.json()["turn_id"]
    return session_id, turn_id


def test_no_generated_request_gets_a_5xx(api_server: ServerProcess, sandbox: Path) -> None:
    """Valid and invalid requests for every operation, generated from the schema
    the running server publishes (so new routes are fuzzed too)."""
    schema = schemathesis.openapi.from_url(f"{api_server.base_url}/openapi.json")
    results = list(schema.get_all_operations())
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert len(operations) == len(results), "the server's own OpenAPI schema has errors"
    assert len(operations) >= 13
    # Half the cases aim at a real session and turn, so they get past the 404.
    session_id, turn_id = _real_session(api_server, sandbox)
    known = {"session_id": session_id, "turn_id": turn_id}
    strategies = [op.as_strategy(mode) for op in operations for mode in GenerationMode]
    for op in operations:
        params = {k: v for k, v in known.items() if "{" + k + "}" in op.path}
        if params and op.method.upper() != "DELETE":
            strategies += [op.as_strategy(mode, path_parameters=params) for mode in GenerationMode]
    cases = st.one_of(strategies)
    calls: Counter[str] = Counter()

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases)
    def no_server_error(case: Any) -> None:
        response = case.call(base_url=api_server.base_url, headers=api_server.headers(), timeout=10)
        calls[f"{case.method} {case.path} {response.status_code}"] += 1
        assert response.status_code < 500, (
            case.method,
            case.formatted_path,
            case.body,
            response.text[:500],
        )

    no_server_error()
    # Sanity: the fuzzer reached the routes, not only the authentication wall.
    reached = {key.rsplit(" ", 1)[0] for key in calls}
    assert len(reached) >= 10, calls
