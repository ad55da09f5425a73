"""The confirmation stage: the policy's mode for a call, and asking a person.

``decide`` turns the session's policy into the call's ``ConfirmMode``, in the
order every part of the server relies on: the policy's own answer, the
sandbox floor (outside a sandbox an execute-class call always asks, yolo
aside), effects the guardrails could not check (a person decides, every
time), then the profile (a non-interactive one refuses what would ask).
``Confirmation.confirm`` asks the broker unless a remembered grant covers
every part of the call's scope, and remembers the answer for the session
when the person (or ``prompt_once``) says so.
"""

from __future__ import annotations

import dataclasses
import json
import logging

from dispatcher.call import CallState, Consent
from dispatcher.confirmations import ConfirmationBroker, ConfirmationRequest, RememberedAnswer
from dispatcher.errors import (
    ConfirmationTimeout,
    ToolCancelled,
    ToolError,
    ToolPermissionDenied,
    ToolUserDenied,
)
from dispatcher.policy import ConfirmMode, PolicyQuery, sandbox_floor
from dispatcher.registry import RegisteredTool
from dispatcher.session import DispatchSession
from dispatcher.stages import ValidatedCall, effects_of
from dispatcher.tool import CallRating, ConfirmationPreview, GrantScope

log = logging.getLogger("toolrelay.dispatcher")

SUMMARY_CHARS = 200
PREVIEW_CHARS = 8_000
# Shown first in the confirmation of a call whose effects are unknown.
UNKNOWN_EFFECTS_TEXT = "effects unknown: this tool may write any file"


def policy_query(
    session: DispatchSession, entry: RegisteredTool, rating: CallRating | None
) -> PolicyQuery:
    """The policy's question for one call."""
    return PolicyQuery(
        entry.name, entry.definition.side_effects, rating, session.workspace.workspace_root
    )


def policy_mode(
    session: DispatchSession, entry: RegisteredTool, rating: CallRating | None
) -> ConfirmMode:
    """The policy's mode for a call of ``entry`` rated ``rating``, the sandbox
    floor applied: what ``decide`` keeps per session (session.PolicyModes)."""
    policy = session.policy
    mode = policy.mode_for(policy_query(session, entry, rating))
    # The one place where "auto-approval is a privilege of the sandbox" holds.
    return sandbox_floor(
        mode, entry.definition.side_effects, sandboxed=session.sandbox is not None, policy=policy
    )


def decide(v: ValidatedCall) -> ConfirmMode:
    """The call's confirmation mode (module docstring); raises
    ToolPermissionDenied when the call may not run at all."""
    session, entry, derived = v.session, v.entry, v.call.derived
    key = (entry.name, entry.definition.side_effects, derived.rating)
    mode = session.policy_modes.get(session, key)
    if mode is None:
        mode = session.policy_modes.modes[key] = policy_mode(session, entry, derived.rating)
    if derived.effects_ask is not None and mode is not ConfirmMode.DENY:
        mode = ConfirmMode.PROMPT
    if mode is ConfirmMode.DENY:
        raise ToolPermissionDenied(f"the confirmation policy denies {entry.name!r} in this session")
    profile = session.profile
    if profile is not None and profile.settle(mode) is ConfirmMode.DENY:
        # Applied last: a non-interactive profile has nobody to ask.
        raise ToolPermissionDenied(
            f"{entry.name!r} would need a confirmation, and the profile "
            f"{profile.name!r} is non-interactive: refused"
        )
    return mode


class Confirmation:
    """Asks a person through the broker when a call's mode says so."""

    def __init__(self, broker: ConfirmationBroker) -> None:
        self.broker = broker

    async def confirm(self, v: ValidatedCall, mode: ConfirmMode) -> None:
        """For a call whose mode asks (not AUTO): return when it may run;
        raise ToolUserDenied, ConfirmationTimeout or ToolCancelled when it
        may not."""
        session, entry, call = v.session, v.entry, v.call
        scope = grant_scope(v)
        answers = [session.remembered.get((entry.name, key)) for key, _ in scope.parts]
        if any(a is not None and a.decision == "deny" for a in answers):
            raise ToolUserDenied(f"the user denied {entry.name!r} for the rest of this session")
        unknown = call.derived.effects_ask is not None
        # Covered only when every part has a grant at its rating or higher;
        # never a call whose effects the guardrails could not check.
        if not unknown and all(
            a is not None and a.allows(part_rating)
            for a, (_, part_rating) in zip(answers, scope.parts, strict=True)
        ):
            return
        if unknown:
            scope = GrantScope(
                scope.parts,
                f"{scope.text} (this call's effects are unknown: while guardrails are "
                "set, each such call is asked again)",
            )
        request = await self._request(v, scope)
        call.consent = consent = Consent(request)
        call.state = CallState.AWAITING_CONFIRMATION
        resolution = await self.broker.ask(request, answer_within=session.confirmation_timeout)
        # Published with the call's next move (queued, failed or cancelled).
        consent.resolution = resolution
        if resolution.decision == "allow":
            if resolution.scope == "session" or mode is ConfirmMode.PROMPT_ONCE:
                _remember_allow(session, entry.name, scope)
            return
        if resolution.decision == "deny":
            if mode is ConfirmMode.PROMPT_ONCE:
                for key, _ in scope.parts:
                    session.remembered[(entry.name, key)] = RememberedAnswer("deny")
            reason = f" Reason given: {resolution.message}" if resolution.message else ""
            raise ToolUserDenied(f"User denied this operation.{reason}")
        if resolution.decision == "timeout":
            raise ConfirmationTimeout(
                f"no one answered the confirmation request within "
                f"{session.confirmation_timeout:g} s"
            )
        raise ToolCancelled("the call was cancelled while waiting for confirmation")

    async def _request(self, v: ValidatedCall, scope: GrantScope) -> ConfirmationRequest:
        session, entry, call = v.session, v.entry, v.call
        preview = await preview_of(v)
        return ConfirmationRequest(
            request_id=self.broker.new_request_id(),
            session_id=session.session_id,
            turn_id=call.turn_id,
            tool_use_id=call.tool_use.id,
            tool_name=entry.name,
            side_effects=entry.definition.side_effects,
            rating=call.derived.rating,
            input_summary=summary(entry.name, call.input),
            projected_modifications=preview.projected_modifications,
            preview_kind=preview.kind,
            # Cut only past what must be seen whole (a shell's command and env).
            preview_text=preview.text[: max(PREVIEW_CHARS, preview.keep)],
            expires_at=self.broker.expiry(session.confirmation_timeout),
            scope_text=scope.text,
        )


def _remember_allow(session: DispatchSession, tool_name: str, scope: GrantScope) -> None:
    for key, part_rating in scope.parts:
        known = session.remembered.get((tool_name, key))
        if known is not None and known.allows(part_rating):
            continue  # never narrow a wider grant
        session.remembered[(tool_name, key)] = RememberedAnswer("allow", part_rating)


def grant_scope(v: ValidatedCall) -> GrantScope:
    """What "allow for session" would grant; a scope that cannot be computed
    grants only this exact call's input."""
    entry = v.entry
    try:
        return entry.stateless.scope(v.input, v.session.workspace, prepared=v.call.derived.prepared)
    except Exception:
        log.exception("scope of %s failed; granting nothing wider than the call", entry.name)
        exact = json.dumps(v.input, sort_keys=True, default=str)
        return GrantScope(((f"= {exact}", None),), f"allow this exact {entry.name} call")


async def preview_of(v: ValidatedCall) -> ConfirmationPreview:
    """The tool's preview, listing the files the call's declared effects
    modify (and saying so first when they are unknown)."""
    entry, session, tool_input = v.entry, v.session, v.input
    effects = await effects_of(v)
    try:
        preview = await entry.stateless.preview(
            tool_input, session.workspace, sandbox=session.sandbox, prepared=v.call.derived.prepared
        )
    except ToolError as err:
        preview = ConfirmationPreview(text=f"(no preview: {err.message})")
    except Exception:
        log.exception("preview of %s failed", entry.name)
        preview = ConfirmationPreview(text="(no preview: it failed; see the server log)")
    if preview is None:
        text = json.dumps(tool_input, indent=2, ensure_ascii=False, default=str)
        preview = ConfirmationPreview(text=text)
    if not effects.unknown:
        return dataclasses.replace(preview, projected_modifications=effects.modified)
    head = f"{UNKNOWN_EFFECTS_TEXT}\n"
    return ConfirmationPreview(
        text=head + preview.text,
        kind=preview.kind,
        projected_modifications=effects.modified,
        keep=len(head) + preview.keep,
    )


def summary(name: str, tool_input: dict[str, object]) -> str:
    """``name({...})``, the arguments cut to SUMMARY_CHARS."""
    args = json.dumps(tool_input, ensure_ascii=False, default=str, separators=(",", ":"))
    if len(args) > SUMMARY_CHARS:
        args = args[: SUMMARY_CHARS - 1] + "…"
    return f"{name}({args})"
