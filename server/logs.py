"""Logging set-up for ``toolrelay serve``, with token redaction.

uvicorn's access log prints each request line with its query string, and a
browser's WebSocket carries its token as ``?token=``; its error log prints
WebSocket paths too. A filter on every handler rewrites each record before it
is formatted: ``token=<anything>`` becomes ``token=***`` and any configured
token value that still appears (in a path, a header echoed by a tool...) is
replaced as well.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "***"
_QUERY_TOKEN = re.compile(r"((?:^|[?&;\s])token=)[^&\s\"']*", re.IGNORECASE)
_BEARER = re.compile(r"(bearer\s+)[^\s\"']+", re.IGNORECASE)


class TokenRedactor:
    """Removes tokens from text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first, so a token that contains another is removed whole.
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = _QUERY_TOKEN.sub(lambda m: m.group(1) + REDACTED, text)
        text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text


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
        if record.exc_info and record.exc_text is None:
            # Format the traceback now, redacted, so the handler reuses this text.
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


class DenialNoiseFilter(logging.Filter):
    """Drops uvicorn's "returned without completing handshake" error after a
    WebSocket denial response: uvicorn (0.54, websockets-sansio) never marks a
    denied handshake complete, so it logs that error for every 401/404 it sent
    on our behalf, although the response went out as intended."""

    NOISE = "ASGI callable returned without completing handshake."

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != self.NOISE


def log_config(level: str, secrets: Iterable[str], *, access_log: bool = True) -> dict[str, Any]:
    """A logging dictConfig for uvicorn and toolrelay: everything to stderr (stdout
    carries only the start-up banner), every handler redacting tokens."""
    redact = {"()": RedactingFilter, "secrets": list(secrets)}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"redact": redact, "denial_noise": {"()": DenialNoiseFilter}},
        "formatters": {
            "default": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s %(name)s: %(message)s",
                "use_colors": False,
            },
            "access": {
                "()": "uvicorn.logging.AccessFormatter",
                "fmt": '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
                "use_colors": False,
            },
        },
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
            "uvicorn.access": {
                "handlers": ["access"] if access_log else [],
                "level": "INFO" if access_log else "WARNING",
                "propagate": False,
            },
            "toolrelay": {"handlers": ["default"], "level": level.upper(), "propagate": False},
        },
    }
