"""JSON as requests carry it, on the floor of the HTTP package (every room reads request bodies).

:data:`Json` is what ``json.loads`` gives: a body's values are one of these until a dialect has
checked them, and ``isinstance`` narrows them (a ``dict`` to ``dict[str, Json]``, a ``list`` to
``list[Json]``), so the checks are type-checked too. :data:`LlamaKwargs` is what a checked request
becomes: the keyword arguments of ``llama_cpp.Llama``'s completion calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypeGuard, cast

# Sequence and Mapping (read-only, so a list of objects is a list of JSON values); isinstance narrows
# them to list[Json] and dict[str, Json].
Json: TypeAlias = "bool | int | float | str | Sequence[Json] | Mapping[str, Json] | None"
JsonObject: TypeAlias = "dict[str, Json]"

# Any: the keyword arguments of ``Llama.create_completion``/``create_chat_completion`` (numbers, strings,
# messages, a grammar object, media files), which an engine job carries to either engine unchanged:
# the legacy engine hands them to llama-cpp-python, the batch engine's front takes them by name.
LlamaKwargs: TypeAlias = "dict[str, Any]"


def is_number(v: Json) -> TypeGuard[int | float]:
    """A JSON number (``true`` and ``false`` are not numbers, though Python's bools are ints)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_token(v: Json) -> TypeGuard[int]:
    """A JSON integer: a token id, a count."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_strings(v: Json) -> TypeGuard[list[str]]:
    """A JSON array of strings."""
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def is_token_ids(v: Json) -> TypeGuard[list[int]]:
    """A JSON array of integers."""
    return isinstance(v, list) and all(is_token(t) for t in v)


def items(v: Json) -> Iterable[Json]:
    """``v`` iterated as Python iterates it: an array's items, an object's keys, a string's characters;
    any other value raises Python's own ``TypeError`` (what the converters that iterate an unchecked
    field have always let through)."""
    if isinstance(v, (str, Sequence)):
        return v
    if isinstance(v, Mapping):
        return iter(v)
    raise TypeError(f"'{type(v).__name__}' object is not iterable")


def json_object(view: Mapping[str, object]) -> JsonObject:
    """A typed view of JSON values (a ``TypedDict`` such as the sampler's ``SamplingView``) as a JSON
    object: mypy does not see a TypedDict's values as :data:`Json`, though each one is."""
    return cast(JsonObject, dict(view))
