"""Our masks against xgrammar's at every step of constrained generations on the real Mistral 32k
vocabulary. Every step where they differ is listed, and each differing token is judged:

* a token only we allow: we complete the text from there with our own masks to a full document,
  which must parse (``json.loads``) and validate against the schema (``jsonschema``): a witness
  that the token keeps the text a valid prefix, so allowing it is right;
* a token only xgrammar allows: it must break a rule we can name: RFC 8259 Sec. 7 (a raw control
  character U+0000-U+001F inside a string). Any other difference fails the test.

(xgrammar 0.2.x compiles length-bounded strings to a character class that admits raw control
characters and no escapes; see ``shared/notes/zapformat.md``.)
"""

import json

import jsonschema
import numpy as np
import pytest

from rayml.decoding import GrammarMatcher, bitmask_to_bool, compile_json_schema, load_mistral

xgr = pytest.importorskip("xgrammar")
from rayml.decoding.peers import make_peer  # noqa: E402

pytestmark = pytest.mark.slow

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 4},
                                      "n": {"type": "integer", "minimum": 0, "maximum": 20}},
     "required": ["name", "n"], "additionalProperties": False},
    {"type": "object", "properties": {"id": {"type": "integer"},
                                      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                                               "maxItems": 3},
                                      "kind": {"enum": ["a", "b", None]}},
     "required": ["id", "tags"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "s": {"type": "string"}},
                                "required": ["x"], "additionalProperties": False}, "minItems": 1, "maxItems": 2},
]
CLOSERS = frozenset(b'"]}')


@pytest.fixture(scope="module")
def setup():
    vocab = load_mistral("mistral-32k")
    return vocab, make_peer("xgrammar", vocab)


def _inside_string(text: bytes) -> bool:
    """The JSON text ``text`` (compact, valid prefix) ends inside a string literal."""
    inside, esc = False, False
    for b in text:
        if esc:
            esc = False
        elif inside and b == 0x5C:
            esc = True
        elif b == 0x22:
            inside = not inside
    return inside


def _complete(cg, vocab, prefix_tokens, rng, max_steps=300):
    m = GrammarMatcher(cg)
    for t in prefix_tokens:
        assert m.accept_token(t)
    bonus = np.array([sum(b in CLOSERS for b in t) for t in vocab.tokens], float)
    out = b"".join(vocab.tokens[t] for t in prefix_tokens)
    for _ in range(max_steps):
        allowed = m.allowed_tokens()
        logits = rng.standard_normal(allowed.size) + 3 * bonus[allowed] + 8 * np.isin(allowed, vocab.eos_ids)
        tok = int(allowed[np.argmax(logits)])
        m.accept_token(tok)
        if tok in vocab.eos_ids:
            return out
        out += vocab.tokens[tok]
    raise AssertionError("no completion")


def _judge(cg, vocab, schema, tokens, tok, ours_allows, rng):
    text = b"".join(vocab.tokens[t] for t in tokens)
    data = vocab.tokens[tok]
    if ours_allows:
        if tok in vocab.eos_ids:
            doc = text
        else:
            doc = _complete(cg, vocab, tokens + [tok], rng)
        jsonschema.validate(json.loads(doc.decode("utf-8")), schema)
        return "ours right: completed to a valid document"
    if _inside_string(text) and data and any(b < 0x20 for b in data):
        return "ours right: raw control character in a string (RFC 8259 Sec. 7)"
    raise AssertionError(f"unexplained: xgrammar allows {data!r} after {text!r}")


@pytest.mark.parametrize("k", range(len(SCHEMAS)))
def test_masks_match_xgrammar_or_xgrammar_is_wrong(k, setup):
    vocab, peer = setup
    schema = SCHEMAS[k]
    cg = compile_json_schema(schema, vocab)
    rng = np.random.default_rng(100 + k)
    bonus = np.array([sum(b in CLOSERS for b in t) for t in vocab.tokens], float)
    report = []
    steps = 0
    for run in range(2):
        ours, theirs = GrammarMatcher(cg), peer.matcher(peer.compile(schema))
        words = np.zeros(cg.index.n_words, np.uint32)
        tokens: list[int] = []
        for step in range(60):
            theirs.fill(words)
            mine = ours.next_token_words()
            steps += 1
            diff = np.flatnonzero(bitmask_to_bool((words ^ mine).view(np.int32)[None], vocab.size)[0])
            for t in diff[:8]:  # judge a few per step (they repeat across steps)
                mine_has = bool(mine[t >> 5] >> np.uint32(t & 31) & np.uint32(1))
                verdict = _judge(cg, vocab, schema, tokens, int(t), mine_has, rng)
                report.append((run, step, vocab.tokens[t], "ours" if mine_has else "xgrammar", verdict))
            common = np.flatnonzero(bitmask_to_bool((words & mine).view(np.int32)[None], vocab.size)[0])
            assert common.size, f"no token allowed by both after {tokens}"
            logits = rng.standard_normal(common.size) * 2
            if step > 20:
                logits += 3 * bonus[common] + 8 * np.isin(common, vocab.eos_ids)
            tok = int(common[np.argmax(logits)])
            assert ours.accept_token(tok) and theirs.accept(tok)
            if tok in vocab.eos_ids:
                break
            tokens.append(tok)
    for row in report:
        print(row)
    print(f"schema {k}: {steps} steps compared, {len({(r[0], r[1]) for r in report})} steps differ")
    assert all(r[4].startswith("ours right") for r in report)
