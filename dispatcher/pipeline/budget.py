"""The ``limits:`` section: a session's token budget. The agent loop fires
``budget_warning`` hooks at ``warning_ratio`` of ``max_tokens`` and stops the
turn at 100 % with a clear reason; ``context_tokens`` is the size older tool
results are elided to fit (``context_compress``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

WARNING_RATIO = 0.8


class LimitsConfig(BaseModel):
    """Per-session budgets (None: no limit)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_tokens: int | None = Field(default=None, ge=1000)
    context_tokens: int | None = Field(default=None, ge=1000)
    warning_ratio: float = Field(default=WARNING_RATIO, gt=0, lt=1)

    def warning_at(self) -> int | None:
        """Tokens used at which ``budget_warning`` fires (None: never)."""
        if self.max_tokens is None:
            return None
        return int(self.max_tokens * self.warning_ratio)
