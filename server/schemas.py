"""Request bodies of the HTTP API. Strict: unknown keys are refused (422 naming them).

Free-form JSON in a body (tool input, policy overrides) is held to
``JsonLimits`` before anything is stored: a value nested thousands of levels
deep, a NaN, or an array of a million items would be accepted once and then
break or stall every later read that renders it (turn and message listings,
event replays). The check walks the value without recursion and names the
first offending place, e.g. ``tool_uses[0].input nests deeper than 32 levels``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from protocol.canonical import ToolUseBlock
from server.input_checks import PlainText

MAX_TOOL_USES = 64


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """Bounds on one free-form JSON value of a request body."""

    # Containers inside containers; the value itself is level 1.
    max_depth: int = 32
    # Characters of one string (a file's content for write_file can be large;
    # the body limit, server.max_body_bytes, bounds the total anyway).
    max_string_chars: int = 8 * 1024 * 1024
    # Characters of one object key.
    max_key_chars: int = 1024
    # Items of one array or members of one object.
    max_items: int = 10_000
    # Every value in the tree, containers included.
    max_nodes: int = 100_000


INPUT_LIMITS = JsonLimits()
# Integers the event log can encode (orjson: signed 64-bit up to unsigned 64-bit).
MIN_INTEGER = -(2**63)
MAX_INTEGER = 2**64 - 1


class InputLimitExceeded(ValueError):
    """A JSON value breaks a ``JsonLimits`` bound; ``field`` says where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field} {message}")
        self.field = field
        self.message = message


def check_json_limits(value: Any, where: str, limits: JsonLimits = INPUT_LIMITS) -> None:
    """Raise InputLimitExceeded naming the first place ``value`` breaks ``limits``.

    Iterative (an explicit stack), so a value nested deeper than Python's
    recursion limit is reported, not crashed on; paths are built only for the
    place reported.
    """
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    nodes = 0
    while stack:
        item, depth, path = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise InputLimitExceeded(where, f"holds more than {limits.max_nodes} values")
        if isinstance(item, dict):
            if depth > limits.max_depth:
                raise InputLimitExceeded(
                    _path(where, path), f"nests deeper than {limits.max_depth} levels"
                )
            if len(item) > limits.max_items:
                raise InputLimitExceeded(
                    _path(where, path),
                    f"has {len(item)} members; at most {limits.max_items} are allowed",
                )
            for key, child in item.items():
                if len(key) > limits.max_key_chars:
                    raise InputLimitExceeded(
                        _path(where, path),
                        f"has a key of {len(key)} characters; at most "
                        f"{limits.max_key_chars} are allowed",
                    )
                stack.append((child, depth + 1, (*path, key)))
        elif isinstance(item, list):
            if depth > limits.max_depth:
                raise InputLimitExceeded(
                    _path(where, path), f"nests deeper than {limits.max_depth} levels"
                )
            if len(item) > limits.max_items:
                raise InputLimitExceeded(
                    _path(where, path),
                    f"has {len(item)} items; at most {limits.max_items} are allowed",
                )
            stack.extend((child, depth + 1, (*path, i)) for i, child in enumerate(item))
        elif isinstance(item, str):
            if len(item) > limits.max_string_chars:
                raise InputLimitExceeded(
                    _path(where, path),
                    f"is a string of {len(item)} characters; at most "
                    f"{limits.max_string_chars} are allowed",
                )
        elif isinstance(item, float) and not math.isfinite(item):
            # JSON has no NaN or Infinity: stored, it could never be rendered again.
            raise InputLimitExceeded(_path(where, path), "is not a finite number")
        elif isinstance(item, int) and not MIN_INTEGER <= item <= MAX_INTEGER:
            # The event encoder (orjson) stops at 64 bits: such a number would
            # fail the turn when its events are published.
            raise InputLimitExceeded(
                _path(where, path), "is an integer outside the 64-bit range JSON events carry"
            )


def _path(where: str, path: tuple[str | int, ...]) -> str:
    out = where
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _limit_error(exc: InputLimitExceeded) -> PydanticCustomError:
    # Picked up by server.app.describe_validation, which names ``field``.
    return PydanticCustomError(
        "input_limit", "{message}", {"field": exc.field, "message": exc.message}
    )


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CreateSession(_Body):
    """``POST /sessions``."""

    workspace: PlainText = Field(min_length=1, max_length=4096, description="An existing directory")
    name: PlainText | None = Field(default=None, max_length=200)
    policy: dict[str, Any] | None = Field(
        default=None, description="Overrides of the server's policy (same keys as `policy:`)"
    )
    model: PlainText | None = Field(default=None, max_length=200)
    agent: PlainText | None = Field(
        default=None,
        max_length=64,
        description="The agent the session runs as (`agents:`; default `build`)",
    )
    profile: PlainText | None = Field(
        default=None,
        max_length=64,
        description="Permission profile (`profiles:`); default: the agent's. A user token may "
        "only pick one at least as strict as the server's policy",
    )
    dry_run: bool = Field(
        default=False,
        description="Every turn is a dry-run: write/execute calls are recorded in the turn's "
        "`plan`, not run",
    )

    @model_validator(mode="before")
    @classmethod
    def _limits(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("policy"), dict):
            try:
                check_json_limits(data["policy"], "policy")
            except InputLimitExceeded as exc:
                raise _limit_error(exc) from None
        return data


class CreateTurn(_Body):
    """``POST /sessions/{id}/turns``: exactly one of ``tool_uses`` or ``message``."""

    tool_uses: list[ToolUseBlock] | None = Field(
        default=None, min_length=1, max_length=MAX_TOOL_USES
    )
    message: str | None = Field(default=None, min_length=1, max_length=200_000)
    dry_run: bool = Field(
        default=False,
        description="Record write/execute calls in the turn's `plan` instead of running them",
    )

    @model_validator(mode="before")
    @classmethod
    def _limits(cls, data: Any) -> Any:
        # Before pydantic looks at it: the raw JSON as parsed.
        uses = data.get("tool_uses") if isinstance(data, dict) else None
        if isinstance(uses, list):
            for i, use in enumerate(uses[:MAX_TOOL_USES]):
                if isinstance(use, dict) and "input" in use:
                    try:
                        check_json_limits(use["input"], f"tool_uses[{i}].input")
                    except InputLimitExceeded as exc:
                        raise _limit_error(exc) from None
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> CreateTurn:
        if (self.tool_uses is None) == (self.message is None):
            raise ValueError('send exactly one of "tool_uses" or "message"')
        return self

    def stored(self) -> dict[str, Any]:
        """The request as the store keeps it (``dry_run`` only when asked)."""
        stored: dict[str, Any]
        if self.tool_uses is not None:
            stored = {"tool_uses": [b.model_dump(mode="json") for b in self.tool_uses]}
        else:
            stored = {"message": self.message}
        if self.dry_run:
            stored["dry_run"] = True
        return stored


class AnswerConfirmation(_Body):
    """``POST /sessions/{id}/turns/{turn_id}/confirmations/{request_id}``."""

    decision: Literal["allow", "deny"]
    scope: Literal["once", "session"] = "once"
    message: str | None = Field(
        default=None, max_length=4000, description="For a deny: told to the model"
    )


class SessionInfo(BaseModel):
    """A session as ``POST /sessions``, ``GET /sessions`` and ``GET /sessions/{id}``
    return it (documentation of the response; more keys may appear)."""

    model_config = ConfigDict(extra="allow")

    id: str
    name: str | None
    workspace: str
    owner: str
    model: str | None
    resolved_model: str
    agent: str | None = Field(
        description="The agent it runs as (null: a session from before agents)"
    )
    profile: str = Field(description="Its permission profile")
    parent_session_id: str | None = Field(
        description="For a sub-agent's worker session: the session that dispatched it"
    )
    children: list[str] = Field(description="Ids of the worker sessions it dispatched")
    dry_run: bool = Field(default=False, description="Every turn is a dry-run")
    tokens_used: int = Field(
        default=0, description="Input + output tokens its model calls used (limits.max_tokens)"
    )
    policy: dict[str, Any]
    policy_overrides: dict[str, Any]
    created_at: str
    status: Literal["idle", "running"]
    current_turn_id: str | None


class FieldProblem(BaseModel):
    """One wrong part of a request, named (``workspace``, ``query parameter after``)."""

    field: str
    message: str


class ErrorDetail(BaseModel):
    """``error`` of an error response: a machine code and a sentence; some
    answers add keys a client can act on (``fields``, ``resolution``, ...)."""

    model_config = ConfigDict(extra="allow")

    code: str = Field(description="Machine-readable, e.g. `not_found`, `invalid_request`")
    message: str = Field(description="What was wrong, naming the offending part")
    fields: list[FieldProblem] | None = Field(
        default=None, description="422: each wrong parameter or body field"
    )


class ErrorBody(BaseModel):
    """The body of every error response of the HTTP API (server/errors.py)."""

    error: ErrorDetail
