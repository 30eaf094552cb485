"""Regular expressions compiled to byte-level DFAs (the regex terminals of the Earley engine).

ZapFormat's engine (Formatron / kbnf; "Earley-Driven Dynamic Pruning for Efficient Structured
Decoding", ICML 2025, Sec. 3) scans bytes, and every regex terminal is a dense DFA over bytes
whose state id is carried in the Earley item. This module parses a regex over Unicode code points,
expands every character class into its UTF-8 byte sequences (so a token that is only part of a
UTF-8 character is handled like any other byte string), builds a Thompson NFA, determinises it
(subset construction over byte classes), trims states that cannot reach acceptance, and minimises
it (Moore partition refinement). Intersection and difference of DFAs (product construction) give
``pattern`` combined with length bounds and "any key except the listed ones" in JSON Schema.

Supported syntax: literals, escapes (``\\n \\t \\r \\f \\v \\0 \\xHH \\uHHHH \\u{H..}``, escaped
metacharacters), ``.`` (any character except ``\\n \\r U+2028 U+2029``, as in ECMA-262), classes
``[...]`` / ``[^...]`` with ranges and ``\\d \\w \\s`` (ASCII: ``[0-9]``, ``[A-Za-z0-9_]``,
``[ \\t\\n\\r\\f\\v]``; a subset of both the ECMA-262 and Python meanings, so a string we allow
matches under either), groups ``( )`` and ``(?: )``, ``|``, quantifiers ``* + ? {n} {n,} {n,m}``
(lazy ``?`` suffix accepted; it does not change the language). Anchors ``^``/``$`` only at the
ends. Backreferences and lookaround are rejected with ``ValueError`` (not regular).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = ["DFA", "clear_caches", "byte_class_columns", "parse_regex", "compile_regex", "dfa_from_ast", "literal_dfa", "intersect", "difference", "quoted_repeat", "Counter",
           "MAX_CODEPOINT", "utf8_sequences", "json_string_ast", "Node", "EngineSizeLimit", "MAX_DFA_STATES"]

MAX_CODEPOINT = 0x10FFFF
_SURR_LO, _SURR_HI = 0xD800, 0xDFFF
MAX_DFA_STATES = 200_000


class EngineSizeLimit(ValueError):
    """A regex or grammar is over one of the engine's hard caps (``MAX_DFA_STATES``,
    ``grammar.MAX_RULES``): a size limit, not invalid input."""


def _intern(key, index: dict, order: list, what: str) -> int:
    """The state number of ``key`` in a subset / product construction, adding it if new."""
    j = index.get(key)
    if j is None:
        j = len(order)
        if j > MAX_DFA_STATES:
            raise EngineSizeLimit(f"{what} exceeds {MAX_DFA_STATES} states")
        index[key] = j
        order.append(key)
    return j

# --------------------------------------------------------------------------------------------
# AST: ("set", ranges) | ("cat", [nodes]) | ("alt", [nodes]) | ("rep", node, lo, hi|None)
#      | ("bytes", b"...")  (raw bytes, used for JSON escapes and literals)
Node = tuple


def _norm(ranges) -> tuple:
    rs = sorted((int(a), int(b)) for a, b in ranges if a <= b)
    out: list[list[int]] = []
    for a, b in rs:
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _negate(ranges) -> tuple:
    out, nxt = [], 0
    for a, b in _norm(ranges):
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = b + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return _norm(out)


_DIGIT = ((0x30, 0x39),)
_WORD = _norm([(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A), (0x5F, 0x5F)])
_SPACE = _norm([(0x20, 0x20), (0x09, 0x0D)])
_DOT = _negate([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
_CLASS_ESC = {"d": _DIGIT, "D": _negate(_DIGIT), "w": _WORD, "W": _negate(_WORD), "s": _SPACE, "S": _negate(_SPACE)}
_SIMPLE_ESC = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "0": 0, "a": 7, "e": 27}


class _Parser:
    def __init__(self, text: str):
        self.s, self.i = text, 0

    def error(self, msg: str):
        raise ValueError(f"regex {self.s!r}: {msg} at position {self.i}")

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else None

    def take(self):
        c = self.peek()
        if c is None:
            self.error("unexpected end")
        self.i += 1
        return c

    def parse(self) -> Node:
        node = self.alt()
        if self.i != len(self.s):
            self.error(f"unexpected {self.s[self.i]!r}")
        return node

    def alt(self) -> Node:
        branches = [self.cat()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.cat())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def cat(self) -> Node:
        items = []
        while self.peek() not in (None, "|", ")"):
            items.append(self.repeat())
        return items[0] if len(items) == 1 else ("cat", items)

    def repeat(self) -> Node:
        atom = self.atom()
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{" and self._is_bound():
                lo, hi = self._bound()
            else:
                return atom
            if self.peek() == "?":
                self.i += 1  # lazy: same language
            elif self.peek() == "+":
                self.error("possessive quantifiers are not supported")
            atom = ("rep", atom, lo, hi)

    def _is_bound(self) -> bool:
        j = self.s.find("}", self.i)
        if j < 0:
            return False
        body = self.s[self.i + 1:j]
        parts = body.split(",")
        return 1 <= len(parts) <= 2 and parts[0].strip().isdigit() and all(p.strip().isdigit() or p.strip() == "" for p in parts[1:])

    def _bound(self) -> tuple[int, int | None]:
        j = self.s.index("}", self.i)
        body = self.s[self.i + 1:j]
        self.i = j + 1
        if "," in body:
            a, b = body.split(",")
            lo, hi = int(a), (int(b) if b.strip() else None)
        else:
            lo = hi = int(body)
        if hi is not None and hi < lo:
            self.error(f"bad bound {{{body}}}")
        return lo, hi

    def atom(self) -> Node:
        c = self.take()
        if c == "(":
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                self.error("lookaround and named/inline groups are not supported")
            node = self.alt()
            if self.take() != ")":
                self.error("expected ')'")
            return node
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            return ("set", _DOT)
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            self.error(f"nothing to repeat before {c!r}")
        if c in "^$":
            self.error("anchors are only supported at the start/end of the whole regex")
        if c == ")":
            self.error("unbalanced ')'")
        return ("set", ((ord(c), ord(c)),))

    def _hex(self, n: int) -> int:
        h = self.s[self.i:self.i + n]
        if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
            self.error("bad hex escape")
        self.i += n
        return int(h, 16)

    def escape(self, in_class: bool):
        c = self.take()
        if c in _CLASS_ESC:
            return ("set", _CLASS_ESC[c]) if not in_class else _CLASS_ESC[c]
        if c in _SIMPLE_ESC:
            cp = _SIMPLE_ESC[c]
        elif c == "b" and in_class:
            cp = 8
        elif c == "x":
            cp = self._hex(2)
        elif c == "u":
            if self.peek() == "{":
                j = self.s.index("}", self.i)
                cp = int(self.s[self.i + 1:j], 16)
                self.i = j + 1
            else:
                cp = self._hex(4)
        elif c.isdigit() or c in "bBkpP":
            self.error(f"escape \\{c} is not supported")
        elif c.isalnum():
            self.error(f"unknown escape \\{c}")
        else:
            cp = ord(c)
        if cp > MAX_CODEPOINT:
            self.error("code point out of range")
        return ("set", ((cp, cp),)) if not in_class else ((cp, cp),)

    def char_class(self) -> tuple:
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list = []
        first = True
        while True:
            c = self.take()
            if c == "]" and not first:
                break
            first = False
            if c == "\\":
                r = self.escape(in_class=True)
            else:
                r = ((ord(c), ord(c)),)
            if len(r) == 1 and r[0][0] == r[0][1] and self.peek() == "-" and self.s[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                c2 = self.take()
                r2 = self.escape(in_class=True) if c2 == "\\" else ((ord(c2), ord(c2)),)
                if len(r2) != 1 or r2[0][0] != r2[0][1] or r2[0][0] < r[0][0]:
                    self.error("bad class range")
                r = ((r[0][0], r2[0][0]),)
            ranges.extend(r)
        return _negate(ranges) if negate else _norm(ranges)


def parse_regex(text: str) -> Node:
    """Parse ``text`` (a full-match regex; ``^``/``$`` allowed only at the ends) to an AST."""
    if not isinstance(text, str):
        raise TypeError(f"regex must be a str, got {type(text).__name__}")
    body = text
    if body.startswith("^"):
        body = body[1:]
    if body.endswith("$") and not body.endswith("\\$"):
        body = body[:-1]
    return _Parser(body).parse()


# --------------------------------------------------------------------------------------------
# UTF-8 expansion of code point ranges (the utf8-ranges construction)


def _utf8_len(cp: int) -> int:
    return 1 if cp <= 0x7F else 2 if cp <= 0x7FF else 3 if cp <= 0xFFFF else 4


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences whose concatenations are exactly the UTF-8 encodings of ``[lo, hi]``
    (surrogates excluded)."""
    out: list = []

    def rec(a: int, b: int):
        if a > b:
            return
        if a <= _SURR_HI and b >= _SURR_LO:
            rec(a, _SURR_LO - 1)
            rec(_SURR_HI + 1, b)
            return
        for edge in (0x7F, 0x7FF, 0xFFFF):
            if a <= edge < b:
                rec(a, edge)
                rec(edge + 1, b)
                return
        n = _utf8_len(a)
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if (a & ~m) != (b & ~m):
                if a & m:
                    rec(a, a | m)
                    rec((a | m) + 1, b)
                    return
                if (b & m) != m:
                    rec(a, (b & ~m) - 1)
                    rec(b & ~m, b)
                    return
        ea, eb = chr(a).encode("utf-8", "surrogatepass"), chr(b).encode("utf-8", "surrogatepass")
        out.append(list(zip(ea, eb)))

    rec(lo, hi)
    return out


# --------------------------------------------------------------------------------------------
# Thompson NFA over bytes


class _NFA:
    def __init__(self):
        self.eps: list[list[int]] = []
        self.edges: list[list[tuple[int, int, int]]] = []

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node: Node, start: int, end: int):
        kind = node[0]
        if kind == "set":
            for seq in (s for a, b in node[1] for s in utf8_sequences(a, b)):
                cur = start
                for k, (blo, bhi) in enumerate(seq):
                    nxt = end if k == len(seq) - 1 else self.state()
                    self.edges[cur].append((blo, bhi, nxt))
                    cur = nxt
        elif kind == "bytes":
            cur = start
            data = node[1]
            if not data:
                self.eps[start].append(end)
            for k, byte in enumerate(data):
                nxt = end if k == len(data) - 1 else self.state()
                self.edges[cur].append((byte, byte, nxt))
                cur = nxt
        elif kind == "cat":
            if not node[1]:
                self.eps[start].append(end)
            cur = start
            for k, child in enumerate(node[1]):
                nxt = end if k == len(node[1]) - 1 else self.state()
                self.build(child, cur, nxt)
                cur = nxt
        elif kind == "alt":
            for child in node[1]:
                self.build(child, start, end)
        elif kind == "rep":
            _, child, lo, hi = node
            cur = start
            for _k in range(lo):
                nxt = self.state()
                self.build(child, cur, nxt)
                cur = nxt
            if hi is None:
                loop = self.state()
                self.eps[cur].append(loop)
                body_end = self.state()
                self.build(child, loop, body_end)
                self.eps[body_end].append(loop)
                self.eps[loop].append(end)
            else:
                self.eps[cur].append(end)
                for _k in range(hi - lo):
                    nxt = self.state()
                    self.build(child, cur, nxt)
                    self.eps[nxt].append(end)
                    cur = nxt
        else:
            raise ValueError(f"unknown regex node {kind!r}")


# --------------------------------------------------------------------------------------------


class TransRows:
    """Rows of a transition table as Python lists, converted on first access (``rows[s][b]``)."""

    __slots__ = ("trans", "rows")

    def __init__(self, trans: np.ndarray):
        self.trans = trans
        self.rows = [None] * trans.shape[0]

    def __getitem__(self, s: int) -> list:
        r = self.rows[s]
        if r is None:
            r = self.rows[s] = self.trans[s].tolist()
        return r

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True, eq=False)
class Counter:
    """The structure of a ``quoted_repeat`` DFA (``"`` char{lo,hi} ``"``), kept so that token masks
    can treat its states as (characters so far ``k``, state ``i`` inside the character).

    State 0 is the opening quote's source, the last state is after the closing quote, and state
    ``1 + k * w + i`` is copy ``k`` (``k`` characters done), local state ``i`` of the character
    DFA's ``w`` non-accepting states (``i = 0`` its start). A bounded DFA (``hi`` not None) has
    full copies ``0 .. hi - 1`` and only the start of copy ``hi``; an unbounded one has copies
    ``0 .. lo`` and the last copy loops (the count saturates at ``lo``).

    Attributes:
        char: the character DFA.
        local: ``int32 [w, 256]``: next local state, ``w`` = a character is finished (back to
            local 0 with one more character), ``w + 1`` = the closing quote (from local 0 only),
            -1 = dead.
        lo, hi: the repeat bounds (``hi=None``: unbounded).
    """

    char: "DFA"
    local: np.ndarray
    lo: int
    hi: int | None

    @property
    def w(self) -> int:
        return int(self.local.shape[0])

    @cached_property
    def walk_key(self) -> tuple:
        """What a counted vocabulary walk depends on (the character DFA and ``local``), made once:
        the key of ``TokenIndex.count_base``'s cache."""
        return (self.char.key(), self.local.tobytes())

    def split(self, s: int, n_states: int) -> tuple[int, int] | None:
        """``(k, i)`` of state ``s``, or None for the opening and the final state."""
        if s <= 0 or s >= n_states - 1:
            return None
        return divmod(s - 1, self.w)


@dataclass
class DFA:
    """A trimmed byte DFA: ``trans[s, b]`` is the next state or -1 (dead); ``accept[s]``; start 0.

    Every state can reach an accepting state, so "not dead" means "still a viable prefix".
    ``has_out[s]``: the state has at least one live transition. ``counter``: set by
    ``quoted_repeat`` (its state layout, see ``Counter``), None otherwise.
    """

    trans: np.ndarray
    accept: np.ndarray
    has_out: np.ndarray = field(init=False)
    rows: "TransRows" = field(init=False, repr=False, compare=False)
    counter: "Counter | None" = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.trans = np.ascontiguousarray(self.trans, dtype=np.int32)
        self.accept = np.asarray(self.accept, dtype=bool)
        self.has_out = (self.trans >= 0).any(axis=1)
        self.rows = TransRows(self.trans)

    @property
    def trans_list(self) -> "TransRows":
        """``trans_list[s][b]``: ``trans`` as Python lists, row by row on first use (big
        counted-string DFAs never pay for the rows no text reaches)."""
        return self.rows

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])

    @property
    def empty(self) -> bool:
        """True when the DFA accepts no string at all."""
        return self.n_states == 0

    def matches(self, data: bytes) -> bool:
        """Full match of ``data``."""
        if self.empty:
            return False
        s = 0
        for b in data:
            s = self.trans_list[s][b]
            if s < 0:
                return False
        return bool(self.accept[s])

    def key(self) -> tuple:
        return (self.trans.tobytes(), self.accept.tobytes())


def _byte_classes(edge_lists) -> list[tuple[int, int]]:
    cuts = {0, 256}
    for edges in edge_lists:
        for lo, hi, _ in edges:
            cuts.add(lo)
            cuts.add(hi + 1)
    cuts = sorted(cuts)
    return [(cuts[i], cuts[i + 1] - 1) for i in range(len(cuts) - 1)]


def _determinise(nfa: _NFA, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    def closure(states) -> frozenset:
        out, stack = set(states), list(states)
        while stack:
            s = stack.pop()
            for t in nfa.eps[s]:
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)

    classes = _byte_classes(nfa.edges)
    class_lo = np.array([lo for lo, _ in classes])
    # each NFA edge covers a contiguous run of byte classes
    edge_cls = [[(int(np.searchsorted(class_lo, lo)), int(np.searchsorted(class_lo, hi, side="right")) - 1, t)
                 for lo, hi, t in edges] for edges in nfa.edges]
    first = closure([start])
    index = {first: 0}
    order = [first]
    rows: list[list[int]] = []
    k = 0
    while k < len(order):
        cur = order[k]
        k += 1
        row = [-1] * 256
        per_class: dict = {}
        for s in cur:
            for ca, cb, t in edge_cls[s]:
                for ci in range(ca, cb + 1):
                    per_class.setdefault(ci, set()).add(t)
        if per_class:
            for ci, targets in per_class.items():
                lo, hi = classes[ci]
                j = _intern(closure(targets), index, order, "regex DFA")
                row[lo:hi + 1] = [j] * (hi - lo + 1)
        rows.append(row)
    trans = np.array(rows, dtype=np.int32).reshape(len(rows), 256)
    accept = np.array([end in s for s in order], dtype=bool)
    return trans, accept


def _trim(trans: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keep the states reachable from 0 that can reach acceptance; renumber with start 0."""
    n = trans.shape[0]
    if n == 0:
        return trans, accept
    # co-reachable
    good = accept.copy()
    while True:
        nxt = good.copy()
        valid = trans >= 0
        t = np.where(valid, trans, 0)
        nxt |= (valid & good[t]).any(axis=1)
        if (nxt == good).all():
            break
        good = nxt
    if not good[0]:
        return np.zeros((0, 256), np.int32), np.zeros(0, bool)
    trans = np.where((trans >= 0) & good[np.where(trans >= 0, trans, 0)], trans, -1)
    # reachable from 0
    seen = np.zeros(n, bool)
    seen[0] = True
    frontier = [0]
    while frontier:
        nxt_states = np.unique(trans[frontier])
        nxt_states = nxt_states[nxt_states >= 0]
        new = nxt_states[~seen[nxt_states]]
        seen[new] = True
        frontier = new.tolist()
    keep = np.flatnonzero(seen & good)
    remap = np.full(n + 1, -1, np.int32)
    remap[keep] = np.arange(len(keep), dtype=np.int32)
    sub = trans[keep]
    sub = np.where(sub >= 0, remap[np.where(sub >= 0, sub, n)], -1).astype(np.int32)
    return sub, accept[keep]


def byte_class_columns(trans: np.ndarray) -> list[int]:
    """One representative byte per set of bytes with identical transition columns."""
    seen: dict = {}
    cols = np.ascontiguousarray(trans.T)  # one contiguous row per byte (a strided column per byte is slow)
    for b in range(cols.shape[0]):
        seen.setdefault(cols[b].tobytes(), b)
    return sorted(seen.values())


def clear_caches() -> None:
    """Forget memoised DFAs (for honest compile-time measurements)."""
    _DFA_CACHE.clear()


def _row_ids(mat: np.ndarray) -> np.ndarray:
    """Equal rows get equal ids (0..k-1), by a lexicographic sort."""
    n = mat.shape[0]
    order = np.lexsort(mat.T[::-1])
    srt = mat[order]
    gid = np.concatenate([[0], np.cumsum(np.any(srt[1:] != srt[:-1], axis=1))])
    out = np.empty(n, np.int64)
    out[order] = gid
    return out


def _minimise(trans: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moore partition refinement; the dead state is the implicit class -1."""
    n = trans.shape[0]
    if n <= 1:
        return trans, accept
    cls = accept.astype(np.int64)
    n_cls = len(np.unique(cls))
    sub = trans[:, byte_class_columns(trans)]  # one column per byte class
    valid = sub >= 0
    safe = np.where(valid, sub, 0)
    while True:
        tc = np.where(valid, cls[safe], -1)
        sig = np.concatenate([cls[:, None], tc], axis=1)
        new = _row_ids(sig)
        k = int(new.max()) + 1
        if k == n_cls:
            cls = new
            break
        cls, n_cls = new, k
    # renumber so that the start's class is 0, then by first appearance
    reps = {}
    for s in range(n):
        reps.setdefault(int(cls[s]), s)
    mapping = {int(cls[0]): 0}
    for c in sorted(reps, key=lambda c: reps[c]):
        mapping.setdefault(c, len(mapping))
    m = np.array([mapping[int(c)] for c in cls], np.int32)
    out = np.full((len(mapping), 256), -1, np.int32)
    acc = np.zeros(len(mapping), bool)
    for c, s in reps.items():
        row = trans[s]
        out[mapping[c]] = np.where(row >= 0, m[np.where(row >= 0, row, 0)], -1)
        acc[mapping[c]] = accept[s]
    return out, acc


_DFA_CACHE: dict = {}
_DFA_CACHE_SIZE = 4096


def dfa_from_ast(node: Node) -> DFA:
    """Determinise, trim and minimise the byte NFA of ``node`` (memoised by the AST)."""
    key = repr(node)
    hit = _DFA_CACHE.get(key)
    if hit is not None:
        return hit
    if node[0] == "bytes":
        data = node[1]
        n = len(data) + 1
        trans = np.full((n, 256), -1, np.int32)
        trans[np.arange(len(data)), np.frombuffer(bytes(data), np.uint8)] = np.arange(1, n)
        accept = np.zeros(n, bool)
        accept[-1] = True
        dfa = DFA(trans, accept)
    else:
        dfa = _dfa_from_ast(node)
    if len(_DFA_CACHE) >= _DFA_CACHE_SIZE:
        _DFA_CACHE.pop(next(iter(_DFA_CACHE)))
    _DFA_CACHE[key] = dfa
    return dfa


def _dfa_from_ast(node: Node) -> DFA:
    nfa = _NFA()
    s, e = nfa.state(), nfa.state()
    nfa.build(node, s, e)
    trans, accept = _determinise(nfa, s, e)
    trans, accept = _trim(trans, accept)
    trans, accept = _minimise(trans, accept)
    return DFA(trans, accept)


def compile_regex(text: str) -> DFA:
    """The byte DFA of the full-match regex ``text`` (UTF-8)."""
    return dfa_from_ast(parse_regex(text))


def literal_dfa(data: bytes) -> DFA:
    """The DFA of exactly ``data``."""
    return dfa_from_ast(("bytes", bytes(data)))


def _product(a: DFA, b: DFA, mode: str) -> DFA:
    if a.empty:
        return a
    b_empty = b.empty
    index = {(0, 0 if not b_empty else -1): 0}
    order = [(0, 0 if not b_empty else -1)]
    rows, acc = [], []
    k = 0
    while k < len(order):
        sa, sb = order[k]
        k += 1
        row = [-1] * 256
        ra = a.trans_list[sa]
        rb = b.trans_list[sb] if sb >= 0 else None
        for byte in range(256):
            ta = ra[byte]
            if ta < 0:
                continue
            tb = rb[byte] if rb is not None else -1
            if mode == "and" and tb < 0:
                continue
            row[byte] = _intern((ta, tb), index, order, "DFA product")
        rows.append(row)
        in_b = sb >= 0 and bool(b.accept[sb])
        acc.append(bool(a.accept[sa]) and (in_b if mode == "and" else not in_b))
    trans, accept = _trim(np.array(rows, np.int32).reshape(-1, 256), np.array(acc, bool))
    trans, accept = _minimise(trans, accept)
    return DFA(trans, accept)


def intersect(a: DFA, b: DFA) -> DFA:
    """The DFA of ``L(a) & L(b)``."""
    return _product(a, b, "and")


def difference(a: DFA, b: DFA) -> DFA:
    """The DFA of ``L(a) - L(b)``."""
    return _product(a, b, "minus")


# --------------------------------------------------------------------------------------------
# JSON string encodings

_SHORT_ESC = {0x22: b'\\"', 0x5C: b"\\\\", 0x08: b"\\b", 0x0C: b"\\f", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
_MUST_ESCAPE = _norm([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])


def _json_char(ranges) -> Node:
    """The JSON string encodings of the characters in ``ranges``: raw UTF-8 where RFC 8259 allows
    the character unescaped, else its escape (short form, or ``\\u00XX`` for other controls)."""
    raw = []
    esc = []
    for a, b in ranges:
        lo = a
        for ma, mb in _MUST_ESCAPE:
            if mb < lo or ma > b:
                continue
            if lo < ma:
                raw.append((lo, ma - 1))
            for cp in range(max(lo, ma), min(b, mb) + 1):
                esc.append(("bytes", _SHORT_ESC.get(cp, b"\\u%04x" % cp)))
            lo = mb + 1
        if lo <= b:
            raw.append((lo, b))
    branches = ([("set", _norm(raw))] if raw else []) + esc
    if not branches:
        return ("alt", [])
    return branches[0] if len(branches) == 1 else ("alt", branches)


def json_string_ast(char_ast: Node) -> Node:
    """Map a regex AST over decoded characters to the AST of its JSON-encoded form (quotes not
    included): every character class becomes the alternation of its encodings."""
    kind = char_ast[0]
    if kind == "set":
        return _json_char(char_ast[1])
    if kind in ("cat", "alt"):
        return (kind, [json_string_ast(c) for c in char_ast[1]])
    if kind == "rep":
        return ("rep", json_string_ast(char_ast[1]), char_ast[2], char_ast[3])
    if kind == "bytes":
        return json_string_ast(("cat", [("set", ((c, c),)) for c in char_ast[1].decode("utf-8")]))
    raise ValueError(f"unknown regex node {kind!r}")


def quoted_repeat(char: DFA, lo: int, hi: int | None) -> DFA:
    """The DFA of ``"`` char{lo,hi} ``"`` built directly (no subset construction), for a
    prefix-free ``char`` (its accepting states have no transitions) that never starts with ``"``:
    one copy of ``char``'s states per count, a finished character moves to the next copy.

    Built already trimmed (the layout of ``Counter``): every state of a full copy is reachable
    (``char`` is trimmed) and can finish its character, and of copy ``hi`` only the start is
    reachable (a finished character there would exceed ``hi``), so only that start is made."""
    if char.empty or char.has_out[char.accept].any() or char.trans[0, 0x22] >= 0:
        raise ValueError("quoted_repeat needs a prefix-free character DFA that cannot start with '\"'")
    if lo < 0 or (hi is not None and hi < lo):
        raise ValueError(f"quoted_repeat needs 0 <= lo <= hi, got {lo}, {hi}")
    inner = np.flatnonzero(~char.accept)  # the non-accepting states (the start first)
    pos = np.full(char.n_states, -1, np.int64)
    pos[inner] = np.arange(len(inner))
    w = len(inner)
    sub = char.trans[inner]  # [w, 256]
    live = sub >= 0
    safe = np.where(live, sub, 0)
    done = live & char.accept[safe]  # the byte finishes a character
    stay = live & ~done
    local = np.where(stay, pos[safe], -1)
    full = hi if hi is not None else lo + 1  # copies with all w states
    n = 1 + full * w + (1 if hi is not None else 0) + 1
    final = n - 1
    trans = np.full((n, 256), -1, np.int32)
    trans[0, 0x22] = 1  # the opening quote leads to copy 0's start
    for k in range(full):
        base = 1 + k * w
        nxt = k + 1 if hi is not None else min(k + 1, lo)
        block = np.where(stay, base + local, -1)
        trans[base:base + w] = np.where(done, 1 + nxt * w, block)
        if k >= lo:
            trans[base, 0x22] = final
    if hi is not None:
        trans[1 + hi * w, 0x22] = final
    accept = np.zeros(n, bool)
    accept[final] = True
    lmap = np.where(done, w, local).astype(np.int32)
    lmap[0, 0x22] = w + 1
    return DFA(trans, accept, counter=Counter(char, lmap, int(lo), None if hi is None else int(hi)))
