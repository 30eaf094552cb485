"""Token masks over a vocabulary: the compiled grammar, the matcher and its caches.

Follows the mask computation of ZapFormat / Formatron ("Earley-Driven Dynamic Pruning for
Efficient Structured Decoding", ICML 2025) and its kbnf engine, in this order:

1. **State cache** keyed on the (pruned) Earley chart: equal charts have equal masks. Dynamic
   pruning (``rayml.llm.grammar.earley``) is what makes equal parser states have equal charts.
2. **Precomputed masks for regex states** (kbnf's eager regex cache): for every (terminal DFA,
   state) met, the tokens whose bytes all stay inside that terminal are found once, vectorised
   over the whole vocabulary (a numpy walk of the padded token-byte matrix, restricted to tokens
   whose first byte is live), and stored as a packed bitset; they are allowed whenever an item
   waits on that terminal in that state. The same walk records, for the other tokens, every
   point where the terminal could end inside the token (``exit``: DFA state ``a`` accepting
   after ``p`` bytes) and groups them by ``(a, rest of the token)``.
3. For each exit group, the chart after the terminal ends (``EarleyEngine.exit_chart``) gives the
   allowed next bytes (groups whose first byte is not allowed are dropped), then the distinct
   rests are simulated byte by byte on the Earley engine as a **trie walk** (sorted rests share
   their common prefix's charts) with a **rejected-prefix cache** (a rest sharing a rejected
   prefix is skipped).
4. EOS is allowed iff the chart can terminate; special tokens never.

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

from rayml.llm.grammar.earley import EarleyEngine
from rayml.llm.grammar.grammar import Grammar
from rayml.llm.grammar.vocab import Vocabulary, token_matrix

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
        self.t_byte, self.t_pos_lo, self.t_pos_hi = [None], [None], [None]
        self.t_end_node, self.t_end_tok = [None], [None]
        self.t_child_lo, self.t_child_hi = [None], [None]
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
                lo = np.searchsorted(parent, np.arange(len(self.t_byte[d - 1])), side="left")
                hi = np.searchsorted(parent, np.arange(len(self.t_byte[d - 1])), side="right")
                self.t_child_lo.append(lo)
                self.t_child_hi.append(hi)
            prev_node = node_of
        self.t_child_lo.append(np.zeros(len(self.t_byte[-1]), np.int64))
        self.t_child_hi.append(np.zeros(len(self.t_byte[-1]), np.int64))

    def walk(self, trans: np.ndarray, accept: np.ndarray, s: int):
        """Run every token through a DFA from state ``s`` over the trie (vectorised per depth).

        Returns ``(inside token ids, exits)``: the tokens whose bytes all keep the DFA alive,
        and ``[(depth p, node, state a)]`` where the DFA accepts after ``p`` bytes of the
        tokens under ``node`` (only tokens longer than ``p`` matter there)."""
        inside, exits = [], []
        st = trans[s, self.t_byte[1]]
        alive = np.flatnonzero(st >= 0)
        st = st[alive].astype(np.int64)
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
            lo, hi = self.t_child_lo[d][alive], self.t_child_hi[d][alive]
            cnt = hi - lo
            total = int(cnt.sum())
            if not total:
                break
            child = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(total)
            nst = trans[np.repeat(st, cnt), self.t_byte[d + 1][child]]
            keep = nst >= 0
            alive, st = child[keep], nst[keep].astype(np.int64)
            d += 1
        ids = np.concatenate(inside) if inside else np.zeros(0, np.int64)
        return ids, exits

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
    """

    prune: bool = True
    state_cache: bool = True
    cache_size: int = 4096

    def __post_init__(self):
        if not isinstance(self.prune, bool):
            raise TypeError(f"prune must be a bool, got {self.prune!r}")
        if not isinstance(self.state_cache, bool):
            raise TypeError(f"state_cache must be a bool, got {self.state_cache!r}")
        if not isinstance(self.cache_size, int) or self.cache_size < 1:
            raise ValueError(f"cache_size must be an int >= 1, got {self.cache_size!r}")


class _TerminalInfo:
    __slots__ = ("inside", "exits")

    def __init__(self, inside, exits):
        self.inside = inside  # uint32 packed words
        self.exits = exits  # {a: (sorted rests, [token id arrays])}


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
        self.engine = EarleyEngine(grammar, prune=config.prune)
        self._terminal_info: dict = {}
        self._classes: dict = {}
        self.mask_cache: OrderedDict = OrderedDict()
        self.stats = {"cache_hits": 0, "cache_misses": 0, "simulated_bytes": 0, "terminal_infos": 0}

    # -- per (terminal, state) precomputation ---------------------------------------------
    def horizon_classes(self, t: int) -> np.ndarray:
        """Classes of terminal ``t``'s DFA states that no token can tell apart: Moore partition
        refinement run for as many rounds as the longest token has bytes, so two states share a
        class iff every byte string up to that length leads both to the same acceptance and
        deadness. Their token walks (inside set and exits) are then equal, and one walk serves the
        whole class (Assumed: kbnf keys its regex cache on the exact DFA state; this coarsening is
        ours and exact for tokens no longer than the horizon, which all are)."""
        cls = self._classes.get(t)
        if cls is None:
            from rayml.llm.grammar.regex import _row_ids, byte_class_columns

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

    def terminal_info(self, t: int, s: int) -> _TerminalInfo:
        """Inside-tokens bitset and exit groups of terminal ``t`` in DFA state ``s`` (shared by
        the states of ``s``'s horizon class)."""
        key = (t, int(self.horizon_classes(t)[s]))
        info = self._terminal_info.get(key)
        if info is not None:
            return info
        idx = self.index
        dfa = self.grammar.terminals[t]
        ids, raw_exits = idx.walk(dfa.trans, dfa.accept, s)
        words = np.zeros(idx.n_words, np.uint32)
        np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))
        exits: dict = {}
        if raw_exits:
            is_inside = np.zeros(idx.vocab_size, bool)
            is_inside[ids] = True
            groups: dict = {}
            toks, order, lens = idx.tokens, idx.order, idx.lens
            for p_, node, a in raw_exits:
                lo, hi = int(idx.t_pos_lo[p_][node]), int(idx.t_pos_hi[p_][node])
                pos = np.arange(lo, hi)
                pos = pos[lens[pos] > p_]
                for tid in order[pos].tolist():
                    if not is_inside[tid]:
                        groups.setdefault(a, {}).setdefault(toks[tid][p_:], []).append(tid)
            for a, g in groups.items():
                rests = sorted(g)
                exits[a] = (rests, [np.array(g[r], np.int64) for r in rests])
        info = _TerminalInfo(words, exits)
        self._terminal_info[key] = info
        self.stats["terminal_infos"] += 1
        return info

    # -- masks ------------------------------------------------------------------------------
    def _simulate(self, chart, rests: list, allowed_first: np.ndarray) -> list[int]:
        """Indices of ``rests`` (sorted byte strings) accepted from ``chart``: a trie walk with
        shared prefixes and the rejected-prefix cache."""
        step = self.engine.step
        out = []
        stack = [chart]
        prev = b""
        rejected = None
        n_sim = 0
        for i, r in enumerate(rests):
            if not allowed_first[r[0]]:
                continue
            if rejected is not None and r.startswith(rejected):
                continue
            lcp = 0
            lim = min(len(prev), len(r), len(stack) - 1)
            while lcp < lim and prev[lcp] == r[lcp]:
                lcp += 1
            del stack[lcp + 1:]
            ok = True
            for k in range(lcp, len(r)):
                c = step(stack[k], r[k])
                n_sim += 1
                if c is None:
                    rejected = r[:k + 1]
                    ok = False
                    break
                stack.append(c)
            prev = r[:len(stack) - 1]
            if ok:
                out.append(i)
        self.stats["simulated_bytes"] += n_sim
        return out

    def compute_mask(self, chart) -> np.ndarray:
        """The packed uint32 mask words of the tokens allowed after ``chart``."""
        cfg = self.config
        key = None
        if cfg.state_cache:
            key = self.engine.chart_key(chart)
            hit = self.mask_cache.get(key)
            if hit is not None:
                self.mask_cache.move_to_end(key)
                self.stats["cache_hits"] += 1
                return hit
            self.stats["cache_misses"] += 1
        idx = self.index
        words = np.zeros(idx.n_words, np.uint32)
        engine = self.engine
        for (t, s) in chart[-1].scan:
            info = self.terminal_info(t, s)
            words |= info.inside
            for a, (rests, tok_arrays) in info.exits.items():
                x = engine.exit_chart(chart, t, s, a)
                if x is None:
                    continue
                first = engine.allowed_first_bytes(x)
                for i in self._simulate(x, rests, first):
                    ids = tok_arrays[i]
                    np.bitwise_or.at(words, ids >> 5, np.uint32(1) << (ids & 31).astype(np.uint32))
        if engine.can_terminate(chart):
            words |= idx.eos_words
        if key is not None:
            self.mask_cache[key] = words
            if len(self.mask_cache) > cfg.cache_size:
                self.mask_cache.popitem(last=False)
        return words


class GrammarMatcher:
    """The decoding-time state of one sequence: accept tokens, roll back, fill masks.

    Examples:
        >>> from rayml.llm.grammar import compile_ebnf, byte_vocabulary
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
        idx = self.compiled.index
        if not (0 <= token_id < idx.vocab_size):
            raise ValueError(f"token_id must be in [0, {idx.vocab_size}), got {token_id}")
        if self.is_terminated():
            return False
        vocab = idx.vocab
        if token_id in vocab.eos_ids:
            if not self.can_terminate():
                return False
            self._push(self.chart, True)
            return True
        if token_id >= vocab.size or token_id in vocab.special:
            return False
        data = vocab.tokens[token_id]
        c = self.engine.accept_bytes(self.chart, data)
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
        if bitmask.dtype != np.int32 or bitmask.ndim != 2 or bitmask.shape[1] != self.compiled.index.n_words:
            raise ValueError(f"bitmask must be int32 [batch, {self.compiled.index.n_words}], got "
                             f"{bitmask.dtype} {bitmask.shape}")
        bitmask[index] = self.next_token_words().view(np.int32)

    def allowed_tokens(self) -> np.ndarray:
        """Token ids allowed next (convenience, unpacks the mask)."""
        words = self.next_token_words()
        return np.flatnonzero(bitmask_to_bool(words.view(np.int32)[None], self.vocab_size)[0])

    def live_items(self) -> int:
        """Earley items in the current chart."""
        return self.engine.live_items(self.chart)

    def chart_depth(self) -> int:
        """Earley sets in the current chart."""
        return len(self.chart)
