"""Constrained decoding in generation loops (``rayml.decoding.logits``): a random-weight
``transformers.LlamaForCausalLM`` with ``model.generate(logits_processor=...)``, the embedded engine's
KV-cache loop with a random-weight ``TransformerLM``, and the vLLM logits-processor interfaces
(skipped when vLLM does not import). Every finished output must parse and validate (``jsonschema``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
import torch

import rayml.llm
from rayml.decoding import GrammarMatcher, byte_vocabulary
from rayml.decoding.logits import (BatchGrammarState, GrammarCache, GrammarError, GrammarLimits, GrammarSpec,
                                      GrammarTooComplex, build_grammar, constrained_generate, normalize_spec,
                                      vocabulary_from_tokenizer)
from rayml.llm.tokenizer import load_tokenizer

BASE = Path(rayml.llm.WEIGHTS_DIR) / "base"

# Bounded schemas (every sentence is at most ~120 bytes), so a sequence always ends within the budget.
SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4},
    {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, {"type": "string", "minLength": 2, "maxLength": 4}]},
    {"type": "object", "properties": {
        "point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                                   "y": {"type": "integer", "minimum": -9, "maximum": 0}},
                  "required": ["x", "y"], "additionalProperties": False},
        "ok": {"type": "boolean"}, "label": {"enum": ["a", "b", None]}},
     "required": ["point", "ok"], "additionalProperties": False},
    {"$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99}},
                        "required": ["id"], "additionalProperties": False}},
     "type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 3},
    {"type": "string", "pattern": "^[a-c]{2,5}$"},
]
MAX_NEW = 130


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(BASE)


@pytest.fixture(scope="module")
def cache(tok):
    return GrammarCache(vocabulary_from_tokenizer(tok))


def _check_outputs(texts, finished, schema):
    assert all(finished), f"an output did not finish within the budget: {texts}"
    for t in texts:
        jsonschema.validate(json.loads(t), schema)


# -- specs, limits, masks ------------------------------------------------------------------------


def test_normalize_spec_forms_and_errors():
    s = {"type": "object"}
    assert normalize_spec({"type": "json_schema", "json_schema": s}) == \
        normalize_spec({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": True}})
    assert normalize_spec({"type": "text"}) is None
    assert normalize_spec({"type": "json_object"}) == GrammarSpec("json_object", "")
    with pytest.raises(GrammarError, match="'type' must be one of"):
        normalize_spec({"type": "xml"})
    with pytest.raises(GrammarError, match="needs the field 'regex'"):
        normalize_spec({"type": "regex"})
    with pytest.raises(GrammarError, match="unknown fields"):
        normalize_spec({"type": "regex", "regex": "a", "grammar": "b"})
    with pytest.raises(GrammarError, match="'json_schema' must be an object"):
        normalize_spec({"type": "json_schema", "json_schema": "[1]"})


@pytest.mark.parametrize("spec, err, needle", [
    ({"type": "regex", "regex": "[ab"}, GrammarError, "invalid regex"),
    ({"type": "json_schema", "json_schema": {"type": "string", "format": "hostname"}}, GrammarError, "format 'hostname' is not supported"),
    ({"type": "grammar", "grammar": "root ::= missing"}, GrammarError, "undefined rule"),
    ({"type": "regex", "regex": "a" * 100}, GrammarTooComplex, "over the limit of 64"),
    ({"type": "regex", "regex": "[a-z]{40}"}, GrammarTooComplex, "DFA states"),
])
def test_build_grammar_errors_name_the_problem(spec, err, needle):
    limits = GrammarLimits(max_source_chars=64, max_dfa_states=30)
    with pytest.raises(err, match=re.escape(needle)):
        build_grammar(normalize_spec(spec), limits)


def test_isolated_compile_is_killed_past_the_time_limit_and_the_cache_keeps_working():
    cache = GrammarCache(byte_vocabulary(), isolate=True, limits=GrammarLimits(compile_timeout_s=0.5))
    try:
        # determinising this regex takes seconds (2^17 states); the child is killed at 0.5 s
        with pytest.raises(GrammarTooComplex, match=re.escape("compile time limit (0.5 s)")):
            cache.get({"type": "regex", "regex": "(a|b)*a(a|b){16}"})
        with pytest.raises(GrammarError, match="invalid regex"):  # errors come back from the new child
            cache.get({"type": "regex", "regex": "(a"})
        m = GrammarMatcher(cache.get({"type": "regex", "regex": "[ab]c"}))
        assert m.allowed_tokens().tolist() == [ord("a"), ord("b")]
        assert cache._compiler.restarts == 1
    finally:
        cache.close()


def test_limits_validate_arguments():
    with pytest.raises(ValueError, match="max_rules"):
        GrammarLimits(max_rules=0)
    with pytest.raises(ValueError, match="compile_timeout_s"):
        GrammarLimits(compile_timeout_s=-1)


def test_cache_is_lru_and_shared(cache):
    small = GrammarCache(cache.index, capacity=2)
    a = small.get({"type": "regex", "regex": "a+"})
    assert small.get({"type": "regex", "regex": "a+"}) is a
    small.get({"type": "regex", "regex": "b+"})
    small.get({"type": "regex", "regex": "c+"})
    assert len(small) == 2 and small.stats["hits"] == 1 and small.stats["misses"] == 3
    assert small.get({"type": "regex", "regex": "a+"}) is not a  # evicted, compiled again
    for _ in range(2):  # a failure is cached as its error: the second one is a hit
        with pytest.raises(GrammarError, match="invalid regex"):
            small.get({"type": "regex", "regex": "[ab"})
    assert small.stats["misses"] == 5 and small.stats["hits"] == 2 and small.stats["errors"] == 1


def test_masked_logits_equal_the_matchers_allowed_sets(cache):
    g1 = cache.get({"type": "json_schema", "json_schema": SCHEMAS[0]})
    g2 = cache.get({"type": "regex", "regex": "[0-9]{2}x"})
    st = BatchGrammarState([g1, None, g2, g2])
    eos = cache.index.vocab.eos_ids[0]
    one = cache.index.vocab.tokens.index(b"1")
    st.advance([[], [], [], []])
    st.advance([[], [5, 6], [], [one]])
    logits = torch.randn(4, cache.vocab_size + 3)  # padded logits: the extra columns are never allowed
    out = st.mask_logits(logits.clone())
    ref1 = GrammarMatcher(g1).allowed_tokens()
    m = GrammarMatcher(g2)
    ref3 = m.allowed_tokens()
    assert m.accept_token(one)
    ref4 = m.allowed_tokens()
    for row, ref in ((0, ref1), (2, ref3), (3, ref4)):
        assert np.flatnonzero(torch.isfinite(out[row]).numpy()).tolist() == ref.tolist()
        assert torch.equal(out[row, ref], logits[row, ref])
    assert torch.equal(out[1], logits[1])  # unconstrained row untouched
    # a finished row allows EOS only
    done = BatchGrammarState([g2])
    done.advance([[cache.index.vocab.tokens.index(b) for b in (b"4", b"2", b"x")] + [eos]])
    finite = torch.isfinite(done.mask_logits(torch.zeros(1, cache.vocab_size))[0]).numpy()
    assert done.finished(0) and np.flatnonzero(finite).tolist() == [eos]


@pytest.mark.parametrize("vocab,words", [(64, 2), (70, 3), (100, 3), (33, 1), (49152, 1536)])
def test_apply_bitmask_compiled_path_equals_an_independent_expansion(vocab, words):
    """The C pass of CPU float32 logits (``native.core.mask_logits``) against np.unpackbits and the
    torch expansion (float64 logits take it): all-ones, all-zero and mixed words, padded logits (the
    columns past 32 W are never allowed), a subset of rows in any order."""
    from rayml.decoding import native
    from rayml.decoding.logits import apply_bitmask_

    rng = np.random.default_rng(vocab)
    bm = rng.integers(-2 ** 31, 2 ** 31, size=(3, words), dtype=np.int64).astype(np.int32)
    bm[0, 0], bm[1, -1], bm[2, 0] = -1, 0, 5
    logits = torch.randn(5, vocab)
    rows = [4, 0, 2]
    allowed = np.unpackbits(bm.view(np.uint8), axis=1, bitorder="little").astype(bool)
    allowed = np.concatenate([allowed, np.zeros((3, max(vocab - allowed.shape[1], 0)), bool)], 1)[:, :vocab]
    expect = logits.clone().numpy()
    for k, r in enumerate(rows):
        expect[r, ~allowed[k]] = -np.inf
    got = apply_bitmask_(logits.clone(), bm, rows)
    assert np.array_equal(got.numpy(), expect)
    via_torch = apply_bitmask_(logits.double(), torch.from_numpy(bm), rows)
    assert np.array_equal(via_torch.float().numpy(), expect)
    whole = apply_bitmask_(logits[:3].clone(), bm)
    assert np.array_equal(whole.numpy(), np.where(allowed, logits[:3].numpy(), -np.inf))
    if native.AVAILABLE:
        with pytest.raises(ValueError, match="row"):
            native.core.mask_logits(np.zeros((2, vocab), np.float32), bm[:1], np.array([2], np.int64))


def test_rejected_token_raises_or_finishes(cache):
    g = cache.get({"type": "regex", "regex": "ab"})
    b_id = cache.index.vocab.tokens.index(b"b")
    with pytest.raises(ValueError, match="row 0: token"):
        BatchGrammarState([g]).advance([[b_id]])
    st = BatchGrammarState([g], on_reject="finish")
    st.advance([[b_id]])
    assert st.rejected == [True] and st.finished(0)


def test_vocabulary_from_hf_byte_level_equals_the_exact_byte_table(tok):
    transformers = pytest.importorskip("transformers")
    from rayml.decoding.logits import vocabulary_from_hf

    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok._tok, eos_token="<eos>", bos_token="<bos>",
                                              pad_token="<pad>")
    ours, ref = vocabulary_from_hf(hf), vocabulary_from_tokenizer(tok)
    assert ours.tokens == ref.tokens and ours.eos_ids == ref.eos_ids and ours.special == ref.special


@pytest.mark.slow
def test_vocabulary_from_hf_sentencepiece_equals_the_mistral_loader(tmp_path):
    transformers = pytest.importorskip("transformers")
    import shutil

    from rayml.decoding.logits import vocabulary_from_hf
    from rayml.decoding.vocab import MISTRAL_VOCABS, load_mistral, mistral_data_dir

    shutil.copy(Path(mistral_data_dir()) / MISTRAL_VOCABS["mistral-32k"], tmp_path / "tokenizer.model")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    ours = vocabulary_from_hf(transformers.AutoTokenizer.from_pretrained(str(tmp_path)))
    ref = load_mistral("mistral-32k")  # rayml's own protobuf reader: <0xNN> bytes, \u2581 spaces
    assert ours.tokens == ref.tokens and ours.eos_ids == ref.eos_ids and ours.special == ref.special


# -- transformers --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama(tok):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=256, bos_token_id=tok.bos_id, eos_token_id=tok.eos_id,
                                   pad_token_id=tok.pad_id)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def test_transformers_generate_outputs_validate(llama, tok, cache):
    import transformers

    from rayml.decoding.logits import HFGrammarLogitsProcessor

    # one batch: two rows per schema, each row with its own grammar
    rows = [k for k in range(len(SCHEMAS)) for _ in range(2)]
    proc = HFGrammarLogitsProcessor([cache.get({"type": "json_schema", "json_schema": SCHEMAS[k]}) for k in rows])
    assert isinstance(proc, transformers.LogitsProcessor)
    texts = ["record:", "x", "12+3="]
    prompts = [tok.encode(texts[i % 3], bos=True) for i in range(len(rows))]
    width = max(map(len, prompts))
    ids = torch.tensor([[tok.pad_id] * (width - len(p)) + p for p in prompts])
    mask = (torch.arange(width)[None] >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    torch.manual_seed(0)
    # sampling with the default warpers: custom processors run before them (transformers >= 4.4x)
    out = llama.generate(input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=MAX_NEW,
                         logits_processor=transformers.LogitsProcessorList([proc]), pad_token_id=tok.pad_id,
                         eos_token_id=tok.eos_id)[:, width:].tolist()
    for k, row in zip(rows, out):
        text = tok.decode(row[: row.index(tok.eos_id)] if tok.eos_id in row else row)
        _check_outputs([text], [tok.eos_id in row], SCHEMAS[k])


def test_transformers_processor_per_row_grammars(llama, tok, cache):
    import transformers

    from rayml.decoding.logits import HFGrammarLogitsProcessor

    specs = [{"type": "regex", "regex": "[0-9]{3}-[a-z]{2}"},
             {"type": "grammar", "grammar": 'root ::= item ("," item){0,3}\nitem ::= "x" | "y" [0-9]'}]
    proc = HFGrammarLogitsProcessor([cache.get(s) for s in specs])
    ids = torch.tensor([[tok.bos_id, 5], [tok.bos_id, 6]])
    out = llama.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=40,
                         logits_processor=transformers.LogitsProcessorList([proc]), pad_token_id=tok.pad_id,
                         eos_token_id=tok.eos_id)[:, 2:].tolist()
    texts = [tok.decode(r[: r.index(tok.eos_id)]) for r in out]
    assert re.fullmatch("[0-9]{3}-[a-z]{2}", texts[0]), texts
    assert re.fullmatch(r"(x|y[0-9])(,(x|y[0-9])){0,3}", texts[1]), texts


# -- the embedded engine ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def random_lm(tok):
    from rayml.llm.backends import EmbeddedLM
    from rayml.llm.model import ModelConfig, TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=tok.vocab_size + 8, d_model=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                      d_ff=64, max_seq_len=256))
    return EmbeddedLM(model, tok)


def test_embedded_generation_outputs_validate(random_lm):
    # the model's vocabulary is padded past the tokenizer's (8 ids no grammar may ever allow)
    cache = GrammarCache(vocabulary_from_tokenizer(random_lm.tokenizer), vocab_size=random_lm.model.config.vocab_size)
    rows = [k for k in range(len(SCHEMAS)) for _ in range(2)]
    specs = [{"type": "json_schema", "json_schema": SCHEMAS[k]} for k in rows]
    texts = ["record:", "x", "12+3=", "ab"]
    sampled = constrained_generate(random_lm, [texts[i % 4] for i in range(len(rows))], specs, cache=cache,
                                   max_new_tokens=MAX_NEW, temperature=1.0, seed=0)
    greedy = constrained_generate(random_lm, ["record:"] * len(SCHEMAS), specs[::2], cache=cache,
                                  max_new_tokens=MAX_NEW)
    for k, o in [*zip(rows, sampled), *enumerate(greedy)]:
        _check_outputs([o.text], [o.finished], SCHEMAS[k])
    assert all(t < random_lm.tokenizer.vocab_size for o in sampled for t in o.tokens)
    assert len({o.text for o in sampled}) > len(SCHEMAS)  # sampling explores: not one output per schema


def test_embedded_generation_with_the_shipped_checkpoint_is_deterministic():
    lm = rayml.llm.pretrained("base")
    schema = SCHEMAS[2]
    a = constrained_generate(lm, ["json:", "1+1="], {"type": "json_schema", "json_schema": schema},
                             max_new_tokens=MAX_NEW, temperature=0.8, seed=3)
    b = constrained_generate(lm, ["json:", "1+1="], {"type": "json_schema", "json_schema": schema},
                             max_new_tokens=MAX_NEW, temperature=0.8, seed=3)
    assert [o.text for o in a] == [o.text for o in b]
    _check_outputs([o.text for o in a], [o.finished for o in a], schema)


def test_constrained_generate_checks_arguments(random_lm):
    with pytest.raises(ValueError, match="constraints must have one entry per prompt"):
        constrained_generate(random_lm, ["a", "b"], [None], max_new_tokens=2)
    with pytest.raises(GrammarError, match="invalid regex"):
        constrained_generate(random_lm, ["a"], {"type": "regex", "regex": "("}, max_new_tokens=2)


def test_deadline_stops_rows_as_unfinished(random_lm):
    import time

    outs = constrained_generate(random_lm, ["a"], {"type": "regex", "regex": "[a-z]{50}"}, max_new_tokens=60,
                                deadline=time.monotonic() - 1)
    assert outs[0].timed_out and not outs[0].finished and outs[0].tokens == []


# -- vLLM (interface level; needs vllm importable, e.g. `pip install --no-deps --target DIR vllm`) ----


def _vllm_interfaces():
    found = {}
    try:
        import vllm.v1.sample.logits_processor as v1

        found["v1"] = v1
    except Exception as exc:  # noqa: BLE001 - ImportError or a missing vllm dependency
        found["v1_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import vllm.v1.worker.gpu.sample.logits_processor as v2

        found["v2"] = v2
    except Exception as exc:  # noqa: BLE001
        found["v2_error"] = f"{type(exc).__name__}: {exc}"
    return found


VLLM = _vllm_interfaces()
needs_v1 = pytest.mark.skipif("v1" not in VLLM, reason=f"vLLM V1 logits-processor interface not importable "
                                                      f"({VLLM.get('v1_error')})")
needs_v2 = pytest.mark.skipif("v2" not in VLLM, reason=f"vLLM Model Runner V2 logits-processor interface not "
                                                      f"importable ({VLLM.get('v2_error')})")
needs_any = pytest.mark.skipif(not ("v1" in VLLM or "v2" in VLLM),
                               reason=f"vLLM not importable ({VLLM.get('v1_error')}; {VLLM.get('v2_error')})")


@pytest.fixture(scope="module")
def vllm_cls(tok):
    from rayml.decoding.logits import make_vllm_logits_processor

    return make_vllm_logits_processor(vocabulary_from_tokenizer(tok))


def _sp(spec=None):
    from vllm import SamplingParams

    return SamplingParams(extra_args={"zapformat": spec} if spec is not None else None)


@needs_any
def test_vllm_entry_point_class_loads_through_vllms_own_loaders():
    import rayml.decoding.logits as L

    fqcn = "rayml.decoding.logits:ZapFormatLogitsProcessor"
    if "v1" in VLLM:
        from vllm.v1.sample.logits_processor import _load_logitsprocs_by_fqcns

        assert _load_logitsprocs_by_fqcns([fqcn]) == [L.ZapFormatLogitsProcessor]
    if "v2" in VLLM:
        from vllm.v1.worker.gpu.sample.logits_processor.loader import _load_v2_logitsprocs_by_fqcns

        assert _load_v2_logitsprocs_by_fqcns([fqcn]) == [L.ZapFormatLogitsProcessor]
    with pytest.raises(ValueError, match="unsupported JSON Schema keyword"):
        L.ZapFormatLogitsProcessor.validate_params(_sp({"type": "json_schema", "json_schema": {"patternProperties": {}}}))
    L.ZapFormatLogitsProcessor.validate_params(_sp({"type": "regex", "regex": "[0-9]+"}))
    L.ZapFormatLogitsProcessor.validate_params(_sp())


@needs_v1
def test_vllm_v1_adapter_batch_updates_and_masks(vllm_cls, tok):
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    lp = vllm_cls(None, torch.device("cpu"), False)
    assert lp.is_argmax_invariant() is False
    v = lp.cache.vocab_size
    specs = {0: {"type": "json_schema", "json_schema": SCHEMAS[0]}, 1: None,
             2: {"type": "json_schema", "json_schema": SCHEMAS[1]}}
    outputs = {i: [] for i in specs}
    lp.update_state(BatchUpdate(batch_size=3, removed=[], moved=[],
                                added=[(i, _sp(s), [1, 5], outputs[i]) for i, s in specs.items()]))
    where = {0: 0, 1: 1, 2: 2}  # request -> batch index
    gen = torch.Generator().manual_seed(0)
    done = set()
    for step in range(MAX_NEW):
        if step == 3:  # swap requests 0 and 2 in the persistent batch
            lp.update_state(BatchUpdate(batch_size=3, removed=[], added=[],
                                        moved=[(0, 2, MoveDirectionality.SWAP)]))
            where[0], where[2] = 2, 0
        logits = torch.randn(3, v, generator=gen)
        raw = logits.clone()
        out = lp.apply(logits)
        assert torch.equal(out[where[1]], raw[where[1]])  # the unconstrained request is untouched
        for req, row in where.items():
            if req in done or req == 1:
                continue
            t = int(torch.multinomial(torch.softmax(out[row], -1), 1, generator=gen))
            outputs[req].append(t)  # vLLM appends to the live output list
            if t == tok.eos_id:
                done.add(req)
        if done == {0, 2}:
            break
    for req in (0, 2):
        assert outputs[req][-1] == tok.eos_id
        jsonschema.validate(json.loads(tok.decode(outputs[req][:-1])), specs[req]["json_schema"])
    lp.update_state(BatchUpdate(batch_size=1, removed=[0, 2], added=[], moved=[]))
    assert lp.rows == {}


def _v2_state(vocab_size, prompts, max_len=256):
    """Stand-ins for the model runner's per-slot buffers (``.np`` host views, ``.gpu`` tensors)."""
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcRequestState

    n = len(prompts)
    prompt_len = np.array([len(p) for p in prompts], np.int32)
    all_ids = torch.zeros(n, max_len, dtype=torch.int32)
    for i, p in enumerate(prompts):
        all_ids[i, :len(p)] = torch.tensor(p)
    return LogitsProcRequestState(device=torch.device("cpu"), max_num_reqs=n, vocab_size=vocab_size,
                                  all_token_ids=SimpleNamespace(gpu=all_ids), prompt_len=SimpleNamespace(np=prompt_len),
                                  prefill_len=SimpleNamespace(np=prompt_len.copy()), total_len=None)


def _v2_ctx(slots, pos, input_ids):
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    slots_t = torch.tensor(slots)
    return LogitsContext(expanded_idx_mapping=slots_t, idx_mapping=slots_t, idx_mapping_np=np.array(slots),
                         expanded_local_pos=torch.zeros(len(slots), dtype=torch.long),
                         input_ids=torch.tensor(input_ids),
                         pos=torch.tensor(pos), seq_lens_upper_bound_np=np.array(pos) + 1)


@needs_v2
def test_vllm_v2_slots_positions_preemption_and_drafts(vllm_cls, tok):
    prompts = [[1, 5, 6], [1, 7], [1, 9, 9, 9]]
    rs = _v2_state(0, prompts)
    lp = vllm_cls(None, rs)
    v = lp.cache.vocab_size
    schema = SCHEMAS[0]
    assert lp.add_request(0, _sp({"type": "json_schema", "json_schema": schema})) is True
    assert lp.add_request(1, _sp()) is False
    assert lp.add_request(2, _sp({"type": "regex", "regex": "[0-9]{4}"})) is True
    gen = torch.Generator().manual_seed(1)
    pos = {s: len(p) - 1 for s, p in enumerate(prompts)}
    last = {s: p[-1] for s, p in enumerate(prompts)}
    outs = {0: [], 2: []}
    active = [0, 1, 2]
    for step in range(MAX_NEW):
        slots = list(reversed(active)) if step % 2 else list(active)  # rows are reordered every step
        logits = torch.randn(len(slots), v, generator=gen)
        raw = logits.clone()
        out = lp.apply(logits, _v2_ctx(slots, [pos[s] for s in slots], [last[s] for s in slots]))
        for r, s in enumerate(slots):
            if s == 1:
                assert torch.equal(out[r], raw[r])
                t = int(out[r].argmax())
            else:
                t = int(torch.multinomial(torch.softmax(out[r], -1), 1, generator=gen))
                outs[s].append(t)
            pos[s] += 1
            last[s] = t
            rs.all_token_ids.gpu[s, pos[s]] = t  # the runner commits the token
        active = [s for s in active if s == 1 or not (outs[s] and outs[s][-1] == tok.eos_id)]
        if active == [1]:
            break
    jsonschema.validate(json.loads(tok.decode(outs[0][:-1])), schema)
    assert re.fullmatch("[0-9]{4}", tok.decode(outs[2][:-1]))

    # preemption: slot 2 is re-added with a partial output already committed; the processor reads it
    partial = [tok.encode("12")[0], tok.encode("3")[0]]
    rs.all_token_ids.gpu[2, 4:6] = torch.tensor(partial)
    lp.add_request(2, _sp({"type": "regex", "regex": "[0-9]{4}"}))
    out = lp.apply(torch.zeros(1, v), _v2_ctx([2], [5], [partial[-1]]))
    allowed = np.flatnonzero(torch.isfinite(out[0]).numpy())
    assert {tok.decode([int(a)]) for a in allowed} <= set("0123456789") and len(allowed) == 10

    # speculative drafts: two rows of one request, the second at the next position after a draft
    lp.add_request(2, _sp({"type": "regex", "regex": "[0-9]{4}"}))
    d1, d2 = tok.encode("4")[0], tok.encode("x")[0]  # d2 breaks the grammar
    out = lp.apply(torch.zeros(3, v), _v2_ctx([2, 2, 2], [5, 6, 7], [partial[-1], d1, d2]))
    assert [len(np.flatnonzero(torch.isfinite(out[r]).numpy())) for r in (0, 1)] == [10, 10]  # "13", "134"
    assert np.flatnonzero(torch.isfinite(out[2]).numpy()).tolist() == [tok.eos_id]  # after a rejected draft
    # next step: the draft "x" was rejected and "5" sampled at position 7 -> "1345" is complete
    five, seven = tok.encode("5")[0], tok.encode("7")[0]
    out = lp.apply(torch.zeros(1, v), _v2_ctx([2], [7], [five]))
    assert np.flatnonzero(torch.isfinite(out[0]).numpy()).tolist() == [tok.eos_id]
    # rolling back past accepted tokens: position 6 holds "7" instead -> "137", one more digit
    out = lp.apply(torch.zeros(1, v), _v2_ctx([2], [6], [seven]))
    assert len(np.flatnonzero(torch.isfinite(out[0]).numpy())) == 10
    assert lp.rows[2].tokens == [partial[0], partial[1], seven]


@needs_any
def test_vllm_builds_the_processor_with_the_engines_tokenizer(tok, tmp_path, monkeypatch):
    """vLLM's own build functions instantiate the entry-point class; its vocabulary is then read from
    ``model_config.tokenizer`` (a local transformers tokenizer directory) on the first constrained
    request, and the masks follow the grammar."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok._tok, eos_token="<eos>", bos_token="<bos>",
                                              pad_token="<pad>")
    hf.save_pretrained(str(tmp_path))
    cfg = SimpleNamespace(model_config=SimpleNamespace(tokenizer=str(tmp_path), get_vocab_size=lambda: tok.vocab_size),
                          scheduler_config=SimpleNamespace(max_num_seqs=4), speculative_config=None)
    from importlib.metadata import entry_points

    # installed rayml registers the class in vLLM's entry-point group, and vLLM loads it from there
    # (passing its name as well would build it twice); from a source tree, pass it by name
    registered = any(ep.value == "rayml.decoding.logits:ZapFormatLogitsProcessor"
                     for ep in entry_points(group="vllm.logits_processors"))
    fqcn = [] if registered else ["rayml.decoding.logits:ZapFormatLogitsProcessor"]
    spec = {"type": "regex", "regex": "[0-9]{2}"}
    digits = sorted(tok.encode(str(d))[0] for d in range(10))
    if "v1" in VLLM:
        import vllm.utils.torch_utils

        from vllm.v1.sample.logits_processor import BatchUpdate, build_logitsprocs

        # vLLM's built-in processors pin host memory, which needs an accelerator: not on a CPU-only host
        monkeypatch.setattr(vllm.utils.torch_utils, "PIN_MEMORY", False)

        procs = [p for p in build_logitsprocs(cfg, torch.device("cpu"), False, False, fqcn).all
                 if type(p).__name__ == "ZapFormatLogitsProcessor"]
        assert len(procs) == 1
        lp, out_ids = procs[0], []
        lp.update_state(BatchUpdate(batch_size=1, removed=[], moved=[], added=[(0, _sp(spec), [1], out_ids)]))
        assert np.flatnonzero(torch.isfinite(lp.apply(torch.zeros(1, tok.vocab_size))[0]).numpy()).tolist() == digits
    if "v2" in VLLM:
        from vllm.v1.worker.gpu.sample.logits_processor import build_custom_logits_processors

        rs = _v2_state(tok.vocab_size, [[1, 5]])
        req = SimpleNamespace(**{k: getattr(rs, k) for k in ("device", "max_num_reqs", "vocab_size", "all_token_ids",
                                                             "prompt_len", "prefill_len", "total_len")})
        (lp,) = build_custom_logits_processors(cfg, req, False, fqcn)
        assert lp.add_request(0, _sp(spec))
        out = lp.apply(torch.zeros(1, tok.vocab_size), _v2_ctx([0], [1], [5]))
        assert np.flatnonzero(torch.isfinite(out[0]).numpy()).tolist() == digits
