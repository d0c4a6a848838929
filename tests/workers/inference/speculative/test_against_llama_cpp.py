"""The n-gram drafters against llama.cpp's own code: the vendored ``common/ngram-map.cpp``,
``ngram-mod.cpp`` and ``ngram-cache.cpp``, compiled with a small driver that calls them as
``common/speculative.cpp``'s impls do (``llama_ngram_harness.cpp``), run the same random sessions
(begin, draft, accept, as a server slot does) as the Python drafters; every draft must be the same.

The one thing that cannot match, ``ngram-cache``'s choice between equally counted tokens (the order
of a ``std::unordered_map``), is pinned on both sides to the smaller token for these runs. Skipped
without a C++ compiler; the sources are the pinned llama-cpp-python sdist's (devtools.llama_build).
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools import llama_build
from workers.inference.speculative import _ngram_cache
from workers.inference.speculative._ngram_cache import LookupCache, LookupCacheError, NgramCache, ngram_cache_load
from workers.inference.speculative._ngram_map import NgramMapK
from workers.inference.speculative._ngram_mod import TABLE_SIZE, NgramMod
from workers.inference.speculative._protocol import Drafter

HERE = Path(__file__).parent
SOURCES = ("ngram-map.cpp", "ngram-map.h", "ngram-mod.cpp", "ngram-mod.h", "ngram-cache.cpp", "ngram-cache.h")
STUBS = {  # what the three files need of llama.h, common.h and log.h
    "llama.h": "#pragma once\n#include <cstdint>\ntypedef int32_t llama_token;\n#define LLAMA_TOKEN_NULL -1\n",
    "common.h": '#pragma once\n#include "llama.h"\n#include <cstdio>\n#include <cstdlib>\n#include <vector>\n'
    "typedef std::vector<llama_token> llama_tokens;\n"
    "#define GGML_ABORT(...) do { fprintf(stderr, __VA_ARGS__); abort(); } while (0)\n"
    '#define GGML_ASSERT(x) do { if (!(x)) { fprintf(stderr, "assert %s\\n", #x); abort(); } } while (0)\n'
    "static inline int64_t ggml_time_ms() { return 0; }\n",
    "log.h": "#pragma once\n#define LOG_DBG(...) ((void) 0)\n#define LOG_INF(...) ((void) 0)\n",
}
TIES = (  # ngram-cache.cpp's two argmax loops: among equals, the smaller token (llama.cpp: the map's order)
    (
        "if (count_static > max_count_static) {",
        "if (count_static > max_count_static || (count_static == max_count_static && token < max_token)) {",
    ),
    (
        "if (count_primary*count_static > max_count_primary*max_count_static) {",
        "if (count_primary*count_static > max_count_primary*max_count_static || (count_primary*count_static == max_count_primary*max_count_static && token < max_token)) {",
    ),
)


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    common = llama_build.vendored_llama_cpp() / "common"
    build = tmp_path_factory.mktemp("ngram-harness")
    for name in SOURCES:
        shutil.copy(common / name, build / name)
    for name, text in STUBS.items():
        (build / name).write_text(text)
    cache_cpp = (build / "ngram-cache.cpp").read_text()
    for old, new in TIES:
        assert cache_cpp.count(old) == 1, f"ngram-cache.cpp changed: {old}"
        cache_cpp = cache_cpp.replace(old, new)
    (build / "ngram-cache.cpp").write_text(cache_cpp)
    shutil.copy(HERE / "llama_ngram_harness.cpp", build / "harness.cpp")
    units = ["harness.cpp", "ngram-map.cpp", "ngram-mod.cpp", "ngram-cache.cpp"]
    subprocess.run([cxx, "-O1", "-std=c++17", "-w", "-o", "harness", *units], cwd=build, check=True, timeout=300)
    return build / "harness"


def _tokens(tokens: list[int]) -> str:
    return " ".join(map(str, [len(tokens), *tokens]))


def _session(
    drafter: Drafter, rng: random.Random, alphabet: int, min_prompt: int = 0, copying: float = 0.9
) -> tuple[list[str], list[list[int]]]:
    """A slot's requests: each begins with a prompt (the last one extended, cut, or a new one), then
    samples tokens (copying an earlier stretch with probability ``copying`` a token, so that drafts
    happen), drafting before each and accepting part of each draft. Returns the script for the
    harness and the drafts."""
    lines: list[str] = []
    drafts: list[list[int]] = []
    history: list[int] = []
    for _ in range(rng.randint(1, 4)):
        fresh = [rng.randrange(alphabet) for _ in range(rng.randrange(min_prompt, 150))]
        prompt = rng.choice([history + fresh[:30], history[: rng.randrange(len(history) + 1)] + fresh[:10], fresh])
        prompt = prompt if len(prompt) >= min_prompt else fresh
        drafter.begin(0, prompt)
        lines.append(f"B {_tokens(prompt)}")
        history = list(prompt)
        copy_from = 0
        for _ in range(rng.randint(5, 150)):
            copy_from = copy_from + 1 if rng.random() < copying else rng.randrange(len(history) + 1)
            last = history[copy_from] if copy_from < len(history) else rng.randrange(alphabet)
            got = drafter.draft(0, history, last, 1 << 30)
            drafts.append(got)
            lines.append(f"D {last} {_tokens(history)}")
            history.append(last)
            if got:
                accepted = rng.randint(0, len(got))
                drafter.accept(0, accepted)
                lines.append(f"A {accepted}")
                history += got[:accepted]
                copy_from += accepted
    return lines, drafts


def _llama_cpp(harness: Path, head: str, lines: list[str]) -> list[list[int]]:
    run = subprocess.run([harness], input="\n".join([head, *lines]) + "\n", capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return [[int(t) for t in line.split()] for line in run.stdout.splitlines()]


@pytest.mark.parametrize("key_only", [True, False], ids=["ngram-map-k", "ngram-map-k4v"])
def test_ngram_map_drafts_as_llama_cpp(harness: Path, key_only: bool) -> None:
    drafted = {"defaults": 0, "small": 0}
    for seed in range(60):
        rng = random.Random(seed)
        n, m, min_hits = (12, 48, 1) if seed < 4 else (rng.randint(1, 4), rng.randint(1, 8), rng.randint(1, 3))
        alphabet = 300 if seed < 4 else rng.randint(2, 6)
        copying = 0.995 if seed < 4 else 0.9
        lines, ours = _session(NgramMapK(n, m, min_hits, key_only), rng, alphabet, copying=copying)
        assert ours == _llama_cpp(harness, f"map {n} {m} {int(key_only)} {min_hits}", lines), f"seed {seed}"
        drafted["defaults" if seed < 4 else "small"] += sum(1 for d in ours if d)
    assert drafted["defaults"] >= 10 and drafted["small"] >= 500, f"too few drafts to tell: {drafted}"


def test_ngram_mod_drafts_as_llama_cpp(harness: Path) -> None:
    drafted = {"defaults": 0, "small": 0}
    for seed in range(60):
        rng = random.Random(seed)
        if seed < 2:
            n_match, n_max, n_min, size, alphabet, copying = 24, 64, 48, TABLE_SIZE, 300, 0.999
        else:
            n_match, n_max, n_min = rng.randint(1, 5), rng.randint(0, 12), rng.randint(0, 8)
            size, alphabet, copying = rng.choice([7, 64, 4096]), rng.randint(2, 6), 0.9
        lines, ours = _session(NgramMod(n_match, n_max, n_min, size), rng, alphabet, copying=copying)
        assert ours == _llama_cpp(harness, f"mod {n_match} {n_max} {n_min} {size}", lines), f"seed {seed}"
        drafted["defaults" if seed < 2 else "small"] += sum(1 for d in ours if d)
    assert drafted["defaults"] >= 10 and drafted["small"] >= 500, f"too few drafts to tell: {drafted}"


def _by_token(cache: LookupCache) -> LookupCache:
    """``cache`` with each n-gram's tokens in ascending order: the first of equals is the smaller."""
    for key, part in cache.items():
        cache[key] = dict(sorted(part.items()))
    return cache


def test_ngram_cache_drafts_as_llama_cpp_from_its_files(
    harness: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    update: Callable[..., None] = _ngram_cache.ngram_cache_update

    def update_by_token(cache: LookupCache, *args: object) -> None:
        update(cache, *args)
        _by_token(cache)

    monkeypatch.setattr(_ngram_cache, "ngram_cache_update", update_by_token)
    drafted = 0
    for seed in range(40):
        rng = random.Random(seed)
        alphabet = rng.randint(2, 8)
        static, dynamic = tmp_path / f"static{seed}.bin", tmp_path / f"dynamic{seed}.bin"
        corpus = [rng.randrange(alphabet) for _ in range(400)]  # llama-lookup-create's 2-grams; a dynamic 1..4
        _llama_cpp(
            harness,
            "cache - -",
            [f"U {static} 2 2 {_tokens(corpus[:300])}", f"U {dynamic} 1 4 {_tokens(corpus[300:])}"],
        )
        drafter = NgramCache(_by_token(ngram_cache_load(static)), _by_token(ngram_cache_load(dynamic)))
        lines, ours = _session(drafter, rng, alphabet, min_prompt=3)  # shorter reads out of bounds in llama.cpp
        assert ours == _llama_cpp(harness, f"cache {static} {dynamic}", lines), f"seed {seed}"
        drafted += sum(1 for d in ours if d)
    assert drafted >= 500, f"too few drafts to tell: {drafted}"


@pytest.mark.parametrize(
    "data",
    [
        b"",
        struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, 3) + b"\x01" * 15,
        struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, 3) * 2,
        struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, 3) + b"\x01" * 16,
        struct.pack("<4ii", 1, 2, -1, -1, 0),
        struct.pack("<4ii2i", 1, 2, -1, -1, 1, 7, -3),
        struct.pack("<4ii2ii", 1, 2, -1, -1, 2, 7, 3, 8),
    ],
    ids=["empty", "short-tail", "repeated", "no-count", "no-tokens", "bad-count", "cut-pairs"],
)
def test_a_file_reads_here_exactly_when_llama_cpp_reads_it(harness: Path, tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "lookup.bin"
    path.write_bytes(data)
    run = subprocess.run([harness], input=f"cache {path} -\nD 2 1 1\n", capture_output=True, text=True, timeout=60)
    try:
        drafted = NgramCache(static=ngram_cache_load(path)).draft(0, [1], 2, 8)
    except LookupCacheError:
        assert run.returncode != 0, "llama.cpp reads it"
    else:
        assert run.returncode == 0, "llama.cpp aborts on it"
        assert run.stdout.split() == [str(t) for t in drafted]
