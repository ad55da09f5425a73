"""The shared vocabulary every package speaks: canonical messages and tool
definitions (``protocol.canonical``), the event envelope (``protocol.envelope``),
the closed catalog of event types (``protocol.catalog``) and their payloads
(``protocol.payloads``).

It imports nothing else of ours, so the dispatcher, the event bus, the provider
adapters, the server and the clients can all depend on it without depending on
each other.
"""
