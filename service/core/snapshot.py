"""Snapshots of the fold: ``RouterState`` <-> JSON-compatible dicts.

A snapshot is a cache of ``replay(events[:position])`` so that startup replays
only the tail. It is trusted only when it was written by the same fold: bump
:data:`FOLD_VERSION` whenever a fold handler's behaviour or the state's shape
changes, and every older snapshot is ignored and rebuilt from events.

The codec is derived once from the dataclasses' type hints (datetimes as ISO
text, enums by value, nested dataclasses, ``Mapping`` and ``tuple[X, ...]``),
so adding a field of a supported type needs no code here; a field of an
unsupported type fails at import, not at the first snapshot. Decoding is
strict (missing or unknown keys raise): a snapshot of another shape must be
rejected, never half-read.

Pure module: stdlib only.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from collections.abc import Mapping as AbcMapping
from datetime import datetime
from typing import Any

from service.core.events import JSON
from service.core.state import RouterState

FOLD_VERSION: int = 18
"""Version of the fold's semantics and of the state's shape; stored with each snapshot."""

SnapshotJSON = dict[str, JSON]
"""One of the fold's dataclasses as a snapshot stores it: a JSON object, field name to encoded value.
Free-form as JSON: its shape is the dataclass's, checked field by field when it is read back."""

# Any (in the encoders and decoders below): a codec is built per field type, so it takes and gives that
# field's values, whatever their type; the state's own annotations say which.
Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]  # Any: as Encoder's


def _identity(value: Any) -> Any:  # Any: as Encoder's
    return value


def _optional(inner: tuple[Encoder, Decoder]) -> tuple[Encoder, Decoder]:
    enc, dec = inner
    return (lambda v: None if v is None else enc(v)), (lambda v: None if v is None else dec(v))


def _mapping(inner: tuple[Encoder, Decoder]) -> tuple[Encoder, Decoder]:
    enc, dec = inner
    if enc is _identity:
        # JSON-native values (params, file entries): a shallow copy is the whole job.
        return dict, dict
    return (lambda m: {k: enc(v) for k, v in m.items()}), (lambda m: {k: dec(v) for k, v in m.items()})


def _tuple(inner: tuple[Encoder, Decoder]) -> tuple[Encoder, Decoder]:
    enc, dec = inner
    return (lambda t: [enc(v) for v in t]), (lambda t: tuple(dec(v) for v in t))


def _codec_for(hint: object) -> tuple[Encoder, Decoder]:
    """(encode, decode) for one annotated type; raises TypeError for types a
    snapshot cannot represent exactly."""
    if hint is Any or hint in (int, str, bool, float):  # Any: a field annotated Any has no codec to apply
        return _identity, _identity
    if hint is datetime:
        return (lambda d: d.isoformat()), datetime.fromisoformat
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return (lambda e: e.value), hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass_codec(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal and all(isinstance(a, str) for a in args):  # a named string (Device.type)
        return _identity, _identity
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _optional(_codec_for(rest[0]))
    if origin is AbcMapping or origin is dict:
        if args and args[0] is not str:
            msg = f"snapshot: only str-keyed mappings are supported, got {hint!r}"
            raise TypeError(msg)
        return _mapping(_codec_for(args[1] if args else Any))  # Any: an unparametrised mapping
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple(_codec_for(args[0]))
    msg = f"snapshot: unsupported field type {hint!r}"
    raise TypeError(msg)


_DATACLASS_CODECS: dict[type, tuple[Encoder, Decoder]] = {}


def _dataclass_codec(cls: type) -> tuple[Encoder, Decoder]:
    found = _DATACLASS_CODECS.get(cls)
    if found is not None:
        return found
    hints = typing.get_type_hints(cls)
    plan = [(f.name, *_codec_for(hints[f.name])) for f in dataclasses.fields(cls)]
    names = frozenset(name for name, _, _ in plan)

    def encode(obj: Any) -> SnapshotJSON:  # Any: as Encoder's
        return {name: enc(getattr(obj, name)) for name, enc, _ in plan}

    def decode(data: Any) -> Any:  # Any: as Decoder's
        if not isinstance(data, dict) or data.keys() != names:
            extra = sorted(set(data) - names) if isinstance(data, dict) else []
            missing = sorted(names - set(data)) if isinstance(data, dict) else []
            msg = f"snapshot: {cls.__name__} shape mismatch (missing {missing}, unknown {extra})"
            raise ValueError(msg)
        return cls(**{name: dec(data[name]) for name, _, dec in plan})

    _DATACLASS_CODECS[cls] = (encode, decode)
    return encode, decode


_ENCODE_STATE, _DECODE_STATE = _dataclass_codec(RouterState)


def state_to_json(state: RouterState) -> SnapshotJSON:
    """A JSON-compatible dict holding every field of ``state`` (``json.dumps``-able)."""
    result: SnapshotJSON = _ENCODE_STATE(state)
    return result


def state_from_json(data: SnapshotJSON) -> RouterState:
    """Inverse of :func:`state_to_json`; raises ``ValueError``/``TypeError`` on a
    dict of another shape."""
    state: RouterState = _DECODE_STATE(data)
    return state


def state_shape() -> str:
    """A stable text description of the state's shape (field names and types,
    recursively); tests fingerprint it so a shape change without a
    :data:`FOLD_VERSION` bump is caught."""
    seen: list[str] = []
    pending: list[type] = [RouterState]
    done: set[type] = set()
    while pending:
        cls = pending.pop(0)
        if cls in done:
            continue
        done.add(cls)
        if issubclass(cls, enum.Enum):
            seen.append(f"{cls.__name__}[{', '.join(str(m.value) for m in cls)}]")
            continue
        hints = typing.get_type_hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]  # not an Enum: a state dataclass
        seen.append(f"{cls.__name__}({', '.join(f'{n}: {_type_name(hints[n])}' for n in names)})")
        for name in names:
            pending.extend(_nested_types(hints[name]))
    return "\n".join(seen)


def _type_name(hint: object) -> str:
    # Our own spelling, so the fingerprint does not follow typing's repr across Pythons.
    if hint is Any:  # Any: the name of a field annotated Any
        return "Any"
    if hint is Ellipsis:
        return "..."
    if hint is type(None):
        return "None"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return getattr(hint, "__name__", str(hint))


def _nested_types(hint: object) -> list[type]:
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or issubclass(hint, enum.Enum)):
        return [hint]
    return [t for arg in typing.get_args(hint) for t in _nested_types(arg)]
