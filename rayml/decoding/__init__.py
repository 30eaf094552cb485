"""Structured generation: ZapFormat's Earley engine with dynamic pruning and token masks.

Implements "Earley-Driven Dynamic Pruning for Efficient Structured Decoding" (ZapFormat, the
Formatron engine, ICML 2025): a byte-level Earley recognizer with Leo items and regex terminals
as DFAs (``earley``, ``regex``), dynamic pruning of the chart and the chart-keyed state cache
(``earley``, ``matcher``), token masks over real vocabularies (``matcher``, ``vocab``), and
front-ends for EBNF grammars, regexes, generic JSON and JSON Schema (``grammar``,
``json_schema``).

Examples:
    >>> from rayml.decoding import compile_json_schema, byte_vocabulary, GrammarMatcher
    >>> cg = compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}},
    ...                           "required": ["a"], "additionalProperties": False}, byte_vocabulary())
    >>> m = GrammarMatcher(cg)
    >>> all(m.accept_token(b) for b in b'{"a":12}'), m.can_terminate()
    (True, True)

The interface for generation loops (``GrammarLogitsProcessor``): call it with each sequence's
newly sampled token ids; it returns the int32 bitmask ``[batch, ceil(V/32)]`` of allowed next
tokens (the layout xgrammar and vLLM use); ``apply_token_bitmask`` masks numpy logits.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rayml.decoding import native
from rayml.decoding.earley import EarleyEngine
from rayml.decoding.grammar import Grammar, GrammarBuilder, parse_ebnf
from rayml.decoding.json_schema import json_grammar, schema_grammar
from rayml.decoding.matcher import (CompiledGrammar, GrammarMatcher, MatcherConfig, TokenIndex,
                                       allocate_token_bitmask, apply_token_bitmask, bitmask_to_bool,
                                       bool_to_bitmask)
from rayml.decoding.regex import compile_regex
from rayml.decoding.vocab import Vocabulary, byte_vocabulary, load_mistral

__all__ = ["Grammar", "GrammarBuilder", "parse_ebnf", "json_grammar", "schema_grammar", "regex_grammar",
           "EarleyEngine", "CompiledGrammar", "GrammarMatcher", "MatcherConfig", "TokenIndex", "Vocabulary",
           "byte_vocabulary", "load_mistral", "allocate_token_bitmask", "apply_token_bitmask", "bitmask_to_bool",
           "bool_to_bitmask", "compile_grammar", "compile_ebnf", "compile_regex_grammar", "compile_json",
           "compile_json_schema", "GrammarLogitsProcessor", "fill_next_token_bitmasks", "native"]

_INDEX_CACHE: dict = {}


def _index(vocab) -> TokenIndex:
    if isinstance(vocab, TokenIndex):
        return vocab
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be a Vocabulary or TokenIndex, got {type(vocab).__name__}")
    key = id(vocab)
    hit = _INDEX_CACHE.get(key)
    if hit is None or hit.vocab is not vocab:
        hit = _INDEX_CACHE[key] = TokenIndex(vocab)
    return hit


def regex_grammar(pattern: str) -> Grammar:
    """The grammar whose sentences are the full matches of ``pattern`` (UTF-8 bytes)."""
    b = GrammarBuilder()
    root = b.nonterminal("root")
    b.add(root, [b.terminal(compile_regex(pattern), f"/{pattern}/")])
    return b.build(root)


def compile_grammar(grammar: Grammar, vocab, config: MatcherConfig = MatcherConfig()) -> CompiledGrammar:
    """Bind a grammar to a vocabulary (``Vocabulary`` or ``TokenIndex``)."""
    return CompiledGrammar(grammar, _index(vocab), config)


def compile_ebnf(text: str, vocab, config: MatcherConfig = MatcherConfig(), *, start: str | None = None):
    """Compile EBNF text (``rayml.decoding.grammar`` format) for ``vocab``."""
    return compile_grammar(parse_ebnf(text, start), vocab, config)


def compile_regex_grammar(pattern: str, vocab, config: MatcherConfig = MatcherConfig()):
    """Compile a full-match regex for ``vocab``."""
    return compile_grammar(regex_grammar(pattern), vocab, config)


def compile_json(vocab, config: MatcherConfig = MatcherConfig(), *, whitespace: bool = False):
    """Compile the generic JSON grammar for ``vocab``."""
    return compile_grammar(json_grammar(whitespace=whitespace), vocab, config)


def compile_json_schema(schema, vocab, config: MatcherConfig = MatcherConfig(), *, whitespace: bool = False):
    """Compile a JSON Schema (``rayml.decoding.json_schema`` lists the keywords) for ``vocab``."""
    return compile_grammar(schema_grammar(schema, whitespace=whitespace), vocab, config)


def fill_next_token_bitmasks(matchers: Sequence[GrammarMatcher], bitmask: np.ndarray, rows=None) -> None:
    """The batch fill: write every matcher's next-token mask into its row of ``bitmask`` (int32
    ``[batch, W]``; ``rows[i]`` is matcher ``i``'s row, default ``i``) in one call. Each mask comes
    from its matcher's caches (the state cache is keyed by the pruned chart, so sequences in the
    same parser state share one computation); on the compiled core each row is one C call from
    the C state cache (``GrammarMatcher.fill_next_token_bitmask``), otherwise the compiled core copies
    the rows."""
    matchers = list(matchers)
    rows = list(range(len(matchers))) if rows is None else [int(r) for r in rows]
    if len(rows) != len(matchers):
        raise ValueError(f"rows must have {len(matchers)} entries, got {len(rows)}")
    if not matchers:
        return
    n_words = matchers[0].compiled.index.n_words
    if (not isinstance(bitmask, np.ndarray) or bitmask.dtype != np.int32 or bitmask.ndim != 2
            or bitmask.shape[1] != n_words or not bitmask.flags.c_contiguous
            or any(not 0 <= r < bitmask.shape[0] for r in rows)):
        raise ValueError(f"bitmask must be a C-contiguous int32 [batch >= {max(rows) + 1}, {n_words}] array, got "
                         f"{getattr(bitmask, 'dtype', type(bitmask).__name__)} {getattr(bitmask, 'shape', '')}")
    if any(m.compiled.index.n_words != n_words for m in matchers):
        raise ValueError("matchers must share one vocabulary size")
    if all(m.compiled._fill_row is not None for m in matchers):  # the C state cache, one call per row
        for m, r in zip(matchers, rows):
            m.fill_next_token_bitmask(bitmask, r)
        return
    words = [m.next_token_words() for m in matchers]
    if native.AVAILABLE:
        native.fill_rows(bitmask, rows, words)
    else:
        for r, w in zip(rows, words):
            bitmask[r] = w.view(np.int32)


class GrammarLogitsProcessor:
    """Logits-processor-style driver for a batch of constrained sequences.

    Each call passes, per sequence, the token ids generated since the previous call (``[]`` on
    the first call); it accepts them and returns the int32 bitmask ``[batch, ceil(V/32)]`` of the
    allowed next tokens. A sequence whose token is rejected raises ``ValueError``.

    Args:
        compiled: one ``CompiledGrammar`` per sequence (or one for all).
        batch: number of sequences when ``compiled`` is a single grammar.

    Examples:
        >>> from rayml.decoding import compile_regex_grammar, byte_vocabulary
        >>> lp = GrammarLogitsProcessor(compile_regex_grammar("[ab]c", byte_vocabulary()), batch=2)
        >>> lp([[], []]).shape
        (2, 9)
    """

    def __init__(self, compiled, batch: int = 1):
        grammars = compiled if isinstance(compiled, (list, tuple)) else [compiled] * int(batch)
        if not grammars:
            raise ValueError("compiled must name at least one grammar")
        self.matchers = [GrammarMatcher(g) for g in grammars]
        self.vocab_size = self.matchers[0].vocab_size
        self.bitmask = allocate_token_bitmask(len(self.matchers), self.vocab_size)

    def __call__(self, new_token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        if len(new_token_ids) != len(self.matchers):
            raise ValueError(f"new_token_ids must have {len(self.matchers)} rows, got {len(new_token_ids)}")
        for i, (m, toks) in enumerate(zip(self.matchers, new_token_ids)):
            for t in toks:
                if not m.accept_token(int(t)):
                    raise ValueError(f"sequence {i}: token {int(t)} is not allowed by the grammar")
        fill_next_token_bitmasks(self.matchers, self.bitmask)
        return self.bitmask

    def is_terminated(self) -> list[bool]:
        return [m.is_terminated() for m in self.matchers]

    def reset(self) -> None:
        for m in self.matchers:
            m.reset()
