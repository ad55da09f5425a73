"""The async HTTP client: sessions, turns, confirmations, presence, events.

Example::

    async with ToolrelayClient("http://127.0.0.1:8765", token, client_name="script") as tr:
        session = await tr.create_session("/path/to/workspace")
        turn_id = await tr.send_tool_uses(
            session.id, [{"id": "tu1", "name": "write_file",
                          "input": {"path": "a.txt", "content": "hi"}}]
        )
        async with tr.events(session.id, after=0) as stream:
            async for event in stream:
                if isinstance(event, ConfirmationRequested):
                    await tr.allow(session.id, turn_id, event.data.request_id)
                if event.type == "turn.completed":
                    break
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx2
from pydantic import BaseModel, ValidationError

from clients.sdk.backoff import Backoff
from clients.sdk.errors import (
    AlreadyResolved,
    ApiError,
    Conflict,
    ConnectionFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    ProtocolViolation,
    ServerFault,
    ToolrelayError,
    Unauthorized,
    WaitTimeout,
)
from clients.sdk.events import TERMINAL_TURN_EVENTS, AnyEvent
from clients.sdk.models import (
    AttachedClient,
    ConversationMessage,
    Decision,
    PendingConfirmation,
    Resolution,
    Scope,
    Session,
    ToolInfo,
    Turn,
)
from clients.sdk.stream import EventStream, StateCallback
from protocol.catalog import EventType

ModelT = TypeVar("ModelT", bound=BaseModel)

_STATUS_ERRORS: Mapping[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
}
# Answers worth retrying for a read: the server is starting, stopping or overloaded.
_RETRY_STATUSES = frozenset({502, 503, 504})
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS"})


def _error_fields(body: Any) -> tuple[str | None, str | None]:
    """The server's ``{"error": {"code", "message"}}`` (or FastAPI's ``detail``)."""
    if isinstance(body, Mapping):
        err = body.get("error")
        if isinstance(err, Mapping):
            code, message = err.get("code"), err.get("message")
            return (str(code) if code is not None else None, str(message) if message else None)
        if isinstance(err, str):
            return None, err
        detail = body.get("detail")
        if detail is not None:
            return None, detail if isinstance(detail, str) else str(detail)
    return None, None


def _find_resolution(body: Any) -> Resolution | None:
    """The winning decision inside a 409 body, wherever the server nests it."""
    candidates: list[Any] = [body]
    if isinstance(body, Mapping):
        err = body.get("error")
        candidates.append(err)
        for holder in (body, err):
            if isinstance(holder, Mapping):
                candidates.extend(holder.get(k) for k in ("resolution", "winner", "winning"))
    for candidate in candidates:
        if isinstance(candidate, Mapping) and "decision" in candidate:
            try:
                return Resolution.model_validate(candidate)
            except ValidationError:
                continue
    return None


class ToolrelayClient:
    """Talks to one toolrelay server over HTTP (and WebSocket, for events).

    ``client_name`` is sent as ``X-Client-Name``: the server reports it as
    ``resolved_by`` on confirmations this client answers and in presence.
    Idempotent reads are retried on connection failures and 502/503/504 with
    bounded backoff; every call also retries when the connection could not
    be opened at all (the request never reached the server).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        client_name: str | None = None,
        *,
        timeout: float = 30.0,
        backoff: Backoff | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not token:
            raise ValueError("token must not be empty")
        self.base_url = base_url.rstrip("/")
        self.client_name = client_name
        self._token = token
        self._backoff = backoff or Backoff(attempts=5)
        headers = {"Authorization": f"Bearer {token}", "User-Agent": "toolrelay-sdk"}
        if client_name:
            headers["X-Client-Name"] = client_name
        # trust_env=False: a proxy from the environment must never see our token.
        self._http = httpx2.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout, trust_env=False
        )

    async def __aenter__(self) -> ToolrelayClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()

    # -- plumbing ---------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        expect: Sequence[int] = (200,),
    ) -> httpx2.Response:
        delays = self._backoff.delays()
        while True:
            try:
                response = await self._http.request(method, path, json=json)
            except httpx2.ConnectError as exc:
                failure: str = f"cannot connect: {exc}"
            except (
                httpx2.TimeoutException,
                httpx2.NetworkError,
                httpx2.RemoteProtocolError,
            ) as exc:
                if method not in _IDEMPOTENT:
                    # The server may have acted on it; repeating could act twice.
                    raise ConnectionFailed(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
                failure = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in expect:
                    return response
                if response.status_code not in _RETRY_STATUSES or method not in _IDEMPOTENT:
                    raise self._error(response, method, path)
                failure = f"HTTP {response.status_code}"
            delay = next(delays, None)
            if delay is None:
                raise ConnectionFailed(
                    f"{method} {self.base_url}{path} failed after "
                    f"{self._backoff.attempts} retries: {failure}"
                )
            await asyncio.sleep(delay)

    @staticmethod
    def _body(response: httpx2.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            return response.text

    def _error(self, response: httpx2.Response, method: str, path: str) -> ApiError:
        body = self._body(response)
        code, message = _error_fields(body)
        status = response.status_code
        error_type = _STATUS_ERRORS.get(status, ServerFault if status >= 500 else ApiError)
        return error_type(
            status,
            message or response.reason_phrase or f"HTTP {status}",
            code=code,
            method=method,
            path=path,
            body=body,
        )

    def _parse(self, model: type[ModelT], body: Any, what: str) -> ModelT:
        try:
            return model.model_validate(body)
        except ValidationError as exc:
            raise ProtocolViolation(f"unexpected {what} from the server: {exc}") from None

    def _parse_list(self, model: type[ModelT], body: Any, key: str) -> list[ModelT]:
        items = body.get(key) if isinstance(body, Mapping) else body
        if not isinstance(items, list):
            raise ProtocolViolation(f"expected a list of {key} from the server, got {body!r:.200}")
        return [self._parse(model, item, key) for item in items]

    async def _get_json(self, path: str) -> Any:
        return self._body(await self._request("GET", path))

    # -- health -----------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``GET /healthz``."""
        body = await self._get_json("/healthz")
        return body if isinstance(body, dict) else {"status": body}

    # -- sessions ---------------------------------------------------------------

    async def create_session(
        self,
        workspace: str | Path,
        *,
        name: str | None = None,
        policy: Mapping[str, Any] | None = None,
        model: str | None = None,
        profile: str | None = None,
        agent: str | None = None,
        dry_run: bool = False,
        **extra: Any,
    ) -> Session:
        """``POST /sessions``: a new session rooted at ``workspace`` (which must exist).

        ``profile`` and ``agent`` name a permission profile and an agent;
        ``dry_run`` makes every turn a dry-run. Only what is set is sent, so a
        server older than these fields never sees them.
        """
        payload: dict[str, Any] = {"workspace": str(workspace), **extra}
        if name is not None:
            payload["name"] = name
        if policy is not None:
            payload["policy"] = dict(policy)
        if model is not None:
            payload["model"] = model
        if profile is not None:
            payload["profile"] = profile
        if agent is not None:
            payload["agent"] = agent
        if dry_run:
            payload["dry_run"] = True
        response = await self._request("POST", "/sessions", json=payload, expect=(200, 201))
        return self._parse(Session, self._body(response), "session")

    async def list_sessions(self) -> list[Session]:
        """``GET /sessions``: the sessions this token may see."""
        return self._parse_list(Session, await self._get_json("/sessions"), "sessions")

    async def get_session(self, session_id: str) -> Session:
        """``GET /sessions/{id}``."""
        return self._parse(Session, await self._get_json(f"/sessions/{session_id}"), "session")

    async def delete_session(self, session_id: str) -> None:
        """``DELETE /sessions/{id}`` (cancels its running turn)."""
        await self._request("DELETE", f"/sessions/{session_id}", expect=(200, 202, 204))

    async def list_tools(self, session_id: str) -> list[ToolInfo]:
        """``GET /sessions/{id}/tools``: the tool definitions the session offers."""
        body = await self._get_json(f"/sessions/{session_id}/tools")
        return self._parse_list(ToolInfo, body, "tools")

    async def get_messages(self, session_id: str) -> list[ConversationMessage]:
        """``GET /sessions/{id}/messages``: the conversation so far."""
        body = await self._get_json(f"/sessions/{session_id}/messages")
        return self._parse_list(ConversationMessage, body, "messages")

    # -- turns --------------------------------------------------------------------

    async def _start_turn(self, session_id: str, payload: dict[str, Any]) -> str:
        response = await self._request(
            "POST", f"/sessions/{session_id}/turns", json=payload, expect=(200, 201, 202)
        )
        body = self._body(response)
        turn_id = body.get("turn_id") if isinstance(body, Mapping) else None
        if not isinstance(turn_id, str):
            raise ProtocolViolation(f"turn creation answered without a turn_id: {body!r:.200}")
        return turn_id

    async def send_message(self, session_id: str, text: str, *, dry_run: bool = False) -> str:
        """Start a turn the model drives from a user message; returns the turn id.

        With ``dry_run`` the turn's write and execute calls are recorded in its
        ``plan`` (``Turn.plan``, ``turn.completed.data.plan``), not run.
        """
        payload: dict[str, Any] = {"message": text}
        if dry_run:
            payload["dry_run"] = True
        return await self._start_turn(session_id, payload)

    async def send_tool_uses(
        self, session_id: str, tool_uses: Sequence[Mapping[str, Any]], *, dry_run: bool = False
    ) -> str:
        """Start a turn that plays the model: run these ``{"id","name","input"}`` calls.

        Returns the turn id. Raises Conflict while another turn is running.
        ``dry_run`` as for :meth:`send_message`.
        """
        payload: dict[str, Any] = {"tool_uses": [dict(use) for use in tool_uses]}
        if dry_run:
            payload["dry_run"] = True
        return await self._start_turn(session_id, payload)

    async def get_turn(self, session_id: str, turn_id: str) -> Turn:
        """``GET /sessions/{id}/turns/{turn_id}``: status and tool results."""
        body = await self._get_json(f"/sessions/{session_id}/turns/{turn_id}")
        if isinstance(body, dict) and "id" not in body and "turn_id" in body:
            body = {**body, "id": body["turn_id"]}
        return self._parse(Turn, body, "turn")

    async def cancel_turn(self, session_id: str, turn_id: str) -> None:
        """Cancel the turn's running tools and pending confirmations."""
        await self._request(
            "POST", f"/sessions/{session_id}/turns/{turn_id}/cancel", expect=(200, 202, 204)
        )

    async def wait_for_turn(
        self,
        session_id: str,
        turn_id: str,
        *,
        within: float = 60.0,
        poll_interval: float = 2.0,
        raise_on_failure: bool = False,
    ) -> Turn:
        """Wait until the turn ends and return its final state.

        Watches the session's event stream for ``turn.completed/failed/cancelled``.
        Because a live stream may open just after the turn ended, the turn is
        also read over HTTP right after connecting and, as a safety net, every
        ``poll_interval`` seconds. Raises WaitTimeout after ``within`` seconds.

        A failed turn carries its ``reason`` and ``message`` (what went wrong,
        as the server said it); with ``raise_on_failure`` it raises
        :class:`TurnEndedFailed` instead of returning it.
        """
        seen: list[AnyEvent] = []
        turn = await self.get_turn(session_id, turn_id)
        if not turn.done:
            try:
                async with asyncio.timeout(within):
                    async with self.events(session_id) as stream:
                        turn = await self.get_turn(session_id, turn_id)
                        while not turn.done:
                            with contextlib.suppress(WaitTimeout):
                                seen.append(
                                    await stream.next_matching(
                                        lambda e: (
                                            e.turn_id == turn_id and e.type in TERMINAL_TURN_EVENTS
                                        ),
                                        within=poll_interval,
                                    )
                                )
                            turn = await self.get_turn(session_id, turn_id)
            except TimeoutError:
                raise WaitTimeout(f"turn {turn_id} did not finish within {within:g} s") from None
        if turn.failed:
            turn = await self._with_failure(session_id, turn, seen)
            if raise_on_failure:
                turn.raise_for_status()
        return turn

    async def _with_failure(self, session_id: str, turn: Turn, seen: list[AnyEvent]) -> Turn:
        """``turn`` with its failure message and details from its ``turn.failed``
        event: the one already seen, else found by replaying the session's log."""
        event = next((e for e in seen if e.type == EventType.TURN_FAILED), None)
        if event is None:
            try:
                async with self.events(session_id, after=0) as replay:
                    event = await replay.next_matching(
                        lambda e: e.turn_id == turn.id and e.type == EventType.TURN_FAILED,
                        within=10.0,
                    )
            except ToolrelayError:
                event = None
        data = event.data.model_dump(mode="json") if event is not None else {}
        message = turn.message or data.pop("message", None)
        data.pop("reason", None)
        data.pop("message", None)
        return turn.model_copy(
            update={
                "reason": turn.reason or (event.data.reason if event is not None else None),
                "message": message if isinstance(message, str) else None,
                "failure_details": data or None,
            }
        )

    # -- confirmations ------------------------------------------------------------

    async def pending_confirmations(self, session_id: str) -> list[PendingConfirmation]:
        """``GET /sessions/{id}/confirmations``: requests still waiting for an answer."""
        body = await self._get_json(f"/sessions/{session_id}/confirmations")
        return self._parse_list(PendingConfirmation, body, "confirmations")

    async def answer_confirmation(
        self,
        session_id: str,
        turn_id: str,
        request_id: str,
        decision: Decision,
        *,
        scope: Scope = "once",
        message: str | None = None,
    ) -> Resolution:
        """Answer a confirmation request; returns the resolution if this answer won.

        Raises AlreadyResolved (a Conflict) carrying the winning resolution when
        another answer (or the timeout, or a cancel) came first.
        """
        if decision not in ("allow", "deny"):
            raise ValueError(f"decision must be 'allow' or 'deny', got {decision!r}")
        if scope not in ("once", "session"):
            raise ValueError(f"scope must be 'once' or 'session', got {scope!r}")
        payload: dict[str, Any] = {"decision": decision, "scope": scope}
        if message is not None:
            payload["message"] = message
        path = f"/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}"
        try:
            response = await self._request("POST", path, json=payload)
        except Conflict as exc:
            winner = _find_resolution(exc.body)
            if winner is None:
                raise
            raise AlreadyResolved(
                winner,
                status=exc.status,
                message=exc.server_message,
                code=exc.code,
                method=exc.method,
                path=exc.path,
                body=exc.body,
            ) from None
        body = self._body(response)
        won = _find_resolution(body)
        if won is None:
            raise ProtocolViolation(f"confirmation answer returned no decision: {body!r:.200}")
        return won

    async def allow(
        self, session_id: str, turn_id: str, request_id: str, *, scope: Scope = "once"
    ) -> Resolution:
        """Shorthand for ``answer_confirmation(..., "allow", scope=scope)``."""
        return await self.answer_confirmation(session_id, turn_id, request_id, "allow", scope=scope)

    async def deny(
        self, session_id: str, turn_id: str, request_id: str, *, message: str | None = None
    ) -> Resolution:
        """Shorthand for ``answer_confirmation(..., "deny", message=message)``."""
        return await self.answer_confirmation(
            session_id, turn_id, request_id, "deny", message=message
        )

    # -- presence -----------------------------------------------------------------

    async def attached_clients(self, session_id: str) -> list[AttachedClient]:
        """``GET /sessions/{id}/clients``: who watches the session's stream now."""
        body = await self._get_json(f"/sessions/{session_id}/clients")
        return self._parse_list(AttachedClient, body, "clients")

    # -- events -------------------------------------------------------------------

    def events(
        self,
        session_id: str | None = None,
        after: int | None = None,
        *,
        backoff: Backoff | None = None,
        on_state: StateCallback | None = None,
    ) -> EventStream:
        """A resumable, gap-checked stream of typed events.

        With ``session_id``, the session's events (``after`` is a session_seq);
        without, every session the token may see (``after`` is a global seq).
        ``after=None`` starts live; ``after=0`` replays from the beginning.
        """
        return EventStream(
            self.base_url,
            self._token,
            session_id=session_id,
            after=after,
            client_name=self.client_name,
            backoff=backoff,
            on_state=on_state,
        )


__all__ = ["ToolrelayClient", "ToolrelayError"]
