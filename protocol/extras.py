"""The optional parts of toolrelay, and the one error a missing one raises.

``pip install toolrelay`` gives a working default server; what it does not
need comes as an extra (``pip install 'toolrelay[code,otel]'``). ``EXTRAS``
names each extra's feature and the modules it brings: a feature that needs
one calls :func:`require` before it imports them, so a missing extra fails
with one line that says what to install instead of an ``ImportError`` deep
in a traceback. Configured features are checked at start-up (exit 2, as a
config error is, see ``server.extras``); a tool that needs one fails its call.

The table lives in the shared vocabulary because the dispatcher (code tools),
the event bus (the cluster's Redis) and the server all consult it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

DISTRIBUTION = "toolrelay"


@dataclass(frozen=True, slots=True)
class Extra:
    """One optional dependency group: ``feature`` is what a person turned on,
    ``modules`` what must import for it to work."""

    name: str
    feature: str
    modules: tuple[str, ...]


EXTRAS: dict[str, Extra] = {
    extra.name: extra
    for extra in (
        Extra(
            "code",
            "code intelligence",
            (
                "tree_sitter",
                "tree_sitter_go",
                "tree_sitter_java",
                "tree_sitter_javascript",
                "tree_sitter_python",
                "tree_sitter_rust",
                "tree_sitter_typescript",
            ),
        ),
        # opentelemetry-api alone comes with fastapi: the SDK and exporter are the extra.
        Extra(
            "otel",
            "OpenTelemetry tracing",
            ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
        ),
        Extra("redis", "cluster mode (cluster.redis_url)", ("redis.asyncio",)),
        Extra("tui", "the terminal UI", ("textual",)),
    )
}


class MissingExtra(ImportError):
    """A feature was asked for whose extra is not installed. Its message is
    the whole story, on one line:
    ``code intelligence needs the 'code' extra: pip install 'toolrelay[code]'``."""

    def __init__(self, extra: str) -> None:
        spec = EXTRAS[extra]
        super().__init__(
            f"{spec.feature} needs the {extra!r} extra: pip install '{DISTRIBUTION}[{extra}]'"
        )
        self.extra = extra


def require(extra: str) -> None:
    """Import the extra's modules, or raise :class:`MissingExtra` naming it.

    Importing (rather than looking for a spec) also catches a half-installed
    extra whose module is there but whose own dependencies are not.
    """
    for module in EXTRAS[extra].modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise MissingExtra(extra) from exc


def extra_for(exc: ImportError) -> str | None:
    """The extra whose module failed to import in ``exc``, if it was one."""
    missing = exc.name
    if not missing:
        return None
    for extra in EXTRAS.values():
        if any(m == missing or m.startswith(f"{missing}.") for m in extra.modules):
            return extra.name
    return None


def explain(exc: ImportError) -> str:
    """One line for a failed import: the extra to install if the module
    belongs to one, else the import error itself."""
    extra = extra_for(exc)
    return str(MissingExtra(extra)) if extra is not None else str(exc)
