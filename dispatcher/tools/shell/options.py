"""One getopt-style reading of a program's arguments, driven by its entry in
the option table (dispatcher/tools/shell/programs.py).

The rating must see an option however it is spelled, or ``sort -uo.env``
writes ``.env`` while the rules see only a harmless ``-u``. So arguments are
read the way GNU ``getopt_long`` reads them, not matched as strings:

- short options cluster (``-uo FILE``, ``-uoFILE``); an option that takes a
  value consumes the rest of its cluster, or else the next word; an optional
  value (``"w::"``) is only ever the rest of the cluster;
- long options take ``--opt=value`` or ``--opt value`` (an optional value
  only with ``=``), and any unique prefix of a long name is that option
  (``--o``, ``--outp``): an exact name wins over prefixes, and a prefix
  shared by several names is *ambiguous*;
- ``--`` ends the options; ``-`` is an operand; GNU programs permute, so
  options after operands still count (``sort x -o y``), unless the entry
  says the program stops at its first operand (``tr``, ``seq``);
- ``-NUM`` words are options or operands where the entry allows numbers
  (``head -5``, ``seq -1 3``).

What getopt would reject (an unknown option, a value where none is taken,
a missing value) is reported as *unknown*: the reading cannot say what the
real program does with it, so the rules never call such a command safe.
A partial entry (a program rated dev, whose entry lists only the options
with effects) reads an unlisted letter as a flag and goes on, so that the
options after it in the cluster are still seen.
``find`` is not getopt: its expression is read primary by primary with
``read_find``.

The reading over-approximates where programs differ from getopt (``rg``
and ``jq`` take no abbreviations; ``tree -o.env`` is an error to tree): it
may see an effect a program would not have, never miss one it has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum


class Effect(Enum):
    """What an option does beyond reading the workspace."""

    WRITES = "writes"  # its value names a file the program writes
    CREATES = "creates"  # it creates files the rules cannot name (file -C)
    CREATES_IN = "creates_in"  # its value is a folder the program creates files in
    READS = "reads"  # its value names a file or folder the program reads
    RUNS = "runs"  # it runs a program its value (or the user) chooses
    HELPERS = "helpers"  # it runs fixed helper programs (decompressors, pr, ls)
    FOLLOWS = "follows"  # it follows symbolic links out of the tree
    SYSTEM = "system"  # it changes the machine (clock, host name, other processes)
    DELETES = "deletes"  # it deletes files (find -delete)
    WRITES_OPERANDS = "writes_operands"  # with it, the operands are rewritten (--fix, -w)
    KEEPS_OPERANDS = "keeps_operands"  # with it, a formatter only checks (--check, --diff)


@dataclass(frozen=True, slots=True)
class Spec:
    """A program's options, as getopt sees them, and their effects.

    ``short`` is a getopt optstring (``"o:"`` takes a value, ``"w::"`` an
    optional glued one); ``long`` lists long names (``"output="`` takes a
    value, ``"color::"`` an optional ``=value``). ``effects`` maps an
    option's short letter or long name to its effect. ``complete``: every
    option of the program is listed, so an unlisted one is unknown (for a
    program rated dev, only the options with effects are listed and an
    unlisted one is read as a flag). ``operands_written``: operands from
    this index on are written (``tee``: 0, ``uniq``: 1), by default or,
    for formatters, unless an option ``KEEPS_OPERANDS``. ``operands``: an
    effect every operand has (``hostname NAME`` sets the host name)."""

    short: str = ""
    long: tuple[str, ...] = ()
    effects: Mapping[str, Effect] = field(default_factory=dict)
    complete: bool = True
    permute: bool = True
    numbers: bool = False
    abbreviations: bool = True
    operands_written: int | None = None
    operands: Effect | None = None
    # Long options taking two values (jq --arg NAME VALUE).
    two_values: frozenset[str] = frozenset()
    # No options at all: every word is an operand (echo, true, test).
    literal: bool = False
    note: str = ""
    # The optstring and long names as look-up tables, built once.
    shorts: dict[str, str] = field(init=False, repr=False, compare=False)
    longs: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shorts", _short_table(self.short))
        object.__setattr__(self, "longs", _long_table(self.long))


@dataclass(frozen=True, slots=True)
class Option:
    """One option as read: its canonical name (letter or full long name),
    its value if it took one, and the word it came from."""

    name: str
    value: str | None
    word: str


@dataclass(slots=True)
class Reading:
    """A program's arguments read against its Spec."""

    options: list[Option] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    ambiguous: list[str] = field(default_factory=list)

    def effects(self, spec: Spec) -> list[tuple[Effect, Option]]:
        return [(spec.effects[o.name], o) for o in self.options if o.name in spec.effects]


_NUMBER = re.compile(r"^-\d+$")


def _short_table(optstring: str) -> dict[str, str]:
    """``"ab:c::"`` -> ``{"a": "", "b": ":", "c": "::"}``."""
    table: dict[str, str] = {}
    i = 0
    while i < len(optstring):
        letter = optstring[i]
        i += 1
        kind = ""
        while i < len(optstring) and optstring[i] == ":" and len(kind) < 2:
            kind += ":"
            i += 1
        if letter not in "+-":
            table[letter] = kind
    return table


def _long_table(names: tuple[str, ...]) -> dict[str, str]:
    """``("output=", "color::", "debug")`` -> ``{"output": "=", ...}``."""
    table: dict[str, str] = {}
    for spelled in names:
        if spelled.endswith("::"):
            table[spelled[:-2]] = "::"
        elif spelled.endswith("="):
            table[spelled[:-1]] = "="
        else:
            table[spelled] = ""
    return table


def read_args(spec: Spec, args: list[str]) -> Reading:
    """``args`` (the words after the program) read against ``spec``."""
    reading = Reading()
    if spec.literal:
        reading.operands = list(args)
        return reading
    shorts, longs = spec.shorts, spec.longs
    i = 0
    while i < len(args):
        word = args[i]
        i += 1
        if word == "--":
            reading.operands.extend(args[i:])
            break
        if word == "-" or not word.startswith("-"):
            reading.operands.append(word)
            if not spec.permute:
                reading.operands.extend(args[i:])
                break
        elif spec.numbers and _NUMBER.match(word):
            reading.options.append(Option("NUM", word[1:], word))
        elif word.startswith("--"):
            i = _read_long(spec, longs, word, args, i, reading)
        else:
            i = _read_cluster(spec, shorts, word, args, i, reading)
    return reading


def _read_long(
    spec: Spec, longs: dict[str, str], word: str, args: list[str], i: int, reading: Reading
) -> int:
    given, eq, value = word[2:].partition("=")
    name = _match_long(spec, longs, given)
    if name is None:
        if spec.complete:  # in a partial entry: some option without an effect
            reading.unknown.append(word)
        return i
    if name == "":
        reading.ambiguous.append(word)
        return i
    kind = longs[name]
    if name in spec.two_values:
        values = ([value] if eq else []) + args[i : i + 2 - bool(eq)]
        reading.options.append(Option(name, " ".join(values), word))
        return i + 2 - bool(eq)
    if kind == "":
        if eq:
            reading.unknown.append(word)  # getopt: "doesn't allow an argument"
        else:
            reading.options.append(Option(name, None, word))
        return i
    if eq or kind == "::":
        reading.options.append(Option(name, value if eq else None, word))
        return i
    if i >= len(args):
        reading.unknown.append(word)  # getopt: "requires an argument"
        return i
    reading.options.append(Option(name, args[i], word))
    return i + 1


def _match_long(spec: Spec, longs: dict[str, str], given: str) -> str | None:
    """The long name ``given`` stands for; None if none, "" if ambiguous."""
    if given in longs:
        return given
    if not spec.abbreviations or not given:
        return None
    found = [name for name in longs if name.startswith(given)]
    if len(found) == 1:
        return found[0]
    return "" if found else None


def _read_cluster(
    spec: Spec, shorts: dict[str, str], word: str, args: list[str], i: int, reading: Reading
) -> int:
    k = 1
    while k < len(word):
        letter = word[k]
        k += 1
        if spec.numbers and letter.isdigit():
            continue  # grep -5n: a context length glued in front
        kind = shorts.get(letter)
        if kind is None and not spec.complete:
            continue  # a partial entry's unlisted letter: read on, to see more
        if kind is None:
            # What follows an unknown letter cannot be read: it may be a value.
            reading.unknown.append("-" + word[k - 1 :])
            return i
        if kind == "":
            reading.options.append(Option(letter, None, word))
            continue
        rest = word[k:]
        if rest or kind == "::":
            reading.options.append(Option(letter, rest or None, word))
            return i
        if i >= len(args):
            reading.unknown.append(word)
            return i
        reading.options.append(Option(letter, args[i], word))
        return i + 1
    return i


# -- find ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FindSpec:
    """find's expression: each primary's count of values (-1: up to ``;``
    or ``+``) and effect; the options before the starting points."""

    primaries: Mapping[str, int]
    effects: Mapping[str, Effect]
    leading: frozenset[str]


def read_find(spec: FindSpec, args: list[str]) -> Reading:
    """find's arguments: leading options (-H -L -P -D -O), starting points,
    then primaries with their values. Operators and parentheses are
    operands; an unlisted primary is unknown."""
    reading = Reading()
    i = 0
    while i < len(args) and (args[i] in spec.leading or args[i].startswith(("-D", "-O"))):
        word = args[i]
        reading.options.append(Option(word, None, word))
        i += 2 if word == "-D" else 1
    while i < len(args) and not args[i].startswith("-") and args[i] not in ("(", "!", ","):
        reading.operands.append(args[i])
        i += 1
    while i < len(args):
        word = args[i]
        i += 1
        count = spec.primaries.get(word)
        if count is None:
            if word.startswith("-") and word != "-":
                reading.unknown.append(word)
            else:
                reading.operands.append(word)  # ( ) ! , and values of tests
            continue
        if count < 0:
            end = i
            while end < len(args) and args[end] not in (";", "+"):
                end += 1
            reading.options.append(Option(word, " ".join(args[i:end]), word))
            i = end + 1
        else:
            reading.options.append(Option(word, " ".join(args[i : i + count]) or None, word))
            i += count
    return reading


__all__ = ["Effect", "FindSpec", "Option", "Reading", "Spec", "read_args", "read_find"]
