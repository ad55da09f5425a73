"""Budgets that cover the whole tree of a turn (specs/agents.md "Budgets").

A session and the worker sessions its ``dispatch_subagent`` calls start
(``parent_session_id``) share one budget: the parent's ``limits.max_tokens``
(and, once prices exist, ``limits.max_cost_usd`` as a second meter of the
same ledger). ``TreeBudgets`` keeps one ``BudgetLedger``
(dispatcher/pipeline/budget.py, where the reservation rule and its
invariants are written) per tree, keyed by the root session, for as long as
a turn or a worker of that tree runs in this process; a new ledger starts
from the root's stored ``tokens_used``, which every settled call also
updates, so the two never disagree.

- Each model call of a turn reserves a bound before its request is sent
  (``TurnBudget.reserve``): the request's size in UTF-8 bytes (no
  provider counts more than one token per byte of what it is sent; images
  count their base64, tool inputs and definitions their JSON), plus an
  allowance per content block (role and block markers) and one per request
  (what a provider adds of its own), plus the call's output cap
  (``model.max_tokens``, which every adapter sends). It settles
  the reported usage when the reply ends, or releases the reservation when
  none was reported (a failed or cancelled call).
- A worker is admitted only while the tree is under its limits
  (``admit_worker``); refused, the ``dispatch_subagent`` call ends
  ``permission_denied`` and nothing is started.
- Settled usage is added to the calling session's ``tokens_used`` and, for
  a worker, to its root's, so ``GET /sessions/{id}`` of the parent shows the
  tree's total as it grows.

Not covered: two server processes running turns of one tree at the same
time (a worker driven directly on another node of a cluster while its
parent's turn runs here) each hold their own ledger; the stored totals stay
exact, the bound holds per process.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from pydantic_core import to_json

from adapters.base import ModelRequest, Usage
from dispatcher.errors import ToolPermissionDenied
from dispatcher.pipeline.budget import TOKENS, BudgetLedger, Grant, LimitsConfig, Settled
from protocol.canonical import ImageBlock, TextBlock, ToolResultBlock, ToolUseBlock
from server.errors import ApiError
from server.store import SessionRecord, Store

# Tokens a provider may count beyond the request's own bytes (Anthropic's
# tool-use preamble is ~350; the rest is margin) ...
REQUEST_ALLOWANCE = 1024
# ... and beyond each content block's (role and block markers are a few).
BLOCK_ALLOWANCE = 16


def request_bound(request: ModelRequest) -> dict[str, int]:
    """The most one model call of ``request`` can use, per meter. A walk over
    the blocks, not the request as JSON: for a 0.9 MB conversation of 160
    messages ~0.5 ms instead of ~5 ms (1.7 ms when no text is ASCII), on the
    event loop before every model call of a session with a limit."""
    sent = _utf8(request.system or "") + len(to_json(request.tools))
    sent += sum(_blocks_bytes(m.content) for m in request.messages)
    return {TOKENS: sent + REQUEST_ALLOWANCE + request.settings.max_tokens}


def _blocks_bytes(blocks: Sequence[object]) -> int:
    return sum(_block_bytes(b) + BLOCK_ALLOWANCE for b in blocks)


def _block_bytes(block: object) -> int:
    if isinstance(block, TextBlock):
        return _utf8(block.text)
    if isinstance(block, ToolResultBlock):
        return len(block.tool_use_id) + _blocks_bytes(block.content)
    if isinstance(block, ToolUseBlock):
        return len(block.id) + len(block.name) + len(to_json(block.input))
    if isinstance(block, ImageBlock):
        return len(block.data)
    return len(to_json(block))  # a block kind added later: its JSON, to be safe


def _utf8(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


@dataclass
class TurnBudget:
    """One session's handle on its tree's ledger for the length of a turn."""

    session_id: str
    root_id: str
    ledger: BudgetLedger
    limits: LimitsConfig
    store: Store

    @property
    def shared(self) -> bool:
        """Whether this session spends a parent's budget (it is a worker)."""
        return self.root_id != self.session_id

    @property
    def used(self) -> int:
        """The tree's tokens so far."""
        return self.ledger.used(TOKENS)

    def exhausted(self) -> bool:
        return self.ledger.exhausted() is not None

    async def reserve(self, request: ModelRequest, cancel: asyncio.Event) -> Grant | None:
        """A grant for one model call of ``request``; None when the tree's
        budget is used up or ``cancel`` was set while it waited for room."""
        if not self.ledger.limits:
            # No limit: nothing to size, the grant only tracks the call.
            return await self.ledger.reserve({}, cancel)
        return await self.ledger.reserve(request_bound(request), cancel)

    def settle(self, grant: Grant, usage: Usage) -> Settled:
        """Count a finished call's usage in the tree and in the store."""
        spent = usage.input_tokens + usage.output_tokens
        settled = self.ledger.settle(grant, {TOKENS: spent})
        self.store.add_session_tokens(self.session_id, spent)
        if self.shared:
            with contextlib.suppress(ApiError):  # a storage fault: the ledger still counts it
                self.store.add_session_tokens(self.root_id, spent)
        return settled

    def release(self, grant: Grant) -> None:
        """End a reservation without usage (no-op once it was settled)."""
        self.ledger.release(grant)

    def exhausted_message(self, base: str) -> str:
        """Why the next model call is refused; ``base`` is the session's own
        wording, kept for a session that is its tree's root."""
        if not self.shared:
            return base
        return (
            f"the token budget of session {self.root_id}, shared with its sub-agents, is used "
            f"up: {self.used} of {self.limits.max_tokens} tokens (limits.max_tokens); this "
            "sub-agent stopped before its next model call"
        )


class TreeBudgets:
    """The ledgers of the trees with a turn or worker running; see the module
    docstring. One per server, handed to the agent loop and the sub-agent
    service."""

    def __init__(self, limits: LimitsConfig, store: Callable[[], Store]) -> None:
        self.limits = limits
        self._store = store
        self._ledgers: dict[str, BudgetLedger] = {}
        self._holders: dict[str, int] = {}

    def root_of(self, session: SessionRecord) -> str:
        """The session whose budget ``session`` spends: its parent's, while
        the parent exists (a worker cannot dispatch, so one step is all)."""
        parent = session.parent_session_id
        if parent is not None and self._store().get_session(parent) is not None:
            return parent
        return session.id

    def ledger(self, root_id: str) -> BudgetLedger | None:
        """The ledger of a tree now held in this process (None: none is)."""
        return self._ledgers.get(root_id)

    @contextlib.contextmanager
    def turn(self, session: SessionRecord) -> Iterator[TurnBudget]:
        """The budget a turn of ``session`` spends, held while it runs."""
        root = self.root_of(session)
        with self._held(root) as ledger:
            yield TurnBudget(session.id, root, ledger, self.limits, self._store())

    def admit_worker(self, parent: SessionRecord) -> Callable[[], None]:
        """Child start: hold the parent's tree for a new worker, or refuse
        (``ToolPermissionDenied``, nothing started) when it is over budget.
        Returns the child stop, to call once the worker's turn has ended."""
        root = self.root_of(parent)
        ledger = self._hold(root)
        over = ledger.admit()
        if over is not None:
            self._drop(root)
            raise ToolPermissionDenied(
                f"no sub-agent started: the token budget of session {root} and its "
                f"sub-agents is used up ({ledger.used(over)} of {ledger.limits[over]} "
                f"{over}, limits.max_tokens)"
            )

        def leave() -> None:
            ledger.leave()
            self._drop(root)

        return leave

    @contextlib.contextmanager
    def _held(self, root: str) -> Iterator[BudgetLedger]:
        ledger = self._hold(root)
        try:
            yield ledger
        finally:
            self._drop(root)

    def _hold(self, root: str) -> BudgetLedger:
        ledger = self._ledgers.get(root)
        if ledger is None:
            record = self._store().get_session(root)
            spent = {TOKENS: record.tokens_used} if record is not None else {}
            ledger = self._ledgers[root] = BudgetLedger(self.limits.meter_limits(), spent)
        self._holders[root] = self._holders.get(root, 0) + 1
        return ledger

    def _drop(self, root: str) -> None:
        left = self._holders.get(root, 0) - 1
        if left > 0:
            self._holders[root] = left
            return
        self._holders.pop(root, None)
        self._ledgers.pop(root, None)
