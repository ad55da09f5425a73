"""The agent loop's provider clients live for the server's life.

Real parts: the agent loop in process on a real store and dispatcher, the
official openai/anthropic SDKs through ``create_adapter``, and the fake
provider server, which records each request's client address so a reused
TCP connection shows as one port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.base import ModelAdapter
from adapters.registry import create_adapter
from dispatcher import DispatchSession, ToolDispatcher, WorkspaceFileAPI
from dispatcher.tools import ReadFileTool
from server.agent_loop import AgentLoop
from server.app import create_app
from server.auth import TokenRegistry
from server.config import Config, load_config
from server.store import SessionRecord, Store, TurnRecord
from server.turns import TurnContext
from tests.adapters.helpers import CountingProvider
from tests.fakes.fake_providers import Reply, ToolCall
from tests.server.test_agent_loop_units import CheckingPublisher

MODELS = {"openai": "openai-compatible/fake-model", "anthropic": "anthropic/claude-fake"}


@pytest.fixture(scope="module")
def counting_provider() -> Iterator[CountingProvider]:
    server = CountingProvider()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def provider(counting_provider: CountingProvider) -> Iterator[CountingProvider]:
    counting_provider.reset()
    counting_provider.peers.clear()
    yield counting_provider
    assert counting_provider.unplanned == 0


class Rig:
    """One session whose model is the fake provider, the adapters recorded."""

    def __init__(self, root: Path, fake: CountingProvider, kind: str) -> None:
        workspace = root / "ws"
        workspace.mkdir(parents=True)
        (workspace / "a.txt").write_text("alpha\n", encoding="utf-8")
        self.store = Store.open(root / "state.sqlite3")
        self.publisher = CheckingPublisher()
        self.dispatcher = ToolDispatcher(self.publisher)
        self.dispatcher.register(ReadFileTool)
        self.session = SessionRecord(id="ses_clients", workspace=str(workspace), owner="t")
        self.store.add_session(self.session)
        self.dispatch_session = DispatchSession(
            session_id=self.session.id, workspace=WorkspaceFileAPI(str(workspace))
        )
        env = {**fake.env(api_key="dummy"), "OPENAI_API_KEY": ""}
        self.adapters: list[ModelAdapter] = []

        def factory(model: str) -> ModelAdapter:
            adapter = create_adapter(model, env=env)
            self.adapters.append(adapter)
            return adapter

        config = Config.model_validate({"model": {"default": MODELS[kind]}})
        self.loop = AgentLoop(config, self.store, env=env, adapter_factory=factory)
        self.turns = 0

    def context(self, text: str) -> TurnContext:
        self.turns += 1
        turn_id = f"turn_{self.turns}"
        self.store.add_turn(
            TurnRecord(
                id=turn_id,
                session_id=self.session.id,
                number=self.turns,
                kind="message",
                status="running",
                request={"message": text},
                created_by="t",
            )
        )
        return TurnContext(
            session_id=self.session.id,
            turn_id=turn_id,
            request={"message": text},
            dispatch_session=self.dispatch_session,
            dispatcher=self.dispatcher,
            publisher=self.publisher,
            append_message=lambda m: self.store.append_message(
                self.session.id, m.model_dump(mode="json"), turn_id=turn_id
            ),
        )


@pytest.fixture
def rig(
    tmp_path: Path, provider: CountingProvider, request: pytest.FixtureRequest
) -> Iterator[Rig]:
    made = Rig(tmp_path, provider, request.param)
    yield made
    made.store.close()


@pytest.mark.parametrize("rig", sorted(MODELS), indirect=True)
async def test_turns_share_one_client_built_at_start_and_one_connection(
    rig: Rig, provider: CountingProvider
) -> None:
    await rig.loop.start()
    assert len(rig.loop.clients) == 1  # built before any turn, off the event loop
    assert provider.requests == []  # building a client sends nothing
    provider.plan(
        Reply.tool_calls(ToolCall("read_file", {"path": "a.txt"})),
        Reply.text("read it"),
        Reply.text("second turn"),
    )
    for text in ("read a.txt", "again"):
        outcome = await rig.loop.run(rig.context(text))
        assert outcome.failure is None, outcome.failure
    clients: list[Any] = [getattr(a, "client", None) for a in rig.adapters]
    # The warm-up's adapter and both turns' adapters: one SDK client, by identity.
    assert len(clients) == 3 and clients[0] is not None
    assert all(c is clients[0] for c in clients)
    assert not clients[0].is_closed()
    assert len(provider.peers) == 3  # two model calls in the first turn, one in the second
    assert len(set(provider.peers)) == 1, f"connections opened: {provider.peers}"
    await rig.loop.aclose()
    assert clients[0].is_closed()


@pytest.mark.parametrize("rig", ["openai"], indirect=True)
async def test_a_closed_pool_fails_the_turn_as_a_model_error(rig: Rig) -> None:
    await rig.loop.aclose()
    outcome = await rig.loop.run(rig.context("too late"))
    assert outcome.failure is not None
    assert outcome.failure.reason == "model_error"
    assert "provider client" in outcome.failure.message


async def test_the_runtime_builds_the_client_at_start_and_closes_it_at_stop(
    tmp_path: Path, provider: CountingProvider
) -> None:
    config = load_config(
        None,
        env={"TOOLRELAY_TOKEN": "t" * 24},
        overrides={
            "server.data_dir": str(tmp_path / "data"),
            "server.port": 0,
            "model.default": MODELS["openai"],
        },
    )
    made: list[AgentLoop] = []

    def factory(runtime: Any) -> AgentLoop:
        loop = AgentLoop(runtime.config, runtime.store, env=provider.env(api_key="dummy"))
        made.append(loop)
        return loop

    app = create_app(config, TokenRegistry(config.auth.tokens), message_runner_factory=factory)
    runtime = app.state.runtime
    await runtime.start()
    try:
        (loop,) = made
        assert len(loop.clients) == 1  # built during start-up, before any turn
        client = next(iter(loop.clients._builds.values())).result()
        assert not client.is_closed()
    finally:
        await runtime.stop()
    assert client.is_closed()
    assert provider.requests == []
