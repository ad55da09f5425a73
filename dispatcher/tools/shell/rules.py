"""Layers 1 and 2 of the shell tool: the blocklist and the per-call rating.

This module walks a command line (pipelines, substitutions, nested shells,
wrappers) and asks, for each simple command, the blocklist (blocklist.py)
and the rating (rating.py); what it concludes is an ``Analysis``
(analysis.py). Which programs are what is families.py; how their options
read, the option table (programs.py).

Both work on the parsed command (lexer.py and script.py), never on the raw string,
so quoting, spacing, flag order, ``$IFS``, backslashes, path-qualified
programs (``/bin/rm``), wrappers (``env``, ``command``, ``exec``, ``nohup``,
``timeout``, ``xargs`` ...) and nested shells (``sh -c``, ``eval``,
here-docs, ``echo ... | sh``) all reach the same checks.

Layer 1, the blocklist, refuses a command outright, whatever the confirmation
mode: rm -r of / or ~ (or a top-level system folder), sudo/su/doas/pkexec,
chmod 777, a download or decoded text piped or substituted into an
interpreter (curl|sh), dd or redirections onto block devices, mkfs and
friends, fork bombs, pkill -9 -f, killall -9, kill -9 -1, shutdown/reboot,
and anything that cannot be parsed with confidence.

Layer 2 rates what is left: ``safe`` (reads: ls, cat, grep -r ...),
``dev`` (builds and tests: pytest, ruff, make, npm run ...) or ``dangerous``
(everything else). A command's rating is the highest of its parts. ``safe``
is a promise that matters: under the default policy a safe command runs in
the sandbox without anyone being asked. So the rating is conservative:

- an argument, option value or redirection naming a path outside the
  workspace (absolute, ``~``, ``..`` escaping, a glob that can match ``..``,
  or a path that resolves through a symlink out of it) makes it dangerous:
  reading ``~/.ssh`` is not a safe read;
- options are read from the option table (programs.py) the way getopt
  reads them (options.py: ``sort -uo.env``, ``--outp=.env``, ``--co=sh``
  are seen for what they are): one that writes a file (``sort -o``) makes
  the command at least dev, dangerous outside the workspace; one that runs
  another program (``rg --pre``, ``sort --compress-program``, ``fd -x``,
  ``find -exec``) dangerous; one that follows links out of the tree
  (``grep -R``, ``rg -L``, ``find -L``, ``du -L``) at least dev; an option
  the table does not know, of a program rated safe, at least dev (see
  option_effects); so do ``xargs`` and every wrapper that is not transparent,
  ``env`` running a program, any variable assignment in front of a
  command (programs obey their environment: ``GIT_CONFIG_*``, ``LESSOPEN``),
  process listings (``ps`` shows other processes' environments when
  unsandboxed), pagers, and ``git`` itself beyond ``--version``: a
  workspace's ``.git/config`` can run programs (``core.fsmonitor``,
  ``core.pager``, filters, textconv) from a plain ``git status``;
- a program named by a path (``./ls``) that is not an installed system
  program, or a bare name that resolves into the workspace, is dangerous:
  the name no longer says what runs.

Each simple command is also a *part* with a scope key (program and
subcommand: ``git status``, ``npm test``, ``ls``) and its own rating; an
"allow for session" grant is stored per part (see ``ShellTool.scope``).

The blocklist is a seatbelt, not a wall: a determined script can always
compute a command at run time. The sandbox (layer 4's bubblewrap) is the wall.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable

from dispatcher.tool import CallRating
from dispatcher.tools.shell.analysis import (
    HARMLESS_SINKS,
    Analysis,
    Part,
    Where,
    max_rating,
    points_outside,
)
from dispatcher.tools.shell.blocklist import BLOCK_DEVICE, check_blocklist, is_critical_path
from dispatcher.tools.shell.braces import expand_braces
from dispatcher.tools.shell.families import (
    DECODERS,
    DEV_COMMANDS,
    FETCHERS,
    READ_BUT_DEV,
    SAFE_COMMANDS,
    SCRIPT_RUNNERS,
    SHELLS,
    SUBCOMMAND_PROGRAMS,
    SYSTEM_BIN_DIRS,
    TRANSPARENT_WRAPPERS,
    is_python,
)
from dispatcher.tools.shell.nested import (
    find_starts,
    nested_script,
    reads_script_from_stdin,
    shell_positional,
)
from dispatcher.tools.shell.rating import classify, git_subcommand, rate_program
from dispatcher.tools.shell.script import Command, Pipeline, parse
from dispatcher.tools.shell.tokens import ShellSyntaxInvalid, Word
from dispatcher.tools.shell.unwrap import (
    ASSIGNMENT,
    Unwrapped,
    program_name,
    unwrap,
    unwrap_command,
)

MAX_DEPTH = 8
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})


def analyze(
    command: str,
    depth: int = 0,
    where: Where | None = None,
    positional: list[str] | None = None,
) -> Analysis:
    """Blocklist verdicts, the rating and the parts of ``command`` (a shell
    string). ``where``: the workspace and working directory, to resolve
    arguments; ``positional``: ``$1 ...`` of a ``sh -c 'script' _ a b``."""
    result = Analysis()
    if depth > MAX_DEPTH:
        result.block("the command nests shells too deeply to check")
        return result
    try:
        script = parse(command, depth, positional)
        for fn in script.functions:
            if fn.name in fn.body_words and fn.body_ops & {"|", "&", "|&"}:
                result.block(f"fork bomb: function {fn.name!r} spawns copies of itself")
        for inner in script.substitutions:
            result.merge(analyze(inner, depth + 1, where))
        for pipeline in script.pipelines:
            for index, cmd in enumerate(pipeline.commands):
                result.merge(_analyze_command(cmd, pipeline, index, depth, where))
    except ShellSyntaxInvalid as exc:
        # Also raised from inside, e.g. by the string of `env -S '...'`.
        result.block(f"the command cannot be parsed with confidence ({exc})")
    return result


def rate_command(
    command: str,
    *,
    workspace: str | None = None,
    cwd: str | None = None,
    env_names: Iterable[str] = (),
) -> Analysis:
    """The analysis of one shell call as the tool receives it: ``command``
    run in ``cwd`` (relative to ``workspace``) with extra ``env`` variables.

    Any ``env`` entry lifts every part to at least dev (programs obey their
    environment: ``HOME`` pointing at a crafted ``.gitconfig``, ``LESSOPEN``,
    ``RIPGREP_CONFIG_PATH``), and the variables' names join each part's scope
    key: a grant for ``npm test`` is not a grant for ``npm test`` with
    ``NODE_ENV`` set."""
    where = Where.of(workspace, cwd) if workspace is not None else None
    result = analyze(command, 0, where)
    names = sorted(set(env_names))
    if names:
        suffix = " [env " + ",".join(names) + "]"
        result.lift(CallRating.DEV)
        result.parts = [
            Part(p.key + suffix, max_rating(p.rating, CallRating.DEV)) for p in result.parts
        ]
    if not result.parts:
        # Nothing but comments or blank lines: still one part, so that no
        # command is ever covered by an empty set of grants.
        result.parts.append(Part("(empty)", result.rating))
    return result


def _analyze_command(
    cmd: Command, pipeline: Pipeline, index: int, depth: int, where: Where | None
) -> Analysis:
    """One simple command of ``pipeline``: its redirections, what stands in
    front of its program (assignments, wrappers), then the program with its
    arguments, fed items and nested scripts."""
    result = Analysis()
    writes, stdin_texts = _read_redirects(result, cmd, where)
    # Brace expansion first: `rm -rf /{,}` is `rm -rf / /`.
    words = [
        Word(text, w.dynamic, w.substitutions, w.quoted)
        for w in cmd.words
        for text in expand_braces(w.text)
    ]
    unwrapped = unwrap_command(words, depth)
    argv = unwrapped.argv
    prefix, wrapped = _rate_prefix(result, words[: len(words) - len(argv)], unwrapped, where)
    if not argv:
        return _without_program(
            result, unwrapped, writes, bool(cmd.redirects), wrapped, prefix, where
        )
    head, args = argv[0], argv[1:]
    if head.dynamic:
        # The program's name is computed at run time: nothing can vouch for it.
        result.lift(CallRating.DANGEROUS)
        result.programs.add("(computed)")
        _rate_writes(result, writes, where)
        result.parts.append(Part("= " + " ".join(w.text for w in argv), result.rating))
        return result
    prog = program_name(head)
    result.programs.add(prog)
    feed = _fed_items(unwrapped, pipeline, index, stdin_texts, depth)
    check_blocklist(result, prog, args + [Word(t) for t in feed])
    _runs_commands(result, prog, args, depth, where)
    nested = nested_script(prog, args)
    if nested is not None:
        inner = analyze(nested, depth + 1, where, shell_positional(prog, args))
        result.merge(inner)
        result.lift(inner.rating)
    elif reads_script_from_stdin(prog, args):
        _check_stdin_feed(result, prog, pipeline, index, stdin_texts, depth)
        result.lift(CallRating.DANGEROUS)
    _check_substituted_downloads(result, prog, args, depth)
    if nested is None:
        rating, effects = rate_program(prog, args, where)
        result.lift(rating)
        _note_writes(result, effects.writes, where)
        result.writes_unknown = result.writes_unknown or effects.writes_unknown
    if _foreign_program(head, where):
        result.lift(CallRating.DANGEROUS)
    _rate_writes(result, writes, where)
    result.parts.append(Part(prefix + scope_key(head, args), result.rating))
    return result


def _read_redirects(
    result: Analysis, cmd: Command, where: Where | None
) -> tuple[list[str], list[str]]:
    """The files ``cmd``'s redirections write (a block device blocks the
    line) and the texts they feed its stdin (here-strings, here-docs)."""
    writes: list[str] = []
    stdin_texts: list[str] = []
    for redirect in cmd.redirects:
        target = redirect.target.text if redirect.target is not None else ""
        if redirect.op in _WRITE_REDIRECTS or _writes_file(redirect.op, target):
            if BLOCK_DEVICE.match(target):
                result.block(f"writing to the block device {target}")
            elif target not in HARMLESS_SINKS:
                writes.append(target)
        if redirect.op == "<<<":
            stdin_texts.append(target)
        elif redirect.heredoc is not None:
            stdin_texts.append(redirect.heredoc)
        elif (
            redirect.op in ("<", "<>")
            or (redirect.op in (">&", "<&") and not target.isdigit() and target != "-")
        ) and (redirect.target is not None and points_outside(redirect.target, where)):
            # Reading a file is only a safe read inside the workspace.
            result.lift(CallRating.DANGEROUS)
    return writes, stdin_texts


def _rate_prefix(
    result: Analysis, front: list[Word], unwrapped: Unwrapped, where: Where | None
) -> tuple[str, list[str]]:
    """Rate the words in front of the program (``front``: assignments and
    wrappers with their options); return the scope key's prefix naming them
    and the wrappers that are not transparent."""
    # `xargs -a /etc/passwd`, `HOME=/tmp/x git ...` point outside as much as
    # any argument does.
    for word in front:
        value = word.text.split("=", 1)[1] if ASSIGNMENT.match(word.text) else word.text
        if points_outside(Word(value, word.dynamic), where):
            result.lift(CallRating.DANGEROUS)
    wrapped = [w for w in unwrapped.wrappers if w not in TRANSPARENT_WRAPPERS]
    if not unwrapped.argv and wrapped == ["env"] and not unwrapped.assigns:
        wrapped = []  # a bare `env` only prints the (scrubbed) environment
    if unwrapped.assigns or wrapped:
        # Programs obey their environment (PATH=.; ls runs ./ls), and every
        # wrapper but the transparent ones adds behaviour of its own.
        result.lift(CallRating.DEV)
    # The grant key names the wrappers and variables too: a grant for `ls` is
    # not one for `xargs ls` or `PATH=... ls`.
    assigned = [w.text.split("=", 1)[0] + "=" for w in front if ASSIGNMENT.match(w.text)]
    return "".join(f"{w} " for w in [*assigned, *wrapped]), wrapped


def _without_program(
    result: Analysis,
    unwrapped: Unwrapped,
    writes: list[str],
    redirects: bool,
    wrapped: list[str],
    prefix: str,
    where: Where | None,
) -> Analysis:
    """A simple command that names no program: an assignment, a bare
    ``env``, ``command -v``, a redirection alone or a reserved word."""
    _rate_writes(result, writes, where)
    if unwrapped.label == "(no program)" and not (writes or redirects or wrapped):
        if unwrapped.assigns:
            result.parts.append(Part("(assignment)", result.rating))
        return result  # `{` or `then` alone runs nothing by itself
    label = prefix.strip() if unwrapped.label == "(no program)" and wrapped else unwrapped.label
    result.parts.append(Part(label, result.rating))
    return result


def _check_substituted_downloads(result: Analysis, prog: str, args: list[Word], depth: int) -> None:
    """Block an interpreter given a download's output as an argument:
    ``sh -c "$(curl ...)"``, ``eval $(wget -O- ...)``."""
    if prog not in SHELLS | SCRIPT_RUNNERS | {"source", ".", "eval"}:
        return
    for word in args:
        for inner_text in word.substitutions:
            if analyze(inner_text, depth + 1).programs & FETCHERS:
                result.block(f"running downloaded code with {prog}")


def _foreign_program(head: Word, where: Where | None) -> bool:
    """A program that is workspace content (or somewhere unknown), whatever
    its name says: ``./ls``, ``bin/cat``, or ``ls`` found first in the
    workspace on PATH."""
    text = head.text
    if "/" in text:
        if not text.startswith(SYSTEM_BIN_DIRS):
            return True
        return where is not None and where.contains(os.path.realpath(text))
    if where is None:
        return False
    found = shutil.which(text)
    return found is not None and where.contains(os.path.realpath(found))


def scope_key(head: Word, args: list[Word]) -> str:
    """What an "allow for session" grant of this simple command names: the
    program (as written when it is a path) and, for programs with
    subcommands, the subcommand: ``git status``, ``npm test``, ``ls``;
    ``python -m pytest``; an interpreter's script (``python build.py``)."""
    prog = program_name(head)
    name = head.text if "/" in head.text else prog
    texts = [a.text for a in args]
    if prog == "git":
        i = git_subcommand(texts)
        return f"{name} {texts[i]}" if i is not None else name
    interpreter = prog in SHELLS or prog in SCRIPT_RUNNERS or is_python(prog)
    if interpreter:
        for k, t in enumerate(texts):
            if t in ("-m", "-c", "-e", "-r", "-E") and k + 1 < len(texts):
                # -c/-e code is part of the key: a grant for one snippet is not
                # a grant for any code.
                return f"{name} {t} {texts[k + 1]}"
            if not t.startswith("-"):
                return f"{name} {t}"
        return name
    if prog in SUBCOMMAND_PROGRAMS:
        sub = next((t for t in texts if not t.startswith("-")), None)
        return f"{name} {sub}" if sub is not None else name
    return name


def _fed_items(
    unwrapped: Unwrapped,
    pipeline: Pipeline,
    index: int,
    stdin_texts: list[str],
    depth: int,
) -> list[str]:
    """The items ``xargs`` appends to its command, as far as they are fixed:
    ``echo / | xargs rm -rf`` is ``rm -rf /`` to the blocklist."""
    if "xargs" not in unwrapped.wrappers:
        return []
    items: list[str] = list(stdin_texts)
    for upstream in pipeline.commands[:index]:
        up = unwrap(upstream.words, depth)
        if not up or up[0].dynamic:
            continue
        up_prog, up_args = program_name(up[0]), [w.text for w in up[1:]]
        if up_prog in ("echo", "printf"):
            items += [t for t in up_args if t not in ("-e", "-n", "-E")]
        elif up_prog == "find":
            items += find_starts(up_args)
        for redirect in upstream.redirects:
            if redirect.op == "<<<" and redirect.target is not None:
                items.append(redirect.target.text)
    return [t for item in items for t in item.split()]


_EXEC_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _runs_commands(
    result: Analysis, prog: str, args: list[Word], depth: int, where: Where | None
) -> None:
    """Commands a program runs from its own arguments: ``find -exec``,
    ``alias name='...'``. Each is analysed as a command line of its own,
    with find's ``{}`` standing for each starting point."""
    texts = [a.text for a in args]
    if prog == "alias":
        for t in texts:
            if "=" in t:
                result.merge(analyze(t.split("=", 1)[1], depth + 1, where))
        return
    if prog == "parallel" and ":::" in texts:
        # parallel CMD ::: items runs CMD with each item appended.
        cut = texts.index(":::")
        first = next((k for k, t in enumerate(texts[:cut]) if not t.startswith("-")), cut)
        inner = texts[first:cut]
        items = [t for t in texts[cut + 1 :] if t not in (":::", "::::")]
        result.merge(analyze(shlex.join(inner + items), depth + 1, where))
        return
    if prog != "find":
        return
    starts = find_starts(texts)[:16]
    if "-delete" in texts:
        for start in starts:
            if is_critical_path(start):
                result.block(f"find {start} -delete (the root, a home folder or a system folder)")
    i = 0
    while i < len(texts):
        if texts[i] not in _EXEC_ACTIONS:
            i += 1
            continue
        j = i + 1
        while j < len(texts) and texts[j] not in (";", "+"):
            j += 1
        inner = texts[i + 1 : j]
        i = j + 1
        for start in starts if inner else []:
            line = shlex.join([t.replace("{}", start) for t in inner])
            result.merge(analyze(line, depth + 1, where))


def _writes_file(op: str, target: str) -> bool:
    """``>&word`` with a word that is not a descriptor is bash's ``&>word``."""
    return op == ">&" and not target.isdigit() and target != "-"


def _rate_writes(result: Analysis, writes: list[str], where: Where | None = None) -> None:
    for target in writes:
        outside = "$" in target or points_outside(Word(target), where)
        result.lift(CallRating.DANGEROUS if outside else CallRating.DEV)
    _note_writes(result, writes, where)


def _note_writes(result: Analysis, writes: list[str], where: Where | None) -> None:
    """Record the workspace paths among ``writes`` (see Analysis.writes)."""
    for target in writes:
        if "$" in target:
            result.writes_unknown = True
        elif not points_outside(Word(target), where) and target not in result.writes:
            result.writes.append(target)


def _check_stdin_feed(
    result: Analysis,
    prog: str,
    pipeline: Pipeline,
    index: int,
    own_texts: list[str],
    depth: int,
) -> None:
    """Look at whatever is fed to an interpreter's stdin."""
    texts = list(own_texts)
    for upstream in pipeline.commands[:index]:
        up = unwrap(upstream.words, depth)
        if up and not up[0].dynamic:
            up_prog = program_name(up[0])
            if up_prog in FETCHERS:
                result.block(f"piping a download into {prog}")
            elif up_prog in DECODERS:
                result.block(f"piping decoded or transformed text into {prog}")
            elif up_prog in ("echo", "printf") and not any(w.dynamic for w in up[1:]):
                texts.append(" ".join(w.text for w in up[1:] if w.text not in ("-e", "-n")))
        for redirect in upstream.redirects:
            if redirect.op == "<<<" and redirect.target is not None:
                texts.append(redirect.target.text)
            elif redirect.heredoc is not None:
                texts.append(redirect.heredoc)
    if prog in SHELLS:
        for text in texts:
            result.merge(analyze(text, depth + 1))


__all__ = [
    "DEV_COMMANDS",
    "READ_BUT_DEV",
    "SAFE_COMMANDS",
    "Analysis",
    "Part",
    "ShellSyntaxInvalid",
    "Where",
    "analyze",
    "classify",
    "is_critical_path",
    "max_rating",
    "program_name",
    "rate_command",
    "scope_key",
    "unwrap",
]
