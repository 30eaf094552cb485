"""Token vocabularies as byte strings (what the token mask is computed over).

``Vocabulary`` holds, per token id, the bytes the token appends to the text (``b""`` for special
/ control tokens, which a grammar never allows), and the end-of-sequence ids. Loaders read the
real Mistral vocabularies that ship inside the ``mistral_common`` package (no download):

* SentencePiece ``.model`` files (32k, Mistral 7B v0.1-v0.3): a minimal protobuf reader of
  ``ModelProto.pieces`` (piece text, type); ``▁`` becomes a space, ``<0xAB>`` byte-fallback
  pieces become that single byte (so many tokens are not valid UTF-8 alone), control and unknown
  pieces are special.
* Tekken ``.json`` (131k, Mistral NeMo and later): ``num_special`` special ids first, then the
  BPE ranks' ``token_bytes`` (base64).

Assumed: the leading-space convention of SentencePiece (a ``▁`` at the start of the text being
dropped by the decoder) is ignored: each token contributes exactly its piece's bytes, as
xgrammar's ``BYTE_FALLBACK`` vocabulary type does.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass

import numpy as np

__all__ = ["Vocabulary", "mistral_data_dir", "load_sentencepiece", "load_tekken", "load_mistral", "MISTRAL_VOCABS",
           "byte_vocabulary", "token_matrix"]

MISTRAL_VOCABS = {"mistral-32k": "tokenizer.model.v1", "mistral-32k-v3": "mistral_instruct_tokenizer_240323.model.v3",
                  "tekken-131k": "tekken_240911.json"}


@dataclass(frozen=True)
class Vocabulary:
    """Token id -> bytes.

    Attributes:
        tokens: ``tokens[i]`` the bytes of token ``i`` (``b""`` for special tokens).
        eos_ids: the end-of-sequence token ids (allowed exactly when the grammar can terminate).
        special: ids of special tokens (never allowed by a grammar; includes ``eos_ids``).
        name: where it came from.
    """

    tokens: tuple
    eos_ids: tuple
    special: frozenset
    name: str = "vocab"

    def __post_init__(self):
        if not self.tokens:
            raise ValueError("tokens must be non-empty")
        if any(not isinstance(t, (bytes, bytearray)) for t in self.tokens):
            raise TypeError("tokens must be bytes")
        if any(not (0 <= e < len(self.tokens)) for e in self.eos_ids):
            raise ValueError(f"eos_ids must be token ids in [0, {len(self.tokens)}), got {self.eos_ids}")

    @property
    def size(self) -> int:
        return len(self.tokens)


def byte_vocabulary(extra: list[bytes] | None = None, *, eos: bool = True) -> Vocabulary:
    """A small vocabulary: the 256 single bytes, then ``extra``, then an EOS token (tests)."""
    toks = [bytes([b]) for b in range(256)] + [bytes(x) for x in (extra or [])]
    eos_ids = ()
    special = frozenset()
    if eos:
        toks.append(b"")
        eos_ids = (len(toks) - 1,)
        special = frozenset(eos_ids)
    return Vocabulary(tuple(toks), eos_ids, special, "bytes")


def mistral_data_dir() -> str:
    """The ``data`` folder of the installed ``mistral_common`` package."""
    try:
        import mistral_common
    except ImportError as exc:  # pragma: no cover - environment
        raise ImportError("the Mistral vocabularies need the `mistral_common` package (pip install mistral_common)") from exc
    return os.path.join(os.path.dirname(mistral_common.__file__), "data")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7


def _fields(buf: bytes):
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = _varint(buf, i)
        elif wt == 1:
            val, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            val, i = buf[i:i + n], i + n
        elif wt == 5:
            val, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        yield num, val


def load_sentencepiece(path: str) -> Vocabulary:
    """Read a SentencePiece ``.model`` file (see the module docstring)."""
    with open(path, "rb") as f:
        buf = f.read()
    tokens, special, eos = [], set(), []
    for num, val in _fields(buf):
        if num != 1:
            continue
        piece, kind = "", 1
        for n2, v2 in _fields(val):
            if n2 == 1:
                piece = v2.decode("utf-8")
            elif n2 == 3:
                kind = v2
        tid = len(tokens)
        if kind == 6 and piece.startswith("<0x") and piece.endswith(">"):
            tokens.append(bytes([int(piece[3:-1], 16)]))
        elif kind in (1, 4):
            tokens.append(piece.replace("\u2581", " ").encode("utf-8"))
        else:  # unknown, control, unused
            tokens.append(b"")
            special.add(tid)
            if piece == "</s>":
                eos.append(tid)
    return Vocabulary(tuple(tokens), tuple(eos), frozenset(special), os.path.basename(path))


def load_tekken(path: str) -> Vocabulary:
    """Read a Tekken ``.json`` vocabulary (see the module docstring)."""
    with open(path) as f:
        data = json.load(f)
    cfg = data["config"]
    n_special = int(cfg.get("default_num_special_tokens", 1000))
    size = int(cfg.get("default_vocab_size", len(data["vocab"]) + n_special))
    ranks = data["vocab"][: size - n_special]
    tokens = [b""] * n_special + [base64.b64decode(r["token_bytes"]) for r in ranks]
    eos = 2  # <unk>=0, <s>=1, </s>=2 in every Tekken file
    return Vocabulary(tuple(tokens), (eos,), frozenset(range(n_special)), os.path.basename(path))


def load_mistral(name: str = "mistral-32k") -> Vocabulary:
    """One of ``MISTRAL_VOCABS`` from the installed ``mistral_common``."""
    if name not in MISTRAL_VOCABS:
        raise ValueError(f"name must be one of {sorted(MISTRAL_VOCABS)}, got {name!r}")
    path = os.path.join(mistral_data_dir(), MISTRAL_VOCABS[name])
    return load_tekken(path) if path.endswith(".json") else load_sentencepiece(path)


def token_matrix(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """``(bytes uint8 [V, Lmax] zero padded, lengths int32 [V])``."""
    lens = np.fromiter((len(t) for t in vocab.tokens), np.int32, len(vocab.tokens))
    mat = np.zeros((len(vocab.tokens), max(1, int(lens.max()))), np.uint8)
    flat = np.frombuffer(b"".join(vocab.tokens), np.uint8)
    rows = np.repeat(np.arange(len(lens)), lens)
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
    mat[rows, cols] = flat
    return mat, lens
