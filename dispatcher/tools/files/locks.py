"""Per-file locks for the write tools.

A write tool reads a file, computes new content and writes it back. Two
calls on the same file (the model may emit several patch_file calls in one
message, and the dispatcher runs them concurrently) must not interleave those
steps, or one change silently overwrites the other. Every write tool takes the
lock of each physical path it touches, in sorted order so two multi-file calls
cannot deadlock. The locks serialise this process's tools only; a shell command
writing the same file is not covered.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager

# Weak values: a lock lives only while some call holds or waits for it.
_locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()


def _lock_for(path: str) -> asyncio.Lock:
    # Keyed by loop too: an asyncio.Lock must not be shared across event loops.
    key = (id(asyncio.get_running_loop()), path)
    lock = _locks.get(key)
    if lock is None:
        lock = asyncio.Lock()
        _locks[key] = lock
    return lock


@asynccontextmanager
async def locked_paths(paths: Iterable[str]) -> AsyncIterator[None]:
    """Hold the locks of every (absolute, resolved) path for the block."""
    async with AsyncExitStack() as stack:
        held = [_lock_for(p) for p in sorted(set(paths))]
        for lock in held:
            await stack.enter_async_context(lock)
        yield
