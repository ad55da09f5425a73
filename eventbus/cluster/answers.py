"""AnswerArbiter: the first answer to a confirmation wins, across replicas."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from eventbus.cluster.keys import Keys
from eventbus.cluster.scripts import ANSWER


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """Whether this answer won, and the answer that did (this one or an earlier)."""

    won: bool
    decision: str
    scope: str | None
    resolved_by: str
    extra: dict[str, Any]


class AnswerArbiter:
    """Decides atomically in Redis which answer to a request is the one.

    Every replica asks ``decide``; the first call stores its answer under
    ``answer:<request_id>`` (kept ``ttl_ms``, longer than any confirmation
    waits) and wins; later calls get ``won=False`` and the winner, for the
    409 that names it.
    """

    def __init__(
        self, client: aioredis.Redis, *, keys: Keys | None = None, ttl_ms: int = 86_400_000
    ) -> None:
        self.keys = keys or Keys()
        self.ttl_ms = ttl_ms
        self._redis = client
        self._answer = client.register_script(ANSWER)

    async def winner(self, request_id: str) -> AnswerOutcome | None:
        """The stored answer of a request, without answering it (None: none yet)."""
        stored = await self._redis.get(self.keys.answer(request_id))
        if stored is None:
            return None
        winner = json.loads(stored)
        return AnswerOutcome(
            won=False,
            decision=str(winner["decision"]),
            scope=winner["scope"],
            resolved_by=str(winner["resolved_by"]),
            extra=dict(winner["extra"]),
        )

    async def decide(
        self,
        request_id: str,
        decision: str,
        *,
        resolved_by: str,
        scope: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> AnswerOutcome:
        answer = json.dumps(
            {"decision": decision, "scope": scope, "resolved_by": resolved_by, "extra": extra or {}}
        )
        won, stored = await self._answer(
            keys=[self.keys.answer(request_id)], args=[answer, self.ttl_ms]
        )
        winner = json.loads(stored)
        return AnswerOutcome(
            won=bool(int(won)),
            decision=str(winner["decision"]),
            scope=winner["scope"],
            resolved_by=str(winner["resolved_by"]),
            extra=dict(winner["extra"]),
        )
