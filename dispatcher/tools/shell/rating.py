"""Layer 2 of the shell rules, the rating of one program and its
arguments: ``safe`` (reads), ``dev`` (builds and tests) or ``dangerous``.

A program starts from its family (families.py: ``ls`` is safe, ``pytest``
dev, ``git`` dev beyond ``--version``, subcommand programs by subcommand);
its options and operands are then read from the option table (programs.py)
the way getopt reads them, and each effect they have lifts the rating (see
``option_effects``). An argument naming a path outside the workspace makes
any program dangerous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dispatcher.tool import CallRating
from dispatcher.tools.shell import programs
from dispatcher.tools.shell.analysis import HARMLESS_SINKS, Where, max_rating, points_outside
from dispatcher.tools.shell.families import (
    DEV_COMMANDS,
    GIT_DEV,
    GIT_SAFE,
    PIP_SAFE,
    PY_DEV_MODULES,
    READ_BUT_DEV,
    SAFE_COMMANDS,
    is_python,
)
from dispatcher.tools.shell.options import Effect, Reading, Spec, read_args, read_find
from dispatcher.tools.shell.tokens import Word


def classify(prog: str, args: list[Word], where: Where | None = None) -> CallRating:
    """safe / dev / dangerous for one program and its arguments."""
    return rate_program(prog, args, where)[0]


@dataclass(slots=True)
class OptionEffects:
    """What a program's options and operands do, read against the option
    table (dispatcher/tools/shell/programs.py): the rating they call for
    and the paths they write."""

    rating: CallRating = CallRating.SAFE
    writes: list[str] = field(default_factory=list)
    writes_unknown: bool = False

    def lift(self, rating: CallRating) -> None:
        self.rating = max_rating(self.rating, rating)


def rate_program(
    prog: str, args: list[Word], where: Where | None
) -> tuple[CallRating, OptionEffects]:
    """The rating of ``prog args`` and what its options and operands do."""
    texts = [a.text for a in args]
    effects = option_effects(prog, texts, where)
    rating = max_rating(_base_rating(prog, texts), effects.rating)
    if rating is not CallRating.DANGEROUS and any(points_outside(a, where) for a in args):
        rating = CallRating.DANGEROUS
    if rating is CallRating.SAFE and any(a.dynamic for a in args):
        # Unknown arguments to a read command: still only reads, but where?
        rating = CallRating.DEV
    return rating, effects


def option_effects(prog: str, texts: list[str], where: Where | None = None) -> OptionEffects:
    """The rating ``prog``'s options and operands call for, and what they write.

    - an option the table does not know (for a program rated safe, whose
      entry lists every option) or that getopt would reject: at least dev.
      A safe command runs unasked, so its arguments must be fully
      understood: an unknown option may be newer than the table, may take
      a value that hides the next option, and nobody has checked what it
      does. Dev asks; the cost is a question for a rare option;
    - a long-option prefix matching several options: dangerous (a program
      version with fewer options would read it as one of them);
    - a write (option value or operand): dev, dangerous outside the
      workspace; a folder for temporary files likewise;
    - running a program the arguments choose, deleting, changing the
      machine: dangerous; running fixed helpers, following links: dev;
    - a file read by an option's value, outside the workspace: dangerous.
    """
    found = OptionEffects()
    spec, reading = _read(prog, texts)
    if spec is None or reading is None:
        return found
    if reading.unknown:
        found.lift(CallRating.DEV)
    if reading.ambiguous:
        found.lift(CallRating.DANGEROUS)
    for effect, option in reading.effects(spec):
        _apply(found, effect, option.value, where)
    for operand in _written_operands(spec, reading):
        _apply(found, Effect.WRITES, operand, where)
    if spec.operands is not None and reading.operands:
        _apply(found, spec.operands, None, where)
    if prog == "date" and any(not o.startswith("+") for o in reading.operands):
        found.lift(CallRating.DANGEROUS)  # date MMDDhhmm sets the clock
    return found


def _read(prog: str, texts: list[str]) -> tuple[Spec | None, Reading | None]:
    """The table entry of ``prog`` (find, git and pip included) and its reading."""
    if prog == "find":
        return _FIND_AS_SPEC, read_find(programs.FIND, texts)
    if prog == "git":
        i = git_subcommand(texts)
        if i is None:
            return None, None
        git = programs.GIT_GREP if texts[i] == "grep" else programs.GIT
        return git, read_args(git, texts[i + 1 :])
    if prog in ("pip", "pip3"):
        return programs.PIP, read_args(programs.PIP, texts[1:])
    entry = programs.SAFE_SPECS.get(prog) or programs.DEV_SPECS.get(prog)
    return entry, (read_args(entry, texts) if entry is not None else None)


_FIND_AS_SPEC = Spec(effects=programs.FIND.effects)


def _apply(found: OptionEffects, effect: Effect, value: str | None, where: Where | None) -> None:
    dev, dangerous = CallRating.DEV, CallRating.DANGEROUS
    if effect in (Effect.RUNS, Effect.SYSTEM, Effect.DELETES):
        found.lift(dangerous)
    elif effect in (Effect.HELPERS, Effect.FOLLOWS):
        found.lift(dev)
    elif effect is Effect.CREATES:
        found.lift(dev)
        found.writes_unknown = True
    elif effect is Effect.READS:
        if value and points_outside(Word(value), where):
            found.lift(dangerous)
    elif effect in (Effect.WRITES, Effect.CREATES_IN):
        _apply_write(found, effect, value, where)


def _apply_write(
    found: OptionEffects, effect: Effect, value: str | None, where: Where | None
) -> None:
    if value in HARMLESS_SINKS:
        return
    if not value or "$" in value or points_outside(Word(value), where):
        found.lift(CallRating.DANGEROUS)
        found.writes_unknown = found.writes_unknown or not value or "$" in value
        return
    found.lift(CallRating.DEV)
    if effect is Effect.WRITES and value not in found.writes:
        found.writes.append(value)


def _written_operands(spec: Spec, reading: Reading) -> list[str]:
    """Operands the program writes: always (tee, uniq OUT), unless an
    option keeps them (black --check), or only with an option (gofmt -w)."""
    given = {e for e, _ in reading.effects(spec)}
    if Effect.KEEPS_OPERANDS in given:
        return []
    if Effect.WRITES_OPERANDS in given:
        return reading.operands[spec.operands_written or 0 :]
    if spec.operands_written is None or Effect.WRITES_OPERANDS in spec.effects.values():
        return []
    return reading.operands[spec.operands_written :]


def _base_rating(prog: str, texts: list[str]) -> CallRating:
    # Options and operands are rated from the option table (option_effects).
    if prog in SAFE_COMMANDS:
        return CallRating.SAFE
    if prog in READ_BUT_DEV:
        return CallRating.DEV
    if prog == "git":
        return _git_rating(texts)
    if is_python(prog):
        return _python_rating(texts)
    if prog in ("pip", "pip3"):
        return CallRating.SAFE if texts and texts[0] in PIP_SAFE else CallRating.DANGEROUS
    if prog == "node":
        return CallRating.SAFE if texts in (["--version"], ["-v"]) else CallRating.DANGEROUS
    if prog in ("npm", "pnpm", "yarn"):
        return _js_package_rating(texts)
    # cargo and go read workspace configuration that runs programs
    # (.cargo/config.toml's rustc-wrapper, go.mod's toolchain): never safe.
    if prog == "cargo":
        return _sub_rating(
            texts,
            set(),
            {"--version", "-V", "version", "tree", "metadata", "build", "check", "test",
             "clippy", "fmt", "doc", "bench", "run"},
        )  # fmt: skip
    if prog == "go":
        return _sub_rating(
            texts, set(), {"version", "env", "list", "doc", "build", "test", "vet", "fmt", "run"}
        )
    if prog == "docker":
        return _sub_rating(texts, set(), {"ps", "images", "version", "info", "logs", "inspect"})
    if prog == "kubectl":
        return _sub_rating(texts, set(), {"get", "describe", "logs", "version", "top", "explain"})
    if prog in DEV_COMMANDS:
        return CallRating.DEV
    return CallRating.DANGEROUS


def _sub_rating(texts: list[str], safe: set[str], dev: set[str]) -> CallRating:
    sub = texts[0] if texts else ""
    if sub in safe:
        return CallRating.SAFE
    if sub in dev:
        return CallRating.DEV
    return CallRating.DANGEROUS


def _python_rating(texts: list[str]) -> CallRating:
    if texts in (["--version"], ["-V"]):
        return CallRating.SAFE
    if len(texts) >= 2 and texts[0] == "-m":
        module = texts[1]
        # -m imports from the working directory first: a workspace `pip.py`
        # would run, so even `python -m pip list` is not a safe read.
        if module in PY_DEV_MODULES or (module == "pip" and texts[2:3] and texts[2] in PIP_SAFE):
            return CallRating.DEV
    return CallRating.DANGEROUS


def _js_package_rating(texts: list[str]) -> CallRating:
    # Never safe: yarn runs the workspace's `yarnPath` script for any command,
    # npm and pnpm read the workspace's .npmrc.
    sub = texts[0] if texts else ""
    if sub in ("ls", "list", "--version", "-v", "help", "run", "run-script", "test", "t"):
        return CallRating.DEV
    return CallRating.DANGEROUS


def _git_rating(texts: list[str]) -> CallRating:
    """git from the shell is dev at least: the workspace's own ``.git/config``
    (or a workspace crafted to look like a git directory) can make even
    ``git status`` run programs (``core.fsmonitor``, filters, ``core.pager``,
    ``diff.external``, textconv). The git *tools* are the safe way to read a
    repository: they pin all of that. Only ``git --version`` stays safe."""
    if any(t.startswith(("-c", "--config-env", "--exec-path")) for t in _git_globals(texts)):
        return CallRating.DANGEROUS  # -c can set an alias or pager that runs any program
    if texts in (["--version"], ["version"]):
        return CallRating.SAFE
    i = git_subcommand(texts)
    if i is None:
        return CallRating.DEV
    sub, rest = texts[i], texts[i + 1 :]
    if sub in ("push", "clean", "fetch", "pull", "clone", "filter-branch", "gc", "prune"):
        return CallRating.DANGEROUS
    if sub == "reset" and "--hard" in rest:
        return CallRating.DANGEROUS
    if sub == "config":
        reads = {"--get", "--get-all", "--get-regexp", "--list", "-l"}
        return CallRating.DEV if reads & set(rest) else CallRating.DANGEROUS
    # Options that write or run (--output, --ext-diff, grep -O): option_effects.
    if sub in GIT_SAFE or sub in GIT_DEV:
        return CallRating.DEV
    return CallRating.DANGEROUS


_GIT_VALUED = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})


def _git_globals(texts: list[str]) -> list[str]:
    """git's own options, before the subcommand (exact names: git's
    top-level parser takes no abbreviations)."""
    i = git_subcommand(texts)
    return texts[: len(texts) if i is None else i]


def git_subcommand(texts: list[str]) -> int | None:
    """The index of git's subcommand, None if there is none."""
    i = 0
    while i < len(texts) and texts[i].startswith("-"):
        i += 2 if texts[i] in _GIT_VALUED else 1
    return i if i < len(texts) else None
