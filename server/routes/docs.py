"""The API's own description: the bearer scheme in OpenAPI, an offline ``/docs``
page, and 404 for unknown paths before authentication.

``/docs`` is a small page of ours (``clients/dashboard/static/docs.html`` and
``docs.js``, served by this server: no CDN, works offline). It reads
``/openapi.json`` and lists every operation with its parameters, body schema
and responses; "Try it out" sends a request with the token typed into the
page (kept for the browser tab only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import NotFound, error_body
from server.middleware import deny_websocket, is_public, send_json
from server.responses import STATUS_MEANINGS
from server.routes.system import DASHBOARD_DIR
from server.schemas import ErrorBody

router = APIRouter()

BEARER_SCHEME = "bearerAuth"


def install_openapi(app: FastAPI) -> None:
    """Make ``app.openapi()`` declare the bearer scheme: required everywhere
    except the public routes, so "Try it out" clients send the token."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = schema.setdefault("components", {})
        components.setdefault("securitySchemes", {})[BEARER_SCHEME] = {
            "type": "http",
            "scheme": "bearer",
            "description": "The token `toolrelay serve` prints (or TOOLRELAY_TOKEN, or "
            "a token from the config file's auth.tokens).",
        }
        schema["security"] = [{BEARER_SCHEME: []}]
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                if isinstance(operation, dict):
                    if is_public(path):
                        operation["security"] = []
                    _document_errors(path, operation)
        _error_schemas(components.setdefault("schemas", {}))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def _document_errors(path: str, operation: dict[str, Any]) -> None:
    """Add the error statuses the middleware gives every route: 401 and 503
    behind authentication, 413 (body limit) and 422 (bad characters in any
    parameter, server.input_checks) everywhere, 404 wherever a path names a
    resource. Each error status documents the API's one error body."""
    statuses = [413, 422]
    if not is_public(path):
        statuses += [401, 503]
    if "{" in path:
        statuses.append(404)
    responses = operation.setdefault("responses", {})
    for status in statuses:
        responses.setdefault(str(status), {"description": STATUS_MEANINGS[status]})
    for status, response in responses.items():
        if status.isdigit() and int(status) >= 400 and not _is_health(path, status):
            # FastAPI's default 422 schema (HTTPValidationError) is not what we send.
            response["content"] = {"application/json": {"schema": ERROR_REF}}


def _is_health(path: str, status: str) -> bool:
    # /healthz's 503 carries the health report, not an error body.
    return path == "/healthz" and status == "503"


def _error_schemas(schemas: dict[str, Any]) -> None:
    """Put ErrorBody (and the models it uses) in the components; drop
    FastAPI's validation-error models, which no response uses any more."""
    generated = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(generated.pop("$defs", {}))
    schemas["ErrorBody"] = generated
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)


class UnknownPathGuard:
    """404 for a path no route serves, before authentication: an unknown URL
    says "no such route" to everyone, rather than 401 to callers without a
    token. Known paths (whatever the method) go on to authentication."""

    def __init__(self, app: ASGIApp, routes: Callable[[], Sequence[BaseRoute]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or self._known(scope):
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "GET") if kind == "http" else "WebSocket"
        body = error_body("not_found", f"no route for {method} {scope['path']}")
        if kind == "http":
            await send_json(send, 404, body)
        else:
            await deny_websocket(scope, send, 404, body)

    def _known(self, scope: Scope) -> bool:
        for route in self.routes():
            match, _ = route.matches(scope)
            if match is not Match.NONE:
                return True
        return False


@router.get("/docs", include_in_schema=False)
async def docs() -> FileResponse:
    page = DASHBOARD_DIR / "docs.html"
    if not page.is_file():
        raise NotFound(f"the docs page is not installed (no {page})")
    return FileResponse(page, media_type="text/html")
