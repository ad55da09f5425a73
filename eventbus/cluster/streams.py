"""Typed access to the stream commands the cluster uses.

redis-py types replies as unions of bytes, str and None (it cannot know the
client decodes); the cluster's clients always decode, so these helpers state
the shape once instead of casting at every call.
"""

from __future__ import annotations

from typing import Any, cast

import redis.asyncio as aioredis

Entry = tuple[str, dict[str, str]]
"""A stream entry: its id (``<number>-0``) and its fields."""


def entry_number(entry_id: str) -> int:
    """The number an entry id starts with (``seq`` or ``session_seq``)."""
    return int(entry_id.partition("-")[0])


async def xrange(
    client: aioredis.Redis, key: str, start: str, end: str = "+", count: int | None = None
) -> list[Entry]:
    reply = await client.xrange(key, start, end, count=count)
    return cast(list[Entry], reply or [])


async def xread_one(
    client: aioredis.Redis, key: str, after: str, count: int, block_ms: int
) -> list[Entry]:
    """Entries of one stream after the id ``after``, waiting up to ``block_ms``."""
    reply: Any = await client.xread({key: after}, count=count, block=block_ms)
    if not reply:
        return []
    if isinstance(reply, dict):  # RESP3
        return cast(list[Entry], reply.get(key, [[]])[0])
    return cast(list[Entry], reply[0][1])


def decoded(value: Any) -> str | None:
    """A decoded reply (str or None)."""
    return cast(str | None, value)
