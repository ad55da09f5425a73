"""The agent loop in process, for the paths a live server makes hard to time.

Real parts: the SQLite store, the dispatcher with the built-in file tools, the
offline scripted model playing a YAML script (through ``create_adapter``), and
a publisher that validates every payload like the bus's debug mode. A
"client" here is a reaction to an event, as a real client would act on what
its stream shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher import DispatchSession, ToolDispatcher, WorkspaceFileAPI
from dispatcher.tools import ListDirTool, ReadFileTool
from eventbus.validation import validate_payload
from protocol.canonical import Message
from protocol.payloads import Payload
from server.agent_loop import AgentLoop
from server.agents import BUILD_PROMPT
from server.config import Config
from server.store import SessionRecord, Store, TurnRecord
from server.turns import TurnContext, TurnOutcome
from tests.server.plugin_tools import BlockTool

Event = tuple[str, dict[str, Any]]
Reaction = Callable[[str, Mapping[str, Any]], None]


class CheckingPublisher:
    """Keeps every event after checking its payload against the catalog's model."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.reactions: list[Reaction] = []

    def publish(
        self, type: str, data: Mapping[str, Any], *, session_id: str, turn_id: str | None = None
    ) -> None:
        validate_payload(type, data)
        self.events.append((type, dict(data)))
        for react in self.reactions:
            react(type, data)

    def emit(self, payload: Payload, *, session_id: str, turn_id: str | None = None) -> None:
        # Typed payloads are checked and kept as the JSON clients read.
        data = payload.model_dump(mode="json", exclude_unset=True)
        self.publish(str(payload.event_type), data, session_id=session_id, turn_id=turn_id)

    def of(self, type: str) -> list[dict[str, Any]]:
        return [data for kind, data in self.events if kind == type]


class Rig:
    """One session on a real store and dispatcher, its model a scripted one."""

    def __init__(self, root: Path, script: list[Any], *, max_steps: int = 25) -> None:
        self.workspace = root / "ws"
        self.workspace.mkdir(parents=True)
        script_path = root / "script.yaml"
        script_path.write_text(yaml.safe_dump(script), encoding="utf-8")
        self.config = Config.model_validate(
            {"model": {"default": f"scripted:{script_path}", "max_steps": max_steps}}
        )
        self.store = Store.open(root / "state.sqlite3")
        self.publisher = CheckingPublisher()
        self.dispatcher = ToolDispatcher(self.publisher)
        for factory in (ReadFileTool, ListDirTool, BlockTool):
            self.dispatcher.register(factory)
        self.session = SessionRecord(id="ses_test", workspace=str(self.workspace), owner="t")
        self.store.add_session(self.session)
        self.dispatch_session = DispatchSession(
            session_id=self.session.id, workspace=WorkspaceFileAPI(str(self.workspace))
        )
        self.loop = AgentLoop(self.config, self.store, env={})
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

    def roles(self) -> list[str]:
        return [m.message["role"] for m in self.store.messages(self.session.id)]

    def conversation(self) -> list[Message]:
        return [Message.model_validate(m.message) for m in self.store.messages(self.session.id)]

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def rig_factory(tmp_path: Path) -> Any:
    rigs: list[Rig] = []

    def make(script: list[Any], **kw: Any) -> Rig:
        rig = Rig(tmp_path / f"rig{len(rigs)}", script, **kw)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.close()


def read_call(path: str) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": "read_file", "input": {"path": path}}]}


async def test_a_cancel_after_the_reply_answers_its_calls_without_running_them(
    rig_factory: Any,
) -> None:
    rig = rig_factory([read_call("notes.md")])
    (rig.workspace / "notes.md").write_text("x")
    ctx = rig.context("read it")

    def cancel_on_reply(type: str, data: Mapping[str, Any]) -> None:
        if type == "message.completed" and data["message"]["role"] == "assistant":
            ctx.cancel_requested.set()  # a client cancels as soon as it sees the reply

    rig.publisher.reactions.append(cancel_on_reply)
    outcome = await rig.loop.run(ctx)
    assert outcome.failure is None
    assert rig.publisher.of("tool.called") == []
    [failed] = rig.publisher.of("tool.failed")
    assert failed["error_class"] == "cancelled" and failed["tool_use_id"] == "toolu_scripted_1"
    assert [r.is_error for r in outcome.results] == [True]
    assert outcome.results[0].text().startswith("Cancelled")
    # One model call only (the script has one reply; a second call would fail the turn).
    assert outcome.details["steps"] == 1
    assert rig.roles() == ["user", "assistant", "tool"]


async def test_malformed_arguments_offline_then_a_corrected_call(rig_factory: Any) -> None:
    rig = rig_factory(
        [
            {"content": [{"type": "tool_use", "name": "read_file", "raw_input": '["notes.md"]'}]},
            read_call("notes.md"),
            "Read it.",
        ]
    )
    (rig.workspace / "notes.md").write_text("delta\n")
    outcome = await rig.loop.run(rig.context("read notes"))
    assert outcome.failure is None and outcome.details == {
        "model": rig.config.model.default,
        "steps": 3,
        "stop_reason": "end_turn",
    }
    [invalid] = rig.publisher.of("tool.input_invalid")
    assert "must be a JSON object, got an array" in invalid["errors"][0]["message"]
    bad, good = outcome.results
    assert bad.is_error and '["notes.md"]' in bad.text() and "did not run" in bad.text()
    assert not good.is_error and good.text() == "delta\n"
    assert len(rig.publisher.of("tool.called")) == 1


async def test_a_model_error_keeps_the_results_and_usage_of_earlier_steps(
    rig_factory: Any,
) -> None:
    # The script has one reply; the second model call runs past its end.
    rig = rig_factory([read_call("notes.md")])
    (rig.workspace / "notes.md").write_text("epsilon\n")
    outcome = await rig.loop.run(rig.context("read notes"))
    assert outcome.failure is not None
    assert outcome.failure.reason == "model_error"
    assert outcome.failure.details["error_kind"] == "bad_request"
    assert outcome.failure.details["steps"] == 2
    assert "model call 2 failed" in outcome.failure.message
    assert [r.text() for r in outcome.results] == ["epsilon\n"]
    assert outcome.usage is not None and outcome.usage["output_tokens"] > 0
    assert rig.roles() == ["user", "assistant", "tool"]


async def test_a_task_cancelled_inside_a_tool_still_answers_the_call(rig_factory: Any) -> None:
    rig = rig_factory(
        [{"content": [{"type": "tool_use", "name": "block", "input": {"seconds": 30}}]}]
    )
    ctx = rig.context("block")
    called = asyncio.Event()
    rig.publisher.reactions.append(lambda t, d: called.set() if t == "tool.called" else None)
    task: asyncio.Task[TurnOutcome] = asyncio.create_task(rig.loop.run(ctx))
    async with asyncio.timeout(60):
        await called.wait()
    task.cancel()  # what a shutdown does to a turn that outlives its budget
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rig.roles() == ["user", "assistant", "tool"]
    answer = rig.conversation()[-1].content[0]
    assert answer.type == "tool_result" and answer.is_error
    # Usage of the model calls made so far is on the context for the turn record.
    assert ctx.usage is not None and ctx.usage["input_tokens"] > 0


def test_model_choice_precedence(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:
        plain = Config()
        configured = Config.model_validate({"model": {"default": "openai/gpt-x"}})
        assert AgentLoop(plain, store, env={}).model_for(None) == "scripted"
        assert AgentLoop(plain, store, env={"TOOLRELAY_MODEL": "anthropic/m"}).model_for(None) == (
            "anthropic/m"
        )
        keyed = AgentLoop(plain, store, env={"OPENAI_API_KEY": "k"}).model_for(None)
        assert keyed.startswith("openai/")
        assert AgentLoop(configured, store, env={"OPENAI_API_KEY": "k"}).model_for(None) == (
            "openai/gpt-x"
        )
        assert AgentLoop(configured, store, env={}).model_for("scripted") == "scripted"
    finally:
        store.close()


def test_system_prompt_names_the_workspace_and_keeps_other_braces(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s.sqlite3")
    try:
        default = AgentLoop(Config(), store, env={}).system_prompt("/work/proj")
        assert "/work/proj" in default and "{workspace}" not in default
        assert default == BUILD_PROMPT.replace("{workspace}", "/work/proj")
        custom = Config.model_validate({"model": {"system_prompt": "In {workspace}: use {json}."}})
        assert AgentLoop(custom, store, env={}).system_prompt("/w") == "In /w: use {json}."
    finally:
        store.close()


def test_model_settings_are_validated_with_their_key() -> None:
    with pytest.raises(ValueError, match="max_steps"):
        Config.model_validate({"model": {"max_steps": 0}})
    with pytest.raises(ValueError, match=r"unknown|extra"):
        Config.model_validate({"model": {"max_step": 3}})
