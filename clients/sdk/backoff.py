"""The SDK's retry and reconnect policy: :class:`protocol.backoff.Backoff`.

The SDK does not keep a copy: it ships in the same distribution as
``protocol`` (which imports nothing of ours), so it imports the one
implementation and re-exports it under the name SDK users know.
"""

from __future__ import annotations

from protocol.backoff import NO_RETRY, Backoff

__all__ = ["NO_RETRY", "Backoff"]
