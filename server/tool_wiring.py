"""The tools a server registers, and the call timeout each gets.

The server names no tool here: each tool declares its operational metadata
on its class (``dispatcher.tool.BaseTool``: ``timeout``, ``self_timed_up_to``,
``options_section``) and the configuration may override the timeout by name
(``dispatcher.tool_timeouts``, else ``dispatcher.tool_timeout``). Every tool
is registered once, with that timeout; the registry raises it to the backstop
of a tool that times its own calls.
"""

from __future__ import annotations

import logging

from dispatcher import ENTRY_POINT_GROUP, PluginLoadError, ToolDispatcher, load_plugins
from dispatcher.tool import ToolFactory
from dispatcher.tools import builtin_tool_factories, knowledge_tool_factories
from protocol.canonical import ToolDefinition
from server.config import Config

log = logging.getLogger("toolrelay.server")


def register_tools(dispatcher: ToolDispatcher, config: Config) -> list[PluginLoadError]:
    """Register the built-in tools and the configured plugins; the plugins
    that could not be loaded are returned (and logged)."""
    factories = builtin_tool_factories(
        shell_enabled=config.workspaces.shell.enabled,
        delete_enabled=config.workspaces.allow_delete,
    ) + knowledge_tool_factories(memory_enabled=True)
    for factory in factories:
        dispatcher.register(factory, timeout=timeout_for(factory, config))
    errors = load_plugins(
        dispatcher,
        import_paths=config.plugins.import_paths,
        entry_points_group=ENTRY_POINT_GROUP if config.plugins.entry_points else None,
    )
    for err in errors:
        log.error("plugin not loaded: %s", err)
    return errors


def timeout_for(factory: ToolFactory, config: Config) -> float:
    """The timeout the configuration gives one tool's calls: its entry in
    ``dispatcher.tool_timeouts``, else ``dispatcher.tool_timeout``. The
    registry raises it to the backstop of a tool that times its own calls
    (``self_timed_up_to``): a shell call asking for 600 s is not cut at 120."""
    cfg = config.dispatcher
    name = _definition(factory).name
    if name in cfg.tool_timeouts:
        return cfg.tool_timeouts[name]
    return cfg.tool_timeout


def _definition(factory: ToolFactory) -> ToolDefinition:
    # Built-in tools declare their definition on the class: no instance needed.
    definition = getattr(factory, "definition", None)
    if isinstance(definition, ToolDefinition):
        return definition
    return factory().definition
