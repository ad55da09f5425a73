"""Cluster mode: this server as one replica of many on one Redis.

Loaded only when ``cluster.redis_url`` is set (``toolrelay serve --redis``);
without it nothing here runs and the embedded default is unchanged. The
building blocks are in ``eventbus/cluster/``; this module wires them into the
server (see specs/scale-out.md, "Server wiring"):

- **Events.** The services use a ``ClusterBus`` instead of the embedded bus:
  Redis numbers every event, and each replica's WebSocket clients are served
  from Redis (replay and live), whichever replica published.
- **Ownership.** Creating a session takes its lease: the creating replica
  owns it, keeps its state (its SQLite store, in its data dir) and runs its
  turns and tools. ``ClusterRouting`` (server/cluster_routing.py, an ASGI middleware inside
  authentication) sends every ``/sessions/{id}/...`` HTTP request for a
  session another replica owns to that owner through the ``Forwarder``, which
  runs it on its own app as the same caller: reads and actions alike, so
  every route answers the same on every replica. A directory in Redis
  (``Keys.directory``) describes every session, for listing and visibility
  checks anywhere (and for the event streams, which are served locally).
- **First answer wins.** On the owner, an answer to a pending confirmation is
  first decided by ``AnswerArbiter`` (one script in Redis); a loser gets the
  same 409 the confirmation route gives, naming the winner.
- **Replica loss.** Every replica runs a ``LapseWatcher``. Turns are listed
  as running by the event log, in the step that stores ``turn.started`` (and
  unlisted with the turn's end; see ``RedisEventLog``). When an
  owner's lease lapses with listed turns, one survivor resolves the turns'
  pending confirmations ``cancelled`` and ends each turn ``turn.failed``
  (``reason: replica_lost``). A later request for the session adopts it if
  this replica reaches its workspace (same path); otherwise it is answered
  503 ``owner_gone`` saying so (the ending: server/cluster_loss.py; moving
  requests' bytes: server/cluster_asgi.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError
from starlette.types import ASGIApp, Receive, Scope, Send

from eventbus import BusClosed, EventBusError, SubscriberTooSlow
from eventbus.cluster.answers import AnswerArbiter
from eventbus.cluster.bus import ClusterBus
from eventbus.cluster.forwarding import Forwarder, ForwardError, HandlerRefused, ReplicaUnavailable
from eventbus.cluster.keys import Keys
from eventbus.cluster.leases import LapseWatcher, Leases, LostTurns
from eventbus.cluster.log import OWNERSHIP_EVENTS
from eventbus.cluster.presence import Presence as ClusterPresence
from protocol.catalog import EventType
from server.auth import Principal
from server.cluster_asgi import (
    captured_reply,
    forwarded_scope,
    read_body,
    replay,
    send_conflict,
    send_error,
)
from server.cluster_loss import end_lost_turns
from server.cluster_routing import SESSION_PATH, default_replica_id
from server.config import ClusterSection, ConfigInvalid
from server.errors import ApiError, NotFound, StorageUnavailable
from server.middleware import principal_of
from server.presence import Attachment
from server.store import SessionRecord, Store

if TYPE_CHECKING:
    from dispatcher.confirmations import ConfirmationBroker
    from server.session_registry import SessionRegistry

log = logging.getLogger("toolrelay.cluster")

# Marks a request the owner runs for another replica (never forwarded again):
# a scope key, which no client can set (a header could be forged).
FORWARDED_KEY = "toolrelay.forwarded"
# Names the replica that answered a forwarded request (for operators and tests).
REPLICA_HEADER = b"x-toolrelay-replica"
# A forwarded request waits at most this long for the owner's answer.
FORWARD_TIMEOUT_S = 30.0
# How often the watchdog PINGs Redis (see ClusterServices._watch_redis).
WATCHDOG_INTERVAL_S = 0.2
_ANSWER_PATH = re.compile(r"^/sessions/([^/]+)/turns/([^/]+)/confirmations/([^/]+)$")


class ClusterServices:
    """The cluster parts of one replica (see the module docstring).

    Built by ``Services.start`` when ``cluster.redis_url`` is set, with the
    state store: ``start_bus`` first (the services need the bus), ``start``
    with the session registry and the confirmation broker once they exist,
    ``stop_serving`` first at shutdown and ``close`` last.
    """

    def __init__(self, section: ClusterSection, store: Store) -> None:
        assert section.redis_url is not None
        self.store = store
        # Handed to start(): made by the services after the bus.
        self._sessions: SessionRegistry | None = None
        self._broker: ConfirmationBroker | None = None
        self.url = section.redis_url
        self.replica_id = section.replica_id or default_replica_id()
        self.redis: aioredis.Redis = aioredis.Redis.from_url(
            section.redis_url, decode_responses=True, health_check_interval=10
        )
        ttl = section.lease_ttl_ms
        self.keys = Keys()
        self.leases = Leases(
            self.redis,
            self.replica_id,
            ttl_ms=ttl,
            keys=self.keys,
            on_lease_lost=self._lease_lost,
        )
        # Polled several times per TTL: a lapse is found within TTL + interval.
        self.watcher = LapseWatcher(
            self.redis, self._on_lost, interval_s=max(0.1, ttl / 4000), keys=self.keys
        )
        self.arbiter = AnswerArbiter(self.redis, keys=self.keys)
        # The inbox's liveness key lapses with the lease: a dead owner is told
        # apart (503 at once) within the same time its sessions are.
        self.forwarder = Forwarder(
            self.redis, self.replica_id, keys=self.keys, alive_ttl_ms=max(ttl, 1500)
        )
        self.presence = ClusterPresence(
            self.redis, self.replica_id, ttl_ms=max(ttl, 3000), keys=self.keys
        )
        self.bus: ClusterBus | None = None
        # Set by ClusterRouting on its first request: the app below it (where a
        # forwarded request runs) and the application object routes read.
        self.inner_app: ASGIApp | None = None
        self.scope_app: Any = None
        self._tracker: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        # The watchdog's last view of Redis, and the run_id of the process it saw.
        self.redis_ok = True
        self._run_id: str | None = None
        self._started = False

    @property
    def sessions(self) -> SessionRegistry:
        assert self._sessions is not None, "start() first"
        return self._sessions

    @property
    def broker(self) -> ConfirmationBroker:
        assert self._broker is not None, "start() first"
        return self._broker

    # -- lifecycle -----------------------------------------------------------------

    async def start_bus(
        self, *, max_queue: int, on_failure: Callable[[BaseException], None]
    ) -> ClusterBus:
        """Check Redis answers, then start this replica's ClusterBus."""
        if not await self._check_redis():
            raise ConfigInvalid(f"cannot reach Redis at {_safe_url(self.url)}")
        self.bus = ClusterBus(
            self.redis,
            keys=self.keys,
            on_failure=on_failure,
            max_queue=max_queue,
            replica_id=self.replica_id,
            lease_ttl_ms=self.leases.ttl_ms,
        )
        await self.bus.start()
        return self.bus

    async def start(self, sessions: SessionRegistry, broker: ConfirmationBroker) -> None:
        """Leases, the lapse watcher, presence, the forwarding inbox, the turn tracker."""
        assert self.bus is not None, "start_bus() first"
        self._sessions, self._broker = sessions, broker
        await self.leases.start()
        await self.watcher.start()
        await self.presence.start()
        await self.forwarder.serve(self._handle)
        sub = await self.bus.subscribe(after=self.bus.last_seq, max_queue=100_000)
        self._tracker = asyncio.create_task(self._track(sub), name="cluster-turn-tracker")
        self._watchdog = asyncio.create_task(self._watch_redis(), name="cluster-redis-watchdog")
        self._started = True
        log.info("cluster: replica %s on %s", self.replica_id, _safe_url(self.url))

    async def stop_serving(self) -> None:
        """Stop taking forwarded calls and claiming other replicas' turns."""
        if not self._started:
            return
        await self.forwarder.close()
        await self.watcher.close()

    async def close(self) -> None:
        """After the bus closed: release the leases (another replica may adopt
        at once), drop presence, close the connection pool."""
        for task in (self._tracker, self._watchdog):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._tracker = self._watchdog = None
        if self._started:
            await self.leases.close(release=True)
            await self.presence.close()
        with contextlib.suppress(RedisError, OSError):
            await self.redis.aclose()

    async def health(self) -> dict[str, Any]:
        """``redis: ok|error`` (one PING, bounded, and the watchdog's view) and
        this replica's id."""
        state = "ok" if await self._check_redis() else "error"
        return {"replica_id": self.replica_id, "redis": state}

    async def _check_redis(self) -> bool:
        """Whether Redis answers; drops stale pooled connections first if it
        restarted (a new ``run_id``) since the last check."""
        for _attempt in range(2):
            try:
                async with asyncio.timeout(1.0):
                    info = await self.redis.info("server")
            except (TimeoutError, RedisError, OSError):
                # The failed connection is dropped; one more try on a fresh one.
                continue
            run_id = str(info.get("run_id", ""))
            if self._run_id is not None and run_id != self._run_id:
                with contextlib.suppress(RedisError, OSError):
                    await self.redis.connection_pool.disconnect(inuse_connections=False)
                log.warning("cluster: Redis restarted; stale connections dropped")
            self._run_id = run_id
            return True
        return False

    async def _watch_redis(self) -> None:
        """After a Redis restart the pool still holds connections to the old
        process, and the first command on each fails. The bus never retries an
        append (its outcome would be unknown), so a stale connection would stop
        it: the watchdog notices the restart (a new ``run_id``) within its
        interval and drops the idle connections before most commands use them."""
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            ok = await self._check_redis()
            if ok != self.redis_ok:
                log.warning("cluster: Redis %s", "answers again" if ok else "does not answer")
                self.redis_ok = ok

    # -- sessions ------------------------------------------------------------------

    async def session_created(self, record: SessionRecord) -> None:
        """Take the new session's lease and describe it in the directory."""
        if not await self.leases.acquire(record.id):
            log.error("cluster: session %s was created here but its lease is held", record.id)
        await self._describe(record)

    async def _describe(self, record: SessionRecord) -> None:
        entry = {"session": self.sessions.to_json(record), "replica": self.replica_id}
        await self.redis.hset(self.keys.directory, record.id, json.dumps(entry))

    async def session_deleted(self, session_id: str) -> None:
        await self.redis.hdel(self.keys.directory, session_id)
        if session_id in self.leases.held:
            await self.leases.release(session_id)

    async def describe(self, session_id: str) -> dict[str, Any] | None:
        """The session as its owner described it (the directory entry), or None."""
        raw = await self.redis.hget(self.keys.directory, session_id)
        if raw is None:
            return None
        session = json.loads(raw)["session"]
        return dict(session)

    async def check_visible(self, principal: Principal, session_id: str) -> None:
        """NotFound unless the caller may see the session, on this replica or any."""
        if self.store.get_session(session_id) is not None:
            self.sessions.get(principal, session_id)
            return
        try:
            session = await self.describe(session_id)
        except RedisError as exc:
            raise StorageUnavailable(f"Redis cannot be reached: {exc}") from None
        if session is None or not principal.can_see(str(session.get("owner"))):
            raise NotFound(f"no session {session_id!r}")

    async def known(self, session_id: str) -> bool:
        """Whether the directory describes the session (False if Redis fails)."""
        try:
            return await self.describe(session_id) is not None
        except RedisError:
            return False

    async def remote_sessions(
        self, principal: Principal, exclude: set[str]
    ) -> list[dict[str, Any]]:
        """Sessions other replicas hold that the caller may see, oldest first."""
        found: list[dict[str, Any]] = []
        for session_id, raw in (await self.redis.hgetall(self.keys.directory)).items():
            if session_id in exclude:
                continue
            session = json.loads(raw)["session"]
            if principal.can_see(str(session.get("owner"))):
                found.append(session)
        found.sort(key=lambda s: (str(s.get("created_at")), str(s.get("id"))))
        return found

    # -- presence ------------------------------------------------------------------

    async def attached(self, session_id: str, attachment: Attachment) -> None:
        with contextlib.suppress(RedisError):
            await self.presence.attach(session_id, attachment.client_id, attachment.to_json())

    async def detached(self, session_id: str, attachment: Attachment) -> None:
        with contextlib.suppress(RedisError):
            await self.presence.detach(session_id, attachment.client_id)

    async def clients(self, session_id: str) -> list[dict[str, Any]]:
        """The union of every replica's clients of the session."""
        return await self.presence.clients(session_id)

    # -- the turn tracker ----------------------------------------------------------

    async def _track(self, sub: Any) -> None:
        """Keep this replica's leases and the directory's view of its sessions
        fresh, from the event stream: every way a session or turn starts
        (route, MCP, sub-agent) publishes the same events. (Running turns are
        listed by the event log itself, in the step that stores their events:
        see ``RedisEventLog``.)"""
        assert self.bus is not None
        bus = self.bus
        for _attempt in range(1_000_000):
            try:
                async for record in sub:
                    try:
                        await self._track_one(record.type, record.session_id, record.turn_id)
                    except RedisError as exc:
                        log.warning("cluster: session tracking: %s", exc)
                return
            except SubscriberTooSlow:
                after = sub.last_cursor if sub.last_cursor is not None else bus.last_seq
                sub = await bus.subscribe(after=after, max_queue=100_000)
            except (BusClosed, EventBusError):
                return

    async def _track_one(self, type_: str, session_id: str, turn_id: str | None) -> None:
        store = self.store
        if type_ == EventType.SESSION_CREATED:
            record = store.get_session(session_id)
            if record is not None:  # created here (a route, or a sub-agent's session)
                await self.session_created(record)
            return
        if type_ == EventType.SESSION_DELETED:
            await self.session_deleted(session_id)
            return
        if session_id not in self.leases.held or turn_id is None:
            return
        if type_ not in OWNERSHIP_EVENTS:  # a turn's start or end: describe it again
            return
        record = store.get_session(session_id)
        if record is not None:
            await self._describe(record)

    def _lease_lost(self, session_id: str) -> None:
        # Another replica may have adopted it: requests now go there. Turns still
        # running here were already ended replica_lost by the survivor that claimed them.
        log.warning("cluster: lost the lease of session %s", session_id)

    # -- replica loss ----------------------------------------------------------------

    async def _on_lost(self, lost: LostTurns) -> None:
        """End a dead owner's turns: confirmations ``cancelled``, then ``turn.failed``
        (server/cluster_loss.py)."""
        assert self.bus is not None
        await end_lost_turns(self.bus, self.arbiter, self.replica_id, lost)

    # -- routing -----------------------------------------------------------------------

    async def route(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        """Run a session request here (owner), on its owner (forward), or adopt it."""
        assert self.inner_app is not None
        if scope.get(FORWARDED_KEY):
            await self._run_local(scope, receive, send, session_id)
            return
        try:
            owner = await self._owner(session_id)
        except RedisError:
            # A stale connection after a Redis restart fails once: check, retry once.
            try:
                await self._check_redis()
                owner = await self._owner(session_id)
            except RedisError as exc:
                await send_error(send, 503, "redis_unavailable", f"Redis cannot be reached: {exc}")
                return
        if owner == self.replica_id:
            await self._run_local(scope, receive, send, session_id)
        elif owner is not None:
            await self._forward(scope, receive, send, owner)
        else:
            await self._ownerless(scope, receive, send, session_id)

    async def _owner(self, session_id: str) -> str | None:
        owner = await self.leases.owner_of(session_id)
        if owner is None and self.store.get_session(session_id) is not None:
            # Created here and the lease lapsed (a long pause): take it back.
            if await self.leases.acquire(session_id):
                return self.replica_id
            owner = await self.leases.owner_of(session_id)
        return owner

    async def _run_local(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        assert self.inner_app is not None
        answer = _ANSWER_PATH.match(scope["path"]) if scope["method"] == "POST" else None
        if answer is None:
            await self.inner_app(scope, receive, send)
            return
        body = await read_body(receive)
        if await self._answer_lost(scope, send, session_id, answer.group(2), answer.group(3), body):
            return
        await self.inner_app(scope, replay(body, receive), send)

    async def _answer_lost(
        self, scope: Scope, send: Send, session_id: str, turn_id: str, request_id: str, body: bytes
    ) -> bool:
        """Decide a confirmation answer in Redis first; True if it lost (a 409 was sent).

        Anything the route itself refuses (not visible, unknown request, bad
        body, already resolved here) is left to the route, so the answers stay
        exactly the embedded server's."""
        principal = principal_of(scope)
        try:
            self.sessions.get(principal, session_id)
        except ApiError:
            return False
        broker = self.broker
        request = broker.get(request_id)
        if (
            request is None
            or request.session_id != session_id
            or request.turn_id != turn_id
            or broker.resolution(request_id) is not None
        ):
            return False
        try:
            parsed = json.loads(body)
        except ValueError:
            return False
        if not isinstance(parsed, dict) or parsed.get("decision") not in ("allow", "deny"):
            return False
        scope_name = parsed.get("scope", "once")
        if scope_name not in ("once", "session"):
            return False
        message = parsed.get("message")
        outcome = await self.arbiter.decide(
            request_id,
            str(parsed["decision"]),
            resolved_by=principal.client_name,
            scope=scope_name,
            extra={
                "tool_use_id": request.tool_use_id,
                "message": message,
                "resolved_by_token": principal.token_name,
            },
        )
        if outcome.won:
            return False
        await send_conflict(send, request_id, request.tool_use_id, outcome)
        return True

    async def _forward(self, scope: Scope, receive: Receive, send: Send, owner: str) -> None:
        body = await read_body(receive)
        principal = principal_of(scope)
        payload = {
            "method": scope["method"],
            "path": scope["path"],
            "query_string": scope.get("query_string", b"").decode("latin-1"),
            "headers": [
                [k.decode("latin-1"), v.decode("latin-1")]
                for k, v in scope.get("headers", [])
                if k.lower() not in (b"authorization", b"content-length")
            ],
            "body": base64.b64encode(body).decode("ascii"),
            "principal": {
                "token_name": principal.token_name,
                "role": principal.role,
                "client_name": principal.client_name,
                "allowed_roots": list(principal.allowed_roots),
            },
        }
        try:
            reply = await self.forwarder.call(owner, "http", payload, timeout_s=FORWARD_TIMEOUT_S)
        except ReplicaUnavailable as exc:
            await send_error(
                send, 503, "owner_unavailable", f"the session's owner is unavailable: {exc}"
            )
            return
        except ForwardError as exc:
            await send_error(send, exc.status, "forward_failed", f"forwarded to {owner}: {exc}")
            return
        except RedisError as exc:
            await send_error(send, 503, "redis_unavailable", f"Redis cannot be reached: {exc}")
            return
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply["headers"]]
        headers.append((REPLICA_HEADER, owner.encode("latin-1")))
        await send({"type": "http.response.start", "status": reply["status"], "headers": headers})
        await send({"type": "http.response.body", "body": base64.b64decode(reply["body"])})

    async def _handle(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The owner's side of a forwarded request: run it on this app as its caller."""
        if op != "http":
            raise HandlerRefused(f"unknown forwarded operation {op!r}", status=400)
        if self.inner_app is None:
            raise HandlerRefused("this replica has not served a request yet", status=503)
        path = str(payload["path"])
        session = SESSION_PATH.match(path)
        if session is None:
            raise HandlerRefused(f"not a session path: {path!r}", status=400)
        scope, session_id = forwarded_scope(payload, self.scope_app, FORWARDED_KEY), session[1]
        return await captured_reply(
            lambda receive, send: self.route(scope, receive, send, session_id),
            base64.b64decode(payload["body"]),
        )

    async def _ownerless(self, scope: Scope, receive: Receive, send: Send, session_id: str) -> None:
        """Nobody holds the lease: adopt the session here if its workspace is
        reachable, else say the owner is gone."""
        assert self.inner_app is not None
        try:
            session = await self.describe(session_id)
        except RedisError as exc:
            await send_error(send, 503, "redis_unavailable", f"Redis cannot be reached: {exc}")
            return
        if session is None:
            await self.inner_app(scope, receive, send)  # unknown everywhere: the route's 404
            return
        if not principal_of(scope).can_see(str(session.get("owner"))):
            await send_error(send, 404, "not_found", f"no session {session_id!r}")
            return
        answer = _ANSWER_PATH.match(scope["path"]) if scope["method"] == "POST" else None
        if answer is not None:
            winner = await self.arbiter.winner(answer.group(3))
            if winner is not None:
                tool_use_id = str(winner.extra.get("tool_use_id") or "")
                await send_conflict(send, answer.group(3), tool_use_id, winner)
                return
        if await self._adopt(session_id, session):
            await self._run_local(scope, receive, send, session_id)
            return
        owner = await self.leases.owner_of(session_id)
        if owner is not None and owner != self.replica_id:
            await self._forward(scope, receive, send, owner)  # another replica adopted it
            return
        await send_error(
            send,
            503,
            "owner_gone",
            f"the replica that owned session {session_id!r} is gone and its workspace "
            f"{session.get('workspace')!r} is not reachable from replica {self.replica_id}",
        )

    async def _adopt(self, session_id: str, session: dict[str, Any]) -> bool:
        """Take over a session whose owner is gone, if its workspace exists here.

        The session record comes from the directory; its conversation and turn
        records stayed in the lost replica's data dir (specs/scale-out.md)."""
        workspace = str(session.get("workspace"))
        # A stat that may block on a network volume: off the loop.
        if not await asyncio.to_thread(os.path.isdir, workspace):
            return False
        if not await self.leases.try_adopt(session_id):
            return False
        store = self.store
        if store.get_session(session_id) is None:
            store.add_session(
                SessionRecord(
                    id=session_id,
                    workspace=workspace,
                    owner=str(session.get("owner")),
                    name=session.get("name"),
                    model=session.get("model"),
                    policy_overrides=dict(session.get("policy_overrides") or {}),
                    created_at=str(session.get("created_at")),
                )
            )
        record = store.get_session(session_id)
        if record is not None:
            await self._describe(record)
        log.warning("cluster: adopted session %s (its owner is gone)", session_id)
        return True


# -- helpers -----------------------------------------------------------------------------


def _safe_url(url: str) -> str:
    """The Redis URL without a password (it would end up in logs)."""
    return re.sub(r"//[^@/]*@", "//***@", url)
