"""Adapters to the peer engines a user would pick instead (for the benchmark and comparison tests).

Each adapter takes a ``Vocabulary`` (token id -> bytes) and a JSON Schema, and exposes
``compile(schema) -> compiled`` and ``matcher(compiled)`` with ``fill(words_uint32)``,
``accept(token) -> bool``. All are configured for compact JSON (no whitespace, separators ``,``
and ``:``), the output form of ``rayml.decoding.json_schema``. Imports are optional: ``available()``
lists the peers installed here.

* xgrammar: ``TokenizerInfo`` from the raw byte vocabulary (``VocabType.RAW``).
* llguidance: ``LLTokenizer`` over the byte vocabulary with a greedy longest-match tokenizer
  (llguidance uses it only for forced text).
* outlines-core: the schema's regex (``build_regex_from_schema`` with an empty whitespace pattern)
  indexed over the byte vocabulary.
* formatron: needs pydantic < 2.12 to import (reported as unavailable otherwise).
"""

from __future__ import annotations

import json

import numpy as np

from rayml.decoding.vocab import Vocabulary

__all__ = ["available", "make_peer", "PEERS"]

PEERS = ("xgrammar", "llguidance", "outlines-core", "formatron")


def available() -> dict[str, str]:
    """``{peer: "ok" or the reason it is unavailable}``."""
    out = {}
    for name, mod in (("xgrammar", "xgrammar"), ("llguidance", "llguidance"), ("outlines-core", "outlines_core"),
                      ("formatron", "formatron.formatter")):
        try:
            __import__(mod)
            out[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - report any import failure
            out[name] = f"{type(exc).__name__}: {exc}"[:200]
    return out


class _XGrammar:
    name = "xgrammar"

    def __init__(self, vocab: Vocabulary, vocab_size: int):
        import xgrammar as xgr

        self.xgr = xgr
        self.info = xgr.TokenizerInfo([bytes(t) for t in vocab.tokens], xgr.VocabType.RAW, vocab_size=vocab_size,
                                      stop_token_ids=list(vocab.eos_ids))
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        self.vocab_size = vocab_size

    def compile(self, schema):
        return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=False, separators=(",", ":"),
                                                 strict_mode=True)

    def matcher(self, compiled):
        return _XMatcher(self.xgr, compiled, self.vocab_size)


class _XMatcher:
    def __init__(self, xgr, compiled, vocab_size):
        self.m = xgr.GrammarMatcher(compiled)
        self.bm = xgr.allocate_token_bitmask(1, vocab_size)
        self.xgr = xgr

    def fill(self, words: np.ndarray):
        self.m.fill_next_token_bitmask(self.bm)
        words[:] = self.bm.numpy()[0].view(np.uint32)

    def accept(self, token: int) -> bool:
        return bool(self.m.accept_token(int(token)))


class _LLGuidance:
    name = "llguidance"

    def __init__(self, vocab: Vocabulary, vocab_size: int):
        import llguidance

        self.llg = llguidance
        toks = [bytes(t) for t in vocab.tokens] + [b""] * (vocab_size - vocab.size)
        by_bytes = {}
        for i, t in enumerate(toks):
            if t and i not in vocab.special:
                by_bytes.setdefault(t, i)
        maxlen = max(len(t) for t in by_bytes)

        class _Tok:
            eos_token_id = vocab.eos_ids[0]
            bos_token_id = None
            tokens = [t if t else b"<special_%d>" % i for i, t in enumerate(toks)]
            special_token_ids = sorted(set(vocab.special) | set(range(vocab.size, vocab_size)))

            def __call__(self, s):
                data = s if isinstance(s, bytes) else s.encode("utf-8")
                out, i = [], 0
                while i < len(data):
                    for n in range(min(maxlen, len(data) - i), 0, -1):
                        t = by_bytes.get(data[i:i + n])
                        if t is not None:
                            out.append(t)
                            i += n
                            break
                    else:
                        raise ValueError("untokenizable byte")
                return out

        self.tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tok()))
        self.vocab_size = vocab_size

    def compile(self, schema):
        g = self.llg.LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": False})
        return g

    def matcher(self, compiled):
        return _LLMatcher(self.llg, self.tok, compiled, self.vocab_size)


class _LLMatcher:
    def __init__(self, llg, tok, grammar, vocab_size):
        import llguidance.numpy as lnp

        self.m = llg.LLMatcher(tok, grammar)
        if self.m.is_error():
            raise ValueError(self.m.get_error())
        self.lnp = lnp
        self.bm = lnp.allocate_token_bitmask(1, vocab_size)

    def fill(self, words):
        self.lnp.fill_next_token_bitmask(self.m, self.bm, 0)
        words[:] = self.bm[0].view(np.uint32)

    def accept(self, token):
        return bool(self.m.consume_token(int(token)))


class _Outlines:
    name = "outlines-core"

    def __init__(self, vocab: Vocabulary, vocab_size: int):
        import outlines_core as oc

        self.oc = oc
        groups: dict = {}
        for i, t in enumerate(vocab.tokens):
            if t and i not in vocab.special:
                groups.setdefault(bytes(t), []).append(i)
        self.vocabulary = oc.Vocabulary(vocab.eos_ids[0], groups)
        self.vocab_size = vocab_size

    def compile(self, schema):
        regex = self.oc.json_schema.build_regex_from_schema(json.dumps(schema), "")
        return self.oc.Index(regex, self.vocabulary)

    def matcher(self, compiled):
        return _OMatcher(self.oc, compiled, self.vocab_size)


class _OMatcher:
    def __init__(self, oc, index, vocab_size):
        self.g = oc.Guide(index)
        self.vocab_size = vocab_size
        self.buf = np.zeros((vocab_size + 31) // 32, np.int32)

    def fill(self, words):
        self.buf[:] = 0
        self.g.write_mask_into(self.buf.ctypes.data, self.buf.size, 4)
        words[:] = self.buf.view(np.uint32)

    def accept(self, token):
        try:
            self.g.advance(int(token), return_tokens=False)
            return True
        except Exception:  # noqa: BLE001
            return False


def make_peer(name: str, vocab: Vocabulary, vocab_size: int | None = None):
    """An adapter for peer ``name`` (one of ``PEERS``); ``ImportError`` if it is not installed."""
    vocab_size = int(vocab_size or vocab.size)
    if name == "xgrammar":
        return _XGrammar(vocab, vocab_size)
    if name == "llguidance":
        return _LLGuidance(vocab, vocab_size)
    if name == "outlines-core":
        return _Outlines(vocab, vocab_size)
    if name == "formatron":
        import formatron.formatter  # noqa: F401 - raises on pydantic >= 2.12

        raise ImportError("formatron adapter: not wired (formatron 0.5.0 does not import with this pydantic)")
    raise ValueError(f"name must be one of {PEERS}, got {name!r}")
