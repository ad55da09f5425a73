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

A script path may be chosen by a client (``model: "scripted:<path>"``), so
reading one is careful: the file is reached from ``/`` one component at a
time without following any symbolic link (a path the server checked cannot
be redirected by a link swapped in later), opened non-blocking (a FIFO never
blocks), read only if it is a regular file of at most ``MAX_SCRIPT_BYTES``,
and no error ever quotes the file's content: YAML errors give a line,
a column and what was expected; structure errors give a location.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from adapters.base import StopReason
from adapters.errors import AdapterMisconfigured
from protocol.validation_errors import describe_errors

# Largest script accepted; past it the file is refused unread.
MAX_SCRIPT_BYTES = 1024 * 1024
# Field names a location may show; any other key in a location came from the
# file (an unknown key) and is not echoed.
_KNOWN_KEYS = frozenset(
    {"replies", "role", "content", "stop_reason", "type", "text", "name", "id", "input"}
    | {"raw_input", "tool_use"}
)
# Quoted text in a YAML error may be the file's (a tag, an alias); token names
# such as '<scalar>' and single characters (',' or ']' expected) are kept.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _elide(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if len(inner) <= 1 or inner.startswith("<") else "'...'"

    return _QUOTED.sub(one, text)


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
            found = f"{len(extra)} other key(s)" if extra else "no 'replies' list"
            raise AdapterMisconfigured(
                f"{source}: a script is a list of replies or a mapping with only a "
                f"'replies' list (found {found})"
            )
        data = items
    if not isinstance(data, list):
        raise AdapterMisconfigured(f"{source}: a script must be a list of replies")
    normalised = [
        {"content": [{"type": "text", "text": item}]} if isinstance(item, str) else item
        for item in data
    ]
    try:
        return _ScriptFile.model_validate({"replies": normalised}).replies
    except ValidationError as exc:
        problems = "; ".join(
            describe_errors(
                exc,
                where=lambda e: _location(_where(e["type"], e["loc"])),
                message=lambda e: _message(e["type"], str(e["msg"])),
                limit=5,
            )
        )
        raise AdapterMisconfigured(f"{source}: invalid script: {problems}") from None


def load_script(path: str | Path) -> list[ScriptReply]:
    """Read and validate a script file (YAML, of which JSON is a subset).

    Blocking: call it in a worker thread from async code. ``path`` is made
    absolute (relative to the working directory) and must not pass through a
    symbolic link: give its real path. Raises AdapterMisconfigured naming the
    path and what is wrong, never quoting the file."""
    file = os.path.abspath(os.fspath(path))
    text = read_script_text(file)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AdapterMisconfigured(
            f"script {file} is not valid YAML/JSON: {_yaml_problem(exc)}"
        ) from None
    return parse_script(data, source=file)


def read_script_text(file: str) -> str:
    """The text of the script at absolute path ``file`` (see the module docstring)."""
    if "\x00" in file:
        raise AdapterMisconfigured("a script path may not contain a NUL character")
    fd = _open_without_links(file)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AdapterMisconfigured(
                f"script {file} is not a regular file (it is a {_kind(info.st_mode)})"
            )
        if info.st_size > MAX_SCRIPT_BYTES:
            raise AdapterMisconfigured(
                f"script {file} is larger than the limit of {MAX_SCRIPT_BYTES} bytes "
                f"({info.st_size} bytes)"
            )
        chunks: list[bytes] = []
        size = 0
        # Bounded even if the file grows while it is read.
        while size <= MAX_SCRIPT_BYTES:
            chunk = os.read(fd, MAX_SCRIPT_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_SCRIPT_BYTES:
            raise AdapterMisconfigured(
                f"script {file} is larger than the limit of {MAX_SCRIPT_BYTES} bytes"
            )
    except OSError as exc:
        raise AdapterMisconfigured(f"cannot read script {file}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdapterMisconfigured(
            f"script {file} is not UTF-8 text (bad byte at offset {exc.start})"
        ) from None


def _open_without_links(file: str) -> int:
    """A read descriptor of ``file``, reached component by component from ``/``
    with O_NOFOLLOW, opened non-blocking (a FIFO answers at once)."""
    parts = [p for p in file.split(os.sep) if p]
    if not parts:
        raise AdapterMisconfigured(f"script {file} is not a regular file (it is a directory)")
    dir_flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    file_flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        current = os.open(os.sep, dir_flags)
    except OSError as exc:
        raise AdapterMisconfigured(f"cannot read script {file}: {exc.strerror}") from None
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                fd = os.open(part, file_flags if last else dir_flags, dir_fd=current)
            except OSError as exc:
                shown = os.sep + os.sep.join(parts[: index + 1])
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(shown):
                    raise AdapterMisconfigured(
                        f"cannot read script {file}: {shown} is a symbolic link "
                        "(script paths are opened without following links; give the real path)"
                    ) from None
                raise AdapterMisconfigured(
                    f"cannot read script {file}: {exc.strerror or exc}"
                ) from None
            os.close(current)
            current = fd
        return current
    except BaseException:
        os.close(current)
        raise


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the YAML parser expected and where, without any text of the file
    (the parser's own message embeds a snippet of the offending line)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = _elide(exc.problem or "syntax error")
        context = f" ({_elide(exc.context)})" if exc.context else ""
        if mark is not None:
            return f"line {mark.line + 1}, column {mark.column + 1}: {problem}{context}"
        return f"{problem}{context}"
    return type(exc).__name__


def _where(kind: str, loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    # An unknown key's name is the file's: its location stops at its parent.
    return loc[:-1] if kind == "extra_forbidden" else loc


def _message(kind: str, message: str) -> str:
    """A validation message that cannot carry file content."""
    if kind == "union_tag_invalid":
        return "type must be 'text' or 'tool_use'"
    if kind == "extra_forbidden":
        return (
            "a key that is not allowed here (a reply has role, content, stop_reason; "
            "a block has type, text, name, id, input, raw_input)"
        )
    return message


def _location(loc: tuple[int | str, ...]) -> str:
    parts = [p if isinstance(p, int) or p in _KNOWN_KEYS else "<unknown key>" for p in loc]
    shown = [str(p) for p in parts]
    if shown and shown[0] == "replies":
        shown = shown[1:]
    if shown:
        shown[0] = f"reply {int(shown[0]) + 1}" if shown[0].isdigit() else shown[0]
    return ".".join(shown) or "script"
