"""Logging set-up for ``toolrelay serve``, with token redaction.

uvicorn's access log prints each request line with its query string, and a
browser's WebSocket carries its token as ``?token=``; its error log prints
WebSocket paths too. A filter on every handler rewrites each record before it
is formatted: ``token=<anything>`` becomes ``token=***`` and any configured
token value that still appears (in a path, a header echoed by a tool...) is
replaced as well.

Query strings are judged as the server reads them: each key is decoded
(``%74oken``, ``+``) before it is compared, case-insensitively, with
``token``, so every spelling the server accepts as a token (and more) is
redacted; so is any value that decodes to a known token.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote_plus

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.logging import AccessFormatter

from protocol.catalog import EventType

REDACTED = "***"
# The LogRecord attribute holding a line's structured fields (``extra={FIELDS: {...}}``).
FIELDS = "toolrelay"
LOG_FORMATS = ("text", "json")
# Request lines: written by RequestLog (uvicorn's own access log is switched off,
# it logs when a response starts and knows no duration).
ACCESS_LOGGER = "toolrelay.access"
_QUERY_TOKEN = re.compile(r"((?:^|[?&;\s])token=)[^&\s\"']*", re.IGNORECASE)
# A query string: from "?" to the end of the URL (whitespace, a quote or a fragment).
_QUERY = re.compile(r"\?([^\s\"'#]*)")
_SEPARATORS = re.compile(r"([&;])")
_BEARER = re.compile(r"(bearer\s+)[^\s\"']+", re.IGNORECASE)


class TokenRedactor:
    """Removes tokens from text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a token that contains another is removed whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        if "?" in text:
            text = _QUERY.sub(self._redact_query, text)
        text = _QUERY_TOKEN.sub(lambda m: m.group(1) + REDACTED, text)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _redact_query(self, match: re.Match[str]) -> str:
        """One query string with the value of every decoded ``token`` key (any
        case) and of every pair holding a known token replaced; the rest kept
        as it was written."""
        pieces = _SEPARATORS.split(match.group(1))
        for index, piece in enumerate(pieces):
            if index % 2:  # a separator
                continue
            key, sep, _ = piece.partition("=")
            # As the server's parse_qs decodes them: %XX escapes, and "+" as a space.
            decoded_key = unquote_plus(key, errors="replace").strip()
            if decoded_key.lower() == "token" or self._holds_secret(unquote_plus(piece)):
                pieces[index] = key + sep + REDACTED if sep else REDACTED
        return "?" + "".join(pieces)

    def _holds_secret(self, text: str) -> bool:
        return any(secret in text for secret in self._secrets)


class RedactingFilter(logging.Filter):
    """A handler filter that runs every record's message and arguments through
    a TokenRedactor. It never drops a record."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.redact = TokenRedactor(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in args)
        elif isinstance(args, dict):
            record.args = {k: self.redact(v) if isinstance(v, str) else v for k, v in args.items()}
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            # Structured fields (tool-call lines) reach the JSON output as they are.
            setattr(record, FIELDS, {k: self._redact_value(v) for k, v in fields.items()})
        if record.exc_info and record.exc_text is None:
            # Format the traceback now, redacted, so the handler reuses this text.
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True

    def _redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self._redact_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._redact_value(v) for v in value]
        return value


class DenialNoiseFilter(logging.Filter):
    """Drops uvicorn's "returned without completing handshake" error after a
    WebSocket denial response: uvicorn (0.54, websockets-sansio) never marks a
    denied handshake complete, so it logs that error for every 401/404 it sent
    on our behalf, although the response went out as intended."""

    NOISE = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.NOISE


def log_config(
    level: str, secrets: Iterable[str], *, access_log: bool = True, log_format: str = "text"
) -> dict[str, Any]:
    """A logging dictConfig for uvicorn and toolrelay: everything to stderr (stdout
    carries only the start-up banner), every handler redacting tokens.

    ``log_format="json"`` writes every line as one JSON object (JsonFormatter),
    and sends records of any other logger (libraries, asyncio) through the same
    handler, so that every line on stderr parses."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    redact = {"()": RedactingFilter, "secrets": list(secrets)}
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": redact, "denial_noise": {"()": DenialNoiseFilter}},
        "formatters": _formatters(log_format),
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "filters": ["denial_noise", "redact"],
                "stream": "ext://sys.stderr",
            },
            "access": {
                "class": "logging.StreamHandler",
                "formatter": "access",
                "filters": ["redact"],
                "stream": "ext://sys.stderr",
            },
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            # No handler: uvicorn then writes no access line of its own (RequestLog does).
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            ACCESS_LOGGER: {
                "handlers": ["access"] if access_log else [],
                "level": "INFO" if access_log else "WARNING",
                "propagate": False,
            },
            "toolrelay": {"handlers": ["default"], "level": level.upper(), "propagate": False},
        },
    }
    if log_format == "json":
        # Python's last-resort handler would print other loggers' warnings as plain text.
        config["root"] = {"handlers": ["default"], "level": "WARNING"}
    return config


def _formatters(log_format: str) -> dict[str, Any]:
    """The formatters of ``log_config``: uvicorn's text lines, or JSON objects."""
    if log_format == "json":
        return {"default": {"()": JsonFormatter}, "access": {"()": JsonFormatter}}
    return {
        "default": {
            "()": "uvicorn.logging.DefaultFormatter",
            "fmt": "%(levelprefix)s %(name)s: %(message)s",
            "use_colors": False,
        },
        "access": {
            "()": TextAccessFormatter,
            "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
            "use_colors": False,
        },
    }


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, and
    the line's structured fields: a request line (RequestLog) gets
    ``kind: "request"``, ``method``, ``path``, ``status``, ``client``,
    ``duration_ms`` (and ``session_id``/``turn_id`` when the path names them); a tool-call
    line (ToolCallLog) its ``kind: "tool_call"`` fields. Runs after the
    redacting filter, so what it serializes is already redacted."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _rfc3339(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        args = record.args
        if record.name in _ACCESS_LOGGERS and isinstance(args, tuple) and len(args) == 5:
            client, method, path, http_version, status = args
            line.update(
                kind="request",
                method=method,
                path=path,
                status=status,
                client=client,
                http_version=http_version,
            )
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info and record.exc_text is None:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=True, default=str, separators=(",", ":"))


_ACCESS_LOGGERS = frozenset({ACCESS_LOGGER, "uvicorn.access"})


class TextAccessFormatter(AccessFormatter):
    """uvicorn's access line, followed by the request's duration: ``... 200 3.1ms``."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields = getattr(record, FIELDS, None)
        duration = fields.get("duration_ms") if isinstance(fields, dict) else None
        if isinstance(duration, int | float):
            line += f" {duration:.1f}ms"
        return line


_SESSION_PATH = re.compile(r"^/sessions/([^/]+)(?:/turns/([^/]+))?")


class RequestLog:
    """ASGI middleware: one line per HTTP request on ``toolrelay.access`` once its
    response is complete (or the app gave up), with its duration in ms from the
    request reaching the app, authentication and body reading included.

    The line has uvicorn's access-log arguments (client, method, path with
    query, HTTP version, status), so the redacting filter treats it as before.
    Costs one check per request when the access log is off."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.logger = logging.getLogger(ACCESS_LOGGER)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.logger.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the app fails before responding

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self._log(scope, status, (time.perf_counter() - started) * 1000.0)

    def _log(self, scope: Scope, status: int, duration_ms: float) -> None:
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else "-"
        path = quote(scope.get("root_path", "") + scope["path"])
        query = scope.get("query_string", b"")
        if query:
            path += "?" + query.decode("latin-1")
        fields: dict[str, Any] = {"duration_ms": round(duration_ms, 3)}
        match = _SESSION_PATH.match(scope["path"])
        if match:
            fields["session_id"] = match[1]
            if match[2]:
                fields["turn_id"] = match[2]
        self.logger.info(
            '%s - "%s %s HTTP/%s" %d',
            where,
            scope["method"],
            path,
            scope.get("http_version", "1.1"),
            status,
            extra={FIELDS: fields},
        )


def _rfc3339(epoch: float) -> str:
    return (
        datetime.fromtimestamp(epoch, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


# -- tool-call lines -------------------------------------------------------------------

CALLS_LOGGER = "toolrelay.calls"
SUMMARY_CHARS = 200


class ToolCallLog:
    """One log line per tool call (logger ``toolrelay.calls``, INFO), built from
    the call's events by the server's observer (server.observer): tool name,
    input summary, duration, output size, error class and message, and the
    session, turn and tool_use ids. Structured in ``--log-format json``; one
    readable sentence in text."""

    types: frozenset[str] = frozenset(
        {
            EventType.MESSAGE_COMPLETED,
            EventType.TOOL_CALLED,
            EventType.TOOL_CONFIRMATION_REQUESTED,
            EventType.TOOL_COMPLETED,
            EventType.TOOL_FAILED,
            EventType.TOOL_INPUT_INVALID,
            EventType.TURN_COMPLETED,
            EventType.TURN_FAILED,
            EventType.TURN_CANCELLED,
        }
    )

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(CALLS_LOGGER)
        # (turn_id, tool_use_id) -> input summary, until the call ends: tool_use
        # ids are chosen by the model or the client and repeat across turns.
        self._summaries: dict[tuple[str | None, str], str] = {}

    @staticmethod
    def enabled() -> bool:
        return logging.getLogger(CALLS_LOGGER).isEnabledFor(logging.INFO)

    def handle(self, record: Any, load: Callable[[Any], dict[str, Any]]) -> None:
        type_: str = record.type
        if type_.startswith("turn."):
            turn_id = record.turn_id
            for key in [k for k in self._summaries if k[0] == turn_id]:
                del self._summaries[key]
            return
        data = load(record)
        if type_ == EventType.MESSAGE_COMPLETED:
            self._note_calls(record.turn_id, data.get("message"))
            return
        key = (record.turn_id, str(data.get("tool_use_id") or ""))
        if type_ == EventType.TOOL_CALLED:
            self._summaries[key] = summarize(str(data.get("tool_name")), data.get("input"))
            return
        if type_ == EventType.TOOL_CONFIRMATION_REQUESTED:
            self._summaries.setdefault(key, str(data.get("input_summary") or ""))
            return
        self._log_end(record, data, key, self._summaries.pop(key, None))

    def _note_calls(self, turn_id: str | None, message: Any) -> None:
        """The assistant message names every call with its input, including
        calls that end before running (denied, outside the workspace)."""
        if not isinstance(message, dict) or message.get("role") != "assistant":
            return
        for block in message.get("content") or ():
            if isinstance(block, dict) and block.get("type") == "tool_use":
                use_key = (turn_id, str(block.get("id") or ""))
                self._summaries[use_key] = summarize(str(block.get("name")), block.get("input"))

    def _log_end(
        self,
        record: Any,
        data: dict[str, Any],
        key: tuple[str | None, str],
        summary: str | None,
    ) -> None:
        """The one line of a call that ended (completed, failed or invalid)."""
        type_: str = record.type
        fields: dict[str, Any] = {
            "kind": "tool_call",
            "tool": data.get("tool_name"),
            "input_summary": summary,
            "duration_ms": data.get("duration_ms"),
            "output_bytes": None,
            "outcome": "completed",
            "error_class": None,
            "error": None,
            "session_id": record.session_id,
            "turn_id": record.turn_id,
            "tool_use_id": key[1],
        }
        if type_ == EventType.TOOL_COMPLETED:
            fields["output_bytes"] = output_size(data.get("content"))
        elif type_ == EventType.TOOL_FAILED:
            fields.update(outcome="failed", error_class=data.get("error_class"))
            fields["error"] = data.get("message")
        else:  # tool.input_invalid
            errors = data.get("errors") or []
            text = "; ".join(
                f"{e.get('path') or '/'}: {e.get('message')}" for e in errors if isinstance(e, dict)
            )
            fields.update(outcome="failed", error_class="validation_error", error=text)
        if fields["outcome"] == "completed":
            message = "tool call %s (%s) completed in %s ms, %s bytes out [session %s, turn %s]"
            args: tuple[Any, ...] = (
                fields["tool"],
                fields["tool_use_id"],
                fields["duration_ms"],
                fields["output_bytes"],
                record.session_id,
                record.turn_id,
            )
        else:
            message = "tool call %s (%s) failed: %s: %s [session %s, turn %s]"
            args = (
                fields["tool"],
                fields["tool_use_id"],
                fields["error_class"],
                fields["error"],
                record.session_id,
                record.turn_id,
            )
        self.log.info(message, *args, extra={FIELDS: fields})


def summarize(name: str, tool_input: Any) -> str:
    """``name({...})`` with the input as compact JSON, cut to SUMMARY_CHARS."""
    args = json.dumps(tool_input, ensure_ascii=False, default=str, separators=(",", ":"))
    if len(args) > SUMMARY_CHARS:
        args = args[: SUMMARY_CHARS - 1] + "…"
    return f"{name}({args})"


def output_size(content: Any) -> int:
    """Bytes of a result's content: UTF-8 text, and base64 image data as sent."""
    size = 0
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            size += len(str(block.get("text", "")).encode("utf-8", "surrogatepass"))
        elif block.get("type") == "image":
            size += len(str(block.get("data", "")))
    return size
