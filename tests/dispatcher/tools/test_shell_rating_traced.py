"""The promise of ``safe``, checked against what programs really do.

A command rated ``safe`` runs in the sandbox without anyone being asked, so
the rating must never call a command safe that writes a file or starts a
program the line does not name. This file does not trust the option table
it tests: its corpus is written from the programs' manuals (``man sort``,
``sort --help`` ...), every write, run and read option in every spelling
getopt accepts (``-o F``, ``-oF``, ``-uoF``, ``--output=F``, ``--output F``,
``--outp=F``, ``--o F``), plus Hypothesis-built variants that cluster,
abbreviate and reorder them. Every command of it the rules rate ``safe`` is
run for real under ``strace -f`` in a scratch copy of a small workspace with
a ``.env``; the trace must show no file opened for writing, created,
renamed, deleted, linked or re-moded (outside /dev/null, /dev/tty, /proc and
the run's own TMPDIR, where ``tac`` and ``sort`` keep temporary files) and
no ``execve`` of a program the line does not name.

Commands that change the machine (``date --set``, ``hostname -F``) are only
rated, never run.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher import CallRating
from dispatcher.tools.shell.rules import rate_command

STRACE = shutil.which("strace")
TRACED = "execve,openat,open,creat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,truncate,link,symlink,chmod"  # noqa: E501
RUN_TIMEOUT_S = 5.0
# A plain Debian PATH: a version manager's shims (pyenv) are scripts that
# start further programs and would hide what the rated program does.
RUN_PATH = "/usr/local/bin:/usr/bin:/bin"
# Programs that are scripts exec'ing another named program (Debian's egrep
# is `exec grep -E`): the second exec is the same program, not a new one.
TRAMPOLINES = {"egrep": {"grep"}, "fgrep": {"grep"}}
_ALLOWED_PREFIXES = ("/dev/null", "/dev/tty", "/dev/pts/", "/proc/", "/dev/fd/")


def _tree(root: Path) -> None:
    """The scratch workspace every command runs in (a fresh copy each time)."""
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# readme\nneedle\nb\na\n")
    (root / ".env").write_text("TOKEN=secret\n")
    (root / "notes.txt").write_text("b\na\nneedle\n")
    (root / "data.csv").write_text("k,v\n1,x\n2,y\n")
    (root / "list0").write_bytes(b"README.md\0notes.txt\0")
    (root / "src" / "app.py").write_text("print('needle')\n")


def _spellings(
    prog: str, short: str | None, long: str | None, value: str, tail: str = "README.md"
) -> list[str]:
    """Every way getopt_long accepts one option with a value: separate,
    glued, clustered behind a flag (``-u`` for sort, ``-c`` for uniq ...),
    ``--long=v``, ``--long v`` and unique prefixes of the long name."""
    flag = _FLAGS.get(prog, "")
    shorts = [f"-{short}"] + ([f"-{flag}{short}"] if flag else []) if short else []
    longs = (
        [f"--{long[:cut]}" for cut in sorted({1, 2, 3, len(long) - 1, len(long)})] if long else []
    )
    options: list[str] = []
    for option in shorts:
        options += [f"{option} {value}", f"{option}{value}"]
    for option in longs:
        options += [f"{option}={value}", f"{option} {value}"] if value else [option]
    spelled = [f"{prog} {o.strip()} {tail}" for o in dict.fromkeys(options)]
    if short:
        spelled.append(f"{prog} {tail} -{short}{value}")  # GNU getopt permutes
    return spelled


# A harmless flag of each program, to cluster an option behind.
_FLAGS = {
    "sort": "u", "uniq": "c", "grep": "n", "rg": "n", "file": "b", "du": "s", "ls": "l",
    "wc": "l", "diff": "q", "cksum": "z", "md5sum": "z", "head": "v", "tail": "v", "cat": "n",
    "nl": "p", "od": "v", "hexdump": "v", "stat": "t", "tac": "b", "date": "u", "tree": "a",
    "fd": "H", "ag": "i", "jq": "r", "cut": "s", "paste": "s",
}  # fmt: skip

# (program, short, long, value): options that write, run a program, follow
# links or read a file named by their value; from each program's manual.
EFFECT_OPTIONS: list[tuple[str, str | None, str | None, str]] = [
    # writes
    ("sort", "o", "output", ".env"),
    ("sort", "o", "output", "src/app.py"),
    ("sort", "T", "temporary-directory", "src"),
    ("tree", "o", None, ".env"),
    ("file", "C", "compile", ""),
    # runs another program
    ("sort", None, "compress-program", "sh"),
    ("rg", None, "pre", "sh"),
    ("rg", None, "hostname-bin", "id"),
    ("rg", "z", "search-zip", ""),
    ("fd", "x", "exec", "cat"),
    ("fd", "X", "exec-batch", "cat"),
    ("ag", None, "pager", "sh"),
    ("file", "z", "uncompress", ""),
    ("file", "Z", "uncompress-noreport", ""),
    # follows links out of the tree
    ("grep", "R", "dereference-recursive", ""),
    ("rg", "L", "follow", ""),
    ("ls", "L", "dereference", ""),
    ("du", "L", "dereference", ""),
    ("stat", "L", "dereference", ""),
    ("tree", "l", None, ""),
    ("fd", "L", "follow", ""),
    ("ag", "f", "follow", ""),
    ("diff", "r", "recursive", ""),
    # reads a file its value names (inside: fine; outside: dangerous)
    ("sort", None, "files0-from", "/etc/hostname"),
    ("sort", None, "random-source", "/etc/hostname"),
    ("wc", None, "files0-from", "/etc/hostname"),
    ("du", None, "files0-from", "/etc/hostname"),
    ("du", "X", "exclude-from", "/etc/hostname"),
    ("grep", "f", "file", "/etc/hostname"),
    ("grep", None, "exclude-from", "/etc/hostname"),
    ("rg", "f", "file", "/etc/hostname"),
    ("rg", None, "ignore-file", "/etc/hostname"),
    ("diff", None, "from-file", "/etc/hostname"),
    ("diff", "X", "exclude-from", "/etc/hostname"),
    ("file", "f", "files-from", "/etc/hostname"),
    ("file", "m", "magic-file", "/etc/hostname"),
    ("date", "f", "file", "/etc/hostname"),
    ("date", "r", "reference", "/etc/hostname"),
    ("hexdump", "f", "format-file", "/etc/hostname"),
    ("tree", None, "fromfile", "/etc/hostname"),
]

# Plain reads of each program in the safe set: these must stay safe (so the
# property below is not vacuous) and must be seen to change nothing.
SAFE_READS = [
    "ls", "ls -la", "ls -lah src", "ls --color=never -1", "ls -I '*.md'", "ls --sort=size",
    "cat README.md", "cat -n README.md", "head -n 2 README.md", "head -2 README.md",
    "head -c5 README.md", "tail -n1 README.md", "tail -5 README.md", "tail --lines=2 notes.txt",
    "wc -l README.md", "wc --files0-from=list0", "grep -rn needle .",
    "grep -e needle -f notes.txt .env", "grep --exclude-from=notes.txt -r needle .",
    "egrep 'need|le' README.md", "fgrep needle README.md", "grep -A1 -B1 needle README.md",
    "grep -c needle README.md", "rg needle", "rg -n needle src", "rg -g '*.py' needle",
    "rg --ignore-file notes.txt needle", "file README.md", "file -b src/app.py", "which ls",
    "echo hi", "printf '%s\\n' a", "pwd", "date", "date +%s", "date -u", "date -d @0", "whoami",
    "id", "id -u", "uname -a", "stat README.md", "stat -c %s README.md", "du -sh src", "du -a",
    "df -h .", "sort README.md", "sort -u -r notes.txt", "sort -k1,1 -t, data.csv",
    "sort --files0-from=list0", "sort -S 1M notes.txt", "uniq -c notes.txt", "uniq notes.txt",
    "cut -d, -f1 data.csv", "tr a b < README.md", "diff README.md notes.txt",
    "diff -u README.md notes.txt", "cmp README.md notes.txt", "basename src/app.py",
    "dirname src/app.py", "realpath README.md", "readlink -f README.md", "true", "false",
    "test -f README.md", "[ -d src ]", "seq 3", "seq -s, 1 3", "nl README.md",
    "od -c README.md", "hexdump -C README.md", "md5sum README.md", "sha1sum README.md",
    "sha256sum README.md", "sha512sum README.md", "cksum README.md", "column -t -s, data.csv",
    "jq -n 1", "jq -r . /dev/null", "env", "printenv", "printenv PATH", "type ls", "locale",
    "uptime", "free -m", "nproc", "tac README.md", "rev README.md", "fold -w 3 README.md",
    "expand README.md", "comm notes.txt README.md", "join -t, data.csv data.csv",
    "paste -d, README.md notes.txt", "strings README.md", "sleep 0", "hostname", ":",
    "find . -name '*.py'", "find src -type f", "find . -maxdepth 1 -newer README.md",
    "cat README.md | sort | uniq -c", "ls | wc -l", "sh -c 'ls'", "timeout 5 cat README.md",
    "echo x > /dev/null", "ls 2>&1", "cat src/*.py", "git --version", "python3 --version",
    "pip list", "md5sum -c /dev/null", "sort -- -o",
]  # fmt: skip

# Writes, runs and state changes the rating must not call safe, beyond the
# spellings built from EFFECT_OPTIONS.
EXTRA_SEEDS = [
    "uniq notes.txt .env", "uniq -c notes.txt .env", "uniq -f1 notes.txt .env",
    "uniq --skip-fields=1 notes.txt out.txt", "echo x >&.env", "echo x >& .env",
    "echo x > .env", "echo x >> .env", "echo x 1<> .env", "cat README.md >| .env", "ls &> .env",
    "find . -fprint .env", "find . -fprint0 .env", "find . -fprintf .env %p",
    "find . -fls .env", "find . -exec cat {} \\;", "find . -execdir cat {} +",
    "find . -ok cat {} \\;", "find . -delete", "find -L . -name x", "find . -follow",
    "find . -name x -fls out.txt", "sort -uo.env README.md", "sort -ruo .env README.md",
    "sort -mo.env README.md notes.txt", "sort -k1 -o.env README.md",
    "sort -k 1 -uo.env README.md", "sort -t, -uo.env data.csv", "sort --out=.env README.md",
    "sort --outpu .env README.md", "sort --o .env README.md", "sort --compress=sh README.md",
    "sort --comp sh README.md", "sort --co=sh README.md",
    "sort --buffer-size=1M --output=.env README.md", "sort README.md -o .env", "tee .env",
    "touch .env", "mkdir newdir", "tree -o .env", "tree -o.env", "file -C -m src/app.py",
    "git log --output=.env", "git diff --output .env", "git --no-pager log --out=.env",
    "sh -c 'sort -o.env README.md'", "echo $(sort -o.env README.md)",
    "timeout 5 sort -o.env README.md", "cat README.md | sort -o.env",
    "ls; sort -uo .env README.md", "jq --rawfile x /etc/hostname -n '$x'",
    "jq -f /etc/hostname", "jq -L /etc -n 1", "ls --hyperlink=always -Z --zero",
    "ls --unknown-option", "sort --unknown-option README.md", "cat -Q README.md",
    "head --bogus README.md", "grep --pre=sh needle README.md",
]  # fmt: skip

# Change the machine: rated only, never run.
RATE_ONLY = [
    "date -s 2020-01-01", "date --set=2020-01-01", "date --se=2020-01-01",
    "date --s 2020-01-01", "date -us 2020-01-01", "date -s2020-01-01", "hostname -F notes.txt",
    "hostname -Fnotes.txt", "hostname --file notes.txt", "hostname --fi=notes.txt",
    "hostname -b name", "hostname newname",
]  # fmt: skip


def _seeds() -> list[str]:
    seeds = list(SAFE_READS) + list(EXTRA_SEEDS)
    for prog, short, long, value in EFFECT_OPTIONS:
        tail = "README.md" if prog not in ("fd", "ag") else "needle"
        if prog in ("rg", "grep", "ag") and value != "/etc/hostname":
            tail = "needle ."
        seeds += _spellings(prog, short, long, value, tail)
    return list(dict.fromkeys(seeds))


SEEDS = _seeds()


# -- running one command under strace ---------------------------------------


@dataclass(frozen=True, slots=True)
class Observed:
    """What a traced run did that a safe command may not do."""

    writes: list[str]
    execs: list[str]


_LINE = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)\(?(.*)$")
_PATH = re.compile(r'"((?:[^"\\]|\\.)*)"')
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
_CHANGES = frozenset(
    {"creat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "mkdir", "mkdirat",
     "truncate", "link", "symlink", "chmod"}
)  # fmt: skip


def _allowed(path: str, cwd: str, tmpdir: str) -> bool:
    full = os.path.normpath(os.path.join(cwd, path))
    return full.startswith(_ALLOWED_PREFIXES) or full == tmpdir or full.startswith(tmpdir + "/")


def observe(trace: str, cwd: str, tmpdir: str) -> Observed:
    """The writes and execs in an ``strace -f -o`` trace (attempts count,
    whether or not they succeeded: the intent is what the rating judges)."""
    writes: list[str] = []
    execs: list[str] = []
    for line in trace.splitlines():
        m = _LINE.match(line)
        if m is None or "resumed>" in line:
            continue
        call, rest = m[1], m[2]
        paths = _PATH.findall(rest)
        if call == "execve" and paths:
            execs.append(os.path.basename(paths[0]))
        elif call in ("openat", "open") and paths and any(f in rest for f in _WRITE_FLAGS):
            if not _allowed(paths[0], cwd, tmpdir):
                writes.append(f"{call} {paths[0]}")
        elif call in _CHANGES and paths and not all(_allowed(p, cwd, tmpdir) for p in paths):
            writes.append(f"{call} {' '.join(paths)}")
    return Observed(writes, execs)


def run_traced(command: str, fixture: Path) -> Observed:
    """Run ``sh -c command`` under strace in a fresh copy of ``fixture``."""
    with tempfile.TemporaryDirectory(prefix="traced-") as scratch:
        ws = Path(scratch) / "ws"
        shutil.copytree(fixture, ws, symlinks=True)
        tmpdir = Path(scratch) / "tmp"
        home = Path(scratch) / "home"
        tmpdir.mkdir()
        home.mkdir()
        trace = Path(scratch) / "trace"
        env = {"PATH": RUN_PATH, "HOME": str(home), "LANG": "C", "TMPDIR": str(tmpdir)}
        argv = [STRACE or "strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={TRACED}",
                "/bin/sh", "-c", command]  # fmt: skip
        proc = subprocess.Popen(
            argv, cwd=ws, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=RUN_TIMEOUT_S)
        text = trace.read_text(errors="replace") if trace.exists() else ""
        return observe(text, str(ws), str(tmpdir))


def _allowed_execs(command: str, programs: Iterable[str]) -> set[str]:
    named = {"sh", *programs}
    words = set(re.findall(r"[A-Za-z0-9_.+\[-]+", command))
    named |= words & {"timeout", "nice", "stdbuf", "command", "exec", "env"}
    for prog in list(named):
        named |= TRAMPOLINES.get(prog, set())
    return named


def violations(command: str, fixture: Path) -> list[str]:
    """Why ``command``, if rated safe, broke the promise (empty: it kept it)."""
    analysis = rate_command(command, workspace=str(fixture))
    if analysis.rating is not CallRating.SAFE:
        return []
    seen = run_traced(command, fixture)
    allowed = _allowed_execs(command, analysis.programs)
    extra = [e for e in seen.execs if e not in allowed]
    found = [f"writes {w}" for w in seen.writes] + [f"starts {e}" for e in extra]
    return [f"{command!r} rated safe but {f}" for f in found]


def _check_all(commands: list[str], fixture: Path) -> list[str]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = pool.map(lambda c: violations(c, fixture), commands)
        return [v for vs in found for v in vs]


needs_strace = pytest.mark.skipif(STRACE is None, reason="strace is not installed")


@pytest.fixture(scope="module")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("traced") / "ws"
    _tree(root)
    if STRACE is not None:
        probe = subprocess.run([STRACE, "-qq", "-o", "/dev/null", "true"], capture_output=True)
        if probe.returncode != 0:
            pytest.skip(f"strace cannot trace here: {probe.stderr.decode()[:200]}")
    yield root


# -- the tests ----------------------------------------------------------------


def test_the_corpus_is_large() -> None:
    assert len(SEEDS) >= 400, len(SEEDS)


@needs_strace
def test_the_oracle_sees_writes_and_execs(fixture_tree: Path) -> None:
    """Without this, a broken trace parser would pass every command."""
    wrote = run_traced("sort -o.env README.md", fixture_tree)
    assert any(w.endswith(".env") for w in wrote.writes), wrote
    started = run_traced("find . -maxdepth 0 -exec true {} \\;", fixture_tree)
    assert "true" in started.execs, started
    quiet = run_traced("sort README.md", fixture_tree)
    assert quiet.writes == [] and quiet.execs == ["sh", "sort"], quiet


@pytest.mark.parametrize("command", SAFE_READS)
def test_plain_reads_stay_safe(command: str, fixture_tree: Path) -> None:
    assert rate_command(command, workspace=str(fixture_tree)).rating is CallRating.SAFE, command


@pytest.mark.parametrize("command", RATE_ONLY)
def test_changing_the_machine_is_never_safe(command: str, fixture_tree: Path) -> None:
    assert rate_command(command, workspace=str(fixture_tree)).rating is not CallRating.SAFE


@needs_strace
def test_no_safe_command_of_the_corpus_writes_or_starts_a_program(fixture_tree: Path) -> None:
    found = _check_all(SEEDS, fixture_tree)
    assert found == [], "\n".join(found)


# -- Hypothesis: the same options clustered, abbreviated and reordered ---------

_VALUES = st.sampled_from([".env", "src/app.py", "fresh.txt"])


@st.composite
def _variant(draw: st.DrawFn) -> str:
    prog, short, long, value = draw(st.sampled_from(EFFECT_OPTIONS))
    if value in (".env", "src/app.py"):
        value = draw(_VALUES)
    flag = _FLAGS.get(prog, "")
    flags = draw(st.text(alphabet=flag or "-", max_size=2)) if flag else ""
    forms: list[str] = []
    if short:
        forms += [f"-{flags}{short}{value}", f"-{flags}{short} {value}".rstrip()]
    if long:
        cut = draw(st.integers(min_value=1, max_value=len(long)))
        name = long[:cut]
        forms += [f"--{name}={value}" if value else f"--{name}", f"--{name} {value}".rstrip()]
    option = draw(st.sampled_from(forms))
    operands = ["needle", "."] if prog in ("rg", "grep", "ag") else ["README.md"]
    words = [option, *operands]
    if draw(st.booleans()):
        words = [*operands, option]  # after the operands: GNU getopt permutes
    extra = f"-{flag}" if flag and draw(st.booleans()) else ""
    return " ".join(w for w in [prog, extra, *words] if w)


@needs_strace
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=st.lists(_variant(), min_size=8, max_size=8))
def test_generated_spellings_keep_the_promise(commands: list[str], fixture_tree: Path) -> None:
    found = _check_all(commands, fixture_tree)
    assert found == [], "\n".join(found)
