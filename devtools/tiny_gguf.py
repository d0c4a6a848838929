"""Tiny, real GGUF files for tests and demos.

Why: the project must be testable without downloading any model. A
llama-architecture GGUF with 2 layers and 64-wide embeddings loads in
llama.cpp in milliseconds and generates (random) text, which is all the
supervision, routing and proxy code needs. The helpers at the bottom write
the *broken* files the load-error classification is tested against.

The vocabulary is a SentencePiece ("llama") vocabulary made only of the 256
byte-fallback tokens ``<0x00>``..``<0xFF>`` plus ``<unk>``, ``<s>``, ``</s>``,
the two ChatML control tokens and the SentencePiece space marker, so any UTF-8 text tokenizes (byte by
byte) and the ChatML chat template in ``tokenizer.chat_template`` works.

Besides the llama, two encoder models for the embedding and rerank routes
(:func:`write_tiny_bert`: llama.cpp's ``bert`` architecture with a WordPiece
vocabulary of single characters, mean or rank pooling), and the llama with
fill-in-the-middle tokens (``fim=True``) for ``/infill``.

CLI: ``python -m devtools.tiny_gguf OUT.gguf [--seed N] [--embedding] [--fim] [--bert mean|cls|rank]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import gguf
import numpy as np

# ChatML: the most common template in the wild; the special tokens exist in
# the vocabulary so the template text tokenizes to single control tokens.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A Qwen 2.5-style template that writes tools and tool calls (Hermes' <tool_call> syntax)
# and opens <think> when the `thinking` kwarg is set: what tests of tool calls, reasoning
# and chat_template_kwargs render (write_tiny_gguf(chat_template=TOOLS_TEMPLATE)).
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    '</tools>\nCall a tool with <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' %}"
    "{% elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n{{ message.content }}"
    "{% for tc in message.tool_calls %}<tool_call>\n"
    '{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{% elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if thinking is defined and thinking %}<think>\n{% endif %}"
    "{% endif %}"
)

# Token ids of the fixed vocabulary prefix; byte tokens follow.
UNK_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID, SPACE_ID = 0, 1, 2, 3, 4, 5
# "\u2581" is SentencePiece's space marker: as a normal token it detokenizes
# to " " (its UTF-8 bytes as byte tokens would come back as a literal "\u2581").
_SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "\u2581"]
N_VOCAB = len(_SPECIAL) + 256
# Appended after the byte tokens with fim=True (ids N_VOCAB..N_VOCAB+2).
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
FIM_PRE_ID, FIM_SUF_ID, FIM_MID_ID = N_VOCAB, N_VOCAB + 1, N_VOCAB + 2

# An architecture name llama.cpp will never know, for the unsupported-arch test.
UNSUPPORTED_ARCH = "modelrouter-unknown-arch"


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """The byte-level SPM vocabulary: (tokens, scores, token types)."""
    tokens = list(_SPECIAL) + [f"<0x{b:02X}>" for b in range(256)]
    scores = [0.0] * len(tokens)
    types = [
        int(gguf.TokenType.UNKNOWN),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.CONTROL),
        int(gguf.TokenType.NORMAL),
    ] + [int(gguf.TokenType.BYTE)] * 256
    return tokens, scores, types


def write_tiny_gguf(
    path: str | os.PathLike[str],
    *,
    seed: int = 0,
    n_layer: int = 2,
    architecture: str = "llama",
    embedding: bool = False,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx: int = 256,
    name: str = "tiny-llama",
    split_max_tensors: int = 0,
    fim: bool = False,
    chat_template: str | None = CHATML_TEMPLATE,
    reply: str | None = None,
) -> Path:
    """Write a tiny random-weight llama-layout GGUF and return its path.

    Only ``architecture="llama"`` is loadable; any other name writes the same
    tensors under that architecture's keys (used to provoke llama.cpp's
    "unknown model architecture" refusal). ``embedding=True`` records mean
    pooling so ``/v1/embeddings`` returns one vector per input. The same
    ``seed`` always gives byte-identical files (useful for hashing tests).
    ``split_max_tensors`` > 0 writes llama.cpp's split layout instead (see
    :func:`write_split_tiny_gguf`). ``fim=True`` adds the three FIM control
    tokens (:data:`FIM_TOKENS`) and names them in the ``fim_*_token_id`` keys.
    ``chat_template`` None writes none (llama-server then uses ChatML). ``reply`` forces the
    answer: see :func:`_force_reply`.
    """
    if n_embd % n_head:
        raise ValueError("n_embd must be divisible by n_head")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    head_dim = n_embd // n_head

    w = gguf.GGUFWriter(out, architecture, split_max_tensors=split_max_tensors)
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    if embedding:
        w.add_pooling_type(gguf.PoolingType.MEAN)

    tokens, scores, types = _vocab()
    if fim:
        tokens += list(FIM_TOKENS)
        scores += [0.0] * len(FIM_TOKENS)
        types += [int(gguf.TokenType.CONTROL)] * len(FIM_TOKENS)
        w.add_uint32(gguf.Keys.Tokenizer.FIM_PRE_ID, FIM_PRE_ID)
        w.add_uint32(gguf.Keys.Tokenizer.FIM_SUF_ID, FIM_SUF_ID)
        w.add_uint32(gguf.Keys.Tokenizer.FIM_MID_ID, FIM_MID_ID)
    if reply is not None:
        tokens.append(reply)
        scores.append(0.0)
        types.append(int(gguf.TokenType.USER_DEFINED))  # detokenized as written, spaces and all
    n_vocab = len(tokens)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(BOS_ID)
    # ChatML turns end with <|im_end|>, so that is the generation stop token.
    w.add_eos_token_id(IM_END_ID)
    w.add_unk_token_id(UNK_ID)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def mat(rows: int, cols: int) -> np.ndarray:
        # Small std keeps activations finite through the random network;
        # f16 halves the file size and llama.cpp's CPU backend handles it.
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(n_embd, dtype=np.float32)

    def into_residual(rows: int, cols: int) -> np.ndarray:
        # A layer's output projections; zero with a forced reply (see _force_reply).
        weights = mat(rows, cols)
        return np.zeros_like(weights) if reply is not None else weights

    # numpy shape is (rows, cols) = ggml ne reversed: (out_features, in_features).
    embd, output = mat(n_vocab, n_embd), mat(n_vocab, n_embd)
    if reply is not None:
        _force_reply(embd, output, n_vocab - 1)
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", output)
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm())
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_output.weight", into_residual(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", norm())
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", into_residual(n_embd, n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


NEWLINE_ID = len(_SPECIAL) + ord("\n")


def _force_reply(embd: np.ndarray, output: np.ndarray, reply_id: int) -> None:
    """Make the model answer the ``reply`` token after a newline, then ``<|im_end|>``, whatever came
    before: with the attention and feed-forward outputs zeroed (the caller does), each next token
    depends on the last one only, through its embedding and the output matrix. The newline and the
    reply token get orthogonal unit embeddings, and the output rows of their successors point along
    them: a logit of 32 (RMS norm scales a unit vector by sqrt(64) = 8, times 4) against the random
    rows' ~0.5, so greedy and sampled answers alike are the reply. A ChatML generation prompt ends
    with a newline (``<|im_start|>assistant\n``), so any chat is answered with the reply: a tool
    call written in the chat template's syntax is one the worker's parser reads every time."""
    embd[NEWLINE_ID] = 0
    embd[NEWLINE_ID, 0] = 1
    embd[reply_id] = 0
    embd[reply_id, 1] = 1
    output[reply_id] = 0
    output[reply_id, 0] = 4
    output[IM_END_ID] = 0
    output[IM_END_ID, 1] = 4


# WordPiece (llama.cpp's "bert" tokenizer): "\u2581x" starts a word, "x" continues one.
_BERT_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_BERT_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-"
BERT_PAD_ID, BERT_UNK_ID, BERT_CLS_ID, BERT_SEP_ID, BERT_MASK_ID = range(5)


def _bert_vocab() -> list[str]:
    return _BERT_SPECIAL + ["\u2581" + c for c in _BERT_CHARS] + list(_BERT_CHARS)


def write_tiny_bert(
    path: str | os.PathLike[str],
    *,
    pooling: str = "mean",
    seed: int = 0,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    n_ctx: int = 512,
    name: str = "tiny-bert",
) -> Path:
    """A tiny random-weight BERT encoder (llama.cpp's ``bert``): an embedding model
    (``pooling`` ``mean``, ``cls`` or ``none``) or, with ``pooling="rank"``, a
    reranker whose classifier head (``cls``, ``cls.output``) gives one score.

    Its vocabulary is single characters as WordPiece pieces (lower case letters,
    digits, a little punctuation); anything else is ``[UNK]``. Non-causal
    attention: a sequence must be decoded in one micro-batch.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    kinds = {
        "none": gguf.PoolingType.NONE,
        "mean": gguf.PoolingType.MEAN,
        "cls": gguf.PoolingType.CLS,
        "rank": gguf.PoolingType.RANK,
    }
    tokens = _bert_vocab()
    w = gguf.GGUFWriter(out, "bert")
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(kinds[pooling])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types(
        [int(gguf.TokenType.CONTROL)] * len(_BERT_SPECIAL)
        + [int(gguf.TokenType.NORMAL)] * (len(tokens) - len(_BERT_SPECIAL))
    )
    w.add_token_type_count(2)
    w.add_bos_token_id(BERT_CLS_ID)
    w.add_eos_token_id(BERT_SEP_ID)
    w.add_sep_token_id(BERT_SEP_ID)
    w.add_pad_token_id(BERT_PAD_ID)
    w.add_unk_token_id(BERT_UNK_ID)
    w.add_mask_token_id(BERT_MASK_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(pooling == "rank")  # rerankers end query and document with [SEP]
    if pooling == "rank":
        w.add_array(gguf.Keys.Classifier.OUTPUT_LABELS.format(arch="bert"), ["score"])

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    def vec(n: int, value: float | None = None) -> np.ndarray:
        if value is not None:
            return np.full(n, value, dtype=np.float32)
        return (rng.standard_normal(n) * 0.05).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(len(tokens), n_embd))
    w.add_tensor("token_types.weight", mat(2, n_embd))
    w.add_tensor("position_embd.weight", mat(n_ctx, n_embd))
    w.add_tensor("token_embd_norm.weight", vec(n_embd, 1.0))
    w.add_tensor("token_embd_norm.bias", vec(n_embd, 0.0))
    for i in range(n_layer):
        p = f"blk.{i}."
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + part + ".weight", mat(n_embd, n_embd))
            w.add_tensor(p + part + ".bias", vec(n_embd))
        w.add_tensor(p + "attn_output_norm.weight", vec(n_embd, 1.0))
        w.add_tensor(p + "attn_output_norm.bias", vec(n_embd, 0.0))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.bias", vec(n_ff))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
        w.add_tensor(p + "ffn_down.bias", vec(n_embd))
        w.add_tensor(p + "layer_output_norm.weight", vec(n_embd, 1.0))
        w.add_tensor(p + "layer_output_norm.bias", vec(n_embd, 0.0))
    if pooling == "rank":
        w.add_tensor("cls.weight", mat(n_embd, n_embd))
        w.add_tensor("cls.bias", vec(n_embd))
        w.add_tensor("cls.output.weight", mat(1, n_embd) * 20)  # spread the scores
        w.add_tensor("cls.output.bias", vec(1, 0.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def write_split_tiny_gguf(path: str | os.PathLike[str], *, parts: int = 2, seed: int = 0) -> list[Path]:
    """The tiny model as a real split GGUF, as ``llama-gguf-split`` writes it and as
    split repos hold it on the Hub: ``<stem>-00001-of-0000N.gguf`` ... with the
    ``split.*`` keys, so llama.cpp loads all parts from the first one's path."""
    out = Path(path)
    n_tensors = 3 + 9 * 2  # the default two layers
    write_tiny_gguf(out, seed=seed, split_max_tensors=-(-n_tensors // parts))
    shards = sorted(out.parent.glob(f"{out.stem}-*-of-{parts:05d}.gguf"))
    if len(shards) != parts:
        raise RuntimeError(f"expected {parts} parts of {out.stem}, found {[p.name for p in shards]}")
    return shards


def write_truncated_gguf(path: str | os.PathLike[str], *, keep_fraction: float = 0.6) -> Path:
    """A valid tiny GGUF cut short: the header parses, tensor data is missing.

    This is what an interrupted download without verification looks like.
    """
    out = write_tiny_gguf(path)
    size = out.stat().st_size
    with out.open("r+b") as f:
        f.truncate(int(size * keep_fraction))
    return out


def write_random_bytes(path: str | os.PathLike[str], *, size: int = 4096, seed: int = 0) -> Path:
    """Random bytes under a .gguf name (bad magic)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    if data[:4] == b"GGUF":  # astronomically unlikely, but keep the helper honest
        data = b"XXXX" + data[4:]
    out.write_bytes(data)
    return out


def write_text_as_gguf(path: str | os.PathLike[str]) -> Path:
    """A text file named .gguf, e.g. an HTML error page saved by a downloader."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "<!DOCTYPE html>\n<html><body>404 Not Found: this is not a model</body></html>\n",
        encoding="utf-8",
    )
    return out


def write_unsupported_arch_gguf(path: str | os.PathLike[str]) -> Path:
    """A structurally valid GGUF whose architecture llama.cpp does not know."""
    return write_tiny_gguf(path, architecture=UNSUPPORTED_ARCH)


def write_tiny_lora(
    path: str | os.PathLike[str], *, seed: int = 1, rank: int = 4, n_embd: int = 64, n_vocab: int = N_VOCAB
) -> Path:
    """A LoRA adapter for :func:`write_tiny_gguf`'s model: ``output.weight`` plus ``B·A``.

    Its random ``B·A`` (std 1, against the base's 0.02) outweighs the base
    logits, so greedy output with the adapter at scale 1 differs from the
    base model's, and at scale 0 it is the base's: what a test of
    ``--lora`` and ``/lora-adapters`` needs. ggml shapes as llama.cpp
    expects them: ``lora_a`` ne ``[n_embd, rank]``, ``lora_b`` ne ``[rank, n_vocab]``.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(out, "llama")
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    w.add_tensor("output.weight.lora_a", rng.standard_normal((rank, n_embd)).astype(np.float32))
    w.add_tensor("output.weight.lora_b", rng.standard_normal((n_vocab, rank)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny llama GGUF for tests.")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--embedding", action="store_true")
    parser.add_argument("--fim", action="store_true", help="add fill-in-the-middle tokens")
    parser.add_argument("--bert", choices=["none", "mean", "cls", "rank"], help="write a BERT encoder instead")
    args = parser.parse_args(argv)
    if args.bert:
        out = write_tiny_bert(args.out, pooling=args.bert, seed=args.seed, n_layer=args.n_layer)
    else:
        out = write_tiny_gguf(args.out, seed=args.seed, n_layer=args.n_layer, embedding=args.embedding, fim=args.fim)
    print(f"{out} {out.stat().st_size} bytes", file=sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
