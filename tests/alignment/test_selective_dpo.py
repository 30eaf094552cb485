"""rayml.alignment.selective_dpo: halves, learning orders (a constructed easy/hard set), agreement,
selection, the curriculum, weights, preference data and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from rayml.alignment import dpo, preference as pf, selective_dpo as sd
from rayml.llm import tasks
from rayml.llm.model import ModelConfig, TransformerLM

torch.set_num_threads(1)


def _model(seed=0):
    cfg = ModelConfig(vocab_size=24, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32, max_seq_len=32)
    m = TransformerLM(cfg)
    m.reset_parameters(torch.Generator().manual_seed(seed))
    return m.eval()


def _easy_hard(n=48, flipped=12, seed=0):
    """A consistent preference (token 5 over token 6 after any prompt) for most pairs, and pairs
    whose labels contradict it (the hard, noisy ones)."""
    rng = np.random.default_rng(seed)
    pairs, hard = [], np.zeros(n, dtype=bool)
    hard[rng.choice(n, size=flipped, replace=False)] = True
    for i in range(n):
        prompt = [1] + rng.integers(7, 23, size=int(rng.integers(1, 4))).tolist()
        c, r = (6, 5) if hard[i] else (5, 6)
        pairs.append(dpo.TokenPair(prompt, [c, 2], [r, 2]))
    return pairs, hard


def test_halves_are_disjoint_and_cover():
    a, b = sd.split_halves(11, seed=3)
    assert len(a) == 5 and len(b) == 6
    assert sorted(np.concatenate([a, b]).tolist()) == list(range(11))
    c, _ = sd.split_halves(11, seed=3)
    assert np.array_equal(a, c)


def test_learning_order_is_the_mean_over_runs_and_evaluations():
    runs = [sd.ReferenceRun(np.array([0, 2]), np.array([[1.0, 3.0], [3.0, 5.0]]), (1, 2)),
            sd.ReferenceRun(np.array([1, 3]), np.array([[0.5, 2.0]]), (2,)),
            sd.ReferenceRun(np.array([0, 1]), np.array([[4.0, 1.5]]), (2,))]
    order = sd.learning_order(runs, 4)
    np.testing.assert_allclose(order, [(1 + 3 + 4) / 3, (0.5 + 1.5) / 2, 4.0, 2.0])
    with pytest.raises(ValueError, match="never held out"):
        sd.learning_order(runs[:1], 4)


def test_learning_order_ranks_a_constructed_hard_set_last_and_agrees_across_seeds():
    pairs, hard = _easy_hard()
    model = _model(1)
    cfg = dpo.DPOConfig(beta=0.5, lr=1e-2, steps=36, batch_size=8)
    orders = []
    for k in range(2):
        first, second = sd.split_halves(len(pairs), seed=100 + k)
        runs = [sd.reference_run(model, pairs, first, second, cfg, evals=3, seed=k),
                sd.reference_run(model, pairs, second, first, cfg, evals=3, seed=k + 10)]
        assert runs[0].losses.shape == (3, len(second)) and runs[0].steps == (12, 24, 36)
        orders.append(sd.learning_order(runs, len(pairs)))
    order = (orders[0] + orders[1]) / 2
    easiest = sd.select_easiest(order, 0.5)
    assert hard[easiest].sum() <= 2, "a random half holds 6 of the 12 contradicting pairs on average"
    rank = np.argsort(np.argsort(order))  # AUC of the order as a detector of the hard pairs
    auc = (rank[hard].sum() - hard.sum() * (hard.sum() - 1) / 2) / (hard.sum() * (~hard).sum())
    assert auc > 0.85
    agree = sd.order_agreement(orders)
    assert agree[0, 1] == pytest.approx(spearmanr(orders[0], orders[1]).statistic)
    assert agree[0, 1] > 0.5


def test_reference_run_is_deterministic_for_a_seed():
    pairs, _ = _easy_hard(16, 4)
    a, b = sd.split_halves(16, seed=0)
    cfg = dpo.DPOConfig(beta=0.5, lr=1e-2, steps=4, batch_size=4)
    r1 = sd.reference_run(_model(), pairs, a, b, cfg, evals=2, seed=5)
    r2 = sd.reference_run(_model(), pairs, a, b, cfg, evals=2, seed=5)
    np.testing.assert_array_equal(r1.losses, r2.losses)


def test_selection_weights_and_random_subsets():
    order = np.array([0.4, 0.1, 0.9, 0.1, 0.7])
    assert sd.select_easiest(order, 0.4).tolist() == [1, 3]
    assert sd.select_easiest(order, 1.0).tolist() == [1, 3, 0, 4, 2]
    sub = sd.random_subset(10, 0.5, seed=1)
    assert len(sub) == 5 and len(set(sub.tolist())) == 5
    w = sd.difficulty_weights(order, 1.0)
    assert w.mean() == pytest.approx(1.0)
    assert np.all(np.diff(w[np.argsort(order, kind="stable")]) <= 1e-12)  # harder -> lighter


def test_selective_dpo_trains_the_kept_pairs_easy_to_hard():
    pairs, _ = _easy_hard(12, 3)
    order = np.arange(12, dtype=float)[::-1]  # the last pair is the easiest
    cfg = dpo.DPOConfig(beta=0.5, lr=1e-2, steps=3, batch_size=2)
    got = sd.selective_dpo(_model(), pairs, order, 0.5, cfg, seed=0)
    keep = sd.select_easiest(order, 0.5)
    assert keep.tolist() == [11, 10, 9, 8, 7, 6]
    want = dpo.train_dpo(_model(), [pairs[i] for i in keep],
                         dpo.DPOConfig(beta=0.5, lr=1e-2, steps=3, batch_size=2, order="sequential"), seed=0)
    for k, v in got.model.state_dict().items():
        assert torch.equal(v, want.model.state_dict()[k])


def test_preference_pairs_are_verified_graded_and_noisy_at_the_stated_rate():
    pairs = pf.make_pairs(60, levels=(2, 4), noise=0.2, seed=0)
    assert sum(p.noisy for p in pairs) == 12
    assert {p.level for p in pairs} == {2, 4}
    for p in pairs:
        good, bad = (p.rejected, p.chosen) if p.noisy else (p.chosen, p.rejected)
        assert tasks.score(p.item, good) == 1.0 and tasks.score(p.item, bad) == 0.0
        assert len(str(p.item.meta["a"])) == p.level
    test = pf.eval_items(5, levels=(3,), seed=0)
    assert all(tasks._pair_held_out(it.meta["a"], it.meta["b"]) for it in test)


def test_bad_input_is_rejected_with_the_argument_named():
    with pytest.raises(ValueError, match="fraction"):
        sd.select_easiest(np.zeros(4), 0.0)
    with pytest.raises(ValueError, match="fraction"):
        sd.random_subset(4, 1.5, seed=0)
    with pytest.raises(ValueError, match="temperature"):
        sd.difficulty_weights(np.zeros(4), 0.0)
    with pytest.raises(ValueError, match="n must"):
        sd.split_halves(1, 0)
    pairs, _ = _easy_hard(8, 2)
    cfg = dpo.DPOConfig(steps=2, batch_size=2)
    with pytest.raises(ValueError, match="evals"):
        sd.reference_run(_model(), pairs, [0, 1], [2, 3], cfg, evals=3)
    with pytest.raises(ValueError, match="disjoint"):
        sd.reference_run(_model(), pairs, [0, 1], [1, 2], cfg, evals=1)
    with pytest.raises(ValueError, match="order"):
        sd.selective_dpo(_model(), pairs, np.zeros(3), 0.5, cfg)
    with pytest.raises(ValueError, match="levels"):
        pf.make_pairs(4, levels=(0,))
    with pytest.raises(ValueError, match="noise"):
        pf.make_pairs(4, noise=0.6)
