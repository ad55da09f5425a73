"""Scale-out building blocks on Redis (see specs/scale-out.md).

Every replica of a cluster talks to one Redis: the event log
(``RedisEventLog``) and its live feed (``LiveFeed``), session ownership
leases (``Leases``, ``LapseWatcher``), the cross-replica confirmation
arbiter (``AnswerArbiter``), request forwarding to a session's owner
(``Forwarder``) and presence (``Presence``). Session records, turns and
conversations stay in the owner's SQLite store; requests reach them by
forwarding. Nothing here imports the server: it wires these in.
"""
