"""Start-up check: every feature the configuration turns on has its extra.

``toolrelay serve`` calls :func:`require_configured` right after the config
loads, before it binds the port or touches the data dir, so a cluster
(``cluster.redis_url``) without the ``redis`` extra, or traces asked for by
the ``OTEL_*`` variables without the ``otel`` extra, stop start-up with one
line and exit 2, as a config error does, instead of failing later inside the
app's lifespan. What each extra holds: ``protocol.extras``.
"""

from __future__ import annotations

from collections.abc import Mapping

from protocol.extras import require
from server.config import Config
from server.tracing import tracing_configured


def configured_extras(config: Config, environ: Mapping[str, str]) -> list[str]:
    """The extras the configured features need, in a stable order."""
    needed: list[str] = []
    if config.cluster.redis_url:
        needed.append("redis")
    if tracing_configured(environ):
        needed.append("otel")
    return needed


def require_configured(config: Config, environ: Mapping[str, str]) -> None:
    """Raise ``protocol.extras.MissingExtra`` for the first configured
    feature whose extra is not installed."""
    for extra in configured_extras(config, environ):
        require(extra)
