"""The HTTP side's JSON floor (``workers.inference.http._json``): the checks every dialect uses on a
request body's values, and ``items``, which iterates an unchecked field exactly as Python does."""

from __future__ import annotations

import pytest

from workers.inference.http._json import Json, is_number, is_strings, is_token, is_token_ids, items


@pytest.mark.parametrize(
    ("value", "number", "token"),
    [(1, True, True), (1.5, True, False), (True, False, False), ("1", False, False), (None, False, False)],
)
def test_a_bool_is_neither_a_number_nor_a_token(value: Json, number: bool, token: bool) -> None:
    assert is_number(value) is number
    assert is_token(value) is token


def test_arrays_of_strings_and_of_token_ids() -> None:
    assert is_strings(["a", "b"]) and is_strings([])
    assert not is_strings(["a", 1]) and not is_strings("ab")
    assert is_token_ids([1, 2]) and not is_token_ids([1, True]) and not is_token_ids([1.0])


@pytest.mark.parametrize("value", [[1, "a"], "abc", {"k": 1, "j": 2}, []])
def test_items_iterates_as_python_does(value: Json) -> None:
    assert list(items(value)) == list(value)


@pytest.mark.parametrize("value", [1, 1.5, True, None])
def test_items_of_a_scalar_raises_pythons_own_type_error(value: Json) -> None:
    with pytest.raises(TypeError) as raised:
        items(value)
    with pytest.raises(TypeError) as python:
        iter(value)  # what Python itself says
    assert str(raised.value) == str(python.value)
