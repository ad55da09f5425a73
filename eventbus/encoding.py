"""The publish fast path: timestamps and the envelope's JSON, as UTF-8 bytes.

Every envelope is encoded once, by orjson, into UTF-8 bytes; the record
keeps their text (decoded at once, one copy per event: see eventbus.record),
which the log's append frame carries and a WebSocket sends. ``benchmarks/event_encoding.py``
measured orjson, msgspec and the standard library's C encoder on realistic
envelopes: orjson and msgspec were within noise of each other and 5-8 times
faster than the standard library on a 2 KB tool output (whose ASCII escaping
dominated); orjson was chosen because it refuses ``bytes`` (msgspec silently
writes base64) and needs no private API.

What the encoder does with values JSON cannot hold:

- objects of other types, ``bytes``, dict keys that are neither strings nor
  numbers, cycles (orjson's depth limit): TypeError (the bus raises
  EventNotSerializable);
- NaN and infinities: ``null`` (orjson's rule; the output stays strict JSON);
- dataclasses, datetimes, UUIDs and enums: written as orjson writes them
  (the standard library refused the first three);
- strings with lone surrogates (which UTF-8 cannot carry): each surrogate
  becomes U+FFFD. Subprocess output is decoded with ``errors="replace"`` where
  it enters, so this happens only for text that arrived otherwise (a provider's
  JSON may spell ``"\\ud800"``); the check costs nothing unless the first
  encoding attempt fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

_time_ns = time.time_ns

# Quoted ids are cached; the caches are dropped when they grow past this,
# which bounds memory on a server that sees many turns over its life.
_CACHE_LIMIT = 4096
# On the retry only (it costs ~30% on every call): dict keys that are numbers
# are written as strings, as the standard library did.
_RETRY_OPTIONS = orjson.OPT_NON_STR_KEYS
_SURROGATE = re.compile("[\ud800-\udfff]")


def _parts(value: Any) -> Any:
    """orjson's fallback: a payload part (a pydantic model) as its fields."""
    fields = getattr(type(value), "__pydantic_fields__", None)
    if fields is not None:
        return model_fields(value)
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def model_fields(model: Any) -> dict[str, Any]:
    """A pydantic model's field values plus its extra keys, without ``model_dump``
    (which costs microseconds): nested models are left for ``_parts``."""
    values: dict[str, Any] = model.__dict__
    extra = model.__pydantic_extra__
    return {**values, **extra} if extra else values


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, Mapping):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_surrogates(v) for v in value]
    if getattr(type(value), "__pydantic_fields__", None) is not None:
        return _without_surrogates(model_fields(value))
    return value


def encode_json(value: Any) -> bytes:
    """Strict JSON of ``value`` as UTF-8; TypeError if JSON cannot hold it.

    Lone surrogates in strings become U+FFFD and numeric dict keys strings
    (see the module docstring): both on a second attempt, after the first
    failed, so the usual event pays nothing for them."""
    try:
        return orjson.dumps(value, default=_parts)
    except TypeError as exc:
        problem = str(exc)
        if "surrogates" in problem:
            value = _without_surrogates(value)
        elif "Dict key" not in problem:
            raise
    return orjson.dumps(value, default=_parts, option=_RETRY_OPTIONS)


class UtcClock:
    """RFC 3339 UTC timestamps with microseconds, e.g. ``2026-05-08T10:00:00.123456Z``.

    Formatting the date part is the costly step, so it is cached per second.
    """

    __slots__ = ("_prefix", "_second")

    def __init__(self) -> None:
        self._second = -1
        self._prefix = ""

    def now(self) -> str:
        # Integer nanoseconds: no float rounding, and ~0.07 us faster per event.
        second, micros = divmod(_time_ns() // 1000, 1_000_000)
        if second != self._second:
            self._prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return "%s.%06dZ" % (self._prefix, micros)  # noqa: UP031 - fastest


class EnvelopeEncoder:
    """Builds the envelope's UTF-8 JSON with the keys in the order of ``Event``.

    One ``orjson.dumps`` of the whole envelope: measured faster than joining a
    pre-quoted head with the encoded ``data`` (copying the bytes again cost
    more than the few short keys orjson writes). Session and turn ids are
    checked once each and remembered (sessions and turns publish many events).
    """

    __slots__ = ("_checked",)

    def __init__(self) -> None:
        self._checked: set[str] = set()

    def check_id(self, value: str) -> None:
        """ValueError if ``value`` (a session or turn id) holds lone surrogates:
        an id is an identity, so it is refused rather than altered (and SQLite
        text must be valid UTF-8)."""
        if value in self._checked:
            return
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError(f"id {value!r} is not valid Unicode text") from None
        if len(self._checked) >= _CACHE_LIMIT:
            self._checked.clear()
        self._checked.add(value)

    def encode(
        self,
        seq: int,
        session_seq: int,
        event_id: str,
        type: str,
        session_id: str,
        turn_id: str | None,
        ts: str,
        data: Any,
    ) -> bytes:
        """The envelope's UTF-8 JSON. ``data`` is a mapping or a payload model.
        The arguments may be positional, in the envelope's order (the bus's
        hot path: a keyword call of eight costs ~0.1 us more per event).

        Raises TypeError when ``data`` is not JSON, ValueError for an id that
        is not valid Unicode text.
        """
        checked = self._checked
        # Inline membership tests: the ids of a session's events are almost
        # always checked already, and a method call per id costs more.
        if session_id not in checked:
            self.check_id(session_id)
        if turn_id is not None and turn_id not in checked:
            self.check_id(turn_id)
        envelope = {
            "seq": seq,
            "session_seq": session_seq,
            "id": event_id,
            "type": type,
            "session_id": session_id,
            "turn_id": turn_id,
            "ts": ts,
            "data": data,
        }
        try:
            return orjson.dumps(envelope, default=_parts)
        except TypeError:
            return encode_json(envelope)  # the retry rules live there
