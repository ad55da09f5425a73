"""The shared vocabulary every package speaks.

- ``protocol.canonical``: canonical messages, content blocks and tool
  definitions (the provider-neutral conversation format);
- ``protocol.envelope``: the event envelope (``seq``, ``session_seq``, ``type``,
  ``data`` ...) every WebSocket message is;
- ``protocol.catalog``: ``EventType``, the closed list of event types;
- ``protocol.payloads``: one pydantic payload class per event type, built by
  its one publisher (specs/event-bus-and-trace-catalog.md lists where) and
  parsed by the SDK;
- ``protocol.backoff``: the one retry backoff (exponential with jitter);
- ``protocol.validation_errors``: the one wording of a pydantic
  ValidationError for people (``<dotted.path>: <reason>``).

It imports nothing else of ours, so the dispatcher, the event bus, the provider
adapters, the server and the clients can all depend on it without depending on
each other.
"""
