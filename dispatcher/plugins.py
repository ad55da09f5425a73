"""User tools without touching the core: factories named by import path in
config (``"package.module:make_tool"``) or published under the entry-point
group ``toolrelay.tools``. A broken plugin is reported by name and skipped; the
others still load."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

from dispatcher.errors import ToolRegistrationError

if TYPE_CHECKING:
    from dispatcher.dispatcher import ToolDispatcher

ENTRY_POINT_GROUP = "toolrelay.tools"
log = logging.getLogger("toolrelay.plugins")


@dataclass(frozen=True, slots=True)
class PluginLoadError:
    """A plugin that could not be loaded, and why."""

    source: str  # the import path, or "entry point NAME (VALUE)"
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


def import_factory(path: str) -> object:
    """Resolve ``"package.module:attr.sub"`` to the object it names."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected 'package.module:factory', got {path!r}")
    obj: object = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def load_plugins(
    dispatcher: ToolDispatcher,
    *,
    import_paths: Iterable[str] = (),
    entry_points_group: str | None = ENTRY_POINT_GROUP,
    timeouts: Mapping[str, float] | None = None,
) -> list[PluginLoadError]:
    """Register every plugin factory it can; return (and log) the ones it could not.
    ``timeouts`` (tool name -> seconds) overrides a plugin's own call timeout,
    as ``dispatcher.tool_timeouts`` does for built-in tools."""
    errors: list[PluginLoadError] = []
    candidates: list[tuple[str, object]] = []
    for path in import_paths:
        try:
            candidates.append((path, import_factory(path)))
        except Exception as exc:  # any import-time failure is the plugin's, not ours
            errors.append(PluginLoadError(path, f"{type(exc).__name__}: {exc}"))
    if entry_points_group:
        for ep in entry_points(group=entry_points_group):
            source = f"entry point {ep.name} ({ep.value})"
            try:
                candidates.append((source, ep.load()))
            except Exception as exc:
                errors.append(PluginLoadError(source, f"{type(exc).__name__}: {exc}"))
    for source, factory in candidates:
        try:
            definition = dispatcher.register(factory)  # type: ignore[arg-type]
            if timeouts and definition.name in timeouts:
                # The name is known only once registered: registered again with it.
                dispatcher.unregister(definition.name)
                dispatcher.register(factory, timeout=timeouts[definition.name])  # type: ignore[arg-type]
        except ToolRegistrationError as exc:
            errors.append(PluginLoadError(source, str(exc)))
    for err in errors:
        log.error("plugin not loaded: %s", err)
    return errors
