"""Folder listings of one workspace, kept between spawns and re-read when a
folder changes.

The protected and hidden globs (dispatcher/sandbox_files.py) are expanded
at every sandboxed spawn; a pattern such as ``.env`` (a file of that name
anywhere) needs a walk of the workspace each time. ``ListingCache`` keeps,
for each folder the last walk listed, what the walk needs of it: the
folder's stamp, its number of entries, and, in listing order, its
subfolders and the entries a glob covers (with their lstat). The next walk
lstats each folder it reaches (one call per folder, none per file) and
lists again only those whose stamp changed.

Invariant: ``list(rel)`` returns what a fresh listing of ``rel`` would
(sorted by name, classified by the same globs), so a walk through the cache
finds what a walk without it finds. It rests on one fact of POSIX file
systems: creating, removing or renaming an entry in a folder sets that
folder's mtime and ctime to the current time. The stamp is (st_dev,
st_ino, st_mtime_ns, st_ctime_ns): a folder replaced by another differs in
inode; an entry change moves both times; ``touch -d`` can put the mtime
back but not the ctime, so a sandboxed process cannot hide its changes
from the next spawn.

What the stamp cannot see, and how each is handled:

- two changes within one tick of the file system's clock (a few ms on
  Linux, whose timestamps are coarse) leave equal times. A listing is
  therefore trusted only when the folder's last change (the later of
  mtime and ctime) is older than ``RACY_NS`` at the time it is listed:
  a folder changed in the last two seconds is listed again at every walk
  until it has been quiet that long (git's "racily clean" rule). A file
  system whose clock runs more than ``RACY_NS`` behind ours (a remote
  one) weakens this;
- a mount made onto a path in the workspace does not change its folder:
  the cache keeps the old identity, and the check inside the sandbox (the
  mount must be the inode that was looked at) then refuses the spawn
  rather than bind something unexpected;
- a file's content and mode do not matter here: only names, types and
  inodes are used, and none changes without its folder changing.

Bounded: only the folders the last walk reached are kept (the walk stops at
``MAX_SCAN_ENTRIES`` entries), and for each only its subfolders and covered
entries. One lock makes a walk and its update of the cache one step
(searches expand from worker threads while the shell expands on the loop).
"""

from __future__ import annotations

import os
import posixpath
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# A folder changed less than this long before it is listed is listed again
# at the next walk (its time may not move on a change in the same tick).
RACY_NS = 2_000_000_000

Stamp = tuple[int, int, int, int]
# (relative path, name) -> (hidden, read_only): whether each glob list covers it.
Classify = Callable[[str, str], tuple[bool, bool]]


@dataclass(frozen=True, slots=True)
class Entry:
    """A subfolder or a covered entry of a listing."""

    index: int  # position in the folder's sorted listing
    name: str
    is_dir: bool  # a real folder (a link to one is not)
    is_link: bool
    hidden: bool
    read_only: bool
    stat: os.stat_result | None  # lstat, for covered entries only


@dataclass(frozen=True, slots=True)
class Listing:
    """What a walk needs of one folder."""

    stamp: Stamp
    trusted: bool  # quiet for RACY_NS when listed: reusable while the stamp holds
    size: int  # entries in the folder
    entries: tuple[Entry, ...]


class ListingCache:
    """Listings of one workspace's folders, reused while their stamp holds.

    ``walk(root)`` is a context manager yielding a ``list(rel)`` function;
    when the block ends, the folders it listed replace the cache (so folders
    no walk reaches any more are dropped). A different ``root`` starts from
    an empty cache. ``now`` is the clock the racy rule reads."""

    def __init__(self, classify: Classify, *, now: Callable[[], int] = time.time_ns) -> None:
        self._classify = classify
        self._now = now
        self._lock = threading.Lock()
        self._root: str | None = None
        self._listings: dict[str, Listing] = {}

    @contextmanager
    def walk(self, root: str) -> Iterator[Callable[[str], Listing | None]]:
        with self._lock:
            old = self._listings if root == self._root else {}
            used: dict[str, Listing] = {}

            def list_folder(rel: str) -> Listing | None:
                listing = self._list(root, rel, old.get(rel))
                if listing is not None:
                    used[rel] = listing
                return listing

            try:
                yield list_folder
            finally:
                self._root, self._listings = root, used

    def __len__(self) -> int:
        return len(self._listings)

    def _list(self, root: str, rel: str, old: Listing | None) -> Listing | None:
        """The listing of folder ``rel``: ``old`` when still valid, else a
        fresh one; None when it is not a real folder or cannot be listed."""
        path = f"{root}/{rel}" if rel else root  # once per folder per spawn: no join
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        if old is not None and old.trusted and old.stamp == stamp:
            return old
        # The stamp is read before the listing: a change in between moves the
        # times past the stored stamp, and the next walk lists it again.
        trusted = max(st.st_mtime_ns, st.st_ctime_ns) < self._now() - RACY_NS
        try:
            with os.scandir(path) as it:
                dir_entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return Listing(stamp, False, 0, ())
        entries = tuple(self._entries(rel, dir_entries))
        return Listing(stamp, trusted, len(dir_entries), entries)

    def _entries(self, rel_dir: str, dir_entries: list[os.DirEntry[str]]) -> Iterator[Entry]:
        for index, entry in enumerate(dir_entries):
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            hidden, read_only = self._classify(rel, entry.name)
            is_dir = entry.is_dir(follow_symlinks=False)
            if not (hidden or read_only or is_dir):
                continue
            try:
                st = entry.stat(follow_symlinks=False) if hidden or read_only else None
            except OSError:
                continue  # gone meanwhile: the folder's stamp has moved too
            yield Entry(index, entry.name, is_dir, entry.is_symlink(), hidden, read_only, st)
