"""The confirmation flow end to end: a real server, real HTTP and WebSocket clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.harness import ServerFactory, ServerProcess
from tests.server.conftest import BASE_CONFIG
from tests.server.support import Stream, new_session, result_text, start_turn, use, wait_turn


def answer_url(session_id: str, turn_id: str, request_id: str) -> str:
    return f"/sessions/{session_id}/turns/{turn_id}/confirmations/{request_id}"


async def test_three_clients_race_and_exactly_one_wins(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as alice, srv.client("bob") as bob, srv.client("carol") as carol:
        sid = await new_session(alice, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            # The real built-in write tool, under the default policy (writes prompt).
            write = use("tu1", "write_file", path="a.txt", content="hi\n")
            tid = await start_turn(alice, sid, write)
            requested = await stream.until("tool.confirmation_requested")
            data = requested["data"]
            assert requested["turn_id"] == tid
            assert data["tool_use_id"] == "tu1"
            assert data["tool_name"] == "write_file"
            assert data["side_effects"] == "write"
            assert data["projected_modifications"] == ["a.txt"]
            assert data["preview"]["kind"] == "diff"
            assert "+hi" in data["preview"]["text"]
            assert data["expires_at"].endswith("Z")
            assert "write_file(" in data["input_summary"]

            url = answer_url(sid, tid, data["request_id"])
            clients = {"alice": (alice, "allow"), "bob": (bob, "deny"), "carol": (carol, "allow")}
            responses = await asyncio.gather(
                *(c.post(url, json={"decision": d}) for c, d in clients.values())
            )
            by_name = dict(zip(clients, responses, strict=True))
            winners = [name for name, r in by_name.items() if r.status_code == 200]
            assert len(winners) == 1, {n: r.status_code for n, r in by_name.items()}
            winner = winners[0]
            won = by_name[winner].json()
            assert won["resolved_by"] == winner
            assert won["decision"] == clients[winner][1]
            for name, response in by_name.items():
                if name == winner:
                    continue
                assert response.status_code == 409
                error = response.json()["error"]
                assert error["code"] == "already_resolved"
                assert error["resolution"]["resolved_by"] == winner
                assert error["resolution"]["decision"] == won["decision"]
                assert winner in error["message"]

            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["resolved_by"] == winner
            assert resolved["data"]["decision"] == won["decision"]
            await stream.until("turn.completed")
            assert len(stream.of("tool.confirmation_resolved")) == 1

        turn = await wait_turn(alice, sid, tid)
        written = (workspace / "a.txt").exists()
        assert written == (won["decision"] == "allow")
        assert turn["results"][0]["is_error"] == (won["decision"] == "deny")


async def test_deny_sends_the_message_back_in_the_error_result(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("tu1", "note", path="b.txt", text="x"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]
            response = await http.post(
                answer_url(sid, tid, request_id),
                json={"decision": "deny", "message": "not on a Friday"},
            )
            assert response.status_code == 200, response.text
            failed = await stream.until("tool.failed")
            assert failed["data"]["error_class"] == "user_denied"
            assert "not on a Friday" in failed["data"]["message"]
        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "completed"
        result = turn["results"][0]
        assert result["is_error"] is True
        assert "not on a Friday" in result_text(result)
        assert not (workspace / "b.txt").exists()
        messages = (await http.get(f"/sessions/{sid}/messages")).json()["messages"]
        assert [m["role"] for m in messages] == ["assistant", "tool"]
        assert messages[1]["content"][0]["tool_use_id"] == "tu1"
        assert "not on a Friday" in messages[1]["content"][0]["content"][0]["text"]


async def test_scope_session_remembers_the_approval(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("tu1", "note", path="c1.txt", text="1"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]
            response = await http.post(
                answer_url(sid, tid, request_id), json={"decision": "allow", "scope": "session"}
            )
            assert response.status_code == 200
            assert response.json()["scope"] == "session"
            await stream.until("turn.completed")

            tid2 = await start_turn(http, sid, use("tu2", "note", path="c2.txt", text="2"))
            await stream.until("turn.completed", lambda e: e["turn_id"] == tid2)
            second = [e for e in stream.events if e["turn_id"] == tid2]
            assert "tool.confirmation_requested" not in [e["type"] for e in second]
            assert "tool.completed" in [e["type"] for e in second]
        assert (workspace / "c2.txt").read_text() == "2"


async def test_cancel_while_waiting_for_confirmation(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("tu1", "note", path="d.txt", text="x"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]
            pending = (await http.get(f"/sessions/{sid}/confirmations")).json()["confirmations"]
            assert [p["request_id"] for p in pending] == [request_id]

            response = await http.post(f"/sessions/{sid}/turns/{tid}/cancel")
            assert response.status_code in (200, 202), response.text
            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["decision"] == "cancelled"
            failed = await stream.until("tool.failed")
            assert failed["data"]["error_class"] == "cancelled"
            cancelled = await stream.until("turn.cancelled")
            assert cancelled["data"]["cancelled_by"] == "alice"

        turn = await wait_turn(http, sid, tid)
        assert turn["status"] == "cancelled"
        assert turn["results"][0]["is_error"] is True
        assert (await http.get(f"/sessions/{sid}/confirmations")).json()["confirmations"] == []
        late = await http.post(answer_url(sid, tid, request_id), json={"decision": "allow"})
        assert late.status_code == 409
        assert late.json()["error"]["resolution"]["decision"] == "cancelled"
        again = await http.post(f"/sessions/{sid}/turns/{tid}/cancel")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "turn_not_running"
        assert not (workspace / "d.txt").exists()


async def test_a_late_client_answers_from_the_pending_list(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as alice, srv.client("late") as late:
        sid = await new_session(alice, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(alice, sid, use("tu1", "note", path="e.txt", text="late"))
            await stream.until("tool.confirmation_requested")
            pending = (await late.get(f"/sessions/{sid}/confirmations")).json()["confirmations"]
            assert len(pending) == 1
            entry = pending[0]
            assert entry["turn_id"] == tid and entry["tool_name"] == "note"
            url = answer_url(sid, entry["turn_id"], entry["request_id"])
            assert (await late.post(url, json={"decision": "allow"})).status_code == 200
            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["resolved_by"] == "late"
        await wait_turn(alice, sid, tid)
        assert (workspace / "e.txt").read_text() == "late"


async def test_unknown_ids_and_bad_decisions(shared_server: ServerProcess, workspace: Path) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("tu1", "note", path="f.txt", text="x"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]

            unknown = await http.post(answer_url(sid, tid, "conf_nope"), json={"decision": "allow"})
            assert unknown.status_code == 404
            assert "conf_nope" in unknown.json()["error"]["message"]
            wrong_turn = await http.post(
                answer_url(sid, "turn_other", request_id), json={"decision": "allow"}
            )
            assert wrong_turn.status_code == 404
            wrong_session = await http.post(
                answer_url("ses_nope", tid, request_id), json={"decision": "allow"}
            )
            assert wrong_session.status_code == 404
            bad = await http.post(answer_url(sid, tid, request_id), json={"decision": "maybe"})
            assert bad.status_code == 422
            assert bad.json()["error"]["fields"][0]["field"] == "decision"
            bad_scope = await http.post(
                answer_url(sid, tid, request_id), json={"decision": "allow", "scope": "forever"}
            )
            assert bad_scope.status_code == 422
            assert "scope" in bad_scope.json()["error"]["message"]
            # None of that settled the request: it is still pending, and answerable.
            ok = await http.post(answer_url(sid, tid, request_id), json={"decision": "allow"})
            assert ok.status_code == 200
            await stream.until("turn.completed")


async def test_no_answer_within_the_timeout(server_factory: ServerFactory, workspace: Path) -> None:
    srv = server_factory({**BASE_CONFIG, "confirmation_timeout": 0.5})
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            tid = await start_turn(http, sid, use("tu1", "note", path="g.txt", text="x"))
            request_id = (await stream.until("tool.confirmation_requested"))["data"]["request_id"]
            resolved = await stream.until("tool.confirmation_resolved")
            assert resolved["data"]["decision"] == "timeout"
            failed = await stream.until("tool.failed")
            assert failed["data"]["error_class"] == "confirmation_timeout"
            await stream.until("turn.completed")
        late = await http.post(answer_url(sid, tid, request_id), json={"decision": "allow"})
        assert late.status_code == 409
        assert late.json()["error"]["resolution"]["decision"] == "timeout"
        assert not (workspace / "g.txt").exists()


async def test_at_most_four_calls_run_at_once(
    shared_server: ServerProcess, workspace: Path
) -> None:
    srv = shared_server
    async with srv.client("alice") as http:
        sid = await new_session(http, workspace)
        async with await Stream.open(srv.ws_url(f"/sessions/{sid}/events", after=0)) as stream:
            calls = [use(f"b{i}", "block", seconds=60) for i in range(6)]
            tid = await start_turn(http, sid, *calls)
            for _ in range(4):
                await stream.until("tool.called")
            # The other two can start only when one of the four ends; cancelling ends
            # all of them, and the queued two must then never start.
            await http.post(f"/sessions/{sid}/turns/{tid}/cancel")
            await stream.until("turn.cancelled")
            assert len(stream.of("tool.called")) == 4
            failed = stream.of("tool.failed")
            assert len(failed) == 6
            assert {f["data"]["error_class"] for f in failed} == {"cancelled"}
        turn = await wait_turn(http, sid, tid)
        assert [r["tool_use_id"] for r in turn["results"]] == [f"b{i}" for i in range(6)]
