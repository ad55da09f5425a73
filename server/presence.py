"""Presence: which clients are attached to which session's event stream."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from server.store import now_rfc3339


@dataclass(frozen=True, slots=True)
class Attachment:
    """One open event stream. ``session_id`` is None for the all-sessions stream."""

    client_id: str
    client_name: str
    token_name: str
    session_id: str | None
    attached_at: str = field(default_factory=now_rfc3339)

    def to_json(self) -> dict[str, str | None]:
        return {
            "client_id": self.client_id,
            "client_name": self.client_name,
            "attached_at": self.attached_at,
            "stream": "all" if self.session_id is None else "session",
        }


class Presence:
    """Open event streams, by session."""

    def __init__(self) -> None:
        self._by_session: dict[str | None, dict[str, Attachment]] = {}

    def attach(self, *, session_id: str | None, client_name: str, token_name: str) -> Attachment:
        attachment = Attachment(
            client_id="cli_" + secrets.token_hex(6),
            client_name=client_name,
            token_name=token_name,
            session_id=session_id,
        )
        self._by_session.setdefault(session_id, {})[attachment.client_id] = attachment
        return attachment

    def detach(self, attachment: Attachment) -> bool:
        clients = self._by_session.get(attachment.session_id)
        if clients is None or clients.pop(attachment.client_id, None) is None:
            return False
        if not clients:
            del self._by_session[attachment.session_id]
        return True

    def clients(self, session_id: str) -> list[Attachment]:
        """Clients watching this session's own stream, in attach order."""
        return list(self._by_session.get(session_id, {}).values())

    def watchers(self) -> list[Attachment]:
        """Clients watching the all-sessions stream."""
        return list(self._by_session.get(None, {}).values())

    def count(self) -> int:
        return sum(len(c) for c in self._by_session.values())
