"""Redis key names of one cluster, all under one prefix.

Every key carries the hash tag ``{<prefix>}`` so that a Redis Cluster keeps
them in one slot: the Lua scripts touch several keys at once, which a
cluster allows only within a slot.
"""

from __future__ import annotations


class Keys:
    """Builds the key names for one cluster prefix (default ``toolrelay``)."""

    __slots__ = ("base",)

    def __init__(self, prefix: str = "toolrelay") -> None:
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError(f"prefix must be a non-empty string without braces, got {prefix!r}")
        self.base = "{" + prefix + "}"

    # -- event log -------------------------------------------------------------
    @property
    def seq(self) -> str:
        """String: the last ``seq`` ever assigned."""
        return f"{self.base}:seq"

    @property
    def session_seqs(self) -> str:
        """Hash: session id -> its last ``session_seq`` (also the list of sessions)."""
        return f"{self.base}:session_seq"

    @property
    def global_stream(self) -> str:
        """Stream of every event; entry id ``<seq>-0``."""
        return f"{self.base}:events"

    def session_stream(self, session_id: str) -> str:
        """Stream of one session's events; entry id ``<session_seq>-0``."""
        return f"{self.base}:events:{session_id}"

    # -- ownership -------------------------------------------------------------
    def owner(self, session_id: str) -> str:
        return f"{self.base}:owner:{session_id}"

    def running(self, session_id: str) -> str:
        """Hash: turn id -> replica id, the session's running turns."""
        return f"{self.base}:running:{session_id}"

    @property
    def running_sessions(self) -> str:
        """Set of session ids that have an entry in ``running``."""
        return f"{self.base}:running_sessions"

    def answer(self, request_id: str) -> str:
        return f"{self.base}:answer:{request_id}"

    # -- forwarding ------------------------------------------------------------
    def inbox(self, replica_id: str) -> str:
        return f"{self.base}:replica:{replica_id}:inbox"

    def alive(self, replica_id: str) -> str:
        return f"{self.base}:replica:{replica_id}:alive"

    def reply(self, call_id: str) -> str:
        return f"{self.base}:reply:{call_id}"

    # -- presence --------------------------------------------------------------
    def presence(self, session_id: str, replica_id: str) -> str:
        return f"{self.base}:presence:{session_id}:{replica_id}"

    @property
    def directory(self) -> str:
        """Hash: session id -> JSON of the session as its owner describes it
        (what any replica lists, and where a session's workspace is)."""
        return f"{self.base}:directory"

    def presence_replicas(self, session_id: str) -> str:
        return f"{self.base}:presence:{session_id}"
