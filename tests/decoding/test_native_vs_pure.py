"""The compiled core (``rayml.decoding._zapcore``) against the pure-Python engine.

Token sequences are sampled under our masks (as ``rayml bench zapformat`` does, without the peers)
and replayed by the compiled engine (``MatcherConfig()``) and the pure one
(``MatcherConfig(native=False)``), each from a compile with every cache cleared, two queries per
grammar (cold, then warm on the same compiled grammar), plus a query with a wrong token in the
middle: every mask must be bit-identical and every accept equal. The default run is small (a few
schemas of ``BENCH_SUITE`` on Mistral 32k, short queries); ``RAYML_FULL_NATIVE=1`` replays every
step of the quick bench (24 schemas, 2 queries of up to 120 tokens) on both shipped vocabularies.
The fallback tests run ``rayml.decoding`` in a child interpreter where the extension cannot be
imported."""

import os
import subprocess
import sys

import numpy as np
import pytest

from _timing import limit
from rayml import runtime
from rayml.decoding import (GrammarMatcher, MatcherConfig, allocate_token_bitmask, compile_grammar, native,
                               schema_grammar)
from rayml.decoding.json_schema import clear_caches
from rayml.experiments import zapformat as zf

FULL = os.environ.get("RAYML_FULL_NATIVE") == "1"
needs_core = pytest.mark.skipif(not native.AVAILABLE, reason=f"compiled core not built: {native.REASON}")


def _replay(schema, index, config, sequences):
    """Masks (bytes) and accepts at every step, from a compile with every cache cleared."""
    clear_caches()
    index.clear_cache()
    cg = compile_grammar(schema_grammar(schema), index, config)
    bm = allocate_token_bitmask(1, index.vocab_size)
    masks, accepts = [], []
    for tokens in sequences:
        m = GrammarMatcher(cg)
        for tok in tokens:
            m.fill_next_token_bitmask(bm)
            masks.append(bm.tobytes())
            accepts.append(m.accept_token(tok))
    return masks, accepts


def _check(schema, vocab, index, seed, max_tokens, budget):
    sampler = compile_grammar(schema_grammar(schema), index, MatcherConfig(native=False))
    sequences = [zf.sample_tokens(sampler, vocab, seed + q, max_tokens, budget) for q in range(2)]
    sequences.append(sequences[0][:3] + [int(np.argmin([len(t) for t in vocab.tokens[:256]]))] + sequences[0][3:6])
    c_masks, c_acc = _replay(schema, index, MatcherConfig(), sequences)
    p_masks, p_acc = _replay(schema, index, MatcherConfig(native=False), sequences)
    assert c_acc == p_acc
    bad = [i for i, (a, b) in enumerate(zip(c_masks, p_masks)) if a != b]
    assert not bad, f"masks differ at steps {bad[:5]} of {len(c_masks)}"
    return len(c_masks)


@needs_core
@pytest.mark.parametrize("k", [0, 7, 13, 20])
def test_compiled_masks_equal_pure_tiny(k):
    vocab, index = zf.vocab_and_index("mistral-32k")
    assert _check(zf.BENCH_SUITE[k], vocab, index, seed=500 + k, max_tokens=25, budget=12) >= 10


@needs_core
def test_compiled_walks_equal_pure_walks():
    """The C trie walks against the numpy ones on every state of a few DFAs (as sets)."""
    from rayml.decoding.regex import compile_regex

    vocab, index = zf.vocab_and_index("mistral-32k")
    for pattern in ['"([^"\\\\]|\\\\.)*"', "[0-9]+(\\.[0-9]+)?", "true|false|null", "[a-z]{2,5}"]:
        dfa = compile_regex(pattern)
        for s in range(dfa.n_states):
            ids, exits = index.walk(dfa.trans, dfa.accept, s)
            words, c_exits = native.walk(index, dfa.trans, dfa.accept, s)
            assert np.array_equal(words, index.pack(ids)) and sorted(exits) == sorted(c_exits), (pattern, s)


@needs_core
def test_batch_fill_equals_row_fills():
    from rayml.decoding import fill_next_token_bitmasks

    vocab, index = zf.vocab_and_index("mistral-32k")
    cg = compile_grammar(schema_grammar(zf.BENCH_SUITE[1]), index)
    ms = [GrammarMatcher(cg) for _ in range(3)]
    ms[1].accept_token(vocab.tokens.index(b"{"))
    one, batch = allocate_token_bitmask(3, index.vocab_size), allocate_token_bitmask(3, index.vocab_size)
    for i, m in enumerate(ms):
        m.fill_next_token_bitmask(one, i)
    fill_next_token_bitmasks(ms, batch)
    assert np.array_equal(one, batch)
    with pytest.raises(ValueError, match="bitmask"):
        fill_next_token_bitmasks(ms, allocate_token_bitmask(2, index.vocab_size))


def test_bad_native_config():
    with pytest.raises(TypeError, match="native"):
        MatcherConfig(native="yes")


_FALLBACK = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rayml.decoding._zapcore":
            raise ImportError("blocked for the test")
sys.meta_path.insert(0, Block())
from rayml.decoding import native, compile_json_schema, byte_vocabulary, GrammarMatcher
cg = compile_json_schema({"type": "array", "items": {"type": "integer"}}, byte_vocabulary())
m = GrammarMatcher(cg)
print(native.AVAILABLE, cg.native, all(m.accept_token(b) for b in b"[1,22]"), m.can_terminate())
"""


def test_fallback_to_pure_engine_with_one_warning_line():
    env = {k: v for k, v in os.environ.items() if k != "RAYML_ZAPFORMAT_PURE"}
    out = subprocess.run([sys.executable, "-c", _FALLBACK], capture_output=True, text=True, env=env, timeout=limit(120))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "True"]
    lines = [ln for ln in out.stderr.splitlines() if "_zapcore" in ln]
    assert lines == [native.WARNING]


def test_pure_engine_forced_by_environment_is_silent():
    env = dict(os.environ, RAYML_ZAPFORMAT_PURE="1")
    code = "from rayml.decoding import native; print(native.AVAILABLE)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=limit(120))
    assert out.stdout.strip() == "False" and "_zapcore" not in out.stderr


@needs_core
@pytest.mark.skipif(not FULL, reason="every step of the quick bench on both vocabularies: RAYML_FULL_NATIVE=1")
@pytest.mark.parametrize("vocab_name", ["mistral-32k", "tekken-131k"])
def test_compiled_masks_equal_pure_full_bench(vocab_name):
    cfg = zf.BENCH_SIZES["quick"]
    vocab, index = zf.vocab_and_index(vocab_name)
    suite = zf.bench_suite(cfg["schemas"], cfg["suite_seed"])
    seeds = runtime.seeds(0, len(suite))
    steps = sum(_check(s, vocab, index, seed=seeds[k], max_tokens=cfg["max_tokens"], budget=cfg["budget"])
                for k, s in enumerate(suite))
    print(f"{vocab_name}: {steps} identical steps")


@needs_core
def test_compiled_literal_descent_equals_pure():
    vocab, index = zf.vocab_and_index("mistral-32k")
    for rest in [b'"name":', b"true", b"null", b"e", b'"', b"\xe2\x82\xac", b"zzzzqqq", b'":{"a":[1,2]}']:
        ids, node = index.literal(rest)
        words, c_node = native.literal(index, rest)
        assert np.array_equal(words, index.pack(ids)) and node == c_node, rest


@needs_core
def test_compiled_literal_descent_root_table():
    """The descent's first step reads the root's child of a byte from a table (no sibling scan):
    bytes that start no token, the first and last children, and tokens ending at depth 1."""
    from rayml.decoding import byte_vocabulary
    from rayml.decoding.matcher import TokenIndex

    vocab = byte_vocabulary([b"ab", b"ac", b"b", b"ba", b"\x00x", b"\xff", b"\xffz", b"zz"])
    index = TokenIndex(vocab)
    for rest in [b"a", b"ab", b"abc", b"b", b"ba", b"q", b"qa", b"\x00", b"\x00x", b"\xff", b"\xffz", b"z", b"zzz"]:
        ids, node = index.literal(rest)
        words, c_node = native.literal(index, rest)
        assert np.array_equal(words, index.pack(ids)) and node == c_node, rest


@needs_core
def test_fresh_string_counters_share_the_precomputed_walk_key():
    """A compile makes new ``Counter`` objects; ``share_walk_key`` gives each JSON string counter the
    precomputed key object (equal to the one it would compute), so ``count_base`` returns the
    precomputed walks; a counter of another character DFA keeps computing its own key."""
    vocab, index = zf.vocab_and_index("mistral-32k")
    clear_caches()
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 7}, "b": {"type": "string"},
                                                "c": {"type": "string", "pattern": "^[xy]+$"}},
              "required": ["a", "b", "c"], "additionalProperties": False}
    cg = compile_grammar(schema_grammar(schema), index)
    counters = [t.counter for t in cg.grammar.terminals if getattr(t, "counter", None) is not None]
    assert counters
    shared = 0
    for c in counters:
        own = (c.char.key(), c.local.tobytes())
        index.share_walk_key(c)
        if "walk_key" in c.__dict__:
            shared += 1
            assert c.walk_key == own and any(c.walk_key is k for k in index._pre_walk_keys)
            for i in range(c.w):
                assert index.count_base(c, i, native=True) is index._count_pre[own + (i, True)]
        else:
            assert all(k != own for k in index._pre_walk_keys)
    assert shared >= 1


@needs_core
def test_compiled_engine_memory_is_counted_and_pickling_is_refused():
    import pickle

    from rayml.decoding.logits import compiled_nbytes

    vocab, index = zf.vocab_and_index("bytes")
    cg = compile_grammar(schema_grammar(zf.BENCH_SUITE[3]), index)
    before = cg.engine.native_nbytes()
    m = GrammarMatcher(cg)
    for b in b'{"':
        m.fill_next_token_bitmask(allocate_token_bitmask(1, index.vocab_size))
        assert m.accept_token(b)
    assert cg.engine.native_nbytes() > before > 0 and compiled_nbytes(cg) > cg.engine.native_nbytes()
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(cg)
    idx2 = pickle.loads(pickle.dumps(index))  # the vocabulary index still pickles (its C trie is rebuilt)
    words, _ = native.literal(idx2, b"ab")
    assert np.array_equal(words, native.literal(index, b"ab")[0])


@needs_core
def test_precomputed_string_walks_equal_pure_walks_and_survive_clear_cache():
    from rayml.decoding import byte_vocabulary
    from rayml.decoding.json_schema import string_counters
    from rayml.decoding.matcher import TokenIndex

    vocab = byte_vocabulary([b'ab"', b'\\u00', b'\\ud83d', b'"}', b'\xc3\xa9x', b'\\n"', b'xyz'])
    index = TokenIndex(vocab)
    counters = string_counters()
    assert len(index._count_pre) == sum(c.w for c in counters)
    for c in counters:
        for i in range(c.w):
            pre = index.count_base(c, i, native=True)
            pure = index.count_base(c, i, native=False)
            for need, room in [(0, 1), (0, 3), (2, 5), (0, pure.n_max + 2)]:
                a, b = pre.info(need, room, 7), pure.info(need, room, 7)
                assert np.array_equal(a.inside, b.inside) and a.exits == b.exits
    kept = dict(index._count_pre)
    index.clear_cache()
    assert index._count_pre == kept and all(not b._infos for b in kept.values())


def _same_partition(a, b) -> bool:
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@needs_core
def test_compiled_state_setup_equals_pure():
    """The per-state setup of a first visit in C (issue 44) on every terminal of a few bench schemas:
    horizon classes (the same partition as the numpy refinement) and the single-string check
    (``_literal_rest``); the bound cuts of counted walks are checked in the test above."""
    from rayml.decoding.matcher import _literal_rest

    vocab, index = zf.vocab_and_index("mistral-32k")
    for k in (0, 7, 13, 20):
        g = schema_grammar(zf.BENCH_SUITE[k])
        py, c = compile_grammar(g, index, MatcherConfig(native=False)), compile_grammar(g, index)
        for t, dfa in enumerate(g.terminals):
            if dfa.n_states > 400:
                continue  # the long bounded strings: counted walks, not horizon classes
            assert _same_partition(py.horizon_classes(t), c.horizon_classes(t)), (k, t)
            for s in range(dfa.n_states):
                assert native.core.literal_rest(dfa.trans, native._u8(dfa.accept), s) == _literal_rest(dfa, s), (k, t, s)
    with pytest.raises(ValueError, match="s in"):
        native.core.literal_rest(dfa.trans, native._u8(dfa.accept), dfa.n_states)


@needs_core
@pytest.mark.parametrize("vocab_name", ["mistral-32k", "tekken-131k"])
def test_precomputed_rooms_equal_the_cut_they_replace(vocab_name):
    """Session 10: the precomputed JSON string walks keep the inside bits of each room whose cut would
    touch more bits than the mask has words (``_CountBase.make_levels``); each row must equal the cut
    (``count_cut`` with no closing quote in range) and the tokens with ``key <= 2 room``."""
    from rayml.decoding.matcher import _set_bits

    vocab, index = zf.vocab_and_index(vocab_name)
    with_levels = [b for b in index._count_pre.values() if b.levels.size]
    assert with_levels  # the big walks (from between characters) have rooms worth a copy
    for b in with_levels:
        n = len(b.in_ids)
        for j, words in enumerate(b.levels):
            room = b.level_lo + j
            cut = int(np.searchsorted(b.in_key, 2 * room, side="right"))
            assert min(cut, n - cut) > index.n_words or 0 < j < len(b.levels) - 1
            ref = np.zeros(index.n_words, np.uint32)
            _set_bits(ref, b.in_ids[:cut])
            assert np.array_equal(words, ref), (room, cut)
            out = np.empty(index.n_words, np.uint32)
            native.core.count_cut(b.in_ids, b.in_key, b.all_words, b.close_n, b.close_ends, b.close_end_at,
                                  room + 1, room, out)
            assert np.array_equal(out, ref), room
