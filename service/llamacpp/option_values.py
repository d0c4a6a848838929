"""One value of a llama-server option or of modelrouter's own preset keys, read as llama.cpp reads it:
an integer, a finite number, a JSON object, one of a list, on or off, seconds. Each refuses what
llama-server would refuse with an :class:`OptionError` naming the key and the value. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from service.llamacpp.flags import FALSEY, TRUTHY


class OptionError(ValueError):
    """A value llama-server would refuse (``-c abc``); the message names the option."""


def integer(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        msg = f"{key} = {value!r}: expected an integer"
        raise OptionError(msg) from None


def finite_number(key: str, value: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        msg = f"{key} = {value!r}: expected a number"
        raise OptionError(msg) from None
    if number != number or number in (float("inf"), float("-inf")):  # NaN, inf: no frame rate
        msg = f"{key} = {value!r}: expected a finite number"
        raise OptionError(msg)
    return number


def json_object_text(key: str, value: str) -> str:
    """A JSON object's text, checked (llama-server refuses to start on a bad one)."""
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        msg = f"{key} = {value!r}: expected a JSON object"
        raise OptionError(msg)
    return value.strip()


def one_of(key: str, value: str, allowed: tuple[str, ...]) -> str:
    if value.strip() not in allowed:
        msg = f"{key} = {value!r}: expected one of {', '.join(allowed)}"
        raise OptionError(msg)
    return value.strip()


def switch(key: str, value: str) -> bool:
    """A preset key that is on or off, in llama.cpp's words for both."""
    word = value.strip().lower()
    if word not in TRUTHY | FALSEY:
        raise OptionError(f"{key}: expected on or off (true/false, 1/0, enabled/disabled), got {value!r}")
    return word in TRUTHY


def seconds(extras: Mapping[str, str], key: str, *, at_least: float = -math.inf, what: str = "seconds") -> float | None:
    """A preset key's seconds (None: not given); below ``at_least``, NaN or text is refused, saying ``what``."""
    if key not in extras:
        return None
    try:
        found = float(extras[key])
    except ValueError:
        found = math.nan
    if not found >= at_least:
        msg = f"{key} = {extras[key]!r}: expected {what}"
        raise OptionError(msg)
    return found
