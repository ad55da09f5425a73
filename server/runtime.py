"""Services: the long-lived parts a running server wires together, started and
stopped in order.

What it wires: the sandbox decision and the child reaper; the state store
(server/store.py), the memory store and the event log in the data dir; the
event bus and its observer (metrics, traces, log lines); the tool dispatcher
with the built-in tools and plugins (server/tool_wiring.py); the agent loop
(the message runner); the factory of each session's DispatchSession
(server/dispatch_factory.py); the turn supervisor (server/turn_supervisor.py)
and the session registry (server/session_registry.py); the MCP servers'
connections (server/mcp_wiring.py); presence of attached clients.

Start: decide the sandbox (probe bubblewrap once, off the event loop) and
start the child reaper, open the state store and the event log in the data
dir, start the bus, register the built-in tools and plugins, then recover
turns a crash left "running" (reconciled with the ends the log already holds:
see "Crash ordering" in specs/server-api.md). While running, ``health``
reports storage faults as ``degraded`` and a dead event log as ``failed``
(``on_fatal`` then stops the process). Stop: end running turns (``server_shutdown``),
flush and close the bus, close the files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatcher import ConfirmationBroker, PluginLoadError, ToolDispatcher
from dispatcher.mcp import McpManager
from dispatcher.memory import MemoryStore
from dispatcher.reaper import child_reaper
from dispatcher.sandbox import SandboxConfig, SandboxUnavailable, configure
from dispatcher.tools.code import note_modified
from eventbus import Bus, EventBus, EventBusError, EventLog
from server.auth import TOKEN_FILE, TokenRegistry
from server.config import Config, ConfigInvalid
from server.dispatch_factory import DispatchSessionFactory
from server.mcp_endpoint import EndpointParts
from server.mcp_wiring import start_mcp
from server.memory_service import MEMORY_FILE
from server.metrics import LiveCounts
from server.observer import Observer
from server.presence import Presence
from server.session_registry import SessionRegistry
from server.startup import sandbox_files, unasked_runners
from server.store import Store
from server.subagents import SubagentService
from server.tool_wiring import register_tools
from server.tree_budget import TreeBudgets
from server.turn_supervisor import TurnSupervisor
from server.turns import MessageRunnerFactory, RunnerParts, TurnRunner

if TYPE_CHECKING:
    from server.cluster import ClusterServices

log = logging.getLogger("toolrelay.server")

STATE_FILE = "state.sqlite3"
EVENTS_FILE = "events.sqlite3"
# Seconds a shutdown waits for cancelled tools before abandoning them.
SHUTDOWN_TOOL_BUDGET = 5.0


class Services:
    """The server's long-lived parts (see the module docstring): built here,
    started by :meth:`start`, stopped by :meth:`stop`."""

    def __init__(
        self,
        config: Config,
        tokens: TokenRegistry,
        *,
        message_runner_factory: MessageRunnerFactory | None = None,
    ) -> None:
        self.config = config
        self.tokens = tokens
        self.data_dir: Path = config.data_dir
        self.presence = Presence()
        # The budgets of session trees: the agent loop and the sub-agent service share them.
        self.budgets = TreeBudgets(config.limits, lambda: self.store)
        # Metrics, traces and tool-call log lines: one bus subscriber (server.observer).
        self.observer = Observer(
            LiveCounts(clients=self.presence.count, turns_running=self._turns_running)
        )
        self.plugin_errors: list[PluginLoadError] = []
        # Set by start(): the sandbox every session shares, or None and why not.
        self.sandbox_config: SandboxConfig | None = None
        self.sandbox_reason: str = "not started"
        self._message_runner_factory = message_runner_factory
        self._store: Store | None = None
        # Memories of every workspace and user (server/memory_service.py).
        self.memory_store: MemoryStore | None = None
        self._log: EventLog | None = None
        self._bus: Bus | None = None
        self._dispatcher: ToolDispatcher | None = None
        self._sessions: SessionRegistry | None = None
        self._turns: TurnSupervisor | None = None
        self._pruner: asyncio.Task[None] | None = None
        # MCP servers' connections (server/mcp_wiring.py); None without mcp_servers.
        self.mcp: McpManager | None = None
        self._message_runner: TurnRunner | None = None
        self.stopping = False
        self._started = False
        # Called once with the reason when the server cannot continue (the event
        # log failed for good); the CLI stops the process with exit code 1 then.
        self.on_fatal: Callable[[str], None] | None = None
        self.fatal: str | None = None
        # Cluster mode (server/cluster.py): set by start() when cluster.redis_url is.
        self.cluster: ClusterServices | None = None

    # Typed accessors: using a part before start() is a programming error.
    @property
    def store(self) -> Store:
        assert self._store is not None, "Services.start() first"
        return self._store

    @property
    def bus(self) -> Bus:
        assert self._bus is not None, "Services.start() first"
        return self._bus

    @property
    def dispatcher(self) -> ToolDispatcher:
        assert self._dispatcher is not None, "Services.start() first"
        return self._dispatcher

    @property
    def sessions(self) -> SessionRegistry:
        assert self._sessions is not None, "Services.start() first"
        return self._sessions

    @property
    def turns(self) -> TurnSupervisor:
        assert self._turns is not None, "Services.start() first"
        return self._turns

    async def start(self) -> None:
        """Start every part (idempotent: the CLI starts the services before uvicorn,
        so that a failed start is reported as one line; the lifespan then finds it
        started)."""
        if self._started:
            return
        self._started = True
        await self._start_sandbox()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._store = Store.open(self.data_dir / STATE_FILE)
        self.memory_store = MemoryStore.open(self.data_dir / MEMORY_FILE)
        self._log = await asyncio.to_thread(EventLog.open, self.data_dir / EVENTS_FILE)
        self._bus = await self._start_bus()
        await self.observer.start(self._bus)
        self._dispatcher = ToolDispatcher(
            self._bus,
            broker=ConfirmationBroker(),
            cancel_grace=self.config.dispatcher.cancel_grace,
            max_event_output_bytes=self.config.events.max_event_output_bytes,
            # The code index learns which files tool calls modified.
            on_files_modified=note_modified,
        )
        self.plugin_errors = register_tools(self._dispatcher, self.config)
        await self._start_message_runner()
        self._start_turns_and_sessions()
        self.mcp = await start_mcp(
            self.config.mcp_servers,
            self._dispatcher,
            sandbox_config=self.sandbox_config,
            bus=self._bus,
            session_ids=lambda: [record.id for record in self.store.list_sessions()],
        )
        if self.cluster is not None:
            # Leases, lapse watcher, forwarding inbox.
            await self.cluster.start(self.sessions, self.dispatcher.broker)
        await self._recover_turns()
        ev = self.config.events
        if (ev.retention_events, ev.retention_bytes, ev.retention_age_s) != (None, None, None):
            self._pruner = asyncio.create_task(self._prune_forever(ev.prune_interval))

    async def _start_bus(self) -> Bus:
        """The embedded bus on the event log, or in cluster mode the cluster's
        bus on Redis (ClusterBus, a Bus as EventBus is)."""
        cfg = self.config
        queue = cfg.events.subscriber_queue
        if cfg.cluster.redis_url is not None:
            from server.cluster import ClusterServices

            self.cluster = ClusterServices(cfg.cluster, self.store)
            return await self.cluster.start_bus(
                max_queue=max(queue, 10_000), on_failure=self._bus_failed
            )
        assert self._log is not None
        bus = EventBus(
            self._log,
            max_queue=queue,
            max_queue_bytes=cfg.events.subscriber_queue_bytes,
            fanout_chunk=min(256, queue),
            on_failure=self._bus_failed,
        )
        await bus.start()
        return bus

    async def _start_message_runner(self) -> None:
        """Build the runner of ``{"message": ...}`` turns (None: they answer 501)
        and start it: the agent loop imports its provider SDK and builds its
        client here, off the event loop."""
        factory = self._message_runner_factory
        parts = RunnerParts(self.config, self.store, self.memory_store, self.budgets)
        self._message_runner = factory(parts) if factory else None
        if (start_runner := getattr(self._message_runner, "start", None)) is not None:
            await start_runner()

    def _start_turns_and_sessions(self) -> None:
        """The turn supervisor and the session registry, each handed the parts it uses."""
        cfg, store, bus = self.config, self.store, self.bus
        dispatch_session_factory = DispatchSessionFactory(
            cfg,
            sandbox_config=self.sandbox_config,
            memory_store=self.memory_store,
            publisher=bus,
            # dispatch_subagent's worker sessions (server/subagents.py).
            subagent_runner=SubagentService(
                cfg.agents,
                store=lambda: self.store,
                bus=lambda: self.bus,
                turns=lambda: self.turns,
                budgets=self.budgets,
            ),
            get_session=store.get_session,
            # User tokens' sandboxes hide every other session's workspace.
            live_workspaces=self._live_workspaces,
        )
        # The supervisor reaches a session's DispatchSession through the
        # registry (which keeps them); the registry is made just below.
        self._turns = TurnSupervisor(
            store=store,
            dispatcher=self.dispatcher,
            publisher=bus,
            dispatch_session=lambda record: self.sessions.dispatch_session(record),
            message_runner=self._message_runner,
            wait_durable=bus.durable,
            storage_fault=self.storage_fault,
        )
        self._sessions = SessionRegistry(
            config=cfg,
            store=store,
            dispatcher=self.dispatcher,
            publisher=bus,
            turns=self._turns,
            dispatch_session_factory=dispatch_session_factory,
            sandbox_config=self.sandbox_config,
        )

    async def _recover_turns(self) -> None:
        """End the turns a crash left "running", with the end the log already
        holds where it holds one (see "Crash ordering" in specs/server-api.md)."""
        log_file = self._log
        assert log_file is not None
        recovered = await self.turns.recover(
            lambda turn_ids: asyncio.to_thread(log_file.turn_ends, turn_ids)
        )
        if recovered:
            log.warning(
                "ended %d turn(s) left running by a previous run (server_restart, or the "
                "end the event log already held)",
                len(recovered),
            )

    def mcp_endpoint_parts(self) -> EndpointParts:
        """What toolrelay's own MCP endpoint uses of the started services."""
        return EndpointParts(
            sessions=self.sessions,
            dispatcher=self.dispatcher,
            check_storage=self.turns.check_storage,
            mcp=self.mcp,
        )

    def _turns_running(self) -> int:
        return self._turns.running_count() if self._turns is not None else 0

    def _live_workspaces(self) -> list[str]:
        return [record.workspace for record in self.store.list_sessions()]

    def hidden_paths(self) -> list[str]:
        """What no sandbox may see: the data dir (databases, token file), every
        config file the server read, the token file by name (in case the data
        dir is ever not hidden whole) and the configured credential folders."""
        cfg = self.config
        return [
            str(self.data_dir),
            *cfg.source_files,
            str(self.data_dir / TOKEN_FILE),
            *cfg.workspaces.shell.sandbox_hide,
        ]

    async def _start_sandbox(self) -> None:
        """Probe the sandbox (blocking: in a worker thread) and start the child
        reaper, so unsandboxed children die with the server from the first one."""
        cfg = self.config
        setting = cfg.workspaces.shell.sandbox
        try:
            self.sandbox_config, self.sandbox_reason = await asyncio.to_thread(
                configure,
                setting,
                self.hidden_paths(),
                files=sandbox_files(cfg.guardrails, cfg.workspaces.shell),
                unasked=unasked_runners(cfg.hooks, cfg.guardrails, cfg.mcp_servers),
            )
        except SandboxUnavailable as exc:
            raise ConfigInvalid(str(exc)) from None
        await asyncio.to_thread(child_reaper().start)
        if self.sandbox_config is not None:
            log.info(
                "shell sandbox: on (bubblewrap %s; %d hidden paths)",
                self.sandbox_config.bwrap,
                len(self.sandbox_config.hidden),
            )
        else:
            log.warning(
                "shell sandbox: off (%s): every shell command asks for a confirmation",
                self.sandbox_reason,
            )

    async def _prune_forever(self, interval: float) -> None:
        bus = self.bus
        ev = self.config.events
        while bus.running:
            await asyncio.sleep(interval)
            try:
                deleted = await bus.prune(
                    keep_last=ev.retention_events,
                    max_bytes=ev.retention_bytes,
                    max_age_s=ev.retention_age_s,
                )
            except EventBusError as exc:
                # One line, no traceback: this may repeat every interval.
                log.warning("pruning the event log failed: %s", exc)
                continue
            if deleted:
                log.info("pruned %d old events from the log", deleted)
        log.error("the event bus stopped; pruning stops too")

    async def stop(self) -> None:
        """Graceful shutdown; safe to call on partly started services."""
        self.stopping = True
        if self.cluster is not None:
            await self.cluster.stop_serving()
        if self._pruner is not None:
            self._pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruner
        if self._turns is not None:
            await self._turns.shutdown(budget=SHUTDOWN_TOOL_BUDGET)
        if self.mcp is not None:
            await self.mcp.stop()  # after the turns: their MCP calls ended first
        if (close_runner := getattr(self._message_runner, "aclose", None)) is not None:
            await close_runner()  # the provider clients and their connections
        if self._bus is not None:
            await self._bus.close()  # flushes: every event published so far is logged
            await self.observer.stop()  # drains what the bus handed it, exports traces
        if self.cluster is not None:
            await self.cluster.close()  # releases this replica's leases
        if self._log is not None:
            await asyncio.to_thread(self._log.close)
        if self._store is not None:
            self._store.close()
        if self.memory_store is not None:
            self.memory_store.close()

    def storage_fault(self) -> str | None:
        """What fails the data dir's storage now (the event log's writes or the
        state database's), or None while both work."""
        bus, store = self._bus, self._store
        if bus is not None and bus.fault is not None:
            return f"event log: {bus.fault}"
        if store is not None and store.fault is not None:
            return store.probe()
        return None

    def _bus_failed(self, exc: BaseException) -> None:
        """The event log failed for good: nothing can be recorded any more, so
        the process must end (non-zero) for a supervisor to restart it."""
        reason = f"the event log failed: {exc}"
        log.critical("%s; stopping the server", reason)
        if self.fatal is None:
            self.fatal = reason
            if self.on_fatal is not None:
                self.on_fatal(reason)

    def health(self) -> dict[str, Any]:
        """``ok``; ``degraded`` with a ``cause`` while storage fails (the server
        retries and resumes by itself); ``failed`` with a ``cause`` once it cannot
        continue (it is exiting); ``stopping`` during shutdown."""
        bus = self._bus
        # Public (no token): counts only and the storage cause, nothing about
        # sessions or tools.
        body: dict[str, Any] = {"status": "ok"}
        if self.fatal is not None or (bus is not None and bus.failure is not None):
            body = {"status": "failed", "cause": self.fatal or str(bus.failure if bus else "")}
        elif self.stopping or bus is None or not bus.running:
            body = {"status": "stopping"}
        elif (cause := self.storage_fault()) is not None:
            body = {"status": "degraded", "cause": cause}
        body["turns_running"] = self._turns.running_count() if self._turns else 0
        body["clients"] = self.presence.count()
        return body
