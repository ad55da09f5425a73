"""The FastAPI application: routes, error shapes, middleware, lifespan."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from server.auth import TokenRegistry
from server.cluster_routing import ClusterRouting
from server.config import Config
from server.errors import ApiError, error_body
from server.input_checks import BadCharacterGuard
from server.logs import RequestLog
from server.mcp_endpoint import PATH as MCP_PATH
from server.mcp_endpoint import McpEndpoint
from server.middleware import (
    AuthMiddleware,
    BodyLimit,
    FrameGuard,
    WebSocketOriginGuard,
    too_large_body,
)
from server.origins import OriginPolicy
from server.responses import AsciiJSONResponse
from server.routes import docs, mcp, metrics, sessions, streams, system, turns
from server.routes import memory as memory_routes
from server.runtime import Services
from server.schemas import INPUT_LIMITS
from server.turns import MessageRunnerFactory

log = logging.getLogger("toolrelay.server")
VERSION = "0.1.0"


def create_app(
    config: Config,
    tokens: TokenRegistry,
    *,
    message_runner_factory: MessageRunnerFactory | None = None,
) -> FastAPI:
    """Build the app. The runtime (store, bus, dispatcher) starts in the lifespan.

    ``{"message": ...}`` turns run the agent loop unless ``message_runner_factory``
    says otherwise (a factory returning None turns them off: they answer 501).
    """
    if message_runner_factory is None:
        from server.agent_loop import agent_loop_factory

        message_runner_factory = agent_loop_factory
    runtime = Services(config, tokens, message_runner_factory=message_runner_factory)
    mcp_endpoint = McpEndpoint(config.server)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            await runtime.start()
        except BaseException:
            await runtime.stop()
            raise
        try:
            # The MCP endpoint's session manager, on the started services' parts.
            async with mcp_endpoint.run(runtime.mcp_endpoint_parts()):
                yield
        finally:
            await runtime.stop()

    app = FastAPI(
        title="toolrelay",
        version=VERSION,
        description="Async multi-client agent server: sessions, turns, confirmations, events.",
        lifespan=lifespan,
        redoc_url=None,
        # Our own /docs page (server/routes/docs.py): works offline, no CDN.
        docs_url=None,
        # Not the default renderer: it fails on lone surrogates (see server.responses).
        default_response_class=AsciiJSONResponse,
    )
    app.state.runtime = runtime
    _install_routes(app, mcp_endpoint)
    _install_error_handlers(app, config.server.max_body_bytes)
    _install_middleware(app, runtime, config)
    return app


def _install_routes(app: FastAPI, mcp_endpoint: McpEndpoint) -> None:
    """Every route: the HTTP API, the docs, the dashboard's files and the MCP endpoint."""
    for router in (sessions.router, turns.router, streams.router, system.router):
        app.include_router(router)
    app.include_router(metrics.router)
    app.include_router(docs.router)
    app.include_router(memory_routes.router)  # GET /memory, DELETE /memory/{id}
    # MCP: GET /mcp-servers, and toolrelay as an MCP server (server/mcp_endpoint.py).
    app.include_router(mcp.router)
    app.router.routes.append(
        Route(MCP_PATH, mcp_endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    )
    docs.install_openapi(app)
    app.mount(
        "/dashboard/static",
        StaticFiles(directory=system.DASHBOARD_DIR, check_dir=False),
        name="dashboard-static",
    )


def _install_middleware(app: FastAPI, runtime: Services, config: Config) -> None:
    """The middleware stack, innermost first (Starlette wraps in reverse order:
    the body limit sees requests after authentication)."""
    # Innermost: in cluster mode, session requests go to their owner replica.
    app.add_middleware(ClusterRouting, cluster=lambda: runtime.cluster)
    app.add_middleware(BodyLimit, max_body_bytes=config.server.max_body_bytes)
    # Behind authentication: NUL and control characters in any parameter -> 422.
    app.add_middleware(BadCharacterGuard, routes=lambda: app.router.routes)
    app.add_middleware(AuthMiddleware, tokens=lambda: runtime.tokens)
    # Before authentication: a foreign page's handshake gets 403 whatever it sends.
    app.add_middleware(WebSocketOriginGuard, policy=OriginPolicy.of(config.server.allowed_origins))
    app.add_middleware(FrameGuard)
    # Outermost: a path no route serves is 404 for everyone, before authentication.
    app.add_middleware(docs.UnknownPathGuard, routes=lambda: app.router.routes)
    # Around everything: the request line with its duration (server/logs.py).
    app.add_middleware(RequestLog)


def _install_error_handlers(app: FastAPI, max_body_bytes: int) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return AsciiJSONResponse(exc.body(), status_code=exc.status, headers=headers)

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return AsciiJSONResponse(describe_validation(exc.errors()), status_code=422)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        status = exc.status_code
        if status == 413:
            return AsciiJSONResponse(too_large_body(max_body_bytes), status_code=413)
        if status == 400 and exc.__cause__ is not None:
            # FastAPI's answer when the body cannot even be parsed as JSON text.
            return AsciiJSONResponse(unparsable_body(exc.__cause__), status_code=422)
        if status == 404:
            body = error_body("not_found", f"no route for {request.method} {request.url.path}")
        elif status == 405:
            body = error_body(
                "method_not_allowed", f"{request.method} is not allowed on {request.url.path}"
            )
        else:
            body = error_body("http_error", str(exc.detail))
        return AsciiJSONResponse(body, status_code=status, headers=exc.headers)

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        body = error_body("internal_error", "internal server error; details are in the server log")
        return AsciiJSONResponse(body, status_code=500)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)


def unparsable_body(cause: BaseException) -> dict[str, Any]:
    """The 422 body for a request body that is not JSON text Python can parse."""
    if isinstance(cause, UnicodeDecodeError):
        message = f"the body is not valid UTF-8 (at byte {cause.start})"
    elif isinstance(cause, RecursionError):
        message = (
            "the body nests too deeply to parse; JSON values may nest at most "
            f"{INPUT_LIMITS.max_depth} levels"
        )
    elif isinstance(cause, ValueError):
        # e.g. an integer literal of more than 4300 digits.
        message = f"the body is not valid JSON: {cause}"
    else:
        message = f"the body cannot be parsed as JSON ({type(cause).__name__})"
    return error_body(
        "invalid_request",
        f"body: {message}",
        fields=[{"field": "body", "message": message}],
    )


def describe_validation(errors: Any) -> dict[str, Any]:
    """FastAPI's validation errors as our error body, each naming its field."""
    fields: list[dict[str, str]] = []
    # Summary sentences that differ from "<field>: <message>", by index in fields.
    sentences: dict[int, str] = {}
    for err in errors:
        loc = list(err.get("loc", ()))
        where = loc[0] if loc else "body"
        path = [str(p) for p in loc[1:]]
        kind = err.get("type", "")
        if kind == "json_invalid":
            detail = err.get("ctx", {}).get("error", "malformed")
            position = path[0] if path else "?"
            fields.append(
                {"field": "body", "message": f"not valid JSON: {detail} (at character {position})"}
            )
            continue
        name = ".".join(path) if path else ("body" if where == "body" else str(where))
        if kind == "input_limit":
            # server.schemas names the exact place, e.g. tool_uses[0].input.
            ctx = err.get("ctx") or {}
            field = str(ctx.get("field", name))
            sentences[len(fields)] = f"{field} {err.get('msg')}"
            fields.append({"field": field, "message": str(err.get("msg"))})
            continue
        if where == "body" and not path and kind == "missing":
            message = "a JSON object body is required"
        elif kind == "extra_forbidden":
            message = "unknown field"
        elif kind == "model_attributes_type" or (kind == "dict_type" and not path):
            message = "must be a JSON object"
        else:
            message = str(err.get("msg", "invalid"))
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
        if where in ("query", "path", "header"):
            name = f"{where} parameter {name}"
        fields.append({"field": name, "message": message})
    summary = (
        "; ".join(sentences.get(i, f"{f['field']}: {f['message']}") for i, f in enumerate(fields))
        or "invalid request"
    )
    return error_body("invalid_request", summary, fields=fields)
