"""The one way a search tool counts what it found against its cap.

A scan collects ``wanted(limit)`` items (one more than the cap), so that
``cap(found, limit)`` can tell "exactly the cap" from "more than the cap"
without counting everything; every search tool reports ``count`` and
``truncated`` from the result and words the notice with ``notice``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


def wanted(limit: int) -> int:
    """How many items a scan collects for a cap of ``limit``."""
    return limit + 1


@dataclass(frozen=True, slots=True)
class Capped(Generic[T]):
    """What a tool shows (at most the cap) and whether more were found."""

    items: list[T]
    truncated: bool

    @property
    def count(self) -> int:
        return len(self.items)

    def notice(self, limit: int, what: str = "matches") -> str:
        """The line appended to a truncated listing ('' when nothing was cut)."""
        return f"[truncated: only the first {limit} {what} are shown]" if self.truncated else ""


def cap(found: list[T], limit: int) -> Capped[T]:
    """``found`` (collected with ``wanted(limit)``) cut to ``limit``."""
    return Capped(found[:limit], len(found) > limit)
