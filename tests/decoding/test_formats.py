"""The ``format`` keywords: RFC examples accepted and rejected, and strings generated under each
format checked by Python's own parsers (``ipaddress``, ``uuid``, ``datetime``, ``email.utils``)."""

import datetime
import email.utils
import ipaddress
import json
import re
import urllib.parse
import uuid

import numpy as np
import pytest

from rayml.decoding import EarleyEngine, GrammarMatcher, byte_vocabulary, compile_json_schema
from rayml.decoding.formats import FORMATS
from rayml.decoding.json_schema import schema_grammar

CASES = {
    "date": (["2024-02-29", "1999-12-31", "0001-01-01"], ["2024-2-29", "2024-13-01", "2024-00-10", "2024-01-32", "24-01-01"]),
    "time": (["23:59:60Z", "08:30:00.123+05:30", "00:00:00z", "12:00:00-00:00"],
             ["24:00:00Z", "12:00:00", "12:60:00Z", "1:00:00Z", "12:00:00+5:00"]),
    "date-time": (["2024-02-29T12:00:00Z", "1985-04-12t23:20:50.52+01:00"],
                  ["2024-02-29 12:00:00Z", "2024-02-29T12:00:00", "2024-02-29"]),
    "email": (["a@b.co", "first.last+tag@sub.example.org", "x_y!#$@host"],
              ["@b.co", "a@", "a..b@c.d", "a@-bad.com", "a b@c.d", "a@b@c"]),
    "uuid": (["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"],
             ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"]),
    "ipv4": (["0.0.0.0", "255.255.255.255", "192.168.1.10"], ["256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"]),
    "ipv6": (["::", "::1", "2001:db8::8a2e:370:7334", "fe80::1:2:3:4:5:6", "1:2:3:4:5:6:7:8", "::ffff:192.0.2.1",
              "1::", "1:2:3:4:5:6:1.2.3.4"],
             ["1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1:2", "1:2:3:4:5:6:7", "::ffff:256.0.0.1"]),
    "uri": (["https://example.com/a/b?x=1&y=%20#frag", "urn:isbn:0451450523", "mailto:a@b.c", "http://[::1]:80/"],
            ["example.com", "1http://x", "http://a b", "http://x#a#b", "http://x/%zz"]),
}


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_format_examples(fmt):
    eng = EarleyEngine(schema_grammar({"type": "string", "format": fmt}))
    good, bad = CASES[fmt]
    for s in good:
        assert eng.recognizes(json.dumps(s).encode()), (fmt, s)
    for s in bad:
        assert not eng.recognizes(json.dumps(s).encode()), (fmt, s)


def _check(fmt: str, s: str) -> None:
    if fmt == "ipv4":
        ipaddress.IPv4Address(s)
    elif fmt == "ipv6":
        ipaddress.IPv6Address(s)
    elif fmt == "uuid":
        uuid.UUID(s)
    elif fmt in ("date", "date-time", "time"):
        # the calendar (days in the month, leap seconds) is not checked by any format regex
        norm = re.sub(r"(\d{4}-\d{2}-)\d{2}", r"\g<1>28", s) if fmt != "time" else s
        norm = re.sub(r":60", ":59", norm)
        if fmt == "date":
            datetime.date.fromisoformat(norm)
        elif fmt == "time":
            datetime.time.fromisoformat(norm.upper())
        else:
            datetime.datetime.fromisoformat(norm.upper())
    elif fmt == "email":
        assert email.utils.parseaddr(s)[1] == s and s.count("@") == 1, s
    elif fmt == "uri":
        assert urllib.parse.urlsplit(s).scheme, s
    else:
        raise AssertionError(fmt)


def _sample(cg, vocab, rng, budget=60, max_steps=200) -> str:
    m, out = GrammarMatcher(cg), b""
    for step in range(max_steps):
        allowed = m.allowed_tokens()
        logits = rng.standard_normal(allowed.size)
        if step >= budget:
            logits = logits + 10 * np.isin(allowed, vocab.eos_ids) + 5 * np.array([b'"' in vocab.tokens[t] if t < vocab.size else 0 for t in allowed])
        tok = int(allowed[np.argmax(logits)])
        assert m.accept_token(tok)
        if tok in vocab.eos_ids:
            return json.loads(out.decode())
        out += vocab.tokens[tok]
    raise AssertionError(out)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_generated_strings_parse(fmt):
    vocab = byte_vocabulary()
    cg = compile_json_schema({"type": "string", "format": fmt, "maxLength": 60}, vocab)
    rng = np.random.default_rng(7)
    for _ in range(15):
        s = _sample(cg, vocab, rng)
        assert len(s) <= 60
        _check(fmt, s)


def test_format_with_pattern_is_an_intersection_and_unknown_format_is_named():
    eng = EarleyEngine(schema_grammar({"type": "string", "format": "ipv4", "pattern": "^10\\."}))
    assert eng.recognizes(b'"10.0.0.1"') and not eng.recognizes(b'"11.0.0.1"')
    with pytest.raises(ValueError, match="format 'hostname' is not supported"):
        schema_grammar({"type": "string", "format": "hostname"})
    with pytest.raises(ValueError, match="format 'hostname'"):
        schema_grammar({"type": "integer", "format": "hostname"})
    with pytest.raises(ValueError, match="admits no string"):
        schema_grammar({"type": "string", "format": "uuid", "maxLength": 10})
