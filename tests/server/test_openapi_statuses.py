"""The OpenAPI document lists the error statuses each route answers, each with
the API's one error body (``ErrorBody``); what the live server really answers
is compared with it in tests/reliability/test_schemathesis.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from server.app import create_app
from server.auth import TokenRegistry
from server.config import load_config
from server.middleware import is_public

ERROR_REF = "#/components/schemas/ErrorBody"


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data_dir: Path = tmp_path_factory.mktemp("openapi-data")
    config = load_config(
        None,
        env={"TOOLRELAY_TOKEN": "t" * 32},
        overrides={"server.data_dir": str(data_dir)},
    )
    schema: dict[str, Any] = create_app(config, TokenRegistry(config.auth.tokens)).openapi()
    return schema


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, ops in document["paths"].items()
        for method, op in ops.items()
    ]


def test_every_route_lists_the_statuses_every_route_can_answer(document: dict[str, Any]) -> None:
    for method, path, op in _operations(document):
        statuses = set(op["responses"])
        expected = {"413", "422"}
        if not is_public(path):
            expected |= {"401", "503"}
        if "{" in path:
            expected.add("404")
        assert expected <= statuses, (method, path, sorted(expected - statuses))


@pytest.mark.parametrize(
    ("method", "path", "statuses"),
    [
        ("POST", "/sessions", {"403"}),
        ("GET", "/sessions/{session_id}/tools", {"409"}),
        ("POST", "/sessions/{session_id}/turns", {"409", "501"}),
        ("POST", "/sessions/{session_id}/turns/{turn_id}/cancel", {"202", "409"}),
        ("POST", "/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}", {"409"}),
        ("GET", "/metrics", {"403"}),
        ("GET", "/healthz", {"503"}),
    ],
)
def test_route_specific_statuses_are_listed(
    document: dict[str, Any], method: str, path: str, statuses: set[str]
) -> None:
    listed = set(document["paths"][path][method.lower()]["responses"])
    assert statuses <= listed, sorted(statuses - listed)


def test_every_error_status_documents_the_error_body(document: dict[str, Any]) -> None:
    assert "ErrorBody" in document["components"]["schemas"]
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for method, path, op in _operations(document):
        for status, response in op["responses"].items():
            if int(status) < 400 or (path, status) == ("/healthz", "503"):
                continue
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": ERROR_REF}, (method, path, status)
            assert response["description"], (method, path, status)
