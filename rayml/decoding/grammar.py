"""Context-free grammars with regex terminals, and the EBNF text front-end.

A ``Grammar`` is what the Earley engine runs (ZapFormat / Formatron, ICML 2025, Sec. 3: a
byte-level Earley recognizer whose terminals are DFAs): nonterminals, productions whose right-hand
sides mix nonterminals (ids >= 0) and terminals (``-(t + 1)``), and the terminals as byte DFAs.
``GrammarBuilder.build`` normalises it: terminals that accept the empty string become an optional
nonterminal, empty-language terminals and non-productive or unreachable rules are removed, and
an augmented start rule ``S' -> S`` is added; a grammar that accepts nothing is a ``ValueError``.

EBNF text format (``parse_ebnf``)::

    # comment
    root   ::= "{" pair ("," pair)* "}"      # the start rule is `root`, else the first rule
    pair   ::= string ":" value
    string ::= /"[a-z]*"/                      # a regex terminal (``\\/`` for a slash)
    value  ::= [0-9]+ | 'true' | string        # "..." / '...' literals, [...] classes

Operators: juxtaposition, ``|``, grouping ``( )``, postfix ``* + ?`` and ``{n}``, ``{n,}``,
``{n,m}``. Rules end where the next ``name ::=`` begins (or at ``;``). Literal escapes follow JSON
(``\\n``, ``\\t``, ``\\"``, ``\\\\``, ``\\uXXXX``) plus ``\\xHH`` for a raw byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rayml.decoding.regex import (DFA, EngineSizeLimit, compile_regex, difference, dfa_from_ast, literal_dfa,
                                    parse_regex)

__all__ = ["Grammar", "GrammarBuilder", "parse_ebnf", "MAX_RULES"]

MAX_RULES = 200_000


@dataclass
class Grammar:
    """A normalised grammar (see the module docstring). ``start`` is the augmented start."""

    names: list[str]
    productions: list[tuple[int, tuple[int, ...]]]
    terminals: list[DFA]
    terminal_names: list[str]
    start: int
    nullable: frozenset = field(default_factory=frozenset)

    @property
    def n_nonterminals(self) -> int:
        return len(self.names)

    def describe(self) -> str:
        """The productions as text (for debugging and error messages)."""

        def sym(s):
            return self.names[s] if s >= 0 else self.terminal_names[-s - 1]

        return "\n".join(f"{self.names[l]} ::= {' '.join(sym(s) for s in r) or 'ε'}" for l, r in self.productions)


class GrammarBuilder:
    """Incremental construction of a ``Grammar`` (used by every front-end).

    Examples:
        >>> b = GrammarBuilder()
        >>> s = b.nonterminal("root")
        >>> b.add(s, [b.literal(b"a"), s]); b.add(s, [b.literal(b"b")])
        >>> g = b.build(s)
    """

    def __init__(self):
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        self.rules: list[tuple[int, tuple[int, ...]]] = []
        self.terminals: list[DFA] = []
        self.terminal_names: list[str] = []
        self._term_ids: dict[tuple, int] = {}
        self._fresh = 0

    def nonterminal(self, name: str) -> int:
        """The id of nonterminal ``name`` (created on first use)."""
        if name not in self._ids:
            self._ids[name] = len(self.names)
            self.names.append(name)
        return self._ids[name]

    def fresh(self, hint: str = "_g") -> int:
        """A new anonymous nonterminal."""
        self._fresh += 1
        return self.nonterminal(f"{hint}#{self._fresh}")

    def terminal(self, dfa: DFA, name: str) -> int:
        """The symbol of terminal ``dfa`` (deduplicated by the DFA's tables)."""
        key = dfa.key()
        if key not in self._term_ids:
            self._term_ids[key] = len(self.terminals)
            self.terminals.append(dfa)
            self.terminal_names.append(name)
        return -(self._term_ids[key] + 1)

    def literal(self, data: bytes) -> int:
        return self.terminal(literal_dfa(data), repr(bytes(data))[1:])

    def regex(self, text: str) -> int:
        return self.terminal(compile_regex(text), f"/{text}/")

    def add(self, lhs: int, rhs) -> None:
        """Add the production ``lhs -> rhs``."""
        if len(self.rules) >= MAX_RULES:
            raise EngineSizeLimit(f"grammar exceeds {MAX_RULES} productions")
        self.rules.append((lhs, tuple(rhs)))

    # combinators over symbol lists ---------------------------------------------------------
    def alt(self, branches, hint="_alt") -> int:
        n = self.fresh(hint)
        for br in branches:
            self.add(n, br)
        return n

    def star(self, body, hint="_star") -> int:
        """``body*`` as a left-recursive rule (left recursion needs no Leo items)."""
        n = self.fresh(hint)
        self.add(n, [])
        self.add(n, [n, *body])
        return n

    def repeat(self, body, lo: int, hi: int | None, hint="_rep") -> list[int]:
        """Symbols for ``body{lo,hi}`` (``hi=None``: unbounded)."""
        out = []
        for _ in range(lo):
            out.extend(body)
        if hi is None:
            out.append(self.star(body, hint))
        elif hi > lo:
            # nested optionals: (body (body (...)?)?)?
            tail = None
            for _ in range(hi - lo):
                n = self.fresh(hint)
                self.add(n, [])
                self.add(n, [*body] + ([tail] if tail is not None else []))
                tail = n
            out.append(tail)
        return out

    def build(self, start: int) -> Grammar:
        """Normalise and return the grammar starting at ``start``."""
        names = list(self.names)
        terms: list[DFA] = []
        tnames: list[str] = []
        tmap: dict[int, list[int]] = {}
        extra_rules = []
        empty = literal_dfa(b"")
        for t, dfa in enumerate(self.terminals):
            if dfa.empty:
                tmap[t] = None
                continue
            if dfa.accept[0]:
                nonempty = difference(dfa, empty)
                opt = len(names)
                names.append(f"{self.terminal_names[t]}?")
                extra_rules.append((opt, ()))
                if not nonempty.empty:
                    terms.append(nonempty)
                    tnames.append(self.terminal_names[t])
                    extra_rules.append((opt, (-len(terms),)))
                tmap[t] = [opt]
            else:
                terms.append(dfa)
                tnames.append(self.terminal_names[t])
                tmap[t] = [-len(terms)]
        rules = []
        for lhs, rhs in self.rules:
            new: list[int] = []
            ok = True
            for s in rhs:
                if s >= 0:
                    new.append(s)
                else:
                    m = tmap[-s - 1]
                    if m is None:
                        ok = False
                        break
                    new.extend(m)
            if ok:
                rules.append((lhs, tuple(new)))
        rules.extend(extra_rules)
        # productive nonterminals
        productive: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in rules:
                if lhs not in productive and all(s < 0 or s in productive for s in rhs):
                    productive.add(lhs)
                    changed = True
        if start not in productive:
            raise ValueError("grammar accepts no string (its start rule is not productive)")
        rules = [(l, r) for l, r in rules if l in productive and all(s < 0 or s in productive for s in r)]
        # reachable
        by_lhs: dict[int, list] = {}
        for l, r in rules:
            by_lhs.setdefault(l, []).append(r)
        reach, stack = {start}, [start]
        while stack:
            n = stack.pop()
            for r in by_lhs.get(n, []):
                for s in r:
                    if s >= 0 and s not in reach:
                        reach.add(s)
                        stack.append(s)
        rules = [(l, r) for l, r in rules if l in reach]
        aug = len(names)
        names.append("<start>")
        rules.append((aug, (start,)))
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in rules:
                if lhs not in nullable and all(s >= 0 and s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        return Grammar(names, rules, terms, tnames, aug, frozenset(nullable))


# --------------------------------------------------------------------------------------------
# EBNF text

_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<define>::=)
  | (?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)
  | (?P<dq>"(?:[^"\\\n]|\\.)*")
  | (?P<sq>'(?:[^'\\\n]|\\.)*')
  | (?P<cls>\[(?:[^\]\\]|\\.)*\])
  | (?P<re>/(?:[^/\\\n]|\\.)+/)
  | (?P<bound>\{\s*\d+\s*(?:,\s*\d*\s*)?\})
  | (?P<op>[|()*+?;])
""", re.VERBOSE)


def _unescape_literal(body: str) -> bytes:
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise ValueError("grammar: dangling backslash in literal")
        e = body[i]
        i += 1
        if e in "nrtbf":
            out += {"n": b"\n", "r": b"\r", "t": b"\t", "b": b"\b", "f": b"\f"}[e]
        elif e == "x":
            out.append(int(body[i:i + 2], 16))
            i += 2
        elif e == "u":
            out += chr(int(body[i:i + 4], 16)).encode("utf-8")
            i += 4
        else:
            out += e.encode("utf-8")
    return bytes(out)


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    toks, i = [], 0
    while i < len(text):
        m = _TOKEN.match(text, i)
        if not m:
            line = text.count("\n", 0, i) + 1
            raise ValueError(f"grammar: unexpected {text[i:i + 10]!r} on line {line}")
        if m.lastgroup != "ws":
            toks.append((m.lastgroup, m.group(), i))
        i = m.end()
    return toks


def parse_ebnf(text: str, start: str | None = None) -> Grammar:
    """Parse the EBNF text format (module docstring) to a normalised ``Grammar``.

    Args:
        text: the grammar.
        start: the start rule (default ``root`` if defined, else the first rule).

    Raises:
        ValueError: syntax errors, undefined or duplicate rules, a grammar accepting nothing.
    """
    if not isinstance(text, str):
        raise TypeError(f"grammar must be a str, got {type(text).__name__}")
    toks = _tokenize(text)
    # split into rules: name ::= ...
    rules: list[tuple[str, list]] = []
    i = 0
    while i < len(toks):
        if toks[i][0] == "op" and toks[i][1] == ";":
            i += 1
            continue
        if not (toks[i][0] == "name" and i + 1 < len(toks) and toks[i + 1][0] == "define"):
            raise ValueError(f"grammar: expected 'name ::=' at offset {toks[i][2]}, got {toks[i][1]!r}")
        name = toks[i][1]
        j = i + 2
        while j < len(toks) and not (toks[j][0] == "name" and j + 1 < len(toks) and toks[j + 1][0] == "define") \
                and not (toks[j][0] == "op" and toks[j][1] == ";"):
            j += 1
        rules.append((name, toks[i + 2:j]))
        i = j
    if not rules:
        raise ValueError("grammar: no rules")
    defined = [n for n, _ in rules]
    dup = {n for n in defined if defined.count(n) > 1}
    if dup:
        raise ValueError(f"grammar: rules defined twice: {sorted(dup)}")
    b = GrammarBuilder()
    for n in defined:
        b.nonterminal(n)

    def parse_alt(ts, k):
        branches = []
        seq, k = parse_seq(ts, k)
        branches.append(seq)
        while k < len(ts) and ts[k][1] == "|" and ts[k][0] == "op":
            seq, k = parse_seq(ts, k + 1)
            branches.append(seq)
        return branches, k

    def parse_seq(ts, k):
        seq: list[int] = []
        while k < len(ts) and not (ts[k][0] == "op" and ts[k][1] in "|)"):
            atom, k = parse_atom(ts, k)
            while k < len(ts) and (ts[k][0] == "bound" or (ts[k][0] == "op" and ts[k][1] in "*+?")):
                kind, val = ts[k][0], ts[k][1]
                k += 1
                if kind == "bound":
                    body = val.strip("{} ")
                    if "," in body:
                        a, c = body.split(",")
                        lo, hi = int(a), (int(c) if c.strip() else None)
                    else:
                        lo = hi = int(body)
                    if hi is not None and hi < lo:
                        raise ValueError(f"grammar: bad repetition {val}")
                else:
                    lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[val]
                atom = b.repeat(atom, lo, hi)
            seq.extend(atom)
        return seq, k

    def parse_atom(ts, k):
        kind, val, off = ts[k]
        if kind == "name":
            if val not in b._ids or val not in defined:
                raise ValueError(f"grammar: undefined rule {val!r}")
            return [b.nonterminal(val)], k + 1
        if kind in ("dq", "sq"):
            data = _unescape_literal(val[1:-1])
            return ([b.literal(data)] if data else []), k + 1
        if kind == "cls":
            return [b.terminal(dfa_from_ast(parse_regex(val)), val)], k + 1
        if kind == "re":
            body = val[1:-1].replace("\\/", "/")
            return [b.regex(body)], k + 1
        if kind == "op" and val == "(":
            branches, k = parse_alt(ts, k + 1)
            if k >= len(ts) or ts[k][1] != ")":
                raise ValueError(f"grammar: missing ')' after offset {off}")
            if len(branches) == 1:
                return branches[0], k + 1
            return [b.alt(branches)], k + 1
        raise ValueError(f"grammar: unexpected {val!r} at offset {off}")

    for name, ts in rules:
        branches, k = parse_alt(ts, 0)
        if k != len(ts):
            raise ValueError(f"grammar: unexpected {ts[k][1]!r} in rule {name!r}")
        for br in branches:
            b.add(b.nonterminal(name), br)
    if start is None:
        start = "root" if "root" in defined else defined[0]
    if start not in defined:
        raise ValueError(f"start must name a rule, got {start!r}")
    return b.build(b.nonterminal(start))
