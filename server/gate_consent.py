"""A quality gate asks before it runs, as a shell command of its session would.

A gate runs workspace code, and the model may have written that code (it
writes ``gate.py``; the admin's gate is ``python gate.py``). So in a session
whose policy asks before a command, a gate asks too, through the same parts
a shell call's confirmation uses, not a second kind of question:

- the shell's own rules rate the gate's command (``ShellTool.rate``: a
  blocklisted command is refused, ``ls`` is safe, ``python gate.py``
  dangerous), and the session's policy maps the rating to a mode exactly as
  for a ``shell`` call: ``mode_for``, the sandbox floor (outside a sandbox
  it always asks), then the profile (a non-interactive one refuses);
- "allow for session" grants are the shell's (``ShellTool.scope``, kept in
  the session's remembered answers under the shell's name): a grant for
  ``npm test`` made on a shell call lets a gate ``npm test`` run unasked,
  and an answer given on a gate holds for later shell calls alike;
- the question is a ``ConfirmationRequest`` in the dispatcher's broker,
  announced as ``tool.confirmation_requested`` (the shell's command preview,
  the grant's ``scope_text``, ``input_summary`` naming the gate) and
  answered by any client over the ordinary confirmation route, first answer
  winning; ``tool.confirmation_resolved`` reports the outcome. Its
  ``tool_use_id`` is the gate's own (``gate_...``): no tool call carries it.

Denied, unanswered or cancelled, the gate is not started and its
``quality_gate.completed`` says so (dispatcher/pipeline/gates.py). A gate
marked ``auto: true`` is the admin's word that it may run: it is not asked
about. Every gate, asked or not, runs in the session's sandbox.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from dispatcher import DispatchSession
from dispatcher.call import request_event, resolution_event
from dispatcher.confirmations import (
    ConfirmationBroker,
    ConfirmationRequest,
    RememberedAnswer,
    Resolution,
)
from dispatcher.errors import ToolError
from dispatcher.pipeline.guardrails import QualityGate
from dispatcher.policy import ConfirmMode, PolicyQuery, sandbox_floor
from dispatcher.publisher import EventPublisher
from dispatcher.tool import CallRating, GrantScope
from dispatcher.tools.shell.rules import Analysis
from dispatcher.tools.shell.tool import ShellTool
from protocol.canonical import SideEffects
from protocol.payloads import Payload

# The shell's stateless stages (prepare, rate, scope, preview) and its name,
# under which the policy is asked and grants are kept.
_SHELL = ShellTool()
SHELL_NAME = _SHELL.definition.name


@dataclass(frozen=True, slots=True)
class SessionGateConsent:
    """The ``GateConsent`` of one turn of one session (see the module docstring)."""

    session: DispatchSession
    broker: ConfirmationBroker
    publisher: EventPublisher
    turn_id: str

    async def __call__(self, gate: QualityGate) -> str | None:
        session = self.session
        tool_input = {"command": gate.command}
        try:
            analysis: Analysis = _SHELL.prepare(tool_input, session.workspace)
            rating = _SHELL.rate(tool_input, session.workspace, prepared=analysis)
        except ToolError as err:
            return f"refused: {err.message}"
        mode = self._mode(rating)
        if mode is ConfirmMode.DENY:
            return (
                f"this session's policy{' or profile' if session.profile else ''} "
                f"refuses a command rated {rating.value} without asking"
            )
        if mode is ConfirmMode.AUTO:
            return None
        scope = _SHELL.scope(tool_input, session.workspace, prepared=analysis)
        known = [session.remembered.get((SHELL_NAME, key)) for key, _ in scope.parts]
        if any(answer is not None and answer.decision == "deny" for answer in known):
            return f"denied for the rest of this session ({SHELL_NAME} commands like it)"
        if all(
            answer is not None and answer.allows(part_rating)
            for answer, (_, part_rating) in zip(known, scope.parts, strict=True)
        ):
            return None
        request = await self._request(gate, rating, analysis, scope)
        self._emit(request_event(request))
        resolution = await self.broker.ask(request, answer_within=session.confirmation_timeout)
        self._emit(resolution_event(resolution, request.tool_use_id))
        return self._settle(resolution, scope, mode)

    def _mode(self, rating: CallRating) -> ConfirmMode:
        """The mode a ``shell`` call with this rating would have here."""
        session = self.session
        query = PolicyQuery(
            SHELL_NAME, SideEffects.EXECUTE, rating, session.workspace.workspace_root
        )
        mode = session.policy.mode_for(query)
        mode = sandbox_floor(
            mode,
            SideEffects.EXECUTE,
            sandboxed=session.sandbox is not None,
            policy=session.policy,
        )
        return session.profile.settle(mode) if session.profile is not None else mode

    async def _request(
        self, gate: QualityGate, rating: CallRating, analysis: Analysis, scope: GrantScope
    ) -> ConfirmationRequest:
        session = self.session
        preview = await _SHELL.preview(
            {"command": gate.command},
            session.workspace,
            sandbox=session.sandbox,
            prepared=analysis,
        )
        return ConfirmationRequest(
            request_id=self.broker.new_request_id(),
            session_id=session.session_id,
            turn_id=self.turn_id,
            tool_use_id="gate_" + secrets.token_hex(8),
            tool_name=SHELL_NAME,
            side_effects=SideEffects.EXECUTE,
            rating=rating,
            input_summary=f"quality gate {gate.name!r}: {gate.command}",
            projected_modifications=(),
            preview_kind=preview.kind,
            preview_text=(
                f"{preview.text}\n(quality gate {gate.name!r}, run as the turn ends: "
                "it runs workspace code, which the model may have written)"
            ),
            expires_at=self.broker.expiry(session.confirmation_timeout),
            scope_text=scope.text,
        )

    def _settle(self, resolution: Resolution, scope: GrantScope, mode: ConfirmMode) -> str | None:
        """Remember the answer as a shell call's would be; None when allowed."""
        remembered = self.session.remembered
        decision = resolution.decision
        if decision == "allow":
            if resolution.scope == "session" or mode is ConfirmMode.PROMPT_ONCE:
                for key, part_rating in scope.parts:
                    known = remembered.get((SHELL_NAME, key))
                    if known is None or not known.allows(part_rating):
                        remembered[(SHELL_NAME, key)] = RememberedAnswer("allow", part_rating)
            return None
        if decision == "deny":
            if mode is ConfirmMode.PROMPT_ONCE:
                for key, _ in scope.parts:
                    remembered[(SHELL_NAME, key)] = RememberedAnswer("deny")
            said = f": {resolution.message}" if resolution.message else ""
            return f"denied by {resolution.resolved_by}{said}"
        if decision == "timeout":
            timeout = self.session.confirmation_timeout
            return f"no one answered the confirmation request within {timeout:g} s"
        return "the confirmation request was cancelled"

    def _emit(self, payload: Payload) -> None:
        self.publisher.emit(payload, session_id=self.session.session_id, turn_id=self.turn_id)
