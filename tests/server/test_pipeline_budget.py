"""The session's token budget (``limits.max_tokens``) and context compression
(``limits.context_tokens``) through the server: the scripted model reports
an estimated usage (characters / 4) for every call, which is what the
server counts; events are read on a real WebSocket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2

from tests.server.pipeline_support import (
    AUTO_POLICY,
    pipeline_server,
    run_message_turn,
    script,
    session_stream,
    tool_use,
)
from tests.server.support import new_session

# A model call of these sessions costs about 3,700 tokens (the tool
# definitions are most of it); the second turn's message is sized from what
# the first cost, so that it ends near 90 % of the budget.
BUDGET = 20_000
CAPTURE = "cat > .budget_hook.json"


def _budget_config() -> dict[str, Any]:
    return {
        "policy": AUTO_POLICY,
        "model": {"system_prompt": "Be brief."},
        "limits": {"max_tokens": BUDGET},
        "hooks": {"budget_warning": [{"name": "budget-note", "command": CAPTURE}]},
    }


def _workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path.resolve() / "ws"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


async def _tokens_used(http: httpx2.AsyncClient, sid: str) -> int:
    used: int = (await http.get(f"/sessions/{sid}")).json()["tokens_used"]
    return used


async def test_the_budget_warns_once_at_80_percent_and_stops_the_turn_at_100(
    tmp_path: Path,
) -> None:
    workspace = _workspace(tmp_path, {"notes.txt": "notes\n"})
    root = tmp_path / "srv"
    with pipeline_server(root, _budget_config()) as srv:
        model = script(
            srv,
            "budget",
            ["Hello.", "A long one.", tool_use("read_file", path="notes.txt"), "never played"],
        )
        async with srv.client("budget") as http:
            sid = await new_session(http, workspace, model=model)
            async with session_stream(srv, sid) as stream:
                first = await run_message_turn(http, sid, "hi")
                after_first = await _tokens_used(http, sid)
                assert first["status"] == "completed"
                assert 0 < after_first < BUDGET * 0.8
                assert not (workspace / ".budget_hook.json").exists()
                # A long message carries the total past 80 %: one warning.
                chars = 4 * (int(BUDGET * 0.9) - 2 * after_first - 200)
                assert chars > 0, "the first turn cost too much for this budget"
                second = await run_message_turn(http, sid, "x" * chars)
                after_second = await _tokens_used(http, sid)
                assert second["status"] == "completed"
                assert BUDGET * 0.8 <= after_second < BUDGET
                warned = json.loads((workspace / ".budget_hook.json").read_text("utf-8"))
                assert warned["event"] == "budget_warning"
                assert warned["extra"]["tokens_used"] == after_second
                assert warned["extra"]["max_tokens"] == BUDGET
                # The third turn's first call passes 100 %; its tool call is
                # answered, and the next model call is never made.
                third = await run_message_turn(http, sid, "read the notes")
                await stream.until("turn.failed")
            assert third["status"] == "failed" and third["reason"] == "budget_exhausted"
            used = await _tokens_used(http, sid)
            assert used >= BUDGET
            assert f"{used} of {BUDGET} tokens" in third["message"]
            assert len(third["results"]) == 1 and not third["results"][0]["is_error"]
            warnings = [
                e for e in stream.of("hook.completed") if e["data"]["event"] == "budget_warning"
            ]
            assert len(warnings) == 1
            failed = stream.of("turn.failed")[0]["data"]
            assert failed["reason"] == "budget_exhausted"
            assert failed["tokens_used"] == used and failed["max_tokens"] == BUDGET
    # The total is kept on the session: after a restart it still refuses.
    with pipeline_server(root, _budget_config()) as srv:
        async with srv.client("budget") as http:
            assert await _tokens_used(http, sid) == used
            fourth = await run_message_turn(http, sid, "again")
    assert fourth["status"] == "failed" and fourth["reason"] == "budget_exhausted"
    assert fourth["usage"] == {"input_tokens": 0, "output_tokens": 0}


def _compress_config() -> dict[str, Any]:
    return {
        "model": {"system_prompt": "Be brief."},
        "limits": {"context_tokens": 1000},
        "hooks": {
            "context_compress": [{"name": "compress-note", "command": "cat > .compress.json"}]
        },
    }


async def test_older_tool_results_are_elided_from_what_is_sent_not_from_the_store(
    tmp_path: Path,
) -> None:
    big = "".join(f"line {i:05d} of the big file\n" for i in range(400))  # ~10 KB
    workspace = _workspace(tmp_path, {"big.txt": big, "small.txt": "small\n"})
    with pipeline_server(tmp_path / "srv", _compress_config()) as srv:
        model = script(
            srv,
            "compress",
            [
                tool_use("read_file", path="big.txt"),
                tool_use("read_file", path="small.txt"),
                "Done.",
            ],
        )
        async with srv.client("compress") as http:
            sid = await new_session(http, workspace, model=model)
            async with session_stream(srv, sid) as stream:
                turn = await run_message_turn(http, sid, "read both")
                await stream.until("turn.completed")
            messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
    assert turn["status"] == "completed"
    # The second model call still saw the big result (it was the latest);
    # the third one had it elided, so the hook ran once, for one result.
    hooks = [e for e in stream.of("hook.completed") if e["data"]["event"] == "context_compress"]
    assert len(hooks) == 1 and hooks[0]["data"]["decision"] == "allow"
    told = json.loads((workspace / ".compress.json").read_text("utf-8"))
    assert told["extra"]["elided"] == 1
    assert (
        told["extra"]["estimated_tokens_after"] <= 1000 < told["extra"]["estimated_tokens_before"]
    )
    # The stored conversation keeps the whole output.
    stored = [b for m in messages if m["role"] == "tool" for b in m["content"]]
    assert "line 00399 of the big file" in stored[0]["content"][0]["text"]
