"""The example table covers every required field, so :func:`example` builds every event type."""

from __future__ import annotations

from service.core import events as ev
from tests.core.examples import example


def test_every_event_type_can_be_built_from_its_id_alone() -> None:
    for cls in ev.EVENT_TYPES.values():
        event = example(cls)
        assert type(event) is cls and type(event).from_data(event.to_data()) == event
