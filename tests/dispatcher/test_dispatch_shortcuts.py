"""The shortcuts benchmarks/dispatch_overhead.py keeps, each against what it
stands for: the setter's folded move table against ALLOWED, ENTERING and
LEAVING; the skipped default ``prepare``/``rate`` against the tools that have
their own; the session's kept policy modes against a policy asked afresh, and
their invalidation when the policy, the sandbox or the workspace changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dispatcher import (
    BaseTool,
    CallRating,
    DispatchSession,
    RulePolicy,
    ToolContext,
    ToolDispatcher,
    ToolOutput,
    WorkspaceFileAPI,
)
from dispatcher.call import _MOVES, ALLOWED, ENTERING, LEAVING, CallState
from dispatcher.policy import ConfirmMode, PolicyConfig, PolicyQuery
from dispatcher.registry import ToolRegistry
from protocol.canonical import SideEffects, ToolDefinition, ToolUseBlock
from tests.dispatcher.support import EchoTool, RatedShell, schema

# -- the state setter's table ----------------------------------------------------------


def test_the_folded_move_table_is_the_three_tables() -> None:
    for old in CallState:
        assert set(_MOVES[old]) == set(ALLOWED[old])
        for new, builders in _MOVES[old].items():
            expected = [b for b in (LEAVING.get(old), ENTERING.get(new)) if b is not None]
            assert list(builders) == expected, (old, new)


# -- default prepare and rate -------------------------------------------------------------


class _Prepares(BaseTool):
    definition = ToolDefinition(
        name="prepares",
        description="Prepares.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        side_effects=SideEffects.NONE,
    )

    def prepare(self, input: dict[str, Any], workspace: WorkspaceFileAPI) -> Any:
        return "prepared"

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text(str(context.prepared))

    async def cancel(self) -> bool:
        return False


class _Plain(BaseTool):
    definition = ToolDefinition(
        name="plain",
        description="Neither prepares nor rates.",
        input_schema=schema({"text": {"type": "string"}}, ["text"]),
        side_effects=SideEffects.NONE,
    )

    async def execute(self, input: dict[str, Any], context: ToolContext) -> ToolOutput:
        return ToolOutput.text("ok")

    async def cancel(self) -> bool:
        return False


def test_the_registry_knows_which_tools_prepare_or_rate() -> None:
    registry = ToolRegistry()
    flags = {
        factory.definition.name: (entry.prepares, entry.rates)
        for factory in (_Prepares, _Plain, EchoTool, RatedShell)
        for entry in [registry.register(factory)]
    }
    assert flags == {
        "prepares": (True, False),
        "plain": (False, False),
        "echo": (False, False),  # a plugin without rate
        "rated": (False, True),  # a plugin's own rate, through the adapter
    }


async def test_a_tool_that_prepares_still_gets_its_preparation(
    dispatcher: ToolDispatcher, session: DispatchSession
) -> None:
    dispatcher.register(_Prepares)
    use = ToolUseBlock(id="tu_p", name="prepares", input={"text": "x"})
    result = await dispatcher.dispatch(use, session, turn_id="t")
    assert not result.is_error
    assert result.content[0].text == "prepared"  # type: ignore[union-attr]


# -- the session's kept policy modes -----------------------------------------------------


class _RatedRead(_Plain):
    definition = ToolDefinition(
        name="rated_read",
        description="Rates `ls` safe.",
        input_schema=schema({"command": {"type": "string"}}, ["command"]),
        side_effects=SideEffects.READ,
    )

    def rate(
        self, input: dict[str, Any], workspace: WorkspaceFileAPI, *, prepared: Any = None
    ) -> CallRating:
        return CallRating.SAFE if input["command"] == "ls" else CallRating.DANGEROUS


class _CountingPolicy:
    """Answers by a table and counts how often it is asked."""

    def __init__(self, mode: ConfirmMode) -> None:
        self.mode = mode
        self.asked: list[PolicyQuery] = []

    def mode_for(self, query: PolicyQuery) -> ConfirmMode:
        self.asked.append(query)
        return self.mode


def _use(i: int, name: str = "echo", **input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=f"tu_{i}", name=name, input=input or {"text": "hi"})


async def test_a_session_asks_its_policy_once_per_tool_and_rating(
    dispatcher: ToolDispatcher, session: DispatchSession
) -> None:
    dispatcher.register(EchoTool)
    dispatcher.register(_RatedRead)
    policy = _CountingPolicy(ConfirmMode.AUTO)
    session.policy = policy
    for i in range(3):
        assert not (await dispatcher.dispatch(_use(i), session, turn_id="t")).is_error
    for i, command in enumerate(["ls", "ls", "rm"]):
        use = _use(10 + i, "rated_read", command=command)
        assert not (await dispatcher.dispatch(use, session, turn_id="t")).is_error
    asked = [(q.tool_name, q.rating) for q in policy.asked]
    assert asked == [
        ("echo", None),
        ("rated_read", CallRating.SAFE),
        ("rated_read", CallRating.DANGEROUS),
    ]


async def test_kept_modes_are_dropped_when_the_policy_is_replaced(
    dispatcher: ToolDispatcher, session: DispatchSession
) -> None:
    dispatcher.register(EchoTool)
    session.policy = _CountingPolicy(ConfirmMode.AUTO)
    assert not (await dispatcher.dispatch(_use(1), session, turn_id="t")).is_error
    deny = RulePolicy(PolicyConfig(per_tool={"echo": ConfirmMode.DENY}))
    session.policy = deny
    result = await dispatcher.dispatch(_use(2), session, turn_id="t")
    assert result.is_error and "policy denies" in result.content[0].text  # type: ignore[union-attr]


async def test_kept_modes_are_dropped_when_the_sandbox_or_workspace_changes(
    dispatcher: ToolDispatcher, session: DispatchSession, tmp_path: Path
) -> None:
    dispatcher.register(EchoTool)
    policy = _CountingPolicy(ConfirmMode.AUTO)
    session.policy = policy
    await dispatcher.dispatch(_use(1), session, turn_id="t")
    other = tmp_path / "other"
    other.mkdir()
    session.workspace = WorkspaceFileAPI(other)
    await dispatcher.dispatch(_use(2), session, turn_id="t")
    await dispatcher.dispatch(_use(3), session, turn_id="t")
    assert [q.workspace for q in policy.asked] == [
        policy.asked[0].workspace,
        session.workspace.workspace_root,
    ]
    # The sandbox switched on: asked again (the floor depends on it).
    session.sandbox = object()  # type: ignore[assignment]
    assert session.policy_modes.get(session, ("echo", SideEffects.NONE, None)) is None
    assert session.policy_modes.modes == {}


def test_a_mode_kept_under_another_policy_is_not_returned(tmp_path: Path) -> None:
    session = DispatchSession("s", WorkspaceFileAPI(tmp_path))
    key = ("echo", SideEffects.NONE, None)
    assert session.policy_modes.get(session, key) is None
    session.policy_modes.modes[key] = ConfirmMode.AUTO
    assert session.policy_modes.get(session, key) is ConfirmMode.AUTO
    session.policy = RulePolicy()
    assert session.policy_modes.get(session, key) is None
