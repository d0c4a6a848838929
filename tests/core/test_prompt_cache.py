"""A model's prompt cache on disk (issue 35): what the fold keeps of it, and which files the total
budget across models deletes. No fixtures: the fold of a short log, one second between events."""

from __future__ import annotations

from pathlib import PurePath

from service.core import events as ev
from service.core.fold import replay
from service.core.prompt_cache import file_path, model_dir_name, model_sha256, over_budget, total_bytes
from service.core.snapshot import state_from_json, state_to_json
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.test_placement import Entry, held, ready, recorded, world


def saved(name: str, file: str, size: int, tokens: int = 100) -> Entry:
    return (example(ev.PromptCacheSaved, instance_id=f"i-{name}", file=file, bytes=size, tokens=tokens), name, None)


def restored(name: str, file: str, tokens: int = 100) -> Entry:
    return (example(ev.PromptCacheRestored, instance_id=f"i-{name}", file=file, tokens=tokens), name, None)


def discarded(name: str, file: str, reason: str = "budget") -> Entry:
    return (ev.PromptCacheDiscarded(file=file, reason=reason), name, None)


def then(state: RouterState, *entries: Entry) -> RouterState:
    return replay(recorded(*entries, after=state), state)


class TestTheFold:
    def test_a_save_adds_its_file_with_its_size_tokens_and_time(self) -> None:
        state = world(held("m"), ready("m"), [saved("m", "a.bin", 300, tokens=4000)])
        entry = state.models["m"].prompt_cache["a.bin"]
        assert (entry.tokens, entry.bytes, entry.instance_id) == (4000, 300, "i-m")
        assert entry.saved_at is not None and entry.restored_at is None
        assert total_bytes(state) == 300

    def test_a_second_save_of_the_same_name_replaces_it(self) -> None:
        state = world(held("m"), [saved("m", "a.bin", 300), saved("m", "a.bin", 500)])
        assert [e.bytes for e in state.models["m"].prompt_cache.values()] == [500]

    def test_a_restore_touches_the_file_and_counts_its_tokens(self) -> None:
        state = world(held("m"), [saved("m", "a.bin", 300), restored("m", "a.bin", 4000), restored("m", "a.bin", 10)])
        entry = state.models["m"].prompt_cache["a.bin"]
        assert entry.restored_at is not None and entry.saved_at is not None
        assert entry.restored_at > entry.saved_at
        assert state.models["m"].prompt_cache_restored_tokens == 4010

    def test_a_restore_of_a_file_never_saved_is_counted_not_added(self) -> None:
        state = world(held("m"), [restored("m", "old.bin", 7)])
        assert state.models["m"].prompt_cache == {}
        assert state.models["m"].prompt_cache_restored_tokens == 7

    def test_a_discard_drops_the_file_and_an_unknown_one_changes_nothing(self) -> None:
        state = world(held("m"), [saved("m", "a.bin", 300), saved("m", "b.bin", 100), discarded("m", "a.bin")])
        assert list(state.models["m"].prompt_cache) == ["b.bin"]
        assert then(state, discarded("m", "zzz.bin")).models["m"] == state.models["m"]

    def test_removing_the_model_drops_every_file(self) -> None:
        state = world(held("m"), [saved("m", "a.bin", 300)])
        gone = then(state, (ev.ModelRemoved(files=("/m/m.gguf",), bytes_freed=1), "m", None))
        assert gone.models["m"].prompt_cache == {}
        assert total_bytes(gone) == 0

    def test_events_of_an_unknown_model_are_ignored(self) -> None:
        state = world(held("m"), [saved("ghost", "a.bin", 300)])
        assert "ghost" not in state.models

    def test_a_snapshot_of_it_reads_back_equal(self) -> None:
        state = world(held("m"), [saved("m", "a.bin", 300), restored("m", "a.bin")])
        assert state_from_json(state_to_json(state)) == state


class TestTheTotalBudget:
    def test_within_it_nothing_goes(self) -> None:
        state = world(held("a"), held("b"), [saved("a", "1", 400), saved("b", "1", 400)])
        assert over_budget(state, 800) == []

    def test_over_it_the_least_recently_used_go_first_until_it_fits(self) -> None:
        state = world(held("a"), held("b"), [saved("a", "old", 400), saved("b", "mid", 300), saved("a", "new", 300)])
        chosen = over_budget(state, 700)
        assert [(d.model, d.file, d.bytes) for d in chosen] == [("a", "old", 400)]
        assert [(d.model, d.file) for d in over_budget(state, 350)] == [("a", "old"), ("b", "mid")]

    def test_a_restore_makes_a_file_recent_again(self) -> None:
        state = world(held("a"), held("b"), [saved("a", "old", 400), saved("b", "mid", 300), restored("a", "old")])
        assert [(d.model, d.file) for d in over_budget(state, 500)] == [("b", "mid")]

    def test_a_budget_of_zero_keeps_nothing(self) -> None:
        state = world(held("a"), [saved("a", "1", 1), saved("a", "2", 1)])
        assert len(over_budget(state, 0)) == 2

    def test_after_the_chosen_discards_are_folded_the_total_fits(self) -> None:
        state = world(held("a"), held("b"), [saved("a", "1", 500), saved("b", "2", 500), saved("a", "3", 500)])
        chosen = over_budget(state, 1000)
        after = then(state, *[discarded(d.model, d.file) for d in chosen])
        assert total_bytes(after) <= 1000
        assert over_budget(after, 1000) == []


class TestWhereTheFilesLie:
    def test_each_model_has_its_own_safe_directory(self) -> None:
        names = {model_dir_name(n) for n in ("user/repo:Q4", "user_repo:Q4", "../etc", "a b")}
        assert len(names) == 4
        assert all("/" not in n and not n.startswith(".") for n in names)

    def test_a_relative_file_is_in_its_models_directory_an_absolute_one_as_is(self) -> None:
        root = PurePath("/home/prompt-cache")
        assert file_path(root, "m", "a.bin") == root / model_dir_name("m") / "a.bin"
        assert file_path(root, "m", "/elsewhere/a.bin") == PurePath("/elsewhere/a.bin")

    def test_the_model_sha256_is_its_weights_not_its_projectors(self) -> None:
        files = (
            {"path": "mmproj-x.gguf", "size": 1, "sha256": "11" * 32},
            {"path": "x-Q4.gguf", "size": 1, "sha256": "22" * 32},
        )
        state = world([(ev.ModelDiscovered(source="models_dir", path="/m/x-Q4.gguf", files=files, size=2), "x", None)])
        assert model_sha256(state.models["x"]) == "22" * 32
        unknown = world(held("m"))
        assert model_sha256(unknown.models["m"]) is None
