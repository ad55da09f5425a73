"""Dependencies of the routes: each gives a route the one part it uses (the
session registry, the store, the confirmation broker, ...) and the
authenticated caller.

Only this module knows that the parts live on the running ``Services``
(``app.state.runtime``); a route names what it reads in its signature, so a
reader (and a test) sees what it touches without following a service locator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, Request, WebSocket

from dispatcher import ConfirmationBroker, ToolDispatcher
from dispatcher.mcp import McpManager
from dispatcher.memory import MemoryService
from eventbus import Bus
from server.auth import Principal
from server.metrics import Metrics
from server.middleware import principal_of
from server.presence import Presence
from server.runtime import Services
from server.session_registry import SessionRegistry
from server.store import SessionRecord, Store
from server.streaming import StreamServices
from server.turn_supervisor import TurnSupervisor


class ClusterRoutes(Protocol):
    """What the routes ask of the cluster (server/cluster.py's ClusterServices,
    which needs the cluster extra: routes see this interface only)."""

    async def health(self) -> dict[str, Any]: ...
    async def session_created(self, record: SessionRecord) -> None: ...
    async def remote_sessions(
        self, principal: Principal, exclude: set[str]
    ) -> list[dict[str, Any]]: ...
    async def clients(self, session_id: str) -> list[dict[str, Any]]: ...


def _runtime(request: Request) -> Services:
    runtime = request.app.state.runtime
    assert isinstance(runtime, Services)
    return runtime


def stream_services(websocket: WebSocket) -> StreamServices:
    """What an event stream uses (server/streaming.py's StreamServices)."""
    runtime = websocket.app.state.runtime
    assert isinstance(runtime, Services)
    return runtime


# Each dependency is async on purpose: FastAPI runs a plain ``def``
# dependency in its thread pool, which costs every request two thread
# hand-offs for what is an attribute lookup.


async def get_principal(request: Request) -> Principal:
    return principal_of(request.scope)


async def get_sessions(request: Request) -> SessionRegistry:
    return _runtime(request).sessions


async def get_turns(request: Request) -> TurnSupervisor:
    return _runtime(request).turns


async def get_store(request: Request) -> Store:
    return _runtime(request).store


async def get_bus(request: Request) -> Bus:
    return _runtime(request).bus


async def get_dispatcher(request: Request) -> ToolDispatcher:
    return _runtime(request).dispatcher


async def get_broker(request: Request) -> ConfirmationBroker:
    return _runtime(request).dispatcher.broker


async def get_presence(request: Request) -> Presence:
    return _runtime(request).presence


async def get_cluster(request: Request) -> ClusterRoutes | None:
    """The cluster's parts; None on a single server."""
    return _runtime(request).cluster


async def get_memory(request: Request) -> MemoryService | None:
    """The memory store; None while it is not open."""
    return _runtime(request).memory_store


async def get_mcp(request: Request) -> McpManager | None:
    """The MCP servers' connections; None without ``mcp_servers``."""
    return _runtime(request).mcp


async def get_metrics(request: Request) -> Metrics:
    return _runtime(request).observer.metrics


async def get_health(request: Request) -> Callable[[], dict[str, Any]]:
    """The server's own health report (Services.health)."""
    return _runtime(request).health


PrincipalDep = Annotated[Principal, Depends(get_principal)]
SessionsDep = Annotated[SessionRegistry, Depends(get_sessions)]
TurnsDep = Annotated[TurnSupervisor, Depends(get_turns)]
StoreDep = Annotated[Store, Depends(get_store)]
BusDep = Annotated[Bus, Depends(get_bus)]
DispatcherDep = Annotated[ToolDispatcher, Depends(get_dispatcher)]
BrokerDep = Annotated[ConfirmationBroker, Depends(get_broker)]
PresenceDep = Annotated[Presence, Depends(get_presence)]
ClusterDep = Annotated[ClusterRoutes | None, Depends(get_cluster)]
MemoryDep = Annotated[MemoryService | None, Depends(get_memory)]
McpDep = Annotated[McpManager | None, Depends(get_mcp)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
HealthDep = Annotated[Callable[[], dict[str, Any]], Depends(get_health)]
