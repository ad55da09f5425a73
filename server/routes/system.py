"""Routes without a token: liveness, the root redirect, the dashboard's files."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse

import clients
from server.cluster_routing import default_replica_id
from server.errors import NotFound
from server.responses import AsciiJSONResponse
from server.routes.deps import ClusterDep, HealthDep

router = APIRouter(tags=["system"])

# The dashboard is plain static files shipped in the clients package.
DASHBOARD_DIR = Path(clients.__file__).resolve().parent / "dashboard" / "static"


@router.get(
    "/healthz",
    responses={
        503: {
            "description": "Not accepting work: `degraded` (storage failing; retried, "
            "with the `cause`), `failed` (exiting; with the `cause`) or `stopping`"
        }
    },
)
async def healthz(health_of: HealthDep, cluster: ClusterDep) -> AsciiJSONResponse:
    """200 ``ok`` while the server accepts work; 503 ``degraded`` with the cause
    while its storage fails (it resumes by itself), ``failed`` once it cannot
    continue (it is exiting), ``stopping`` during shutdown."""
    health = health_of()
    # Which replica answered (cluster mode: and whether it reaches Redis).
    if cluster is None:
        health["replica_id"] = default_replica_id()
    else:
        health.update(await cluster.health())
        if health["redis"] != "ok" and health["status"] == "ok":
            health.update(status="degraded", cause="redis: unreachable")
    return AsciiJSONResponse(health, status_code=200 if health["status"] == "ok" else 503)


@router.get("/", include_in_schema=False)
async def root() -> RedirectResponse:
    return RedirectResponse("/dashboard/", status_code=307)


@router.get("/dashboard", include_in_schema=False)
async def dashboard_redirect() -> RedirectResponse:
    # The page lives at /dashboard/ so that relative asset URLs resolve under it.
    return RedirectResponse("/dashboard/", status_code=307)


@router.get("/dashboard/", include_in_schema=False)
async def dashboard() -> FileResponse:
    index = DASHBOARD_DIR / "index.html"
    if not index.is_file():
        raise NotFound(f"the dashboard is not installed (no {index})")
    return FileResponse(index, media_type="text/html")
