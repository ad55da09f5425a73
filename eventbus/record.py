"""EventRecord: one event as the bus moves it around, already encoded.

The bus encodes each envelope to UTF-8 JSON once, at publish time, and the
record keeps it as text: the same text is written to the log (encoded once
per batch, see eventbus.log_access.pack_append) and handed to every
subscriber (a WebSocket sends it as is). ``size`` is the exact UTF-8 length.

Why text only, decoded at once: a record held its orjson bytes and, from its
first send on, the decoded text too, so every queued event cost twice its
size, and the two buffers of different lifetimes fragmented the allocator:
in ``tests/reliability/test_slow_consumer.py`` (10 readers and a stuck one,
4 KB events) the server's RSS grew 53 MiB instead of 13 before the bytes
came in, with the same 4 MiB of live records (tracemalloc). Decoding an
ASCII envelope is a copy (~0.1 us for a typical event); bytes are made only
when asked (``encoded``) and not kept.

The pydantic ``Event`` view is built only if someone asks for it, and this
module imports only the standard library at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from protocol.envelope import Event


class EventRecord:
    """An encoded event plus the envelope fields the log indexes.

    ``text`` is the JSON envelope, identical for every reader, and
    ``encoded`` its UTF-8 bytes (made on each access: not kept, see the module
    docstring). ``size`` is its length in bytes when it was made from bytes
    (at publish); for a record read back from the log, its length in
    characters (an estimate that is exact for ASCII). ``event`` parses it into
    an ``Event`` on first access and caches it.
    """

    __slots__ = (
        "_event",
        "seq",
        "session_id",
        "session_seq",
        "size",
        "text",
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
        self.size = len(text)
        self.text: str = text.decode() if isinstance(text, bytes) else text
        self._event: Event | None = None

    @property
    def encoded(self) -> bytes:
        """The envelope's JSON as UTF-8 bytes (encoded on each access)."""
        return self.text.encode()

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
