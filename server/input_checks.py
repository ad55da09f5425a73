"""Characters no parameter may hold, refused in one place (422 naming it).

A NUL byte, another control character or a lone surrogate in a parameter is
never meaningful to this API: ids, paths, names and numbers are printable
text. Left to the routes, such a value travels until something chokes on it
(``os.path.realpath`` raises "embedded null byte", a 500), or it is stored
and shown back with the control characters a terminal acts on. So this
middleware looks at every request before its route does: the path
parameters, the query parameters (names and values, percent-decoded, which
must also be valid UTF-8) and the header values. The first offender gets a
422 in the API's error shape naming it, e.g. ``query parameter workspace:
holds a NUL byte (U+0000) at character 0``.

JSON bodies are not read here: their fields are typed in ``server.schemas``,
where the string fields that name things (``PlainText``) refuse the same
characters; free text (a message, a file's content) may hold any character
JSON can carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated
from urllib.parse import unquote_to_bytes

from pydantic import AfterValidator
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from server.errors import error_body
from server.middleware import deny_websocket, send_json

# C0 controls, DEL, C1 controls, and the surrogates that strict UTF-8
# decoding leaves as ``surrogateescape`` code points (or a JSON ``\ud800``).
_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
# Header values: any control byte but a tab (obs-text bytes >= 0x80 are legal).
_BAD_HEADER = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def describe_bad_character(text: str) -> str | None:
    """What is wrong with ``text`` (its first bad character), or None."""
    found = _BAD.search(text)
    if found is None:
        return None
    char = found.group()
    code = ord(char)
    where = f"at character {found.start()}"
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: a byte that is not UTF-8
        return f"is not valid UTF-8 (byte 0x{code - 0xDC00:02X} {where})"
    if code == 0:
        kind = "a NUL byte"
    elif 0xD800 <= code <= 0xDFFF:
        kind = "a lone surrogate"
    else:
        kind = "a control character"
    return f"holds {kind} (U+{code:04X}) {where}"


def _plain(value: str) -> str:
    problem = describe_bad_character(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# A JSON body string that names something (a path, a model, a profile): no
# control characters, no lone surrogates. Pydantic reports the field.
PlainText = Annotated[str, AfterValidator(_plain)]


def _decode(raw: bytes) -> str:
    """Percent-decoded text; bytes that are not UTF-8 become lone surrogates,
    which ``describe_bad_character`` reports."""
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


class BadCharacterGuard:
    """422 for a request whose path, query or header values hold a bad character.

    Installed inside authentication: a caller without a token learns nothing
    about its parameters. Requests with nothing percent-encoded in path or
    query (nearly all) cost one byte search each, plus one regex search per
    header value."""

    def __init__(self, app: ASGIApp, routes: Callable[[], Sequence[BaseRoute]]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind in ("http", "websocket"):
            problem = self._problem(scope)
            if problem is not None:
                field, message = problem
                body = error_body(
                    "invalid_request",
                    f"{field}: {message}",
                    fields=[{"field": field, "message": message}],
                )
                if kind == "http":
                    await send_json(send, 422, body)
                else:
                    await deny_websocket(scope, send, 422, body)
                return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope) -> tuple[str, str] | None:
        return (
            self._path_problem(scope)
            or _query_problem(scope.get("query_string", b""))
            or _header_problem(scope["headers"])
        )

    def _path_problem(self, scope: Scope) -> tuple[str, str] | None:
        raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
        if b"%" not in raw:
            return None  # a request line holds no raw control bytes
        path = _decode(raw)
        problem = describe_bad_character(path)
        if problem is None:
            return None
        return self._path_parameter(path) or ("path", problem)

    def _path_parameter(self, path: str) -> tuple[str, str] | None:
        """(``path parameter <name>``, its problem) for the route parameter
        holding the bad character; None when no route names it."""
        for regex in _path_regexes(self.routes()):
            match = regex.match(path)
            if match is None:
                continue
            for name, value in match.groupdict().items():
                problem = describe_bad_character(value or "")
                if problem is not None:
                    return f"path parameter {name}", problem
        return None


def _path_regexes(routes: Sequence[BaseRoute]) -> Iterator[re.Pattern[str]]:
    """Every route's path pattern, routers included by FastAPI walked into
    (their routes sit under ``original_router``; this app includes them
    without a prefix). Only walked for a request already refused."""
    for route in routes:
        regex = getattr(route, "path_regex", None)
        if isinstance(regex, re.Pattern):
            yield regex
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _path_regexes(inner.routes)


def _query_problem(query: bytes) -> tuple[str, str] | None:
    if not query or (b"%" not in query and not _BAD_HEADER.search(query)):
        return None
    for pair in query.split(b"&"):
        raw_name, _, raw_value = pair.partition(b"=")
        name = _decode(raw_name.replace(b"+", b" "))
        name_problem = describe_bad_character(name)
        if name_problem is not None:
            return f"query parameter {_printable(name)}", f"its name {name_problem}"
        problem = describe_bad_character(_decode(raw_value.replace(b"+", b" ")))
        if problem is not None:
            return f"query parameter {name}", problem
    return None


def _header_problem(headers: Sequence[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    for name, value in headers:
        found = _BAD_HEADER.search(value)
        if found is not None:
            code = value[found.start()]
            what = "a NUL byte" if code == 0 else "a control character"
            return (
                f"header {name.decode('latin-1').lower()}",
                f"holds {what} (U+{code:04X}) at character {found.start()}",
            )
    return None


def _printable(text: str) -> str:
    return _BAD.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
