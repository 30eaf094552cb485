"""rayml.graphs.fdgen and fdgen_eval: bias terms against hand-computed values and scipy, generated graphs' validity,
the post-processing step, fairness gaps, structure MMDs, determinism and bad input."""

import numpy as np
import pytest
import torch
from scipy.stats import wasserstein_distance

from rayml.graphs import fdgen as fd
from rayml.graphs import fdgen_eval as ev


@pytest.fixture(autouse=True)
def _one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny_graph():
    """Two triangles {0,1,2} (group 0) and {3,4,5} (group 1) joined by the edge 2-3."""
    edges = np.array([[0, 0, 1, 3, 3, 4, 2], [1, 2, 2, 4, 5, 5, 3]])
    s = np.array([0, 0, 0, 1, 1, 1])
    return edges, s


def _dense(edges, n):
    A = torch.zeros(n, n, dtype=torch.float64)
    A[edges[0], edges[1]] = 1.0
    A[edges[1], edges[0]] = 1.0
    return A


def test_wasserstein_matches_hand_values_and_scipy():
    # equal sizes: the mean absolute difference of the sorted samples
    assert float(fd.wasserstein_1d(torch.tensor([0.0, 1.0]), torch.tensor([3.0, 1.0]))) == pytest.approx(1.5)
    # unequal sizes by hand: F_a - F_b on [0, 1] for a = {0, 1}, b = {0, 0, 2}: |1/2 - 2/3| over [0, 1],
    # |1 - 2/3| over [1, 2]  ->  1/6 + 1/3 = 1/2
    assert float(fd.wasserstein_1d(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0, 2.0]))) == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    for na, nb in ((7, 11), (5, 5), (1, 9), (12, 8)):
        a, b = rng.normal(size=(na, 3)), rng.normal(1.0, 2.0, size=(nb, 3))
        got = fd.wasserstein_1d(torch.as_tensor(a), torch.as_tensor(b)).numpy()
        ref = [wasserstein_distance(a[:, j], b[:, j]) for j in range(3)]
        assert np.allclose(got, ref, atol=1e-10)


def test_feature_bias_hand_computed_and_differentiable():
    x = torch.tensor([[0.0, 1.0], [2.0, 1.0], [1.0, 0.0], [3.0, 4.0]], dtype=torch.float64, requires_grad=True)
    s = np.array([0, 0, 1, 1])
    # dim 0: {0, 2} vs {1, 3} -> (1 + 1) / 2 = 1; dim 1: {1, 1} vs {0, 4} -> (1 + 3) / 2 = 2; mean 1.5
    fb = fd.feature_bias(x, s)
    assert float(fb) == pytest.approx(1.5)
    fb.backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert float(fd.feature_bias(torch.ones(4, 3), s)) == 0.0


def test_structural_bias_on_the_tiny_graph_by_hand():
    edges, s = _tiny_graph()
    A = _dense(edges, 6)
    r = fd.neighbour_composition(A, s).numpy()
    # node 2's neighbours are 0, 1, 3 -> 1/3 in group 1; node 3's are 2, 4, 5 -> 2/3
    assert np.allclose(r, [0, 0, 1 / 3, 2 / 3, 1, 1])
    # W1({0, 0, 1/3}, {2/3, 1, 1}) = (2/3 + 1 + 2/3) / 3 = 7/9
    assert float(fd.structural_bias(A, s)) == pytest.approx(7 / 9)
    # the 4-cycle 0-1-3-2-0 with groups (0, 0, 1, 1): every neighbourhood is half and half -> no bias
    cyc = _dense(np.array([[0, 0, 1, 2], [1, 2, 3, 3]]), 4)
    assert float(fd.structural_bias(cyc, np.array([0, 0, 1, 1]))) == pytest.approx(0.0, abs=1e-12)
    # the complete graph: a group-0 node sees 3/5 of group 1, a group-1 node 2/5 -> 1/5
    assert float(fd.structural_bias(torch.ones(6, 6, dtype=torch.float64), s)) == pytest.approx(0.2)
    # two disconnected groups have bias 1
    two = _dense(edges[:, :6], 6)
    assert float(fd.structural_bias(two, s)) == pytest.approx(1.0)
    assert fd.intra_group_fraction(edges, s) == pytest.approx(6 / 7)


def test_structural_bias_is_differentiable_in_edge_probabilities():
    edges, s = _tiny_graph()
    P = (_dense(edges, 6) * 0.8 + 0.05).requires_grad_(True)
    fd.structural_bias(P, s).backward()
    # adding a cross-group edge lowers the bias: its gradient is negative
    assert float(P.grad[0, 4] + P.grad[4, 0]) < 0


def _sbm_like(seed=0, n=60):
    rng = np.random.default_rng(seed)
    s = np.arange(n) % 2
    x = (rng.normal(size=(n, 4)) + 1.5 * s[:, None]).astype(np.float32)
    iu, ju = np.triu_indices(n, 1)
    p = np.where(s[iu] == s[ju], 0.25, 0.02)
    keep = rng.random(iu.size) < p
    return x, np.stack([iu[keep], ju[keep]]), s


def test_generated_graphs_are_valid_and_deterministic():
    x, e, s = _sbm_like()
    cfg = fd.GeneratorConfig(latent=4, hidden=8, epochs=30, lambda_feature=1.0, lambda_structure=1.0)
    g1 = fd.fit_generator(x, e, s, cfg, seed=3)
    g2 = fd.fit_generator(x, e, s, cfg, seed=3)
    a, b = fd.sample_graph(g1, x, 7), fd.sample_graph(g2, x, 7)
    assert np.array_equal(a["edges"], b["edges"]) and np.array_equal(a["x"], b["x"])
    E = a["edges"]
    assert E.shape[0] == 2 and np.all(E[0] < E[1])  # each pair once, no self loops
    assert len({tuple(p) for p in E.T.tolist()}) == E.shape[1]
    A = np.zeros((60, 60))
    A[E[0], E[1]] = 1
    A = A + A.T
    assert np.array_equal(A, A.T) and np.all(np.diag(A) == 0)
    assert np.allclose(a["probs"], a["probs"].T) and a["x"].shape == x.shape
    assert not np.array_equal(fd.sample_graph(g1, x, 8)["edges"], E)  # another seed, another graph


def test_fairness_terms_lower_the_generated_bias():
    x, e, s = _sbm_like(1, 80)
    base = fd.GeneratorConfig(latent=8, hidden=16, epochs=120, kl_weight=0.1)
    fair = fd.GeneratorConfig(latent=8, hidden=16, epochs=120, kl_weight=0.1, lambda_feature=2.0,
                              lambda_structure=2.0)
    hp = fd.fit_generator(x, e, s, base, seed=0).history
    hf = fd.fit_generator(x, e, s, fair, seed=0).history
    assert hf["feature_bias"] < 0.5 * hp["feature_bias"]
    assert hf["structural_bias"] < 0.5 * hp["structural_bias"]


def test_postprocess_moves_to_parity_and_keeps_edge_count():
    x, e, s = _sbm_like(2, 60)
    probs = np.full((60, 60), 0.1)
    before = fd.intra_group_fraction(e, s)
    out = fd.fairgen_postprocess(e, s, probs, 1.0, np.random.default_rng(0))
    f_star = (30 * 29 * 2) / (60 * 59)
    assert out.shape[1] == e.shape[1]
    assert np.all(out[0] < out[1]) and len({tuple(p) for p in out.T.tolist()}) == out.shape[1]
    assert before > 0.7 and abs(fd.intra_group_fraction(out, s) - f_star) < 2 / e.shape[1]
    half = fd.fairgen_postprocess(e, s, probs, 0.5, np.random.default_rng(0))
    assert fd.intra_group_fraction(half, s) == pytest.approx((before + f_star) / 2, abs=2 / e.shape[1])
    assert np.array_equal(fd.fairgen_postprocess(e, s, probs, 0.0, np.random.default_rng(0)), np.sort(e, axis=0))


def test_fairness_gaps_by_hand():
    pred = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    y = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    g = ev.fairness_gaps(pred, y, s)
    assert g["dsp"] == pytest.approx(0.5 - 0.25)      # P(1|s=0) = 2/4, P(1|s=1) = 1/4
    assert g["deo"] == pytest.approx(0.5 - 0.5)       # P(1|y=1,s=0) = 1/2, P(1|y=1,s=1) = 1/2
    assert g["acc"] == pytest.approx(5 / 8)
    assert np.isnan(ev.fairness_gaps(pred, y, np.zeros(8, int))["dsp"])


def test_structure_statistics_against_networkx():
    nx = pytest.importorskip("networkx")
    G = nx.karate_club_graph()
    e = np.array(list(G.edges())).T
    n = G.number_of_nodes()
    c = np.array([nx.clustering(G, v) for v in range(n)])
    h, _ = np.histogram(c, bins=20, range=(0, 1))
    assert np.allclose(ev.clustering_histogram(e, n), h / n)
    ev_ref = np.linalg.eigvalsh(nx.normalized_laplacian_matrix(G, weight=None).toarray())
    assert np.allclose(ev.laplacian_spectrum(e, n), np.sort(ev_ref), atol=1e-9)
    assert ev.spectral_histogram(e, n).sum() == pytest.approx(1.0)
    deg = np.bincount([d for _, d in G.degree()], minlength=18)[:18]
    assert np.allclose(ev.degree_histogram(e, n, 17)[:17], deg[:17] / n)
    mm = ev.structure_mmd([e], e, n)
    assert all(v == pytest.approx(0.0, abs=1e-12) for v in mm.values())
    rng = np.random.default_rng(0)
    iu, ju = np.triu_indices(n, 1)
    pick = rng.choice(iu.size, e.shape[1], replace=False)
    er = ev.structure_mmd([np.stack([iu[pick], ju[pick]])], e, n)
    assert er["clustering_mmd"] > 0.05
    # an isolated node: networkx's normalised Laplacian has a zero row for it, and so does ours
    G.add_node(n)
    ref = np.linalg.eigvalsh(nx.normalized_laplacian_matrix(G, weight=None).toarray())
    assert np.allclose(ev.laplacian_spectrum(e, n + 1), np.sort(ref), atol=1e-9)


def test_gaussian_tv_mmd_by_hand():
    p, q = np.array([1.0, 0.0]), np.array([0.0, 1.0])   # TV = 1
    k = np.exp(-1 / (2 * 0.25))
    assert ev.gaussian_tv_mmd([p], [q], 0.5) == pytest.approx(2 - 2 * k)
    assert ev.gaussian_tv_mmd([p, q], [p, q], 0.5) == pytest.approx(0.0, abs=1e-12)


def test_gcn_learns_a_separable_graph_and_is_deterministic():
    x, e, s = _sbm_like(3, 80)
    y = s.copy()
    tr = np.random.default_rng(0).permutation(80)[:40]
    te = np.setdiff1d(np.arange(80), tr)
    m1 = ev.train_gcn(x, e, y, tr, seed=0, epochs=60)
    m2 = ev.train_gcn(x, e, y, tr, seed=0, epochs=60)
    p1, p2 = ev.predict_gcn(m1, x, e), ev.predict_gcn(m2, x, e)
    assert np.array_equal(p1, p2)
    assert np.mean(p1[te] == y[te]) > 0.9


@pytest.mark.parametrize("kwargs,match", [
    (dict(x=np.zeros((3, 2))), "x must be"),
    (dict(edges=np.array([[0, 1], [1, 1]])), "self loops"),
    (dict(edges=np.array([[0, 1], [1, 99]])), "outside x"),
    (dict(edges=np.array([[0.0], [1.0]])), "integers"),
    (dict(sensitive=np.zeros(6)), "both groups"),
    (dict(sensitive=np.array([0, 1, 2, 0, 1, 0])), "binary"),
    (dict(sensitive=np.array([0, 1])), "shape"),
    (dict(x=np.full((6, 2), np.nan)), "finite"),
])
def test_bad_input_is_rejected_before_work(kwargs, match):
    edges, s = _tiny_graph()
    args = dict(x=np.zeros((6, 2)), edges=edges, sensitive=s)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        fd.fit_generator(args["x"], args["edges"], args["sensitive"], fd.GeneratorConfig(epochs=1), seed=0)


def test_bad_config_and_arguments():
    with pytest.raises(ValueError, match="lambda_feature"):
        fd.GeneratorConfig(lambda_feature=-1.0)
    with pytest.raises(ValueError, match="epochs"):
        fd.GeneratorConfig(epochs=0)
    with pytest.raises(TypeError, match="config"):
        fd.fit_generator(np.zeros((6, 2)), *_tiny_graph(), config={"epochs": 1}, seed=0)
    edges, s = _tiny_graph()
    with pytest.raises(ValueError, match="strength"):
        fd.fairgen_postprocess(edges, s, np.zeros((6, 6)), 1.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="probs"):
        fd.fairgen_postprocess(edges, s, np.zeros((5, 5)), 0.5, np.random.default_rng(0))
    with pytest.raises(ValueError, match="both groups"):
        fd.feature_bias(torch.zeros(4, 2), np.zeros(4))
    with pytest.raises(ValueError, match="binary"):
        ev.fairness_gaps(np.array([0, 2]), np.array([0, 1]), np.array([0, 1]))
    with pytest.raises(ValueError, match="one entry per node"):
        ev.fairness_gaps(np.array([0, 1, 1]), np.array([0, 1]), np.array([0, 1]))
