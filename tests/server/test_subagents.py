"""Agents and sub-agents end to end (specs/agents.md).

A real server subprocess runs model turns whose model is the fake provider,
reached through the real anthropic SDK; tests plan the replies of the parent
and of its sub-agent (they take turns: the parent waits for the child), watch
the parent's WebSocket stream, and read back what the SDK sent for each, so
isolation is checked on the wire.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server.config import ConfigInvalid, load_config
from server.store import Store
from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    AGENT_CONFIG,
    MODELS,
    agent_env,
    fake_provider,
    fake_provider_server,
    message_turn,
    system_prompt_sent,
    tool_names_offered,
    tool_results_sent,
    user_texts_sent,
)
from tests.server.support import Stream, new_session, start_turn, use, wait_turn

MODEL = MODELS["anthropic"]
USER_TOKEN = "carol-" + secrets.token_hex(12)
WRITERS = {"write_file", "patch_file", "apply_patch", "delete_file"}


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("roots").resolve()


@pytest.fixture(scope="module")
def agents_server(
    tmp_path_factory: pytest.TempPathFactory,
    fake_provider_server: FakeProviderServer,
    roots: Path,
) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        **AGENT_CONFIG,
        "agents": {"build": {"memories_in_prompt": 2}},
        # Looser than the server's policy: a user token may not pick it.
        "profiles": {"loose": {"policy": {"preset": "yolo"}}},
        "auth": {
            "tokens": [
                {
                    "name": "carol",
                    "token": USER_TOKEN,
                    "role": "user",
                    "allowed_roots": [str(roots)],
                }
            ]
        },
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("agents"), config=config, env=agent_env(fake_provider_server)
    )
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ws(roots: Path) -> Path:
    root = roots / f"ws-{secrets.token_hex(4)}"
    root.mkdir()
    (root / "greet.py").write_text("def greet(name):\n    return f'hi {name}'\n")
    return root


def marked(stream: Stream, child: str) -> list[dict[str, Any]]:
    """The child's events as mirrored on the parent's stream."""
    return [e for e in stream.events if e["data"].get("subagent_session_id") == child]


def is_parents(turn_id: str) -> Any:
    return lambda e: e["turn_id"] == turn_id and "subagent_session_id" not in e["data"]


async def test_delegation_is_isolated_mirrored_and_rolled_up(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    task = "Where is greet defined? Answer with the file."
    fake_provider.plan(
        # Turn 1 of the parent: something the child must never see.
        Reply.text("Noted.", input_tokens=1, output_tokens=1),
        # Turn 2: the parent delegates ...
        Reply.tool_calls(
            ToolCall("dispatch_subagent", {"task": task, "agent_type": "explore"}, id="call_sub"),
            input_tokens=100,
            output_tokens=20,
        ),
        # ... the child reads, and tries to write and to recurse ...
        Reply.tool_calls(
            ToolCall("read_file", {"path": "greet.py"}, id="c_read"),
            ToolCall("write_file", {"path": "x.txt", "content": "no"}, id="c_write"),
            ToolCall("dispatch_subagent", {"task": "t", "agent_type": "explore"}, id="c_sub"),
            input_tokens=7,
            output_tokens=3,
        ),
        Reply.text("greet is defined in greet.py, line 1.", input_tokens=8, output_tokens=4),
        # ... and the parent answers with what it got back.
        Reply.text("It is in greet.py.", input_tokens=50, output_tokens=5),
    )
    async with agents_server.client("alice") as http:
        parent = await new_session(http, ws, model=MODEL)
        async with await Stream.open(
            agents_server.ws_url(f"/sessions/{parent}/events", after=0), after=0
        ) as stream:
            first = await message_turn(http, parent, "The secret word is swordfish.")
            await stream.until("turn.completed", is_parents(first))
            tid = await message_turn(http, parent, "Find greet, using a sub-agent.")
            await stream.until("turn.completed", is_parents(tid))
        turn = await wait_turn(http, parent, tid)
        shown = (await http.get(f"/sessions/{parent}")).json()
        child = shown["children"][0]
        child_shown = (await http.get(f"/sessions/{child}")).json()
        child_tools = (await http.get(f"/sessions/{child}/tools")).json()["tools"]
        async with await Stream.open(
            agents_server.ws_url(f"/sessions/{child}/events", after=0), after=0
        ) as own:
            await own.until("turn.completed")

    # The parent lists its child; the child names its parent, agent and profile.
    assert shown["children"] == [child] and shown["agent"] == "build"
    assert shown["parent_session_id"] is None
    assert child_shown["parent_session_id"] == parent
    assert (child_shown["agent"], child_shown["profile"]) == ("explore", "read-only")
    assert child_shown["workspace"] == shown["workspace"] and child_shown["children"] == []

    # The child's events are on the parent's stream, marked, in the child's order.
    copies = marked(stream, child)
    assert {e["data"]["agent_type"] for e in copies} == {"explore"}
    assert {(e["data"]["parent_turn_id"], e["data"]["parent_tool_use_id"]) for e in copies} == {
        (tid, "call_sub")
    }
    assert [e["data"]["subagent_session_seq"] for e in copies] == list(range(1, len(copies) + 1))
    types = [e["type"] for e in copies]
    assert types[0] == "session.created" and "turn.started" in types
    assert types[-1] == "turn.completed"
    # ... and equal to the child's own stream, event for event.
    assert [e["type"] for e in own.events] == types
    assert [e["data"] for e in own.events] == [
        {k: v for k, v in e["data"].items() if k not in MARKS} for e in copies
    ]
    # The delegation's result comes after the child's last event.
    done = next(
        i
        for i, e in enumerate(stream.events)
        if e["type"] == "tool.completed" and e["data"].get("tool_use_id") == "call_sub"
    )
    assert stream.events.index(copies[-1]) < done

    # Isolation, on the wire: the child's first request holds only its task.
    requests = fake_provider.requests
    assert len(requests) == 5
    child_first, child_second = requests[2], requests[3]
    assert user_texts_sent(child_first) == [task]
    assert "swordfish" not in json.dumps(child_first.body)
    offered = set(tool_names_offered(child_first))
    assert {"read_file", "find_symbol", "list_symbols"} <= offered
    assert not offered & (WRITERS | {"dispatch_subagent", "shell", "run_command"})
    assert "dispatch_subagent" in tool_names_offered(requests[1])
    assert {t["name"] for t in child_tools} == offered
    assert "exploration sub-agent" in system_prompt_sent(child_first)
    # The child could neither write nor recurse: both calls were not found.
    results = tool_results_sent(child_second)
    assert results["c_read"][1] is False
    assert results["c_write"][1] and "no tool named 'write_file'" in results["c_write"][0]
    assert results["c_sub"][1] and "no tool named 'dispatch_subagent'" in results["c_sub"][0]
    assert not (ws / "x.txt").exists()
    failed = [e for e in copies if e["type"] == "tool.failed"]
    assert {e["data"]["error_class"] for e in failed} == {"not_found"}

    # The parent got the answer and an account of what the child did.
    text, is_error = tool_results_sent(requests[4])["call_sub"]
    assert not is_error
    assert "greet is defined in greet.py, line 1." in text
    assert "read_file x1" in text and "files read: greet.py" in text
    # Its tokens roll up into the parent's turn.
    assert turn["usage"] == {"input_tokens": 100 + 7 + 8 + 50, "output_tokens": 20 + 3 + 4 + 5}
    # ... and into the parent session's token budget (limits.max_tokens).
    assert shown["tokens_used"] == (1 + 1) + (100 + 20 + 50 + 5) + (7 + 3 + 8 + 4)


MARKS = {
    "subagent_session_id",
    "agent_type",
    "parent_turn_id",
    "parent_tool_use_id",
    "subagent_session_seq",
}


async def test_cancelling_the_parent_cancels_the_child(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("dispatch_subagent", {"task": "Look around.", "agent_type": "review"})
        ),
        # A slow stream: still running when the parent is cancelled.
        Reply.text("x" * 400, chunk_size=1, event_delay=0.05),
    )
    async with agents_server.client("alice") as http:
        parent = await new_session(http, ws, model=MODEL)
        async with await Stream.open(
            agents_server.ws_url(f"/sessions/{parent}/events", after=0), after=0
        ) as stream:
            tid = await message_turn(http, parent, "Review, with a sub-agent.")
            delta = await stream.until(
                "message.delta", lambda e: "subagent_session_id" in e["data"]
            )
            child, child_turn = delta["data"]["subagent_session_id"], delta["turn_id"]
            cancel = await http.post(f"/sessions/{parent}/turns/{tid}/cancel")
            assert cancel.status_code in (200, 202), cancel.text
            ended = await stream.until("turn.cancelled", is_parents(tid))
        child_turn_shown = await wait_turn(http, child, child_turn)
    assert ended["data"]["reason"] == "cancelled"
    assert child_turn_shown["status"] == "cancelled"
    assert [e["type"] for e in marked(stream, child)][-1] == "turn.cancelled"
    assert len(fake_provider.requests) == 2


async def test_a_plan_session_is_not_offered_write_tools(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(Reply.text("1. Read greet.py."), Reply.text("1. Nothing to do."))
    async with agents_server.client("alice") as http:
        plan = await new_session(http, ws, model=MODEL, agent="plan")
        await wait_turn(http, plan, await message_turn(http, plan, "Plan a rename."))
        shown = (await http.get(f"/sessions/{plan}")).json()
        tools = {t["name"] for t in (await http.get(f"/sessions/{plan}/tools")).json()["tools"]}
        # The build agent under the read-only profile: the profile narrows it.
        ro = await new_session(http, ws, model=MODEL, profile="read-only")
        await wait_turn(http, ro, await message_turn(http, ro, "Anything?"))
    assert (shown["agent"], shown["profile"]) == ("plan", "read-only")
    first, second = fake_provider.requests
    for request in (first, second):
        offered = set(tool_names_offered(request))
        assert "read_file" in offered
        assert not offered & (WRITERS | {"shell", "run_command", "git_commit"})
    assert set(tool_names_offered(first)) == tools
    assert "never change anything" in system_prompt_sent(first)
    # build's prompt carries the editing hierarchy.
    assert "apply_patch" in system_prompt_sent(second) and "patch_file" in system_prompt_sent(
        second
    )


async def test_session_choices_are_checked(agents_server: ServerProcess, ws: Path) -> None:
    async with agents_server.client("alice") as http:
        bad_agent = await http.post("/sessions", json={"workspace": str(ws), "agent": "wizard"})
        bad_profile = await http.post("/sessions", json={"workspace": str(ws), "profile": "god"})
    assert bad_agent.status_code == 422
    assert "known agents: build, explore, plan, review, test" in bad_agent.text
    assert bad_profile.status_code == 422 and "known profiles" in bad_profile.text
    async with agents_server.client("carol", token=USER_TOKEN) as user:
        looser = await user.post("/sessions", json={"workspace": str(ws), "profile": "loose"})
        tighter = await user.post("/sessions", json={"workspace": str(ws), "profile": "read-only"})
    assert looser.status_code == 403, looser.text
    assert "profile 'loose'" in looser.text
    assert tighter.status_code == 201, tighter.text
    assert tighter.json()["profile"] == "read-only"


def test_agents_config_errors_name_the_key(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("agents:\n  scout: {profile: nope}\n", encoding="utf-8")
    with pytest.raises(ConfigInvalid, match=r"agents\.scout\.profile: unknown profile 'nope'"):
        load_config(path, env={})
    path.write_text("agents:\n  scout: {tools: [read_file], bogus: 1}\n", encoding="utf-8")
    with pytest.raises(ConfigInvalid, match=r"agents\.scout\.bogus: unknown key"):
        load_config(path, env={})
    path.write_text("agents:\n  build: {memories_in_prompt: 3}\n", encoding="utf-8")
    config = load_config(path, env={})
    assert config.agents["build"].memories_in_prompt == 3


def test_an_older_state_database_gains_the_session_columns(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT, workspace TEXT NOT NULL,"
        " owner TEXT NOT NULL, model TEXT, policy TEXT NOT NULL, created_at TEXT NOT NULL,"
        " deleted_at TEXT);"
        "INSERT INTO sessions VALUES ('ses_old', NULL, '/w', 'alice', NULL, '{}', 't', NULL);"
    )
    conn.commit()
    conn.close()
    store = Store.open(path)
    try:
        old = store.get_session("ses_old")
        assert old is not None and (old.agent, old.profile, old.parent_session_id) == (
            None,
            None,
            None,
        )
        assert store.children_of("ses_old") == []
    finally:
        store.close()
    Store.open(path).close()  # opening again changes nothing


async def test_a_childs_confirmation_is_seen_on_the_parent_and_answered_on_the_child(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("dispatch_subagent", {"task": "Read greet.py.", "agent_type": "explore"})
        ),
        Reply.tool_calls(ToolCall("read_file", {"path": "greet.py"}, id="c_read")),
        Reply.text("It defines greet."),
        Reply.text("Done."),
    )
    async with agents_server.client("alice") as http:
        # The parent's reads ask; the child's are never allowed more, so they ask too.
        parent = await new_session(
            http, ws, model=MODEL, policy={"per_tool": {"read_file": "prompt"}}
        )
        async with await Stream.open(
            agents_server.ws_url(f"/sessions/{parent}/events", after=0), after=0
        ) as stream:
            tid = await message_turn(http, parent, "Read it with a sub-agent.")
            asked = await stream.until(
                "tool.confirmation_requested", lambda e: "subagent_session_id" in e["data"]
            )
            child, data = asked["data"]["subagent_session_id"], asked["data"]
            pending = (await http.get(f"/sessions/{child}/confirmations")).json()
            answer = await http.post(
                f"/sessions/{child}/turns/{asked['turn_id']}/confirmations/{data['request_id']}",
                json={"decision": "allow"},
            )
            await stream.until("turn.completed", is_parents(tid))
    assert data["tool_name"] == "read_file"
    assert [c["request_id"] for c in pending["confirmations"]] == [data["request_id"]]
    assert answer.status_code == 200, answer.text
    resolved = [e for e in marked(stream, child) if e["type"] == "tool.confirmation_resolved"]
    assert [e["data"]["decision"] for e in resolved] == ["allow"]
    assert tool_results_sent(fake_provider.requests[2])["c_read"][1] is False


async def test_the_scripted_model_delegates_too(agents_server: ServerProcess, ws: Path) -> None:
    async with agents_server.client("alice") as http:
        parent = await new_session(http, ws, model="scripted")
        tid = await message_turn(http, parent, "delegate explore: read greet.py")
        turn = await wait_turn(http, parent, tid)
        children = (await http.get(f"/sessions/{parent}")).json()["children"]
        child_messages = (await http.get(f"/sessions/{children[0]}/messages")).json()["messages"]
    assert turn["status"] == "completed", turn
    result = turn["results"][0]["content"][0]["text"]
    assert "Sub-agent explore" in result and "files read: greet.py" in result
    # The child's conversation: its task, its read, the result, its summary.
    assert [m["role"] for m in child_messages] == ["user", "assistant", "tool", "assistant"]
    assert child_messages[0]["content"][0]["text"] == "read greet.py"


async def test_an_agent_can_carry_the_newest_memories_in_its_prompt(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(Reply.text("Ok."))
    async with agents_server.client("alice") as http:
        sid = await new_session(http, ws, model=MODEL)
        for n, fact in enumerate(["tests run with uv", "greet is public API", "use tabs"]):
            done = await wait_turn(
                http, sid, await start_turn(http, sid, use(f"m{n}", "memory_add", content=fact))
            )
            assert done["status"] == "completed" and not done["results"][0]["is_error"], done
        await wait_turn(http, sid, await message_turn(http, sid, "Hello."))
    prompt = system_prompt_sent(fake_provider.requests[0])
    # build's memories_in_prompt is 2 here: the newest two, oldest first.
    assert prompt.endswith("- greet is public API\n- use tabs")
    assert "tests run with uv" not in prompt


async def test_a_test_sub_agent_runs_commands_but_never_dangerous_ones(
    agents_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(
        Reply.tool_calls(
            ToolCall("dispatch_subagent", {"task": "Check greet.py.", "agent_type": "test"})
        ),
        Reply.tool_calls(
            ToolCall("shell", {"command": "curl http://example.com"}, id="c_curl"),
        ),
        Reply.text("curl was refused."),
        Reply.text("Done."),
    )
    async with agents_server.client("alice") as http:
        parent = await new_session(http, ws, model=MODEL)
        async with await Stream.open(
            agents_server.ws_url(f"/sessions/{parent}/events", after=0), after=0
        ) as stream:
            tid = await message_turn(http, parent, "Test it with a sub-agent.")
            await stream.until("turn.completed", is_parents(tid))
    child_first, child_second = fake_provider.requests[1], fake_provider.requests[2]
    offered = set(tool_names_offered(child_first))
    assert "shell" in offered and not offered & WRITERS
    text, is_error = tool_results_sent(child_second)["c_curl"]
    assert is_error and "profile 'ci' is non-interactive: refused" in text
    # Refused outright: nobody was asked (the ci profile is non-interactive).
    assert not stream.of("tool.confirmation_requested")
