"""A hostile MCP server on stdio, speaking raw JSON-RPC (one message a line),
for the attack tests of tests/security/test_mcp_attacks.py.

Its tools:

- ``huge {"mb": N, "shape": ...}``: answers with a text result of N MiB,
  written in 1 MiB pieces (the whole message is one line); ``shape`` puts
  the request id first (default), last (as the TypeScript SDK writes it),
  nowhere, or sends a notification of that size before a normal answer.
- ``flood {"seconds": S}``: for S seconds, flips its tool list (the tool
  ``flip`` comes and goes) and sends ``notifications/tools/list_changed``
  every millisecond or so, from a thread, while it keeps answering requests.
- ``ping {}``: answers ``pong``.

Raw JSON-RPC, not the SDK, so that nothing in a library stands between the
test and the bytes a hostile server can write.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

OBJ = {"type": "object", "properties": {}}
BASE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "huge",
        "description": "A result of mb MiB.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "mb": {"type": "number"},
                "shape": {
                    "type": "string",
                    "enum": ["id_first", "id_last", "no_id", "notification"],
                },
            },
            "required": ["mb"],
        },
    },
    {
        "name": "flood",
        "description": "Flip the tool list for a while, announcing every flip.",
        "inputSchema": {
            "type": "object",
            "properties": {"seconds": {"type": "number"}},
            "required": ["seconds"],
        },
    },
    {"name": "ping", "description": "pong", "inputSchema": OBJ},
]
FLIP = {"name": "flip", "description": "comes and goes", "inputSchema": OBJ}

out = sys.stdout.buffer
write_lock = threading.Lock()
state = {"flip": False}


def send(message: dict[str, Any]) -> None:
    data = json.dumps(message).encode() + b"\n"
    with write_lock:
        out.write(data)
        out.flush()


def send_huge(request_id: Any, mb: float, shape: str) -> None:
    """One line of ``mb`` MiB. ``shape``: the id first (the Python SDK's
    order), last (the TypeScript SDK's), none at all, or a notification of
    the server's (then the call is answered normally afterwards)."""
    total = int(mb * 1024 * 1024)
    piece = b"x" * (1024 * 1024)
    rid = json.dumps(request_id).encode()
    text = b'"result":{"content":[{"type":"text","text":"'
    head, tail = {
        "id_first": (b'{"jsonrpc":"2.0","id":' + rid + b"," + text, b'"}],"isError":false}}'),
        "id_last": (b'{"jsonrpc":"2.0",' + text, b'"}],"isError":false},"id":' + rid + b"}"),
        "no_id": (b'{"jsonrpc":"2.0",' + text, b'"}],"isError":false}}'),
        "notification": (
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"',
            b'"}}',
        ),
    }[shape]
    with write_lock:
        out.write(head)
        left = total
        while left > 0:
            chunk = piece if left >= len(piece) else piece[:left]
            out.write(chunk)
            out.flush()
            left -= len(chunk)
            # A steady writer, not one burst: the reader is busy for a while.
            time.sleep(0.01)
        out.write(tail + b"\n")
        out.flush()
    if shape == "notification":
        text_result(request_id, "after the notification")


def flood(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state["flip"] = not state["flip"]
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        time.sleep(0.001)


def tools() -> list[dict[str, Any]]:
    return BASE_TOOLS + ([FLIP] if state["flip"] else [])


def text_result(request_id: Any, text: str) -> None:
    send(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "result": {"content": [{"type": "text", "text": text}], "isError": False},
        }
    )


def call(request_id: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "huge":
        send_huge(request_id, float(args["mb"]), str(args.get("shape", "id_first")))
    elif name == "flood":
        threading.Thread(target=flood, args=(float(args["seconds"]),), daemon=True).start()
        text_result(request_id, "flooding")
    else:
        text_result(request_id, "pong")


def handle(message: dict[str, Any]) -> None:
    method = message.get("method")
    request_id = message.get("id")
    if request_id is None:
        return  # a notification (initialized, cancelled): nothing to answer
    if method == "initialize":
        result = {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "hostile", "version": "0"},
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools()}})
    elif method == "tools/call":
        call(request_id, message.get("params") or {})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})


def main() -> None:
    for line in sys.stdin.buffer:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
