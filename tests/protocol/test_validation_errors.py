"""protocol.validation_errors: one wording for a pydantic error, never the input."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from protocol.validation_errors import describe_errors


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str
    count: int


class Outer(BaseModel):
    items: list[Inner]


def _error(data: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return caught.value


def test_each_error_names_its_dotted_field() -> None:
    exc = _error({"items": [{"token": "secret-value-123", "count": "x", "extra": 1}]})
    lines = describe_errors(exc, prefix="config.")
    assert (
        "config.items.0.count: Input should be a valid integer, unable to parse " in (lines[0][:75])
    )
    assert "config.items.0.extra: unknown key" in lines
    assert not any("secret-value-123" in line for line in lines)


def test_limit_and_custom_wording() -> None:
    exc = _error({"items": [{}, {}]})
    lines = describe_errors(exc, where=lambda e: "here", message=lambda e: e["type"], limit=2)
    assert lines == ["here: missing", "here: missing"]
