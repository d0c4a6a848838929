"""The one boolean parser: environment variables, preset files and anything else
that spells a flag as text. (HTTP query flags are typed ``bool`` parameters that
the framework parses: ``true``/``false``/``1``/``0``.)

Pure: stdlib only.
"""

from __future__ import annotations

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def parse_bool(text: str, *, empty: bool | None = None) -> bool:
    """``text`` as a flag, case-insensitively. An empty string is ``empty`` when
    given (an unset variable), else an error like any other word. Raises ValueError."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    if not word and empty is not None:
        return empty
    msg = f"expected true or false (1/0, yes/no, on/off), got {text!r}"
    raise ValueError(msg)
