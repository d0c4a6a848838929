"""Request bodies as single-model mode declares them: the same members, ``model`` optional.

llama-server's single-model mode serves whatever a request names, or none
(:mod:`service.core.server_mode`), so its ``/schema`` must not call ``model``
required; router mode keeps it required, as llama.cpp's router does. Derived
from each router-mode body rather than written twice, so the two can never
drift apart.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from service.api.schemas._common import ModelName

# Any (here and below): any request body Struct; the derived one has its members.
_DERIVED: dict[type[Any], type[Any]] = {}


def model_optional(body: type[Any]) -> type[Any]:
    """``body`` (a msgspec Struct with ``model``) with ``model`` optional; same name, same other members.
    One derived class per body, so that every app built in a process names the same component."""
    if body in _DERIVED:
        return _DERIVED[body]
    derived: type[Any] = msgspec.defstruct(
        body.__name__,
        [("model", ModelName | UnsetType, UNSET)],
        bases=(body,),
        kw_only=True,
        frozen=True,
        module=body.__module__,
    )
    derived.__doc__ = body.__doc__
    _DERIVED[body] = derived
    return derived
