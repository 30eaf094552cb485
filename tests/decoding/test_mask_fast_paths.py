"""The mask fast paths against brute force: counted strings (``quoted_repeat`` terminals masked
from one counted vocabulary walk per character state), literal states (``TokenIndex.literal``
instead of a walk), the trie-walk simulation after a terminal ends and its chart-keyed cache.

The brute force steps the Earley engine over every token's bytes; masks must equal it at every
step of random constrained walks, with pruning and the caches on or off."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rayml.decoding import (GrammarMatcher, MatcherConfig, TokenIndex, Vocabulary, compile_json_schema,
                               compile_regex_grammar)
from rayml.decoding.json_schema import _JSON_CHAR
from rayml.decoding.regex import _trim, dfa_from_ast, literal_dfa, quoted_repeat

E = "é".encode()
SNOW = "☃".encode()
# JSON-ish pieces: quotes inside and at both ends, escapes split across tokens, multi-byte
# characters split across tokens, keys with their colon, numbers, literals, closers
PIECES = [b'"', b'",', b'"}', b'"]', b'":', b'","', b'"},', b'a"', b'ab"', b'a', b'ab', b'abc', b'b', b'x"}',
          b'\\', b'\\n', b'\\"', b'\\u', b'00', b'e9', b'\\u00e9', b'"\\', E, E[:1], E[1:], E + b'"', SNOW[:2],
          SNOW[2:], SNOW, b'{', b'{"', b'}', b'[', b']', b',', b'[]', b'{}', b'"s":', b'"n":"', b'"k":', b'1', b'12',
          b'-', b'0', b'7,', b'true', b'tr', b'ue', b'null', b'"red"', b'"re', b'd"', b'"blue', b'"gr', b'een"}',
          b'n"', b'n', b' ', b'\x01']
TOKENS = [bytes([b]) for b in range(256)] + PIECES
VOCAB = Vocabulary(tuple(TOKENS) + (b"",), eos_ids=(len(TOKENS),), special=frozenset({len(TOKENS)}))
INDEX = TokenIndex(VOCAB, vocab_size=len(TOKENS) + 3)


def brute_force(engine, chart) -> set:
    allowed = {t for t, data in enumerate(TOKENS) if engine.accept_bytes(chart, data) is not None}
    if engine.can_terminate(chart):
        allowed |= set(VOCAB.eos_ids)
    return allowed


def schema_of(lo, hi, enum, key_lo):
    return {"type": "object", "properties": {
        "s": {"type": "string", "minLength": lo, **({"maxLength": hi} if hi is not None else {})},
        "n": {"type": "string"},
        "k": {"type": "array", "items": {"type": "string", "minLength": key_lo, "maxLength": key_lo + 1},
              "maxItems": 2},
        "e": {"enum": enum}},
        "required": ["s", "e"], "additionalProperties": False}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 3), st.one_of(st.none(), st.integers(0, 4)), st.integers(0, 2), st.booleans(), st.booleans(),
       st.lists(st.integers(0, 10_000), min_size=1, max_size=25))
def test_counted_strings_and_literals_equal_brute_force(lo, extra, key_lo, prune, cache, choices):
    hi = None if extra is None else lo + extra
    cg = compile_json_schema(schema_of(lo, hi, ["red", "green", 7, None], key_lo), INDEX,
                             MatcherConfig(prune=prune, state_cache=cache))
    assert any(t.counter is not None for t in cg.grammar.terminals)
    m = GrammarMatcher(cg)
    rng = np.random.default_rng(choices[0])
    for c in choices:
        for _ in range(3):  # a few tokens per drawn choice, closers preferred late
            expected = brute_force(cg.engine, m.chart)
            assert set(m.allowed_tokens().tolist()) == expected
            options = sorted(expected - set(VOCAB.eos_ids))
            if not options:
                return
            assert m.accept_token(options[(c + int(rng.integers(0, 1 << 30))) % len(options)])


def test_quoted_repeat_is_built_trimmed_and_counts_characters():
    char = dfa_from_ast(_JSON_CHAR)
    rng = np.random.default_rng(0)
    alphabet = ["a", "é", "☃", "\\n", "\\u00e9", '\\"', "\U0001F600"]
    for lo, hi in [(0, None), (2, None), (0, 0), (1, 1), (0, 3), (2, 5)]:
        d = quoted_repeat(char, lo, hi)
        t2, a2 = _trim(d.trans, d.accept)
        assert (t2 == d.trans).all() and (a2 == d.accept).all()
        assert d.counter is not None and d.counter.lo == lo and d.counter.hi == hi
        for _ in range(60):
            body = "".join(rng.choice(alphabet, size=int(rng.integers(0, 8))))
            text = f'"{body}"'.encode()
            n = len(json.loads(text))
            assert d.matches(text) == (n >= lo and (hi is None or n <= hi)), (lo, hi, text)


def test_literal_split_equals_the_vocabulary_walk():
    for word in [b'"red"', b'"re', b"true", b"{", b'"n":"', b"zz"]:
        dfa = literal_dfa(word)
        for s in range(dfa.n_states):
            if dfa.accept[s]:
                continue
            ids, exits = INDEX.walk(dfa.trans, dfa.accept, s)
            lit_ids, node = INDEX.literal(word[s:])
            assert sorted(ids.tolist()) == sorted(lit_ids.tolist())
            walked = [(p, n) for p, n, _ in exits if INDEX.t_child_hi[p][n] > INDEX.t_child_lo[p][n]]
            assert walked == ([node] if node is not None else [])


def test_regex_states_and_counted_paths_agree_with_pattern_strings():
    # a pattern string is an intersection (no counter): it takes the generic walk; same masks as brute force
    cg = compile_json_schema({"type": "string", "pattern": "^a+b?$", "maxLength": 3}, INDEX)
    assert all(t.counter is None for t in cg.grammar.terminals)
    m = GrammarMatcher(cg)
    for tok in [b'"', b"a", b"a"]:
        assert set(m.allowed_tokens().tolist()) == brute_force(cg.engine, m.chart)
        assert m.accept_token(TOKENS.index(tok))
    assert set(m.allowed_tokens().tolist()) == brute_force(cg.engine, m.chart)


def test_exit_cache_is_bounded_and_keyed_by_chart():
    # the pure engine's exit cache (on the compiled core the walks are memoised in C, Engine.exits_into)
    cg = compile_json_schema(schema_of(0, 2, ["red"], 0), INDEX, MatcherConfig(cache_size=2, native=False))
    m = GrammarMatcher(cg)
    for tok in [b'{"', b"s", b'":', b'"', b"a", b"b", b'",', b'"', b"e", b'":', b'"re', b'd"']:
        m.next_token_words()
        assert len(cg.exit_cache) <= 2
        assert m.accept_token(TOKENS.index(tok)), tok
    assert m.accept_token(TOKENS.index(b"}")) and m.can_terminate()
    with pytest.raises(ValueError, match="lo <= hi"):
        quoted_repeat(dfa_from_ast(_JSON_CHAR), 3, 1)
    assert compile_regex_grammar("ab", INDEX).engine.recognizes(b"ab")
