"""Token masks: soundness and completeness against brute force on random grammars and prefixes,
the same masks with pruning / the state cache on or off, rollback, bitmask layout, bad input."""

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

from rayml.decoding import (GrammarLogitsProcessor, GrammarMatcher, MatcherConfig, TokenIndex, Vocabulary,
                               allocate_token_bitmask, apply_token_bitmask, bitmask_to_bool, bool_to_bitmask,
                               compile_ebnf, compile_grammar, parse_ebnf)

E = "é".encode()  # b"\xc3\xa9": tokens below split it (not valid UTF-8 alone)
TOKENS = [b"a", b"b", b"c", b"ab", b"ba", b"aab", b"abc", b"bb", b"cc", b"ca", E[:1], E[1:], E, b"a" + E[:1],
          E[1:] + b"a", E + b"b", b"x", b"[", b"]", b",", b"[a", b"],", b"a,", b",a"]
VOCAB = Vocabulary(tuple(TOKENS) + (b"", b""), eos_ids=(len(TOKENS),), special=frozenset({len(TOKENS), len(TOKENS) + 1}))
INDEX = TokenIndex(VOCAB, vocab_size=len(TOKENS) + 5)

ELEMENTS = ['"a"', '"b"', '"ab"', '"é"', "[ab]", "[^a]", "/a+b?/", "/(é|c)*/", '"["', '"]"', '","']


@st.composite
def grammars(draw):
    n_rules = draw(st.integers(1, 3))
    names = [f"r{i}" for i in range(n_rules)]
    lines = []
    for name in names:
        alts = []
        for _ in range(draw(st.integers(1, 3))):
            seq = []
            for _ in range(draw(st.integers(0, 3))):
                kind = draw(st.integers(0, 9))
                if kind < 5:
                    el = draw(st.sampled_from(ELEMENTS))
                elif kind < 8:
                    el = draw(st.sampled_from(names))
                else:
                    el = "(" + draw(st.sampled_from(ELEMENTS)) + " " + draw(st.sampled_from(names)) + ")"
                seq.append(el + draw(st.sampled_from(["", "", "*", "?", "+"])))
            alts.append(" ".join(seq) or '""')
        lines.append(f"{name} ::= " + " | ".join(alts))
    return "\n".join(lines)


def brute_force(engine, chart) -> set:
    allowed = {t for t, data in enumerate(TOKENS) if engine.accept_bytes(chart, data) is not None}
    if engine.can_terminate(chart):
        allowed |= set(VOCAB.eos_ids)
    return allowed


@settings(max_examples=70, deadline=None)
@given(grammars(), st.lists(st.integers(0, 10_000), max_size=6), st.booleans())
def test_mask_equals_brute_force(text, choices, prune):
    try:
        grammar = parse_ebnf(text)
    except ValueError:
        assume(False)
    cg = compile_grammar(grammar, INDEX, MatcherConfig(prune=prune))
    m = GrammarMatcher(cg)
    for c in choices + [None]:
        expected = brute_force(cg.engine, m.chart)
        got = set(m.allowed_tokens().tolist())
        assert got == expected, (text, m.chart)
        options = sorted(expected - set(VOCAB.eos_ids))
        if c is None or not options:
            break
        assert m.accept_token(options[c % len(options)])


@settings(max_examples=25, deadline=None)
@given(grammars(), st.lists(st.integers(0, 10_000), min_size=1, max_size=6))
def test_pruning_and_cache_do_not_change_masks(text, choices):
    try:
        grammar = parse_ebnf(text)
    except ValueError:
        assume(False)
    configs = [MatcherConfig(prune=p, state_cache=c) for p in (True, False) for c in (True, False)]
    matchers = [GrammarMatcher(compile_grammar(grammar, INDEX, cfg)) for cfg in configs]
    history = []
    for c in choices:
        masks = [m.next_token_words().copy() for m in matchers]
        assert all((x == masks[0]).all() for x in masks)
        history.append(masks[0])
        options = [t for t in np.flatnonzero(bitmask_to_bool(masks[0].view(np.int32)[None], INDEX.vocab_size)[0])
                   if t not in VOCAB.eos_ids]
        if not options:
            break
        for m in matchers:
            assert m.accept_token(int(options[c % len(options)]))
    # rollback restores the earlier masks
    m = matchers[0]
    for k in range(len(history) - 1, -1, -1):
        steps_taken = len(m._history) - 1
        m.rollback(steps_taken - k)
        assert (m.next_token_words() == history[k]).all()


def test_partial_utf8_tokens_and_eos():
    cg = compile_ebnf('root ::= "é" "é"?', INDEX)
    m = GrammarMatcher(cg)
    allowed = {TOKENS[t] for t in m.allowed_tokens().tolist()}
    assert allowed == {E[:1], E, E + b"b"} - {E + b"b"}
    assert m.accept_token(TOKENS.index(E[:1]))
    assert {TOKENS[t] for t in m.allowed_tokens().tolist()} == {E[1:]}
    assert m.accept_token(TOKENS.index(E[1:]))
    ids = set(m.allowed_tokens().tolist())
    assert VOCAB.eos_ids[0] in ids and TOKENS.index(E) in ids
    assert not m.accept_token(TOKENS.index(b"a"))
    assert m.accept_token(VOCAB.eos_ids[0]) and m.is_terminated()
    assert not m.accept_token(TOKENS.index(E))
    assert m.allowed_tokens().size == 0
    m.rollback(1)
    assert not m.is_terminated() and m.accept_token(TOKENS.index(E))
    m.reset()
    assert m.chart_depth() == 1 and not m.can_terminate()


def test_bitmask_layout_matches_bool_mask():
    rng = np.random.default_rng(0)
    allowed = rng.random((3, 70)) < 0.4
    bm = bool_to_bitmask(allowed)
    assert bm.dtype == np.int32 and bm.shape == (3, 3)
    assert (bitmask_to_bool(bm, 70) == allowed).all()
    word = int(bm[0, 0]) & 0xFFFFFFFF
    assert all(bool(word >> i & 1) == allowed[0, i] for i in range(32))
    logits = apply_token_bitmask(rng.standard_normal((3, 70)), bm)
    assert (np.isinf(logits) == ~allowed).all()


def test_logits_processor_and_bad_input():
    cg = compile_ebnf('root ::= "ab" | "ba"', INDEX)
    lp = GrammarLogitsProcessor(cg, batch=2)
    bm = lp([[], []])
    assert bm.shape == (2, INDEX.n_words)
    first = set(np.flatnonzero(bitmask_to_bool(bm, INDEX.vocab_size)[0]).tolist())
    assert first == {TOKENS.index(b"a"), TOKENS.index(b"b"), TOKENS.index(b"ab"), TOKENS.index(b"ba")}
    bm = lp([[TOKENS.index(b"a")], [TOKENS.index(b"ba")]])
    assert set(np.flatnonzero(bitmask_to_bool(bm, INDEX.vocab_size)[0]).tolist()) == {TOKENS.index(b"b")}
    assert set(np.flatnonzero(bitmask_to_bool(bm, INDEX.vocab_size)[1]).tolist()) == set(VOCAB.eos_ids)
    with pytest.raises(ValueError, match="not allowed"):
        lp([[TOKENS.index(b"a")], []])
    m = GrammarMatcher(cg)
    with pytest.raises(ValueError, match="token_id"):
        m.accept_token(10_000)
    with pytest.raises(ValueError, match="n must be"):
        m.rollback(1)
    with pytest.raises(ValueError, match="bitmask"):
        m.fill_next_token_bitmask(np.zeros((1, 2), np.int64))
    with pytest.raises(ValueError, match="vocab_size"):
        TokenIndex(VOCAB, vocab_size=3)
    with pytest.raises(ValueError, match="cache_size"):
        MatcherConfig(cache_size=0)
    assert allocate_token_bitmask(2, 33).shape == (2, 2)
