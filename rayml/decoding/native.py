"""ZapFormat's compiled core (``rayml.decoding._zapcore``, plain C) and its pure-Python fallback.

The compiled core does what the profile of ``rayml bench zapformat`` found to dominate mask time
(docs/methods/zapformat.md, "Compiled core"): the vocabulary-trie walks of the per-terminal-state
precomputation (kbnf's eager regex cache; ``TokenIndex.walk`` and the counted walks of
length-bounded strings, ``TokenIndex.walk_counted``) and the bitmask fill (setting token bits,
copying rows of a batch). The trie is scanned in sorted-token order with a per-depth stack of DFA
states, jumping past the subtree of a rejected prefix (the paper's rejected-prefix cache applied to
the whole vocabulary walk). The Earley engine runs in C too (``native_earley``: ``core.Engine``,
with the memoised walks below a terminal's exits, ``Engine.exits_into``), and so does the per-state
setup of a first visit (``core.horizon_classes``, ``core.literal_rest``, ``core.count_cut``, used
by ``matcher.CompiledGrammar``). A state-cache miss is one C call (``Engine.mask_into``): the
terminal infos of the state's scan groups (made on first use, in C tables keyed by integer ids), the
contribution cache and the combination; since the fourth round the state cache is in C too (an LRU
of masks keyed by the state id), so a fill is one C call, hit or miss (``Engine.fill_row``); the
once-per-(terminal, local state) counted walks stay in Python (``matcher``).

When the extension was not built (no C compiler at install time), importing ``rayml.decoding``
prints one warning line and every grammar runs on the pure-Python engine, which is also the
reference the compiled core is tested against bit for bit (``MatcherConfig(native=False)``).
"""

from __future__ import annotations

import os
import sys

import numpy as np

__all__ = ["AVAILABLE", "core", "trie_of", "walk", "walk_counted", "literal", "set_bits", "clear_bits", "fill_rows"]

WARNING = ("rayml.decoding: the compiled ZapFormat core (rayml.decoding._zapcore) is not built; using the "
           "pure-Python engine (slower masks). Reinstall with a C compiler present to build it.")


def _load():
    if os.environ.get("RAYML_ZAPFORMAT_PURE") == "1":
        return None, "RAYML_ZAPFORMAT_PURE=1"
    try:
        from rayml.decoding import _zapcore
    except ImportError as exc:
        return None, str(exc)
    return _zapcore, None


core, REASON = _load()
AVAILABLE = core is not None
if not AVAILABLE and os.environ.get("RAYML_ZAPFORMAT_PURE") != "1":
    print(WARNING, file=sys.stderr)


def trie_of(index):
    """The compiled core's copy of ``index``'s vocabulary trie (built once per ``TokenIndex``):
    per sorted token its bytes, length, common prefix with the previous token and the preorder id
    of the first trie node it opens; per preorder node its depth, its index ``m`` among the nodes
    of that depth (the ``(depth, m)`` ids of ``TokenIndex``) and the end of its token range."""
    got = getattr(index, "_native_trie", None)
    if got is not None:
        return got
    lens = index.lens.astype(np.int64)
    lcp = np.maximum(index._lcp, 0)
    opened = lens - lcp
    node_start = np.cumsum(opened) - opened
    n_nodes = int(opened.sum())
    node_byte = np.zeros(n_nodes, np.uint8)
    tok_start = np.zeros(n_nodes, np.int32)
    pre_of = [None]
    tok_end = np.zeros(n_nodes, np.int32)
    depth = np.zeros(n_nodes, np.int32)
    node_m = np.zeros(n_nodes, np.int32)
    for d in range(1, index.max_len + 1):
        first = index.t_pos_lo[d]
        pre = node_start[first] + (d - 1 - lcp[first])
        tok_end[pre] = index.t_pos_hi[d]
        node_byte[pre] = index.t_byte[d]
        tok_start[pre] = first
        pre_of.append(pre.astype(np.int64))
        depth[pre] = d
        node_m[pre] = np.arange(len(first))
    trie = core.trie(node_byte, lens.astype(np.int32), lcp.astype(np.int32),
                     node_start.astype(np.int32), tok_end, depth, node_m,
                     np.ascontiguousarray(index.order, np.int64), int(index.max_len), tok_start)
    index._native_pre = pre_of  # pre_of[d][m]: the preorder id of trie node (d, m)
    index._native_trie = trie
    return trie


def walk(index, trans: np.ndarray, accept: np.ndarray, s: int):
    """``TokenIndex.walk`` in C: ``(packed inside words, [(depth, node, state)] exits)``."""
    words = np.zeros(index.n_words, np.uint32)
    exits = core.walk(trie_of(index), trans, _u8(accept), int(s), words)
    return words, exits


def walk_counted(index, local: np.ndarray, i: int):
    """``TokenIndex.walk_counted`` in C, arranged as ``_CountBase`` keeps it: ``(ids, keys, words,
    closing)``, the inside tokens sorted by ``key = 2 n + (not between characters)`` (``n`` the
    characters they finish), their packed bits, and the closing-quote nodes ``(depth, node, n)``."""
    words = np.zeros(index.n_words, np.uint32)
    ids, keys, closing = core.walk_counted(trie_of(index), np.ascontiguousarray(local, np.int32), int(i), words)
    return np.frombuffer(ids, np.int64), np.frombuffer(keys, np.int64), words, closing


def literal(index, rest: bytes):
    """``TokenIndex.literal`` in C: ``(packed words of the tokens that are non-empty prefixes of
    rest, exit node (len(rest), node) or None)``."""
    words = np.zeros(index.n_words, np.uint32)
    return words, core.literal(trie_of(index), bytes(rest), words)


def set_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """Set the bits of token ``ids`` in the packed uint32 ``words`` (in place)."""
    core.set_bits(words, np.ascontiguousarray(ids, np.int64))


def clear_bits(words: np.ndarray, ids: np.ndarray) -> None:
    """Clear the bits of token ``ids`` in the packed uint32 ``words`` (in place)."""
    core.clear_bits(words, np.ascontiguousarray(ids, np.int64))


def fill_rows(bitmask: np.ndarray, rows, words) -> None:
    """Copy each packed ``words[j]`` into row ``rows[j]`` of the int32 ``bitmask`` (one call)."""
    core.fill_rows(bitmask, rows, words)


def _u8(accept: np.ndarray) -> np.ndarray:
    a = np.asarray(accept)
    return a.view(np.uint8) if a.dtype == bool and a.flags.c_contiguous else np.ascontiguousarray(a, np.uint8)
