"""ZapFormat's Earley engine on the compiled core: charts are integer state ids.

``NativeEarleyEngine`` has the interface of ``rayml.decoding.earley.EarleyEngine`` (the fast
configuration: ``memo=True``, pruning on or off) with the recognizer in C
(``rayml.decoding._zapcore.Engine``): Earley's predict / scan / complete over bytes, Leo items,
ZapFormat's dynamic pruning (after each byte the sets strictly between the highest origin the new
set refers to and the new set are dropped), and the interning of every Earley set by its content
and the set below it, so that one integer id stands for a whole pruned chart. What depends only on
the chart is memoised per id in C: the next chart for each byte and each token, the exit chart of
each (terminal, DFA state, end state), the Leo tops, the allowed first bytes. The trie walk below a
terminal's exits (``simulate``: step the chart down the vocabulary trie, dropping the subtree of a
rejected prefix) runs in C too.

The semantics are those of ``earley.py`` (same items, seeds, closure, Leo folding and pruning
bound); the Python engine stays the reference and the fallback, and the tests replay the bench
through both engines and compare every mask and accept bit for bit.

Differs from the Python engine: the intern table is not bounded (the Python one is cleared past
``intern_size`` sets): the sets of the parser states visited are kept until the compiled grammar
is freed; Leo chains longer than 64 links are not folded (completions walk them instead: the same
language, a deeper chart).
"""

from __future__ import annotations

import numpy as np

from rayml.decoding import native
from rayml.decoding.earley import dotted_rules
from rayml.decoding.grammar import Grammar

__all__ = ["NativeEarleyEngine"]


class NativeEarleyEngine:
    """The recognizer for one grammar, in C; charts are ``int`` state ids.

    Args:
        grammar: a normalised ``Grammar``.
        prune: ZapFormat's dynamic pruning on (default) or off (ablation).

    Examples:
        >>> from rayml.decoding.grammar import parse_ebnf
        >>> eng = NativeEarleyEngine(parse_ebnf('root ::= "a" root | "b"'))
        >>> chart = eng.accept_bytes(eng.initial(), b"aaab")
        >>> eng.can_terminate(chart), eng.depth(chart)  # pruned: the right recursion leaves one Earley set
        (True, 1)
    """

    memo = True

    def __init__(self, grammar: Grammar, *, prune: bool = True):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
        if not native.AVAILABLE:
            raise RuntimeError(f"the compiled core is not built ({native.REASON})")
        self.grammar = grammar
        self.prune = bool(prune)
        d_next, d_lhs, d_pen, prods_of = dotted_rules(grammar)
        n_nt = grammar.n_nonterminals
        off, prods = [0], []
        for n in range(n_nt):
            prods += prods_of.get(n, [])
            off.append(len(prods))
        nullable = [n in grammar.nullable for n in range(n_nt)]
        terms = [(np.ascontiguousarray(t.trans, np.int32), np.ascontiguousarray(t.accept, np.uint8),
                  np.ascontiguousarray(t.has_out, np.uint8)) for t in grammar.terminals]
        self._e = native.core.Engine(d_next, d_lhs, d_pen, off, prods, nullable, terms, grammar.start,
                                     prods_of[grammar.start][0], self.prune)
        self._first: dict = {}
        self._first_l: dict = {}
        self._initial = None

    def initial(self) -> int:
        """The chart before any byte."""
        if self._initial is None:
            self._initial = self._e.initial()
        return self._initial

    @staticmethod
    def top(chart: int) -> int:
        """The key that identifies the chart (its id: interned sets)."""
        return chart

    def step(self, chart: int, byte: int):
        """Scan one byte; ``None`` if rejected (memoised per chart)."""
        r = self._e.step(chart, byte)
        return None if r < 0 else r

    def accept_bytes(self, chart: int, data: bytes):
        """Scan every byte of ``data``; ``None`` if any is rejected."""
        r = self._e.accept_bytes(chart, bytes(data))
        return None if r < 0 else r

    def accept_token(self, chart: int, token_id: int, data: bytes):
        """``accept_bytes`` of a token's bytes, memoised per (chart, token)."""
        r = self._e.accept_token(chart, token_id, data)
        return None if r < 0 else r

    def exit_chart(self, chart: int, t: int, s: int, a: int):
        """The chart after the items waiting on terminal ``t`` in DFA state ``s`` reached state
        ``a`` and nothing else survived (memoised)."""
        r = self._e.exit_chart(chart, t, s, a)
        return None if r < 0 else r

    def scan_keys(self, chart: int) -> list:
        """The (terminal, DFA state) pairs the chart's last set waits on."""
        return self._e.scan_keys(chart)

    def can_terminate(self, chart: int) -> bool:
        """The bytes so far form a complete sentence."""
        return self._e.accepting(chart)

    def allowed_first_bytes(self, chart: int) -> np.ndarray:
        """``bool[256]``: the bytes the next step accepts (do not modify the array returned)."""
        got = self._first.get(chart)
        if got is None:
            got = self._first[chart] = np.frombuffer(self._e.first(chart), np.uint8).astype(bool)
        return got

    def first_list(self, chart: int) -> list:
        """``allowed_first_bytes`` as a Python list of 256 bools."""
        got = self._first_l.get(chart)
        if got is None:
            got = self._first_l[chart] = self.allowed_first_bytes(chart).tolist()
        return got

    def live_items(self, chart: int) -> int:
        """Items stored in the chart (the paper's memory measure)."""
        return self._e.shape(chart)[0]

    def depth(self, chart: int) -> int:
        """Earley sets in the chart."""
        return self._e.shape(chart)[1]

    def chart_key(self, chart: int) -> tuple:
        """The chart's content column by column, equal to ``EarleyEngine.chart_key`` of the same
        parser state."""
        return self._e.chart_key(chart)

    def simulate(self, chart: int, index, p: int, node: int):
        """The ids of the tokens under trie node ``(p, node)`` whose bytes after the first ``p``
        are accepted from ``chart`` (``CompiledGrammar._simulate`` in C), and the bytes stepped."""
        native.trie_of(index)
        n_sim, ids = self._e.simulate(chart, index._native_trie, int(index._native_pre[p][node]))
        return np.frombuffer(ids, np.int64), n_sim

    def recognizes(self, data: bytes) -> bool:
        """Full match of ``data``."""
        c = self.accept_bytes(self.initial(), data)
        return c is not None and self.can_terminate(c)

    def is_prefix(self, data: bytes) -> bool:
        """``data`` is a prefix of some sentence."""
        return self.accept_bytes(self.initial(), data) is not None

    def stats(self) -> dict:
        """Interned sets, closures built so far, and the bytes the C engine holds."""
        return self._e.stats()

    def native_nbytes(self) -> int:
        """Bytes held by the C engine (its interned sets and memos; for ``compiled_nbytes``)."""
        return int(self._e.stats()["bytes"])

    def __reduce__(self):
        raise TypeError("a NativeEarleyEngine (and a CompiledGrammar on the compiled core) cannot be pickled: "
                        "its state ids live in C; pickle the Grammar and compile it again")
