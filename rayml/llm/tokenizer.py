"""Tokenizers behind one interface: ids <-> text, and an exact token -> bytes table.

* ``BPETokenizer``: a byte-level BPE fitted with the ``tokenizers`` package on the task corpus
  (``BPETokenizer.train``); digits are split into single tokens (``Digits(individual_digits)``)
  so numbers are one token per digit and arithmetic is learnable.
* ``MistralTokenizer``: the real vocabularies shipped inside ``mistral_common``
  (``"spm32k"``: SentencePiece v3, 32768 tokens; ``"tekken131k"``: Tekken, 131072 tokens), read
  from the package's data files, never downloaded.
* ``PretrainedTokenizer``: a pretrained ``transformers`` tokenizer (SmolLM2's, or a user's HF
  directory's) with its chat template (``chat``) and an exact byte table for byte-level BPE.

``token_bytes(i)`` is exact: decoding a sequence is ``b"".join(token_bytes(i) ...)`` decoded as
UTF-8 (special tokens map to ``b""``), which grammar-constrained decoding (ZapFormat) needs.

Examples:
    >>> tok = BPETokenizer.train(["12+34=64", "copy:123=123"], vocab_size=300)
    >>> ids = tok.encode("12+34=")
    >>> tok.decode(ids)
    '12+34='
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["Tokenizer", "BPETokenizer", "MistralTokenizer", "PretrainedTokenizer", "SPECIAL_TOKENS", "load_tokenizer"]

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes -> printable unicode map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Tokenizer:
    """The interface every tokenizer here provides.

    Attributes:
        vocab_size: number of ids.
        bos_id, eos_id, pad_id: special ids (``pad_id`` may equal ``eos_id``).
    """

    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        """Token ids of ``text``, optionally wrapped in BOS/EOS."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` (special tokens dropped; invalid UTF-8 replaced)."""
        data = b"".join(self.token_bytes(int(i)) for i in ids)
        return data.decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes of one token (``b""`` for special tokens)."""
        raise NotImplementedError

    def byte_table(self) -> list[bytes]:
        """``[token_bytes(i) for i in range(vocab_size)]``."""
        return [self.token_bytes(i) for i in range(self.vocab_size)]


class BPETokenizer(Tokenizer):
    """Byte-level BPE (``tokenizers``) with single-digit tokens and ``<pad>``, ``<bos>``, ``<eos>``."""

    def __init__(self, hf_tokenizer):
        self._tok = hf_tokenizer
        self.vocab_size = hf_tokenizer.get_vocab_size()
        self.pad_id, self.bos_id, self.eos_id = (hf_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS)
        dec = _byte_decoder()
        special = set(SPECIAL_TOKENS)
        self._bytes = []
        for i in range(self.vocab_size):
            piece = hf_tokenizer.id_to_token(i)
            self._bytes.append(b"" if piece in special else bytes(dec[c] for c in piece))

    @classmethod
    def train(cls, texts: Sequence[str], vocab_size: int = 512) -> "BPETokenizer":
        """Fit a byte-level BPE of ``vocab_size`` ids on ``texts`` (deterministic)."""
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size must be >= {256 + len(SPECIAL_TOKENS)}, got {vocab_size}")
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(list(texts), trainer=trainer)
        return cls(tok)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BPETokenizer":
        """Load a ``tokenizer.json`` file."""
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_file(str(path)))

    def save(self, path: str | os.PathLike) -> None:
        """Write ``tokenizer.json``."""
        self._tok.save(str(path))

    def to_json(self) -> str:
        """The tokenizer as a JSON string (hashable identity)."""
        return self._tok.to_str()

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids of many texts at once (faster)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]


class MistralTokenizer(Tokenizer):
    """A vocabulary shipped in ``mistral_common`` (``"spm32k"`` or ``"tekken131k"``), offline.

    ``spm32k`` is SentencePiece (needs the ``sentencepiece`` package); its ``\u2581`` marks a space
    and ``<0xNN>`` pieces are single bytes. ``tekken131k`` is a byte-level BPE (tiktoken).
    """

    FILES = {"spm32k": "mistral_instruct_tokenizer_240323.model.v3", "tekken131k": "tekken_240911.json"}

    def __init__(self, name: str = "tekken131k"):
        if name not in self.FILES:
            raise ValueError(f"name must be one of {sorted(self.FILES)}, got {name!r}")
        import mistral_common

        path = str(Path(mistral_common.__file__).parent / "data" / self.FILES[name])
        self.name = name
        if name == "tekken131k":
            from mistral_common.tokens.tokenizers.tekken import Tekkenizer

            self._raw = Tekkenizer.from_file(path)
        else:
            from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

            self._raw = SentencePieceTokenizer(path)
        self.vocab_size = self._raw.n_words
        self.bos_id, self.eos_id = self._raw.bos_id, self._raw.eos_id
        pad = self._raw.pad_id
        self.pad_id = pad if pad is not None and pad >= 0 else self.eos_id
        self._cache: dict[int, bytes] = {}

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        return list(self._raw.encode(text, bos=bos, eos=eos))

    def token_bytes(self, token_id: int) -> bytes:
        b = self._cache.get(token_id)
        if b is None:
            b = self._cache[token_id] = self._raw_bytes(int(token_id))
        return b

    def _raw_bytes(self, token_id: int) -> bytes:
        if self._raw.is_special(token_id) if self.name == "tekken131k" else (
                self._raw._model.is_control(token_id) or self._raw._model.is_unknown(token_id)):
            return b""
        if self.name == "tekken131k":
            return self._raw.id_to_byte_piece(token_id)
        model = self._raw._model
        piece = model.id_to_piece(token_id)
        if model.is_byte(token_id):
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode("utf-8")


def load_tokenizer(spec: str | os.PathLike) -> Tokenizer:
    """``"spm32k"`` / ``"tekken131k"`` (mistral_common) or a path to a ``tokenizer.json``."""
    if str(spec) in MistralTokenizer.FILES:
        return MistralTokenizer(str(spec))
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.exists():
        raise ValueError(f"tokenizer {spec!r}: not a mistral_common vocabulary or an existing tokenizer.json")
    return BPETokenizer.load(path)


class PretrainedTokenizer(Tokenizer):
    """A pretrained ``transformers`` tokenizer (e.g. SmolLM2's) behind the ``Tokenizer`` interface.

    ``encode(text, bos=True)`` prepends ``bos_id`` unless the text already starts with it (a
    chat-templated prompt does: SmolLM2's BOS is ``<|im_start|>``), so prompts from ``chat`` are
    never doubled. ``token_bytes`` is exact for byte-level BPE vocabularies (SmolLM2, GPT-2 style:
    the token string read through the byte alphabet); special tokens map to ``b""``. Other
    vocabularies fall back to the tokenizer's own string conversion (not exact for partial UTF-8).
    ``chat`` applies the tokenizer's chat template with the generation prompt appended.

    Args:
        hf_tok: a ``transformers`` tokenizer (``AutoTokenizer.from_pretrained(dir)``).
    """

    def __init__(self, hf_tok):
        self._tok = hf_tok
        self.vocab_size = len(hf_tok)
        self.bos_id = hf_tok.bos_token_id if hf_tok.bos_token_id is not None else 0
        self.eos_id = hf_tok.eos_token_id if hf_tok.eos_token_id is not None else 0
        self.pad_id = hf_tok.pad_token_id if hf_tok.pad_token_id is not None else self.eos_id
        self._special = set(hf_tok.all_special_ids) | set(getattr(hf_tok, "added_tokens_decoder", {}) or {})
        backend = getattr(hf_tok, "backend_tokenizer", None)
        self.byte_level = backend is not None and "ByteLevel" in repr(backend.decoder)
        self._dec = _byte_decoder() if self.byte_level else None
        self._cache: dict[int, bytes] = {}

    @property
    def hf(self):
        """The wrapped ``transformers`` tokenizer."""
        return self._tok

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> list[int]:
        ids = list(self._tok.encode(text, add_special_tokens=False))
        if bos and not (ids and ids[0] == self.bos_id):
            ids = [self.bos_id] + ids
        return ids + ([self.eos_id] if eos else [])

    def token_bytes(self, token_id: int) -> bytes:
        b = self._cache.get(token_id)
        if b is None:
            b = self._cache[token_id] = self._raw_bytes(int(token_id))
        return b

    def _raw_bytes(self, token_id: int) -> bytes:
        if token_id in self._special:
            return b""
        piece = self._tok.convert_ids_to_tokens(token_id)
        if piece is None:
            return b""
        if self._dec is not None and all(c in self._dec for c in piece):
            return bytes(self._dec[c] for c in piece)
        return self._tok.convert_tokens_to_string([piece]).encode("utf-8")

    def chat(self, prompt: str | Sequence[dict], *, system: str | None = None) -> str:
        """The chat-template text of a user ``prompt`` (or a list of ``{"role", "content"}``
        messages), ending with the assistant's generation prompt; encode it with ``bos=True``."""
        if isinstance(prompt, str):
            messages = ([{"role": "system", "content": system}] if system is not None else []) + [
                {"role": "user", "content": prompt}]
        elif system is not None:
            raise ValueError("system: give it inside the messages when prompt is a list of messages")
        else:
            messages = list(prompt)
        if not getattr(self._tok, "chat_template", None):
            raise ValueError("this tokenizer has no chat template; pass plain prompts to generate")
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
