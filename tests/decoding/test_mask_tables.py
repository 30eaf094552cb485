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
        cg._mask_into = cg._fill_row = cg._mask_copy = None  # the same compiled engine, the mask assembled by matcher.py
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


@needs_core
def test_state_cache_in_c_is_an_lru_counted_and_exact():
    """Fourth round: the state cache in C (``Engine.fill_row`` / ``mask_copy``): hits and misses counted,
    the least recently used mask evicted at ``cache_size``, every fill equal to the uncached mask."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}, "n": {"type": "integer"}}}
    for size in (1, 3, 4096):
        cg = compile_json_schema(schema, byte_vocabulary(), MatcherConfig(cache_size=size))
        assert cg._fill_row is not None
        e, bm = cg.engine._e, allocate_token_bitmask(2, cg.index.vocab_size)
        m, charts = GrammarMatcher(cg), []
        for b in b'{"s":"ab","n":12}':
            charts.append(m.chart)
            assert m.accept_token(b)
        for c in charts + charts[::-1] + charts:  # revisits after evictions
            assert e.fill_row(c, bm, 1, cg._native_base) is True
            ref = np.zeros(cg.index.n_words, np.uint32)
            e.mask_into(c, ref, cg._native_base)
            assert np.array_equal(bm[1].view(np.uint32), ref) and not bm[0].any()
        hits, misses, _ = e.mask_stats()
        assert hits + misses == 3 * len(charts) and cg.stats["cache_hits"] == hits
        n_states = len(set(charts))
        assert misses == n_states if size == 4096 else misses > n_states
    words = cg.compute_mask(charts[0])  # a copy: writing it leaves the cache as it was
    words[:] = 0
    assert cg.compute_mask(charts[0]).any()


@needs_core
def test_fill_row_declines_what_numpy_must_check():
    cg = compile_json_schema({"type": "integer"}, byte_vocabulary())
    e, c, nw = cg.engine._e, GrammarMatcher(cg).chart, cg.index.n_words
    for bad in (np.zeros((2, nw), np.uint32), np.zeros((2, nw + 1), np.int32), np.zeros(nw, np.int32),
                np.zeros((2, 2 * nw), np.int32)[:, ::2], np.zeros((2, nw), np.int32)[::-1]):
        assert e.fill_row(c, bad, 0, cg._native_base) is None
    assert e.fill_row(c, np.zeros((2, nw), np.int32), 2, cg._native_base) is None  # row outside [-B, B)
    with pytest.raises(ValueError, match="bitmask must be int32"):
        GrammarMatcher(cg).fill_next_token_bitmask(np.zeros((2, nw), np.uint32))
    with pytest.raises(ValueError, match="out of range"):
        e.fill_row(10 ** 9, np.zeros((2, nw), np.int32), 0, cg._native_base)
    with pytest.raises(ValueError, match="words must have"):
        e.mask_copy(c, np.zeros(nw + 1, np.uint32), cg._native_base)


@needs_core
@pytest.mark.parametrize("size", [1, 2, 5])
def test_state_cache_slots_that_point_at_infos_and_contributions(size):
    """Session 10: a state with one scan group and no EOS keeps a pointer to that group's info or
    contribution in its state-cache slot instead of a copy; when the bounded contribution cache is
    emptied, the slots that point into it are dropped (and recomputed on the next visit). With tiny
    caches both happen again and again: every fill must equal the pure engine's mask of the state."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}, "t": {"type": "string"},
                                               "k": {"enum": ["alpha", "beta"]}, "n": {"type": "integer"}}}
    text = b'{"s":"ab","t":"xyz","k":"beta","n":12}'
    # tokens across the terminals' ends (a closing quote and what follows it): states with exits, whose
    # masks are contributions
    vocab = byte_vocabulary([b'b",', b'z","', b'",', b'","', b'":"', b'a"', b'ta",', b'12}', b'":1'])
    ref = GrammarMatcher(compile_json_schema(schema, vocab, MatcherConfig(native=False)))
    cg = compile_json_schema(schema, vocab, MatcherConfig(cache_size=size))
    e, bm, m = cg.engine._e, allocate_token_bitmask(2, cg.index.vocab_size), GrammarMatcher(cg)
    charts, want = [], []
    for b in text:
        charts.append(m.chart)
        want.append(ref.next_token_words().copy())
        assert m.accept_token(b) and ref.accept_token(b)
    order = list(range(len(charts)))
    visits = order + order[::-1] + order[::3] + order
    for j in order[::3]:  # a cached state revisited between misses that refill the contribution cache
        for k in order:
            visits += [j, k]
    for j in visits:
        assert e.fill_row(charts[j], bm, 0, cg._native_base) is True
        assert np.array_equal(bm[0].view(np.uint32), want[j]), j
        words = np.zeros(cg.index.n_words, np.uint32)
        e.mask_copy(charts[j], words, cg._native_base)
        assert np.array_equal(words, want[j]), j
    hits, misses, _ = e.mask_stats()
    assert hits + misses == 2 * len(visits) and misses > len(set(charts))  # evictions happened


@needs_core
def test_same_bytes_compares_buffers_in_place():
    same = native.core.same_bytes
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert same(a, a.tobytes()) and same(a, a.copy()) and same(b"", np.zeros(0, np.uint8))
    b = a.copy()
    b[2, 3] += 1
    assert not same(a, b) and not same(a, a.tobytes()[:-1]) and not same(a[:2], a.tobytes())
    with pytest.raises((BufferError, ValueError, TypeError)):
        same(a[:, ::2], a.tobytes())  # not contiguous: refused, never compared wrongly
