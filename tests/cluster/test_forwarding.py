"""service/cluster/forwarding.py and the receiving side in service/api/auth.py: the caller's name
across a forwarding hop (issue 34)."""

from __future__ import annotations

from service.api.auth import forwarded_caller
from service.cluster.forwarding import CALLER_HEADER, forward_headers
from service.core.keys import FULL_PRINCIPAL, Principal

INCOMING = {"Content-Type": "application/json", "Authorization": "Bearer k", "X-Modelrouter-Caller": "mallory"}


def test_a_hop_to_another_node_carries_the_key_and_this_nodes_word_for_the_caller() -> None:
    sent = forward_headers(INCOMING, ("content-type",), "b", "alice")
    assert sent == {"Content-Type": "application/json", "Authorization": "Bearer k", CALLER_HEADER: "alice"}


def test_a_clients_own_caller_header_is_never_passed_on() -> None:
    assert "X-Modelrouter-Caller" not in forward_headers(INCOMING, ("content-type", CALLER_HEADER), "b")
    assert forward_headers(INCOMING, ("content-type",), None, "alice") == {"Content-Type": "application/json"}


def test_the_receiving_node_takes_a_valid_name_else_the_full_key() -> None:
    assert forwarded_caller({b"x-modelrouter-caller": b"alice"}) == Principal("alice")
    assert forwarded_caller({b"x-modelrouter-caller": b"alice"}).full, "the first node checked the scope"
    for bad in (b"", b"api-key", b"anonymous", b"a b", b"x" * 65):
        assert forwarded_caller({b"x-modelrouter-caller": bad}) == FULL_PRINCIPAL, bad
    assert forwarded_caller({}) == FULL_PRINCIPAL
