"""`X-Amzn-SageMaker-Custom-Attributes`: parsing, forcing a wire format, and refusing a bad one."""

from __future__ import annotations

import pytest
from decision_adapter.errors import RequestError
from decision_adapter.http.custom_attributes import custom_attributes, forced_format
from starlette.datastructures import Headers


def headers(value: str) -> Headers:
    return Headers({"X-Amzn-SageMaker-Custom-Attributes": value})


def test_key_value_pairs_separated_by_semicolons_or_commas():
    assert custom_attributes(headers("format=systemone; trace_id=abc,opaque ,Mode = x=y")) == [
        ("format", "systemone"),
        ("trace_id", "abc"),
        ("mode", "x=y"),
    ]
    assert custom_attributes(Headers({})) == []


@pytest.mark.parametrize(
    "value,expected",
    [
        ("format=SystemOne", "systemone"),
        ("format=chat", "chat"),
        ("format=decision, FORMAT=Decision", "decision"),  # the same format twice
        ("accept_eula=true", None),
        ("", None),
    ],
)
def test_format_may_be_forced(value, expected):
    assert forced_format(headers(value), ("systemone", "decision", "chat")) == expected


def test_an_unknown_format_is_a_client_error():
    with pytest.raises(RequestError) as error:
        forced_format(headers("format=xml"), ("systemone", "decision", "chat"))
    assert error.value.status == 400 and error.value.error_type == "invalid_custom_attributes"


def test_two_different_formats_are_a_client_error_naming_both():
    with pytest.raises(RequestError) as error:
        forced_format(headers("format=decision; trace=1, format=chat"), ("decision", "chat"))
    assert error.value.status == 400 and error.value.error_type == "invalid_custom_attributes"
    assert error.value.message == (
        "X-Amzn-SageMaker-Custom-Attributes: format given as chat and decision; send one"
    )
