"""Runtime: every long-lived part of a running server, started and stopped in order.

Start: open the state store and the event log in the data dir, start the
bus, register the built-in tools and plugins, then recover turns a crash left
"running". Stop: end running turns (``server_shutdown``), flush and close the
bus, close the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dispatcher import (
    ENTRY_POINT_GROUP,
    ConfirmationBroker,
    PluginLoadError,
    ToolDispatcher,
    load_plugins,
)
from dispatcher.tools import builtin_tool_factories
from dispatcher.tools.shell import MAX_TIMEOUT as SHELL_MAX_TIMEOUT
from eventbus import EventBus, EventBusError, EventLog
from server.auth import TokenRegistry
from server.config import Config
from server.presence import Presence
from server.sessions import SHELL_TOOLS, SessionManager
from server.store import Store
from server.turns import TurnRunner

log = logging.getLogger("toolrelay.server")

STATE_FILE = "state.sqlite3"
EVENTS_FILE = "events.sqlite3"
# Seconds a shutdown waits for cancelled tools before abandoning them.
SHUTDOWN_TOOL_BUDGET = 5.0


class Runtime:
    """Owns the store, the event bus, the dispatcher and the session manager."""

    def __init__(
        self,
        config: Config,
        tokens: TokenRegistry,
        *,
        message_runner_factory: Callable[[Runtime], TurnRunner | None] | None = None,
    ) -> None:
        self.config = config
        self.tokens = tokens
        self.data_dir: Path = config.data_dir
        self.presence = Presence()
        self.plugin_errors: list[PluginLoadError] = []
        self._message_runner_factory = message_runner_factory
        self._store: Store | None = None
        self._log: EventLog | None = None
        self._bus: EventBus | None = None
        self._dispatcher: ToolDispatcher | None = None
        self._sessions: SessionManager | None = None
        self._pruner: asyncio.Task[None] | None = None
        self.stopping = False

    # Typed accessors: using a part before start() is a programming error.
    @property
    def store(self) -> Store:
        assert self._store is not None, "Runtime.start() first"
        return self._store

    @property
    def bus(self) -> EventBus:
        assert self._bus is not None, "Runtime.start() first"
        return self._bus

    @property
    def dispatcher(self) -> ToolDispatcher:
        assert self._dispatcher is not None, "Runtime.start() first"
        return self._dispatcher

    @property
    def sessions(self) -> SessionManager:
        assert self._sessions is not None, "Runtime.start() first"
        return self._sessions

    async def start(self) -> None:
        cfg = self.config
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._store = Store.open(self.data_dir / STATE_FILE)
        self._log = await asyncio.to_thread(EventLog.open, self.data_dir / EVENTS_FILE)
        queue = cfg.events.subscriber_queue
        self._bus = EventBus(self._log, max_queue=queue, fanout_chunk=min(256, queue))
        await self._bus.start()
        self._dispatcher = ToolDispatcher(
            self._bus, broker=ConfirmationBroker(), cancel_grace=cfg.dispatcher.cancel_grace
        )
        self._register_tools(self._dispatcher)
        message_runner = (
            self._message_runner_factory(self) if self._message_runner_factory else None
        )
        self._sessions = SessionManager(
            config=cfg,
            store=self._store,
            dispatcher=self._dispatcher,
            publisher=self._bus,
            message_runner=message_runner,
        )
        recovered = self._sessions.recover()
        if recovered:
            log.warning(
                "marked %d turn(s) left running by a previous run as failed (server_restart)",
                len(recovered),
            )
        if cfg.events.retention_events is not None:
            self._pruner = asyncio.create_task(
                self._prune_forever(cfg.events.retention_events, cfg.events.prune_interval)
            )

    def _register_tools(self, dispatcher: ToolDispatcher) -> None:
        cfg = self.config
        factories = builtin_tool_factories(
            shell_enabled=cfg.workspaces.shell.enabled,
            delete_enabled=cfg.workspaces.allow_delete,
        )
        for factory in factories:
            definition = dispatcher.register(factory, timeout=cfg.dispatcher.tool_timeout)
            timeout = self._timeout_for(definition.name)
            if timeout != cfg.dispatcher.tool_timeout:
                dispatcher.unregister(definition.name)
                dispatcher.register(factory, timeout=timeout)
        self.plugin_errors = load_plugins(
            dispatcher,
            import_paths=cfg.plugins.import_paths,
            entry_points_group=ENTRY_POINT_GROUP if cfg.plugins.entry_points else None,
        )
        for err in self.plugin_errors:
            log.error("plugin not loaded: %s", err)

    def _timeout_for(self, name: str) -> float:
        cfg = self.config.dispatcher
        if name in cfg.tool_timeouts:
            return cfg.tool_timeouts[name]
        if name in SHELL_TOOLS:
            # The shell enforces the timeout a call asks for (up to its maximum) and
            # reports it with the partial output; the dispatcher's is only a backstop
            # and must not fire first, or a call asking for 600 s would be cut at 120.
            return max(cfg.tool_timeout, SHELL_MAX_TIMEOUT + 10.0)
        return cfg.tool_timeout

    async def _prune_forever(self, keep_last: int, interval: float) -> None:
        bus = self.bus
        while bus.running:
            await asyncio.sleep(interval)
            try:
                deleted = await bus.prune(keep_last=keep_last)
            except EventBusError as exc:
                # One line, no traceback: this may repeat every interval.
                log.warning("pruning the event log failed: %s", exc)
                continue
            if deleted:
                log.info("pruned %d old events from the log", deleted)
        log.error("the event bus stopped; pruning stops too")

    async def stop(self) -> None:
        """Graceful shutdown; safe to call on a partly started runtime."""
        self.stopping = True
        if self._pruner is not None:
            self._pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruner
        if self._sessions is not None:
            await self._sessions.shutdown(budget=SHUTDOWN_TOOL_BUDGET)
        if self._bus is not None:
            await self._bus.close()  # flushes: every event published so far is logged
        if self._log is not None:
            await asyncio.to_thread(self._log.close)
        if self._store is not None:
            self._store.close()

    def health(self) -> dict[str, Any]:
        bus = self._bus
        # Public (no token): counts only, nothing about sessions or tools.
        return {
            "status": "ok" if bus is not None and bus.running and not self.stopping else "stopping",
            "turns_running": self._sessions.running_count() if self._sessions else 0,
            "clients": self.presence.count(),
        }
