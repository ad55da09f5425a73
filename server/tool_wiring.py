"""The tools a server registers, and the call timeout each gets.

The server names no tool here: each tool declares its operational metadata
on its class (``dispatcher.tool.BaseTool``: ``timeout``, ``self_timed_up_to``,
``options_section``). The timeouts follow the seeds' dispatcher spec: 60 s
for none/read/write tools and 600 s for execute/network tools unless the tool
declares its own, and a tool that times its own calls (the shell) gets a
backstop above its own maximum. The configuration changes that in two ways:

- ``dispatcher.tool_timeouts[name]``: that tool's timeout, used exactly as
  given, for built-in tools and plugins alike;
- ``dispatcher.tool_timeout`` (default null): when set, the timeout of every
  tool that declares none and does not time itself, instead of the
  per-side-effect default.

Only a configured value is handed to the registry as an override, so the
defaults are the registry's (``dispatcher/registry.py``), in one place.
"""

from __future__ import annotations

import logging
from typing import Protocol

from dispatcher import ENTRY_POINT_GROUP, PluginLoadError, ToolDispatcher, load_plugins
from dispatcher.tool import BaseTool, ToolFactory
from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories
from dispatcher.tools.agents import SUBAGENT_GROUP, DispatchSubagentTool
from protocol.canonical import ToolDefinition
from server.config import DispatcherSection, PluginsSection, WorkspacesSection

log = logging.getLogger("toolrelay.server")


class ToolConfig(Protocol):
    """The configuration sections tool registration reads (a ``Config`` is one)."""

    @property
    def workspaces(self) -> WorkspacesSection: ...

    @property
    def dispatcher(self) -> DispatcherSection: ...

    @property
    def plugins(self) -> PluginsSection: ...


def register_tools(dispatcher: ToolDispatcher, config: ToolConfig) -> list[PluginLoadError]:
    """Register the built-in tools and the configured plugins; the plugins
    that could not be loaded are returned (and logged)."""
    factories = builtin_tool_factories(
        shell_enabled=config.workspaces.shell.enabled,
        delete_enabled=config.workspaces.allow_delete,
    ) + knowledge_tool_factories(memory_enabled=True)
    for factory in factories:
        dispatcher.register(factory, timeout=timeout_for(factory, config.dispatcher))
    # In its own group, which worker sessions hide: a sub-agent cannot
    # dispatch sub-agents (specs/agents.md).
    subagents = DispatchSubagentTool
    dispatcher.register(
        subagents, group=SUBAGENT_GROUP, timeout=timeout_for(subagents, config.dispatcher)
    )
    errors = load_plugins(
        dispatcher,
        import_paths=config.plugins.import_paths,
        entry_points_group=ENTRY_POINT_GROUP if config.plugins.entry_points else None,
        timeouts=config.dispatcher.tool_timeouts,
    )
    for err in errors:
        log.error("plugin not loaded: %s", err)
    return errors


def timeout_for(factory: ToolFactory, cfg: DispatcherSection) -> float | None:
    """The override the configuration gives one built-in tool's calls (None:
    the registry's default applies): its ``dispatcher.tool_timeouts`` entry,
    else ``dispatcher.tool_timeout`` for a tool that declares no timeout and
    does not time its own calls."""
    name = _definition(factory).name
    if name in cfg.tool_timeouts:
        return cfg.tool_timeouts[name]
    if cfg.tool_timeout is None:
        return None
    tool = factory if isinstance(factory, type) else None
    declares = (
        tool is not None
        and issubclass(tool, BaseTool)
        and (tool.timeout is not None or tool.self_timed_up_to is not None)
    )
    return None if declares else cfg.tool_timeout


def _definition(factory: ToolFactory) -> ToolDefinition:
    # Built-in tools declare their definition on the class: no instance needed.
    definition = getattr(factory, "definition", None)
    if isinstance(definition, ToolDefinition):
        return definition
    return factory().definition
