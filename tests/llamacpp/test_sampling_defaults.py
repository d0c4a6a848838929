"""llama-server's sampling options -> request defaults, as llama.cpp's ``common/arg.cpp`` reads them."""

from __future__ import annotations

import pytest

from service.llamacpp.sampling_defaults import convert


def test_a_negative_temperature_is_greedy_as_llama_cpp_clamps_it() -> None:
    assert convert("temperature", "-1") == {"temperature": 0.0}
    assert convert("temperature", "0.25") == {"temperature": 0.25}


def test_a_dry_base_below_one_keeps_the_default() -> None:
    """llama.cpp sets ``dry_base`` only from a value >= 1, so no default is recorded for a smaller one."""
    assert convert("dry-base", "0.5") == {}
    assert convert("dry-base", "2") == {"dry_base": 2.0}


def test_a_bad_number_names_the_option() -> None:
    with pytest.raises(ValueError, match="temperature = 'hot'"):
        convert("temperature", "hot")
