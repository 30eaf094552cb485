"""A state's mask after a state-cache miss in C (``Engine.mask_into``, issue 44's third round: the
terminal infos, the counted-string cuts, the contribution cache and the combination in C tables keyed
by integer ids) against the Python orchestration of the same compiled engine (``compute_mask`` with
``_mask_into`` off) and against the pure-Python engine, bit for bit at every step."""

import numpy as np
import pytest

from rayml.decoding import (GrammarMatcher, MatcherConfig, allocate_token_bitmask, byte_vocabulary, compile_grammar,
                               compile_json_schema, native, schema_grammar)
from rayml.decoding.grammar import parse_ebnf
from rayml.decoding.json_schema import clear_caches
from rayml.decoding.native_earley import NativeEarleyEngine
from rayml.experiments import zapformat as zf

needs_core = pytest.mark.skipif(not native.AVAILABLE, reason=f"compiled core not built: {native.REASON}")


def _masks(schema, index, config, sequences, python_orchestration=False):
    """Every mask (bytes) along ``sequences``, from a compile with every cache cleared."""
    clear_caches()
    index.clear_cache()
    cg = compile_grammar(schema_grammar(schema), index, config)
    if python_orchestration:
        cg._mask_into = None  # the same compiled engine, the mask assembled by matcher.py
    bm = allocate_token_bitmask(1, index.vocab_size)
    out = []
    for tokens in sequences:
        m = GrammarMatcher(cg)
        for tok in tokens:
            m.fill_next_token_bitmask(bm)
            out.append(bm.tobytes())
            if not m.accept_token(tok):
                break
    return out


@needs_core
@pytest.mark.parametrize("k", [8, 10])  # minLength + maxLength strings; nested bounded strings and a pattern
@pytest.mark.parametrize("cache_size", [4096, 2])  # 2: the C contribution cache is emptied again and again
def test_mask_into_equals_python_orchestration_and_pure(k, cache_size):
    vocab, index = zf.vocab_and_index("mistral-32k")
    schema = zf.BENCH_SUITE[k]
    sampler = compile_grammar(schema_grammar(schema), index, MatcherConfig(native=False))
    sequences = [zf.sample_tokens(sampler, vocab, 900 + k + q, 40, 30) for q in range(2)]
    cfg = MatcherConfig(cache_size=cache_size)
    c_tables = _masks(schema, index, cfg, sequences)
    assert len(c_tables) >= 20
    assert c_tables == _masks(schema, index, cfg, sequences, python_orchestration=True)
    assert c_tables == _masks(schema, index, MatcherConfig(native=False, cache_size=cache_size), sequences)


@needs_core
def test_mask_tables_are_used_counted_and_checked():
    cg = compile_json_schema({"type": "object", "properties": {"s": {"type": "string", "minLength": 2,
                                                                     "maxLength": 5}}}, byte_vocabulary())
    assert cg._mask_into is not None
    m = GrammarMatcher(cg)
    before = cg.engine.native_nbytes()
    for b in b'{"s":"ab':
        m.next_token_words()
        assert m.accept_token(b)
    assert cg.engine.native_nbytes() > before  # the C infos and contributions are counted
    e, words = cg.engine._e, np.zeros(cg.index.n_words, np.uint32)
    with pytest.raises(ValueError, match="words must have"):
        e.mask_into(m.chart, np.zeros(3, np.uint32), cg._native_base)
    with pytest.raises(ValueError, match="out of range"):
        e.mask_into(10 ** 9, words, cg._native_base)
    with pytest.raises(ValueError, match="one entry per terminal"):
        e.set_masks(cg.index._native_trie, cg.index.eos_words, [], 16)
    fresh = compile_json_schema({"type": "string", "maxLength": 3}, byte_vocabulary())
    with pytest.raises(RuntimeError, match="set_masks"):
        eng = NativeEarleyEngine(parse_ebnf('root ::= "a"'))
        eng._e.mask_into(eng.initial(), words, None)
    chart = GrammarMatcher(fresh)
    assert chart.accept_token(ord('"'))
    with pytest.raises(TypeError, match="base_of"):  # a counted state needs its walk from Python
        fresh.engine._e.mask_into(chart.chart, np.zeros(fresh.index.n_words, np.uint32), None)


@needs_core
def test_fill_row_copy_keeps_numpy_indexing():
    cg = compile_json_schema({"type": "array", "items": {"type": "integer"}}, byte_vocabulary())
    m = GrammarMatcher(cg)
    ref = allocate_token_bitmask(3, cg.index.vocab_size)
    m.fill_next_token_bitmask(ref, 1)  # the compiled core's row copy
    assert ref[0].sum() == 0 and ref[2].sum() == 0 and ref[1].any()
    neg = allocate_token_bitmask(3, cg.index.vocab_size)
    m.fill_next_token_bitmask(neg, -2)  # NumPy's indexing: the same row
    assert np.array_equal(neg, ref)
    wide = np.zeros((3, 2 * cg.index.n_words), np.int32)[:, ::2]  # not contiguous: NumPy's copy
    m.fill_next_token_bitmask(wide, 1)
    assert np.array_equal(wide, ref)
