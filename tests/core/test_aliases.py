"""Names added at run time (Ollama's copy): given events, when a decision runs, then these events,
and the fold resolves the names as it resolves a preset's aliases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.core import events as ev
from service.core.aliases import add_alias, alias_owner, remove_alias
from service.core.decision import Decision
from service.core.errors import CommandRejected
from service.core.fold import replay
from service.core.snapshot import state_from_json, state_to_json
from service.core.state import RouterState
from tests.core.examples import example
from tests.core.test_lifecycles import log

CHAT, SPARE = "chat", "org/spare-GGUF:Q8_0"
LATER = datetime(2026, 2, 1, tzinfo=UTC)


def _found(name: str) -> tuple[ev.Event, str]:
    return example(ev.ModelDiscovered, source="models_dir", path=f"/m/{name}.gguf", size=1), name


def world(*more: tuple[ev.Event, str]) -> RouterState:
    """Two models on disk, ``chat`` with the preset alias ``fast``, then ``more``."""
    return replay(log(_found(CHAT), _found(SPARE), (ev.ModelConfigured(aliases=("fast",)), CHAT), *more))


def after(state: RouterState, *entries: tuple[ev.Event, str | None]) -> RouterState:
    """``state`` with ``entries`` recorded after its events."""
    tail = [
        ev.Recorded(state.position + i, f"t{i}", model, event, {}, LATER)
        for i, (event, model) in enumerate(entries, start=1)
    ]
    return replay(tail, state)


def then(state: RouterState, decision: Decision[str]) -> RouterState:
    """The state once the decision's events are folded after ``state``'s."""
    return after(state, *((a.event, a.model) for a in decision.events))


class TestCopy:
    def test_a_copy_is_recorded_and_the_new_name_resolves_like_a_preset_alias(self) -> None:
        decision = add_alias(world(), CHAT, "mine")
        assert [(a.event, a.model) for a in decision.events] == [(ev.ModelAliased(alias="mine"), CHAT)]
        state = then(world(), decision)
        found = state.resolve("mine")
        assert found is not None and found.name == CHAT and found.aliases == ("fast", "mine")
        assert state.resolve("fast") is found

    def test_the_source_may_be_an_alias_or_a_short_user_repo(self) -> None:
        assert add_alias(world(), "fast", "mine").answer == CHAT
        assert add_alias(world(), "org/spare-GGUF", "mine").answer == SPARE

    def test_an_unknown_source_is_not_found(self) -> None:
        with pytest.raises(CommandRejected) as refused:
            add_alias(world(), "nope", "mine")
        assert refused.value.code == "model_not_found"

    @pytest.mark.parametrize("taken", [SPARE, "fast", "org/spare-GGUF"])
    def test_a_name_of_another_model_is_a_conflict(self, taken: str) -> None:
        with pytest.raises(CommandRejected) as refused:
            add_alias(world(), SPARE if taken == "fast" else CHAT, taken)
        assert refused.value.code == "conflict" and "already names" in refused.value.message

    def test_a_copied_name_of_another_model_is_a_conflict_too(self) -> None:
        with pytest.raises(CommandRejected) as refused:
            add_alias(world((ev.ModelAliased(alias="mine"), CHAT)), SPARE, "mine")
        assert refused.value.code == "conflict"

    @pytest.mark.parametrize("again", [CHAT, "fast", "mine"])
    def test_copying_onto_a_name_of_the_same_model_changes_nothing(self, again: str) -> None:
        decision = add_alias(world((ev.ModelAliased(alias="mine"), CHAT)), CHAT, again)
        assert decision.events == () and decision.answer == CHAT


class TestDelete:
    def test_deleting_a_copy_takes_back_that_name_only(self) -> None:
        given = world((ev.ModelAliased(alias="mine"), CHAT), (ev.ModelAliased(alias="other"), CHAT))
        decision = remove_alias(given, "mine")
        assert [(a.event, a.model) for a in decision.events] == [(ev.ModelAliasRemoved(alias="mine"), CHAT)]
        state = then(given, decision)
        assert state.resolve("mine") is None
        chat = state.resolve(CHAT)
        assert chat is not None and chat.available and chat.aliases == ("fast", "other")

    def test_only_added_names_are_copies(self) -> None:
        given = world((ev.ModelAliased(alias="mine"), CHAT))
        assert alias_owner(given, CHAT) is None and alias_owner(given, "fast") is None
        owner = alias_owner(given, "mine")
        assert owner is not None and owner.name == CHAT
        with pytest.raises(CommandRejected) as refused:
            remove_alias(given, "fast")  # a preset's alias: the preset gives it, a delete cannot take it back
        assert refused.value.code == "model_not_found"

    def test_removing_the_model_removes_its_copies(self) -> None:
        given = world((ev.ModelAliased(alias="mine"), CHAT), (example(ev.ModelRemoved), CHAT))
        chat = given.models[CHAT]
        assert chat.added_aliases == () and given.resolve("mine") is None
        assert chat.config.aliases == ("fast",)  # the preset's stays with its configuration


class TestFold:
    def test_a_copy_outlives_a_reload_and_a_snapshot(self) -> None:
        given = world((ev.ModelAliased(alias="mine"), CHAT), (ev.ModelConfigured(aliases=("quick",)), CHAT))
        assert given.models[CHAT].aliases == ("quick", "mine")  # model_configured replaces the presets' only
        assert state_from_json(state_to_json(given)) == given

    def test_a_preset_alias_wins_over_a_copy_given_to_another_model_before_it(self) -> None:
        given = world((ev.ModelAliased(alias="mine"), SPARE), (ev.ModelConfigured(aliases=("mine",)), CHAT))
        found = given.resolve("mine")
        assert found is not None and found.name == CHAT

    def test_events_about_unknown_models_or_names_change_nothing(self) -> None:
        given = world()
        state = after(given, (ev.ModelAliased(alias="x"), "ghost"), (ev.ModelAliasRemoved(alias="x"), CHAT))
        assert state.models == given.models and state.position == given.position + 2 and state.anomalies == 0
