"""Regex DFAs against Python's ``re``; the Earley recognizer against independent predicates;
pruning / Leo against the unpruned chart; the EBNF front-end's errors."""

import re

import pytest
from hypothesis import given, settings, strategies as st

from rayml.decoding import EarleyEngine, parse_ebnf, regex_grammar
from rayml.decoding.regex import compile_regex, difference, intersect, utf8_sequences

PATTERNS = [r"a(b|c)*d", r"[0-9]{2,4}", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", r"(ab|a)(bc|c)?", r"[^ab]+é?",
            r"x{0,3}y?", r"\d\w\s", r"[a-c][^a-c]."]
ALPHABET = "abcdxy01239 .-é\n"


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=7))
def test_dfa_matches_python_re(pattern, text):
    dfa = compile_regex(pattern)
    expected = re.fullmatch(pattern, text, flags=re.ASCII) is not None
    assert dfa.matches(text.encode("utf-8")) == expected


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0x10FFFF), st.integers(0, 0x3000))
def test_utf8_sequences_cover_exactly(lo, width):
    hi = min(lo + width, 0x10FFFF)
    seqs = utf8_sequences(lo, hi)
    probes = {lo, hi, (lo + hi) // 2, max(lo - 1, 0), min(hi + 1, 0x10FFFF)}
    for cp in probes:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        enc = chr(cp).encode("utf-8")
        hit = any(len(s) == len(enc) and all(a <= b <= c for (a, c), b in zip(s, enc)) for s in seqs)
        assert hit == (lo <= cp <= hi)


def test_partial_utf8_prefixes_are_viable_states():
    dfa = compile_regex("é+")
    b = "é".encode()
    s = dfa.trans_list[0][b[0]]
    assert s >= 0 and not dfa.accept[s]
    assert dfa.trans_list[s][b[1]] >= 0


def test_product_constructions():
    a, b = compile_regex("[a-z]{1,5}"), compile_regex("ab|abc|zz")
    assert intersect(a, b).matches(b"abc") and not intersect(a, b).matches(b"abd")
    d = difference(a, b)
    assert d.matches(b"abd") and not d.matches(b"abc") and not d.matches(b"zz")


@pytest.mark.parametrize("bad", ["a(b", "a)", "*a", r"a\1", "(?=a)b", "a^b"])
def test_bad_regex_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="regex"):
        compile_regex(bad)


def _balanced(s: str) -> bool:
    depth = 0
    for ch in s:
        depth += 1 if ch == "(" else -1
        if depth < 0:
            return False
    return depth == 0


BALANCED = 'root ::= ("(" root ")")*'


@settings(max_examples=120, deadline=None)
@given(st.text(alphabet="()", max_size=12), st.booleans())
def test_recognizer_balanced_parens(text, prune):
    eng = EarleyEngine(parse_ebnf(BALANCED), prune=prune)
    assert eng.recognizes(text.encode()) == _balanced(text)
    depth_ok = all(text[:i].count(")") <= text[:i].count("(") for i in range(len(text) + 1))
    assert eng.is_prefix(text.encode()) == depth_ok


RIGHT_REC = 'root ::= "a" root | "b" | ""'
AMBIG = 'root ::= root root | "a" | "ab" | ""'


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab", max_size=10))
def test_recognizer_right_recursion_and_ambiguity(text):
    for prune in (True, False):
        rr = EarleyEngine(parse_ebnf(RIGHT_REC), prune=prune)
        assert rr.recognizes(text.encode()) == (re.fullmatch("a*b?", text) is not None)
        am = EarleyEngine(parse_ebnf(AMBIG), prune=prune)
        assert am.recognizes(text.encode()) == (re.fullmatch("(a|ab)*", text) is not None)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(PATTERNS), st.text(alphabet=ALPHABET, max_size=6))
def test_regex_grammar_matches_re(pattern, text):
    eng = EarleyEngine(regex_grammar(pattern))
    assert eng.recognizes(text.encode()) == (re.fullmatch(pattern, text, flags=re.ASCII) is not None)


def test_leo_and_pruning_keep_right_recursion_shallow():
    g = parse_ebnf('root ::= "a" root | "b"')
    pruned, full = EarleyEngine(g, prune=True), EarleyEngine(g, prune=False)
    cp, cf = pruned.initial(), full.initial()
    depths = []
    for _ in range(200):
        cp, cf = pruned.step(cp, ord("a")), full.step(cf, ord("a"))
        depths.append(len(cp))
    assert max(depths) <= 3 and len(cf) == 201
    assert pruned.live_items(cp) < full.live_items(cf) / 20
    assert pruned.can_terminate(pruned.step(cp, ord("b"))) and full.can_terminate(full.step(cf, ord("b")))


def test_pruned_chart_repeats_so_cache_keys_repeat():
    g = parse_ebnf('root ::= "[" (/[0-9]+/ ("," /[0-9]+/)*)? "]"')
    eng = EarleyEngine(g, prune=True)
    c1 = eng.accept_bytes(eng.initial(), b"[1,2")
    c2 = eng.accept_bytes(eng.initial(), b"[1,2,3,4,5,6")
    assert eng.chart_key(c1) == eng.chart_key(c2)
    unpruned = EarleyEngine(g, prune=False)
    u1 = unpruned.accept_bytes(unpruned.initial(), b"[1,2")
    u2 = unpruned.accept_bytes(unpruned.initial(), b"[1,2,3,4,5,6")
    assert unpruned.chart_key(u1) != unpruned.chart_key(u2)


@pytest.mark.parametrize("text,match", [
    ("root ::= missing", "undefined rule"),
    ("root ::= 'a'\nroot ::= 'b'", "defined twice"),
    ("root ::= ('a'", "missing"),
    ("root = 'a'", "unexpected|expected"),
    ("root ::= /[a-z/", "regex|unexpected"),
    ("root ::= x\nx ::= 'a' x", "accepts no string"),
])
def test_ebnf_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_ebnf(text)


def test_ebnf_features():
    g = parse_ebnf("""
        # a comment
        root ::= item{2,3} tail? ;
        item ::= [a-c] | /x+/
        tail ::= "\\n" 'end' | "\\u00e9"
    """)
    eng = EarleyEngine(g)
    for ok in [b"ab", b"axxc", b"abc\nend", "ab\u00e9".encode()]:
        assert eng.recognizes(ok), ok
    for bad in [b"a", b"abca", b"ab\n", b"ad"]:
        assert not eng.recognizes(bad), bad
