"""The watchdog process behind ``dispatcher.reaper`` (run as a script:
``python -I -S reaper_watch.py MARKER``; standard library only, so it starts
in a few milliseconds and nothing of the project is imported into it).

It reads its standard input, a pipe whose only writer is the server:
``+PGID`` lines name a process group the server started, ``-PGID`` lines
say the group is finished. When the pipe reaches end-of-file the server is
gone, however it died (``kill -9`` included: the kernel closes its
descriptors), and the watchdog:

1. sends SIGKILL to every process group still listed (a command and the
   background children it left in its group: ``sleep 1000 & wait``);
2. sends SIGKILL to every process whose initial environment holds
   ``TOOLRELAY_REAPER=MARKER``: the server puts it in the environment of
   everything it starts, so this also catches children that left the group
   (``setsid``) or were started between a spawn and its ``+PGID`` line;
   it scans again until a pass finds none (bounded), since a process may
   fork while the scan runs;
3. exits.

SIGTERM does the same at once (``systemctl stop`` and the like); SIGINT
and SIGHUP are ignored (a terminal's Ctrl-C reaches the server, which
stops its children itself and then closes the pipe).

What escapes it: a process that re-executes itself with a scrubbed
environment *and* leaves the process group. Sandboxed processes never
escape: their PID namespace ends with the sandbox.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from types import FrameType

MARKER_VAR = "TOOLRELAY_REAPER"
# Passes over /proc at the end; each pass kills what it finds.
MAX_SCANS = 50
SCAN_PAUSE = 0.01


def _kill(pid: int, *, group: bool) -> bool:
    try:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def _marked(needle: bytes) -> list[int]:
    """PIDs whose initial environment holds the marker entry exactly."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
        except OSError:  # gone, or not ours to read
            continue
        if needle in env.split(b"\0"):
            found.append(int(name))
    return found


def reap(groups: set[int], marker: str) -> int:
    """Kill every listed group and every marked process; how many kills landed."""
    killed = sum(_kill(pgid, group=True) for pgid in groups)
    needle = f"{MARKER_VAR}={marker}".encode()
    for _ in range(MAX_SCANS):
        # A killed process whose parent is gone lingers as a zombie with an
        # empty environ: it is not found again, so the loop ends.
        hits = sum(_kill(pid, group=False) for pid in _marked(needle))
        if not hits:
            break
        killed += hits
        time.sleep(SCAN_PAUSE)
    return killed


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1]:
        print("usage: reaper_watch.py MARKER", file=sys.stderr)
        return 2
    marker = argv[1]
    groups: set[int] = set()

    def on_term(signum: int, frame: FrameType | None) -> None:
        reap(groups, marker)
        os._exit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_term)
    pending = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            try:
                pgid = int(line[1:])
            except ValueError:
                continue
            if line[:1] == b"+":
                groups.add(pgid)
            elif line[:1] == b"-":
                groups.discard(pgid)
    # Block SIGTERM while reaping so it cannot cut the scan short.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    reap(groups, marker)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
