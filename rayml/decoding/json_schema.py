"""JSON and JSON Schema front-ends: a schema compiled to a ``Grammar`` for the Earley engine.

Output format: compact JSON (no whitespace; separators ``,`` and ``:``), object properties in the
order of ``properties``, strings with RFC 8259 escapes. Every keyword below is enforced exactly
by the grammar; any other keyword is a ``ValueError`` at compile time naming it (never silently
ignored):

* ``type`` (a name or a list), ``enum``, ``const`` (values written as compact JSON),
* objects: ``properties``, ``required``, ``additionalProperties`` (``false``, ``true`` or a
  schema; absent means ``true`` as in the spec; extra keys come after the listed ones and are
  any string, with every RFC 8259 escape, that does not decode to a listed name),
* arrays: ``items`` (a schema), ``minItems``, ``maxItems``, ``uniqueItems: false``,
* strings: ``minLength``, ``maxLength`` (code points; an escape counts as one), ``pattern``
  (ECMA-262 subset of ``rayml.decoding.regex``, unanchored unless written with ``^...$``;
  combined with the length bounds by DFA intersection), ``format`` (``date-time``, ``date``,
  ``time``, ``email``, ``uuid``, ``ipv4``, ``ipv6``, ``uri``: the RFC regexes of
  ``rayml.decoding.formats``, intersected with ``pattern`` and the bounds; any other format is
  an error naming it),
* integers and numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``
  (numeric form); a bounded ``number`` is written without exponent and its bounds must be
  integers (a non-integer bound is a compile-time error),
* ``anyOf``, ``oneOf`` (alone in their schema, apart from annotations), ``$ref`` to ``#``,
  ``#/$defs/...`` or ``#/definitions/...`` (recursion allowed), ``$defs`` / ``definitions``,
* annotations, which do not constrain: ``title``, ``description``, ``$schema``, ``$id``,
  ``$comment``, ``default``, ``examples``, ``deprecated``, ``readOnly``, ``writeOnly``.

Assumed / restrictions (each keeps every output valid; some valid texts are not produced):
strings without ``pattern`` accept every RFC 8259 escape, except that a length-bounded
string never contains a lone high-surrogate escape (so the bound counts exactly what Python and
``jsonschema`` count: a surrogate pair is one character); ``pattern`` strings use only the escapes
RFC 8259 requires, and so do ``format`` strings; listed property names are written canonically; ``oneOf`` is compiled as ``anyOf`` and is exact only when its branches are
disjoint; without ``type``, the types implied by the keywords present are produced; integers
are produced without fraction or exponent; ``enum``/``const`` values that violate sibling keywords
are dropped when ``jsonschema`` is installed.
"""

from __future__ import annotations

import json
import math

from rayml.decoding.grammar import Grammar, GrammarBuilder
from rayml.decoding.formats import format_regex
from rayml.decoding.regex import (MAX_CODEPOINT, dfa_from_ast, difference, intersect, json_string_ast,
                                     parse_regex, quoted_repeat)

__all__ = ["json_grammar", "schema_grammar", "clear_caches", "string_counters", "SUPPORTED_KEYWORDS", "ANNOTATIONS", "int_range_regex",
           "number_range_regex", "JSON_NUMBER", "JSON_INTEGER"]

ANNOTATIONS = frozenset({"title", "description", "$schema", "$id", "$comment", "default", "examples", "deprecated",
                         "readOnly", "writeOnly"})
SUPPORTED_KEYWORDS = frozenset({"type", "enum", "const", "properties", "required", "additionalProperties", "items",
                                "minItems", "maxItems", "uniqueItems", "minLength", "maxLength", "pattern", "minimum",
                                "maximum", "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "$ref", "$defs",
                                "definitions", "format"}) | ANNOTATIONS
_FAMILY = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "minItems", "maxItems", "uniqueItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
}
_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
MAX_REPEAT = 10_000

JSON_INTEGER = r"-?(0|[1-9][0-9]*)"
JSON_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"

_ALL = ("set", ((0, MAX_CODEPOINT),))
_UNESCAPED = ("set", ((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CODEPOINT)))
_HEX = ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
_D = ("set", ((0x44, 0x44), (0x64, 0x64)))
_NON_SURROGATE_U = ("alt", [
    ("cat", [("set", ((0x30, 0x39), (0x41, 0x43), (0x61, 0x63), (0x45, 0x46), (0x65, 0x66))),
             ("rep", ("set", _HEX), 3, 3)]),
    ("cat", [_D, ("set", ((0x30, 0x37),)), ("rep", ("set", _HEX), 2, 2)]),
])
_HIGH = ("cat", [("bytes", b"\\u"), _D, ("set", ((0x38, 0x39), (0x41, 0x42), (0x61, 0x62))), ("set", _HEX), ("set", _HEX)])
_LOW = ("cat", [("bytes", b"\\u"), _D, ("set", ((0x43, 0x46), (0x63, 0x66))), ("set", _HEX), ("set", _HEX)])
_SHORT = ("cat", [("bytes", b"\\"), ("set", tuple((ord(c), ord(c)) for c in '"\\/bfnrt'))])
# Any RFC 8259 string character (every \uXXXX, lone surrogates included): for unbounded strings.
_ANY_CHAR = ("alt", [_UNESCAPED, ("cat", [("bytes", b"\\"), ("alt", [
    ("set", tuple((ord(c), ord(c)) for c in '"\\/bfnrt')), ("cat", [("bytes", b"u"), ("rep", ("set", _HEX), 4, 4)])])])])
# One *counted* character (what Python / jsonschema count as one code point): a surrogate pair
# escape is one character, a lone low surrogate escape is one; a lone high surrogate escape is
# not produced (it would be ambiguous with the start of a pair).
_JSON_CHAR = ("alt", [_UNESCAPED, _SHORT, ("cat", [("bytes", b"\\u"), _NON_SURROGATE_U]), ("cat", [_HIGH, _LOW]), _LOW])


_STRING_DFAS: dict = {}


def _string_dfa(char_ast, lo: int, hi: int | None):
    """``"`` char{lo,hi} ``"`` as a DFA (memoised)."""
    key = (repr(char_ast), lo, hi)
    if key not in _STRING_DFAS:
        _STRING_DFAS[key] = quoted_repeat(dfa_from_ast(char_ast), lo, hi)
    return _STRING_DFAS[key]


def string_counters() -> list:
    """The ``Counter`` of each string character DFA this compiler builds strings from (any
    character, and one counted character for length bounds): a ``TokenIndex`` precomputes their
    counted vocabulary walks once (``TokenIndex.precompute_strings``)."""
    return [_string_dfa(ast, 0, None).counter for ast in (_ANY_CHAR, _JSON_CHAR)]


def clear_caches() -> None:
    """Forget memoised DFAs (for honest compile-time measurements)."""
    from rayml.decoding import regex

    _STRING_DFAS.clear()
    regex.clear_caches()


def _hex_ci(digits: str) -> list:
    """``digits`` as hex digits in either case."""
    return [("set", tuple(sorted({(ord(d.lower()),) * 2, (ord(d.upper()),) * 2}))) for d in digits]


def _all_spellings(name: str) -> tuple:
    """Every JSON string literal (quotes included) that decodes to ``name``: each character raw
    (where RFC 8259 allows it), as its short escape, or as ``\\uXXXX`` in either case (a surrogate
    pair of escapes above U+FFFF)."""
    chars = []
    for ch in name:
        cp = ord(ch)
        alts = []
        if cp >= 0x20 and ch not in '"\\' and not 0xD800 <= cp <= 0xDFFF:
            alts.append(("bytes", ch.encode("utf-8", "surrogatepass")))
        short = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}.get(ch)
        if short:
            alts.append(("bytes", b"\\" + short.encode()))
        units = [cp] if cp <= 0xFFFF else [0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)]
        alts.append(("cat", [x for u in units for x in (("bytes", b"\\u"), *_hex_ci(f"{u:04x}"))]))
        chars.append(alts[0] if len(alts) == 1 else ("alt", alts))
    return _quoted(("cat", chars))


def _quoted(body) -> tuple:
    return ("cat", [("bytes", b'"'), body, ("bytes", b'"')])


# --------------------------------------------------------------------------------------------
# integer / number ranges as regexes


def _same_len(x: str, y: str) -> str:
    if len(x) == 1:
        return f"[{x}-{y}]"
    if x[0] == y[0]:
        return x[0] + _same_len(x[1:], y[1:])
    n = len(x) - 1
    parts = [x[0] + _same_len(x[1:], "9" * n)]
    if int(x[0]) + 1 <= int(y[0]) - 1:
        parts.append(f"[{int(x[0]) + 1}-{int(y[0]) - 1}][0-9]{{{n}}}")
    parts.append(y[0] + _same_len("0" * n, y[1:]))
    return "(" + "|".join(parts) + ")"


def _nonneg_range(a: int, b: int | None) -> str | None:
    """Regex of the decimal integers in ``[a, b]`` (``b=None``: unbounded), ``0 <= a``."""
    if b is not None and b < a:
        return None
    parts = []
    la = len(str(a))
    lb = len(str(b)) if b is not None else None
    top = lb if lb is not None else la
    for L in range(la, top + 1):
        lo = str(a) if L == la else "1" + "0" * (L - 1)
        hi = str(b) if (lb is not None and L == lb) else "9" * L
        if L == 1:
            parts.append(f"[{lo}-{hi}]")
        else:
            parts.append(_same_len(lo, hi))
    if b is None:
        parts.append(f"[1-9][0-9]{{{la},}}")
    return "(" + "|".join(parts) + ")"


def int_range_regex(lo: int | None, hi: int | None) -> str:
    """Regex of the JSON integers in ``[lo, hi]`` (``None``: unbounded); ``ValueError`` if empty."""
    parts = []
    if hi is None or hi >= 0:
        r = _nonneg_range(max(lo, 0) if lo is not None else 0, hi)
        if r:
            parts.append(r)
    if lo is None or lo < 0:
        a = 1 if hi is None or hi >= 0 else -hi
        r = _nonneg_range(a, None if lo is None else -lo)
        if r:
            parts.append("-" + r)
    if not parts:
        raise ValueError(f"integer bounds [{lo}, {hi}] admit no value")
    return "(" + "|".join(parts) + ")"


_FRAC = {"any": r"(\.[0-9]+)?", "zero": r"(\.0+)?", "nonzero": r"\.[0-9]*[1-9][0-9]*"}


def _meet(k1: str, k2: str) -> str | None:
    if k1 == "any":
        return k2
    if k2 == "any" or k1 == k2:
        return k1
    return None


def _magnitude_pieces(lo, lo_excl, hi, hi_excl) -> list[tuple[int, int | None, str]]:
    """Pieces ``(n_lo, n_hi, fraction kind)`` of decimals ``n.f >= 0`` within the integer bounds
    (``lo``/``hi`` may be ``None``)."""
    lower = [(0, None, "any")]
    if lo is not None and lo >= 0:
        lower = [(lo + 1, None, "any"), (lo, lo, "nonzero")] if lo_excl else [(lo, None, "any")]
    upper = [(0, None, "any")]
    if hi is not None:
        if hi < 0:
            return []
        upper = [(0, hi - 1, "any")] if hi_excl else [(0, hi - 1, "any"), (hi, hi, "zero")]
    out = []
    for a1, b1, k1 in lower:
        for a2, b2, k2 in upper:
            k = _meet(k1, k2)
            a = max(a1, a2)
            b = b2 if b1 is None else (b1 if b2 is None else min(b1, b2))
            if k is not None and (b is None or a <= b):
                out.append((a, b, k))
    return out


def number_range_regex(lo, lo_excl: bool, hi, hi_excl: bool) -> str:
    """Regex of JSON decimals (no exponent) ``x`` with ``lo <(=) x <(=) hi``; integer bounds."""
    parts = []
    # x >= 0
    for a, b, k in _magnitude_pieces(lo if lo is not None and lo > 0 else (0 if lo is not None and lo == 0 else None),
                                     lo_excl if lo is not None and lo >= 0 else False, hi, hi_excl):
        parts.append(_nonneg_range(a, b) + _FRAC[k])
    # x < 0: magnitude m = -x > 0 with -hi <(=) m <(=) -lo
    if lo is None or lo < 0:
        mlo, mlo_excl = (0, True)
        if hi is not None and hi < 0:
            mlo, mlo_excl = -hi, hi_excl
        mhi, mhi_excl = (None if lo is None else -lo), lo_excl
        for a, b, k in _magnitude_pieces(mlo, mlo_excl, mhi, mhi_excl):
            parts.append("-" + _nonneg_range(a, b) + _FRAC[k])
    if not parts:
        raise ValueError(f"number bounds admit no value: {lo}, {hi}")
    return "(" + "|".join(parts) + ")"


# --------------------------------------------------------------------------------------------


class _Compiler:
    def __init__(self, root, whitespace: bool):
        self.root = root
        self.b = GrammarBuilder()
        self.refs: dict[str, int] = {}
        self._value = None
        self.ws = whitespace
        self._validator = None
        try:
            import jsonschema  # noqa: F401
            self._jsonschema = jsonschema
        except ImportError:  # pragma: no cover
            self._jsonschema = None

    # terminals ----------------------------------------------------------------------------
    def lit(self, text: str) -> int:
        return self.b.literal(text.encode("utf-8"))

    def sep(self, text: str) -> list[int]:
        if self.ws:
            w = self.b.regex(r"[ \t\n\r]{0,4}")
            return [w, self.lit(text), w]
        return [self.lit(text)]

    def term(self, ast, name: str) -> int:
        return self.b.terminal(dfa_from_ast(ast), name)

    def generic_string(self) -> int:
        return self.b.terminal(_string_dfa(_ANY_CHAR, 0, None), "string")

    # generic JSON ---------------------------------------------------------------------------
    def any_value(self) -> int:
        if self._value is not None:
            return self._value
        b = self.b
        v = self._value = b.nonterminal("json_value")
        obj, arr = b.nonterminal("json_object"), b.nonterminal("json_array")
        s = self.generic_string()
        member = [s, *self.sep(":"), v]
        b.add(obj, [self.lit("{"), self.lit("}")])
        b.add(obj, [self.lit("{"), *member, b.star([*self.sep(","), *member]), self.lit("}")])
        b.add(arr, [self.lit("["), self.lit("]")])
        b.add(arr, [self.lit("["), v, b.star([*self.sep(","), v]), self.lit("]")])
        for alt in ([obj], [arr], [s], [b.regex(JSON_NUMBER)], [self.lit("true")], [self.lit("false")],
                    [self.lit("null")]):
            b.add(v, alt)
        return v

    # schemas ------------------------------------------------------------------------------
    def resolve(self, ref: str):
        if ref == "#":
            return self.root
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                node = self.root.get(prefix[2:-1], {}) if isinstance(self.root, dict) else {}
                name = ref[len(prefix):].replace("~1", "/").replace("~0", "~")
                if name in node:
                    return node[name]
        raise ValueError(f"$ref {ref!r}: not found (supported: '#', '#/$defs/NAME', '#/definitions/NAME')")

    def schema(self, s, path: str = "#") -> int:
        """The nonterminal of schema ``s``."""
        b = self.b
        if s is True or s == {}:
            return self.any_value()
        if s is False:
            raise ValueError(f"{path}: schema `false` admits no value")
        if not isinstance(s, dict):
            raise ValueError(f"{path}: a schema must be an object or a boolean, got {type(s).__name__}")
        unknown = sorted(set(s) - SUPPORTED_KEYWORDS)
        if unknown:
            raise ValueError(f"{path}: unsupported JSON Schema keyword(s) {unknown}; supported: "
                             f"{sorted(SUPPORTED_KEYWORDS - ANNOTATIONS)}")
        if "format" in s:
            format_regex(s["format"], path)  # an unsupported format is an error whatever the type
        keys = set(s) - ANNOTATIONS - {"$defs", "definitions"}
        if "$ref" in s:
            if keys - {"$ref"}:
                raise ValueError(f"{path}: $ref with sibling keywords {sorted(keys - {'$ref'})} is not supported")
            ref = s["$ref"]
            if not isinstance(ref, str):
                raise ValueError(f"{path}: $ref must be a string")
            if ref not in self.refs:
                n = self.refs[ref] = b.nonterminal(f"ref:{ref}")
                b.add(n, [self.schema(self.resolve(ref), ref)])
            return self.refs[ref]
        for comb in ("anyOf", "oneOf"):
            if comb in s:
                if keys - {comb}:
                    raise ValueError(f"{path}: {comb} combined with {sorted(keys - {comb})} is not supported")
                subs = s[comb]
                if not isinstance(subs, list) or not subs:
                    raise ValueError(f"{path}: {comb} must be a non-empty list")
                n = b.fresh(comb)
                for i, sub in enumerate(subs):
                    b.add(n, [self.schema(sub, f"{path}/{comb}/{i}")])
                return n
        if "enum" in s or "const" in s:
            values = [s["const"]] if "const" in s else s["enum"]
            if "enum" in s and (not isinstance(values, list) or not values):
                raise ValueError(f"{path}: enum must be a non-empty list")
            if "const" in s and "enum" in s:
                values = [v for v in s["enum"] if v == s["const"]]
            rest = keys - {"enum", "const"}
            if rest and self._jsonschema is not None:
                check = {k: s[k] for k in rest}
                root_defs = {k: self.root[k] for k in ("$defs", "definitions") if isinstance(self.root, dict) and k in self.root}
                v = self._jsonschema.Draft202012Validator({**root_defs, **check})
                values = [x for x in values if v.is_valid(x)]
            if not values:
                raise ValueError(f"{path}: enum/const admits no value")
            n = b.fresh("enum")
            for v in values:
                try:
                    text = json.dumps(v, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
                except ValueError as exc:
                    raise ValueError(f"{path}: enum/const value {v!r} is not JSON") from exc
                b.add(n, [self.lit(text)])
            return n
        types = s.get("type")
        if types is None:
            implied = [t for t, fam in _FAMILY.items() if keys & fam]
            types = implied or list(_TYPES)
            if not implied:
                return self.any_value()
        if isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types or any(t not in _TYPES for t in types):
            raise ValueError(f"{path}: type must be one of {_TYPES} or a non-empty list of them, got {s.get('type')!r}")
        alts = [self.typed(t, s, path) for t in dict.fromkeys(types)]
        if len(alts) == 1:
            return alts[0]
        n = b.fresh("types")
        for a in alts:
            b.add(n, [a])
        return n

    def typed(self, t: str, s: dict, path: str) -> int:
        b = self.b
        n = b.fresh(t)
        if t == "null":
            b.add(n, [self.lit("null")])
        elif t == "boolean":
            b.add(n, [self.lit("true")])
            b.add(n, [self.lit("false")])
        elif t == "integer":
            lo, hi = self.bounds(s, path, integer=True)
            b.add(n, [b.regex(int_range_regex(lo, hi) if (lo, hi) != (None, None) else JSON_INTEGER)])
        elif t == "number":
            b.add(n, [b.regex(self.number_regex(s, path))])
        elif t == "string":
            b.add(n, [self.string_terminal(s, path)])
        elif t == "array":
            self.array(n, s, path)
        elif t == "object":
            self.object(n, s, path)
        return n

    @staticmethod
    def _num(s, k, path):
        v = s.get(k)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise ValueError(f"{path}: {k} must be a finite number, got {v!r}")
        return v

    def bounds(self, s, path, integer: bool):
        lo, hi = self._num(s, "minimum", path), self._num(s, "maximum", path)
        elo, ehi = self._num(s, "exclusiveMinimum", path), self._num(s, "exclusiveMaximum", path)
        if integer:
            cands_lo = [math.ceil(lo)] if lo is not None else []
            if elo is not None:
                cands_lo.append(math.floor(elo) + 1)
            cands_hi = [math.floor(hi)] if hi is not None else []
            if ehi is not None:
                cands_hi.append(math.ceil(ehi) - 1)
            return (max(cands_lo) if cands_lo else None), (min(cands_hi) if cands_hi else None)
        return lo, hi, elo, ehi

    def number_regex(self, s, path) -> str:
        lo, hi, elo, ehi = self.bounds(s, path, integer=False)
        if all(v is None for v in (lo, hi, elo, ehi)):
            return JSON_NUMBER
        for k, v in (("minimum", lo), ("maximum", hi), ("exclusiveMinimum", elo), ("exclusiveMaximum", ehi)):
            if v is not None and float(v) != int(v):
                raise ValueError(f"{path}: {k}={v!r}: a bounded number needs integer-valued bounds "
                                 f"(non-integer bounds are not supported)")
        low, low_ex = (None, False)
        if lo is not None:
            low, low_ex = int(lo), False
        if elo is not None and (low is None or elo >= low):
            low, low_ex = int(elo), True
        high, high_ex = (None, False)
        if hi is not None:
            high, high_ex = int(hi), False
        if ehi is not None and (high is None or ehi <= high):
            high, high_ex = int(ehi), True
        return number_range_regex(low, low_ex, high, high_ex)

    def string_terminal(self, s, path) -> int:
        mn, mx = s.get("minLength", 0), s.get("maxLength")
        for k, v in (("minLength", mn), ("maxLength", mx)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > MAX_REPEAT):
                raise ValueError(f"{path}: {k} must be an int in [0, {MAX_REPEAT}], got {v!r}")
        if mx is not None and mx < mn:
            raise ValueError(f"{path}: maxLength {mx} < minLength {mn}")
        pattern, fmt = s.get("pattern"), s.get("format")
        if pattern is None and fmt is None:
            if mn == 0 and mx is None:
                return self.generic_string()
            return self.b.terminal(_string_dfa(_JSON_CHAR, mn, mx), f"string{{{mn},{mx}}}")
        pat = None
        if pattern is not None:
            if not isinstance(pattern, str):
                raise ValueError(f"{path}: pattern must be a string")
            pat = self._pattern_dfa(pattern, f"{path}: pattern {pattern!r}")
        if fmt is not None:
            f = self._pattern_dfa(format_regex(fmt, path), f"{path}: format {fmt!r}")
            pat = f if pat is None else intersect(pat, f)
        if mn or mx is not None:
            pat = intersect(pat, _string_dfa(json_string_ast(_ALL), mn, mx))
        if pat.empty:
            what = " and ".join(x for x in (pattern is not None and f"pattern {pattern!r}",
                                            fmt is not None and f"format {fmt!r}") if x)
            raise ValueError(f"{path}: {what} with the length bounds admits no string")
        return self.b.terminal(pat, f"string/{pattern}/" if fmt is None else f"string:{fmt}/{pattern}/")

    @staticmethod
    def _pattern_dfa(pattern: str, where: str):
        """The DFA of the quoted JSON strings (canonical escapes) whose decoded text matches the
        regex ``pattern`` (a search, unless anchored by ``^`` / ``$``)."""
        try:
            anchored_start = pattern.startswith("^")
            anchored_end = pattern.endswith("$") and not pattern.endswith("\\$")
            ast = parse_regex(pattern)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
        parts = ([] if anchored_start else [("rep", _ALL, 0, None)]) + [ast] + \
                ([] if anchored_end else [("rep", _ALL, 0, None)])
        return dfa_from_ast(_quoted(json_string_ast(("cat", parts))))

    def array(self, n: int, s, path):
        b = self.b
        if s.get("uniqueItems", False) not in (False,):
            raise ValueError(f"{path}: uniqueItems=true is not supported")
        mn, mx = s.get("minItems", 0), s.get("maxItems")
        for k, v in (("minItems", mn), ("maxItems", mx)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > MAX_REPEAT):
                raise ValueError(f"{path}: {k} must be an int in [0, {MAX_REPEAT}], got {v!r}")
        if mx is not None and mx < mn:
            raise ValueError(f"{path}: maxItems {mx} < minItems {mn}")
        items = s.get("items", True)
        if isinstance(items, list):
            raise ValueError(f"{path}: items as a list (tuple validation) is not supported")
        item = self.schema(items, f"{path}/items")
        if mn == 0:
            b.add(n, [self.lit("["), self.lit("]")])
        if mx is None or mx >= 1:
            rest = b.repeat([*self.sep(","), item], max(mn - 1, 0), None if mx is None else mx - 1)
            b.add(n, [self.lit("["), item, *rest, self.lit("]")])

    def object(self, n: int, s, path):
        b = self.b
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise ValueError(f"{path}: properties must be an object")
        required = s.get("required", [])
        if not isinstance(required, list) or any(not isinstance(r, str) for r in required):
            raise ValueError(f"{path}: required must be a list of strings")
        names = list(props) + [r for r in required if r not in props]
        extra = s.get("additionalProperties", True)
        members = []
        for name in names:
            key = self.lit(json.dumps(name, ensure_ascii=False))
            val = self.schema(props.get(name, True), f"{path}/properties/{name}")
            members.append(([key, *self.sep(":"), val], name in required))
        extra_member = None
        if extra is not False:
            # an extra key is any JSON string (every RFC 8259 escape) except every spelling of a
            # listed name: "\u0061" is the property "a", not an extra key
            keys_dfa = _string_dfa(_ANY_CHAR, 0, None)
            if names:
                keys_dfa = difference(keys_dfa, dfa_from_ast(("alt", [_all_spellings(nm) for nm in names])))
            extra_member = [b.terminal(keys_dfa, "extra_key"), *self.sep(":"),
                            self.schema(extra, f"{path}/additionalProperties")]
        # first[i]: members i.. with none emitted yet; rest[i]: members i.. after one was emitted
        first_tail = b.fresh("obj_first")
        rest_tail = b.fresh("obj_rest")
        if extra_member is None:
            b.add(first_tail, [])
            b.add(rest_tail, [])
        else:
            more = b.star([*self.sep(","), *extra_member])
            b.add(first_tail, [])
            b.add(first_tail, [*extra_member, more])
            b.add(rest_tail, [more])
        for member, req in reversed(members):
            f, r = b.fresh("obj_first"), b.fresh("obj_rest")
            b.add(f, [*member, rest_tail])
            b.add(r, [*self.sep(","), *member, rest_tail])
            if not req:
                b.add(f, [first_tail])
                b.add(r, [rest_tail])
            first_tail, rest_tail = f, r
        b.add(n, [self.lit("{"), first_tail, self.lit("}")])


def json_grammar(*, whitespace: bool = False) -> Grammar:
    """The grammar of any JSON value (RFC 8259; compact unless ``whitespace``)."""
    c = _Compiler(True, whitespace)
    return c.b.build(c.any_value())


def schema_grammar(schema, *, whitespace: bool = False) -> Grammar:
    """The grammar of the JSON texts valid against ``schema`` (a dict, a JSON string or a bool).

    Raises:
        ValueError: an unsupported keyword or value, naming its path in the schema.
    """
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ValueError(f"schema is not valid JSON: {exc}") from exc
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"schema must be a dict, a bool or a JSON string, got {type(schema).__name__}")
    c = _Compiler(schema, whitespace)
    return c.b.build(c.schema(schema))
