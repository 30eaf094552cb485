"""Token masks over a vocabulary: the compiled grammar, the matcher and its caches.

Follows the mask computation of ZapFormat / Formatron ("Earley-Driven Dynamic Pruning for
Efficient Structured Decoding", ICML 2025) and its kbnf engine, in this order:

1. **State cache** keyed on the (pruned) Earley chart: equal charts have equal masks. Dynamic
   pruning (``rayml.decoding.earley``) is what makes equal parser states have equal charts.
2. **Precomputed masks for regex states** (kbnf's eager regex cache): for every (terminal DFA,
   state) met, the tokens whose bytes all stay inside that terminal are found once and stored
   as a packed bitset; they are allowed whenever an item waits on that terminal in that state.
   The same pass records the **exit nodes**: vocabulary-trie nodes ``(p, node)`` where the
   terminal can end after ``p`` bytes of the tokens below ``node`` (in DFA state ``a``). Three
   ways to find them, all exact:

   * generic states: a vectorised numpy walk of the vocabulary trie, one level per byte depth,
     only below live nodes; states no token can tell apart (``horizon_classes``) share it;
   * states from which a single string remains (keys, enum values, ``true``...): a descent of
     the trie along that string (``TokenIndex.literal``), no walk;
   * counted strings (``quoted_repeat`` DFAs, ``Counter``: JSON strings with length bounds, one
     copy of the character DFA per count): one walk per character-DFA state counts the
     characters each token finishes (``TokenIndex.walk_counted``); the tokens allowed with
     ``k`` characters written are then a prefix of the tokens sorted by count, for any bounds.
     These walks depend only on the vocabulary and the character DFA, so they are cached on the
     ``TokenIndex`` and shared by every grammar (``TokenIndex.clear_cache`` empties it).

3. For each exit, the chart after the terminal ends (``EarleyEngine.exit_chart``) is stepped
   down the trie below the exit node, depth first, only into children whose byte the chart
   allows: shared prefixes are simulated once and a rejected prefix rules out its subtree (the
   **rejected-prefix cache**). The tokens found are cached by (exit chart, node): the exit chart
   is the same for every count inside a string, so this cache hits where the state cache
   cannot.
4. EOS is allowed iff the chart can terminate; special tokens never.

Ours, not kbnf's: the horizon classes, the counted-string walks, the literal descent and the
exit-node cache (engineering; each is checked against brute-force masks in the tests).

A token is allowed iff its bytes keep the text a prefix of a sentence (sound and complete; the
tests check it against brute force). Masks are int32 bitmasks ``[batch, ceil(V / 32)]`` with bit
``i % 32`` of word ``i // 32`` set when token ``i`` is allowed (the xgrammar / vLLM layout).

Assumed: the grammar has no useless rules (``GrammarBuilder.build`` removes them), so an item
that survives a byte always has a completion, which is what makes "stays inside the terminal"
sufficient for a token to be allowed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from rayml.decoding import native as _native
from rayml.decoding.earley import EarleyEngine
from rayml.decoding.native_earley import NativeEarleyEngine
from rayml.decoding.grammar import Grammar
from rayml.decoding.vocab import Vocabulary, token_matrix

__all__ = ["TokenIndex", "CompiledGrammar", "GrammarMatcher", "MatcherConfig", "allocate_token_bitmask",
           "apply_token_bitmask", "bitmask_to_bool", "bool_to_bitmask"]


def allocate_token_bitmask(batch: int, vocab_size: int) -> np.ndarray:
    """A zeroed int32 bitmask ``[batch, ceil(vocab_size / 32)]``."""
    if batch < 1 or vocab_size < 1:
        raise ValueError(f"batch and vocab_size must be >= 1, got {batch}, {vocab_size}")
    return np.zeros((batch, (vocab_size + 31) // 32), np.int32)


def bitmask_to_bool(bitmask: np.ndarray, vocab_size: int) -> np.ndarray:
    """Unpack an int32 bitmask (``[..., W]``) to ``bool[..., vocab_size]``."""
    u8 = np.ascontiguousarray(bitmask).view(np.uint8)
    return np.unpackbits(u8, axis=-1, bitorder="little")[..., :vocab_size].astype(bool)


def bool_to_bitmask(allowed: np.ndarray) -> np.ndarray:
    """Pack ``bool[..., V]`` to an int32 bitmask ``[..., ceil(V / 32)]``."""
    allowed = np.asarray(allowed, bool)
    v = allowed.shape[-1]
    pad = (-v) % 32
    if pad:
        allowed = np.concatenate([allowed, np.zeros(allowed.shape[:-1] + (pad,), bool)], axis=-1)
    return np.packbits(allowed, axis=-1, bitorder="little").view(np.int32)


def apply_token_bitmask(logits: np.ndarray, bitmask: np.ndarray) -> np.ndarray:
    """``logits`` with disallowed tokens set to ``-inf`` (``[batch, V]`` or ``[V]``)."""
    logits = np.array(logits, dtype=np.float64 if np.asarray(logits).dtype == np.float64 else np.float32)
    allowed = bitmask_to_bool(bitmask.reshape((-1, bitmask.shape[-1])), logits.shape[-1]).reshape(logits.shape)
    logits[~allowed] = -np.inf
    return logits


class TokenIndex:
    """The vocabulary's byte strings, indexed for vectorised masks.

    ``order`` sorts the non-special tokens by bytes (a flattened trie: tokens sharing a prefix
    are contiguous), ``first[b]`` is the slice of ``order`` whose first byte is ``b``; ``mat`` /
    ``lens`` are the padded bytes in that order.
    """

    def __init__(self, vocab: Vocabulary, vocab_size: int | None = None):
        if not isinstance(vocab, Vocabulary):
            raise TypeError(f"vocab must be a Vocabulary, got {type(vocab).__name__}")
        self.vocab = vocab
        self.vocab_size = int(vocab_size or vocab.size)
        if self.vocab_size < vocab.size:
            raise ValueError(f"vocab_size must be >= the vocabulary's {vocab.size} tokens, got {self.vocab_size}")
        self.n_words = (self.vocab_size + 31) // 32
        mat, lens = token_matrix(vocab)
        ok = lens > 0
        ok[list(vocab.special)] = False
        ids = np.flatnonzero(ok)
        keys = [vocab.tokens[i] for i in ids]
        srt = sorted(range(len(ids)), key=keys.__getitem__)
        self.order = ids[np.array(srt, dtype=np.int64)].astype(np.int64)
        self.mat = mat[self.order]
        self.lens = lens[self.order]
        fb = self.mat[:, 0]
        starts = np.searchsorted(fb, np.arange(257), side="left")
        self.first = [(int(starts[b]), int(starts[b + 1])) for b in range(256)]
        self.max_len = int(self.lens.max()) if len(self.lens) else 1
        self._build_trie()
        self.eos_words = np.zeros(self.n_words, np.uint32)
        for e in vocab.eos_ids:
            self.eos_words[e >> 5] |= np.uint32(1 << (e & 31))
        self.tokens = vocab.tokens
        self._count_cache: dict = {}
        self._count_pre: dict = {}
        self._pre_walk_keys: list = []  # the walk keys of precompute_strings' counters (share_walk_key)
        if _native.AVAILABLE:
            _native.trie_of(self)  # the compiled core's copy of the trie, built with the index
            self.precompute_strings()

    def __getstate__(self):
        # the compiled core's copy of the trie is a capsule: rebuilt on first use after unpickling
        state = self.__dict__.copy()
        state.pop("_native_trie", None)
        state.pop("_native_pre", None)
        state["_count_pre"] = {}  # a few MiB on a large vocabulary: the copy walks on first use
        return state

    def precompute_strings(self) -> None:
        """The compiled counted walks (``walk_counted``) of the JSON string character DFAs the
        schema compiler uses (``json_schema.string_counters``), from every local state, done once
        per vocabulary with the index (as xgrammar preprocesses a tokenizer once) instead of at
        the first visit of each string character state of every grammar. ``clear_cache`` keeps
        them and forgets only their grammar-dependent bound cuts."""
        from rayml.decoding.json_schema import string_counters

        keys = self._pre_walk_keys
        for counter in string_counters():
            if all(k != counter.walk_key for k in keys):
                keys.append(counter.walk_key)
            for i in range(counter.w):
                key = counter.walk_key + (i, True)
                if key not in self._count_pre:
                    base = self._count_pre[key] = self._native_count_base(counter, i)
                    base.make_levels()

    def share_walk_key(self, counter) -> None:
        """Give ``counter`` the ``walk_key`` of the precomputed string counter equal to it (the same
        bytes), so that ``count_base`` finds its walks without hashing the tens of KiB of a fresh
        key (each grammar compile makes new ``Counter`` objects). The key is equal either way."""
        if "walk_key" in counter.__dict__:
            return
        keys = self._pre_walk_keys
        if not keys:  # none precomputed (no compiled core)
            return
        same = _native.core.same_bytes  # the bytes compared in place: no copies of the tables
        local, char = np.ascontiguousarray(counter.local), counter.char
        for key in keys:
            if same(local, key[1]) and same(char.trans, key[0][0]) and same(np.ascontiguousarray(char.accept), key[0][1]):
                counter.__dict__["walk_key"] = key  # the cached_property's slot
                return

    def _native_count_base(self, counter, i: int) -> "_CountBase":
        ids, keys, words, closing = _native.walk_counted(self, counter.local, i)
        return _CountBase(self, ids, None, None, closing, native=True, sorted_keys=keys, packed=words)

    def _build_trie(self) -> None:
        """The byte trie of the sorted tokens, one level per depth: ``byte[d]``, the children
        range ``child_lo[d] / child_hi[d]`` of every node, the sorted-position range
        ``pos_lo[d] / pos_hi[d]`` it covers, and the tokens ending at each depth."""
        mat, lens = self.mat, self.lens
        n = len(lens)
        lcp = np.full(n, -1, np.int64)
        if n > 1:
            minlen = np.minimum(lens[1:], lens[:-1])
            neq = (mat[1:] != mat[:-1]) | (np.arange(mat.shape[1])[None, :] >= minlen[:, None])
            lcp[1:] = np.where(neq.any(axis=1), neq.argmax(axis=1), minlen)
        self._lcp = lcp  # common prefix with the previous sorted token (-1 for the first)
        self.t_byte, self.t_pos_lo, self.t_pos_hi = [None], [None], [None]
        self.t_end_node, self.t_end_tok = [None], [None]
        self.t_child_lo, self.t_child_hi = [None], [None]
        self.t_parent = [None, None]  # t_parent[d][m]: the depth d - 1 parent of node m (d >= 2)
        prev_node = None
        for d in range(1, self.max_len + 1):
            active = lens >= d
            new = active & (lcp < d)
            node_of = np.cumsum(new) - 1  # valid where active
            starts = np.flatnonzero(new)
            counts = np.bincount(node_of[active], minlength=len(starts))
            self.t_byte.append(mat[starts, d - 1].astype(np.int64))
            self.t_pos_lo.append(starts)
            self.t_pos_hi.append(starts + counts)
            ends = np.flatnonzero(lens == d)
            self.t_end_node.append(node_of[ends])
            self.t_end_tok.append(self.order[ends])
            if prev_node is not None:
                parent = prev_node[starts]
                self.t_parent.append(parent)
                lo = np.searchsorted(parent, np.arange(len(self.t_byte[d - 1])), side="left")
                hi = np.searchsorted(parent, np.arange(len(self.t_byte[d - 1])), side="right")
                self.t_child_lo.append(lo)
                self.t_child_hi.append(hi)
            prev_node = node_of
        self.t_child_lo.append(np.zeros(len(self.t_byte[-1]), np.int64))
        self.t_child_hi.append(np.zeros(len(self.t_byte[-1]), np.int64))
        # t_end_tok[d][t_end_lo[d][m]:t_end_lo[d][m + 1]]: the tokens ending at node m of depth d
        self.t_end_lo = [None] + [np.searchsorted(self.t_end_node[d], np.arange(len(self.t_byte[d]) + 1))
                                  for d in range(1, self.max_len + 1)]

    def ends(self, d: int, m: int) -> np.ndarray:
        """Token ids whose bytes end at node ``m`` of depth ``d``."""
        lo, hi = self.t_end_lo[d][m], self.t_end_lo[d][m + 1]
        return self.t_end_tok[d][lo:hi]

    def node(self, prefix: bytes):
        """The trie node ``(depth, m)`` of ``prefix``, or None when no token starts with it."""
        m = -1
        for d, b in enumerate(prefix, 1):
            if d > self.max_len:
                return None
            if d == 1:
                lo, hi = 0, len(self.t_byte[1])
            else:
                lo, hi = int(self.t_child_lo[d - 1][m]), int(self.t_child_hi[d - 1][m])
            seg = self.t_byte[d][lo:hi]
            j = int(np.searchsorted(seg, b))
            if j == len(seg) or seg[j] != b:
                return None
            m = lo + j
        return len(prefix), m

    def _children(self, d: int, alive: np.ndarray):
        """The level-``d + 1`` children of the level-``d`` nodes ``alive``, and for each child
        the index (into ``alive``) of its parent."""
        lo, hi = self.t_child_lo[d][alive], self.t_child_hi[d][alive]
        cnt = hi - lo
        total = int(cnt.sum())
        if not total:
            return None, None
        starts = np.cumsum(cnt) - cnt
        child = np.arange(total) + np.repeat(lo - starts, cnt)
        return child, np.repeat(np.arange(len(alive)), cnt)

    def count_base(self, counter, i: int, native: bool = False) -> "_CountBase":
        """The counted walk (``walk_counted``) of a string character DFA from local state ``i``,
        arranged for any bounds. It depends only on the vocabulary and the character DFA (not on
        the grammar), so it is cached here, keyed by the character DFA's tables, and shared by
        every grammar compiled for this index (JSON strings of any schema share one character
        DFA); ``clear_cache`` forgets it. ``native``: walked by the compiled core (cached apart,
        so that the pure engine stays an independent reference)."""
        key = counter.walk_key + (i, native)
        base = self._count_pre.get(key) or self._count_cache.get(key)
        if base is None:
            if native:  # already sorted by key and packed by the compiled core
                base = self._native_count_base(counter, i)
            else:
                (ids, n, at0), closing = self.walk_counted(counter.local, i)
                base = _CountBase(self, ids, n, at0, closing)
            self._count_cache[key] = base
        return base

    def literal(self, rest: bytes):
        """What ``walk`` finds for a DFA state from which only ``rest`` is accepted, without
        walking the vocabulary: the tokens that stay inside (the non-empty prefixes of ``rest``)
        and the exit node ``(len(rest), node)`` of the tokens that start with ``rest`` and go on
        (None if there are none)."""
        inside = []
        m = -1
        for d in range(1, len(rest) + 1):
            hit = self.node(rest[:d]) if d == 1 else self._child(d, m, rest[d - 1])
            if hit is None:
                break
            m = hit[1]
            inside.append(self.ends(d, m))
        else:
            d = len(rest)
            has_kids = d < self.max_len and self.t_child_hi[d][m] > self.t_child_lo[d][m]
            ids = np.concatenate(inside) if inside else np.zeros(0, np.int64)
            return ids, ((d, m) if has_kids else None)
        return (np.concatenate(inside) if inside else np.zeros(0, np.int64)), None

    def _child(self, d: int, m: int, b: int):
        """The child of node ``m`` (depth ``d - 1``) with byte ``b``: ``(d, child)`` or None."""
        if d > self.max_len:
            return None
        lo, hi = int(self.t_child_lo[d - 1][m]), int(self.t_child_hi[d - 1][m])
        seg = self.t_byte[d][lo:hi]
        j = int(np.searchsorted(seg, b))
        if j == len(seg) or seg[j] != b:
            return None
        return d, lo + j

    def clear_cache(self) -> None:
        """Forget the per-vocabulary walks cached by ``count_base`` (those ``precompute_strings``
        made at index build are kept, without their per-bounds cuts)."""
        self._count_cache.clear()
        for base in self._count_pre.values():
            base._infos.clear()

    def pack(self, ids: np.ndarray, native: bool = False) -> np.ndarray:
        """Packed uint32 mask words with the bits of token ``ids`` set (``native``: by the
        compiled core)."""
        words = np.zeros(self.n_words, np.uint32)
        if len(ids):
            _set_bits(words, ids, native)
        return words

    def walk(self, trans: np.ndarray, accept: np.ndarray, s: int):
        """Run every token through a DFA from state ``s`` over the trie (vectorised per depth).

        Returns ``(inside token ids, exits)``: the tokens whose bytes all keep the DFA alive,
        and ``[(depth p, node, state a)]`` where the DFA accepts after ``p`` bytes of the
        tokens under ``node`` (only tokens longer than ``p`` matter there)."""
        inside, exits = [], []
        st = trans[s, self.t_byte[1]]
        alive = np.flatnonzero(st >= 0)
        st = st[alive]
        d = 1
        while alive.size:
            end_node = self.t_end_node[d]
            if end_node.size:
                mark = np.zeros(len(self.t_byte[d]), bool)
                mark[alive] = True
                inside.append(self.t_end_tok[d][mark[end_node]])
            acc = accept[st]
            if acc.any():
                exits.extend(zip([d] * int(acc.sum()), alive[acc].tolist(), st[acc].tolist()))
            if d == self.max_len:
                break
            child, par = self._children(d, alive)
            if child is None:
                break
            nst = trans[st[par], self.t_byte[d + 1][child]]
            keep = nst >= 0
            alive, st = child[keep], nst[keep]
            d += 1
        ids = np.concatenate(inside) if inside else np.zeros(0, np.int64)
        return ids, exits

    def walk_counted(self, local: np.ndarray, i: int):
        """Run every token through a ``Counter``'s local table from local state ``i``, counting
        finished characters (see ``rayml.decoding.regex.Counter``; value ``w`` = a character
        finished, ``w + 1`` = the closing quote).

        Returns ``(inside, closing)``: ``inside = (ids, n, at_start)``, the tokens whose bytes
        stay inside the string, their number of finished characters and whether they end
        between characters; ``closing = [(depth p, node, n)]``: the closing quote is byte ``p``
        of the tokens under ``node``, after ``n`` finished characters.

        Whole trie levels are processed while most nodes are alive (string characters keep
        almost every token alive; the children of a dead node read an extra row of -1, so there
        is no compaction), then only the alive nodes and their children."""
        w = local.shape[0]
        out = ([], [], [], [])
        local2 = np.vstack([local, np.full((1, local.shape[1]), -1, local.dtype)])
        raw = local2[i, self.t_byte[1]].astype(np.int64)
        npar = np.zeros(len(raw), np.int64)
        d = 1
        while True:
            st, n = self._count_level(d, raw, npar, w, None, out)
            live = st >= 0
            n_live = int(np.count_nonzero(live))
            if d == self.max_len or not n_live:
                return self._count_result(out)
            if 4 * n_live < len(st):
                break
            par_d = self.t_parent[d + 1]
            raw = local2[st[par_d], self.t_byte[d + 1]].astype(np.int64)
            npar = n[par_d]
            d += 1
        alive = np.flatnonzero(live)  # few alive: go on with the alive nodes only
        st_par, n_par = st[alive], n[alive]
        while True:
            child, par = self._children(d, alive)
            if child is None:
                break
            d += 1
            st, n = self._count_level(d, local[st_par[par], self.t_byte[d][child]].astype(np.int64), n_par[par], w,
                                      child, out)
            keep = st >= 0
            alive, st_par, n_par = child[keep], st[keep], n[keep]
            if not alive.size or d == self.max_len:
                break
        return self._count_result(out)

    def _count_level(self, d: int, raw, npar, w: int, nodes, out):
        """One level of ``walk_counted``: ``raw`` local-table values (-1 dead) at the trie
        ``nodes`` of depth ``d`` (None: all of them), ``npar`` their parents' counts; records the
        closing quotes and the tokens ending here in ``out``; returns the nodes' local states
        (-1 dead or closed) and counts."""
        ids, ns, at0, closing = out
        close = raw == w + 1
        if close.any():
            at = np.flatnonzero(close) if nodes is None else nodes[close]
            closing.extend(zip([d] * len(at), at.tolist(), npar[close].tolist()))
        done = raw == w
        n = npar + done
        st = np.where(done, 0, raw)
        st[close] = -1
        en = self.t_end_node[d]
        if en.size:
            toks = self.t_end_tok[d]
            if nodes is not None:  # the ending tokens whose node is among ``nodes``
                where = np.full(len(self.t_byte[d]), -1, np.int64)
                where[nodes] = np.arange(len(nodes))
                en = where[en]
                valid = en >= 0
                en, toks = en[valid], toks[valid]
            se = st[en]
            sel = se >= 0
            ids.append(toks[sel])
            ns.append(n[en[sel]])
            at0.append(se[sel] == 0)
        return st, n

    @staticmethod
    def _count_result(out):
        ids, ns, at0, closing = out
        cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))  # noqa: E731
        return (cat(ids, np.int64), cat(ns, np.int64), cat(at0, bool)), closing

    def candidates(self, live: np.ndarray) -> np.ndarray:
        """Positions (in ``order``) of the tokens whose first byte is live (``bool[256]``)."""
        parts = [np.arange(*self.first[b]) for b in np.flatnonzero(live) if self.first[b][0] < self.first[b][1]]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@dataclass(frozen=True)
class MatcherConfig:
    """Switches of the ZapFormat engine (for ablations).

    Attributes:
        prune: dynamic pruning of the Earley chart.
        state_cache: masks cached by chart.
        cache_size: entries of the state cache (LRU).
        memo: interned charts with the results of steps, exits and token accepts kept on their
            top Earley set (``EarleyEngine(memo=True)``); ``False`` is the reference engine the
            fast one is tested against (same masks, every result recomputed).
        native: use the compiled core (``rayml.decoding.native``: vocabulary walks and bitmask
            fill in C) when it was built; ``False`` is the pure-Python engine (the reference the
            compiled core is tested against, and the fallback where no compiler was present).
    """

    prune: bool = True
    state_cache: bool = True
    cache_size: int = 4096
    memo: bool = True
    native: bool = True

    def __post_init__(self):
        if not isinstance(self.prune, bool):
            raise TypeError(f"prune must be a bool, got {self.prune!r}")
        if not isinstance(self.memo, bool):
            raise TypeError(f"memo must be a bool, got {self.memo!r}")
        if not isinstance(self.native, bool):
            raise TypeError(f"native must be a bool, got {self.native!r}")
        if not isinstance(self.state_cache, bool):
            raise TypeError(f"state_cache must be a bool, got {self.state_cache!r}")
        if not isinstance(self.cache_size, int) or self.cache_size < 1:
            raise ValueError(f"cache_size must be an int >= 1, got {self.cache_size!r}")


def _literal_rest(dfa, s: int, single=None):
    """``(rest, a)`` when the only string DFA ``dfa`` accepts from state ``s`` is ``rest``
    (``a`` the accepting state after it, which has no transitions), else None. ``single``
    (``_SingleOut(dfa)``) keeps the per-state answers between calls."""
    if single is None:
        single = _SingleOut(dfa)
    acc, has_out = dfa.accept, dfa.has_out
    out = bytearray()
    while not acc[s]:
        b, nxt = single(s)
        if b < 0 or len(out) >= 1024:
            return None
        out.append(b)
        s = nxt
    if has_out[s] or not out:
        return None
    return bytes(out), int(s)


class _SingleOut:
    """Per state of ``dfa``, computed on first use (a DFA of a long bounded string has tens of
    thousands of states, of which a grammar visits few): ``(byte, next state)`` of its only live
    transition, or ``(-1, -1)`` if it has none or several."""

    def __init__(self, dfa):
        self.trans = dfa.trans
        self.rows: dict = {}

    def __call__(self, s: int):
        got = self.rows.get(s)
        if got is None:
            row = self.trans[s]
            live = np.flatnonzero(row >= 0)
            got = self.rows[s] = (int(live[0]), int(row[live[0]])) if len(live) == 1 else (-1, -1)
        return got


def _set_bits(words: np.ndarray, ids: np.ndarray, native: bool = False) -> None:
    """Set the bits of token ``ids`` in the packed uint32 ``words`` (in place; ``native``: by the
    compiled core)."""
    if native:
        _native.set_bits(words, ids)
    elif len(ids) < 4096:
        w, v = _sparse(ids)
        words[w] |= v
    else:
        flags = np.zeros(len(words) * 32, bool)
        flags[ids] = True
        words |= np.packbits(flags, bitorder="little").view(np.uint32)


def _sparse(ids: np.ndarray):
    """``(word indices, uint32 values)`` with the bits of ``ids`` (indices unique, sorted)."""
    ids = np.sort(ids)
    w = ids >> 5
    bits = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
    if len(w) < 2:
        return w, bits
    first = np.flatnonzero(np.concatenate(([True], w[1:] != w[:-1])))
    return w[first], np.bitwise_or.reduceat(bits, first)


_NONE = np.zeros(0, np.int64)
_MISSING = object()


def _combine(dense: list, sparse: list, extra: list, n_words: int, native: bool = False) -> np.ndarray:
    """OR of packed words, (word, bits) pairs and token ids; a single packed array is returned
    as is (masks are never written to: the caches hand out the same arrays)."""
    if len(dense) == 1 and not (sparse or extra):
        return dense[0]
    if native and len(dense) > 1:  # one C call ORs them all
        words = np.empty(n_words, np.uint32)
        _native.core.or_into(words, dense)
    else:
        words = dense[0].copy() if dense else np.zeros(n_words, np.uint32)
        for x in dense[1:]:
            words |= x
    for w, v in sparse:
        words[w] |= v
    if extra:
        _set_bits(words, np.concatenate(extra), native)
    return words


class _TerminalInfo:
    __slots__ = ("inside", "exits", "pre")

    def __init__(self, inside, exits):
        self.inside = inside  # uint32 packed words
        self.exits = exits  # {a: [(depth p, trie node)]}: the DFA accepts in state a after p bytes
        self.pre = None  # compiled core: {a: int64 preorder ids of those trie nodes}, made on first use


class _CountBase:
    """The counted walk of a string's character loop from one local state (``TokenIndex.
    walk_counted``), arranged for any bounds: inside tokens sorted by ``2 n + (not between
    characters)`` so that the allowed ones are a prefix (with the packed words of all of them,
    so that a bound that excludes few tokens clears those few bits); the closing-quote nodes
    with their counts and the tokens that end right after the quote."""

    def __init__(self, index: TokenIndex, ids, n, at0, closing, native: bool = False, sorted_keys=None,
                 packed=None):
        self.index = index
        self.native = native
        self._infos: OrderedDict = OrderedDict()
        if sorted_keys is not None:  # the compiled core's walk: ids sorted by key, bits packed
            self.in_ids, self.in_key, self.all_words = ids, sorted_keys, packed
            self.n_max = int(sorted_keys[-1]) // 2 if sorted_keys.size else 0
        else:
            key = 2 * n + (~at0)
            o = np.argsort(key, kind="stable")
            self.in_ids, self.in_key = ids[o], key[o]
            self.all_words = index.pack(self.in_ids)
            self.n_max = int(n.max()) if n.size else 0
        closing = sorted(closing, key=lambda c: c[2])  # by count, so a bound selects a slice
        self.close_n = np.array([c[2] for c in closing], np.int64)
        ends, nodes = [], []
        for p_, m, _ in closing:
            lo, hi = index.t_end_lo[p_][m], index.t_end_lo[p_][m + 1]
            if hi > lo:
                ends.append(index.t_end_tok[p_][lo:hi])
            ends_n = hi - lo
            nodes.append((p_, m, ends_n))
        self.close_ends = np.concatenate(ends) if ends else np.zeros(0, np.int64)
        self.close_end_at = np.cumsum([0] + [e for _, _, e in nodes]).astype(np.int64)
        ml, clo, chi = index.max_len, index.t_child_lo, index.t_child_hi
        self.close_nodes = [(p_, m) if p_ < ml and chi[p_][m] > clo[p_][m] else None for p_, m, _ in nodes]
        if closing:
            self.n_max = max(self.n_max, int(self.close_n[-1]))

    levels = np.zeros((0, 0), np.uint32)  # no precomputed rooms (make_levels)
    level_lo = 0

    def make_levels(self) -> None:
        """Precompute the inside bits of each room whose cut would set or clear more bits than the
        mask has words (``levels[r - level_lo]``: the tokens with ``key <= 2 r``), so that the
        compiled core's cut for such a room is one copy; done for the JSON string walks with the
        index (``TokenIndex.precompute_strings``), like the walks themselves."""
        n, nw = len(self.in_ids), self.index.n_words
        cuts = np.searchsorted(self.in_key, 2 * np.arange(self.n_max + 2), side="right")
        big = np.flatnonzero(np.minimum(cuts, n - cuts) > nw)
        if big.size:
            lo, hi = int(big[0]), int(big[-1]) + 1
            self.levels = np.stack([self.index.pack(self.in_ids[:cuts[r]], True) for r in range(lo, hi)])
            self.level_lo = lo

    def info(self, need: int, room: int, final: int) -> "_TerminalInfo":
        """Allowed with ``need`` more characters required before the quote and ``room`` more
        allowed (``room > n_max``: unbounded); the exits lead to DFA state ``final``. The
        bitset and exit nodes depend only on ``(need, room)`` and are kept (LRU) for every
        terminal and grammar that uses this character DFA."""
        hit = self._infos.get((need, room))
        if hit is None:
            hit = self._infos[(need, room)] = self._compute(need, room)
            if len(self._infos) > 256:
                self._infos.popitem(last=False)
        else:
            self._infos.move_to_end((need, room))
        words, nodes = hit
        return _TerminalInfo(words, {final: nodes} if nodes else {})

    def _compute(self, need: int, room: int):
        if self.native:  # the cut, the bits and the closing slice in one C call
            words = np.empty(self.index.n_words, np.uint32)
            a, b = _native.core.count_cut(self.in_ids, self.in_key, self.all_words, self.close_n, self.close_ends,
                                          self.close_end_at, int(need), int(room), words)
            return words, [x for x in self.close_nodes[a:b] if x is not None]
        cut = int(np.searchsorted(self.in_key, 2 * room, side="right"))
        idx = self.index
        if len(self.in_ids) - cut < cut:  # clear the few excluded bits
            words = self.all_words.copy()
            drop = self.in_ids[cut:]
            if drop.size and self.native:
                _native.clear_bits(words, drop)
            elif drop.size:
                off = np.zeros_like(words)
                _set_bits(off, drop)
                words &= ~off
        else:
            words = idx.pack(self.in_ids[:cut], self.native)
        a = int(np.searchsorted(self.close_n, need, side="left"))
        b = int(np.searchsorted(self.close_n, room, side="right"))
        if b > a:
            ends = self.close_ends[self.close_end_at[a]:self.close_end_at[b]]
            if ends.size:
                _set_bits(words, ends, self.native)
        return words, [x for x in self.close_nodes[a:b] if x is not None]


class CompiledGrammar:
    """A grammar bound to a token index; holds the caches shared by its matchers.

    Args:
        grammar: the normalised grammar.
        index: the vocabulary's ``TokenIndex``.
        config: the engine switches.
    """

    def __init__(self, grammar: Grammar, index: TokenIndex, config: MatcherConfig = MatcherConfig()):
        if not isinstance(index, TokenIndex):
            raise TypeError(f"index must be a TokenIndex, got {type(index).__name__}")
        self.grammar = grammar
        self.index = index
        self.config = config
        self.native = bool(config.native and _native.AVAILABLE)  # the compiled core runs the walks
        # the Earley engine: in C over integer state ids (compiled core, memo) or in Python
        self.engine = (NativeEarleyEngine(grammar, prune=config.prune) if self.native and config.memo
                       else EarleyEngine(grammar, prune=config.prune, memo=config.memo))
        self._terminal_info: dict = {}
        self._count_bases: dict = {}
        self._classes: dict = {}
        self._single: dict = {}
        self.mask_cache: OrderedDict = OrderedDict()
        self.exit_cache: OrderedDict = OrderedDict()
        self.contrib_cache: OrderedDict = OrderedDict()
        self._stats = {"cache_hits": 0, "cache_misses": 0, "simulated_bytes": 0, "terminal_infos": 0, "exit_hits": 0}
        # the token-accept fast path (GrammarMatcher.accept_token): the C engine's memoised accept
        # and the ids it applies to (real tokens, neither special nor EOS)
        vocab = index.vocab
        self.n_ids = index.vocab_size
        self.token_bytes = vocab.tokens
        self.fast_accept = self.engine._e.accept_token if isinstance(self.engine, NativeEarleyEngine) else None
        # the C engine's exit charts called directly (-1: none), for the contribution keys and exits
        self._exit_c = self.engine._e.exit_chart if self.fast_accept is not None else None
        self.n_plain, self.special = vocab.size, vocab.special | frozenset(vocab.eos_ids)
        # compiled core with the state cache: a state's mask after a cache miss is made in one C call
        # (Engine.mask_into: the terminal infos, the contribution cache and the combination in C tables
        # keyed by integer ids); the Python path below stays for the other configurations
        # (fourth round) the state cache is in C too (an LRU of cache_size masks keyed by the state id):
        # a fill is one C call, hit or miss (Engine.fill_row), and compute_mask copies from it
        # (Engine.mask_copy); the tests turn all three off to compare with the Python orchestration
        self._mask_into = self._fill_row = self._mask_copy = None
        if self.fast_accept is not None and config.state_cache:
            _native.trie_of(index)
            counters = [(d.counter.w, d.counter.lo, -1 if d.counter.hi is None else d.counter.hi)
                        if d.counter is not None else (0, 0, -1) for d in grammar.terminals]
            for d in grammar.terminals:  # the JSON string counters adopt the precomputed walk keys here, at
                if d.counter is not None:  # compile time (a few us each), not in the first fill that needs them
                    index.share_walk_key(d.counter)
            e = self.engine._e
            e.set_masks(index._native_trie, index.eos_words, counters, config.cache_size)
            self._mask_into, self._fill_row, self._mask_copy = e.mask_into, e.fill_row, e.mask_copy

    @property
    def stats(self) -> dict:
        """Counters of the caches: state-cache hits and misses, bytes the exit walks stepped, terminal
        infos made (Python orchestration) and exit-cache hits; on the compiled core with the state cache
        the first three include the C state cache's (``Engine.mask_stats``)."""
        st = dict(self._stats)
        if self._fill_row is not None:
            hits, misses, sim = self.engine._e.mask_stats()
            st["cache_hits"] += hits
            st["cache_misses"] += misses
            st["simulated_bytes"] += sim
        return st

    # -- per (terminal, state) precomputation ---------------------------------------------
    def horizon_classes(self, t: int) -> np.ndarray:
        """Classes of terminal ``t``'s DFA states that no token can tell apart: Moore partition
        refinement run for as many rounds as the longest token has bytes, so two states share a
        class iff every byte string up to that length leads both to the same acceptance and
        deadness. Their token walks (inside set and exits) are then equal, and one walk serves the
        whole class (Assumed: kbnf keys its regex cache on the exact DFA state; this coarsening is
        ours and exact for tokens no longer than the horizon, which all are)."""
        cls = self._classes.get(t)
        if cls is None and self.native:  # the same refinement in C (class ids in first-appearance order)
            dfa = self.grammar.terminals[t]
            cls = np.empty(dfa.trans.shape[0], np.int64)
            _native.core.horizon_classes(dfa.trans, _native._u8(dfa.accept), int(self.index.max_len), cls)
            self._classes[t] = cls
        if cls is None:
            from rayml.decoding.regex import _row_ids, byte_class_columns

            dfa = self.grammar.terminals[t]
            sub = dfa.trans[:, byte_class_columns(dfa.trans)]
            valid = sub >= 0
            safe = np.where(valid, sub, 0)
            cls = dfa.accept.astype(np.int64)
            for _ in range(self.index.max_len):
                new = _row_ids(np.concatenate([cls[:, None], np.where(valid, cls[safe], -1)], axis=1))
                if new.max() == cls.max() and len(np.unique(cls)) == int(new.max()) + 1:
                    cls = new
                    break
                cls = new
            self._classes[t] = cls
        return cls

    def _count_base(self, counter, i: int) -> _CountBase:
        """The counted walk of a ``quoted_repeat`` terminal's character loop from local state
        ``i`` (shared by every count; ``TokenIndex.count_base``)."""
        key = (id(counter), i)
        base = self._count_bases.get(key)
        if base is None:
            base = self._count_bases[key] = self.index.count_base(counter, i, self.native)
        return base

    def _counted_info(self, t: int, dfa, k: int, i: int) -> _TerminalInfo:
        """Terminal info of state (``k`` characters done, local ``i``) of a ``quoted_repeat``
        terminal from its counted walk: a token that stays inside the string with ``n`` more
        characters is allowed iff ``k + n < hi``, or ``k + n == hi`` and it ends between
        characters; a closing quote after ``n`` more characters is allowed iff
        ``lo <= k + n <= hi`` (tokens ending there are inside, longer ones exit to the final
        state). States with the same clamped bounds share the result."""
        c = dfa.counter
        base = self._count_base(c, i)
        cap = base.n_max + 1
        room = cap if c.hi is None else min(c.hi - k, cap)
        need = min(max(c.lo - k, 0), cap)
        key = (t, "count", i, room, need)
        info = self._terminal_info.get(key)
        if info is None:
            info = self._terminal_info[key] = base.info(need, room, dfa.n_states - 1)
            self._stats["terminal_infos"] += 1
        return info

    def terminal_info(self, t: int, s: int) -> _TerminalInfo:
        """Inside-tokens bitset and exit nodes of terminal ``t`` in DFA state ``s`` (shared by
        the states of ``s``'s horizon class; counted strings: ``_counted_info``; a state from
        which one string remains: ``TokenIndex.literal``)."""
        key = (t, s)
        info = self._terminal_info.get(key)
        if info is not None:
            return info
        dfa = self.grammar.terminals[t]
        idx = self.index
        split = dfa.counter.split(s, dfa.n_states) if dfa.counter is not None else None
        if split is not None:
            info = self._counted_info(t, dfa, *split)
        else:
            if self.native:  # _literal_rest in C
                lit = _native.core.literal_rest(dfa.trans, _native._u8(dfa.accept), int(s))
            else:
                single = self._single.get(t)
                if single is None:
                    single = self._single[t] = _SingleOut(dfa)
                lit = _literal_rest(dfa, s, single)
            if lit is not None:  # a single string remains: no vocabulary walk needed
                rest, a = lit
                if self.native:
                    words, node = _native.literal(idx, rest)
                else:
                    ids, node = idx.literal(rest)
                    words = idx.pack(ids)
                info = _TerminalInfo(words, {a: [node]} if node is not None else {})
            else:
                ckey = (t, "class", int(self.horizon_classes(t)[s])) if dfa.counter is None else (t, "state", s)
                info = self._terminal_info.get(ckey)
                if info is None:
                    if self.native:
                        words, raw_exits = _native.walk(idx, dfa.trans, dfa.accept, s)
                    else:
                        ids, raw_exits = idx.walk(dfa.trans, dfa.accept, s)
                        words = idx.pack(ids)
                    exits: dict = {}
                    for p_, node, a in raw_exits:
                        if p_ < idx.max_len and idx.t_child_hi[p_][node] > idx.t_child_lo[p_][node]:
                            exits.setdefault(a, []).append((p_, node))
                    info = self._terminal_info[ckey] = _TerminalInfo(words, exits)
                    self._stats["terminal_infos"] += 1
        self._terminal_info[key] = info
        return info

    def _native_base(self, t: int, i: int) -> tuple:
        """The counted walk of terminal ``t``'s character loop from local state ``i`` as
        ``Engine.mask_into`` reads it (called once per (terminal, local state) by the C tables):
        ``(in_ids, in_key, all_words, close_n, close_ends, close_end_at, close_pre, n_max, levels,
        level_lo)`` (``levels``: the precomputed rooms of ``_CountBase.make_levels``, none: 0 rows),
        ``close_pre`` the preorder trie node of each closing quote's exit (-1: none)."""
        base = self._count_base(self.grammar.terminals[t].counter, i)  # its walk key was shared at compile
        pre = getattr(base, "close_pre", None)
        if pre is None:
            by_depth = self.index._native_pre
            pre = base.close_pre = np.array([-1 if x is None else by_depth[x[0]][x[1]] for x in base.close_nodes],
                                            np.int64)
        levels = base.levels if base.levels.size else np.zeros((0, self.index.n_words), np.uint32)
        return (base.in_ids, base.in_key, base.all_words, base.close_n, base.close_ends, base.close_end_at, pre,
                int(base.n_max), levels, int(base.level_lo))

    # -- masks ------------------------------------------------------------------------------
    def _simulate(self, chart, p: int, node: int, out: list) -> None:
        """Append to ``out`` the ids of the tokens under trie node ``node`` (depth ``p``) whose
        bytes after the first ``p`` are accepted from ``chart``: a depth-first walk of the
        vocabulary trie that steps the Earley chart once per node and only into children whose
        byte the chart allows, so a rejected prefix rules out its whole subtree at once (the
        rejected-prefix cache) and shared prefixes are simulated once."""
        idx = self.index
        if isinstance(self.engine, NativeEarleyEngine):  # the same walk in C
            ids, n_sim = self.engine.simulate(chart, idx, p, node)
            if ids.size:
                out.append(ids)
            self._stats["simulated_bytes"] += n_sim
            return
        step, first, first_list = self.engine.step, self.engine.allowed_first_bytes, self.engine.first_list
        c_lo, c_hi, t_byte, max_len = idx.t_child_lo, idx.t_child_hi, idx.t_byte, idx.max_len
        stack = [(chart, p, node)]
        n_sim = 0
        while stack:
            c, d, m = stack.pop()
            if d >= max_len:
                continue
            lo, hi = int(c_lo[d][m]), int(c_hi[d][m])
            if lo == hi:
                continue
            if hi - lo <= 8:  # few children: a Python scan beats three numpy calls
                fl = first_list(c)
                kids = t_byte[d + 1][lo:hi].tolist()
                js = [j for j, b in enumerate(kids) if fl[b]]
            else:
                kids = t_byte[d + 1][lo:hi]
                js = np.flatnonzero(first(c)[kids]).tolist()
            for j in js:
                c2 = step(c, int(kids[j]))
                n_sim += 1
                if c2 is None:
                    continue
                ends = idx.ends(d + 1, lo + j)
                if ends.size:
                    out.append(ends)
                stack.append((c2, d + 1, lo + j))
        self._stats["simulated_bytes"] += n_sim

    def _exit_top(self, chart, t: int, s: int, a: int):
        if self._exit_c is not None:
            return self._exit_c(chart, t, s, a)
        x = self.engine.exit_chart(chart, t, s, a)
        return None if x is None else self.engine.top(x)

    def _exits_into(self, chart, t: int, s: int, info, cached: bool, dense: list, sparse: list, extra: list) -> None:
        """The tokens that leave terminal ``t`` (state ``s``) inside them: for each exit, the
        trie below its nodes simulated from the exit chart (``_simulate``), through the exit
        cache when ``cached``; appended as packed words, (word, bits) pairs or token ids."""
        cfg, engine, idx, exit_c = self.config, self.engine, self.index, self._exit_c
        for a, nodes in info.exits.items():
            if exit_c is not None:
                x = exit_c(chart, t, s, a)
                if x < 0:
                    continue
            else:
                x = engine.exit_chart(chart, t, s, a)
                if x is None:
                    continue
            if not cached:
                for p_, node in nodes:
                    self._simulate(x, p_, node, extra)
                continue
            xkey = engine.top(x) if cfg.memo else engine.chart_key(x)
            for p_, node in nodes:
                nkey = (xkey, p_, node)
                got = self.exit_cache.get(nkey)
                if got is None:
                    found: list = []
                    self._simulate(x, p_, node, found)
                    got = found[0] if len(found) == 1 else np.concatenate(found) if found else _NONE
                    if got.size >= 512:  # many tokens: keep them packed
                        got = (idx.pack(got, self.native),)
                    elif got.size and not self.native:  # few: as (word, bits) pairs to OR in
                        got = _sparse(got)
                    self.exit_cache[nkey] = got
                    if len(self.exit_cache) > cfg.cache_size:
                        self.exit_cache.popitem(last=False)
                else:
                    self.exit_cache.move_to_end(nkey)
                    self._stats["exit_hits"] += 1
                if type(got) is tuple:
                    if len(got) == 1:
                        dense.append(got[0])
                    else:
                        sparse.append(got)
                elif got.size:  # compiled core: few token ids, their bits set in C when combined
                    extra.append(got)

    def _exits_words(self, chart, t: int, s: int, info, words: np.ndarray) -> None:
        """``_exits_into`` on the compiled core: for each exit of terminal ``t`` in state ``s``, the
        trie below its nodes simulated from the exit chart, OR-ed into ``words`` by one C call
        (``Engine.exits_into``, whose memo per (exit chart, node) is the exit cache here)."""
        idx = self.index
        pre = info.pre
        if pre is None:
            _native.trie_of(idx)
            pre = info.pre = {a: np.array([idx._native_pre[p_][m] for p_, m in nodes], np.int64)
                              for a, nodes in info.exits.items()}
        e, trie = self.engine._e, idx._native_trie
        for a, nodes in pre.items():
            x = e.exit_chart(chart, t, s, a)
            if x >= 0:
                self._stats["simulated_bytes"] += e.exits_into(x, trie, nodes, words)

    def compute_mask(self, chart) -> np.ndarray:
        """The packed uint32 mask words of the tokens allowed after ``chart``. On the compiled core
        with the state cache, a copy of the mask in the C state cache (``Engine.mask_copy``), whose
        miss is computed in C (as ``Engine.mask_into``: ``terminal_info``, the contribution cache and
        the combination below, over C tables keyed by integer ids; the counted walks come from
        ``_native_base``); the Python code below serves the other configurations and is what the
        tests compare the C tables with."""
        if self._mask_copy is not None:  # the state cache in C: a copy of the cached mask
            words = np.empty(self.index.n_words, np.uint32)
            self._mask_copy(chart, words, self._native_base)
            return words
        if self.fast_accept is not None and self.config.state_cache:  # the chart id is the cache key
            hit = self.mask_cache.get(chart)
            if hit is not None:
                self.mask_cache.move_to_end(chart)
                self._stats["cache_hits"] += 1
                return hit
            if self._mask_into is not None:  # a miss: the whole mask in one C call
                self._stats["cache_misses"] += 1
                words = np.empty(self.index.n_words, np.uint32)
                self._stats["simulated_bytes"] += self._mask_into(chart, words, self._native_base)
                self.mask_cache[chart] = words
                if len(self.mask_cache) > self.config.cache_size:
                    self.mask_cache.popitem(last=False)
                return words
        cfg = self.config
        key = None
        if cfg.state_cache:
            # interned charts: the top set identifies the chart (EarleyEngine, memo)
            key = self.engine.top(chart) if cfg.memo else self.engine.chart_key(chart)
            hit = self.mask_cache.get(key)
            if hit is not None:
                self.mask_cache.move_to_end(key)
                self._stats["cache_hits"] += 1
                return hit
            self._stats["cache_misses"] += 1
        idx = self.index
        engine = self.engine
        dense: list = []  # packed words to OR together (a single one is used as is, no copy)
        sparse: list = []  # (word indices, bits) pairs
        extra: list = []
        contrib = cfg.memo and key is not None
        exit_c = self._exit_c
        for (t, s) in engine.scan_keys(chart):
            info = self.terminal_info(t, s)
            if not info.exits:
                dense.append(info.inside)
                continue
            if not contrib:
                dense.append(info.inside)
                self._exits_into(chart, t, s, info, key is not None, dense, sparse, extra)
                continue
            # state-aware cache of one terminal state's contribution (inside tokens and every
            # exit's tokens): keyed by its terminal info and the exit charts' (interned) top sets,
            # so it hits wherever those agree, e.g. at every count of a long bounded string
            ckey = ((info,) + tuple(exit_c(chart, t, s, a) for a in info.exits) if exit_c is not None
                    else (info,) + tuple(self._exit_top(chart, t, s, a) for a in info.exits))
            got = self.contrib_cache.get(ckey)
            if got is None and exit_c is not None:  # compiled core: the exits' walks OR-ed in by C
                got = info.inside.copy()
                self._exits_words(chart, t, s, info, got)
                self.contrib_cache[ckey] = got
                if len(self.contrib_cache) > cfg.cache_size:
                    self.contrib_cache.popitem(last=False)
            elif got is None:
                d2, s2, e2 = [info.inside], [], []
                self._exits_into(chart, t, s, info, True, d2, s2, e2)
                got = _combine(d2, s2, e2, idx.n_words, self.native)
                self.contrib_cache[ckey] = got
                if len(self.contrib_cache) > cfg.cache_size:
                    self.contrib_cache.popitem(last=False)
            else:
                self.contrib_cache.move_to_end(ckey)
            dense.append(got)
        if engine.can_terminate(chart):
            dense.append(idx.eos_words)
        words = _combine(dense, sparse, extra, idx.n_words, self.native)
        if key is not None:
            self.mask_cache[key] = words
            if len(self.mask_cache) > cfg.cache_size:
                self.mask_cache.popitem(last=False)
        return words


class GrammarMatcher:
    """The decoding-time state of one sequence: accept tokens, roll back, fill masks.

    Examples:
        >>> from rayml.decoding import compile_ebnf, byte_vocabulary
        >>> m = GrammarMatcher(compile_ebnf('root ::= "ab" | "ac"', byte_vocabulary()))
        >>> mask = allocate_token_bitmask(1, m.vocab_size)
        >>> m.fill_next_token_bitmask(mask)
        >>> bitmask_to_bool(mask, m.vocab_size)[0].nonzero()[0].tolist()
        [97]
    """

    def __init__(self, compiled: CompiledGrammar, *, max_rollback: int | None = None):
        if not isinstance(compiled, CompiledGrammar):
            raise TypeError(f"compiled must be a CompiledGrammar, got {type(compiled).__name__}")
        self.compiled = compiled
        self.engine = compiled.engine
        self.max_rollback = max_rollback
        self.reset()

    @property
    def vocab_size(self) -> int:
        return self.compiled.index.vocab_size

    def reset(self) -> None:
        """Back to the empty text."""
        self._history = [self.engine.initial()]
        self._terminated = [False]

    @property
    def chart(self):
        return self._history[-1]

    def is_terminated(self) -> bool:
        """An EOS token was accepted."""
        return self._terminated[-1]

    def can_terminate(self) -> bool:
        """The text so far is a complete sentence."""
        return self.engine.can_terminate(self.chart)

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw bytes (one rollback step); ``False`` and unchanged if rejected."""
        if self.is_terminated():
            return False
        c = self.engine.accept_bytes(self.chart, bytes(data))
        if c is None:
            return False
        self._push(c, False)
        return True

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; ``False`` (state unchanged) if the grammar rejects it."""
        cg = self.compiled
        if not (0 <= token_id < cg.n_ids):
            raise ValueError(f"token_id must be in [0, {cg.n_ids}), got {token_id}")
        if self._terminated[-1]:
            return False
        fast = cg.fast_accept  # the compiled engine's memoised accept, called directly
        if fast is not None and token_id < cg.n_plain and token_id not in cg.special:
            r = fast(self._history[-1], token_id, cg.token_bytes[token_id])
            if r < 0:
                return False
            self._history.append(r)
            self._terminated.append(False)
            if self.max_rollback is not None and len(self._history) > self.max_rollback + 1:
                del self._history[0]
                del self._terminated[0]
            return True
        vocab = cg.index.vocab
        if token_id in vocab.eos_ids:
            if not self.can_terminate():
                return False
            self._push(self.chart, True)
            return True
        if token_id >= vocab.size or token_id in vocab.special:
            return False
        c = self.engine.accept_token(self.chart, token_id, vocab.tokens[token_id])
        if c is None:
            return False
        self._push(c, False)
        return True

    def _push(self, chart, terminated: bool):
        self._history.append(chart)
        self._terminated.append(terminated)
        if self.max_rollback is not None and len(self._history) > self.max_rollback + 1:
            del self._history[0]
            del self._terminated[0]

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` accepted tokens."""
        if not isinstance(n, int) or n < 0 or n > len(self._history) - 1:
            raise ValueError(f"n must be an int in [0, {len(self._history) - 1}], got {n!r}")
        if n:
            del self._history[-n:]
            del self._terminated[-n:]

    def next_token_words(self) -> np.ndarray:
        """The packed uint32 mask words for the next token."""
        if self.is_terminated():
            return np.zeros(self.compiled.index.n_words, np.uint32)
        return self.compiled.compute_mask(self.chart)

    def fill_next_token_bitmask(self, bitmask: np.ndarray, index: int = 0) -> None:
        """Write the next-token mask into row ``index`` of an int32 ``[batch, W]`` bitmask."""
        cg = self.compiled
        if cg._fill_row is not None and not self._terminated[-1] and type(index) is int:
            # compiled core: the state cache, a miss's computation and the row copy in one C call, which
            # declines (None) a bitmask that is not a C-contiguous int32 [B, W] array, or a row outside it
            if cg._fill_row(self._history[-1], bitmask, index, cg._native_base) is not None:
                return
        if bitmask.dtype != np.int32 or bitmask.ndim != 2 or bitmask.shape[1] != self.compiled.index.n_words:
            raise ValueError(f"bitmask must be int32 [batch, {self.compiled.index.n_words}], got "
                             f"{bitmask.dtype} {bitmask.shape}")
        if self._terminated[-1]:
            bitmask[index] = 0
        elif self.compiled.native and type(index) is int and 0 <= index < bitmask.shape[0] and bitmask.flags.c_contiguous:
            # the row copied by the compiled core (one memcpy; NumPy's row assignment costs about 1.5 us more)
            _native.core.fill_rows(bitmask, (index,), (self.compiled.compute_mask(self._history[-1]),))
        else:
            bitmask[index] = self.compiled.compute_mask(self._history[-1]).view(np.int32)

    def allowed_tokens(self) -> np.ndarray:
        """Token ids allowed next (convenience, unpacks the mask)."""
        words = self.next_token_words()
        return np.flatnonzero(bitmask_to_bool(words.view(np.int32)[None], self.vocab_size)[0])

    def live_items(self) -> int:
        """Earley items in the current chart."""
        return self.engine.live_items(self.chart)

    def chart_depth(self) -> int:
        """Earley sets in the current chart."""
        return self.engine.depth(self.chart)
