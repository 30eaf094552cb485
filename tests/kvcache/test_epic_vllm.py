"""EPIC's vLLM connector (``rayml.kvcache.epic_vllm``).

The connector's two halves run here against the embedded engine acting as vLLM's model: the
engine writes each compile request's KV into a paged cache laid out as vLLM's, the worker half
saves and loads it, and the linked result must equal ``rayml.kvcache.epic``'s ``naive`` policy. The
vLLM class itself is checked at the interface level against the real package when it imports
(skipped otherwise: ``pip install --no-deps --target DIR vllm`` and ``PYTHONPATH=DIR``).
"""

from __future__ import annotations

import pytest
import torch

from rayml.kvcache import epic
from rayml.kvcache.epic_vllm import (PARAMS_KEY, LocalChunkStore, RopeSpec, SchedulerState, ShardedStore, WorkerState,
                                 parse_params, read_rows, rotate_keys, slot_mapping, write_rows)
from rayml.llm.model import KVCache, ModelConfig, TransformerLM, apply_rope, rope_cos_sin

BS = 4  # block size
BOS = 1


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                                  max_seq_len=128))
    m.reset_parameters(torch.Generator().manual_seed(0))
    return m.eval()


class PagedEngine:
    """The embedded model's KV in vLLM's per-layer paged views ``[blocks, kv_heads, BS, 2 * head]``."""

    def __init__(self, model, n_blocks=64):
        cfg = model.config
        self.model = model
        self.layers = {f"layers.{i}": torch.zeros(n_blocks, cfg.n_kv_heads, BS, 2 * cfg.head_dim)
                       for i in range(cfg.n_layers)}
        self.free = list(range(n_blocks))[::-1]

    def alloc(self, n_tokens):
        return [self.free.pop() for _ in range(-(-n_tokens // BS))]

    def write_cache(self, cache: KVCache, blocks, start=0, end=None):
        """Rows ``start .. end-1`` of a batch-1 cache into the request's blocks (what attention writes)."""
        end = cache.length if end is None else end
        slots = slot_mapping(blocks, BS, start, end)
        for i, name in enumerate(self.layers):
            rows = torch.cat([cache.keys[i][0, :, start:end], cache.values[i][0, :, start:end]], -1).transpose(0, 1)
            write_rows(self.layers[name], slots, rows, BS)

    def read_cache(self, blocks, n) -> KVCache:
        d = self.model.config.head_dim
        slots = slot_mapping(blocks, BS, 0, n)
        rows = [read_rows(layer, slots, BS).transpose(0, 1)[None] for layer in self.layers.values()]
        return KVCache([r[..., :d].clone() for r in rows], [r[..., d:].clone() for r in rows],
                       torch.arange(n)[None], torch.ones(1, n, dtype=torch.bool), n, self.model.config.rope_theta)


def rope_of(model):
    return RopeSpec(model.config.head_dim, model.config.head_dim, model.config.rope_theta)


def halves(store, model):
    key_of = lambda ids: epic.chunk_key("m", ids)  # noqa: E731
    return SchedulerState(store, key_of, BS), WorkerState(store, rope_of(model), BS)


def compile_chunk(engine, sched, worker, req_id, ids):
    """A compile request run to completion: the engine computes it, the connector saves it."""
    assert sched.match(req_id, ids, {PARAMS_KEY: {"compile": True}}, 0) == 0
    blocks = engine.alloc(len(ids))
    engine.write_cache(epic.precompute_chunk(engine.model, ids), blocks)
    meta = sched.build([(req_id, blocks, 0, len(ids))])
    assert [s.req_id for s in meta.saves] == [req_id] and not meta.loads
    for name, layer in engine.layers.items():
        worker.save_layer(meta, name, layer)
    worker.flush()
    sched.finished(req_id)


DOCS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [14, 15, 16, 17, 18, 19, 20]]
QUERY = [21, 22, 23]


def test_rotated_keys_equal_keys_at_the_target_positions():
    torch.manual_seed(1)
    hd, theta = 16, 10000.0
    raw = torch.randn(1, 2, 5, hd)
    at = lambda p: apply_rope(raw, *rope_cos_sin(torch.as_tensor(p)[None], hd, theta))[0].transpose(0, 1)  # noqa
    rope = RopeSpec(hd, hd, theta)
    moved = rotate_keys(at(list(range(5))), 37, rope)
    torch.testing.assert_close(moved, at(list(range(37, 42))), atol=1e-5, rtol=1e-5)
    assert torch.equal(rotate_keys(at([0, 1, 2, 3, 4]), 0, rope), at([0, 1, 2, 3, 4]))


@pytest.mark.parametrize("neox", [True, False])
def test_rotation_composes_inverts_and_leaves_unrotated_dims(neox):
    torch.manual_seed(2)
    rope = RopeSpec(16, 8, 500.0, neox=neox)
    k = torch.randn(3, 2, 16)
    torch.testing.assert_close(rotate_keys(rotate_keys(k, 5, rope), 9, rope), rotate_keys(k, 14, rope))
    torch.testing.assert_close(rotate_keys(rotate_keys(k, 11, rope), -11, rope), k, atol=1e-5, rtol=1e-5)
    assert torch.equal(rotate_keys(k, 7, rope)[..., 8:], k[..., 8:])
    assert not torch.allclose(rotate_keys(k, 7, rope)[..., :8], k[..., :8])
    half = RopeSpec(16, 8, 500.0, scale=2.0, neox=neox)
    torch.testing.assert_close(rotate_keys(k, 7, half), rotate_keys(k, 3.5, rope))


def test_rope_spec_from_configs_and_its_limits():
    from types import SimpleNamespace as NS

    assert RopeSpec.from_hf_config(NS(rope_theta=5e5), 64) == RopeSpec(64, 64, 5e5)
    assert RopeSpec.from_hf_config(NS(rope_parameters={"rope_type": "linear", "rope_theta": 1e4, "factor": 4.0},
                                      partial_rotary_factor=0.5), 64) == RopeSpec(64, 32, 1e4, 4.0)
    with pytest.raises(NotImplementedError, match="yarn"):
        RopeSpec.from_hf_config(NS(rope_scaling={"rope_type": "yarn", "factor": 4.0}), 64)
    with pytest.raises(ValueError, match="rotary_dim"):
        RopeSpec(64, 63)
    with pytest.raises(ValueError, match="head size"):
        rotate_keys(torch.zeros(2, 8), 3, RopeSpec(16, 16))


def test_slot_mapping_and_paged_rows_round_trip():
    assert slot_mapping([7, 2, 9], 4, 2, 9).tolist() == [30, 31, 8, 9, 10, 11, 36]
    layer = torch.zeros(10, 2, 4, 6)
    rows = torch.randn(5, 2, 6)
    slots = slot_mapping([3, 8], 4, 1, 6)
    write_rows(layer, slots, rows, 4)
    assert torch.equal(read_rows(layer, slots, 4), rows)
    assert layer[3, :, 0].abs().sum() == 0 and layer[8, :, 2:].abs().sum() == 0
    with pytest.raises(ValueError, match="blocks"):
        slot_mapping([1], 4, 0, 5)
    with pytest.raises(ValueError, match="start"):
        slot_mapping([1, 2], 4, 3, 2)


@pytest.mark.parametrize("params, match", [
    ({PARAMS_KEY: {"chunks": []}}, "non-empty list"),
    ({PARAMS_KEY: {"chunks": [3, 0]}}, "positive"),
    ({PARAMS_KEY: {"chunks": [3, True]}}, "positive"),
    ({PARAMS_KEY: {"chunks": [10]}}, "at least one query token"),
    ({PARAMS_KEY: {"compile": 1}}, "must be true"),
    ({PARAMS_KEY: {"compile": True, "chunks": [1]}}, "must be"),
    ({PARAMS_KEY: "compile"}, "must be"),
])
def test_bad_request_params_name_what_is_wrong_and_serve_without_reuse(params, match):
    with pytest.raises(ValueError, match=match):
        parse_params(params, 10)
    sched = SchedulerState(LocalChunkStore(), lambda ids: str(ids), BS)
    assert sched.match("r", list(range(10)), params, 0) == 0
    assert "r:" in sched.errors[0]
    assert parse_params(None, 5) is None and parse_params({"other": 1}, 5) is None


def test_linked_chunks_in_paged_cache_equal_epic_naive(model):
    """The connector's load is EPIC's naive linking: same KV rows, same next-token logits."""
    engine, store = PagedEngine(model), LocalChunkStore()
    sched, worker = halves(store, model)
    compile_chunk(engine, sched, worker, "c0", [BOS])
    for i, d in enumerate(DOCS):
        compile_chunk(engine, sched, worker, f"c{i + 1}", d)
    assert worker.saved_chunks == 4
    prompt = [BOS] + [t for d in DOCS for t in d] + QUERY
    n_ctx = len(prompt) - len(QUERY)
    params = {PARAMS_KEY: {"chunks": [1] + [len(d) for d in DOCS]}}
    assert sched.match("q", prompt, params, 0) == n_ctx
    sched.after_alloc("q", n_ctx)
    blocks = engine.alloc(len(prompt))
    meta = sched.build([("q", blocks, 0, len(prompt))])
    assert len(meta.loads) == 1 and [s.offset for s in meta.loads[0].segments] == [0, 1, 7, 10]
    worker.load(meta, engine.layers)
    assert worker.loaded_tokens == n_ctx and not worker.take_load_errors()

    ref = epic.prefill(model, DOCS, QUERY, spec=epic.LinkSpec("naive"), bos_id=BOS)
    got = engine.read_cache(blocks, n_ctx)
    for layer in range(model.config.n_layers):
        torch.testing.assert_close(got.keys[layer], ref.cache.keys[layer][:, :, :n_ctx], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.values[layer], ref.cache.values[layer][:, :, :n_ctx])
    got.ensure_capacity(len(prompt))  # vLLM now computes the query after the loaded rows
    logits = model(torch.tensor([QUERY]), torch.arange(n_ctx, len(prompt)), cache=got, last_only=True)[0, -1]
    torch.testing.assert_close(logits, ref.logits, atol=1e-4, rtol=1e-4)
    full = epic.prefill(model, DOCS, QUERY, spec=epic.LinkSpec("full"), bos_id=BOS)
    assert not torch.allclose(logits, full.logits, atol=1e-3)  # linking is not recompute (a real test)


def test_only_the_leading_run_of_stored_chunks_is_loaded_after_the_local_prefix(model):
    engine, store = PagedEngine(model), LocalChunkStore()
    sched, worker = halves(store, model)
    for i, ids in enumerate([[BOS], DOCS[0], DOCS[2]]):  # DOCS[1] never compiled
        compile_chunk(engine, sched, worker, f"c{i}", ids)
    prompt = [BOS] + [t for d in DOCS for t in d] + QUERY
    params = {PARAMS_KEY: {"chunks": [1] + [len(d) for d in DOCS]}}
    assert sched.match("q", prompt, params, 0) == 7  # [BOS] + DOCS[0]; nothing after the gap
    assert sched.match("q", prompt, params, 8) == 0  # vLLM's own prefix cache already has more
    # vLLM's prefix cache holds the first block (4 tokens): only positions 4..6 are loaded
    assert sched.match("q2", prompt, params, 4) == 3
    sched.after_alloc("q2", 3)
    blocks = engine.alloc(len(prompt))
    meta = sched.build([("q2", blocks, 4, len(prompt) - 4)])
    (seg,) = meta.loads[0].segments
    assert (seg.src_start, seg.src_end, seg.offset) == (3, 6, 1)
    assert seg.slots == slot_mapping(blocks, BS, 4, 7).tolist()
    worker.load(meta, engine.layers)
    first_block = slot_mapping(blocks, BS, 0, 4)
    assert all(read_rows(layer, first_block, BS).abs().sum() == 0 for layer in engine.layers.values())


def test_a_chunk_lost_before_the_load_is_reported_for_recompute(model):
    engine, store = PagedEngine(model), LocalChunkStore()
    sched, worker = halves(store, model)
    compile_chunk(engine, sched, worker, "c0", [BOS])
    compile_chunk(engine, sched, worker, "c1", DOCS[0])
    prompt = [BOS] + DOCS[0] + QUERY
    params = {PARAMS_KEY: {"chunks": [1, len(DOCS[0])]}}
    n = sched.match("q", prompt, params, 0)
    sched.after_alloc("q", n)
    blocks = engine.alloc(len(prompt))
    meta = sched.build([("q", blocks, 0, len(prompt))])
    worker.store = LocalChunkStore()  # the store restarted empty between the check and the load
    worker.load(meta, engine.layers)
    assert worker.take_load_errors() == set(blocks[:2]) and not worker.take_load_errors()


def test_a_compile_spanning_several_steps_is_saved_once_complete(model):
    engine, store = PagedEngine(model), LocalChunkStore()
    sched, worker = halves(store, model)
    ids = DOCS[2]  # 7 tokens over two prefill steps of 4 and 3
    sched.match("c", ids, {PARAMS_KEY: {"compile": True}}, 0)
    b1 = engine.alloc(4)
    assert not sched.build([("c", b1, 0, 4)]).saves
    b2 = engine.alloc(3)
    engine.write_cache(epic.precompute_chunk(model, ids), b1 + b2)
    meta = sched.build([], [("c", b2, 4, 3)])
    assert meta.saves[0].slots == slot_mapping(b1 + b2, BS, 0, 7).tolist()
    for name, layer in engine.layers.items():
        worker.save_layer(meta, name, layer)
    worker.flush()
    assert not sched.build([], [("c", None, 7, 1)]).saves  # decoding steps save nothing more
    got = store.get(epic.chunk_key("m", ids))["layers"]["layers.0"]
    ref = epic.precompute_chunk(model, ids)
    from rayml.kvcache.epic_vllm import payload_to_tensor
    torch.testing.assert_close(payload_to_tensor(got)[..., :model.config.head_dim].transpose(0, 1),
                               ref.keys[0][0, :, :7])


def test_bf16_rows_travel_through_the_store_bit_exact():
    from rayml.kvcache.epic_vllm import payload_to_tensor, tensor_to_payload

    t = torch.randn(3, 2, 8).to(torch.bfloat16)
    assert torch.equal(payload_to_tensor(tensor_to_payload(t)), t)


def test_sharded_store_keeps_tensor_parallel_ranks_apart():
    base = LocalChunkStore()
    r0, r1 = ShardedStore(base, 0), ShardedStore(base, 1)
    import numpy as np
    r1.put("k", {"x": np.ones(2)})
    assert r1.contains("k") and not r0.contains("k") and r0.get("k") is None


def test_local_store_respects_its_byte_budget():
    import numpy as np

    s = LocalChunkStore(budget_bytes=100)
    assert s.put("a", {"x": np.zeros(8)}) and s.put("b", {"x": np.zeros(8)})  # 64 + 64 > 100: a evicted
    assert not s.contains("a") and s.contains("b") and s.get("a") is None
    assert not s.put("big", {"x": np.zeros(20)})


def test_ray_chunk_store_is_shared_through_the_store_actor(ray_session):
    import numpy as np

    from rayml.kvcache.epic_vllm import RayChunkStore

    a = RayChunkStore("epic-vllm-test", budget_bytes=1 << 20, address=None)
    b = RayChunkStore("epic-vllm-test", budget_bytes=1 << 20, address=None)  # another process's view
    assert a.put("k", {"layers": {"l0": {"data": np.arange(6), "dtype": "int64"}}})
    assert b.contains("k") and not b.contains("nope")
    assert b.get("k")["layers"]["l0"]["data"].tolist() == list(range(6))
    import ray
    ray.kill(b._store, no_restart=True)


# -- vLLM (interface level) ------------------------------------------------------------------

def _vllm_base():
    try:
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
        return KVConnectorBase_V1
    except Exception:  # noqa: BLE001 - vllm or one of its dependencies is missing
        return None


needs_vllm = pytest.mark.skipif(_vllm_base() is None, reason="vLLM's KV-connector interface does not import here")


@needs_vllm
def test_vllm_resolves_the_connector_through_its_factory():
    from vllm.config import KVTransferConfig
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    import rayml.kvcache.epic_vllm as ev

    cls = KVConnectorFactory.get_connector_class(KVTransferConfig(
        kv_connector="EPICConnector", kv_connector_module_path="rayml.kvcache.epic_vllm", kv_role="kv_both"))
    assert cls is ev.EPICConnector and issubclass(cls, _vllm_base())
    assert not getattr(cls, "__abstractmethods__", None)


@needs_vllm
def test_vllm_connector_compiles_and_links_with_vllms_own_request_and_scheduler_objects(tmp_path):
    """Both roles built from a real ``VllmConfig`` and driven by vLLM's ``Request``,
    ``SchedulerOutput`` and ``ForwardContext``; the embedded base model plays the model runner
    (writes the compile requests' KV into the paged views). The loaded KV must be EPIC's naive link."""
    import pickle

    from vllm import SamplingParams
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata, KVConnectorRole
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
    from vllm.v1.request import Request

    import rayml.kvcache.epic_vllm as ev
    from rayml.llm import pretrained
    from rayml.llm.hf import export_hf_dir

    lm = pretrained("base")
    model, tok = lm.model.eval(), lm.tokenizer
    export_hf_dir(model, tok, tmp_path)
    vc = VllmConfig(model_config=ModelConfig(model=str(tmp_path), dtype="float32"),
                    device_config=DeviceConfig(device="cpu"), cache_config=CacheConfig(block_size=BS),
                    kv_transfer_config=KVTransferConfig(
                        kv_connector="EPICConnector", kv_connector_module_path="rayml.kvcache.epic_vllm",
                        kv_role="kv_both", kv_connector_extra_config={"store": "local", "store_name": "vllm-test"}))
    sched = ev.EPICConnector(vc, KVConnectorRole.SCHEDULER, None)
    worker = ev.EPICConnector(vc, KVConnectorRole.WORKER, None)
    assert worker._worker.rope == RopeSpec(model.config.head_dim, model.config.head_dim, model.config.rope_theta)
    engine = PagedEngine(model)
    layer_objs = {name: torch.nn.Module() for name in engine.layers}  # stand-ins for vLLM's Attention layers
    for name, obj in layer_objs.items():
        obj.kv_cache = engine.layers[name]
    fc = ForwardContext(no_compile_layers=layer_objs, attn_metadata={}, slot_mapping={})

    def step(req, blocks, num_computed, n_sched, n_ext=0):
        sched.update_state_after_alloc(req, KVCacheBlocks(blocks=([],)), n_ext)
        out = SchedulerOutput(scheduled_new_reqs=[NewRequestData.from_request(req, (blocks,), list(req.prompt_token_ids))],
                              scheduled_cached_reqs=CachedRequestData.make_empty(),
                              num_scheduled_tokens={req.request_id: n_sched}, total_num_scheduled_tokens=n_sched,
                              scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={}, finished_req_ids=set(),
                              free_encoder_mm_hashes=[])
        meta = pickle.loads(pickle.dumps(sched.build_connector_meta(out)))  # scheduler -> worker process
        assert isinstance(meta, KVConnectorMetadata)
        worker.bind_connector_metadata(meta)
        return meta

    docs = [tok.encode(d) for d in ("[a:1;b:2]\n", "[c:345]\n", "[dd:6;e:7;f:8]\n")]
    query = tok.encode("?c:")
    for i, ids in enumerate([[tok.bos_id]] + docs):
        req = Request(f"c{i}", ids, SamplingParams(max_tokens=1, extra_args={
            "kv_transfer_params": {PARAMS_KEY: {"compile": True}}}), None)
        assert sched.get_num_new_matched_tokens(req, 0) == (0, False)
        blocks = engine.alloc(len(ids))
        engine.write_cache(epic.precompute_chunk(model, ids), blocks)
        step(req, blocks, 0, len(ids))
        for name, layer in engine.layers.items():
            worker.save_kv_layer(name, layer, None)
        worker.wait_for_save()
        worker.clear_connector_metadata()
        assert sched.request_finished(req, blocks) == (False, None)

    prompt = [tok.bos_id] + [t for d in docs for t in d] + query
    n_ctx = len(prompt) - len(query)
    req = Request("q", prompt, SamplingParams(max_tokens=4, extra_args={
        "kv_transfer_params": {PARAMS_KEY: {"chunks": [1] + [len(d) for d in docs]}}}), None)
    assert sched.get_num_new_matched_tokens(req, 0) == (n_ctx, False)
    blocks = engine.alloc(len(prompt))
    meta = step(req, blocks, 0, len(prompt), n_ctx)
    assert len(meta.loads) == 1
    worker.start_load_kv(fc)
    assert worker.get_block_ids_with_load_errors() == set()
    ref = epic.prefill(model, docs, query, spec=epic.LinkSpec("naive"), bos_id=tok.bos_id)
    got = engine.read_cache(blocks, n_ctx)
    for layer in range(model.config.n_layers):
        torch.testing.assert_close(got.keys[layer], ref.cache.keys[layer][:, :, :n_ctx], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(_vllm_base() is None or not torch.cuda.is_available(),
                    reason="the CUDA vLLM end to end needs a GPU; vLLM on the CPU runs end to end in tests/llm/test_vllm_cpu.py")
def test_vllm_engine_answers_like_the_embedded_naive_link(tmp_path, monkeypatch):
    """The whole engine with the connector: compile documents, then ask; vLLM's greedy answers must
    agree with the embedded engine's naive link (same weights, fp32)."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: the local store is shared
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    from rayml.llm import pretrained, tasks
    from rayml.llm.hf import export_hf_dir

    lm = pretrained("base")
    model, tok = lm.model.eval(), lm.tokenizer
    export_hf_dir(model, tok, tmp_path)
    llm = LLM(model=str(tmp_path), dtype="float32", enable_prefix_caching=False, gpu_memory_utilization=0.2,
              kv_transfer_config=KVTransferConfig(kv_connector="EPICConnector",
                                                  kv_connector_module_path="rayml.kvcache.epic_vllm", kv_role="kv_both",
                                                  kv_connector_extra_config={"store": "local", "store_name": "e2e"}))
    compile_params = SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": {PARAMS_KEY: {"compile": True}}})
    same = 0
    items = tasks.make_items("retrieve", 20, seed=0, split="test")
    for item in items:
        docs = [tok.encode(d) for d in item.meta["documents"]]
        query = tok.encode(item.meta["question"])
        llm.generate([{"prompt_token_ids": ids} for ids in [[tok.bos_id]] + docs], compile_params, use_tqdm=False)
        prompt = [tok.bos_id] + [t for d in docs for t in d] + query
        ask = SamplingParams(max_tokens=4, temperature=0.0, extra_args={
            "kv_transfer_params": {PARAMS_KEY: {"chunks": [1] + [len(d) for d in docs]}}})
        (out,) = llm.generate([{"prompt_token_ids": prompt}], ask, use_tqdm=False)
        ref = epic.answer(model, docs, query, method="naive", bos_id=tok.bos_id, eos_id=tok.eos_id, max_new_tokens=4)
        same += [t for t in out.outputs[0].token_ids if t != tok.eos_id] == ref.tokens
    assert same >= 18, f"vLLM with the connector agreed with the embedded naive link on {same}/20 items"
