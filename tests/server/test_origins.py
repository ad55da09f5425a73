"""Properties of the WebSocket origin rule (server/origins.py): an Origin is
accepted exactly when it is absent, names the request's own host and port,
or is listed; spelling (case, default port) never matters, and nothing that
is not an http(s) origin is ever accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from server.origins import OriginPolicy, normalize_origin

hosts = st.from_regex(r"\A[a-z][a-z0-9-]{0,12}(\.[a-z]{2,5}){0,2}\Z")
ports = st.integers(min_value=1, max_value=65535)
schemes = st.sampled_from(["http", "https"])
DEFAULT = {"http": 80, "https": 443}


@given(scheme=schemes, host=hosts, port=ports)
def test_the_own_host_and_port_is_accepted_however_spelt(scheme: str, host: str, port: int) -> None:
    policy = OriginPolicy()
    origin = f"{scheme.upper()}://{host.upper()}:{port}"
    assert policy.refusal(origin, f"{host}:{port}") is None
    if port == DEFAULT[scheme]:
        # The default port may be left out on either side.
        assert policy.refusal(f"{scheme}://{host}", f"{host}:{port}") is None
        assert policy.refusal(f"{scheme}://{host}:{port}", host) is None


@given(scheme=schemes, host=hosts, port=ports, other_host=hosts, other_port=ports)
def test_another_host_or_port_is_refused(
    scheme: str, host: str, port: int, other_host: str, other_port: int
) -> None:
    policy = OriginPolicy.of(["https://listed.example:8443"])
    own = f"{host}:{port}"
    if (other_host, other_port) != (host, port):
        assert policy.refusal(f"{scheme}://{other_host}:{other_port}", own) is not None


@given(text=st.text(max_size=40))
def test_nothing_but_an_http_origin_is_accepted(text: str) -> None:
    """Arbitrary text as Origin is accepted only if it parses as an origin
    that is the request's own."""
    verdict = OriginPolicy().refusal(text, "127.0.0.1:8765")
    if verdict is None:
        assert normalize_origin(text) == "http://127.0.0.1:8765"


def test_listed_origins_and_no_origin_are_accepted() -> None:
    policy = OriginPolicy.of(["https://App.example.com:8443/"])
    assert policy.refusal("https://app.example.com:8443", "127.0.0.1:8765") is None
    assert policy.refusal(None, "127.0.0.1:8765") is None
    assert policy.refusal("https://app.example.com", "127.0.0.1:8765") is not None
    assert policy.refusal("null", "127.0.0.1:8765") is not None
    assert policy.refusal("http://127.0.0.1:8765", None) is not None


@pytest.mark.parametrize(
    "bad", ["ftp://x", "https://", "https://a.example/path", "https://u@a.example", "x:1", ""]
)
def test_config_rejects_what_is_not_an_origin(bad: str) -> None:
    with pytest.raises(ValueError, match="not an origin"):
        normalize_origin(bad)
