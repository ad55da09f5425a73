"""GET /metrics: the server's metrics in Prometheus text format (admin tokens)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from server.errors import Forbidden
from server.responses import error_responses
from server.routes.deps import MetricsDep, PrincipalDep

router = APIRouter(tags=["system"])


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
        **error_responses(403, s403="Not an admin token"),
    },
)
async def metrics(request: Request, metrics: MetricsDep, principal: PrincipalDep) -> Response:
    """Every metric of this server (see the README's "Operators" section).

    Admin only: the figures span every user's sessions. Prometheus sends the
    token with ``authorization: {type: Bearer, credentials_file: ...}``."""
    if not principal.is_admin:
        raise Forbidden("/metrics needs an admin token")
    await metrics.refresh()
    # The Prometheus text format, or OpenMetrics when the scraper asks for it.
    body, content_type = metrics.render(request.headers.get("accept"))
    return Response(body, media_type=content_type)
