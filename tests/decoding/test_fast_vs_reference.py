"""The fast engine against the pure-Python reference, on the benchmark's schema suite.

The fast engine (``MatcherConfig(memo=True)``, the default; its Earley engine is in C when the compiled core
is built, ``NativeEarleyEngine``) interns Earley charts and keeps the
results of byte steps, exit charts and token accepts on their top Earley set; the reference
(``memo=False``) recomputes everything. Token sequences are sampled under our masks with random
logits (as ``rayml bench zapformat`` does) and replayed by both: every mask must be bit-identical
and every accept must agree, over two queries of one compiled grammar (so that the second query
runs on memoised states). The default test runs every schema of ``BENCH_SUITE`` on the Mistral 32k
vocabulary with short queries; ``RAYML_FULL_REFERENCE=1`` replays the bench's quick size on both
shipped vocabularies."""

import os

import numpy as np
import pytest

from rayml.decoding import (GrammarMatcher, MatcherConfig, allocate_token_bitmask, compile_grammar,
                               schema_grammar)
from rayml.decoding import native
from rayml.decoding.earley import EarleyEngine
from rayml.decoding.native_earley import NativeEarleyEngine
from rayml.experiments import zapformat as zf

FULL = os.environ.get("RAYML_FULL_REFERENCE") == "1"


def _replay(cg, sequences):
    """Masks (bytes) and accept results at every step of every query, one matcher per query."""
    bm = allocate_token_bitmask(1, cg.index.vocab_size)
    masks, accepts = [], []
    for tokens in sequences:
        m = GrammarMatcher(cg)
        for tok in tokens:
            m.fill_next_token_bitmask(bm)
            masks.append(bm.tobytes())
            accepts.append(m.accept_token(tok))
    return masks, accepts


def _check(schema, index, vocab, seed, max_tokens, budget, prune=True, intern_size=None):
    sampler = compile_grammar(schema_grammar(schema), index)
    sequences = [zf.sample_tokens(sampler, vocab, seed + q, max_tokens, budget) for q in range(2)]
    # a wrong token in the middle: both engines must reject it identically (and stay unchanged)
    sequences.append(sequences[0][:3] + [int(np.argmin([len(t) for t in vocab.tokens[:256]]))] + sequences[0][3:6])
    # the fast engine: on the compiled core when built; the Python one for a tiny intern table
    fast = compile_grammar(schema_grammar(schema), index, MatcherConfig(prune=prune, native=intern_size is None))
    if intern_size is not None:
        fast.engine.intern_size = intern_size
    ref = compile_grammar(schema_grammar(schema), index, MatcherConfig(prune=prune, memo=False))
    f_masks, f_acc = _replay(fast, sequences)
    r_masks, r_acc = _replay(ref, sequences)
    assert f_acc == r_acc
    bad = [i for i, (a, b) in enumerate(zip(f_masks, r_masks)) if a != b]
    assert not bad, f"masks differ at steps {bad[:5]} of {len(f_masks)}"
    return len(f_masks)


@pytest.mark.parametrize("k", range(len(zf.BENCH_SUITE)))
def test_fast_masks_equal_reference_on_bench_suite(k):
    vocab, index = zf.vocab_and_index("mistral-32k")
    steps = _check(zf.BENCH_SUITE[k], index, vocab, seed=1000 + k, max_tokens=40, budget=20)
    assert steps >= 10


@pytest.mark.parametrize("k", [1, 10, 22])
def test_fast_masks_equal_reference_unpruned_and_tiny_intern_table(k):
    vocab, index = zf.vocab_and_index("mistral-32k")
    _check(zf.BENCH_SUITE[k], index, vocab, seed=2000 + k, max_tokens=40, budget=20, prune=False)
    _check(zf.BENCH_SUITE[k], index, vocab, seed=3000 + k, max_tokens=40, budget=20, intern_size=7)


def test_interned_charts_are_shared():
    vocab, index = zf.vocab_and_index("bytes")
    cg = compile_grammar(schema_grammar({"type": "array", "items": {"type": "integer"}}), index,
                         MatcherConfig(native=False))
    eng = cg.engine
    a = eng.accept_bytes(eng.initial(), b"[1,2")
    b = eng.accept_bytes(eng.initial(), b"[33,4")
    assert a is b  # equal parser states: the same chart object, so memos on it are shared
    assert eng.step(a, ord("5")) is eng.step(b, ord("5"))
    ref = compile_grammar(schema_grammar({"type": "array", "items": {"type": "integer"}}), index,
                          MatcherConfig(memo=False)).engine
    c = ref.accept_bytes(ref.initial(), b"[1,2")
    assert c is not ref.accept_bytes(ref.initial(), b"[33,4") and ref.chart_key(c) == eng.chart_key(a)
    if native.AVAILABLE:  # the compiled engine: equal parser states are the same integer id
        ceng = compile_grammar(schema_grammar({"type": "array", "items": {"type": "integer"}}), index).engine
        ca, cb = ceng.accept_bytes(ceng.initial(), b"[1,2"), ceng.accept_bytes(ceng.initial(), b"[33,4")
        assert isinstance(ceng, NativeEarleyEngine) and ca == cb and ceng.chart_key(ca) == eng.chart_key(a)
        assert ceng.step(ca, ord("5")) == ceng.step(cb, ord("5"))


def test_bad_memo_config():
    with pytest.raises(TypeError, match="memo"):
        MatcherConfig(memo="yes")
    vocab, index = zf.vocab_and_index("bytes")
    g = schema_grammar({"type": "integer"})
    with pytest.raises(ValueError, match="intern_size"):
        EarleyEngine(g, intern_size=0)


@pytest.mark.skipif(not FULL, reason="the whole bench replay: RAYML_FULL_REFERENCE=1")
@pytest.mark.parametrize("vocab_name", ["mistral-32k", "tekken-131k"])
def test_fast_masks_equal_reference_full_bench(vocab_name):
    cfg = zf.BENCH_SIZES["quick"]
    vocab, index = zf.vocab_and_index(vocab_name)
    for k, schema in enumerate(zf.bench_suite(cfg["schemas"], cfg["suite_seed"])):
        _check(schema, index, vocab, seed=k, max_tokens=cfg["max_tokens"], budget=cfg["budget"])
