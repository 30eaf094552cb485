"""rayml.graphs.cur_mgae and generators: the self-paced step, the curriculum mask, the encoder, SBMs."""

import numpy as np
import pytest
import torch

from rayml.graphs import cur_mgae as cm
from rayml.graphs import generators as gen
from rayml.graphs.message_passing import add_self_loops, dense_adjacency


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small graphs: one thread is much faster than a contended pool (and is what Ray tasks use)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_self_paced_step_is_the_box_constrained_minimiser():
    rng = np.random.default_rng(0)
    d, prev = rng.random(50), rng.random(50)
    lam, mu = 0.4, 2.0
    S = cm.self_paced_weights(d, prev, lam, mu)
    # brute force per coordinate on a fine grid of [0, 1]
    grid = np.linspace(0, 1, 20001)
    obj = grid[None, :] * (d - lam)[:, None] + mu / 2 * (grid[None, :] - prev[:, None]) ** 2
    assert np.allclose(S, grid[obj.argmin(1)], atol=1e-4)


def test_curriculum_mask_draws_only_selected_edges_first():
    rng = np.random.default_rng(1)
    w = np.zeros(100)
    w[:20] = 1.0
    m = cm.curriculum_mask(rng, w, budget=30, split_ratio=0.5)
    assert len(set(m.tolist())) == 30
    assert np.all(m[:15] < 20)  # the curriculum part comes from the selected pool
    m = cm.curriculum_mask(rng, np.zeros(100), budget=10, split_ratio=1.0)  # empty pool: all random
    assert len(set(m.tolist())) == 10
    with pytest.raises(ValueError, match="budget"):
        cm.curriculum_mask(rng, w, budget=101, split_ratio=0.5)


def test_gcn_encoder_equals_dense_normalised_propagation():
    torch.manual_seed(0)
    x = torch.randn(7, 3)
    edges = torch.tensor([[0, 1, 2, 3, 5], [1, 2, 3, 4, 6]])
    enc = cm.GCNEncoder(3, 4, 2)
    hs = enc(x, edges)
    A = dense_adjacency(add_self_loops(torch.cat([edges, edges.flip(0)], 1), 7), 7)
    d = A.sum(1)
    P = A / torch.sqrt(d[:, None] * d[None, :])
    h1 = torch.relu(P @ enc.lins[0](x))
    h2 = P @ enc.lins[1](h1)
    assert torch.allclose(hs[0], h1, atol=1e-5) and torch.allclose(hs[1], h2, atol=1e-5)


def test_encoder_is_permutation_equivariant_and_decoder_symmetric():
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 5]])
    perm = torch.randperm(6)
    inv = torch.argsort(perm)
    enc, dec = cm.GCNEncoder(3, 4, 2), cm.CrossCorrelationDecoder(4, 2)
    h = enc(x, edges)
    hp = enc(x[perm], inv[edges])
    assert torch.allclose(hp[-1], h[-1][perm], atol=1e-5)
    pairs = torch.tensor([[0, 2], [4, 5]])
    assert torch.allclose(dec(h, pairs), dec(h, pairs.flip(0)), atol=1e-6)


def test_sbm_homophily_and_degree():
    g = gen.homophilous_sbm(np.random.default_rng(0), n=800, classes=10, degree=8, homophily=0.7)
    assert abs(gen.edge_homophily(g.edges, g.y) - 0.7) < 0.04
    assert abs(2 * g.edges.shape[1] / g.n - 8) < 0.6
    assert np.all(g.edges[0] < g.edges[1])
    with pytest.raises(ValueError, match="homophily"):
        gen.homophilous_sbm(np.random.default_rng(0), homophily=1.5)


def test_split_negatives_are_non_edges():
    rng = np.random.default_rng(2)
    g = gen.homophilous_sbm(rng, n=200, classes=4, degree=6, homophily=0.5)
    sp = gen.split_edges(rng, g.edges, g.n)
    ex = set(map(tuple, g.edges.T.tolist()))
    for key in ("val_neg", "test_neg"):
        assert all((u, v) not in ex and u < v for u, v in sp[key].T.tolist())
    assert sp["train"].shape[1] + sp["val"].shape[1] + sp["test"].shape[1] == g.edges.shape[1]


def test_curriculum_masks_easier_edges_first_and_runs_are_deterministic():
    rng = np.random.default_rng(3)
    g = gen.homophilous_sbm(rng, n=150, classes=4, degree=6, homophily=0.9, feat_dim=8)
    cfg = cm.MGAEConfig(method="cur-mgae", hidden=16, epochs=12, mask_ratio=0.5, measure_every=1)
    a = cm.pretrain(g.x, g.edges, cfg, seed=4)
    b = cm.pretrain(g.x, g.edges, cfg, seed=4)
    assert np.array_equal(a["embeddings"], b["embeddings"])
    rel = np.array(a["masked_difficulty"]) / np.array(a["difficulty_mean"])
    assert rel[0] < 1.0  # the first masks favour easy edges
    r = cm.pretrain(g.x, g.edges, cm.MGAEConfig(method="random-edge-mask", hidden=16, epochs=3), seed=4)
    f = cm.pretrain(g.x, g.edges, cm.MGAEConfig(method="feature-mask", hidden=16, epochs=3), seed=4)
    assert r["embeddings"].shape == f["embeddings"].shape == (150, 32)


def test_pool_reaches_every_edge_only_at_the_end():
    """The pace grows on the quantile scale after the warm-up: the selectable pool (S > 0) widens
    monotonically and holds every edge only at the last epoch (it saturated by epoch 35 of 80 before)."""
    rng = np.random.default_rng(5)
    g = gen.homophilous_sbm(rng, n=120, classes=4, degree=6, homophily=0.8, feat_dim=8)
    cfg = cm.MGAEConfig(method="cur-mgae", hidden=8, epochs=14, warmup=4, mask_ratio=0.4, measure_every=2, folds=3)
    pool = np.array(cm.pretrain(g.x, g.edges, cfg, seed=1)["pool_fraction"])
    assert len(pool) == 10  # no curriculum during the 4 warm-up epochs
    assert pool[-1] == 1.0 and np.all(pool[:-1] < 1.0)
    assert cm.pace_quantile(4, 14, 4, 0.3) == pytest.approx(0.3) and cm.pace_quantile(13, 14, 4, 0.3) == 1.0


def test_difficulty_is_scored_with_the_edge_hidden():
    """An edge's held-out score does not depend on whether the encoder saw that edge."""
    torch.manual_seed(0)
    x = torch.randn(8, 3)
    edges = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]])
    enc, dec = cm.GCNEncoder(3, 4, 2), cm.CrossCorrelationDecoder(4, 2)
    d = cm.heldout_difficulty(enc, dec, x, edges, folds=6, rng=np.random.default_rng(0))  # one edge per fold
    for e in range(6):
        rest = torch.cat([edges[:, :e], edges[:, e + 1:]], 1)
        with torch.no_grad():
            want = 1 - torch.sigmoid(dec(enc(x, rest), edges[:, e:e + 1]))
        assert d[e] == pytest.approx(float(want), abs=1e-6)


def test_bad_config():
    with pytest.raises(ValueError, match="method"):
        cm.MGAEConfig(method="graphmae2")
    with pytest.raises(ValueError, match="mask_ratio"):
        cm.MGAEConfig(mask_ratio=1.0)
    with pytest.raises(ValueError, match="warmup"):
        cm.MGAEConfig(epochs=5, warmup=5)
    with pytest.raises(ValueError, match="train_edges"):
        cm.pretrain(np.zeros((3, 2)), np.array([[0, 5], [1, 2]]), cm.MGAEConfig(), seed=0)
