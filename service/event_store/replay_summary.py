"""The replay's page summary on SQLite: plan a page from one aggregate row, not a row per event.

:func:`~service.event_store.replay.read_page` reads every row of a page to plan it, and on a
log that is 99.7% ``download_progress`` the Python work per row (the driver's tuple, the model
and payload strings, the msgspec read, the entry, the plan's step) was ~2 us of the ~2.5 us a
row cost. Here SQLite concatenates the page's columns into four strings (``group_concat``, in
C) and msgspec reads all the payloads of the page in one call; consecutive identical entries
(same model, run and total: a download's progress) are grouped by ``itertools.groupby`` and
planned as one (``plan``'s ``counts``). Only the kept rows come back whole, by position.

Exactly what ``read_page``'s rows give, or nothing (``None``: the caller reads the page row by
row) whenever the summary cannot say the same thing for sure: a model that is empty, a BLOB or
holds the separator, a page whose payloads msgspec cannot all read into the summary's struct
(malformed JSON, a subject that is not a string, a total that is not an integer: row by row,
such a row is simply kept, or raises when decoded), not as many payloads as rows, rows out of
order (a payload whose text is not UTF-8 is the caller's: the driver refuses the row). One
limit: two malformed payloads in a row, made to complete each other into valid JSON elements
(``{"job_id":"a"},{`` then ``"job_id":"b"}``), read as two good ones here where row by row they
raise. No writer of the log makes such text (each appends ``dumps`` of an event); ``modelrouter
verify`` reads every payload on its own. ``tests/recovery/test_replay_summary.py`` checks both
paths on random logs.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from typing import Any

import msgspec

from service.core.events import EVENT_TYPES
from service.core.superseding import SUPERSEDING, Entry, plan

__all__ = ["SUMMARY_SQL", "Summary", "plan_summary"]

_SEP = "\x1f"
"""Between models in the summary (a model holding it sends the page down the row path)."""
_RULES = list(SUPERSEDING.items())
assert len(_RULES) < 10, "kinds are one digit each"

_KINDS = "".join(
    f"WHEN type = '{type_}' AND schema_version = {EVENT_TYPES[type_].VERSION} THEN '{kind}' "
    for kind, (type_, _) in enumerate(_RULES, 1)
)
# Constants of this code only (event types and versions), never input. A model that is empty
# (NULL is the empty string here) or a BLOB (TEXT < BLOB: the string would stand for another
# model) is counted; a BLOB payload reads as its text, as msgspec reads the bytes row by row.
SUMMARY_SQL = (
    "SELECT count(*), group_concat(position, ','), group_concat(kind, ''), "
    f"group_concat(ifnull(model, ''), '{_SEP}'), sum(model = '' OR model >= x''), "
    "group_concat(CASE WHEN kind = '0' THEN '{}' ELSE data END, ',') "
    f"FROM (SELECT position, model, data, CASE {_KINDS}ELSE '0' END AS kind "
    "FROM events WHERE position > ? AND position <= ?)"
)
"""One row for the page of positions ``(after, upto]``: count, positions, one digit per row (0:
no run, else the rule's number), models, how many models the string cannot stand for, and the
payloads that may take part in a run (``{}`` for the others). A range, not ``ORDER BY position
LIMIT``: SQLite flattens it into one scan of the table in position order, where the limit's
subquery ran as a co-routine (0.50 s against 0.72 s of CPU at a million events); the order is
checked all the same."""


class _Key(msgspec.Struct, frozen=True, gc=False):
    """What the plan reads of a payload: the rules' subjects and totals. A subject may be absent
    or null here (the row then takes part in no run, as row by row, where the strict struct
    refuses it); a total is an integer, 0 when absent, as row by row. Equal keys compare equal
    in C, which is what grouping a run's rows needs. Untracked by the garbage collector (it holds
    no containers): a page makes thousands."""

    instance_id: str | None = None
    job_id: str | None = None
    bytes_total: int = 0


assert set(_Key.__struct_fields__) == {rule.subject for _, rule in _RULES} | {
    rule.zero_keeps for _, rule in _RULES if rule.zero_keeps is not None
}, "one field per subject (a string) and per total (an integer) of SUPERSEDING"
_read_keys = msgspec.json.Decoder(list[_Key]).decode
_read_positions = msgspec.json.Decoder(list[int]).decode
_RUN = {str(kind): (type_, rule) for kind, (type_, rule) in enumerate(_RULES, 1)}

Summary = tuple[int, list[int], list[int]]
"""``(rows read, positions of the rows to fold, what each stands for)``."""


# Any: the summary row's columns as the driver returns them.
def plan_summary(row: Sequence[Any]) -> Summary | None:
    """The plan of a page from its :data:`SUMMARY_SQL` row, or None: read it row by row."""
    count, positions_text, kinds, models_text, odd_models, payloads = row
    if not count:
        return 0, [], []
    if odd_models:
        return None
    models = models_text.split(_SEP)
    try:
        positions = _read_positions(f"[{positions_text}]")
        keys = _read_keys(f"[{payloads}]")
    except msgspec.DecodeError:  # also ValidationError: a row by row read keeps (or raises on) it
        return None
    if not (count == len(models) == len(positions) == len(kinds) == len(keys)) or positions != sorted(positions):
        return None
    entries: list[Entry] = []
    counts: list[int] = []
    ends: list[int] = []  # the index of each entry's last row
    end = -1
    for (model, kind, key), group in itertools.groupby(zip(models, kinds, keys, strict=True)):
        size = len(list(group))
        end += size
        entry = _entry(model or None, kind, key)
        if entry[1] is None:  # each row on its own: folded, and ends its model's runs
            entries.extend(itertools.repeat(entry, size))
            counts.extend(itertools.repeat(1, size))
            ends.extend(range(end - size + 1, end + 1))
        else:
            entries.append(entry)
            counts.append(size)
            ends.append(end)
    weights = plan(entries, counts)
    kept = [(positions[at], weight) for at, weight in zip(ends, weights, strict=True) if weight >= 0]
    return count, [position for position, _ in kept], [weight for _, weight in kept]


def _entry(model: str | None, kind: str, key: _Key) -> Entry:
    found = _RUN.get(kind)
    if found is None:
        return model, None, False
    type_, rule = found
    subject: Hashable = getattr(key, rule.subject)
    if subject is None:
        return model, None, False
    return model, (type_, subject), rule.zero_keeps is None or getattr(key, rule.zero_keeps) != 0
