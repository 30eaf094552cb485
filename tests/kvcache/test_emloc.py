"""rayml.kvcache.emloc: exactness against one full prefill and the model's own forward, the JS
budget, the kept-token budgets, the importance formula, determinism, bad input."""

import math

import numpy as np
import pytest
import torch

from rayml.kvcache import emloc as E
from rayml.llm.model import ModelConfig, TransformerLM


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = TransformerLM(ModelConfig(vocab_size=48, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=64))
    return m.eval()


def _demos(n, seed=0, vocab=48):
    rng = np.random.default_rng(seed)
    return [E.Demo(rng.integers(3, vocab, size=int(rng.integers(2, 5))).tolist(),
                   rng.integers(3, vocab, size=int(rng.integers(1, 3))).tolist(), [2]) for _ in range(n)]


def test_demo_label_mask_follows_the_authors_label_span():
    d = E.Demo([5, 6, 7], [8, 9], [2, 4])
    # last prompt token (predicts the first answer token), the answer, the first end token
    assert d.label_mask == [False, False, True, True, True, True, False]
    assert d.ids == [5, 6, 7, 8, 9, 2, 4]


def test_full_memory_matches_the_model_forward(model):
    ids = [1] + list(range(3, 30))
    mem = E.full_memory(model, ids)
    q = [5, 9, 11]
    ref = model(torch.tensor([ids + q]))[0, -len(q):]
    assert torch.allclose(E.query_logits(model, mem, q), ref, atol=1e-5)


def test_delta_zero_keeps_every_token_and_equals_full_context(model):
    demos = _demos(9)
    ids, _ = E.context_ids(demos, 1)
    res = E.compress(model, demos, E.EMLoCConfig(delta=0.0, chunk_size=2), bos_id=1)
    full = E.full_memory(model, ids)
    assert res.memory.tokens_per_layer() == [len(ids)] * 3
    assert res.memory.kept_fraction() == 1.0
    for a, b in zip(res.memory.keys + res.memory.values, full.keys + full.values):
        assert torch.allclose(a, b, atol=1e-5)
    q = [7, 8, 9]
    assert torch.allclose(E.query_logits(model, res.memory, q), E.query_logits(model, full, q), atol=1e-5)
    # every candidate was tried and refused (JS > 0)
    assert all(js > 0 for tr in res.traces for tried in tr.tried.values() for _, js in tried if not math.isnan(js))


def test_huge_delta_keeps_the_smallest_ratio_in_every_layer(model):
    demos = _demos(8, seed=1)
    cfg = E.EMLoCConfig(delta=1e9, chunk_size=4)
    res = E.compress(model, demos, cfg, bos_id=1)
    for tr in res.traces:
        assert tr.length >= 10            # so that 10 % is at least one token
        assert tr.kept == [int(tr.length * 0.1)] * 3
        assert tr.ratio == [0.1] * 3
    assert res.memory.tokens_per_layer() == [sum(int(tr.length * 0.1) for tr in res.traces)] * 3


def test_accepted_steps_meet_the_budget_and_kept_counts_are_candidates(model):
    demos = _demos(8, seed=2)
    cfg = E.EMLoCConfig(delta=0.01, chunk_size=4)
    res = E.compress(model, demos, cfg, bos_id=1)
    for tr in res.traces:
        for layer in range(3):
            allowed = {int(tr.length * r) for r in cfg.ratios} | {tr.length}
            assert tr.kept[layer] in allowed
            for r, js in tr.tried[layer]:
                if r == tr.ratio[layer]:
                    assert js <= cfg.delta
                elif r < tr.ratio[layer] and not math.isnan(js):
                    assert js > cfg.delta   # smaller ratios were refused
    assert sum(res.memory.tokens_per_layer()) == sum(sum(tr.kept) for tr in res.traces)
    # answer rows carry the +100 bonus: they are kept whenever the budget covers them
    assert res.memory.n_tokens == len(E.context_ids(demos, 1)[0])


def test_importance_matches_a_loop_reference():
    torch.manual_seed(3)
    b, h, s, c, kv = 2, 4, 3, 6, 2
    probs = torch.rand(b, h, s, c + s)
    rows = torch.tensor([[True, False, True], [False, True, True]])
    labels = torch.tensor([False, True, False, False, False, True])
    got = E.importance(probs, rows, c, kv, 3, labels, 100.0)
    ref = torch.zeros(kv, c)
    for bi in range(b):
        for si in range(s):
            if rows[bi, si]:
                for hi in range(h):
                    ref[hi // (h // kv)] += probs[bi, hi, si, :c]
    pooled = torch.zeros_like(ref)
    for j in range(c):
        for t in (j - 1, j, j + 1):
            if 0 <= t < c:
                pooled[:, j] += ref[:, t] / 3
    pooled[:, labels] += 100.0
    assert torch.allclose(got, pooled, atol=1e-6)


def test_js_divergence_against_a_float64_reference():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 7)), rng.normal(size=(3, 7))
    p = np.exp(a) / np.exp(a).sum(1, keepdims=True)
    q = np.exp(b) / np.exp(b).sum(1, keepdims=True)
    m = (p + q) / 2
    ref = np.mean(0.5 * (p * np.log(p / m)).sum(1) + 0.5 * (q * np.log(q / m)).sum(1))
    assert E.js_divergence(torch.tensor(a), torch.tensor(b)) == pytest.approx(ref, rel=1e-10)
    assert E.js_divergence(torch.tensor(a), torch.tensor(a)) == 0.0
    assert E.js_divergence(torch.tensor(a), torch.tensor(b)) <= math.log(2)


@pytest.mark.parametrize("method", E.BASELINES)
def test_baselines_keep_their_budget(model, method):
    ids = [1] + list(range(3, 40))
    full, probs = E.full_memory(model, ids, capture=True)
    pruned = E.prune_full(full, probs, method, 10, window=4)
    assert pruned.tokens_per_layer() == [10, 10, 10]
    for p in pruned.positions:   # distinct rows per head
        assert all(len(set(row.tolist())) == 10 for row in p)
    tail = set(range(len(ids) - 4, len(ids)))
    if method == "snapkv":
        assert tail <= set(pruned.positions[0][0].tolist())    # the window is always kept
    if method == "streaming":
        assert set(pruned.positions[0][0].tolist()) == set(range(4)) | set(range(len(ids) - 6, len(ids)))
    assert E.prune_full(full, probs, method, 10_000).tokens_per_layer() == [len(ids)] * 3


def test_compress_is_deterministic(model):
    demos = _demos(6, seed=4)
    r1 = E.compress(model, demos, E.EMLoCConfig(delta=0.02, chunk_size=3), bos_id=1)
    r2 = E.compress(model, demos, E.EMLoCConfig(delta=0.02, chunk_size=3), bos_id=1)
    assert r1.memory.tokens_per_layer() == r2.memory.tokens_per_layer()
    for a, b in zip(r1.memory.keys, r2.memory.keys):
        assert torch.equal(a, b)
    assert E.answer(model, r1.memory, [4, 5], max_new_tokens=3) == E.answer(model, r2.memory, [4, 5], max_new_tokens=3)


def test_memory_round_trips_through_arrays(model):
    res = E.compress(model, _demos(5, seed=5), E.EMLoCConfig(delta=0.05, chunk_size=2), bos_id=1)
    back = E.memory_from_arrays(E.memory_to_arrays(res.memory))
    assert back.tokens_per_layer() == res.memory.tokens_per_layer()
    assert torch.equal(E.query_logits(model, back, [6, 7]), E.query_logits(model, res.memory, [6, 7]))


def test_flops_grow_with_the_context(model):
    small, big = E.FlopCounter(), E.FlopCounter()
    E.full_memory(model, list(range(3, 13)), flops=small)
    E.full_memory(model, list(range(3, 33)), flops=big)
    assert big.flops > 3 * small.flops and big.peak_scores == 9 * small.peak_scores


def test_bad_input_is_rejected(model):
    with pytest.raises(ValueError, match="delta"):
        E.EMLoCConfig(delta=-1.0)
    with pytest.raises(ValueError, match="ratios"):
        E.EMLoCConfig(ratios=(0.5, 0.1))
    with pytest.raises(ValueError, match="ratios"):
        E.EMLoCConfig(ratios=(0.0, 0.5))
    with pytest.raises(ValueError, match="pool"):
        E.EMLoCConfig(pool=4)
    with pytest.raises(ValueError, match="chunk_size"):
        E.EMLoCConfig(chunk_size=0)
    with pytest.raises(ValueError, match="answer"):
        E.Demo([1], [], [2])
    with pytest.raises(ValueError, match="prompt"):
        E.Demo([-1], [3])
    with pytest.raises(TypeError, match="demos"):
        E.compress(model, "abc")
    with pytest.raises(ValueError, match="demos"):
        E.compress(model, [])
    with pytest.raises(TypeError, match="model"):
        E.compress(object(), _demos(2))
    with pytest.raises(TypeError, match="config"):
        E.compress(model, _demos(2), config={"delta": 0.1})
    with pytest.raises(ValueError, match="method"):
        E.prune_full(E.full_memory(model, [1, 2, 3]), [], "random", 2)
    with pytest.raises(ValueError, match="keep"):
        E.prune_full(E.full_memory(model, [1, 2, 3]), [], "streaming", 0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        E.answer(model, E.full_memory(model, [1, 2, 3]), [4], max_new_tokens=0)
    long = [E.Demo([3] * 100, [4])] * 30
    with pytest.raises(ValueError, match="context length"):
        E.compress(model, long)


def test_batched_query_logits_equal_one_query_at_a_time_and_count_the_same_flops(model):
    """``queries_logits`` (session 10) runs ragged queries as one right-padded batch: each row equals
    ``query_logits`` of that query alone (causal attention never sees the padding after it), and the
    FLOPs are those of the single runs, padding excluded."""
    res = E.compress(model, _demos(7, seed=3), E.EMLoCConfig(delta=0.05, chunk_size=3), bos_id=1)
    queries = [[5, 9], [7, 8, 9, 10, 11], [3], [12, 13, 14]]
    f1, f2 = E.FlopCounter(), E.FlopCounter()
    one = [E.query_logits(model, res.memory, q, flops=f1) for q in queries]
    batch = E.queries_logits(model, res.memory, queries, flops=f2)
    assert [b.shape for b in batch] == [o.shape for o in one]
    for a, b in zip(one, batch):
        assert torch.allclose(b, a, atol=1e-5)
    assert f1.flops == f2.flops and f1.peak_scores == f2.peak_scores
    assert E.queries_logits(model, res.memory, []) == []
