"""The publish fast path: timestamps and the envelope's JSON text.

Building the envelope through pydantic, or even through ``json.dumps`` of the
whole dict, costs several microseconds per event on this project's machines;
the bus's budget is a few microseconds in total. So the fields the bus makes
itself (numbers, id, a type name from the closed catalog, the timestamp) are
known-safe ASCII and go into the text directly; ids the caller supplies are
quoted once and cached (sessions and turns publish many events each); only
``data`` is encoded per event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any

# Quoted ids are cached; the caches are dropped when they grow past this,
# which bounds memory on a server that sees many turns over its life.
_CACHE_LIMIT = 4096


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any], str]:
    """Strict, compact, ASCII-only JSON.

    ensure_ascii keeps the text pure ASCII, so lone surrogates (from
    undecodable subprocess output) become escapes instead of failing later in
    SQLite or on a socket; allow_nan=False keeps the output strict JSON that
    browsers can parse. ``JSONEncoder.encode`` rebuilds its C encoder on every
    call; building it once saves about 40% per event. Where the C accelerator
    is missing, the documented API is used.
    """
    make = getattr(_json_encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - CPython always has it
        return json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode
    # markers=None: no circular check; a cycle ends in RecursionError instead.
    c_encode = make(
        None, _refuse, _json_encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def encode(value: Any) -> str:
        return "".join(c_encode(value, 0))

    return encode


encode_json: Callable[[Any], str] = _make_encoder()
"""Strict JSON text of ``value``; TypeError/ValueError/RecursionError if JSON cannot hold it."""

_quote = _json_encoder.encode_basestring_ascii


class UtcClock:
    """RFC 3339 UTC timestamps with microseconds, e.g. ``2026-05-08T10:00:00.123456Z``.

    Formatting the date part is the costly step, so it is cached per second.
    """

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        now = time.time()
        second = int(now)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return "%s.%06dZ" % (self._prefix, (now - second) * 1_000_000)  # noqa: UP031 - fastest


class EnvelopeEncoder:
    """Builds the envelope text with the keys in the order of ``Event``."""

    __slots__ = ("_quoted",)

    def __init__(self) -> None:
        self._quoted: dict[str, str] = {}

    def quote(self, value: str) -> str:
        """``value`` (a session or turn id) as a JSON string literal, cached.

        ValueError if it holds lone surrogates, which SQLite text cannot store.
        """
        quoted = self._quoted.get(value)
        if quoted is None:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                # The log stores ids as SQLite text, which must be valid UTF-8.
                raise ValueError(f"id {value!r} is not valid Unicode text") from None
            if len(self._quoted) >= _CACHE_LIMIT:
                self._quoted.clear()
            quoted = self._quoted[value] = _quote(value)
        return quoted

    def encode(
        self,
        *,
        seq: int,
        session_seq: int,
        event_id: str,
        type: str,
        session_id: str,
        turn_id: str | None,
        ts: str,
        data: dict[str, Any],
    ) -> str:
        """The envelope's JSON text.

        ``event_id``, ``type`` and ``ts`` must be JSON-safe ASCII without
        quotes or backslashes (the bus guarantees it); the rest is encoded.
        Raises TypeError/ValueError/RecursionError when ``data`` is not JSON.
        """
        turn = "null" if turn_id is None else self.quote(turn_id)
        return (
            f'{{"seq":{seq},"session_seq":{session_seq},"id":"{event_id}","type":"{type}",'
            f'"session_id":{self.quote(session_id)},"turn_id":{turn},"ts":"{ts}",'
            f'"data":{encode_json(data)}}}'
        )
