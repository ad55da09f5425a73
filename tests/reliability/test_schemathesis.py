"""schemathesis against the live server's own ``/openapi.json``, bounded and
deterministic: no generated request (valid or not) gets a 5xx, and every
status an operation answers is one its OpenAPI entry documents, with a body
that matches the documented schema.

The server is the harness's real ``toolrelay serve`` subprocess on
127.0.0.1 with its real admin token, locked down as the fuzz suite's other
server is (sessions only under a temp dir, every tool call asks and nobody
answers, no shell), so whatever the generated requests start touches nothing.

Bounds: ``EXAMPLES`` cases per operation and generation mode (valid and
invalid data), derandomized (the same cases every run), no example database.
Half the operations with path parameters also get a real session and turn,
so their cases reach past the 404.

Nothing is excluded: no route of this API stops the server (there is no
shutdown route; ``/sessions/{id}/mcp`` is not in the schema and has its own
tests in tests/mcp). DELETE operations get generated ids only, never the
fixture's real session, so the session every other operation aims at stays.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok

from tests.harness import ServerProcess
from tests.reliability.conftest import DEBUG_ENV, config
from tests.reliability.support import server_problems

# Cases per operation and generation mode; about 20 s here on 2 busy cores.
EXAMPLES = 12
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("schemathesis-workspaces").resolve()


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
        assert not server_problems(srv), server_problems(srv)


def _real_ids(srv: ServerProcess, sandbox: Path) -> dict[str, str]:
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
    return {"session_id": session_id, "turn_id": str(turn.json()["turn_id"])}


def _run(op: Any, strategy: Any, srv: ServerProcess, observed: dict[str, set[int]]) -> list[str]:
    """Run one operation's bounded cases; the failures, described."""
    failures: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def check(case: Any) -> None:
        response = case.call(base_url=srv.base_url, headers=srv.headers(), timeout=10)
        observed[op.label].add(response.status_code)
        try:
            case.validate_response(response, checks=CHECKS)
        except FailureGroup as group:
            failures.extend(
                f"{op.label} {case.formatted_path} -> {response.status_code}: "
                f"{type(f).__name__}: {f.title}"
                for f in group.exceptions
            )

    # Negative mode on an operation that has no input to make invalid.
    with contextlib.suppress(Unsatisfiable):
        check()
    return failures


def test_bounded_schemathesis_run_keeps_every_answer_documented(
    api_server: ServerProcess, sandbox: Path
) -> None:
    schema = schemathesis.openapi.from_url(f"{api_server.base_url}/openapi.json")
    results = list(schema.get_all_operations())
    operations = [r.ok() for r in results if isinstance(r, Ok)]
    assert len(operations) == len(results), "the server's own OpenAPI schema has errors"
    assert len(operations) >= 18, [op.label for op in operations]
    known = _real_ids(api_server, sandbox)
    observed: dict[str, set[int]] = defaultdict(set)
    failures: list[str] = []
    for op in operations:
        for mode in GenerationMode:
            failures += _run(op, op.as_strategy(mode), api_server, observed)
        params = {k: v for k, v in known.items() if "{" + k + "}" in op.path}
        if params and op.method.upper() != "DELETE":
            strategy = op.as_strategy(GenerationMode.POSITIVE, path_parameters=params)
            failures += _run(op, strategy, api_server, observed)
    # Per route: every status seen is one the document lists for it.
    documented = {op.label: {int(s) for s in op.responses.status_codes} for op in operations}
    undocumented = {
        label: sorted(seen - documented[label])
        for label, seen in observed.items()
        if seen - documented[label]
    }
    assert not undocumented, "\n".join(f"{k}: {v}" for k, v in undocumented.items())
    assert not failures, "\n".join(sorted(set(failures))[:40])
    # The run reached past authentication and validation into the routes.
    assert sum(1 for seen in observed.values() if seen & {200, 201, 202, 204}) >= 10, observed
