"""Shorthands for writing the option table: one letter per effect, a Spec
from an optstring and a space-separated list of long names (every program
also takes ``--help`` and ``--version``), and the literal and partial
entries. Shared by safe_programs.py and dev_programs.py.
"""

from __future__ import annotations

from typing import Any

from dispatcher.tools.shell.options import Effect, Spec

W, C, CI, R = Effect.WRITES, Effect.CREATES, Effect.CREATES_IN, Effect.READS
RUN, HELP, F, SYS = Effect.RUNS, Effect.HELPERS, Effect.FOLLOWS, Effect.SYSTEM
WO, KO = Effect.WRITES_OPERANDS, Effect.KEEPS_OPERANDS
HV = ("help", "version")
# A program whose arguments are all operands (echo, test).
LITERAL = Spec(literal=True)
# An entry of a dev program: only the options with effects are listed.
PARTIAL: dict[str, Any] = {"complete": False}


def fx(effect: Effect, *names: str) -> dict[str, Effect]:
    """The same effect for each of ``names``."""
    return dict.fromkeys(names, effect)


def spec(short: str, long: str, **kw: Any) -> Spec:
    """A Spec from an optstring and a space-separated list of long names."""
    return Spec(short, tuple(long.split()) + HV, **kw)
