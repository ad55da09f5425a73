"""EventRecord: one event as the bus moves it around, already encoded.

The bus encodes each envelope to UTF-8 JSON once, at publish time; the same
bytes are written to the log and the same text is handed to every subscriber
(a WebSocket sends it as is). A record made at publish time holds the bytes
and decodes its text on first use (once, shared by every subscriber); one
read back from the log holds the text and encodes bytes only if asked. The
pydantic ``Event`` view is built only if someone asks for it, and this module
imports only the standard library at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol.envelope import Event


class EventRecord:
    """An encoded event plus the envelope fields the log indexes.

    ``text`` is the JSON envelope and ``encoded`` its UTF-8 bytes, identical
    for every reader; ``size`` is its length in bytes (for a record read back
    from the log, its length in characters: an estimate that is exact for
    ASCII). ``event`` parses it into an ``Event`` on first access and caches it.
    """

    __slots__ = (
        "_encoded",
        "_event",
        "_text",
        "seq",
        "session_id",
        "session_seq",
        "size",
        "ts",
        "turn_id",
        "type",
    )

    def __init__(
        self,
        seq: int,
        session_seq: int,
        session_id: str,
        type: str,
        turn_id: str | None,
        ts: str,
        text: str | bytes,
    ) -> None:
        self.seq = seq
        self.session_seq = session_seq
        self.session_id = session_id
        self.type = type
        self.turn_id = turn_id
        self.ts = ts
        self._encoded: bytes | None
        self._text: str | None
        if isinstance(text, bytes):
            self._encoded, self._text = text, None
        else:
            self._encoded, self._text = None, text
        self.size = len(text)
        self._event: Event | None = None

    @property
    def text(self) -> str:
        """The envelope's JSON text (decoded once from the bytes, then cached)."""
        text = self._text
        if text is None:
            assert self._encoded is not None
            text = self._text = self._encoded.decode()
        return text

    @property
    def encoded(self) -> bytes:
        """The envelope's JSON as UTF-8 bytes."""
        encoded = self._encoded
        if encoded is None:
            assert self._text is not None
            encoded = self._encoded = self._text.encode()
        return encoded

    @property
    def event(self) -> Event:
        """The envelope as a validated, immutable ``Event``."""
        if self._event is None:
            # Imported here: the log process uses records without loading pydantic.
            from protocol.envelope import Event

            self._event = Event.model_validate_json(self.encoded)
        return self._event

    def cursor(self, *, per_session: bool) -> int:
        """``session_seq`` for a per-session stream, else the global ``seq``."""
        return self.session_seq if per_session else self.seq

    def __repr__(self) -> str:
        return (
            f"EventRecord(seq={self.seq}, session_id={self.session_id!r}, "
            f"session_seq={self.session_seq}, type={self.type!r})"
        )
