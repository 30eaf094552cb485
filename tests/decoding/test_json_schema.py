"""JSON Schema front-end: numeric range regexes against brute force, every output of
mask-constrained random sampling parses and validates (``jsonschema``), unsupported keywords fail
at compile time."""

import json
import re
from decimal import Decimal

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rayml.decoding import (GrammarMatcher, byte_vocabulary, compile_json, compile_json_schema, load_mistral,
                               schema_grammar)
from rayml.decoding.json_schema import int_range_regex, number_range_regex


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.none(), st.integers(-130, 130)), st.one_of(st.none(), st.integers(-130, 130)))
def test_int_range_regex_brute_force(lo, hi):
    if lo is not None and hi is not None and lo > hi:
        with pytest.raises(ValueError, match="no value"):
            int_range_regex(lo, hi)
        return
    rx = re.compile(int_range_regex(lo, hi))
    for x in list(range(-300, 301)) + [10**6, -10**6]:
        inside = (lo is None or x >= lo) and (hi is None or x <= hi)
        assert (rx.fullmatch(str(x)) is not None) == inside, (lo, hi, x)
    assert rx.fullmatch("-0") is None and rx.fullmatch("01") is None


PROBES = ["0", "0.0", "0.5", "1", "1.0", "1.25", "2", "2.00", "2.5", "3", "-0.5", "-1", "-1.0", "-1.5", "-2", "-2.0",
          "-3.75", "10", "-10", "7.001", "-7.001"]


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.none(), st.integers(-4, 4)), st.booleans(), st.one_of(st.none(), st.integers(-4, 4)), st.booleans())
def test_number_range_regex_brute_force(lo, lo_ex, hi, hi_ex):
    def inside(x):
        return ((lo is None or (x > lo if lo_ex else x >= lo)) and (hi is None or (x < hi if hi_ex else x <= hi)))

    if not any(inside(Decimal(p)) for p in PROBES + ["0.001", "-0.001"]):
        return
    rx = re.compile(number_range_regex(lo, lo_ex, hi, hi_ex))
    for p in PROBES:
        assert (rx.fullmatch(p) is not None) == inside(Decimal(p)), (lo, lo_ex, hi, hi_ex, p)


DEFS_SCHEMA = {
    "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": -5, "maximum": 5},
                                                        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                 "maxItems": 2}},
                       "required": ["v"], "additionalProperties": False}},
    "$ref": "#/$defs/node",
}
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 2, "maxLength": 6},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                      "ok": {"type": "boolean"}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "number", "exclusiveMinimum": -2, "maximum": 3}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]+$", "maxLength": 6},
                                      "tag": {"type": "string", "pattern": "x", "maxLength": 4}},
     "required": ["code", "tag"], "additionalProperties": False},
    {"anyOf": [{"type": "null"}, {"enum": ["red", "grün", 3, [1, {"a": None}]]},
               {"type": "object", "properties": {"k": {"const": "v\"q"}}, "required": ["k"],
                "additionalProperties": False}]},
    {"oneOf": [{"type": "integer", "maximum": -1}, {"type": "string", "maxLength": 3}]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
     "additionalProperties": {"type": "boolean"}, "maxLength": 3},  # maxLength applies to strings only
    {"type": ["string", "null"], "maxLength": 2},
    DEFS_SCHEMA,
]
CLOSERS = frozenset(b'"]}')


def sample(matcher, vocab, rng, max_steps=400, budget=40):
    """Mask-constrained sampling with random logits; after ``budget`` steps, tokens with closing
    bytes get a bonus so that generations end."""
    bonus = np.array([sum(b in CLOSERS for b in t) for t in vocab.tokens] + [0] * (matcher.vocab_size - vocab.size),
                     float)
    out = b""
    for step in range(max_steps):
        allowed = matcher.allowed_tokens()
        assert allowed.size, f"dead end after {out!r}"
        logits = rng.standard_normal(allowed.size) * 2
        if step >= budget:
            logits = logits + 3 * bonus[allowed] + 8 * np.isin(allowed, vocab.eos_ids)
        tok = int(allowed[np.argmax(logits)])
        assert matcher.accept_token(tok)
        if tok in vocab.eos_ids:
            return out
        out += vocab.tokens[tok]
    raise AssertionError(f"no EOS within {max_steps} steps: {out!r}")


@pytest.fixture(scope="module")
def mistral():
    return load_mistral("mistral-32k")


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_random_sampling_outputs_validate(k, mistral):
    schema = SCHEMAS[k]
    rng = np.random.default_rng(k)
    for vocab, n in ((byte_vocabulary(), 6), (mistral, 4)):
        cg = compile_json_schema(schema, vocab)
        for _ in range(n):
            text = sample(GrammarMatcher(cg), vocab, rng).decode("utf-8")
            jsonschema.validate(json.loads(text), schema)


def test_generic_json_outputs_parse(mistral):
    rng = np.random.default_rng(1)
    cg = compile_json(mistral)
    for _ in range(4):
        json.loads(sample(GrammarMatcher(cg), mistral, rng, budget=25).decode("utf-8"))


@pytest.mark.parametrize("schema,match", [
    ({"type": "string", "format": "hostname"}, "format"),
    ({"type": "object", "patternProperties": {"a": {}}}, "patternProperties"),
    ({"type": "array", "prefixItems": [{}]}, "prefixItems"),
    ({"type": "number", "multipleOf": 2}, "multipleOf"),
    ({"type": "number", "minimum": 0.5}, "minimum"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "string", "maxLength": -1}, "maxLength"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no value"),
    ({"$ref": "#/$defs/missing"}, r"\$ref"),
    ({"type": "strin"}, "type"),
    ({"allOf": [{}]}, "allOf"),
    ({"type": "string", "pattern": "(a"}, "pattern"),
    ({"type": "string", "pattern": "^abc$", "maxLength": 2}, "admits no string"),
    (False, "admits no value"),
    ("{not json", "not valid JSON"),
])
def test_unsupported_or_bad_schema_is_compile_time_error(schema, match):
    with pytest.raises(ValueError, match=match):
        schema_grammar(schema)


def test_property_order_and_optional_commas():
    from rayml.decoding import EarleyEngine
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "null"}},
         "required": ["b"], "additionalProperties": False}
    eng = EarleyEngine(schema_grammar(s))
    for ok in [b'{"b":1}', b'{"a":1,"b":2}', b'{"b":2,"c":null}', b'{"a":-1,"b":0,"c":null}']:
        assert eng.recognizes(ok), ok
    for bad in [b'{}', b'{"a":1}', b'{"b":1,}', b'{,"b":1}', b'{"b":2,"a":1}', b'{"b":1,"d":1}', b'{"b":01}']:
        assert not eng.recognizes(bad), bad
    extra = EarleyEngine(schema_grammar({**s, "additionalProperties": {"type": "boolean"}}))
    assert extra.recognizes(b'{"b":1,"zz":true,"y":false}')
    assert not extra.recognizes(b'{"b":1,"a":true}')  # a listed name is not an extra key


def test_string_escapes_and_control_characters():
    from rayml.decoding import EarleyEngine
    eng = EarleyEngine(schema_grammar({"type": "string"}))
    for ok in [b'"a\\n\\u00e9\\/"', '"é\x7f"'.encode(), b'"\\""', b'"\\ude00\\ud800"']:
        assert eng.recognizes(ok), ok
    for bad in [b'"a\nb"', b'"\\x"', b'"\\u12"', b'"\x01"', b'"a']:
        assert not eng.recognizes(bad), bad
    bounded = EarleyEngine(schema_grammar({"type": "string", "minLength": 2, "maxLength": 2}))
    assert bounded.recognizes(b'"\\n\\u00e9"') and bounded.recognizes('"éé"'.encode())
    assert not bounded.recognizes(b'"abc"') and not bounded.recognizes(b'"a"')
    # a surrogate pair is one character for Python / jsonschema; a lone high surrogate is not produced
    assert bounded.recognizes(b'"\\ud83d\\ude00a"') and bounded.recognizes(b'"\\ude00a"')
    assert not bounded.recognizes(b'"\\ud83d\\ude00"') and not bounded.recognizes(b'"\\ud83da"')


def test_schema_property_order_survives_the_spec_and_the_cache_key():
    """Generation emits properties in the schema's order (``reasoning`` before ``answer``), through
    ``normalize_spec`` as the servers and logits processors call it; key order elsewhere is
    canonical, so reordering other keywords shares one cache entry."""
    from rayml.decoding import EarleyEngine
    from rayml.decoding.spec import build_grammar, normalize_spec
    s = {"type": "object", "properties": {"reasoning": {"type": "string", "maxLength": 3}, "answer": {"type": "integer"}},
         "required": ["reasoning", "answer"], "additionalProperties": False}
    spec = normalize_spec({"type": "json_schema", "json_schema": s})
    eng = EarleyEngine(build_grammar(spec))
    assert eng.recognizes(b'{"reasoning":"x","answer":1}')
    assert not eng.recognizes(b'{"answer":1,"reasoning":"x"}')
    flipped = {"type": "object", "properties": {"answer": s["properties"]["answer"], "reasoning": s["properties"]["reasoning"]},
               "required": ["reasoning", "answer"], "additionalProperties": False}
    assert normalize_spec({"type": "json_schema", "json_schema": flipped}) != spec
    shuffled = {"additionalProperties": False, "required": ["reasoning", "answer"], "properties": s["properties"],
                "type": "object"}
    assert normalize_spec({"type": "json_schema", "json_schema": shuffled}) == spec


def test_extra_keys_take_every_escape_but_never_spell_a_listed_name():
    from rayml.decoding import EarleyEngine
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "é/": {"type": "null"}},
         "additionalProperties": {"type": "boolean"}}
    eng = EarleyEngine(schema_grammar(s))
    for ok in [b'{"\\/x":true}', b'{"\\u0062":true}', b'{"a":1,"\\u00E9x":false}', b'{"\\ud83d\\ude00":true}',
               b'{"\\u00C9/":true}']:
        assert eng.recognizes(ok), ok
        obj = json.loads(ok)
        jsonschema.validate(obj, s)
    for bad in [b'{"\\u0061":true}', b'{"\\u00e9\\/":true}', b'{"\\u00E9/":true}', b'{"\\u00e9\\u002F":true}']:
        assert not eng.recognizes(bad), bad  # these keys are the listed names "a" and "é/"
