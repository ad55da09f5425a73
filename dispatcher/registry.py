"""The tool registry: factories, their definitions, compiled validators and
the operational metadata each tool declares.

Every entry exposes the BaseTool API through ``RegisteredTool.stateless``: a
built-in tool (a BaseTool subclass) is used as it is; a plugin that only
implements the ``Tool`` protocol is wrapped once, here, in a
``ProtocolToolAdapter``, so the dispatcher never probes with getattr.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.errors import ToolRegistrationError
from dispatcher.schema_subset import CompiledValidator
from dispatcher.tool import (
    BaseTool,
    CallRating,
    ConfirmationPreview,
    GrantScope,
    Tool,
    ToolContext,
    ToolEffects,
    ToolFactory,
    ToolOutput,
    summarize_input,
)
from protocol.canonical import SideEffects, ToolDefinition

if TYPE_CHECKING:
    from dispatcher.sandbox import Sandbox
    from dispatcher.workspace import WorkspaceFileAPI

DEFAULT_TIMEOUT = 60.0
LONG_TIMEOUT = 600.0  # execute and network tools
# How far above a self-timed tool's own limit the dispatcher's backstop sits.
BACKSTOP_MARGIN = 10.0


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """Everything the dispatcher needs about one tool, computed at registration."""

    name: str
    factory: ToolFactory
    definition: ToolDefinition
    validator: CompiledValidator
    # One shared instance, asked only for the stateless stages (prepare, rate,
    # scope, preview, effects); each call's execute runs on a fresh ``factory()``.
    stateless: BaseTool
    path_fields: tuple[str, ...]
    # The effective dispatcher timeout: the config override, else the tool's
    # own, else by side effects; never below a self-timed tool's backstop.
    timeout: float
    group: str | None
    # The config options section handed to ``context.options``.
    options_section: str
    # The definition's output_schema compiled (same subset as inputs); None:
    # the tool declares none and any ``ToolOutput.data`` passes through.
    output_validator: CompiledValidator | None = None
    # Whether the tool has its own ``prepare`` / ``rate`` (not BaseTool's,
    # which return None): the stages skip a default one, which
    # benchmarks/dispatch_overhead.py shows as a share of a no-op call.
    prepares: bool = True
    rates: bool = True


class ProtocolToolAdapter(BaseTool):
    """A ``Tool``-protocol-only plugin seen through the BaseTool API.

    Its optional methods are looked up once, here; what it lacks falls back
    to BaseTool's defaults (``effects`` included: by class and path fields).
    Older signatures keep working: ``rate``/``scope`` without ``prepared``,
    ``preview`` without ``sandbox``; a plugin's own ``effects`` may be plain
    or async, with or without ``sandbox``."""

    def __init__(self, tool: Tool) -> None:
        self.tool = tool
        self.definition = tool.definition
        self.path_fields = tuple(getattr(tool, "path_fields", ()))
        self._rate: Callable[..., Any] | None = getattr(tool, "rate", None)
        self._scope: Callable[..., Any] | None = getattr(tool, "scope", None)
        self._preview: Callable[..., Any] | None = getattr(tool, "preview", None)
        self._preview_takes_sandbox = self._preview is not None and _takes_keyword(
            self._preview, "sandbox"
        )
        self._effects: Callable[..., Any] | None = getattr(tool, "effects", None)
        self._effects_take_sandbox = self._effects is not None and _takes_keyword(
            self._effects, "sandbox"
        )

    def rate(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> CallRating | None:
        if self._rate is None:
            return None
        result: CallRating | None = self._rate(input, workspace)
        return result

    def scope(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> GrantScope:
        if self._scope is None:
            return super().scope(input, workspace)
        result: GrantScope = self._scope(input, workspace)
        return result

    async def preview(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ConfirmationPreview | None:
        if self._preview is None:
            return None
        result: ConfirmationPreview | None
        if self._preview_takes_sandbox:
            result = await self._preview(input, workspace, sandbox=sandbox)
        else:
            result = await self._preview(input, workspace)
        return result

    async def effects(
        self,
        input: dict[str, Any],
        workspace: WorkspaceFileAPI,
        *,
        sandbox: Sandbox | None = None,
        prepared: Any = None,
    ) -> ToolEffects:
        if self._effects is None:
            return await super().effects(input, workspace)
        if self._effects_take_sandbox:
            result = self._effects(input, workspace, sandbox=sandbox)
        else:
            result = self._effects(input, workspace)
        if inspect.isawaitable(result):
            result = await result
        if not isinstance(result, ToolEffects):
            # Not an answer the pipeline can read: as good as none.
            return ToolEffects.not_known(summarize_input(self.definition.name, input))
        return result

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return await self.tool.execute(input, context)

    async def cancel(self) -> bool:
        return await self.tool.cancel()


def _takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` accepts ``name=`` (by name or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a callable without a readable signature
        return False
    named = params.get(name)
    if named is not None and named.kind in (
        inspect.Parameter.KEYWORD_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class ToolRegistry:
    """Name → RegisteredTool; refuses anything the dispatcher could not run safely."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def register(
        self, factory: ToolFactory, *, group: str | None = None, timeout: float | None = None
    ) -> RegisteredTool:
        """Check and add one tool. ``timeout`` is a configured override of the
        tool's own default (itself raised to a self-timed tool's backstop)."""
        instance, definition = _checked_instance(factory)
        name = definition.name
        if name in self._tools:
            raise ToolRegistrationError(f"a tool named {name!r} is already registered")
        validator, output_validator = _validators(name, definition)
        stateless = instance if isinstance(instance, BaseTool) else ProtocolToolAdapter(instance)
        path_fields = tuple(stateless.path_fields)
        properties = definition.input_schema.get("properties", {})
        for field_name in path_fields:
            if field_name not in properties:
                raise ToolRegistrationError(
                    f"tool {name!r} names path field {field_name!r} that its schema lacks"
                )
        entry = RegisteredTool(
            name=name,
            factory=factory,
            definition=definition,
            validator=validator,
            stateless=stateless,
            path_fields=path_fields,
            timeout=_effective_timeout(name, stateless, definition, timeout),
            group=group,
            options_section=stateless.options_section or name,
            output_validator=output_validator,
            prepares=_own(stateless, "prepare"),
            rates=_own(stateless, "rate"),
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


def _own(stateless: BaseTool, method: str) -> bool:
    """Whether ``stateless`` has a ``method`` of its own rather than BaseTool's
    default (a plugin seen through ProtocolToolAdapter: whether it has one)."""
    if isinstance(stateless, ProtocolToolAdapter):
        # The adapter forwards a plugin's own rate, and never a prepare.
        return method == "rate" and stateless._rate is not None
    return getattr(type(stateless), method) is not getattr(BaseTool, method)


def _effective_timeout(
    name: str, tool: BaseTool, definition: ToolDefinition, override: float | None
) -> float:
    """The override (an admin's per-tool setting: used exactly as given),
    else the tool's declared timeout, else one by side effects, raised to
    ``self_timed_up_to + BACKSTOP_MARGIN`` for a tool that times itself, so
    the dispatcher never cuts a call the tool still allows."""
    for candidate in (override, tool.timeout):
        if candidate is not None and candidate <= 0:
            raise ToolRegistrationError(f"tool {name!r}: timeout must be positive")
    timeout = override if override is not None else tool.timeout
    if timeout is None:
        long = definition.side_effects in (SideEffects.EXECUTE, SideEffects.NETWORK)
        timeout = LONG_TIMEOUT if long else DEFAULT_TIMEOUT
    if tool.self_timed_up_to is not None and override is None:
        timeout = max(timeout, tool.self_timed_up_to + BACKSTOP_MARGIN)
    return timeout


def _checked_instance(factory: ToolFactory) -> tuple[Tool, ToolDefinition]:
    """One instance from ``factory`` with a usable definition and async
    execute/cancel, or ToolRegistrationError saying what is missing."""
    if not callable(factory):
        raise ToolRegistrationError(f"a tool factory must be callable, got {factory!r:.80}")
    try:
        instance = factory()
    except Exception as exc:
        raise ToolRegistrationError(
            f"tool factory {_name_of(factory)} raised {type(exc).__name__}: {exc}"
        ) from exc
    definition = getattr(instance, "definition", None)
    if not isinstance(definition, ToolDefinition):
        raise ToolRegistrationError(
            f"{_name_of(factory)} produced an object without a ToolDefinition `definition`"
        )
    name = definition.name
    if not isinstance(definition.side_effects, SideEffects):
        raise ToolRegistrationError(f"tool {name!r} must declare side_effects")
    for method in ("execute", "cancel"):
        if not inspect.iscoroutinefunction(getattr(instance, method, None)):
            raise ToolRegistrationError(f"tool {name!r} needs an async {method}() method")
    return instance, definition


def _validators(
    name: str, definition: ToolDefinition
) -> tuple[CompiledValidator, CompiledValidator | None]:
    """The input validator and, when declared, the output one (the same
    subset rules: a bad output schema refuses the tool)."""
    try:
        validator = CompiledValidator(definition.input_schema)
        output = definition.output_schema
        output_validator = None if output is None else CompiledValidator(output, "output_schema")
    except ToolRegistrationError as exc:
        raise ToolRegistrationError(f"tool {name!r}: {exc}") from exc
    return validator, output_validator


def _name_of(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    qual = getattr(factory, "__qualname__", None)
    return f"{module}:{qual}" if module and qual else repr(factory)
