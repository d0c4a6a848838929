"""The worker's ``-np``: auto (-1, the default) is llama-server's 4 slots in one KV pool; a number is
that many slots with a KV stream each, unless ``--kv-unified``."""

from __future__ import annotations

import pytest

from workers.inference._cli import parse_args


@pytest.mark.parametrize(
    ("extra", "slots", "unified"),
    [
        ([], 4, True),
        (["-np", "-1"], 4, True),
        (["-np", "2"], 2, False),
        (["--parallel", "4"], 4, False),
        (["-np", "2", "--kv-unified"], 2, True),
    ],
)
def test_np_auto_is_four_slots_in_one_pool(extra: list[str], slots: int, unified: bool) -> None:
    args = parse_args(["--model-path", "m.gguf", *extra])
    assert (args.n_parallel, args.kv_unified) == (slots, unified)
