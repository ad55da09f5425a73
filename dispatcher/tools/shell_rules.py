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

Layer 2 rates what is left: ``safe`` (reads: ls, cat, git status ...),
``dev`` (builds and tests: pytest, ruff, make, npm run ...) or ``dangerous``
(everything else). A command's rating is the highest of its parts. A safe
command is lifted to dangerous when an argument points outside the workspace
(absolute path, ``~``, ``..``): reading ``~/.ssh`` is not a safe read.

The blocklist is a seatbelt, not a wall: a determined script can always
compute a command at run time. The sandbox (layer 4's bubblewrap) is the wall.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from dispatcher.tool import CallRating
from dispatcher.tools.shell_lexer import Command, Pipeline, ShellSyntaxError, Word, parse, tokenize

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
     "sha512sum", "cksum", "column", "jq", "env", "printenv", "type", "locale", "uptime", "ps",
     "free", "nproc", "tac", "rev", "fold", "expand", "comm", "join", "paste", "strings",
     "sleep", "hostname", ":", "find", "less", "more", "tokei", "cloc", "ag", "fd"}
)  # fmt: skip
DEV_COMMANDS = frozenset(
    {"pytest", "py.test", "mypy", "ruff", "black", "isort", "flake8", "pylint", "pyright",
     "eslint", "prettier", "tsc", "jest", "vitest", "mocha", "make", "cmake", "ninja", "meson",
     "mvn", "gradle", "gradlew", "tox", "nox", "rustfmt", "gofmt", "shellcheck", "tee",
     "mkdir", "touch", "coverage", "ctest", "bazel", "sbt", "dotnet"}
)  # fmt: skip
_FIND_ACTIONS = frozenset(
    {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
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


@dataclass(slots=True)
class Analysis:
    """What the rules concluded about one command line."""

    blocked: list[str] = field(default_factory=list)
    rating: CallRating = CallRating.SAFE
    programs: set[str] = field(default_factory=set)

    def merge(self, other: Analysis) -> None:
        for reason in other.blocked:
            if reason not in self.blocked:
                self.blocked.append(reason)
        self.rating = max_rating(self.rating, other.rating)
        self.programs |= other.programs

    def lift(self, rating: CallRating) -> None:
        self.rating = max_rating(self.rating, rating)

    def block(self, reason: str) -> None:
        if reason not in self.blocked:
            self.blocked.append(reason)
        self.rating = CallRating.DANGEROUS


def analyze(command: str, depth: int = 0) -> Analysis:
    """Blocklist verdicts and the rating of ``command`` (a shell string)."""
    result = Analysis()
    if depth > MAX_DEPTH:
        result.block("the command nests shells too deeply to check")
        return result
    try:
        script = parse(command, depth)
        for fn in script.functions:
            if fn.name in fn.body_words and fn.body_ops & {"|", "&", "|&"}:
                result.block(f"fork bomb: function {fn.name!r} spawns copies of itself")
        for inner in script.substitutions:
            result.merge(analyze(inner, depth + 1))
        for pipeline in script.pipelines:
            for index, cmd in enumerate(pipeline.commands):
                result.merge(_analyze_command(cmd, pipeline, index, depth))
    except ShellSyntaxError as exc:
        # Also raised from inside, e.g. by the string of `env -S '...'`.
        result.block(f"the command cannot be parsed with confidence ({exc})")
    return result


def unwrap(words: list[Word], depth: int = 0) -> list[Word]:
    """The words of the program that actually runs: reserved words,
    assignments and wrappers (env, command, exec, nohup, timeout ...) removed."""
    i = 0
    while i < len(words):
        w = words[i]
        text = w.text
        if text in _RESERVED and not w.quoted:
            i += 1
            continue
        if _ASSIGNMENT.match(text):
            i += 1
            continue
        name = posixpath.basename(text)
        if name == "env":
            i += 1
            while i < len(words):
                opt = words[i].text
                if opt in ("-u", "--unset", "-C", "--chdir"):
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
                    return unwrap(extra + words[i:], depth + 1)
                elif opt == "--":
                    i += 1
                    break
                elif opt.startswith("-") or _ASSIGNMENT.match(opt):
                    i += 1
                else:
                    break
            continue
        if name == "command" and i + 1 < len(words) and words[i + 1].text in ("-v", "-V"):
            return []  # only looks a name up
        wrapper = _WRAPPERS.get(name)
        if wrapper is None or w.dynamic:
            return words[i:]
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
    return []


def program_name(word: Word) -> str:
    """The program a command word names, without its directory (``/bin/rm`` -> ``rm``)."""
    return posixpath.basename(word.text)


def _analyze_command(cmd: Command, pipeline: Pipeline, index: int, depth: int) -> Analysis:
    result = Analysis()
    writes: list[str] = []
    stdin_texts: list[str] = []
    for redirect in cmd.redirects:
        target = redirect.target.text if redirect.target is not None else ""
        if redirect.op in _WRITE_REDIRECTS:
            if _BLOCK_DEVICE.match(target):
                result.block(f"writing to the block device {target}")
            elif target not in _HARMLESS_SINKS:
                writes.append(target)
        if redirect.op == "<<<":
            stdin_texts.append(target)
        elif redirect.heredoc is not None:
            stdin_texts.append(redirect.heredoc)
    argv = unwrap(cmd.words, depth)
    if not argv:
        _rate_writes(result, writes)
        return result
    head = argv[0]
    if head.dynamic:
        # The program's name is computed at run time: nothing can vouch for it.
        result.lift(CallRating.DANGEROUS)
        result.programs.add("(computed)")
        return result
    prog = program_name(head)
    args = argv[1:]
    result.programs.add(prog)
    _blocklist(result, prog, args)
    nested = _nested_script(prog, args)
    if nested is not None:
        inner = analyze(nested, depth + 1)
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
        result.lift(classify(prog, args))
    _rate_writes(result, writes)
    return result


def _rate_writes(result: Analysis, writes: list[str]) -> None:
    for target in writes:
        inside = not (target.startswith(("/", "~")) or ".." in target.split("/") or "$" in target)
        result.lift(CallRating.DEV if inside else CallRating.DANGEROUS)


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
    if parts[0] in SYSTEM_DIRS or parts[0] in ("*", ".*"):
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


def classify(prog: str, args: list[Word]) -> CallRating:
    """safe / dev / dangerous for one program and its arguments."""
    texts = [a.text for a in args]
    rating = _base_rating(prog, texts)
    if rating is not CallRating.DANGEROUS and any(_points_outside(a) for a in args):
        return CallRating.DANGEROUS
    if rating is CallRating.SAFE and any(a.dynamic for a in args):
        # Unknown arguments to a read command: still only reads, but where?
        return CallRating.DEV
    return rating


def _base_rating(prog: str, texts: list[str]) -> CallRating:
    if prog == "find":
        return CallRating.DANGEROUS if _FIND_ACTIONS & set(texts) else CallRating.SAFE
    if prog == "sort" and any(t in ("-o", "--output") or t.startswith("--output=") for t in texts):
        return CallRating.DEV
    if prog == "date" and any(t in ("-s", "--set") or t.startswith("--set=") for t in texts):
        return CallRating.DANGEROUS
    if prog == "hostname" and any(not t.startswith("-") for t in texts):
        return CallRating.DANGEROUS
    if prog == "uniq" and len([t for t in texts if not t.startswith("-")]) > 1:
        return CallRating.DEV
    if prog in SAFE_COMMANDS:
        return CallRating.SAFE
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
    if prog == "cargo":
        return _sub_rating(
            texts,
            {"--version", "-V", "version", "tree", "metadata"},
            {"build", "check", "test", "clippy", "fmt", "doc", "bench", "run"},
        )
    if prog == "go":
        return _sub_rating(
            texts, {"version", "env", "list", "doc"}, {"build", "test", "vet", "fmt", "run"}
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
        if module in _PY_DEV_MODULES:
            return CallRating.DEV
        if module == "pip" and len(texts) >= 3 and texts[2] in _PIP_SAFE:
            return CallRating.SAFE
    return CallRating.DANGEROUS


def _js_package_rating(texts: list[str]) -> CallRating:
    sub = texts[0] if texts else ""
    if sub in ("ls", "list", "--version", "-v", "help"):
        return CallRating.SAFE
    if sub in ("run", "run-script", "test", "t"):
        return CallRating.DEV
    return CallRating.DANGEROUS


def _git_rating(texts: list[str]) -> CallRating:
    i = 0
    while i < len(texts) and texts[i].startswith("-"):
        opt = texts[i]
        # -c can set an alias or pager that runs any program.
        if opt.startswith(("-c", "--config-env", "--exec-path")):
            return CallRating.DANGEROUS
        i += 2 if opt in ("-C", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(texts):
        return CallRating.SAFE
    sub, rest = texts[i], texts[i + 1 :]
    positional = [t for t in rest if not t.startswith("-")]
    if sub in ("push", "clean", "fetch", "pull", "clone", "filter-branch", "gc", "prune"):
        return CallRating.DANGEROUS
    if sub == "reset" and "--hard" in rest:
        return CallRating.DANGEROUS
    if sub == "config":
        reads = {"--get", "--get-all", "--get-regexp", "--list", "-l"}
        return CallRating.SAFE if reads & set(rest) else CallRating.DANGEROUS
    if any(t.startswith("--output") for t in rest):
        return CallRating.DEV
    if sub in _GIT_SAFE:
        if sub == "branch" and (positional or set(rest) - _BRANCH_VIEW_FLAGS):
            return CallRating.DEV
        if sub == "tag" and (positional or set(rest) - {"-l", "--list", "-n"}):
            return CallRating.DEV
        if sub == "stash" and rest[:1] not in (["list"], ["show"]):
            return CallRating.DEV
        if sub == "remote" and positional[:1] not in ([], ["show"], ["get-url"]):
            return CallRating.DEV
        if sub == "reflog" and positional[:1] not in ([], ["show"]):
            return CallRating.DEV
        return CallRating.SAFE
    if sub in _GIT_DEV:
        return CallRating.DEV
    return CallRating.DANGEROUS


_BRANCH_VIEW_FLAGS = frozenset(
    {"-a", "-r", "-v", "-vv", "--list", "-l", "--show-current", "--all", "--remotes",
     "--merged", "--no-merged", "--contains", "--verbose"}
)  # fmt: skip


def _points_outside(word: Word) -> bool:
    """An argument naming a path outside the workspace: absolute, ~, or .."""
    text = word.text
    if text.startswith("-") and "=" in text:
        text = text.split("=", 1)[1]
    elif text.startswith("-"):
        return False
    if text in _HARMLESS_SINKS:
        return False
    if text.startswith(("/", "~")):
        return True
    return ".." in text.split("/")


__all__ = [
    "Analysis",
    "ShellSyntaxError",
    "analyze",
    "classify",
    "is_critical_path",
    "max_rating",
    "unwrap",
]
