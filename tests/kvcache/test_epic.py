"""EPIC / LegoLink on the embedded model: exactness against full recompute (k = all tokens,
CacheBlend r = 1, prefix hits), re-rotated keys against keys computed at the target positions and
against a float64 complex-number RoPE, recompute counts, the baselines' differences, greedy
answers against the substrate's recompute generation, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rayml.kvcache import epic
from rayml.llm.generation import generate_recompute
from rayml.llm.model import ModelConfig, TransformerLM

BOS, EOS = 1, 2


def _model(seed=0, **kw) -> TransformerLM:
    cfg = dict(vocab_size=48, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=256)
    cfg.update(kw)
    torch.manual_seed(seed)
    m = TransformerLM(ModelConfig(**cfg)).eval()
    with torch.no_grad():  # sharper attention than the init, so methods differ visibly
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(6.0)
    return m.double()


def _request(seed=0, n_docs=3):
    rng = np.random.default_rng(seed)
    docs = [[int(t) for t in rng.integers(3, 48, size=int(rng.integers(4, 9)))] for _ in range(n_docs)]
    query = [int(t) for t in rng.integers(3, 48, size=3)]
    return docs, query


def _layout(docs, query, chunk_bos):
    return [BOS] + [t for d in docs for t in ([BOS] if chunk_bos else []) + d] + query


@pytest.mark.parametrize("chunk_bos", [False, True])
def test_legolink_with_k_all_tokens_equals_full_recompute(chunk_bos):
    m = _model()
    docs, query = _request()
    ref = m(torch.tensor([_layout(docs, query, chunk_bos)]))[0, -1]  # plain forward, no cache
    full = epic.prefill(m, docs, query, spec=epic.LinkSpec("full"), bos_id=BOS, chunk_bos=chunk_bos)
    assert torch.allclose(full.logits, ref, atol=1e-10)
    ll = epic.prefill(m, docs, query, spec=epic.LinkSpec("legolink", k=1000), bos_id=BOS, chunk_bos=chunk_bos)
    assert torch.allclose(ll.logits, ref, atol=1e-9)
    n = full.n_prompt
    for a, b in zip(ll.cache.keys + ll.cache.values, full.cache.keys + full.cache.values):
        assert torch.allclose(a[:, :, :n], b[:, :, :n], atol=1e-6)  # KVCache.rerotate works in float32
    assert ll.recomputed == n - 1  # only the first chunk, [BOS] (a true prefix), was reused


def test_small_k_differs_from_full_and_k0_is_naive():
    m = _model()
    docs, query = _request(1)
    full = epic.prefill(m, docs, query, spec=epic.LinkSpec("full"), bos_id=BOS)
    naive = epic.prefill(m, docs, query, spec=epic.LinkSpec("naive"), bos_id=BOS)
    k0 = epic.prefill(m, docs, query, spec=epic.LinkSpec("legolink", k=0), bos_id=BOS)
    k2 = epic.prefill(m, docs, query, spec=epic.LinkSpec("legolink", k=2), bos_id=BOS)
    assert torch.equal(naive.logits, k0.logits)
    assert naive.recomputed == len(query)
    assert k2.recomputed == len(query) + sum(min(2, len(d)) for d in docs)
    assert not torch.allclose(naive.logits, full.logits, atol=1e-3)  # position-independent reuse is inexact
    kl = [epic.first_token_metrics(full.logits, x.logits)["kl"] for x in (naive, k2)]
    assert kl[0] > 0 and kl[1] > 0


def test_recomputed_rows_hold_exactly_what_the_recompute_defines():
    """The k recomputed rows of a chunk attend to the linked (rotated, stale) rows before them:
    rebuild that by hand, layer by layer, with a mask over a cache assembled from the chunks."""
    m = _model(2, n_layers=1)
    docs, query = _request(2, n_docs=2)
    k = 2
    res = epic.prefill(m, docs, query, spec=epic.LinkSpec("legolink", k=k), bos_id=BOS)
    # with one layer, the stale rows are the chunks compiled alone, rotated; a recomputed row's
    # key/value depend only on its own token and position
    chunks = [epic.precompute_chunk(m, [BOS])] + [epic.precompute_chunk(m, d) for d in docs]
    linked, starts = epic.link(chunks)
    ids = [BOS] + [t for d in docs for t in d] + query
    sel = list(range(starts[1], starts[1] + k)) + list(range(starts[2], starts[2] + k)) \
        + list(range(len(ids) - len(query), len(ids)))
    alone = epic.precompute_chunk(m, ids)  # every row fresh at its true position (layer 0 input only)
    for r in range(len(ids)):
        want = alone if r in sel else linked
        assert torch.allclose(res.cache.keys[0][:, :, r], want.keys[0][:, :, r], atol=1e-9)
        assert torch.allclose(res.cache.values[0][:, :, r], want.values[0][:, :, r], atol=1e-9)


def test_rotated_keys_equal_keys_computed_at_the_target_positions():
    m = _model(3)
    ids = [5, 9, 17, 3, 30, 41, 7]
    at0 = epic.precompute_chunk(m, ids)
    for p0 in (1, 13, 200):
        moved = at0.clone()
        moved.rerotate(torch.arange(p0, p0 + len(ids)))
        direct = m.new_cache(1, capacity=len(ids))
        m(torch.tensor([ids]), torch.arange(p0, p0 + len(ids)), cache=direct)
        for layer in range(m.config.n_layers):  # RoPE angles are float32 in the substrate
            assert torch.allclose(moved.keys[layer], direct.keys[layer], atol=1e-5)
            assert torch.allclose(moved.values[layer], direct.values[layer], atol=1e-9)
            assert not torch.allclose(at0.keys[layer], direct.keys[layer], atol=1e-2)  # it did move
        assert moved.positions[0].tolist() == list(range(p0, p0 + len(ids)))


def test_layer0_keys_match_a_float64_complex_rope_reference():
    """Independent RoPE: pair dimension i with i + hd/2 as a complex number, multiply by
    exp(1j * p * theta^(-2i/hd))."""
    m = _model(4)
    ids = [4, 8, 15, 16, 23, 42]
    p0 = 37
    linked, _ = epic.link([epic.precompute_chunk(m, [BOS] * p0), epic.precompute_chunk(m, ids)])
    cfg = m.config
    hd = cfg.head_dim
    with torch.no_grad():
        h = m.layers[0].input_layernorm(m.embed_tokens(torch.tensor(ids)))
        k = m.layers[0].self_attn.k_proj(h).view(len(ids), cfg.n_kv_heads, hd).numpy()
    z = k[..., : hd // 2] + 1j * k[..., hd // 2:]
    freqs = cfg.rope_theta ** (-np.arange(0, hd, 2) / hd)
    pos = np.arange(p0, p0 + len(ids))[:, None, None]
    zr = z * np.exp(1j * pos * freqs)
    want = np.concatenate([zr.real, zr.imag], axis=-1).transpose(1, 0, 2)  # (heads, seq, hd)
    got = linked.keys[0][0, :, p0:p0 + len(ids)].numpy()
    assert np.allclose(got, want, atol=1e-5)  # float32 RoPE angles in the substrate


def test_cacheblend_r1_equals_full_and_r0_recomputes_only_the_query_after_the_check_layer():
    m = _model(5)
    docs, query = _request(5)
    full = epic.prefill(m, docs, query, spec=epic.LinkSpec("full"), bos_id=BOS)
    r1 = epic.prefill(m, docs, query, spec=epic.LinkSpec("cacheblend", r=1.0), bos_id=BOS)
    assert torch.allclose(r1.logits, full.logits, atol=1e-9)
    r0 = epic.prefill(m, docs, query, spec=epic.LinkSpec("cacheblend", r=0.0, check_layer=1), bos_id=BOS)
    n, L = full.n_prompt, m.config.n_layers
    assert r0.recomputed == pytest.approx((1 * n + (L - 1) * len(query)) / L)
    r3 = epic.prefill(m, docs, query, spec=epic.LinkSpec("cacheblend", r=0.3), bos_id=BOS)
    n_ctx = n - len(query)
    assert r3.recomputed == pytest.approx((n + (L - 1) * (int(0.3 * n_ctx) + len(query))) / L)


def test_cacheblend_selects_the_tokens_whose_values_deviate_most():
    m = _model(6, n_layers=3)
    docs, query = _request(6)
    spec = epic.LinkSpec("cacheblend", r=0.25, check_layer=1)
    chunks = [epic.precompute_chunk(m, [BOS])] + [epic.precompute_chunk(m, d) for d in docs]
    linked, _ = epic.link(chunks)
    stale_v1, stale_v2 = linked.values[1].clone(), linked.values[2].clone()
    res = epic.prefill(m, docs, query, spec=spec, bos_id=BOS)
    # reference: layer-1 values of the fully recomputed prompt (layer 0 is recomputed for all, so
    # the check layer sees the true inputs) against the stale linked ones
    full = epic.prefill(m, docs, query, spec=epic.LinkSpec("full"), bos_id=BOS)
    n_ctx = full.n_prompt - len(query)
    dev = ((full.cache.values[1][0, :, :n_ctx] - stale_v1[0, :, :n_ctx]) ** 2).sum(dim=(0, 2))
    top = set(torch.topk(dev, int(0.25 * n_ctx)).indices.tolist())
    assert torch.allclose(res.cache.values[1][0, :, :n_ctx], full.cache.values[1][0, :, :n_ctx], atol=1e-9)
    # after the check layer only the selected rows are rewritten
    changed = {r for r in range(n_ctx) if not torch.equal(res.cache.values[2][0, :, r], stale_v2[0, :, r])}
    assert changed == top and len(top) == int(0.25 * n_ctx)


def test_prefix_cache_hits_are_exact_and_cover_the_longest_prefix():
    m = _model(7)
    docs, query = _request(7, n_docs=4)
    pc = epic.PrefixCache()
    first = epic.prefill(m, docs, query, spec=epic.LinkSpec("prefix"), bos_id=BOS, prefix_cache=pc)
    assert first.recomputed == first.n_prompt  # cold
    swapped = docs[:2] + [docs[3], docs[2]]
    again = epic.prefill(m, swapped, query, spec=epic.LinkSpec("prefix"), bos_id=BOS, prefix_cache=pc)
    full = epic.prefill(m, swapped, query, spec=epic.LinkSpec("full"), bos_id=BOS)
    assert torch.allclose(again.logits, full.logits, atol=1e-9)
    assert again.recomputed == len(docs[3]) + len(docs[2]) + len(query)
    small = epic.PrefixCache(max_entries=2)
    small.store([[1], [2, 3], [4]], epic.precompute_chunk(m, [1, 2, 3, 4]))
    assert small.lookup([[1]])[1] == 0 and small.lookup([[1], [2, 3], [4]])[1] == 3


def test_answer_full_equals_recompute_generation_and_legolink_k_all_too():
    m = _model(8)
    docs, query = _request(8)
    prompt = [BOS] + [t for d in docs for t in d] + query
    want = generate_recompute(m, [prompt], max_new_tokens=6, eos_id=EOS).tokens[0]
    for method, k in (("full", 0), ("legolink", 10 ** 6), ("prefix", 0)):
        got = epic.answer(m, docs, query, method=method, k=k, bos_id=BOS, eos_id=EOS, max_new_tokens=6)
        assert got.tokens == want


def test_arrays_roundtrip_keys_and_fingerprints():
    m = _model(9)
    c = epic.precompute_chunk(m, [3, 4, 5])
    back = epic.cache_from_arrays(epic.cache_to_arrays(c))
    assert back.length == 3 and all(torch.equal(a, b[:, :, :3]) for a, b in zip(back.keys, c.keys))
    fp = epic.model_fingerprint(m)
    assert fp == epic.model_fingerprint(m) and fp != epic.model_fingerprint(_model(10))
    assert epic.chunk_key(fp, [1, 2]) != epic.chunk_key(fp, [2, 1]) != epic.chunk_key("other", [1, 2])
    a = torch.tensor([2.0, 1.0, 0.0])
    b = torch.tensor([0.0, 1.0, 2.0])
    p, q = torch.softmax(a.double(), 0), torch.softmax(b.double(), 0)
    assert epic.first_token_metrics(a, b) == pytest.approx({"top1_agreement": 0.0,
                                                            "kl": float((p * (p / q).log()).sum())})
    assert epic.first_token_metrics(a, a)["kl"] == 0.0


def test_bad_input_names_the_argument():
    m = _model()
    docs, query = _request()
    with pytest.raises(ValueError, match="method"):
        epic.LinkSpec("fast")
    with pytest.raises(ValueError, match="k must"):
        epic.LinkSpec("legolink", k=-1)
    with pytest.raises(ValueError, match="r must"):
        epic.LinkSpec("cacheblend", r=1.5)
    with pytest.raises(ValueError, match="query"):
        epic.prefill(m, docs, [], bos_id=BOS)
    with pytest.raises(ValueError, match="chunk_ids"):
        epic.prefill(m, [[]], query, bos_id=BOS)
    with pytest.raises(ValueError, match="context length"):
        epic.prefill(m, [[5] * 300], query, bos_id=BOS)
    with pytest.raises(ValueError, match="chunks"):
        epic.prefill(m, docs, query, bos_id=BOS, chunks=[epic.precompute_chunk(m, [5])])
    with pytest.raises(ValueError, match="check_layer"):
        epic.prefill(m, docs, query, bos_id=BOS, spec=epic.LinkSpec("cacheblend", check_layer=9))
    with pytest.raises(ValueError, match="max_new_tokens"):
        epic.answer(m, docs, query, bos_id=BOS, max_new_tokens=0)
    with pytest.raises(ValueError, match="bos_id"):
        epic.prefill(m, docs, query, chunk_bos=True)
    with pytest.raises(ValueError, match="max_entries"):
        epic.PrefixCache(0)
