"""Model names and GGUF file choice (pure; llama.cpp's rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.core.model_spec import (
    FileEntry,
    IncompleteSplit,
    InvalidModelName,
    ModelSpec,
    NoGgufFiles,
    QuantNotFound,
    SplitInfo,
    available_quants,
    choose_files,
    parse_model_spec,
    split_info,
)

SHA = "a" * 64


def files(*paths: str) -> list[FileEntry]:
    return [FileEntry(p, 100 + i, SHA) for i, p in enumerate(paths)]


# --- parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "repo", "quant", "revision"),
    [
        ("user/repo", "user/repo", None, None),
        ("user/repo:q4_k_m", "user/repo", "Q4_K_M", None),
        ("user/repo:Q8_0@main", "user/repo", "Q8_0", "main"),
        ("user/repo@v1.0", "user/repo", None, "v1.0"),
        ("  ggml-org/gemma-3-4b-it-GGUF:Q4_K_M  ", "ggml-org/gemma-3-4b-it-GGUF", "Q4_K_M", None),
        ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:IQ4_XS", "bartowski/Llama-3.2-1B-Instruct-GGUF", "IQ4_XS", None),
        ("unsloth/Qwen3-8B-GGUF:UD-Q4_K_XL", "unsloth/Qwen3-8B-GGUF", "UD-Q4_K_XL", None),
        ("user/repo@refs/pr/1", "user/repo", None, "refs/pr/1"),
        ("user/repo@" + "a" * 40, "user/repo", None, "a" * 40),
    ],
)
def test_parse_valid(text: str, repo: str, quant: str | None, revision: str | None) -> None:
    spec = parse_model_spec(text)
    assert (spec.repo, spec.quant, spec.revision) == (repo, quant, revision)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "non-empty"),
        ("   ", "non-empty"),
        ("repo", "exactly one '/'"),
        ("a/b/c", "exactly one '/'"),
        ("user/", "may contain only"),
        ("/repo", "may contain only"),
        ("us er/repo", "may contain only"),
        ("user/-repo", "may contain only"),
        ("user/re--po", "'--'"),
        ("user/re..po", "'..'"),
        ("user/repo.git", ".git"),
        ("user/repo:", "empty quant"),
        ("user/repo:Q4 K", "quant"),
        ("user/repo@", "empty revision"),
        ("user/repo@main:Q4_K_M", "quant before the revision"),
        ("user/repo@../x", "invalid revision"),
        ("u/" + "r" * 100, "longer than"),
    ],
)
def test_parse_invalid(text: str, fragment: str) -> None:
    with pytest.raises(InvalidModelName) as info:
        parse_model_spec(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_parse_rejects_non_string() -> None:
    with pytest.raises(InvalidModelName):
        parse_model_spec(None)  # type: ignore[arg-type]


def test_canonical_name() -> None:
    spec = parse_model_spec("User/Repo:q4_k_m@dev")
    assert spec.canonical == "User/Repo:Q4_K_M"
    assert str(spec) == "User/Repo:Q4_K_M@dev"
    assert (spec.user, spec.name) == ("User", "Repo")
    assert parse_model_spec("user/repo").canonical == "user/repo"
    assert parse_model_spec("user/repo").with_quant("q8_0").canonical == "user/repo:Q8_0"


_seg = st.from_regex(r"[A-Za-z0-9_]([A-Za-z0-9_]{0,10})", fullmatch=True)


@given(
    user=_seg,
    name=_seg,
    quant=st.none() | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_]{0,8}", fullmatch=True),
    revision=st.none() | st.from_regex(r"[a-z0-9][a-z0-9_]{0,8}", fullmatch=True),
)
def test_str_round_trips(user: str, name: str, quant: str | None, revision: str | None) -> None:
    spec = ModelSpec(f"{user}/{name}", quant.upper() if quant else None, revision)
    assert parse_model_spec(str(spec)) == spec


# --- file choice -----------------------------------------------------------------


def test_split_info() -> None:
    assert split_info("m-Q4_K_M-00002-of-00003.gguf") == SplitInfo("m-Q4_K_M", "Q4_K_M", 2, 3)
    assert split_info("dir/model.q8_0.gguf") == SplitInfo("dir/model.q8_0", "Q8_0", 1, 1)
    assert split_info("README.md") is None


def test_default_prefers_q4_k_m_then_q8_0_then_first() -> None:
    listing = files("m-Q2_K.gguf", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "README.md")
    assert choose_files(listing, None).primary.path == "m-Q4_K_M.gguf"
    assert choose_files(listing, None).quant == "Q4_K_M"
    assert choose_files(files("m-Q2_K.gguf", "m-Q8_0.gguf"), None).primary.path == "m-Q8_0.gguf"
    only = choose_files(files("b-Q5_K_S.gguf", "a-Q6_K.gguf"), None)
    assert only.primary.path == "a-Q6_K.gguf" and only.quant == "Q6_K"
    untagged = choose_files(files("model.gguf"), None)
    assert untagged.primary.path == "model.gguf" and untagged.quant is None


def test_quant_match_is_case_insensitive_and_exact_first() -> None:
    listing = files("m-IQ4_XS.gguf", "m-q4_xs.gguf", "m-Q4_K_M.gguf", "m-Q4_K.gguf")
    assert choose_files(listing, "q4_xs").primary.path == "m-q4_xs.gguf"
    assert choose_files(listing, "Q4_K").primary.path == "m-Q4_K.gguf"
    assert choose_files(listing, "iq4_xs").primary.path == "m-IQ4_XS.gguf"
    assert choose_files(listing, "q4_xs").quant == "Q4_XS"


def test_quant_named_by_directory_or_prefix() -> None:
    listing = files("UD-Q4_K_XL/M-UD-Q4_K_XL-00001-of-00002.gguf", "UD-Q4_K_XL/M-UD-Q4_K_XL-00002-of-00002.gguf")
    choice = choose_files(listing, "UD-Q4_K_XL")
    assert [f.path for f in choice.model_files] == [f.path for f in listing]


def test_split_brings_all_parts_in_order() -> None:
    listing = files(
        "m-Q4_K_M-00003-of-00003.gguf", "m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00002-of-00003.gguf", "m-Q8_0.gguf"
    )
    choice = choose_files(listing, "Q4_K_M")
    assert [f.path for f in choice.model_files] == [f"m-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert choice.files == choice.model_files


def test_incomplete_split_is_refused() -> None:
    with pytest.raises(IncompleteSplit, match=r"missing part\(s\) \[2\]"):
        choose_files(files("m-Q4_K_M-00001-of-00003.gguf", "m-Q4_K_M-00003-of-00003.gguf"), None)


def test_mmproj_prefers_matching_quant_else_any() -> None:
    listing = files("m-Q8_0.gguf", "m-Q4_K_M.gguf", "mmproj-m-F16.gguf", "mmproj-m-Q8_0.gguf")
    assert choose_files(listing, "Q8_0").mmproj.path == "mmproj-m-Q8_0.gguf"  # type: ignore[union-attr]
    # no exact match for Q4_K_M: the closest bit width (8 is closer to 4 than 16)
    assert choose_files(listing, "Q4_K_M").mmproj.path == "mmproj-m-Q8_0.gguf"  # type: ignore[union-attr]
    only_f16 = choose_files(files("m-Q4_K_M.gguf", "mmproj-F16.gguf"), None)
    assert only_f16.mmproj is not None and only_f16.files[-1].path == "mmproj-F16.gguf"
    assert choose_files(files("m-Q4_K_M.gguf"), None).mmproj is None


def test_mmproj_must_be_in_model_directory_or_above() -> None:
    listing = files("Q4/m-Q4_K_M.gguf", "Q8/m-Q8_0.gguf", "Q8/mmproj-Q8_0.gguf", "mmproj-F16.gguf")
    assert choose_files(listing, "Q4_K_M").mmproj.path == "mmproj-F16.gguf"  # type: ignore[union-attr]
    assert choose_files(listing, "Q8_0").mmproj.path == "Q8/mmproj-Q8_0.gguf"  # type: ignore[union-attr]


def test_projectors_and_sidecars_are_never_the_model() -> None:
    with pytest.raises(NoGgufFiles):
        choose_files(files("mmproj-F16.gguf", "imatrix.gguf", "README.md"), None)
    with pytest.raises(NoGgufFiles):
        choose_files([], "Q4_K_M")


def test_quant_not_found_lists_available() -> None:
    listing = files("m-Q8_0.gguf", "m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf", "mmproj-F16.gguf")
    with pytest.raises(QuantNotFound) as info:
        choose_files(listing, "q5_k_m")
    assert info.value.quant == "Q5_K_M"
    assert info.value.available == ("Q4_K_M", "Q8_0")
    assert "Q4_K_M, Q8_0" in str(info.value)
    assert available_quants(listing) == ("Q4_K_M", "Q8_0")
