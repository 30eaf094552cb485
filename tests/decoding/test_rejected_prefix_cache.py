"""The matcher's rejected-prefix cache (ZapFormat / kbnf mask step 5): when the bytes a token has
after a terminal ends inside it are rejected at byte ``k``, every other token with the same first
``k + 1`` bytes there is ruled out without running the Earley engine again (kbnf keeps the rejected
prefix; the matcher's trie walk prunes the rejected node's subtree). Observed through the engine's
``stats["simulated_bytes"]`` counter and the masks, not through the implementation.

These tests fail if the cache is

* unused: 200 tokens share one rejected prefix; with the cache they cost a handful of simulated
  bytes, simulated one by one at least one byte each (a control vocabulary with 200 *distinct*
  rejected prefixes shows the counter does count per-token work);
* wrong: a prefix one byte too short skips valid tokens (``":1:"`` is rejected at its third byte,
  ``":1;"`` sorts right after it and is valid), and a prefix remembered across charts skips tokens that
  are valid in another context (``":ab"`` is rejected after the first word, valid after the second).

Masks are checked against an independent oracle: the grammar written as one regex, compiled to a
trimmed DFA (every live state reaches acceptance, so "not dead" is exactly "a viable prefix").
"""

from __future__ import annotations

import pytest

from rayml.decoding import GrammarMatcher, MatcherConfig, compile_ebnf
from rayml.decoding.regex import compile_regex
from rayml.decoding.vocab import Vocabulary

# Nonterminal boundaries make a terminal end inside tokens (exits), so rests are simulated.
EBNF = """
root ::= word ":" num ";" word ":" word
word ::= [a-z]+
num  ::= [0-9]{1,3}
"""
ORACLE = compile_regex("[a-z]+:[0-9]{1,3};[a-z]+:[a-z]+")

COMMON = [b"ab:1:", b"ab:1;", b"ab:1;q", b"ab:ab", b"ab:abc", b"b:q", b"b:12", b"b:12;", b"ab:12;cd:e", b":", b"ab",
          b":1;", b":ab", b"q:ab", b"q:1"]
SHARED = [b"ab:1x%d" % i for i in range(200)]  # one rejected prefix (":1x" after word 1, ":1" after word 2)
DISTINCT = [b"ab:%03dx" % i for i in range(200)]  # 200 different rejected prefixes (":000x", ":001x", ...)
TEXTS = [b"a", b"ab:1", b"ab:12;", b"ab:12;c", b"ab:12;cd:", b"ab:12;cd:e", b"a"]


def _vocab(extra) -> Vocabulary:
    toks = [bytes([b]) for b in range(256)] + list(extra) + [b""]
    return Vocabulary(tuple(toks), (len(toks) - 1,), frozenset({len(toks) - 1}), "test")


def _viable(data: bytes) -> bool:
    s = 0
    for b in data:
        s = ORACLE.trans_list[s][b]
        if s < 0:
            return False
    return True


def _oracle_allowed(vocab: Vocabulary, text: bytes) -> list[int]:
    out = [i for i, t in enumerate(vocab.tokens) if t and _viable(text + t)]
    if ORACLE.matches(text):
        out += list(vocab.eos_ids)
    return sorted(out)


def _mask_at(cg, text: bytes) -> tuple[list[int], int]:
    """Allowed tokens after ``text`` and the bytes the engine simulated for that mask."""
    m = GrammarMatcher(cg)
    assert m.accept_bytes(text), text
    before = cg.stats["simulated_bytes"]
    allowed = m.allowed_tokens().tolist()
    return allowed, cg.stats["simulated_bytes"] - before


def test_oracle_is_the_grammar():
    cg = compile_ebnf(EBNF, _vocab([]))
    for text in [b"ab:12;cd:e", b"a:1;b:c", b"ab:1234;c:d", b"ab:1;c:1", b"a:;b:c"]:
        assert cg.engine.recognizes(text) == ORACLE.matches(text), text


@pytest.mark.parametrize("extra", [COMMON + SHARED, COMMON + DISTINCT], ids=["shared", "distinct"])
def test_masks_equal_the_oracle_in_every_context(extra):
    vocab = _vocab(extra)
    # the state cache off: every mask is recomputed, so rests are simulated again in each context
    cg = compile_ebnf(EBNF, vocab, MatcherConfig(state_cache=False))
    for text in TEXTS:  # word 1 context, later contexts, then word 1 again (a leaked prefix would show)
        allowed, _ = _mask_at(cg, text)
        assert allowed == _oracle_allowed(vocab, text), text


def test_shorter_prefix_would_skip_a_valid_rest():
    vocab = _vocab(COMMON + SHARED)
    cg = compile_ebnf(EBNF, vocab, MatcherConfig(state_cache=False))
    allowed, _ = _mask_at(cg, b"a")
    ids = {vocab.tokens[i]: i for i in range(len(vocab.tokens))}
    assert ids[b"ab:1;"] in allowed and ids[b"ab:1;q"] in allowed  # sorted right after rejected ":1:"
    assert ids[b"ab:1:"] not in allowed and not any(ids[t] in allowed for t in SHARED)
    later, _ = _mask_at(cg, b"ab:12;c")  # after word 2, ":ab" is valid although rejected after word 1
    assert ids[b"ab:ab"] in later and ids[b"ab:abc"] in later and ids[b"ab:1;"] not in later


def test_shared_rejected_prefix_is_simulated_once():
    shared = compile_ebnf(EBNF, _vocab(COMMON + SHARED), MatcherConfig(state_cache=False))
    distinct = compile_ebnf(EBNF, _vocab(COMMON + DISTINCT), MatcherConfig(state_cache=False))
    for text in (b"a", b"ab:12;c"):
        _, n_shared = _mask_at(shared, text)
        _, n_distinct = _mask_at(distinct, text)
        # without the cache each of the 200 rests sharing the prefix costs at least one byte
        assert n_shared < 40, (text, n_shared)
        if text == b"a":  # the control: 200 distinct rejected prefixes cost at least a byte each
            assert n_distinct >= 200, (text, n_distinct)
    counts = [_mask_at(shared, b"a")[1] for _ in range(2)]
    assert counts[0] == counts[1]  # per mask, not a one-off: same cost every time (no state cache)


def test_cost_does_not_grow_with_the_number_of_rests_sharing_the_prefix():
    small = compile_ebnf(EBNF, _vocab(COMMON + SHARED[:10]), MatcherConfig(state_cache=False))
    large = compile_ebnf(EBNF, _vocab(COMMON + SHARED), MatcherConfig(state_cache=False))
    assert _mask_at(large, b"a")[1] == _mask_at(small, b"a")[1]


def test_a_prefix_rejected_in_one_context_is_not_reused_in_another():
    # ":b" (rest of "a:b" after the word ends) is rejected after word 1 and valid after word 2
    vocab = _vocab([b"a:b", b"a:bc", b"za:b"])
    cg = compile_ebnf(EBNF, vocab, MatcherConfig(state_cache=False))
    for text in (b"x", b"x:1;y", b"x", b"x:1;y"):
        assert _mask_at(cg, text)[0] == _oracle_allowed(vocab, text), text
