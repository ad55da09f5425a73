"""Scale-out building blocks on Redis (see specs/scale-out.md).

Every replica of a cluster talks to one Redis: the event log
(``RedisEventLog``) and its live feed (``LiveFeed``), session ownership
leases (``Leases``, ``LapseWatcher``), the cross-replica confirmation
arbiter (``AnswerArbiter``), request forwarding to a session's owner
(``Forwarder``), presence (``Presence``) and the shared state store
(``RedisStore``). Nothing here imports the server: it wires these in.
"""
