"""Tokenizing prompts in linear time, and the per-model prompt-size limit.

The quadratic step (issue 11 §1.3): llama.cpp's SentencePiece tokenizer
(``llm_tokenizer_spm_session::resegment`` in ``src/llama-vocab.cpp``) calls
``output.reserve(output.size() + n)`` for every symbol that falls back to
bytes. An exact ``reserve`` defeats the vector's geometric growth, so each
such symbol copies every token produced so far: O(n²) on any text the
vocabulary spells byte by byte. Measured on the tests' byte-level model:
``"a" * 25_000`` 0.03 s, 50,000 0.24 s, 100,000 1.05 s; ``"é" * 100_000``
3.5 s. Text whose merges succeed (``"hello world"``) stays linear, which is
why only some prompts wedged a worker.

The fix keeps every ``llama_tokenize`` call short: a long text is cut into
pieces of about :data:`CHUNK_CHARS` characters, at points where the result
provably cannot change. SentencePiece merges only ever join adjacent symbols
into a vocabulary entry, so a cut between two characters that no vocabulary
entry contains as a pair can never be crossed by a merge (nor by a special
token's text). The SentencePiece space prefix is handled by cutting at a
single space and letting the tokenizer's own prefix put it back. A
differential test checks the result equals one whole call. Other vocabulary
types have no such step and are tokenized whole; their cost is bounded by the
prompt-size limit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

CHUNK_CHARS = 8192
LLAMA_VOCAB_TYPE_SPM = 1
_ATTR_SPECIAL = (1 << 3) | (1 << 4)  # LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED
_SPACE_MARK = "\u2581"
_PREFIX_TEXTS = (_SPACE_MARK, "<0xE2>", "<0x96>", "<0x81>")  # the mark, or its UTF-8 bytes as byte tokens


class _Vocab(Protocol):
    n_vocab: int
    vocab_type: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool

    def token_text(self, token: int) -> str: ...
    def token_attr(self, token: int) -> int: ...
    def piece(self, token: int) -> bytes: ...
    def tokenize_whole(self, data: bytes, *, add_special: bool, parse_special: bool) -> list[int]: ...


@dataclass(frozen=True)
class VocabProfile:
    """What safe cut points and the byte bound need to know about a vocabulary (one scan)."""

    pairs: frozenset[int]  # every two adjacent characters inside any entry (see _pair), NUL-separated
    special_first: frozenset[str]  # first characters of special (control, user-defined) entries
    special_last: frozenset[str]
    max_token_bytes: int  # longest entry in UTF-8 bytes: an upper bound on input bytes per token
    space_prefix: bool  # the tokenizer prepends a space to text that follows nothing or a special token
    prefix_tokens: tuple[int, ...]  # what a lone prepended space becomes (``▁``, else its three bytes)


def scan_vocab(vocab: _Vocab) -> VocabProfile:
    """Read every entry once, lazily, for the first long prompt.

    Gemma's 262,144 entries: ~0.25 s for the byte bound alone, ~0.5 s with
    what SentencePiece cuts need (special tokens, character pairs).
    """
    texts = [vocab.token_text(t) for t in range(vocab.n_vocab)]
    longest = max((len(text.encode("utf-8")) for text in texts), default=1)
    if vocab.vocab_type != LLAMA_VOCAB_TYPE_SPM:  # tokenized whole: only the byte bound is needed
        return VocabProfile(frozenset(), frozenset(), frozenset(), longest, False, ())
    special = [t for t, text in enumerate(texts) if text and vocab.token_attr(t) & _ATTR_SPECIAL]
    # Merged pieces carry ``▁`` for a space; special tokens match the raw text, spaces as spaces.
    joined = "\x00".join([*texts, *(texts[t].replace(_SPACE_MARK, " ") for t in special)])
    by_text = {text: t for t, text in reversed(list(enumerate(texts))) if text in _PREFIX_TEXTS}
    if _SPACE_MARK in by_text:
        prefix: tuple[int, ...] = (by_text[_SPACE_MARK],)
    else:
        prefix = tuple(by_text.get(t, -1) for t in _PREFIX_TEXTS[1:])
    probe = vocab.tokenize_whole(b"x", add_special=False, parse_special=False)
    return VocabProfile(
        pairs=_pair_codes(joined),
        special_first=frozenset(texts[t][0] for t in special),
        special_last=frozenset(texts[t][-1] for t in special),
        max_token_bytes=longest,
        space_prefix=b"".join(vocab.piece(t) for t in probe).startswith(b" "),
        prefix_tokens=prefix,
    )


def _pair_codes(text: str) -> frozenset[int]:
    """Every adjacent pair of characters in ``text`` as ``ord(a) << 21 | ord(b)`` (numpy: ~30 ms for 2M)."""
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    return frozenset(np.unique((codes[:-1] << 21) | codes[1:]).tolist())


def _pair(a: str, b: str) -> int:
    return ord(a) << 21 | ord(b)


def _cut_after(text: str, start: int, p: VocabProfile) -> tuple[int, int, bool] | None:
    """The first safe cut at or after ``start``: (end of this piece, start of the next, strip prefix).

    With a space prefix, the tokenizer puts ``▁`` before the next piece: a cut
    at a single space drops that space (the prefix restores it); a cut between
    two other characters keeps both and strips the prefix's tokens afterwards,
    which is sound only when ``▁`` cannot merge with the piece's first
    character.
    """
    n = len(text)
    for i in range(max(start, 1), n - 1):
        left, right = text[i - 1], text[i]
        if left.isspace() or left in p.special_last:
            continue
        if not p.space_prefix:
            if not right.isspace() and _pair(left, right) not in p.pairs:
                return i, i, False
            continue
        if right == " ":
            after = text[i + 1]
            if (
                not after.isspace()
                and after not in p.special_first
                and _pair(left, _SPACE_MARK) not in p.pairs
                and _pair(left, " ") not in p.pairs
            ):
                return i, i + 1, False
        elif (
            not right.isspace()
            and right not in p.special_first
            and _pair(left, right) not in p.pairs
            and _pair(_SPACE_MARK, right) not in p.pairs
        ):
            return i, i, True
    return None


def split_for_tokenizing(text: str, profile: VocabProfile, chunk: int = CHUNK_CHARS) -> list[tuple[str, bool]]:
    """Pieces (and whether to strip the prefix tokens) whose tokens concatenate to the whole text's."""
    pieces: list[tuple[str, bool]] = []
    pos, strip = 0, False
    while len(text) - pos > chunk:
        cut = _cut_after(text, pos + chunk, profile)
        if cut is None:
            break
        pieces.append((text[pos : cut[0]], strip))
        pos, strip = cut[1], cut[2]
    pieces.append((text[pos:], strip))
    return pieces


class Tokenizer:
    """Linear-time tokenizing with cancellation between pieces; the profile is built on first need."""

    def __init__(self, vocab: _Vocab, chunk: int = CHUNK_CHARS) -> None:
        self.vocab = vocab
        self.chunk = chunk
        self._profile: VocabProfile | None = None
        self._lock = threading.Lock()

    def profile(self) -> VocabProfile:
        with self._lock:
            if self._profile is None:
                self._profile = scan_vocab(self.vocab)
            return self._profile

    def max_prompt_bytes(self, max_tokens: int) -> int:
        """Bytes beyond which a prompt cannot fit ``max_tokens`` tokens (tokens never span more bytes)."""
        per_token = self.profile().max_token_bytes
        return max_tokens * (per_token if self.vocab.vocab_type in (1, 2) else 4 * per_token)

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool,
        parse_special: bool,
        cancelled: Callable[[], bool] | None = None,
    ) -> list[int]:
        """Tokens of ``text``, equal to one ``llama_tokenize`` call; raises :class:`TokenizingCancelled`."""
        v = self.vocab
        if len(text) <= self.chunk or v.vocab_type != LLAMA_VOCAB_TYPE_SPM:
            return v.tokenize_whole(text.encode("utf-8"), add_special=add_special, parse_special=parse_special)
        profile = self.profile()
        prefix = list(profile.prefix_tokens)
        tokens: list[int] = [v.bos] if add_special and v.add_bos and v.bos >= 0 else []
        for piece, strip in split_for_tokenizing(text, profile, self.chunk):
            if cancelled is not None and cancelled():
                raise TokenizingCancelled
            part = v.tokenize_whole(piece.encode("utf-8"), add_special=False, parse_special=parse_special)
            if strip:
                if part[: len(prefix)] != prefix:  # never seen; the whole call is always right
                    return v.tokenize_whole(text.encode("utf-8"), add_special=add_special, parse_special=parse_special)
                part = part[len(prefix) :]
            tokens += part
        if add_special and v.add_eos and v.eos >= 0:
            tokens.append(v.eos)
        return tokens


class TokenizingCancelled(Exception):
    """The client went away while its prompt was being tokenized."""
