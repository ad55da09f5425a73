"""Layers 1 and 2 of the shell tool: the blocklist and the per-call rating.

Both work on the parsed command (see shell_lexer), never on the raw string,
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

import fnmatch
import glob
import os
import posixpath
import re
import shlex
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field

from dispatcher.tool import CallRating
from dispatcher.tools.shell import programs
from dispatcher.tools.shell.lexer import (
    Command,
    Pipeline,
    ShellSyntaxInvalid,
    Word,
    expand_braces,
    parse,
    tokenize,
)
from dispatcher.tools.shell.options import Effect, Reading, Spec, read_args, read_find

MAX_DEPTH = 8
_ORDER = {CallRating.SAFE: 0, CallRating.DEV: 1, CallRating.DANGEROUS: 2}

SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "yash", "csh", "tcsh"}
)
SCRIPT_RUNNERS = frozenset({"python", "python2", "python3", "perl", "ruby", "node", "php", "lua"})
FETCHERS = frozenset(
    {"curl", "wget", "fetch", "aria2c", "http", "https", "lwp-request", "nc", "ncat"}
)
DECODERS = frozenset(
    {"base64", "base32", "basenc", "xxd", "openssl", "gzip", "gunzip", "zcat", "bzip2", "bzcat",
     "xz", "xzcat", "unxz", "uudecode", "rev", "tr"}
)  # fmt: skip
PRIVILEGE = frozenset({"sudo", "su", "doas", "pkexec", "run0", "sudoedit", "machinectl"})
POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
FORMATTERS = frozenset({"mkfs", "mke2fs", "mkswap", "wipefs", "mkntfs", "mkdosfs", "mkexfatfs"})
SYSTEM_DIRS = frozenset(
    {"bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "media", "mnt",
     "opt", "proc", "root", "run", "sbin", "snap", "srv", "sys", "usr", "var"}
)  # fmt: skip
_BLOCK_DEVICE = re.compile(
    r"^/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|dm-\d|md\d|loop\d|"
    r"sr\d|fd\d|mapper/|mem$|kmem$|port$)"
)
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_HARMLESS_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_RESERVED = frozenset(
    {"{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"}
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")

_XARGS_VALUE_OPTIONS = frozenset(
    {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof",
     "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}
)  # fmt: skip
# Wrappers that run the rest of their arguments as a command:
# name -> (options that take a value, positional arguments before the command).
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "nohup": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "command": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "setsid": (frozenset(), 0),
    "unbuffer": (frozenset(), 0),
    "chronic": (frozenset(), 0),
    "busybox": (frozenset(), 0),
    "xargs": (_XARGS_VALUE_OPTIONS, 0),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "flock": (frozenset({"-w", "-E", "--timeout", "--conflict-exit-code"}), 1),
    "taskset": (frozenset(), 1),
    "strace": (frozenset({"-e", "-o", "-p", "-s", "-u"}), 0),
    "ltrace": (frozenset({"-e", "-o", "-p", "-s", "-u"}), 0),
    "caffeinate": (frozenset(), 0),
}

SAFE_COMMANDS = frozenset(
    {"ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "tree", "file", "which",
     "echo", "printf", "pwd", "date", "whoami", "id", "uname", "stat", "du", "df", "sort",
     "uniq", "cut", "tr", "diff", "cmp", "basename", "dirname", "realpath", "readlink", "true",
     "false", "test", "[", "seq", "nl", "od", "hexdump", "md5sum", "sha1sum", "sha256sum",
     "sha512sum", "cksum", "column", "jq", "env", "printenv", "type", "locale", "uptime",
     "free", "nproc", "tac", "rev", "fold", "expand", "comm", "join", "paste", "strings",
     "sleep", "hostname", ":", "find", "tokei", "ag", "fd"}
)  # fmt: skip
# Never safe, though they only read: process listings show other processes'
# command lines and environments (the server's token, when unsandboxed);
# pagers run LESSOPEN/LESSKEY programs and shell escapes; cloc runs
# extractors (--extract-with).
READ_BUT_DEV = frozenset(
    {"ps", "pgrep", "pidof", "top", "htop", "atop", "pstree", "lsof", "w", "who", "fuser",
     "less", "more", "most", "pg", "man", "info", "cloc"}
)  # fmt: skip
# Wrappers that run exactly the program they name, adding nothing it could
# obey: a command behind them is rated as if it stood alone. Every other
# wrapper (xargs, env with a program, strace, flock, busybox ...) lifts the
# rating to at least dev.
TRANSPARENT_WRAPPERS = frozenset({"command", "builtin", "exec", "nice", "timeout", "stdbuf"})
# Where installed programs live: a path-qualified program elsewhere (./ls,
# tools/cat) is workspace content, whatever its name.
SYSTEM_BIN_DIRS = (
    "/usr/bin/", "/bin/", "/usr/sbin/", "/sbin/", "/usr/local/bin/", "/usr/local/sbin/",
)  # fmt: skip
# Programs whose first positional argument is a subcommand: an "allow for
# session" grant for ``npm test`` does not cover ``npm publish``.
SUBCOMMAND_PROGRAMS = frozenset(
    {"git", "npm", "pnpm", "yarn", "npx", "bun", "deno", "cargo", "go", "docker", "podman",
     "kubectl", "helm", "pip", "pip3", "uv", "poetry", "pipx", "conda", "make", "just", "rake",
     "bundle", "gem", "composer", "dotnet", "gradle", "gradlew", "mvn", "bazel", "sbt", "tox",
     "nox", "ninja", "terraform", "apt", "apt-get", "brew", "systemctl", "rustup", "kubectx"}
)  # fmt: skip
MAX_GLOB_MATCHES = 256
DEV_COMMANDS = frozenset(
    {"pytest", "py.test", "mypy", "ruff", "black", "isort", "flake8", "pylint", "pyright",
     "eslint", "prettier", "tsc", "jest", "vitest", "mocha", "make", "cmake", "ninja", "meson",
     "mvn", "gradle", "gradlew", "tox", "nox", "rustfmt", "gofmt", "shellcheck", "tee",
     "mkdir", "touch", "coverage", "ctest", "bazel", "sbt", "dotnet"}
)  # fmt: skip
_GIT_SAFE = frozenset(
    {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog",
     "grep", "ls-tree", "cat-file", "branch", "tag", "remote", "stash", "config", "version",
     "help", "reflog", "whatchanged", "name-rev", "merge-base", "rev-list", "count-objects",
     "show-ref", "for-each-ref", "check-ignore", "var"}
)  # fmt: skip
_GIT_DEV = frozenset(
    {"add", "commit", "checkout", "switch", "restore", "stash", "merge", "rebase", "cherry-pick",
     "revert", "init", "mv", "rm", "reset", "apply", "am", "branch", "tag", "notes", "format-patch"}
)  # fmt: skip
_PY_DEV_MODULES = frozenset(
    {"pytest", "mypy", "ruff", "black", "isort", "flake8", "pylint", "unittest", "pyright",
     "coverage", "tox", "nox", "doctest", "compileall", "py_compile", "build"}
)  # fmt: skip
_PIP_SAFE = frozenset({"list", "show", "freeze", "check", "--version", "-V", "help"})


def max_rating(a: CallRating, b: CallRating) -> CallRating:
    """The stricter of two ratings."""
    return a if _ORDER[a] >= _ORDER[b] else b


@dataclass(frozen=True, slots=True)
class Where:
    """Where a command runs: the real paths of the workspace root and of the
    working directory. With it, arguments are resolved (symlinks included);
    without it, only their spelling is judged."""

    workspace: str
    cwd: str

    @classmethod
    def of(cls, workspace: str, cwd: str | None = None) -> Where:
        root = os.path.realpath(workspace)
        return cls(root, os.path.realpath(os.path.join(root, cwd or ".")))

    def contains(self, real: str) -> bool:
        return real == self.workspace or real.startswith(self.workspace.rstrip(os.sep) + os.sep)


@dataclass(frozen=True, slots=True)
class Part:
    """One simple command of a line: its scope key (``git status``, ``ls``)
    and its own rating. A session grant covers a part with the same key and
    a rating no higher than the granted one."""

    key: str
    rating: CallRating


@dataclass(slots=True)
class Analysis:
    """What the rules concluded about one command line.

    ``writes``: the workspace paths, as written (relative to the command's
    working folder), that the line's redirections, option values (``sort
    -o.env`` -> ``.env``, ``--output=.env``) and written operands (``tee
    F``, ``uniq IN OUT``, ``black src``: a folder stands for files under
    it) would write, in order; a ``cd`` earlier in the line is not
    followed. Targets outside the workspace are not listed (they rate the
    line dangerous). ``writes_unknown``: the line writes
    somewhere no static reading can name (``> $F``, ``file -C``)."""

    blocked: list[str] = field(default_factory=list)
    rating: CallRating = CallRating.SAFE
    programs: set[str] = field(default_factory=set)
    parts: list[Part] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    writes_unknown: bool = False

    def merge(self, other: Analysis) -> None:
        for reason in other.blocked:
            if reason not in self.blocked:
                self.blocked.append(reason)
        self.rating = max_rating(self.rating, other.rating)
        self.programs |= other.programs
        self.parts.extend(other.parts)
        self.writes.extend(w for w in other.writes if w not in self.writes)
        self.writes_unknown = self.writes_unknown or other.writes_unknown

    def lift(self, rating: CallRating) -> None:
        self.rating = max_rating(self.rating, rating)

    def block(self, reason: str) -> None:
        if reason not in self.blocked:
            self.blocked.append(reason)
        self.rating = CallRating.DANGEROUS


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


@dataclass(slots=True)
class _Unwrapped:
    argv: list[Word]
    wrappers: list[str] = field(default_factory=list)
    # A VAR=value in front of the program (or given to env, or env -i/-u).
    assigns: bool = False
    # What runs when argv is empty: env printing, `command -v`, nothing.
    label: str = "(no program)"


def unwrap(words: list[Word], depth: int = 0) -> list[Word]:
    """The words of the program that actually runs: reserved words,
    assignments and wrappers (env, command, exec, nohup, timeout ...) removed."""
    return _unwrap(words, depth).argv


def _unwrap(words: list[Word], depth: int) -> _Unwrapped:
    info = _Unwrapped([])
    i = 0
    while i < len(words):
        w = words[i]
        text = w.text
        if text == "function" and not w.quoted:
            i += 2  # `function name { body }`: the body follows
            continue
        if text in _RESERVED and not w.quoted:
            i += 1
            continue
        if _ASSIGNMENT.match(text):
            info.assigns = True
            i += 1
            continue
        name = posixpath.basename(text)
        if name == "env":
            info.wrappers.append("env")
            info.label = "env"
            i += 1
            while i < len(words):
                opt = words[i].text
                if opt in ("-u", "--unset", "-C", "--chdir"):
                    info.assigns = True
                    i += 2
                elif opt in ("-S", "--split-string") or opt.startswith(("-S", "--split-string=")):
                    # env -S 'rm -rf /' splits its argument into a command line.
                    if opt in ("-S", "--split-string"):
                        split = words[i + 1].text if i + 1 < len(words) else ""
                        i += 2
                    else:
                        split = opt.split("=", 1)[1] if opt.startswith("--") else opt[2:]
                        i += 1
                    extra = [t for t in tokenize(split, depth=depth + 1) if isinstance(t, Word)]
                    inner = _unwrap(extra + words[i:], depth + 1)
                    inner.wrappers[:0] = info.wrappers
                    inner.assigns = True
                    return inner
                elif opt == "--":
                    i += 1
                    break
                elif opt.startswith("-") or _ASSIGNMENT.match(opt):
                    info.assigns = True
                    i += 1
                else:
                    break
            continue
        if name == "command" and i + 1 < len(words) and words[i + 1].text in ("-v", "-V"):
            info.label = "command -v"
            return info  # only looks a name up
        wrapper = _WRAPPERS.get(name)
        if wrapper is None or w.dynamic:
            info.argv = words[i:]
            return info
        info.wrappers.append(name)
        takes_value, positionals = wrapper
        i += 1
        while i < len(words):
            opt = words[i].text
            if opt == "--":
                i += 1
                break
            if not opt.startswith("-") or opt == "-":
                break
            i += 2 if opt in takes_value else 1
        i += positionals
    return info


def program_name(word: Word) -> str:
    """The program a command word names, without its directory (``/bin/rm`` -> ``rm``)."""
    return posixpath.basename(word.text)


def _analyze_command(
    cmd: Command, pipeline: Pipeline, index: int, depth: int, where: Where | None
) -> Analysis:
    result = Analysis()
    writes: list[str] = []
    stdin_texts: list[str] = []
    for redirect in cmd.redirects:
        target = redirect.target.text if redirect.target is not None else ""
        if redirect.op in _WRITE_REDIRECTS or _writes_file(redirect.op, target):
            if _BLOCK_DEVICE.match(target):
                result.block(f"writing to the block device {target}")
            elif target not in _HARMLESS_SINKS:
                writes.append(target)
        if redirect.op == "<<<":
            stdin_texts.append(target)
        elif redirect.heredoc is not None:
            stdin_texts.append(redirect.heredoc)
        elif (
            redirect.op in ("<", "<>")
            or (redirect.op in (">&", "<&") and not target.isdigit() and target != "-")
        ) and (redirect.target is not None and _points_outside(redirect.target, where)):
            # Reading a file is only a safe read inside the workspace.
            result.lift(CallRating.DANGEROUS)
    # Brace expansion first: `rm -rf /{,}` is `rm -rf / /`.
    words = [
        Word(text, w.dynamic, w.substitutions, w.quoted)
        for w in cmd.words
        for text in expand_braces(w.text)
    ]
    unwrapped = _unwrap(words, depth)
    argv = unwrapped.argv
    # What the wrappers and assignments in front say: `xargs -a /etc/passwd`,
    # `HOME=/tmp/x git ...` point outside as much as any argument does.
    for word in words[: len(words) - len(argv)]:
        value = word.text.split("=", 1)[1] if _ASSIGNMENT.match(word.text) else word.text
        if _points_outside(Word(value, word.dynamic), where):
            result.lift(CallRating.DANGEROUS)
    wrapped = [w for w in unwrapped.wrappers if w not in TRANSPARENT_WRAPPERS]
    if not argv and wrapped == ["env"] and not unwrapped.assigns:
        wrapped = []  # a bare `env` only prints the (scrubbed) environment
    if unwrapped.assigns or wrapped:
        # Programs obey their environment (PATH=.; ls runs ./ls), and every
        # wrapper but the transparent ones adds behaviour of its own.
        result.lift(CallRating.DEV)
    # The grant key names the wrappers and variables too: a grant for `ls` is
    # not one for `xargs ls` or `PATH=... ls`.
    assigned = [
        w.text.split("=", 1)[0] + "="
        for w in words[: len(words) - len(argv)]
        if _ASSIGNMENT.match(w.text)
    ]
    prefix = "".join(f"{w} " for w in [*assigned, *wrapped])
    if not argv:
        _rate_writes(result, writes, where)
        if unwrapped.label == "(no program)" and not (writes or cmd.redirects or wrapped):
            if unwrapped.assigns:
                result.parts.append(Part("(assignment)", result.rating))
            return result  # `{` or `then` alone runs nothing by itself
        label = prefix.strip() if unwrapped.label == "(no program)" and wrapped else unwrapped.label
        result.parts.append(Part(label, result.rating))
        return result
    head = argv[0]
    if head.dynamic:
        # The program's name is computed at run time: nothing can vouch for it.
        result.lift(CallRating.DANGEROUS)
        result.programs.add("(computed)")
        _rate_writes(result, writes, where)
        result.parts.append(Part("= " + " ".join(w.text for w in argv), result.rating))
        return result
    prog = program_name(head)
    args = argv[1:]
    result.programs.add(prog)
    feed = _fed_items(unwrapped, pipeline, index, stdin_texts, depth)
    _blocklist(result, prog, args + [Word(t) for t in feed])
    _runs_commands(result, prog, args, depth, where)
    nested = _nested_script(prog, args)
    if nested is not None:
        inner = analyze(nested, depth + 1, where, _shell_positional(prog, args))
        result.merge(inner)
        result.lift(inner.rating)
    elif _reads_script_from_stdin(prog, args):
        _check_stdin_feed(result, prog, pipeline, index, stdin_texts, depth)
        result.lift(CallRating.DANGEROUS)
    if prog in SHELLS | SCRIPT_RUNNERS | {"source", ".", "eval"}:
        for word in args:
            for inner_text in word.substitutions:
                if analyze(inner_text, depth + 1).programs & FETCHERS:
                    result.block(f"running downloaded code with {prog}")
    if nested is None:
        rating, effects = _classify(prog, args, where)
        result.lift(rating)
        _note_writes(result, effects.writes, where)
        result.writes_unknown = result.writes_unknown or effects.writes_unknown
    if _foreign_program(head, where):
        result.lift(CallRating.DANGEROUS)
    _rate_writes(result, writes, where)
    result.parts.append(Part(prefix + scope_key(head, args), result.rating))
    return result


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
        i = 0
        while i < len(texts) and texts[i].startswith("-"):
            i += 2 if texts[i] in ("-C", "--git-dir", "--work-tree", "--namespace") else 1
        return f"{name} {texts[i]}" if i < len(texts) else name
    interpreter = prog in SHELLS or prog in SCRIPT_RUNNERS or re.fullmatch(r"python[0-9.]*", prog)
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
    unwrapped: _Unwrapped,
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
            items += _find_starts(up_args)
        for redirect in upstream.redirects:
            if redirect.op == "<<<" and redirect.target is not None:
                items.append(redirect.target.text)
    return [t for item in items for t in item.split()]


def _find_starts(texts: list[str]) -> list[str]:
    """find's starting points (the words before the first expression)."""
    starts: list[str] = []
    for t in texts:
        if t in ("-H", "-L", "-P") or t.startswith(("-D", "-O")):
            continue
        if t.startswith("-") or t in ("(", "!", ","):
            break
        starts.append(t)
    return starts or ["."]


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
    starts = _find_starts(texts)[:16]
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


def _shell_positional(prog: str, args: list[Word]) -> list[str] | None:
    """``sh -c 'script' name a b``: the script's ``$0 $1 ...`` are ``name a b``."""
    if prog not in SHELLS:
        return None
    texts = [a.text for a in args]
    for k, t in enumerate(texts):
        if t.startswith("-") and not t.startswith("--") and "c" in t[1:]:
            rest = [x for x in texts[k + 1 :] if not x.startswith(("-", "+"))]
            return rest[1:] if len(rest) > 1 else None
    return None


def _writes_file(op: str, target: str) -> bool:
    """``>&word`` with a word that is not a descriptor is bash's ``&>word``."""
    return op == ">&" and not target.isdigit() and target != "-"


def _rate_writes(result: Analysis, writes: list[str], where: Where | None = None) -> None:
    for target in writes:
        outside = "$" in target or _points_outside(Word(target), where)
        result.lift(CallRating.DANGEROUS if outside else CallRating.DEV)
    _note_writes(result, writes, where)


def _note_writes(result: Analysis, writes: list[str], where: Where | None) -> None:
    """Record the workspace paths among ``writes`` (see Analysis.writes)."""
    for target in writes:
        if "$" in target:
            result.writes_unknown = True
        elif not _points_outside(Word(target), where) and target not in result.writes:
            result.writes.append(target)


def _nested_script(prog: str, args: list[Word]) -> str | None:
    """The command string a shell, eval or watch will run, if there is one."""
    if prog == "eval":
        return " ".join(a.text for a in args)
    if prog == "watch":
        rest = _skip_options(args, frozenset({"-n", "--interval", "-d", "-q"}))
        return " ".join(a.text for a in rest) if rest else None
    if prog in SHELLS:
        has_c = False
        for a in args:
            t = a.text
            if t.startswith("-") and not t.startswith("--") and "c" in t[1:]:
                has_c = True
            elif has_c and not t.startswith(("-", "+")):
                return t
        return "" if has_c else None
    return None


def _reads_script_from_stdin(prog: str, args: list[Word]) -> bool:
    """An interpreter with no script argument (or ``-s``/``-``) runs its stdin."""
    if (
        prog not in SHELLS
        and prog not in SCRIPT_RUNNERS
        and not re.fullmatch(r"python[0-9.]*", prog)
    ):
        return False
    positional = [a.text for a in args if not a.text.startswith("-") or a.text == "-"]
    flags = [a.text for a in args if a.text.startswith("-")]
    if "-s" in flags or "-" in positional:
        return True
    if any(f in ("--version", "-V", "--help", "-h") for f in flags):
        return False
    if prog not in SHELLS and any(f in ("-c", "-e", "-m", "-r", "-E") for f in flags):
        return False
    return not positional


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


def _skip_options(args: list[Word], takes_value: frozenset[str]) -> list[Word]:
    i = 0
    while i < len(args) and args[i].text.startswith("-"):
        i += 2 if args[i].text in takes_value else 1
    return args[i:]


# -- layer 1: the blocklist -------------------------------------------------


def _blocklist(result: Analysis, prog: str, args: list[Word]) -> None:
    texts = [a.text for a in args]
    if prog in PRIVILEGE:
        result.block(f"{prog}: changing privileges is never allowed")
    if prog == "rm":
        reason = _rm_reason(texts)
        if reason:
            result.block(reason)
    elif prog == "chmod":
        if any(_is_world_writable_mode(t) for t in texts):
            result.block("chmod 777 (world-writable permissions)")
    elif prog == "dd":
        for t in texts:
            if t.startswith("of=") and _BLOCK_DEVICE.match(t[3:]):
                result.block(f"dd onto the block device {t[3:]}")
    elif prog in FORMATTERS or prog.startswith("mkfs."):
        result.block(f"{prog}: formatting file systems is never allowed")
    elif prog in ("tee", "cp", "shred", "mv", "ln", "install"):
        for t in texts:
            if _BLOCK_DEVICE.match(t):
                result.block(f"{prog} onto the block device {t}")
    elif prog == "pkill":
        if _has_kill_signal(texts) and _has_flag(texts, "f", "--full"):
            result.block("pkill -9 -f (kills every process whose command line matches)")
    elif prog == "killall":
        if _has_kill_signal(texts):
            result.block("killall -9")
    elif prog == "kill":
        if _has_kill_signal(texts) and "-1" in texts:
            result.block("kill -9 -1 (kills every process)")
    elif prog in POWER:
        result.block(f"{prog}: stopping the machine is never allowed")
    elif prog in ("init", "telinit") and any(t in ("0", "6") for t in texts):
        result.block(f"{prog} {texts[0]}: stopping the machine is never allowed")
    elif prog == "systemctl" and any(
        t in ("poweroff", "reboot", "halt", "kexec", "suspend", "hibernate") for t in texts
    ):
        result.block("systemctl power actions are never allowed")


def _rm_reason(texts: list[str]) -> str | None:
    recursive = False
    no_preserve = False
    targets: list[str] = []
    options_done = False
    for t in texts:
        if not options_done and t == "--":
            options_done = True
        elif not options_done and t.startswith("--"):
            recursive = recursive or t == "--recursive"
            no_preserve = no_preserve or t == "--no-preserve-root"
        elif not options_done and t.startswith("-") and len(t) > 1:
            recursive = recursive or "r" in t or "R" in t
        else:
            targets.append(t)
    if no_preserve:
        return "rm --no-preserve-root"
    if not recursive:
        return None
    for t in targets:
        if is_critical_path(t):
            return f"rm -r of {t!r} (the root, a home folder or a system folder)"
    return None


def is_critical_path(path: str) -> bool:
    """/, ~, a top-level system folder, or a glob of one of them."""
    if path.startswith("~"):
        rest = path[1:]
        if rest and not rest.startswith("/"):
            rest = "/" + rest.partition("/")[2]  # ~user/... : that user's home
        normal = posixpath.normpath("/" + rest.strip("/")) if rest.strip("/") else "/"
        return normal in ("/", "/*", "/.*")
    if not path.startswith("/"):
        return False
    normal = posixpath.normpath(re.sub("/+", "/", path))
    if normal in ("/", "/*", "/.*"):
        return True
    parts = normal.strip("/").split("/")
    top = parts[0]
    # A glob at the top level (/[a-z]*, /???) is critical when it can match a
    # system folder.
    if (
        top in SYSTEM_DIRS
        or top in ("*", ".*")
        or (_GLOB.search(top) and any(fnmatch.fnmatchcase(d, top) for d in SYSTEM_DIRS))
    ):
        return len(parts) == 1 or (len(parts) == 2 and parts[1] in ("*", ".*"))
    return False


def _is_world_writable_mode(mode: str) -> bool:
    if re.fullmatch(r"0*[0-7]?777", mode):
        return True
    m = re.fullmatch(r"([ugoa]*)[+=]rwx[Xst]*", mode)
    return m is not None and (m[1] in ("", "a") or set(m[1]) >= {"u", "g", "o"})


def _has_kill_signal(texts: list[str]) -> bool:
    names = {"9", "KILL", "SIGKILL"}
    for i, t in enumerate(texts):
        if t in ("-9", "-KILL", "-SIGKILL", "-s9", "-sKILL", "-sSIGKILL"):
            return True
        if t in ("-s", "--signal", "-n") and i + 1 < len(texts) and texts[i + 1] in names:
            return True
        if t.startswith("--signal=") and t.split("=", 1)[1] in names:
            return True
    return False


def _has_flag(texts: list[str], short: str, long: str) -> bool:
    for t in texts:
        if t == long:
            return True
        if t.startswith("-") and not t.startswith("--") and short in t[1:] and not t[1:].isdigit():
            return True
    return False


# -- layer 2: the rating ----------------------------------------------------


def classify(prog: str, args: list[Word], where: Where | None = None) -> CallRating:
    """safe / dev / dangerous for one program and its arguments."""
    return _classify(prog, args, where)[0]


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


def _classify(prog: str, args: list[Word], where: Where | None) -> tuple[CallRating, OptionEffects]:
    texts = [a.text for a in args]
    effects = option_effects(prog, texts, where)
    rating = max_rating(_base_rating(prog, texts), effects.rating)
    if rating is not CallRating.DANGEROUS and any(_points_outside(a, where) for a in args):
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
        i = _git_subcommand(texts)
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
        if value and _points_outside(Word(value), where):
            found.lift(dangerous)
    elif effect in (Effect.WRITES, Effect.CREATES_IN):
        _apply_write(found, effect, value, where)


def _apply_write(
    found: OptionEffects, effect: Effect, value: str | None, where: Where | None
) -> None:
    if value in _HARMLESS_SINKS:
        return
    if not value or "$" in value or _points_outside(Word(value), where):
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
    if re.fullmatch(r"python[0-9.]*", prog):
        return _python_rating(texts)
    if prog in ("pip", "pip3"):
        return CallRating.SAFE if texts and texts[0] in _PIP_SAFE else CallRating.DANGEROUS
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
        if module in _PY_DEV_MODULES or (module == "pip" and texts[2:3] and texts[2] in _PIP_SAFE):
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
    i = _git_subcommand(texts)
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
    if sub in _GIT_SAFE or sub in _GIT_DEV:
        return CallRating.DEV
    return CallRating.DANGEROUS


_GIT_VALUED = frozenset({"-C", "--git-dir", "--work-tree", "--namespace"})


def _git_globals(texts: list[str]) -> list[str]:
    """git's own options, before the subcommand (exact names: git's
    top-level parser takes no abbreviations)."""
    i = _git_subcommand(texts)
    return texts[: len(texts) if i is None else i]


def _git_subcommand(texts: list[str]) -> int | None:
    """The index of git's subcommand, None if there is none."""
    i = 0
    while i < len(texts) and texts[i].startswith("-"):
        i += 2 if texts[i] in _GIT_VALUED else 1
    return i if i < len(texts) else None


def _points_outside(word: Word, where: Where | None = None) -> bool:
    """An argument naming a path outside the workspace: absolute, ``~``,
    ``..`` escaping, a glob component that can match ``..``, or (with
    ``where``) a path that resolves through a symlink out of it."""
    text = word.text
    if text.startswith("--") and "=" in text:
        text = text.split("=", 1)[1]
    elif text.startswith("-"):
        # A value glued to a short option: -f/etc/passwd, -f~/x, -f../x.
        cut = min((k for k in (text.find("/"), text.find("~")) if k > 0), default=-1)
        if cut == -1 and ".." not in text:
            return False
        text = text[cut:] if cut != -1 else text[text.index("..") :]
    if text in _HARMLESS_SINKS or not text:
        return False
    if text.startswith(("/", "~")):
        return True
    components = text.split("/")
    if any(_GLOB.search(c) and fnmatch.fnmatchcase("..", c) for c in components):
        return True
    if where is None:
        return ".." in components
    target = os.path.normpath(os.path.join(where.cwd, text))
    if not where.contains(target):
        return True
    if _GLOB.search(text):
        matches = glob.glob(glob.escape(where.cwd) + "/" + text)[:MAX_GLOB_MATCHES]
        return any(not where.contains(os.path.realpath(m)) for m in matches)
    return not where.contains(os.path.realpath(os.path.join(where.cwd, text)))


_GLOB = re.compile(r"[*?\[]")


_BRANCH_VIEW_FLAGS = frozenset(
    {"-a", "-r", "-v", "-vv", "--list", "-l", "--show-current", "--all", "--remotes",
     "--merged", "--no-merged", "--contains", "--verbose"}
)  # fmt: skip


__all__ = [
    "Analysis",
    "Part",
    "ShellSyntaxInvalid",
    "Where",
    "analyze",
    "classify",
    "is_critical_path",
    "max_rating",
    "rate_command",
    "scope_key",
    "unwrap",
]
