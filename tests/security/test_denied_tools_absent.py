"""Attack: denied means absent (issue 25, item 8; specs/security.md).

A tool the effective policy denies outright, whichever layer denies it (the
server's ``policy:``, the session's overrides, the profile's policy), must
be neither listed by ``GET /sessions/{id}/tools`` nor offered to the model
in a request's tool definitions; a tool that merely asks stays listed. A
model that calls a denied tool anyway (it may have seen it in an older
session, or guess) gets ``permission_denied`` naming the policy, as before:
the listing changes, the call's refusal does not.

The end-to-end test runs a real server subprocess whose model is the fake
provider (real anthropic SDK on the wire); the property test drives a real
ToolDispatcher with the built-in tools over random policies.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher import ToolDispatcher
from dispatcher.pipeline.profiles import Profile, ProfileConfig
from dispatcher.policy import (
    AutoAllowPolicy,
    ConfirmMode,
    PolicyConfig,
    PolicyQuery,
    RulePolicy,
    sandbox_floor,
)
from dispatcher.session import DispatchSession
from dispatcher.tool import CallRating
from dispatcher.workspace import WorkspaceFileAPI
from protocol.canonical import SideEffects, ToolUseBlock
from server.config import Config
from server.tool_wiring import register_tools
from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    AGENT_CONFIG,
    MODELS,
    agent_env,
    fake_provider,
    fake_provider_server,
    message_turn,
    tool_names_offered,
    tool_results_sent,
)
from tests.server.support import Stream, new_session, wait_turn

MODEL = MODELS["anthropic"]
# One tool denied by each layer; each would be offered without its deny.
BY_SERVER, BY_PROFILE, BY_SESSION = "grep", "find_files", "list_dir"
# Network-class calls denied by the server's policy for the whole class.
BY_CLASS = "web_fetch"


@pytest.fixture(scope="module")
def denying_server(
    tmp_path_factory: pytest.TempPathFactory, fake_provider_server: FakeProviderServer
) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        **AGENT_CONFIG,
        "policy": {"per_tool": {BY_SERVER: "deny"}, "default": {"network": "deny"}},
        "profiles": {"careful": {"policy": {"per_tool": {BY_PROFILE: "deny"}}}},
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("denied"), config=config, env=agent_env(fake_provider_server)
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / f"ws-{secrets.token_hex(4)}"
    root.mkdir()
    (root / "a.txt").write_text("needle\n", encoding="utf-8")
    return root


async def test_denied_tools_are_not_listed_nor_offered_and_a_call_is_refused(
    denying_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(
        # The model calls every denied tool anyway, and one that is allowed.
        Reply.tool_calls(
            ToolCall(BY_SERVER, {"pattern": "needle"}, id="c_server"),
            ToolCall(BY_PROFILE, {"pattern": "*.txt"}, id="c_profile"),
            ToolCall(BY_SESSION, {"path": "."}, id="c_session"),
            ToolCall("read_file", {"path": "a.txt"}, id="c_read"),
        ),
        Reply.text("Done."),
    )
    async with denying_server.client("alice") as http:
        sid = await new_session(
            http,
            ws,
            model=MODEL,
            profile="careful",
            policy={"per_tool": {BY_SESSION: "deny"}},
        )
        listed = {t["name"] for t in (await http.get(f"/sessions/{sid}/tools")).json()["tools"]}
        async with await Stream.open(
            denying_server.ws_url(f"/sessions/{sid}/events", after=0), after=0
        ) as stream:
            tid = await message_turn(http, sid, "Search for needle.")
            await stream.until("turn.completed")
        turn = await wait_turn(http, sid, tid)
    assert turn["status"] == "completed", turn
    denied = {BY_SERVER, BY_PROFILE, BY_SESSION, BY_CLASS}
    # Neither listed nor offered ...
    assert not listed & denied, listed & denied
    first, second = fake_provider.requests
    offered = set(tool_names_offered(first))
    assert not offered & denied, offered & denied
    # ... while a tool that merely asks stays (writes and commands ask here).
    assert {"read_file", "write_file", "shell"} <= listed
    assert offered == listed
    # Called anyway: refused by the policy, the allowed call runs.
    failed = {
        e["data"]["tool_use_id"]: e["data"] for e in stream.events if e["type"] == "tool.failed"
    }
    assert {failed[c]["error_class"] for c in ("c_server", "c_profile", "c_session")} == {
        "permission_denied"
    }
    results = tool_results_sent(second)
    for call, name in (
        ("c_server", BY_SERVER),
        ("c_profile", BY_PROFILE),
        ("c_session", BY_SESSION),
    ):
        text, is_error = results[call]
        assert is_error and f"denies {name!r}" in text, (call, text)
    assert results["c_read"][1] is False and "needle" in results["c_read"][0]


# -- the property, over random policies ------------------------------------------------

MODES = st.sampled_from(list(ConfirmMode))
TOOL_NAMES = sorted(
    {
        "read_file",
        "write_file",
        "list_dir",
        "grep",
        "shell",
        "web_fetch",
        "delete_file",
        "memory_add",
        "dispatch_subagent",
    }
)


@st.composite
def policies(draw: st.DrawFn) -> PolicyConfig:
    return PolicyConfig.model_validate(
        {
            "preset": draw(st.sampled_from(["confirm-sensitive", "confirm-all", "yolo"])),
            "default": draw(st.dictionaries(st.sampled_from(list(SideEffects)), MODES)),
            "per_tool": draw(st.dictionaries(st.sampled_from(TOOL_NAMES), MODES)),
            "ratings": draw(st.none() | st.dictionaries(st.sampled_from(list(CallRating)), MODES)),
        }
    )


def _final_modes(session: DispatchSession, name: str, effect: SideEffects) -> set[ConfirmMode]:
    """Every mode a call of ``name`` can end with in ``session`` (any rating),
    computed here the long way: the policy, the sandbox floor, the profile."""
    root = session.workspace.workspace_root
    found = set()
    for rating in [None, *CallRating]:
        mode = session.policy.mode_for(PolicyQuery(name, effect, rating, root))
        mode = sandbox_floor(
            mode, effect, sandboxed=session.sandbox is not None, policy=session.policy
        )
        found.add(session.profile.settle(mode) if session.profile is not None else mode)
    return found


# Valid inputs, so a refused call is refused by the policy, not by validation.
VALID_INPUTS: dict[str, dict[str, Any]] = {
    "read_file": {"path": "a.txt"},
    "write_file": {"path": "a.txt", "content": "x"},
    "list_dir": {"path": "."},
    "grep": {"pattern": "x"},
    "shell": {"command": "true"},
    "web_fetch": {"url": "https://example.com/"},
    "memory_add": {"content": "x"},
}


@pytest.fixture(scope="module")
def dispatcher() -> ToolDispatcher:
    tools = ToolDispatcher()
    register_tools(tools, Config())
    return tools


def _every_tool(dispatcher: ToolDispatcher, root: Path) -> dict[str, SideEffects]:
    """Each registered tool's class (a session that denies nothing lists them all)."""
    anything = DispatchSession(
        session_id="all", workspace=WorkspaceFileAPI(str(root)), policy=AutoAllowPolicy()
    )
    return {e.name: e.definition.side_effects for e in dispatcher.entries_for(anything)}


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(policy=policies(), interactive=st.booleans())
async def test_listed_exactly_when_some_call_is_not_denied(
    policy: PolicyConfig, interactive: bool, dispatcher: ToolDispatcher, tmp_path: Path
) -> None:
    every = _every_tool(dispatcher, tmp_path)
    assert set(every) == set(dispatcher.names())
    session = DispatchSession(
        session_id="s",
        workspace=WorkspaceFileAPI(str(tmp_path)),
        policy=RulePolicy(policy),
        profile=Profile.of("p", ProfileConfig(interactive=interactive)),
    )
    listed = {d.name for d in dispatcher.definitions_for(session)}
    for name, effect in every.items():
        denied = _final_modes(session, name, effect) == {ConfirmMode.DENY}
        assert (name in listed) is not denied, (name, effect, policy)
        if denied and name in VALID_INPUTS:
            block = ToolUseBlock(id=f"t_{name}", name=name, input=VALID_INPUTS[name])
            result = await dispatcher.dispatch(block, session, turn_id="turn")
            assert result.is_error and (
                f"denies {name!r}" in result.text() or "non-interactive" in result.text()
            ), result.text()
