"""The n-gram drafters' options on the worker's command line, checked as ``common/arg.cpp`` checks
them, with ``common/common.h``'s defaults; and :func:`make_speculator` building each drafter."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.core.launch import InferenceLaunch
from workers.inference.speculative import (
    NgramCache,
    NgramMapK,
    NgramMod,
    UnsupportedSpeculation,
    make_speculator,
)
from workers.inference.speculative._ngram_cache import ngram_cache_save


def test_the_defaults_are_llama_servers() -> None:
    launch = InferenceLaunch()
    for kind in ("k", "k4v"):
        sizes = [getattr(launch, f"spec_ngram_map_{kind}_{name}") for name in ("size_n", "size_m", "min_hits")]
        assert sizes == [12, 48, 1]
    assert (launch.spec_ngram_mod_n_match, launch.spec_ngram_mod_n_max, launch.spec_ngram_mod_n_min) == (24, 64, 48)
    assert (launch.lookup_cache_static, launch.lookup_cache_dynamic) == (None, None)


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--spec-ngram-map-k-size-n", "3"], "spec_ngram_map_k_size_n", 3),
        (["--spec-ngram-map-k-size-m", "1024"], "spec_ngram_map_k_size_m", 1024),
        (["--spec-ngram-map-k-min-hits", "2"], "spec_ngram_map_k_min_hits", 2),
        (["--spec-ngram-map-k4v-size-n", "1"], "spec_ngram_map_k4v_size_n", 1),
        (["--spec-ngram-map-k4v-size-m", "7"], "spec_ngram_map_k4v_size_m", 7),
        (["--spec-ngram-map-k4v-min-hits", "70000"], "spec_ngram_map_k4v_min_hits", 70000),  # no upper bound
        (["--spec-ngram-mod-n-min", "0"], "spec_ngram_mod_n_min", 0),
        (["--spec-ngram-mod-n-max", "0"], "spec_ngram_mod_n_max", 0),
        (["--spec-ngram-mod-n-match", "1"], "spec_ngram_mod_n_match", 1),
        (["--lookup-cache-static", "s.bin"], "lookup_cache_static", "s.bin"),
        (["-lcs", "s.bin"], "lookup_cache_static", "s.bin"),
        (["--lookup-cache-dynamic", "d.bin"], "lookup_cache_dynamic", "d.bin"),
        (["-lcd", "d.bin"], "lookup_cache_dynamic", "d.bin"),
    ],
)
def test_each_option_parses_from_the_command_line(argv: list[str], field: str, value: object) -> None:
    launch = InferenceLaunch.from_argv(argv)
    assert getattr(launch, field) == value
    assert InferenceLaunch.from_argv(launch.to_argv()) == launch


@pytest.mark.parametrize(
    "argv",
    [
        ["--spec-ngram-map-k-size-n", "0"],
        ["--spec-ngram-map-k4v-size-m", "1025"],
        ["--spec-ngram-map-k-min-hits", "0"],
        ["--spec-ngram-mod-n-min", "-1"],
        ["--spec-ngram-mod-n-max", "1025"],
        ["--spec-ngram-mod-n-match", "0"],
        ["--spec-ngram-mod-n-match", "x"],
    ],
)
def test_values_arg_cpp_refuses_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        InferenceLaunch.from_argv(argv)


def test_each_ngram_type_builds_its_drafter_with_its_options() -> None:
    launch = InferenceLaunch.from_argv(
        [
            "--spec-type",
            "ngram-cache,ngram-mod,ngram-map-k4v,ngram-map-k",
            "--spec-ngram-map-k-size-n",
            "3",
            "--spec-ngram-map-k4v-min-hits",
            "5",
            "--spec-ngram-mod-n-max",
            "32",
        ]
    )
    speculator = make_speculator(launch, 4)
    assert speculator is not None
    assert speculator.names == ["ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]  # llama.cpp's order
    k, k4v, mod, cache = speculator.drafters
    assert isinstance(k, NgramMapK) and (k.size_n, k.size_m, k.key_only) == (3, 48, True)
    assert isinstance(k4v, NgramMapK) and (k4v.min_hits, k4v.key_only) == (5, False)
    assert isinstance(mod, NgramMod) and (mod.n_match, mod.n_max, mod.n_min) == (24, 32, 48)
    assert isinstance(cache, NgramCache) and (cache.static, cache.dynamic, cache.n_max) == ({}, {}, 8)
    assert [d.n_max for d in speculator.drafters] == [48, 48, 32, 8]


def test_no_speculation_and_draft_models_are_as_before() -> None:
    assert make_speculator(InferenceLaunch(), 1) is None
    with pytest.raises(UnsupportedSpeculation, match="draft-simple: not available"):
        make_speculator(InferenceLaunch.from_argv(["--spec-type", "draft-simple"]), 1)


def test_ngram_cache_reads_its_files(tmp_path: Path) -> None:
    ngram_cache_save({(1, 2, -1, -1): {7: 3}}, tmp_path / "s.bin")
    ngram_cache_save({(5, -1, -1, -1): {6: 4}}, tmp_path / "d.bin")
    argv = ["--spec-type", "ngram-cache", "-lcs", str(tmp_path / "s.bin"), "-lcd", str(tmp_path / "d.bin")]
    speculator = make_speculator(InferenceLaunch.from_argv(argv), 1)
    assert speculator is not None
    (cache,) = speculator.drafters
    assert isinstance(cache, NgramCache)
    assert (cache.static, cache.dynamic) == ({(1, 2, -1, -1): {7: 3}}, {(5, -1, -1, -1): {6: 4}})


def test_an_unreadable_lookup_cache_fails_the_load_saying_which(tmp_path: Path) -> None:
    (tmp_path / "bad.bin").write_bytes(b"\x01" * 16)
    argv = ["--spec-type", "ngram-cache", "-lcd", str(tmp_path / "bad.bin")]
    with pytest.raises(UnsupportedSpeculation, match=r"--lookup-cache-dynamic: lookup cache .*bad\.bin is corrupt"):
        make_speculator(InferenceLaunch.from_argv(argv), 1)
    argv = ["--spec-type", "ngram-cache", "-lcs", str(tmp_path / "none.bin")]
    with pytest.raises(
        UnsupportedSpeculation, match=r"--lookup-cache-static: lookup cache .*none\.bin: cannot be read"
    ):
        make_speculator(InferenceLaunch.from_argv(argv), 1)


def test_lookup_caches_are_not_read_without_ngram_cache(tmp_path: Path) -> None:
    argv = ["--spec-type", "ngram-mod", "-lcs", str(tmp_path / "none.bin")]
    assert make_speculator(InferenceLaunch.from_argv(argv), 1) is not None
