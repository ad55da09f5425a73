"""EventRecord: one event as the bus moves it around, already encoded.

The bus encodes each envelope to JSON once, at publish time; the same text is
written to the log and handed to every subscriber (a WebSocket sends it as
is). The pydantic ``Event`` view is built only if someone asks for it, and
this module imports only the standard library at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol.envelope import Event


class EventRecord:
    """An encoded event plus the envelope fields the log indexes.

    ``text`` is the JSON envelope, identical for every reader. ``event``
    parses it into an ``Event`` on first access and caches it.
    """

    __slots__ = ("_event", "seq", "session_id", "session_seq", "text", "ts", "turn_id", "type")

    def __init__(
        self,
        seq: int,
        session_seq: int,
        session_id: str,
        type: str,
        turn_id: str | None,
        ts: str,
        text: str,
    ) -> None:
        self.seq = seq
        self.session_seq = session_seq
        self.session_id = session_id
        self.type = type
        self.turn_id = turn_id
        self.ts = ts
        self.text = text
        self._event: Event | None = None

    @property
    def event(self) -> Event:
        """The envelope as a validated, immutable ``Event``."""
        if self._event is None:
            # Imported here: the log process uses records without loading pydantic.
            from protocol.envelope import Event

            self._event = Event.model_validate_json(self.text)
        return self._event

    def cursor(self, *, per_session: bool) -> int:
        """``session_seq`` for a per-session stream, else the global ``seq``."""
        return self.session_seq if per_session else self.seq

    def __repr__(self) -> str:
        return (
            f"EventRecord(seq={self.seq}, session_id={self.session_id!r}, "
            f"session_seq={self.session_seq}, type={self.type!r})"
        )
