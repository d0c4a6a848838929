"""Where the router sends a conversation's stream routes (llama.cpp's ``resolve_child_for_conv``),
and the ephemeral conversation → model map that feeds it."""

from __future__ import annotations

from service.api.conversations import ConversationOwners
from service.core import events as ev
from service.core.conversation_streams import NoOwner, StreamOwner, stream_owner
from tests.core.test_lifecycles import AVAILABLE, READY, M, state_of


def test_a_ready_model_owns_its_conversations_a_loading_one_asks_for_a_retry_an_unloaded_one_has_none() -> None:
    assert stream_owner(state_of(*READY), M, None) == StreamOwner(M, "http://x", None)
    assert stream_owner(state_of(*READY[:3]), M, None) is NoOwner.LOADING
    stopped = state_of(
        *READY,
        ev.InstanceStopRequested(instance_id="i1", reason="unload"),
        ev.InstanceStopped(instance_id="i1", reason="unload"),
    )
    assert stream_owner(stopped, M, None) is NoOwner.GONE
    assert stream_owner(state_of(AVAILABLE), M, None) is NoOwner.GONE
    assert stream_owner(state_of(*READY), None, None) is NoOwner.GONE, "a conversation never seen"
    assert stream_owner(state_of(*READY), "removed-model", None) is NoOwner.GONE


def test_a_stop_or_a_newer_request_invalidates_a_ticket_and_lookups_see_sub_conversations() -> None:
    owners = ConversationOwners(max_entries=3)
    first = owners.remember("c", "a")
    assert owners.alive("c", first) and owners.lookup("c") == "a"
    second = owners.remember("c", "b")
    assert not owners.alive("c", first) and owners.alive("c", second) and owners.lookup("c") == "b"
    owners.forget("c")
    assert not owners.alive("c", second) and owners.lookup("c") is None
    assert owners.remember("", "a") == 0 and owners.remember("x", "") == 0, "nothing to remember"
    owners.remember("d", "a")
    owners.remember("d::tool", "b")
    assert owners.owners(["d", "nobody", "d"]) == {"a": ["d"], "b": ["d"]}
    owners.remember("e", "a")
    owners.remember("f", "a")  # past max_entries: the oldest ("d") goes
    assert owners.lookup("d") is None and owners.owners(["d"]) == {"b": ["d"]}
