"""The script format of the offline ``scripted`` model.

A script is a YAML or JSON document: a list of replies (or a mapping with a
``replies`` list). The model plays reply *n* as its *n*-th assistant message
in a conversation (counting the assistant messages already in it). Each reply
is either a string (a text reply) or a mapping::

    - "Hello! I will read the notes."          # a text-only reply
    - content:
        - {type: text, text: "Reading it."}
        - {type: tool_use, name: read_file, input: {path: notes.md}}
    - content:
        - {type: tool_use, name: write_file, raw_input: '{"path": "a.txt"'}
      stop_reason: tool_use                    # optional; derived when absent

A ``tool_use`` block may leave out ``id`` (the model numbers it
``toolu_scripted_<n>``) and gives either ``input`` (an object) or
``raw_input`` (argument text played as the model's own, possibly malformed,
JSON). Unknown keys are refused with their location.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adapters.base import StopReason
from adapters.errors import AdapterConfigError


class _ScriptModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptText(_ScriptModel):
    """Text the model says."""

    type: Literal["text"] = "text"
    text: str


class ScriptToolUse(_ScriptModel):
    """A tool call the model makes; ``raw_input`` plays argument text verbatim."""

    type: Literal["tool_use"] = "tool_use"
    name: str = Field(min_length=1, max_length=256)
    id: str | None = Field(default=None, min_length=1, max_length=256)
    input: dict[str, Any] | None = None
    raw_input: str | None = None

    @model_validator(mode="after")
    def _one_input(self) -> ScriptToolUse:
        if self.input is not None and self.raw_input is not None:
            raise ValueError("give either input or raw_input, not both")
        return self


ScriptBlock = Annotated[ScriptText | ScriptToolUse, Field(discriminator="type")]


class ScriptReply(_ScriptModel):
    """One assistant message of a script."""

    role: Literal["assistant"] = "assistant"
    content: list[ScriptBlock]
    stop_reason: StopReason | None = None


class _ScriptFile(_ScriptModel):
    replies: list[ScriptReply]


def parse_script(data: Any, *, source: str = "<script>") -> list[ScriptReply]:
    """Validate a loaded script document; errors name ``source`` and the location."""
    if isinstance(data, dict):
        items = data.get("replies")
        extra = sorted(set(data) - {"replies"})
        if extra or not isinstance(items, list):
            raise AdapterConfigError(
                f"{source}: a script is a list of replies or a mapping with only a "
                f"'replies' list (found keys {sorted(data)})"
            )
        data = items
    if not isinstance(data, list):
        raise AdapterConfigError(f"{source}: a script must be a list of replies")
    normalised = [
        {"content": [{"type": "text", "text": item}]} if isinstance(item, str) else item
        for item in data
    ]
    try:
        return _ScriptFile.model_validate({"replies": normalised}).replies
    except ValidationError as exc:
        problems = "; ".join(f"{_location(err['loc'])}: {err['msg']}" for err in exc.errors()[:5])
        raise AdapterConfigError(f"{source}: invalid script: {problems}") from None


def load_script(path: str | Path) -> list[ScriptReply]:
    """Read and validate a script file (YAML, of which JSON is a subset)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise AdapterConfigError(f"cannot read script {file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise AdapterConfigError(f"script {file} is not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AdapterConfigError(f"script {file} is not valid YAML/JSON: {exc}") from None
    return parse_script(data, source=str(file))


def _location(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "replies":
        parts = parts[1:]
    if parts:
        parts[0] = f"reply {int(parts[0]) + 1}" if parts[0].isdigit() else parts[0]
    return ".".join(parts) or "script"
