"""The tool registry: factories, their definitions and compiled validators."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from dispatcher.errors import ToolRegistrationError
from dispatcher.schema_subset import CompiledValidator
from dispatcher.tool import Tool, ToolFactory, ToolHooks
from protocol.canonical import SideEffects, ToolDefinition

DEFAULT_TIMEOUT = 60.0
LONG_TIMEOUT = 600.0  # execute and network tools


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """Everything the dispatcher needs about one tool, computed at registration."""

    name: str
    factory: ToolFactory
    definition: ToolDefinition
    validator: CompiledValidator
    # A probe instance: asked only for stateless hooks (paths, rating, preview).
    probe: Tool
    path_fields: tuple[str, ...]
    timeout: float
    group: str | None


class ToolRegistry:
    """Name → RegisteredTool; refuses anything the dispatcher could not run safely."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def register(
        self, factory: ToolFactory, *, group: str | None = None, timeout: float | None = None
    ) -> RegisteredTool:
        if not callable(factory):
            raise ToolRegistrationError(f"a tool factory must be callable, got {factory!r:.80}")
        try:
            probe = factory()
        except Exception as exc:
            raise ToolRegistrationError(
                f"tool factory {_name_of(factory)} raised {type(exc).__name__}: {exc}"
            ) from exc
        definition = getattr(probe, "definition", None)
        if not isinstance(definition, ToolDefinition):
            raise ToolRegistrationError(
                f"{_name_of(factory)} produced an object without a ToolDefinition `definition`"
            )
        name = definition.name
        if name in self._tools:
            raise ToolRegistrationError(f"a tool named {name!r} is already registered")
        if not isinstance(definition.side_effects, SideEffects):
            raise ToolRegistrationError(f"tool {name!r} must declare side_effects")
        for method in ("execute", "cancel"):
            if not inspect.iscoroutinefunction(getattr(probe, method, None)):
                raise ToolRegistrationError(f"tool {name!r} needs an async {method}() method")
        try:
            validator = CompiledValidator(definition.input_schema)
        except ToolRegistrationError as exc:
            raise ToolRegistrationError(f"tool {name!r}: {exc}") from exc
        path_fields = ToolHooks.path_fields(probe)
        properties = definition.input_schema.get("properties", {})
        for field_name in path_fields:
            if field_name not in properties:
                raise ToolRegistrationError(
                    f"tool {name!r} names path field {field_name!r} that its schema lacks"
                )
        if timeout is None:
            long = definition.side_effects in (SideEffects.EXECUTE, SideEffects.NETWORK)
            timeout = LONG_TIMEOUT if long else DEFAULT_TIMEOUT
        elif timeout <= 0:
            raise ToolRegistrationError(f"tool {name!r}: timeout must be positive")
        entry = RegisteredTool(
            name=name,
            factory=factory,
            definition=definition,
            validator=validator,
            probe=probe,
            path_fields=path_fields,
            timeout=timeout,
            group=group,
        )
        self._tools[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        if self._tools.pop(name, None) is None:
            raise KeyError(f"no tool named {name!r} is registered")

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def entries(self) -> list[RegisteredTool]:
        return [self._tools[n] for n in sorted(self._tools)]


def _name_of(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    qual = getattr(factory, "__qualname__", None)
    return f"{module}:{qual}" if module and qual else repr(factory)
