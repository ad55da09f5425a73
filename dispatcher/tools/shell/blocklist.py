"""Layer 1 of the shell rules, the blocklist: commands refused outright,
whatever the confirmation mode.

rm -r of / or ~ (or a top-level system folder), sudo/su/doas/pkexec, chmod
777, dd and copies onto block devices, mkfs and friends, pkill -9 -f,
killall -9, kill -9 -1, shutdown/reboot and systemctl's power actions. The
checks that need the whole line (curl|sh, fork bombs, find -delete) are made
where the line is walked (rules.py); they report here through the same
``Analysis.block``.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re

from dispatcher.tools.shell.analysis import GLOB, Analysis
from dispatcher.tools.shell.families import FORMATTERS, POWER, PRIVILEGE, SYSTEM_DIRS
from dispatcher.tools.shell.tokens import Word

BLOCK_DEVICE = re.compile(
    r"^/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|dm-\d|md\d|loop\d|"
    r"sr\d|fd\d|mapper/|mem$|kmem$|port$)"
)


def check_blocklist(result: Analysis, prog: str, args: list[Word]) -> None:
    """Block ``prog args`` in ``result`` if the blocklist refuses it."""
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
            if t.startswith("of=") and BLOCK_DEVICE.match(t[3:]):
                result.block(f"dd onto the block device {t[3:]}")
    elif prog in FORMATTERS or prog.startswith("mkfs."):
        result.block(f"{prog}: formatting file systems is never allowed")
    elif prog in ("tee", "cp", "shred", "mv", "ln", "install"):
        for t in texts:
            if BLOCK_DEVICE.match(t):
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
        or (GLOB.search(top) and any(fnmatch.fnmatchcase(d, top) for d in SYSTEM_DIRS))
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
