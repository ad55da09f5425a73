"""The option table and its getopt-style reader (dispatcher/tools/shell/
options.py, programs.py): arguments are read the way getopt_long reads
them, every program the shell rates safe or dev has an entry, the safe
entries know every option the installed program documents, and
``Analysis.writes`` names what glued, clustered and abbreviated options
write."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from dispatcher import CallRating
from dispatcher.tools.shell import programs
from dispatcher.tools.shell.options import Spec, read_args, read_find
from dispatcher.tools.shell.rules import (
    DEV_COMMANDS,
    READ_BUT_DEV,
    SAFE_COMMANDS,
    analyze,
    rate_command,
)

SORT = programs.SAFE_SPECS["sort"]


def _opts(spec: Spec, line: str) -> tuple[list[tuple[str, str | None]], list[str]]:
    reading = read_args(spec, line.split())
    return [(o.name, o.value) for o in reading.options], reading.operands


@pytest.mark.parametrize(
    ("line", "options", "operands"),
    [
        ("-o.env x", [("o", ".env")], ["x"]),
        ("-o .env x", [("o", ".env")], ["x"]),
        ("-uo.env x", [("u", None), ("o", ".env")], ["x"]),
        ("-uo .env x", [("u", None), ("o", ".env")], ["x"]),
        ("-ruo .env", [("r", None), ("u", None), ("o", ".env")], []),
        ("--output=.env x", [("output", ".env")], ["x"]),
        ("--output .env x", [("output", ".env")], ["x"]),
        ("--o=.env", [("output", ".env")], []),
        ("--outp .env", [("output", ".env")], []),
        ("x -o y", [("o", "y")], ["x"]),  # GNU getopt permutes
        ("-- -o.env", [], ["-o.env"]),
        ("-k1 -o y", [("k", "1"), ("o", "y")], []),
        ("-t -o y", [("t", "-o")], ["y"]),  # -t takes the next word, dash or not
        ("-ko y", [("k", "o")], ["y"]),  # the value is the rest of the cluster
        ("- x", [], ["-", "x"]),
        ("--check x", [("check", None)], ["x"]),  # optional value: only with =
        ("--check=quiet x", [("check", "quiet")], ["x"]),
    ],
)
def test_sort_is_read_as_getopt_reads_it(
    line: str, options: list[tuple[str, str | None]], operands: list[str]
) -> None:
    assert _opts(SORT, line) == (options, operands)


def test_what_getopt_rejects_is_unknown_or_ambiguous() -> None:
    assert read_args(SORT, ["--c=sh"]).ambiguous == ["--c=sh"]  # check, compress-program
    assert read_args(SORT, ["--s"]).ambiguous == ["--s"]  # sort, stable
    assert read_args(SORT, ["--debug=x"]).unknown == ["--debug=x"]  # takes no value
    assert read_args(SORT, ["-o"]).unknown == ["-o"]  # value missing
    assert read_args(SORT, ["--nope"]).unknown == ["--nope"]
    assert read_args(SORT, ["-uQo.env"]).unknown == ["-Qo.env"]  # the rest is unreadable


def test_entries_that_are_not_plain_getopt() -> None:
    tr = programs.SAFE_SPECS["tr"]
    assert _opts(tr, "a -d") == ([], ["a", "-d"])  # stops at the first operand
    assert _opts(programs.SAFE_SPECS["head"], "-5 f") == ([("NUM", "5")], ["f"])
    assert _opts(programs.SAFE_SPECS["seq"], "-1 3") == ([("NUM", "1")], ["3"])
    jq = programs.SAFE_SPECS["jq"]
    assert _opts(jq, "--arg x 1 .x f") == ([("arg", "x 1")], [".x", "f"])
    assert read_args(jq, ["--ar", "x"]).unknown == ["--ar"]  # jq takes no abbreviations
    assert _opts(programs.SAFE_SPECS["echo"], "-o.env") == ([], ["-o.env"])
    found = read_find(programs.FIND, ["-L", ".", "-name", "x", "-fprint", "o", "-exec", "a", ";"])
    assert [(o.name, o.value) for o in found.options] == [
        ("-L", None),
        ("-name", "x"),
        ("-fprint", "o"),
        ("-exec", "a"),
    ]
    assert found.operands == ["."]


@pytest.mark.parametrize(
    ("command", "writes", "rating"),
    [
        ("sort -o.env x", [".env"], "dev"),
        ("sort -uo .env x", [".env"], "dev"),
        ("sort -uo.env x", [".env"], "dev"),
        ("sort --output=.env x", [".env"], "dev"),
        ("sort --o=.env x", [".env"], "dev"),
        ("sort --outp .env", [".env"], "dev"),
        ("sort x -o.env", [".env"], "dev"),
        ("sort -o /dev/null x", [], "safe"),
        ("sort -o /etc/passwd x", [], "dangerous"),
        ("sort -o ../out x", [], "dangerous"),
        ("echo x >&.env", [".env"], "dev"),
        ("echo x > a; tee b c", ["a", "b", "c"], "dev"),
        ("uniq in out", ["out"], "dev"),
        ("sh -c 'sort -o.env x'", [".env"], "dev"),
        ("echo $(sort -o.env x)", [".env"], "dev"),
        ("git log --output=.env", [".env"], "dev"),
        ("git diff --output .env", [".env"], "dev"),
        ("find . -fprint .env", [".env"], "dev"),
        ("black src", ["src"], "dev"),
        ("black --check src", [], "dev"),
        ("gofmt -l a.go", [], "dev"),
        ("gofmt -w a.go", ["a.go"], "dev"),
        ("ruff check --fix src", ["src"], "dev"),
        ("pytest --junitxml=report.xml", ["report.xml"], "dev"),
        ("less -o.env x", [".env"], "dev"),
        ("pip list --log .env", [".env"], "dev"),
        ("mkdir -p a/b", ["a/b"], "dev"),
    ],
)
def test_analysis_names_what_a_line_writes(command: str, writes: list[str], rating: str) -> None:
    result = analyze(command)
    assert (result.writes, result.rating.value) == (writes, rating), command


def test_writes_no_reading_can_name_are_flagged() -> None:
    assert analyze("echo x > $F").writes_unknown
    assert analyze("file -C -m magic").writes_unknown
    assert not analyze("sort -o.env x").writes_unknown


@pytest.mark.parametrize(
    ("command", "rating"),
    [
        ("sort --c=sh x", CallRating.DANGEROUS),  # ambiguous prefix
        ("sort --co=sh x", CallRating.DANGEROUS),  # --compress-program
        ("sort --compress-prog=sh x", CallRating.DANGEROUS),
        ("sort --comp sh x", CallRating.DANGEROUS),
        ("rg --pr=sh needle", CallRating.DANGEROUS),
        ("diff -l a b", CallRating.DEV),  # pipes through pr
        ("fd -l x", CallRating.DEV),  # runs ls
        ("file --co x", CallRating.DEV),  # --compile writes magic.mgc
        ("ls --unknown-option", CallRating.DEV),
        ("cat -Q x", CallRating.DEV),
        ("date --se=2020-01-01", CallRating.DANGEROUS),
        ("date 01010000", CallRating.DANGEROUS),
        ("hostname --fi=x", CallRating.DANGEROUS),
        ("mypy --python-executable=./x .", CallRating.DANGEROUS),
        ("grep -R x .", CallRating.DEV),
        ("grep -5n x f", CallRating.SAFE),
        ("sort -- -o", CallRating.SAFE),
        ("date -d @0", CallRating.SAFE),
        ("jq --arg x 1 .x f", CallRating.SAFE),
    ],
)
def test_ratings_from_the_table(command: str, rating: CallRating) -> None:
    assert rate_command(command).rating is rating, command


# -- the table itself -----------------------------------------------------------


def test_every_safe_program_has_a_complete_entry() -> None:
    # env is read by the unwrapper (unwrap.unwrap_command): bare `env` prints, `env
    # PROG` is a wrapper, any option makes the line dev. find has its own
    # entry (programs.FIND): its expression is not getopt.
    others = SAFE_COMMANDS - {"env", "find"}
    assert sorted(others - programs.SAFE_SPECS.keys()) == []
    assert all(programs.SAFE_SPECS[p].complete for p in others)


def test_every_dev_program_has_an_entry() -> None:
    known = programs.SAFE_SPECS.keys() | programs.DEV_SPECS.keys()
    assert sorted((READ_BUT_DEV | DEV_COMMANDS) - known) == []


def _names(spec: Spec) -> set[str]:
    shorts = {c for c in spec.short if c not in ":+-"}
    longs = {n.rstrip(":=") for n in spec.long}
    return shorts | longs


@pytest.mark.parametrize(
    "name", sorted({*programs.SAFE_SPECS, *programs.DEV_SPECS, "(pip)", "(git)", "(git grep)"})
)
def test_every_effect_names_an_option_of_its_entry(name: str) -> None:
    spec = {"(pip)": programs.PIP, "(git)": programs.GIT, "(git grep)": programs.GIT_GREP}.get(
        name
    ) or programs.SAFE_SPECS.get(name, programs.DEV_SPECS.get(name))
    assert spec is not None
    assert set(spec.effects) <= _names(spec), name


def _documented(prog: str) -> tuple[set[str], set[str]]:
    """The long and short options ``prog --help`` documents on this machine."""
    out = subprocess.run(
        [prog, "--help"], capture_output=True, text=True, timeout=10, env={"LANG": "C"}
    )
    longs: set[str] = set()
    shorts: set[str] = set()
    for line in (out.stdout + out.stderr).splitlines():
        text = line.strip()
        if text.startswith("-"):
            head = re.split(r"\s{2,}|\t", text, maxsplit=1)[0]
            longs |= set(re.findall(r"--([A-Za-z0-9][\w-]*)", head))
            shorts |= set(re.findall(r"(?:^|[\s,])-([A-Za-z0-9])\b", head))
    return longs, shorts


# Placeholders in help text, not options; programs whose --help is not GNU's.
_NOT_OPTIONS = {"GTYPE-group-format", "LTYPE-line-format", "M"}
_OWN_HELP = {"which", "echo", "printf", "true", "false", ":", "test", "[", "type", "tree"}


@pytest.mark.parametrize("prog", sorted(set(programs.SAFE_SPECS) - _OWN_HELP))
def test_safe_entries_know_every_documented_option(prog: str) -> None:
    """Against the installed program: an option its --help documents and the
    table lacks would rate a plain read dev (never unsafe, but wrong)."""
    if shutil.which(prog) is None:
        pytest.skip(f"{prog} is not installed")
    longs, shorts = _documented(prog)
    spec = programs.SAFE_SPECS[prog]
    assert sorted((longs | shorts) - _names(spec) - _NOT_OPTIONS) == [], prog
