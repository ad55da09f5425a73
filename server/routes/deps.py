"""Dependencies shared by the routes: the server's services and the authenticated caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request, WebSocket

from server.auth import Principal
from server.middleware import principal_of
from server.runtime import Services


# Async on purpose: FastAPI runs a plain ``def`` dependency in its thread pool,
# which costs every request two thread hand-offs (about a millisecond on a
# busy 2-core machine) for what is an attribute lookup.
async def get_runtime(request: Request) -> Services:
    runtime = request.app.state.runtime
    assert isinstance(runtime, Services)
    return runtime


def get_runtime_ws(websocket: WebSocket) -> Services:
    runtime = websocket.app.state.runtime
    assert isinstance(runtime, Services)
    return runtime


async def get_principal(request: Request) -> Principal:
    return principal_of(request.scope)


ServicesDep = Annotated[Services, Depends(get_runtime)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
