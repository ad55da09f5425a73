"""Every bus implements ``eventbus.Bus`` (mypy checks the signatures, see
eventbus/interface.py; this checks that no member is missing at run time)."""

from __future__ import annotations

import inspect

import pytest

from eventbus import Bus, EventBus
from eventbus.cluster.bus import ClusterBus

MEMBERS = sorted(
    name
    for name, _ in inspect.getmembers(Bus)
    if not name.startswith("_") and name not in dir(object)
)


def test_the_protocol_names_what_the_server_uses() -> None:
    assert {"publish", "emit", "subscribe", "flush", "durable", "local_log", "stats"} <= set(
        MEMBERS
    )


@pytest.mark.parametrize("implementation", [EventBus, ClusterBus])
def test_each_bus_has_every_member_of_the_protocol(implementation: type) -> None:
    missing = [name for name in MEMBERS if not hasattr(implementation, name)]
    assert missing == []
