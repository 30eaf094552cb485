"""Byte-level Earley recognizer with Leo items and ZapFormat's dynamic pruning.

Implements the engine of "Earley-Driven Dynamic Pruning for Efficient Structured Decoding"
(ZapFormat; the Formatron engine, ICML 2025):

* Earley's recognizer over bytes (predict / scan / complete), terminals are byte DFAs whose state
  is carried in the item (``(dotted rule, DFA state, origin column, Leo target)``); a scanned
  terminal item stays (if its DFA state has live transitions) and, if the DFA state accepts, also
  advances its dot. Nullable rules by the Aycock-Horspool rule (advance over a nullable
  nonterminal at prediction time; completions at the current column are then redundant).
* Leo's optimisation for right recursion: if column ``m`` holds exactly one item waiting for
  ``N`` and that item is ``X -> a . N`` (``N`` last), completing ``N`` at ``m`` is deterministic;
  the transitive top of that chain is memoised per (column, N) and used directly. Items whose
  completion would go through such a chain are *folded*: their origin becomes the top's column
  and they remember the top's nonterminal (the "Leo target"), so they no longer reference the
  intermediate columns.
* ZapFormat's dynamic pruning (the paper's Sec. 3; in kbnf ``compact``): after each byte, the
  largest origin referenced by the new Earley set is ``r``; every Earley set strictly between
  column ``r`` and the new set can never be referenced again (items only look *down* the chart,
  at their origin), so they are deleted and the new set becomes column ``r + 1``. The chart then
  stays about as deep as the nesting of the text rather than as long as the text, and equal
  parser states have equal charts, which is what makes the chart-keyed state cache of
  ``rayml.decoding.matcher`` hit. ``prune=False`` keeps every set (the ablation).

Items whose origin is the set itself are stored with the origin ``SELF`` so that a set never
has to be renumbered when the sets below it are pruned. Charts are immutable tuples of immutable
sets, so rollback is restoring an earlier tuple.

Assumed (not read in the paper, whose full text was not available here; checked against the
authors' kbnf source and the research notes): completed items are not kept in the sets (they
have no future effect), the pruning bound uses the origins of the items that still have a
symbol after the dot, and sets below that bound are kept even if unreferenced (as in kbnf).
"""

from __future__ import annotations

import numpy as np

from rayml.decoding.grammar import Grammar

__all__ = ["EarleyEngine", "ESet", "SELF", "dotted_rules"]

SELF = -1
_MISSING = object()


def dotted_rules(grammar: Grammar):
    """The grammar's dotted rules, one id per (production, dot): ``d_next[d]`` the symbol after
    the dot (None at the end; terminals negative: ``-t - 1``), ``d_lhs[d]`` the production's left
    side, ``d_pen[d]`` the dot is before the last symbol (Leo's penultimate condition), and
    ``prods_of[n]`` the dotted rules with the dot at 0 of ``n``'s productions."""
    d_next, d_lhs, d_pen = [], [], []
    prods_of: dict[int, list[int]] = {}
    for lhs, rhs in grammar.productions:
        prods_of.setdefault(lhs, []).append(len(d_next))
        for k in range(len(rhs) + 1):
            d_next.append(rhs[k] if k < len(rhs) else None)
            d_lhs.append(lhs)
            d_pen.append(k == len(rhs) - 1)
    return d_next, d_lhs, d_pen, prods_of


class ESet:
    """One Earley set (immutable once built).

    Attributes:
        scan: ``{(terminal, dfa_state): [items]}``: items waiting on a terminal.
        wait: ``{nonterminal: [items]}``: items waiting on a nonterminal.
        accepting: the augmented start rule is complete here.
        key: the set's content (items with a symbol after the dot, and ``accepting``).
    """

    __slots__ = ("scan", "wait", "accepting", "key", "leo", "n_items", "max_ref", "first", "first_l", "steps", "tokens")

    def __init__(self, scan, wait, accepting, items, key=None, max_ref=None):
        self.scan = scan
        self.wait = wait
        self.accepting = accepting
        self.key = (frozenset(items), accepting) if key is None else key
        self.leo: dict = {}
        self.first = None  # allowed next bytes, memoised by EarleyEngine.allowed_first_bytes
        self.first_l = None  # the same as a Python list
        self.steps: dict = {}  # byte -> next chart (or None), memoised by EarleyEngine.step
        self.tokens: dict = {}  # token id -> next chart (or None), memoised by GrammarMatcher.accept_token
        self.n_items = len(items)
        self.max_ref = max((it[2] for it in items if it[2] != SELF), default=-1) if max_ref is None else max_ref


class EarleyEngine:
    """The recognizer for one grammar. Stateless: every method maps charts to charts.

    Args:
        grammar: a normalised ``Grammar``.
        prune: ZapFormat's dynamic pruning on (default) or off (ablation).

    Examples:
        >>> from rayml.decoding.grammar import parse_ebnf
        >>> eng = EarleyEngine(parse_ebnf('root ::= "a" root | "b"'))
        >>> chart = eng.accept_bytes(eng.initial(), b"aaab")
        >>> eng.can_terminate(chart), len(chart)  # pruned: the right recursion leaves one Earley set
        (True, 1)
    """

    def __init__(self, grammar: Grammar, *, prune: bool = True, memo: bool = True, intern_size: int = 1 << 17):
        if not isinstance(grammar, Grammar):
            raise TypeError(f"grammar must be a Grammar, got {type(grammar).__name__}")
        if not isinstance(intern_size, int) or intern_size < 1:
            raise ValueError(f"intern_size must be an int >= 1, got {intern_size!r}")
        self.grammar = grammar
        self.prune = bool(prune)
        self.memo = bool(memo)
        self.intern_size = intern_size
        self._interned: dict = {}
        self._built: dict = {}
        self.start = grammar.start
        d_next, d_lhs, d_pen, prods_of = dotted_rules(grammar)
        self.d_next, self.d_lhs, self.d_pen = d_next, d_lhs, d_pen
        self.prods_of = prods_of
        self.nullable = grammar.nullable
        self.t_trans = [t.trans_list for t in grammar.terminals]
        self.t_accept = [t.accept.tolist() for t in grammar.terminals]
        self.t_has_out = [t.has_out.tolist() for t in grammar.terminals]
        self.t_live = [(t.trans >= 0) for t in grammar.terminals]
        self._start_item = (prods_of[grammar.start][0], 0, SELF, -1)
        self._initial = None

    # ------------------------------------------------------------------------------------
    def initial(self) -> tuple:
        """The chart before any byte."""
        if self._initial is None:
            self._initial = self._build((), [self._start_item])
        return self._initial

    def leo_top(self, chart: tuple, m: int, n: int):
        """The memoised Leo top ``(nonterminal, column)`` of completing ``n`` at column ``m``, or
        ``None`` when that completion is not deterministic."""
        path = []
        res = None
        seen = set()
        while True:
            if (n, m) in seen:
                res = None
                break
            seen.add((n, m))
            s = chart[m]
            r = s.leo.get(n, _MISSING)
            if r is not _MISSING:
                res = r if r is not None else ((n, m) if path else None)
                break
            w = s.wait.get(n)
            if w is None or len(w) != 1 or not self.d_pen[w[0][0]]:
                s.leo[n] = None
                res = (n, m) if path else None
                break
            d, _, o, ov = w[0]
            path.append((s, n))
            n = ov if ov >= 0 else self.d_lhs[d]
            m = m if o == SELF else o
        top = res
        for s, k in path:
            s.leo[k] = top
        return top

    def _build(self, chart: tuple, seeds: list) -> tuple | None:
        """Close ``seeds`` (items of the new set, origins concrete or ``SELF``) under predict and
        complete, then append the new set to ``chart`` (pruned when ``self.prune``)."""
        d_next, d_lhs, prods_of, nullable = self.d_next, self.d_lhs, self.prods_of, self.nullable
        start = self.start
        leo_top = self.leo_top
        items: dict = {}
        scan: dict = {}
        wait: dict = {}
        done: set = set()
        predicted: set = set()
        accepting = False
        work = list(seeds)
        while work:
            item = work.pop()
            d, st, o, ov = item
            if o != SELF and ov < 0:
                top = leo_top(chart, o, d_lhs[d])
                if top is not None:
                    item = (d, st, top[1], top[0])
                    o, ov = top[1], top[0]
            if item in items:
                continue
            sym = d_next[d]
            if sym is None:
                c = ov if ov >= 0 else d_lhs[d]
                if c == start:
                    accepting = True
                    continue
                if o == SELF:
                    continue
                top = leo_top(chart, o, c)
                if top is not None:
                    c, m = top
                else:
                    m = o
                if c == start:
                    accepting = True
                    continue
                if (c, m) in done:
                    continue
                done.add((c, m))
                for w in chart[m].wait.get(c, ()):
                    wd, _, wo, wov = w
                    work.append((wd + 1, 0, m if wo == SELF else wo, wov))
                continue
            items[item] = None
            if sym < 0:
                scan.setdefault((-sym - 1, st), []).append(item)
            else:
                wait.setdefault(sym, []).append(item)
                if sym not in predicted:
                    predicted.add(sym)
                    for d0 in prods_of.get(sym, ()):
                        work.append((d0, 0, SELF, -1))
                if sym in nullable:
                    work.append((d + 1, 0, o, ov))
        if not scan and not accepting:
            return None
        if not self.memo:
            new = ESet(scan, wait, accepting, items)
            if self.prune and chart:
                return chart[:new.max_ref + 1] + (new,)
            return chart + (new,)
        key = (frozenset(items), accepting)
        max_ref = max((it[2] for it in items if it[2] != SELF), default=-1)
        keep = max_ref + 1 if self.prune and chart else len(chart)
        # interning: a set is identified by its content and the (interned) chart below it, so
        # equal charts are the same tuple of the same objects and memos can live on the top set
        ikey = (chart[keep - 1] if keep else None, key)
        got = self._interned.get(ikey)
        if got is None:
            if len(self._interned) >= self.intern_size:
                self._interned.clear()  # only sharing is lost: every set still tops one chart
                self._built.clear()
            got = self._interned[ikey] = chart[:keep] + (ESet(scan, wait, accepting, items, key, max_ref),)
        return got

    def step(self, chart: tuple, byte: int) -> tuple | None:
        """Scan one byte; ``None`` if rejected (the chart given is unchanged). With ``memo``, the
        result is kept on the chart's top set (the ZapFormat state cache applied to transitions:
        an interned set identifies its whole chart)."""
        last = chart[-1]
        if self.memo:
            got = last.steps.get(byte, _MISSING)
            if got is _MISSING:
                got = last.steps[byte] = self._step(chart, byte)
            return got
        return self._step(chart, byte)

    def _step(self, chart: tuple, byte: int) -> tuple | None:
        j = len(chart) - 1
        last = chart[-1]
        seeds = []
        append = seeds.append
        for (t, s), its in last.scan.items():
            s2 = self.t_trans[t][s][byte]
            if s2 < 0:
                continue
            mid = self.t_has_out[t][s2]
            acc = self.t_accept[t][s2]
            for d, _, o, ov in its:
                oo = j if o == SELF else o
                if mid:
                    append((d, s2, oo, ov))
                if acc:
                    append((d + 1, 0, oo, ov))
        if not seeds:
            return None
        return self._build(chart, seeds)

    def accept_bytes(self, chart: tuple, data: bytes) -> tuple | None:
        """Scan every byte of ``data``; ``None`` if any is rejected.

        Fast engine (``memo`` and pruning): when the chart waits on one terminal state only and
        every byte but the last keeps that terminal's DFA alive in a non-accepting state, no item
        completes before the last byte, so the pruned chart after ``data`` is the one built from
        the items advanced to the DFA's final state: one Earley set is built instead of one per
        byte (e.g. a token inside a string)."""
        last = chart[-1]
        if self.memo and self.prune and len(data) > 1 and len(last.scan) == 1 and data[0] not in last.steps:
            got = self._accept_inside(chart, data)
            if got is not _MISSING:
                return got
        for b in data:
            chart = self.step(chart, b)
            if chart is None:
                return None
        return chart

    def _accept_inside(self, chart: tuple, data: bytes):
        """``accept_bytes`` for a chart waiting on one terminal state, or ``_MISSING`` when an
        item could complete before the last byte (then bytes are stepped one by one)."""
        ((t, s), its), = chart[-1].scan.items()
        trans, acc, has_out = self.t_trans[t], self.t_accept[t], self.t_has_out[t]
        for b in data[:-1]:
            s = trans[s][b]
            if s < 0:
                return None
            if acc[s] or not has_out[s]:
                return _MISSING
        s2 = trans[s][data[-1]]
        if s2 < 0:
            return None
        j = len(chart) - 1
        mid, ok = has_out[s2], acc[s2]
        seeds = []
        for d, _, o, ov in its:
            oo = j if o == SELF else o
            if mid:
                seeds.append((d, s2, oo, ov))
            if ok:
                seeds.append((d + 1, 0, oo, ov))
        return self._build(chart, seeds) if seeds else None

    def exit_chart(self, chart: tuple, t: int, s: int, a: int) -> tuple | None:
        """The chart after the items waiting on terminal ``t`` in DFA state ``s`` consumed some
        bytes that led the DFA to state ``a`` and nothing else survived (used by the mask to
        check what may follow a terminal inside one token)."""
        j = len(chart) - 1
        its = chart[-1].scan.get((t, s))
        if not its:
            return None
        mid, acc = self.t_has_out[t][a], self.t_accept[t][a]
        seeds = []
        for d, _, o, ov in its:
            oo = j if o == SELF else o
            if mid:
                seeds.append((d, a, oo, ov))
            if acc:
                seeds.append((d + 1, 0, oo, ov))
        if not seeds:
            return None
        if not self.memo:
            return self._build(chart, seeds)
        # pruned, the result depends only on the chart below the top set unless a seed starts at
        # the top set (the exit chart is then shared by every state of a counted string)
        base = chart[-1] if not self.prune or j == 0 or j in [o for _, _, o, _ in seeds] else chart[-2]
        bkey = (base, tuple(seeds))
        got = self._built.get(bkey, _MISSING)
        if got is _MISSING:
            got = self._built[bkey] = self._build(chart, seeds)
        return got

    def accept_token(self, chart: tuple, token_id: int, data: bytes):
        """``accept_bytes`` of a token's bytes; with ``memo`` the result is kept on the chart's
        top set per token id."""
        if not self.memo:
            return self.accept_bytes(chart, data)
        memo = chart[-1].tokens
        c = memo.get(token_id, _MISSING)
        if c is _MISSING:
            c = memo[token_id] = self.accept_bytes(chart, data)
        return c

    # ------------------------------------------------------------------------------------
    @staticmethod
    def top(chart: tuple):
        """The chart's last Earley set (with ``memo``, interned: it identifies the chart)."""
        return chart[-1]

    @staticmethod
    def scan_keys(chart: tuple):
        """The (terminal, DFA state) pairs the chart's last set waits on."""
        return chart[-1].scan

    @staticmethod
    def depth(chart: tuple) -> int:
        """Earley sets in the chart."""
        return len(chart)

    @staticmethod
    def can_terminate(chart: tuple) -> bool:
        """The bytes so far form a complete sentence."""
        return bool(chart[-1].accepting)

    def allowed_first_bytes(self, chart: tuple) -> np.ndarray:
        """``bool[256]``: the bytes the next step accepts (memoised on the last set; do not
        modify the array returned)."""
        last = chart[-1]
        if last.first is None:
            out = np.zeros(256, bool)
            for t, s in last.scan:
                out |= self.t_live[t][s]
            last.first = out
        return last.first

    def first_list(self, chart: tuple) -> list:
        """``allowed_first_bytes`` as a Python list of 256 bools (memoised on the last set)."""
        last = chart[-1]
        if last.first_l is None:
            last.first_l = self.allowed_first_bytes(chart).tolist()
        return last.first_l

    @staticmethod
    def live_items(chart: tuple) -> int:
        """Items stored in the chart (the paper's memory measure)."""
        return sum(s.n_items for s in chart)

    @staticmethod
    def chart_key(chart: tuple) -> tuple:
        """A hashable key equal for charts with equal content at equal columns."""
        return tuple(s.key for s in chart)

    def recognizes(self, data: bytes) -> bool:
        """Full match of ``data``."""
        c = self.accept_bytes(self.initial(), data)
        return c is not None and self.can_terminate(c)

    def is_prefix(self, data: bytes) -> bool:
        """``data`` is a prefix of some sentence."""
        return self.accept_bytes(self.initial(), data) is not None
