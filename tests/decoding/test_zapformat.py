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


def test_bench_suite_covers_the_issue_shapes():
    suite = zf.BENCH_SUITE
    assert len(suite) >= 20 and zf.bench_suite(26, 1)[:24] == list(suite) and len(zf.bench_suite(26, 1)) == 26
    kinds = {k for s in suite for k in _keywords(s)}
    assert {"$ref", "$defs", "maxLength", "minLength", "pattern", "enum", "anyOf", "minItems", "maxItems",
            "additionalProperties", "format", "properties"} <= kinds
    assert any("#/$defs/node" in str(s) for s in suite)  # a recursive $ref
    assert zf._max_length(suite[8]) >= 1000  # long free text
    assert any(isinstance(s.get("additionalProperties"), dict) for s in suite)
    for s in suite:
        jsonschema.Draft202012Validator.check_schema(s)
        schema_grammar(s)


def test_bench_tiny_reports_cold_warm_accept_and_agreement(ray_session):
    out = zf.bench(zf.BENCH_SIZES["tiny"], seed=0)
    d = out.metrics["per_vocab"]["bytes"]
    assert out.metrics["identical_to_reference"] == 1.0
    for e in ("rayml", "xgrammar"):
        for k in ("mask_cold_us", "mask_warm_us", "accept_us"):
            assert d[e][k]["mean"] > 0 and d[e][k]["p99"] >= d[e][k]["p50"]
        assert 0.0 <= d[e]["agreement_with_xgrammar"] <= 1.0 and d[e]["failures"] == 0
    assert d["xgrammar"]["agreement_with_xgrammar"] == 1.0
    assert "ratio_to_fastest_peer" in d["rayml"] and "| rayml |" in zf.bench_table(out.metrics)
    assert all(r["metric"].endswith("_s") or r["metric"] == "peak_kib" for r in out.tables["timing"])
