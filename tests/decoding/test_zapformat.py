"""The ZapFormat experiment at tiny size: record shape, deterministic schema suite, bad input."""

import jsonschema
import numpy as np
import pytest

from rayml.experiments import zapformat as zf
from rayml.decoding import GrammarMatcher, compile_json_schema, schema_grammar


def test_schema_suite_is_deterministic_varied_and_compiles():
    a, b = zf.schema_suite(60, 3), zf.schema_suite(60, 3)
    assert a == b and zf.schema_suite(5, 4) != a[:5]
    for s in a:
        jsonschema.Draft202012Validator.check_schema(s)
    kinds = {k for s in a for k in _keywords(s)}
    assert {"anyOf", "enum", "maxLength", "minItems", "maxItems", "minimum", "properties"} <= kinds
    for s in a[:10]:
        schema_grammar(s)


def _keywords(s):
    if isinstance(s, dict):
        for k, v in s.items():
            yield k
            yield from _keywords(v)
    elif isinstance(s, list):
        for v in s:
            yield from _keywords(v)


def test_sample_tokens_end_with_valid_documents():
    vocab, index = zf.vocab_and_index("bytes")
    schema = zf.schema_suite(3, 0)[2]
    cg = compile_json_schema(schema, index)
    done = 0
    for seed in range(4):
        toks = zf.sample_tokens(cg, vocab, seed, max_tokens=400, budget=30)
        if toks[-1] in vocab.eos_ids:
            done += 1
            text = b"".join(vocab.tokens[t] for t in toks[:-1]).decode("utf-8")
            assert zf._validate(text.encode(), schema) == 1.0
    assert done >= 1


def test_replay_pruning_shrinks_chart_with_identical_masks():
    vocab, index = zf.vocab_and_index("bytes")
    schema = {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}},
                                         "required": ["a"], "additionalProperties": False}}
    cg = compile_json_schema(schema, index)
    m = GrammarMatcher(cg)
    text = b'[{"a":1},{"a":22},{"a":3},{"a":-4},{"a":5}]'
    toks = list(text) + [vocab.eos_ids[0]]
    assert all(m.accept_token(t) for t in toks)
    on = zf.replay_ours(schema, index, [toks], prune=True)
    off = zf.replay_ours(schema, index, [toks], prune=False)
    assert on["digests"] == off["digests"]
    assert max(on["depth"]) <= 6 and max(off["depth"]) == len(text) + 1
    assert np.mean(on["live_items"]) < np.mean(off["live_items"]) / 3
    assert on["cache_hit_rate"] > off["cache_hit_rate"]


def test_run_tiny_record(ray_session):
    out = zf.run(zf.SIZES["tiny"], seed=0)
    m = out.metrics
    assert m["masks_identical"] == 1.0
    assert m["mean_live_items"] < out.baselines["unpruned"]["mean_live_items"]
    assert {r["method"] for r in out.tables["replays"]} == set(zf.ARMS)
    assert all(r["metric"].startswith("timing") for r in out.tables["timing"])


def test_bad_config():
    with pytest.raises(ValueError, match="schemas"):
        zf.run({**zf.SIZES["tiny"], "schemas": 0}, seed=0)
    with pytest.raises(ValueError, match="schemas"):
        zf.bench({**zf.BENCH_SIZES["tiny"], "schemas": 0}, seed=0)
