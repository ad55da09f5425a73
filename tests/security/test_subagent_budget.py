"""Attack: sub-agents spend past their parent's budget (issue 25, item 5).

The finding: 8 workers dispatched from one model reply reached 2.5x the
parent's ``limits.max_tokens``, each on a budget of its own. Now a worker
draws from its parent's tree budget (dispatcher/pipeline/budget.py,
server/tree_budget.py): admitted only under the limit, each model call
reserved before it is sent, stopped before the call the tree cannot afford.

- ``test_eight_workers_stay_within_the_parents_budget``: a real server
  subprocess whose model is the fake provider (real anthropic SDK on the
  wire); the parent's first reply dispatches 8 workers, and every worker
  reply asks for another tool call at 2,500 tokens a call. The tree's total
  stays within the budget plus one call's usage (the ledger's invariant I3),
  the workers that find the tree over budget are refused with a clear
  ``permission_denied``, the ones running are stopped with a report that says
  why, and ``budget_warning`` fires once for the tree.
- ``test_workers_dispatched_over_budget_are_refused``: the parent's reply
  alone uses the budget up: none of its 8 workers is created.
- ``LedgerMachine``: a Hypothesis state machine over the ledger (reserve,
  consume, release, child start, child stop, several children interleaved)
  checking the written invariants after every step.
"""

# Fixtures are imported from agent_loop_support (their parameters shadow the imports).
# ruff: noqa: F811

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from dispatcher.pipeline.budget import TOKENS, BudgetLedger, Decision, Grant
from tests.fakes.fake_providers import FakeProviderServer, Reply, ToolCall
from tests.harness import ServerProcess
from tests.server.agent_loop_support import (  # noqa: F401  (fixtures)
    AGENT_CONFIG,
    MODELS,
    agent_env,
    fake_provider,
    fake_provider_server,
    message_turn,
)
from tests.server.support import Stream, new_session, wait_turn

MODEL = MODELS["anthropic"]
BUDGET = 20_000
WORKERS = 8
# What each planned reply reports: the parent's first reply, then every worker call.
PARENT_IN, PARENT_OUT = 1_000, 100
CALL_IN, CALL_OUT = 2_000, 500
CALL_USAGE = CALL_IN + CALL_OUT
# More worker replies than any budget-keeping run can take (a run without
# the tree budget takes them all and then meets unplanned requests).
WORKER_REPLIES = 60


@pytest.fixture(scope="module")
def budget_server(
    tmp_path_factory: pytest.TempPathFactory, fake_provider_server: FakeProviderServer
) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        **AGENT_CONFIG,
        "limits": {"max_tokens": BUDGET},
        "model": {"max_tokens": 1000},
        # Four workers run at once; the other four start as slots free up.
        "dispatcher": {"max_concurrency": 4},
        "hooks": {"budget_warning": [{"name": "tree-warning", "command": "true"}]},
    }
    srv = ServerProcess(
        tmp_path_factory.mktemp("budget"), config=config, env=agent_env(fake_provider_server)
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
    (root / "notes.txt").write_text("notes\n", encoding="utf-8")
    return root


def _dispatches(parent_in: int) -> Reply:
    calls = [
        ToolCall(
            "dispatch_subagent",
            {"task": f"Read notes.txt again and again ({n}).", "agent_type": "explore"},
            id=f"sub_{n}",
        )
        for n in range(WORKERS)
    ]
    return Reply.tool_calls(*calls, input_tokens=parent_in, output_tokens=PARENT_OUT)


def _worker_call() -> Reply:
    return Reply.tool_calls(
        ToolCall("read_file", {"path": "notes.txt"}), input_tokens=CALL_IN, output_tokens=CALL_OUT
    )


def _own(stream: Stream, type: str) -> list[dict[str, Any]]:
    """The parent's own events of a type (not its workers' mirrored ones)."""
    return [
        e for e in stream.events if e["type"] == type and "subagent_session_id" not in e["data"]
    ]


async def test_eight_workers_stay_within_the_parents_budget(
    budget_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    fake_provider.plan(_dispatches(PARENT_IN), *(_worker_call() for _ in range(WORKER_REPLIES)))
    async with budget_server.client("alice") as http:
        parent = await new_session(http, ws, model=MODEL)
        async with await Stream.open(
            budget_server.ws_url(f"/sessions/{parent}/events", after=0), after=0
        ) as stream:
            tid = await message_turn(http, parent, "Fan out.")
            await stream.until("turn.failed", lambda e: "subagent_session_id" not in e["data"])
        turn = await wait_turn(http, parent, tid)
        shown = (await http.get(f"/sessions/{parent}")).json()

    # The tree's total: every request the provider answered, as it reported it.
    calls = len(fake_provider.requests)
    total = PARENT_IN + PARENT_OUT + (calls - 1) * CALL_USAGE
    assert shown["tokens_used"] == total
    # Invariant I3: at most one model request's usage past the limit.
    assert BUDGET <= total <= BUDGET + CALL_USAGE, (total, calls)
    assert turn["status"] == "failed" and turn["reason"] == "budget_exhausted", turn

    results = {r["tool_use_id"]: r for r in turn["results"]}
    assert set(results) == {f"sub_{n}" for n in range(WORKERS)}
    texts = {k: "".join(c.get("text", "") for c in r["content"]) for k, r in results.items()}
    refused = {k for k, t in texts.items() if "no sub-agent started" in t}
    stopped = {k for k, t in texts.items() if "shared with its sub-agents, is used up" in t}
    # Workers that found the tree over budget were refused, the others stopped.
    assert refused and stopped and refused | stopped == set(results), texts
    assert all(results[k]["is_error"] for k in refused | stopped)
    failed = {e["data"]["tool_use_id"]: e["data"] for e in _own(stream, "tool.failed")}
    assert {failed[k]["error_class"] for k in refused} == {"permission_denied"}
    assert f"of {BUDGET} tokens" in texts[sorted(refused)[0]]
    # Only the admitted workers exist, and each ended budget_exhausted.
    assert len(shown["children"]) == len(stopped)
    ended = [
        e
        for e in stream.events
        if e["type"] == "turn.failed" and "subagent_session_id" in e["data"]
    ]
    assert len(ended) == len(stopped)
    assert {e["data"]["reason"] for e in ended} == {"budget_exhausted"}
    assert {e["data"]["budget_session_id"] for e in ended} == {parent}
    # budget_warning fired once for the whole tree (in whichever session crossed 80 %).
    warnings = [
        e
        for e in stream.events
        if e["type"] == "hook.completed" and e["data"]["event"] == "budget_warning"
    ]
    assert len(warnings) == 1, warnings


async def test_workers_dispatched_over_budget_are_refused(
    budget_server: ServerProcess, fake_provider: FakeProviderServer, ws: Path
) -> None:
    # The parent's own reply uses the whole budget: nothing it dispatches may start.
    fake_provider.plan(_dispatches(BUDGET), *(_worker_call() for _ in range(WORKER_REPLIES)))
    async with budget_server.client("alice") as http:
        parent = await new_session(http, ws, model=MODEL)
        tid = await message_turn(http, parent, "Fan out.")
        turn = await wait_turn(http, parent, tid)
        shown = (await http.get(f"/sessions/{parent}")).json()
    assert len(fake_provider.requests) == 1
    assert shown["children"] == [] and shown["tokens_used"] == BUDGET + PARENT_OUT
    assert turn["status"] == "failed" and turn["reason"] == "budget_exhausted"
    for result in turn["results"]:
        text = "".join(c.get("text", "") for c in result["content"])
        assert result["is_error"] and "no sub-agent started" in text, text
        assert f"{BUDGET + PARENT_OUT} of {BUDGET} tokens" in text


async def test_a_waiting_reservation_ends_when_its_turn_is_cancelled() -> None:
    ledger = BudgetLedger({TOKENS: 1_000})
    first = ledger.try_reserve({TOKENS: 900})
    assert isinstance(first, Grant)
    cancel = asyncio.Event()
    waiting = asyncio.create_task(ledger.reserve({TOKENS: 900}, cancel))
    await asyncio.sleep(0)
    assert not waiting.done()
    cancel.set()
    assert await asyncio.wait_for(waiting, 60) is None
    # ... and one that waits for room gets it when the call in flight settles.
    second = asyncio.create_task(ledger.reserve({TOKENS: 900}))
    await asyncio.sleep(0)
    assert not second.done()
    ledger.settle(first, {TOKENS: 50})
    granted = await asyncio.wait_for(second, 60)
    assert isinstance(granted, Grant) and not granted.overdraft  # 50 + 900 fits


# -- the ledger's invariants, over random interleavings --------------------------------


class LedgerMachine(RuleBasedStateMachine):
    """Several children reserve, consume and release from one tree's ledger
    in any order; after every step the written invariants hold."""

    grants = Bundle("grants")

    def __init__(self) -> None:
        super().__init__()
        self.limit = 0
        self.ledger = BudgetLedger({})
        self.largest_use = 0
        self.children = 0

    @rule(limit=st.integers(1_000, 50_000), start=st.integers(0, 60_000))
    @precondition(lambda self: self.limit == 0)
    def open_tree(self, limit: int, start: int) -> None:
        self.limit = limit
        self.ledger = BudgetLedger({TOKENS: limit}, {TOKENS: start})
        self.largest_use = max(0, start - limit)  # what was spent before counts as one "use"

    @rule(target=grants, bound=st.integers(0, 30_000))
    @precondition(lambda self: self.limit > 0)
    def reserve(self, bound: int) -> Any:
        before = self.ledger.decide({TOKENS: bound})
        got = self.ledger.try_reserve({TOKENS: bound})
        exhausted = self.ledger.used() >= self.limit
        if exhausted:
            assert got is Decision.EXHAUSTED
            return multiple()
        if isinstance(got, Grant):
            assert before is Decision.GRANT
            return got
        assert got is Decision.WAIT and self.ledger.in_flight()
        return multiple()

    @rule(grant=consumes(grants), share=st.floats(0, 1))
    def consume(self, grant: Grant, share: float) -> None:
        used = int(grant.bound[TOKENS] * share)  # a call uses at most its bound
        self.largest_use = max(self.largest_use, used)
        settled = self.ledger.settle(grant, {TOKENS: used})
        assert settled.after[TOKENS] == settled.before[TOKENS] + used

    @rule(grant=consumes(grants))
    def release(self, grant: Grant) -> None:
        spent = self.ledger.used()
        self.ledger.release(grant)
        assert self.ledger.used() == spent

    @rule()
    @precondition(lambda self: self.limit > 0)
    def child_start(self) -> None:
        over = self.ledger.admit()
        if self.ledger.used() >= self.limit:
            assert over == TOKENS
        else:
            assert over is None
            self.children += 1

    @rule()
    @precondition(lambda self: self.children > 0)
    def child_stop(self) -> None:
        self.ledger.leave()
        self.children -= 1

    @invariant()
    def members_counted(self) -> None:
        assert self.ledger.members == self.children

    @invariant()
    def overdraft_only_alone(self) -> None:  # I1
        flying = self.ledger.in_flight()
        if any(g.overdraft for g in flying):
            assert len(flying) == 1

    @invariant()
    def fitting_grants_fit(self) -> None:  # I2
        flying = self.ledger.in_flight()
        if flying and not any(g.overdraft for g in flying):
            assert self.ledger.used() + self.ledger.reserved() <= self.limit

    @invariant()
    def never_more_than_one_request_over(self) -> None:  # I3
        if self.limit:
            assert self.ledger.used() <= self.limit + self.largest_use


LedgerMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
test_ledger_invariants = LedgerMachine.TestCase
