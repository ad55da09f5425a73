"""Encoding one event envelope: orjson and msgspec against the old stdlib path.

``python -m benchmarks.event_encoding`` prints ns/event for three realistic
envelopes (a ``tool.completed`` with ~2 KB of output text, a
``message.delta``, a ``tool.output_delta`` with non-ASCII text) and four ways
to encode them:

- ``stdlib-c``: what eventbus.encoding did before (the standard library's C
  encoder built once through the private ``c_make_encoder``, ASCII-only);
- ``orjson``: the envelope dict through ``orjson.dumps``;
- ``msgspec``: the same through a reused ``msgspec.json.Encoder`` (skipped
  when msgspec is not installed: it is not a dependency);
- ``bus``: ``eventbus.encoding.EnvelopeEncoder`` as the bus uses it now
  (orjson for ``data``, cached quoted ids);

plus what the text view costs (``bytes.decode``, once per event, for a
WebSocket's text frame) and building the payload models (validated call,
``model_construct``) against a plain dict. Each figure is the best of a few
repeats: the machine is shared and the minimum is the least disturbed.
Bounded: a fixed number of calls per figure.
"""

from __future__ import annotations

import json
import sys
import timeit
from collections.abc import Callable
from functools import partial
from json import encoder as json_encoder
from typing import Any

import orjson

from eventbus.encoding import EnvelopeEncoder
from protocol import payloads

CALLS = 20_000
REPEATS = 5

OUTPUT = "".join(f"{i:04d}  drwxr-xr-x  src/module_{i}/handler.py  ok\n" for i in range(42))
CONTENT = [{"type": "text", "text": OUTPUT}]
SAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "tool.completed 2KB": (
        "tool.completed",
        {
            "tool_use_id": "toolu_01A09q90qw90lq917835lq9",
            "tool_name": "shell",
            "duration_ms": 41.7,
            "content": CONTENT,
            "files_modified": None,
            "command_executed": "ls -la src",
            "metadata": {"exit_code": 0, "truncated": False},
        },
    ),
    "message.delta": ("message.delta", {"text": "Let me look at the ", "index": 0, "step": 1}),
    "non-ASCII delta": (
        "tool.output_delta",
        {
            "tool_use_id": "toolu_02",
            "stream": "stdout",
            "text": "héllo wörld — 日本語のテキスト ✓ 🚀 naïve café\n" * 4,
        },
    ),
}


def _stdlib_c() -> Callable[[Any], str]:
    """The old path, rebuilt here for comparison: the private C encoder."""
    make = json_encoder.c_make_encoder  # type: ignore[attr-defined]
    encode = make(
        None, None, json_encoder.encode_basestring_ascii, None, ":", ",", False, False, False
    )

    def run(value: Any) -> str:
        return "".join(encode(value, 0))

    return run


def _msgspec_encoder() -> Callable[[Any], bytes] | None:
    try:
        import msgspec
    except ImportError:  # not a dependency: measured when installed
        return None
    encode: Callable[[Any], bytes] = msgspec.json.Encoder().encode
    return encode


def _best_ns(call: Callable[[], object]) -> float:
    return min(timeit.repeat(call, number=CALLS, repeat=REPEATS)) / CALLS * 1e9


def _envelope(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq": 123_456,
        "session_seq": 42,
        "id": "evt_1a2b3c4d00000001e240",
        "type": event_type,
        "session_id": "ses_9f8e7d6c5b4a",
        "turn_id": "trn_0a1b2c3d4e5f",
        "ts": "2026-05-08T10:00:00.123456Z",
        "data": data,
    }


def measure() -> dict[str, dict[str, float]]:
    """ns/event per sample and per encoder."""
    stdlib = _stdlib_c()
    msgspec_encode = _msgspec_encoder()
    bus = EnvelopeEncoder()
    results: dict[str, dict[str, float]] = {}
    for name, (event_type, data) in SAMPLES.items():
        envelope = _envelope(event_type, data)
        # Every encoder must produce the same JSON value.
        assert json.loads(stdlib(envelope)) == orjson.loads(orjson.dumps(envelope))

        def run_bus(event_type: str = event_type, data: dict[str, Any] = data) -> bytes:
            return bus.encode(
                seq=123_456,
                session_seq=42,
                event_id="evt_1a2b3c4d00000001e240",
                type=event_type,
                session_id="ses_9f8e7d6c5b4a",
                turn_id="trn_0a1b2c3d4e5f",
                ts="2026-05-08T10:00:00.123456Z",
                data=data,
            )

        encoded = run_bus()
        row = {
            "stdlib-c": _best_ns(partial(stdlib, envelope)),
            "orjson": _best_ns(partial(orjson.dumps, envelope)),
            "bus": _best_ns(run_bus),
            "decode": _best_ns(encoded.decode),
            "bytes": float(len(encoded)),
        }
        if msgspec_encode is not None:
            row["msgspec"] = _best_ns(partial(msgspec_encode, envelope))
        results[name] = row
    results["payload construction"] = {
        "MessageDelta()": _best_ns(lambda: payloads.MessageDelta(text="Let me look", index=0)),
        "MessageDelta.model_construct": _best_ns(
            lambda: payloads.MessageDelta.model_construct(text="Let me look", index=0)
        ),
        "ToolCompleted() 2KB": _best_ns(
            lambda: payloads.ToolCompleted(
                tool_use_id="toolu_01",
                tool_name="shell",
                duration_ms=41.7,
                content=CONTENT,  # type: ignore[arg-type]
                files_modified=None,
                command_executed="ls -la src",
                metadata={"exit_code": 0},
            )
        ),
        "dict (same fields)": _best_ns(
            lambda: {
                "tool_use_id": "toolu_01",
                "tool_name": "shell",
                "duration_ms": 41.7,
                "content": CONTENT,
                "files_modified": None,
                "command_executed": "ls -la src",
                "metadata": {"exit_code": 0},
            }
        ),
    }
    return results


def main() -> int:
    results = measure()
    print(f"event encoding, ns/event (best of {REPEATS} x {CALLS:,} calls)")
    for name, row in results.items():
        cells = "  ".join(
            f"{key} {value:,.0f}" if key != "bytes" else f"({value:,.0f} B)"
            for key, value in row.items()
        )
        print(f"  {name:22} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
