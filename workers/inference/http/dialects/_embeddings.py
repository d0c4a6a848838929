"""llama-server's embedding and rerank endpoints on the batch engine, in its shapes.

* ``POST /embedding``, ``/embeddings``: ``{content | input, embd_normalize}`` →
  ``[{"index", "embedding": [[...]]}]`` (one pooled vector, or one per token
  with pooling ``none``).
* ``POST /v1/embeddings``: OpenAI's ``{input, encoding_format}`` →
  ``{"object": "list", "data": [{"embedding", "index", "object"}], "usage", "model"}``.
* ``POST /rerank`` (``/reranking``, ``/v1/rerank``, ``/v1/reranking``): ``{query,
  documents, top_n}`` → Jina's ``{"results": [{"index", "relevance_score"}], ...}``
  sorted best first; with ``texts`` instead of ``documents`` TEI's list of
  ``{"index", "score"[, "text"]}``.

Inputs are read as llama-server's ``tokenize_input_prompts`` reads them: a
string, a list of token ids, a list mixing strings and ids, an object with
``prompt_string`` (or OpenAI's ``content`` parts), or a list of any of these
(a list holding no integer is a list of inputs). Tokenizing runs here, on the
HTTP thread; the engine decodes (:mod:`workers.inference.engine._embed`).
"""

from __future__ import annotations

import base64
from typing import Any

from workers.inference.engine import EmbedRequest, wait_embeddings
from workers.inference.http._errors import ApiError
from workers.inference.http._json import JsonObject, is_token
from workers.inference.llama import POOLING

_NOT_SUPPORTED = "not_supported_error"


def tokenize_mixed(front: Any, prompt: Any, *, add_special: bool, parse_special: bool) -> list[int]:
    """llama-server's ``tokenize_mixed``: strings tokenized (special tokens added to the first
    element only), token ids kept."""
    llm = front.llm
    parts = prompt if isinstance(prompt, list) else [prompt]
    tokens: list[int] = []
    for i, part in enumerate(parts):
        if isinstance(part, str):
            data = part.encode("utf-8")
            tokens += llm.tokenize_whole(data, add_special=add_special and i == 0, parse_special=parse_special)
        elif is_token(part):
            tokens.append(part)
        else:
            raise ApiError(400, "prompt elements must be strings or token ids")
    if any(not 0 <= t < llm.n_vocab for t in tokens):
        raise ApiError(400, f"token ids must be in [0, {llm.n_vocab})")
    return tokens


def _content_text(content: Any) -> str:
    """OpenAI's ``content`` parts, text only (this worker has no vision or audio); llama-server
    takes only a list here."""
    if not isinstance(content, list):
        raise ApiError(400, "'content' must be a list of content parts")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ApiError(400, "only text content parts are supported (this model has no multimodal projector)")
        texts.append(part["text"])
    return "".join(texts)


def tokenize_subprompt(front: Any, p: Any, *, add_special: bool = True) -> list[int]:
    """One input (``tokenize_input_subprompt``, plus OpenAI's ``{"content": [...]}`` objects)."""
    if isinstance(p, str) or (isinstance(p, list) and all(isinstance(x, str) or is_token(x) for x in p)):
        return tokenize_mixed(front, p, add_special=add_special, parse_special=True)
    if isinstance(p, dict):
        if "multimodal_data" in p:
            raise ApiError(400, "Multimodal data provided, but model does not support multimodal requests.")
        if "prompt_string" in p:
            return tokenize_mixed(front, p["prompt_string"], add_special=add_special, parse_special=True)
        if "content" in p:
            return tokenize_mixed(front, _content_text(p["content"]), add_special=add_special, parse_special=True)
    raise ApiError(
        400,
        '"prompt" elements must be a string, a list of tokens, a JSON object containing a prompt string, '
        "or a list of mixed strings & tokens.",
    )


def tokenize_prompts(front: Any, prompt: Any) -> list[list[int]]:
    """``tokenize_input_prompts``: a list without integers is several inputs, anything else one."""
    if isinstance(prompt, list) and not any(is_token(x) for x in prompt):
        if not prompt:
            raise ApiError(400, '"input" must not be empty')
        return [tokenize_subprompt(front, p) for p in prompt]
    return [tokenize_subprompt(front, prompt)]


def _run(front: Any, sequences: list[list[int]], normalize: int, gone: Any) -> list[tuple[list[list[float]], int]]:
    limit = front.engine.embedding_batch_limit
    for tokens in sequences:
        if not tokens:
            raise ApiError(400, "Input content cannot be empty")
        if len(tokens) > limit:
            raise ApiError(
                400,
                f"input ({len(tokens)} tokens) is too large to process. increase the physical batch size "
                f"(current batch size: {limit})",
                "exceed_context_size_error",
            )
    reqs = [EmbedRequest(tokens, normalize) for tokens in sequences]
    front.engine.enqueue_embedding(reqs)
    return wait_embeddings(reqs, gone)


def embeddings(front: Any, body: JsonObject, *, oai: bool, gone: Any) -> Any:
    """``/embedding``, ``/embeddings`` (``oai`` False) and ``/v1/embeddings`` (``oai`` True)."""
    if "input" in body:
        prompt = body["input"]
    elif "content" in body:
        prompt, oai = body["content"], False  # "content" is not OpenAI's: llama-server answers its own shape
    else:
        raise ApiError(400, '"input" or "content" must be provided')
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise ApiError(400, "The format to return the embeddings in. Can be either float or base64")
    normalize = body.get("embd_normalize", 2)
    if not is_token(normalize):
        raise ApiError(400, "'embd_normalize' must be an integer")
    pooling = front.embedding_pooling()
    if oai and pooling == POOLING["none"]:
        raise ApiError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    results = _run(front, tokenize_prompts(front, prompt), normalize, gone)
    if not oai:
        return [{"index": i, "embedding": vectors} for i, (vectors, _n) in enumerate(results)]
    data = []
    for i, (vectors, _n) in enumerate(results):
        item: JsonObject = {"embedding": vectors[0], "index": i, "object": "embedding"}
        if fmt == "base64":
            import numpy as np  # already loaded by the engine's embedding step

            item["embedding"] = base64.b64encode(np.asarray(vectors[0], dtype="<f4").tobytes()).decode("ascii")
            item["encoding_format"] = "base64"
        data.append(item)
    n_tokens = sum(n for _v, n in results)
    usage = {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    return {"model": body.get("model") or front.model_name, "object": "list", "usage": usage, "data": data}


def rerank_tokens(front: Any, query: str, doc: str) -> list[int]:
    """``format_prompt_rerank``: the model's ``rerank`` template, else BOS query EOS SEP doc EOS
    (each as the vocabulary asks)."""
    llm = front.llm
    template = llm.chat_template("rerank")
    if template:
        text = template.replace("{query}", query).replace("{document}", doc)
        return tokenize_mixed(front, text, add_special=False, parse_special=True)
    q = llm.tokenize_whole(query.encode("utf-8"), add_special=False, parse_special=False)
    d = llm.tokenize_whole(doc.encode("utf-8"), add_special=False, parse_special=False)
    eos = llm.eos if llm.eos >= 0 else llm.sep
    out = [llm.bos] if llm.add_bos else []
    out += q
    if llm.add_eos:
        out.append(eos)
    if llm.add_sep:
        out.append(llm.sep)
    out += d
    if llm.add_eos:
        out.append(eos)
    return out


def rerank(front: Any, body: JsonObject, *, gone: Any) -> Any:
    """``/rerank`` and its aliases (module docstring)."""
    if front.embedding_pooling() != POOLING["rank"]:
        raise ApiError(501, "This server does not support reranking. Start it with `--reranking`", _NOT_SUPPORTED)
    query = body.get("query")
    if "query" not in body:
        raise ApiError(400, '"query" must be provided')
    if not isinstance(query, str):
        raise ApiError(400, '"query" must be a string')
    tei = "texts" in body
    docs = body.get("documents", body.get("texts"))
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise ApiError(400, '"documents" must be a non-empty string array')
    top_n = body.get("top_n", len(docs))
    if not is_token(top_n):
        raise ApiError(400, "'top_n' must be an integer")
    results = _run(front, [rerank_tokens(front, query, d) for d in docs], -1, gone)
    label = "score" if tei else "relevance_score"
    with_text = tei and bool(body.get("return_text", False))
    scores = [vectors[0][0] for vectors, _n in results]
    ranked: list[JsonObject] = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):  # best first (stable: ties keep their order)
        elem: JsonObject = {"index": i, label: scores[i]}
        if with_text:
            elem["text"] = docs[i]
        ranked.append(elem)
    ranked = ranked[: max(top_n, 0)]
    if tei:
        return ranked
    n_tokens = sum(n for _v, n in results)
    usage = {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    return {"model": body.get("model") or front.model_name, "object": "list", "usage": usage, "results": ranked}


def answer(front: Any, route: str, body: JsonObject, *, oai: bool, gone: Any) -> Any:
    """The answer of an embedding route (``/rerank`` and ``/reranking`` rank, the others embed)."""
    if route in ("/rerank", "/reranking"):
        return rerank(front, body, gone=gone)
    return embeddings(front, body, oai=oai, gone=gone)
