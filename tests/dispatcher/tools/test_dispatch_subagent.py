"""dispatch_subagent in the dispatcher, with a runner written for the test
(the server's runner is tested end to end in tests/server/test_subagents.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dispatcher import DispatchSession, ToolDispatcher, WorkspaceFileAPI
from dispatcher.publisher import NullPublisher
from dispatcher.tools.agents import (
    AGENTS_SECTION,
    SUBAGENT_GROUP,
    DispatchSubagentTool,
    SubagentReport,
    SubagentRequest,
)
from protocol.canonical import ToolUseBlock


class Runner:
    """Answers at once, or (``wait``) only when cancelled."""

    def __init__(self, *, wait: bool = False) -> None:
        self.wait = wait
        self.requests: list[SubagentRequest] = []
        self.started = asyncio.Event()

    async def run(self, request: SubagentRequest, cancel: asyncio.Event) -> SubagentReport:
        self.requests.append(request)
        self.started.set()
        if self.wait:
            async with asyncio.timeout(60):
                await cancel.wait()
            return SubagentReport("ses_child", request.agent_type, "cancelled", "", message="x")
        return SubagentReport(
            "ses_child",
            request.agent_type,
            "completed",
            "greet is in greet.py.",
            steps=2,
            tools_called={"read_file": 2, "grep": 1},
            files_read=("greet.py", "b.py"),
            usage={"input_tokens": 10, "output_tokens": 3},
        )


def setup(tmp_path: Path, runner: Runner | None) -> tuple[ToolDispatcher, DispatchSession]:
    dispatcher = ToolDispatcher(NullPublisher())
    dispatcher.register(DispatchSubagentTool, group=SUBAGENT_GROUP)
    options = {AGENTS_SECTION: {"runner": runner}} if runner is not None else {}
    session = DispatchSession(
        session_id="ses_parent", workspace=WorkspaceFileAPI(str(tmp_path)), tool_options=options
    )
    return dispatcher, session


def call(**tool_input: str) -> ToolUseBlock:
    return ToolUseBlock(id="call_1", name="dispatch_subagent", input=tool_input)


async def test_the_answer_comes_back_with_an_account(tmp_path: Path) -> None:
    runner = Runner()
    dispatcher, session = setup(tmp_path, runner)
    result = await dispatcher.dispatch(
        call(task="find greet", agent_type="explore", context="it is Python"),
        session,
        turn_id="turn_1",
    )
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error
    assert text.startswith("Sub-agent explore (session ses_child) finished in 2 step(s).")
    assert "greet is in greet.py." in text
    assert "- tools called: read_file x2, grep x1" in text
    assert "- files read: greet.py, b.py" in text and "- tokens: 10 in, 3 out" in text
    (request,) = runner.requests
    assert (request.parent_session_id, request.parent_turn_id, request.tool_use_id) == (
        "ses_parent",
        "turn_1",
        "call_1",
    )
    assert request.context == "it is Python"


async def test_without_a_runner_it_refuses(tmp_path: Path) -> None:
    dispatcher, session = setup(tmp_path, None)
    result = await dispatcher.dispatch(call(task="t", agent_type="explore"), session, turn_id="t")
    assert result.is_error
    assert "not available" in result.content[0].text  # type: ignore[union-attr]


async def test_a_worker_session_does_not_see_it(tmp_path: Path) -> None:
    dispatcher, session = setup(tmp_path, Runner())
    session.hidden_groups = frozenset({SUBAGENT_GROUP})
    assert dispatcher.definitions_for(session) == []
    result = await dispatcher.dispatch(call(task="t", agent_type="explore"), session, turn_id="t")
    assert result.is_error and "no tool named" in result.content[0].text  # type: ignore[union-attr]


async def test_cancelling_the_call_reaches_the_runner(tmp_path: Path) -> None:
    runner = Runner(wait=True)
    dispatcher, session = setup(tmp_path, runner)
    task = asyncio.create_task(
        dispatcher.dispatch(call(task="t", agent_type="review"), session, turn_id="t")
    )
    await asyncio.wait_for(runner.started.wait(), 60)
    await dispatcher.cancel_session_tools("ses_parent")
    result = await asyncio.wait_for(task, 60)
    assert result.is_error and "cancelled" in result.content[0].text  # type: ignore[union-attr]
