"""Pending confirmation requests and their first-answer-wins resolution.

The dispatcher asks; any number of clients answer through the server (HTTP),
the timeout answers for a person who never does, and cancelling a turn
answers for everyone. Whichever comes first wins; every later answer learns
the winner. All of it runs on the event loop, so "first" needs no lock.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from dispatcher.tool import CallRating
from protocol.canonical import SideEffects

Decision = Literal["allow", "deny", "timeout", "cancelled"]
Scope = Literal["once", "session"]

# Resolved requests are remembered so that a late answer gets 409 with the
# winner instead of 404; bounded so memory stays flat on a long-lived server.
RESOLVED_MEMORY = 10_000


class UnknownConfirmation(KeyError):
    """No confirmation request with this id exists (or it was forgotten)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(request_id)
        self.request_id = request_id

    def __str__(self) -> str:
        return f"no confirmation request {self.request_id!r}"


@dataclass(frozen=True, slots=True)
class ConfirmationRequest:
    """One call waiting for a person's answer."""

    request_id: str
    session_id: str
    turn_id: str
    tool_use_id: str
    tool_name: str
    side_effects: SideEffects
    rating: CallRating | None
    input_summary: str
    projected_modifications: tuple[str, ...]
    preview_kind: str
    preview_text: str
    expires_at: datetime
    # What "allow for session" would grant, in words (GrantScope.text).
    scope_text: str = ""

    def event_data(self) -> dict[str, Any]:
        """The ``tool.confirmation_requested`` payload."""
        return {
            "request_id": self.request_id,
            "tool_use_id": self.tool_use_id,
            "tool_name": self.tool_name,
            "side_effects": self.side_effects.value,
            "rating": self.rating.value if self.rating else None,
            "input_summary": self.input_summary,
            "projected_modifications": list(self.projected_modifications),
            "preview": {"kind": self.preview_kind, "text": self.preview_text},
            "expires_at": self.expires_at.isoformat().replace("+00:00", "Z"),
            "scope_text": self.scope_text,
        }


@dataclass(frozen=True, slots=True)
class RememberedAnswer:
    """An answer that holds for the rest of a session, for one grant key
    (see ``GrantScope``): ``allow`` up to ``rating`` (None: any rating), or
    ``deny``."""

    decision: Literal["allow", "deny"]
    rating: CallRating | None = None

    def allows(self, rating: CallRating | None) -> bool:
        """Whether this answer lets a part rated ``rating`` run unasked."""
        if self.decision != "allow":
            return False
        if self.rating is None:
            return True
        return rating is not None and _LEVEL[rating] <= _LEVEL[self.rating]


_LEVEL = {CallRating.SAFE: 0, CallRating.DEV: 1, CallRating.DANGEROUS: 2}


@dataclass(frozen=True, slots=True)
class Resolution:
    """The winning answer to a request; ``won`` tells a caller whether it was theirs.

    ``resolved_by`` is the name the answering client goes by, which it may
    choose (``X-Client-Name``); ``resolved_by_token`` is the configured name
    of the token that answered, which it cannot (None when the server itself
    settled the request: timeout, cancel)."""

    request_id: str
    decision: Decision
    scope: Scope
    resolved_by: str
    message: str | None = None
    won: bool = True
    resolved_by_token: str | None = None

    def event_data(self, tool_use_id: str) -> dict[str, Any]:
        """The ``tool.confirmation_resolved`` payload."""
        return {
            "request_id": self.request_id,
            "tool_use_id": tool_use_id,
            "decision": self.decision,
            "scope": self.scope,
            "resolved_by": self.resolved_by,
            "resolved_by_token": self.resolved_by_token,
            "message": self.message,
        }


@dataclass(slots=True)
class _Pending:
    request: ConfirmationRequest
    future: asyncio.Future[Resolution] = field(repr=False)


class ConfirmationBroker:
    """Holds pending requests; resolves each exactly once."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._resolved: OrderedDict[str, tuple[ConfirmationRequest, Resolution]] = OrderedDict()

    @staticmethod
    def new_request_id() -> str:
        return "conf_" + secrets.token_hex(8)

    @staticmethod
    def expiry(timeout: float) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=timeout)

    def pending(self, session_id: str | None = None) -> list[ConfirmationRequest]:
        return [
            p.request
            for p in self._pending.values()
            if session_id is None or p.request.session_id == session_id
        ]

    def get(self, request_id: str) -> ConfirmationRequest | None:
        if (p := self._pending.get(request_id)) is not None:
            return p.request
        done = self._resolved.get(request_id)
        return done[0] if done else None

    def resolution(self, request_id: str) -> Resolution | None:
        done = self._resolved.get(request_id)
        return done[1] if done else None

    async def ask(self, request: ConfirmationRequest, answer_within: float) -> Resolution:
        """Wait for the first answer; after ``answer_within`` seconds it is 'timeout'."""
        future: asyncio.Future[Resolution] = asyncio.get_running_loop().create_future()
        self._pending[request.request_id] = _Pending(request, future)
        try:
            async with asyncio.timeout(answer_within):
                return await asyncio.shield(future)
        except TimeoutError:
            return self._settle(request.request_id, "timeout", "once", "server", None)
        except asyncio.CancelledError:
            # The waiting call itself was cancelled: settle so late answers get 409.
            self._settle(request.request_id, "cancelled", "once", "server", None)
            raise

    def resolve(
        self,
        request_id: str,
        decision: Literal["allow", "deny"],
        *,
        scope: Scope = "once",
        resolved_by: str,
        resolved_by_token: str | None = None,
        message: str | None = None,
    ) -> Resolution:
        """Answer a request. The first answer wins; later ones get ``won=False``
        and the winning values. Raises UnknownConfirmation for unknown ids."""
        if request_id not in self._pending and request_id not in self._resolved:
            raise UnknownConfirmation(request_id)
        return self._settle(request_id, decision, scope, resolved_by, message, resolved_by_token)

    def cancel(self, request_id: str, *, resolved_by: str = "server") -> bool:
        """Settle one pending request as 'cancelled' (its caller went away);
        False when it was not pending."""
        if request_id not in self._pending:
            return False
        self._settle(request_id, "cancelled", "once", resolved_by, None)
        return True

    def cancel_session(self, session_id: str, *, resolved_by: str = "server") -> int:
        """Settle every pending request of a session as 'cancelled'."""
        ids = [rid for rid, p in self._pending.items() if p.request.session_id == session_id]
        for rid in ids:
            self._settle(rid, "cancelled", "once", resolved_by, None)
        return len(ids)

    def _settle(
        self,
        request_id: str,
        decision: Decision,
        scope: Scope,
        resolved_by: str,
        message: str | None,
        resolved_by_token: str | None = None,
    ) -> Resolution:
        pending = self._pending.pop(request_id, None)
        if pending is None:
            _, winner = self._resolved[request_id]
            return dataclasses.replace(winner, won=False)
        resolution = Resolution(
            request_id, decision, scope, resolved_by, message, True, resolved_by_token
        )
        self._resolved[request_id] = (pending.request, resolution)
        while len(self._resolved) > RESOLVED_MEMORY:
            self._resolved.popitem(last=False)
        if not pending.future.done():
            pending.future.set_result(resolution)
        return resolution
