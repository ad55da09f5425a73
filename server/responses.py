"""JSON responses of the HTTP API: strict, compact, ASCII-only text.

Text the server hands back can hold lone surrogates: file names that are not
valid UTF-8 reach Python as surrogate escapes (``list_dir``, ``grep``), and a
client may send ``"\\ud800"`` escapes in its JSON. UTF-8 cannot encode them,
so the default JSON rendering raises and the route answers 500, and keeps
doing so for every later read of that turn or conversation. Rendering with
ASCII escapes, as the event envelope does (``eventbus.encoding``), keeps
every response valid JSON that says exactly what was stored.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


class AsciiJSONResponse(JSONResponse):
    """``application/json`` rendered as pure ASCII (non-ASCII as ``\\uXXXX``)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(
            content, ensure_ascii=True, allow_nan=False, separators=(",", ":")
        ).encode("ascii")
