"""Which programs are what, to the shell rules: shells and interpreters,
fetchers and decoders (the blocklist's curl|sh), programs that change
privileges or the machine, the read-only, dev and subcommand programs the
rating starts from, and the wrappers that run another command.

Only names live here; how each program's options read is the option table
(programs.py), and what the rules conclude from both is rules.py.
"""

from __future__ import annotations

import re

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
XARGS_VALUE_OPTIONS = frozenset(
    {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof",
     "--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars", "--process-slot-var"}
)  # fmt: skip
# Wrappers that run the rest of their arguments as a command:
# name -> (options that take a value, positional arguments before the command).
WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
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
    "xargs": (XARGS_VALUE_OPTIONS, 0),
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
DEV_COMMANDS = frozenset(
    {"pytest", "py.test", "mypy", "ruff", "black", "isort", "flake8", "pylint", "pyright",
     "eslint", "prettier", "tsc", "jest", "vitest", "mocha", "make", "cmake", "ninja", "meson",
     "mvn", "gradle", "gradlew", "tox", "nox", "rustfmt", "gofmt", "shellcheck", "tee",
     "mkdir", "touch", "coverage", "ctest", "bazel", "sbt", "dotnet"}
)  # fmt: skip
GIT_SAFE = frozenset(
    {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "describe", "shortlog",
     "grep", "ls-tree", "cat-file", "branch", "tag", "remote", "stash", "config", "version",
     "help", "reflog", "whatchanged", "name-rev", "merge-base", "rev-list", "count-objects",
     "show-ref", "for-each-ref", "check-ignore", "var"}
)  # fmt: skip
GIT_DEV = frozenset(
    {"add", "commit", "checkout", "switch", "restore", "stash", "merge", "rebase", "cherry-pick",
     "revert", "init", "mv", "rm", "reset", "apply", "am", "branch", "tag", "notes", "format-patch"}
)  # fmt: skip
PY_DEV_MODULES = frozenset(
    {"pytest", "mypy", "ruff", "black", "isort", "flake8", "pylint", "unittest", "pyright",
     "coverage", "tox", "nox", "doctest", "compileall", "py_compile", "build"}
)  # fmt: skip
PIP_SAFE = frozenset({"list", "show", "freeze", "check", "--version", "-V", "help"})


def is_python(prog: str) -> bool:
    """``python``, ``python3``, ``python3.11`` ...: one interpreter family."""
    return re.fullmatch(r"python[0-9.]*", prog) is not None
