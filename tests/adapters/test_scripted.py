"""The offline scripted model: scripts, the demo rules, streaming, determinism."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from adapters.base import (
    MessageCompleted,
    ModelAdapter,
    TextDelta,
    ToolUseReady,
    ToolUseStarted,
)
from adapters.errors import AdapterMisconfigured, ProviderRejectedRequest
from adapters.scripted import ScriptedAdapter
from adapters.scripted_rules import HELP_TEXT
from adapters.scripted_script import MAX_SCRIPT_BYTES, load_script, parse_script
from protocol.canonical import Message, SideEffects, TextBlock, ToolDefinition, text_result
from tests.adapters.helpers import collect, final, request, user


def _tool(name: str) -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=name,
        input_schema={"type": "object", "properties": {}},
        side_effects=SideEffects.READ,
    )


ALL_TOOLS = [_tool(n) for n in ("read_file", "write_file", "shell", "list_dir")]


def test_scripted_adapter_is_a_model_adapter() -> None:
    assert isinstance(ScriptedAdapter(), ModelAdapter)


# -- scripts -----------------------------------------------------------------

SCRIPT = """
replies:
  - content:
      - {type: text, text: "I will read the notes and list the folder."}
      - {type: tool_use, name: read_file, input: {path: notes.md}}
      - {type: tool_use, name: list_dir, input: {path: .}}
  - "Both done: the notes say hello."
"""


async def test_a_script_plays_in_conversation_order(tmp_path: Path) -> None:
    path = tmp_path / "demo.yaml"
    path.write_text(SCRIPT)
    model = ScriptedAdapter.from_file(path)
    assert model.name == f"scripted:{path}"

    first = await collect(model, request(user("go"), tools=ALL_TOOLS))
    done = final(first)
    uses = done.message.tool_uses()
    assert [(u.id, u.name, u.input) for u in uses] == [
        ("toolu_scripted_1", "read_file", {"path": "notes.md"}),
        ("toolu_scripted_2", "list_dir", {"path": "."}),
    ]
    assert done.stop_reason == "tool_use"
    assert "".join(e.text for e in first if isinstance(e, TextDelta)) == done.message.text()
    assert sum(isinstance(e, TextDelta) for e in first) > 1

    conversation = [
        user("go"),
        done.message,
        Message(role="tool", content=[text_result(u.id, "ok") for u in uses]),
    ]
    second = final(await collect(model, request(*conversation)))
    assert second.message.text() == "Both done: the notes say hello."
    assert second.stop_reason == "end_turn"

    more = [*conversation, second.message, user("again")]
    with pytest.raises(ProviderRejectedRequest, match=r"has 2 replies.*reply 3"):
        await collect(model, request(*more))


async def test_script_ids_continue_the_conversation_count() -> None:
    script = parse_script([{"content": [{"type": "tool_use", "name": "shell", "input": {}}]}] * 2)
    model = ScriptedAdapter(script)
    first = final(await collect(model, request(user("a"))))
    convo = [user("a"), first.message, Message(role="tool", content=[text_result("x", "r")])]
    second = final(await collect(model, request(*convo)))
    assert first.message.tool_uses()[0].id == "toolu_scripted_1"
    assert second.message.tool_uses()[0].id == "toolu_scripted_2"


async def test_replaying_a_request_gives_the_same_reply() -> None:
    model = ScriptedAdapter()
    req = request(user("read a.txt\nrun ls -la"), tools=ALL_TOOLS)
    one = final(await collect(model, req))
    two = final(await collect(model, req))
    assert one == two


async def test_raw_input_plays_malformed_arguments() -> None:
    script = parse_script(
        [
            {
                "content": [
                    {"type": "tool_use", "name": "write_file", "raw_input": '{"path": "a'},
                    {"type": "tool_use", "name": "shell", "id": "mine", "raw_input": "{}"},
                ]
            }
        ]
    )
    done = final(await collect(ScriptedAdapter(script), request(user("x"))))
    bad, good = done.message.tool_uses()
    assert bad.input == {} and "not valid JSON" in done.malformed_tool_uses[bad.id]
    assert good.id == "mine" and good.id not in done.malformed_tool_uses


def test_script_accepts_json_and_a_bare_list(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(["hello", {"content": [{"type": "text", "text": "bye"}]}]))
    replies = load_script(path)
    assert [r.content[0].type for r in replies] == ["text", "text"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("replies: 3", "a mapping with only a 'replies' list"),
        ("- {content: [{type: tool_use, input: {}}]}", "reply 1.content.0.tool_use.name"),
        ("- {content: [{type: text, txt: hi}]}", "reply 1.content.0.text"),
        ("- {content: [], colour: red}", "reply 1: a key that is not allowed here"),
        (
            "- {content: [{type: tool_use, name: x, input: {}, raw_input: '{}'}]}",
            "either input or raw_input",
        ),
        ("- [unclosed", "not valid YAML/JSON"),
        ("42", "must be a list of replies"),
    ],
)
def test_bad_scripts_are_refused_with_their_location(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(AdapterMisconfigured) as caught:
        load_script(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_missing_script_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(AdapterMisconfigured, match="cannot read script"):
        load_script(tmp_path / "nope.yaml")


# -- the demo rules ----------------------------------------------------------


async def test_commands_become_parallel_tool_calls() -> None:
    text = (
        "read notes.md\nrun pytest -q\nlist src\nlist\nwrite out/new.txt: first line\nsecond line"
    )
    done = final(await collect(ScriptedAdapter(), request(user(text), tools=ALL_TOOLS)))
    assert [(u.name, u.input) for u in done.message.tool_uses()] == [
        ("read_file", {"path": "notes.md"}),
        ("shell", {"command": "pytest -q"}),
        ("list_dir", {"path": "src"}),
        ("list_dir", {"path": "."}),
        ("write_file", {"path": "out/new.txt", "content": "first line\nsecond line"}),
    ]
    assert [u.id for u in done.message.tool_uses()] == [f"toolu_scripted_{i}" for i in range(1, 6)]
    assert done.stop_reason == "tool_use"
    assert done.message.text() == "Running 5 tool calls."


async def test_stream_events_come_in_order_for_each_call() -> None:
    events = await collect(ScriptedAdapter(), request(user("read a\nread b"), tools=ALL_TOOLS))
    kinds = [type(e).__name__ for e in events if not isinstance(e, TextDelta)]
    assert kinds == [
        "ToolUseStarted",
        "ToolUseReady",
        "ToolUseStarted",
        "ToolUseReady",
        "MessageCompleted",
    ]
    started = [e.id for e in events if isinstance(e, ToolUseStarted)]
    ready = [e.block.id for e in events if isinstance(e, ToolUseReady)]
    assert started == ready


async def test_run_falls_back_to_run_command() -> None:
    tools = [_tool("run_command")]
    done = final(await collect(ScriptedAdapter(), request(user("run echo hi"), tools=tools)))
    assert [(u.name, u.input) for u in done.message.tool_uses()] == [
        ("run_command", {"command": "echo hi"})
    ]


async def test_a_tool_the_session_lacks_is_explained_not_called() -> None:
    done = final(await collect(ScriptedAdapter(), request(user("run rm -rf x"), tools=[])))
    assert done.message.tool_uses() == []
    assert "shell or run_command tool is not available" in done.message.text()
    assert done.stop_reason == "end_turn"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello there", "I did not understand line 1: 'hello there'"),
        ("read a\nplease", "I did not understand line 2"),
        ("write nowhere", "write needs '<path>: <content>'"),
        ("read", "read needs an argument"),
        ("help", HELP_TEXT),
        ("   \n", HELP_TEXT),
    ],
)
async def test_anything_else_gets_the_help(text: str, expected: str) -> None:
    done = final(await collect(ScriptedAdapter(), request(user(text), tools=ALL_TOOLS)))
    assert done.message.tool_uses() == []
    assert expected in done.message.text()
    assert "read <path>" in done.message.text()


async def test_results_are_summarised_and_the_turn_ends() -> None:
    model = ScriptedAdapter()
    first = final(await collect(model, request(user("read notes.md\nrun make"), tools=ALL_TOOLS)))
    read, run = first.message.tool_uses()
    results = Message(
        role="tool",
        content=[
            text_result(read.id, "hello\nworld\n"),
            text_result(run.id, "make: *** No rule to make target", is_error=True),
        ],
    )
    convo = [user("read notes.md\nrun make"), first.message, results]
    done = final(await collect(model, request(*convo, tools=ALL_TOOLS)))
    assert done.stop_reason == "end_turn"
    assert done.message.tool_uses() == []
    assert done.message.text().splitlines() == [
        "1 of 2 tool calls succeeded:",
        "- read_file(notes.md): ok - hello / world",
        "- shell(make): error - make: *** No rule to make target",
    ]


async def test_usage_is_estimated_and_grows_with_input() -> None:
    model = ScriptedAdapter()
    short = final(await collect(model, request(user("help"))))
    long = final(await collect(model, request(user("help " * 200))))
    assert 0 < short.usage.input_tokens < long.usage.input_tokens
    assert short.usage.output_tokens > 0


async def test_cancellation_lands_between_deltas() -> None:
    model = ScriptedAdapter(words_per_delta=1, delta_delay=0.01)
    seen = 0
    started = asyncio.Event()

    async def consume() -> None:
        nonlocal seen
        async for event in model.stream(request(user("help"))):
            seen += 1
            started.set()
            assert not isinstance(event, MessageCompleted)

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 0 < seen < len(HELP_TEXT.split())


def test_bad_pacing_options_are_refused() -> None:
    with pytest.raises(ValueError, match="words_per_delta"):
        ScriptedAdapter(words_per_delta=0)
    with pytest.raises(ValueError, match="delta_delay"):
        ScriptedAdapter(delta_delay=-1)


async def test_text_pieces_concatenate_exactly() -> None:
    text = "  leading spaces,\ttabs\n\nand   runs of   spaces  "
    model = ScriptedAdapter(parse_script([text]), words_per_delta=2)
    events = await collect(model, request(user("x")))
    pieces = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(pieces) == text
    assert len(pieces) > 2
    assert final(events).message.content == [TextBlock(text=text)]


# -- reading a script a client may have chosen ------------------------------------

SECRET_LINE = "api_key: sk-do-not-echo-0123456789"


@pytest.mark.parametrize(
    "content",
    [
        f"- hello\n{SECRET_LINE}\n",  # a mapping line inside a list: a syntax error
        f"- [unclosed, {SECRET_LINE}\n",
        f"- !!python/object:{SECRET_LINE.replace(' ', '')} x\n",  # an unknown tag
        f"- {{content: [], {SECRET_LINE}}}\n",  # an unknown key
        f"{SECRET_LINE}\n",  # a mapping without 'replies'
        f"- {{content: [{{type: {SECRET_LINE.replace(': ', '')}, text: x}}]}}\n",  # bad tag
        f"- *{SECRET_LINE.replace(' ', '').replace(':', '')}\n",  # an undefined alias
    ],
)
def test_errors_never_quote_the_script(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    with pytest.raises(AdapterMisconfigured) as caught:
        load_script(path)
    message = str(caught.value)
    assert str(path) in message
    for fragment in ("sk-do-not-echo", "api_key", "apikey"):
        assert fragment not in message, message


def test_a_yaml_error_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("- one\n- two\n  three: [\n")
    with pytest.raises(AdapterMisconfigured, match=r"line \d+, column \d+"):
        load_script(path)


def test_only_regular_files_are_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    # No writer ever opens the FIFO: a blocking open or read would hang here.
    with pytest.raises(AdapterMisconfigured, match=r"not a regular file .*FIFO"):
        load_script(fifo)
    with pytest.raises(AdapterMisconfigured, match=r"not a regular file .*directory"):
        load_script(tmp_path)


def test_a_script_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"- " + b"x" * MAX_SCRIPT_BYTES + b"\n")
    with pytest.raises(AdapterMisconfigured, match=f"limit of {MAX_SCRIPT_BYTES} bytes"):
        load_script(path)


def test_script_paths_never_follow_a_symbolic_link(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "s.yaml").write_text("- hi\n")
    assert len(load_script(real / "s.yaml")) == 1
    os.symlink(real / "s.yaml", tmp_path / "file-link.yaml")
    os.symlink(real, tmp_path / "dir-link")
    for path in (tmp_path / "file-link.yaml", tmp_path / "dir-link" / "s.yaml"):
        with pytest.raises(AdapterMisconfigured, match="is a symbolic link"):
            load_script(path)


async def test_a_deferred_script_is_read_when_it_first_streams(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("- first\n")
    model = ScriptedAdapter.deferred(path)
    assert model.name == f"scripted:{path}"
    path.write_text("- changed before the first turn\n")  # nothing was read yet
    done = final(await collect(model, request(user("go"))))
    assert done.message.text() == "changed before the first turn"

    os.mkfifo(tmp_path / "pipe")
    broken = ScriptedAdapter.deferred(tmp_path / "pipe")
    with pytest.raises(AdapterMisconfigured, match="FIFO"):
        await collect(broken, request(user("go")))
