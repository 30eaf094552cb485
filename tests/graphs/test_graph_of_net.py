"""rayml.graphs.graph_of_net (+ _data): message passing over batches of node-graphs against dense
products, permutation invariance / equivariance, the graph constructors on hand-made cases, the
constraint loss against a float64 re-derivation, determinism and bad input."""

import numpy as np
import pytest
import torch

from rayml.graphs import graph_of_net as gn
from rayml.graphs import graph_of_net_data as gd


@pytest.fixture(autouse=True)
def _one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _small_gon(seed=0, n_graphs=24):
    rng = np.random.default_rng(seed)
    return gd.molecule_gon(rng, n_graphs, k=3)


def _tensors(g):
    return (torch.as_tensor(g.x), torch.as_tensor(g.intra_edges), torch.as_tensor(g.batch),
            torch.as_tensor(g.inter_edges), g.n_graphs)


# --- message passing over a batch of node-graphs equals dense matrix products ---------------------

def test_intra_encoder_on_a_batch_equals_dense_per_graph_products():
    g = _small_gon()
    torch.manual_seed(0)
    f1 = gn.IntraEncoder(g.x.shape[1], 6, 2).double()
    X, E, B, _, n = _tensors(g)
    out = f1(X.double(), E, B, n)
    for i in range(n):  # each node-graph alone, with its dense adjacency
        idx = np.flatnonzero(g.batch == i)
        A = np.zeros((idx.size, idx.size))
        m = np.isin(g.intra_edges[0], idx)
        for a, b in g.intra_edges[:, m].T:
            A[a - idx[0], b - idx[0]] = A[b - idx[0], a - idx[0]] = 1.0
        h = torch.as_tensor(g.x[idx], dtype=torch.float64)
        At = torch.as_tensor(A)
        with torch.no_grad():
            for k, lin in enumerate(f1.mlps):
                h = torch.relu(lin((1 + f1.eps[k]) * h + At @ h))
            ref = f1.norm(torch.cat([h.mean(0), h.max(0).values])[None])[0]
        assert torch.allclose(out[i], ref, atol=1e-10)


def test_inter_encoder_equals_dense_normalised_adjacency_products():
    rng = np.random.default_rng(1)
    e = gd.knn_graph(rng.normal(size=(15, 3)), 3)
    torch.manual_seed(0)
    f2 = gn.InterEncoder(4, 5, 2).double()
    h = torch.randn(15, 4, dtype=torch.float64)
    A = np.eye(15)
    A[e[0], e[1]] = A[e[1], e[0]] = 1.0
    d = A.sum(1)
    An = torch.as_tensor(A / np.sqrt(d[:, None] * d[None, :]))
    with torch.no_grad():
        ref = An @ f2.lins[1](torch.relu(An @ f2.lins[0](h)))
    assert torch.allclose(f2(h, torch.as_tensor(e)), ref, atol=1e-10)


def test_segment_max_and_readout():
    x = torch.tensor([[1.0, -2.0], [3.0, -1.0], [0.5, 4.0]])
    b = torch.tensor([0, 0, 1])
    assert torch.equal(gn.segment_max(x, b, 2), torch.tensor([[3.0, -1.0], [0.5, 4.0]]))
    assert torch.allclose(gn.readout(x, b, 2), torch.tensor([[2.0, -1.5, 3.0, -1.0], [0.5, 4.0, 0.5, 4.0]]))


# --- permutation invariance / equivariance ------------------------------------------------------

def _permute_inside(g, rng):
    """Relabel the nodes inside every node-graph (node-graphs keep their order)."""
    perm = np.empty(g.x.shape[0], dtype=np.int64)
    for i in range(g.n_graphs):
        idx = np.flatnonzero(g.batch == i)
        perm[idx] = rng.permutation(idx)
    inv = np.argsort(perm)  # new position of old node j is inv[j]
    return gd.GraphOfNet(x=g.x[perm], intra_edges=inv[g.intra_edges], batch=g.batch[perm],
                         inter_edges=g.inter_edges, y=g.y)


def _permute_graphs(g, rng):
    """Reorder the node-graphs of the GON (and the node rows with them)."""
    order = rng.permutation(g.n_graphs)
    graphs = []
    for i in order:
        idx = np.flatnonzero(g.batch == i)
        m = np.isin(g.intra_edges[0], idx)
        graphs.append((g.x[idx], g.intra_edges[:, m] - idx[0]))
    x, e, b = gd.collate(graphs)
    new = np.argsort(order)
    return gd.GraphOfNet(x=x, intra_edges=e, batch=b, inter_edges=new[g.inter_edges], y=g.y[order]), order


NODE_GRAPH_MODELS = [m for m in gn.METHODS if m != "gcn"]  # the gcn baseline reads flat vectors only


@pytest.mark.parametrize("method", NODE_GRAPH_MODELS)
def test_node_relabelling_inside_node_graphs_changes_nothing(method):
    g = _small_gon(2)
    h = _permute_inside(g, np.random.default_rng(3))
    torch.manual_seed(0)
    model = gn.build_model(gn.N2GONConfig(method=method, hidden=8), g.x.shape[1], g.n_classes).double().eval()
    a = model(*((t.double() if t.is_floating_point() else t) if isinstance(t, torch.Tensor) else t
                for t in _tensors(g)))[0]
    b = model(*((t.double() if t.is_floating_point() else t) if isinstance(t, torch.Tensor) else t
                for t in _tensors(h)))[0]
    assert torch.allclose(a, b, atol=1e-9)


@pytest.mark.parametrize("method", NODE_GRAPH_MODELS)
def test_reordering_node_graphs_permutes_the_outputs(method):
    g = _small_gon(4)
    h, order = _permute_graphs(g, np.random.default_rng(5))
    torch.manual_seed(0)
    model = gn.build_model(gn.N2GONConfig(method=method, hidden=8), g.x.shape[1], g.n_classes).double().eval()
    cast = lambda ts: tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
                            for t in ts)
    a = model(*cast(_tensors(g)))[0]
    b = model(*cast(_tensors(h)))[0]
    assert torch.allclose(a[torch.as_tensor(order)], b, atol=1e-9)


def test_constraint_loss_is_invariant_to_relabelling_the_gon():
    rng = np.random.default_rng(6)
    p = torch.randn(9, 3, dtype=torch.float64)
    pairs = torch.as_tensor(rng.integers(0, 9, size=(2, 14)))
    pairs = pairs[:, pairs[0] != pairs[1]]
    w = torch.rand(pairs.shape[1], dtype=torch.float64)
    perm = torch.as_tensor(rng.permutation(9))
    inv = torch.argsort(perm)
    assert torch.allclose(gn.constraint_loss(p, pairs, w), gn.constraint_loss(p[perm], inv[pairs], w))


# --- graph constructors on hand-made cases ------------------------------------------------------

def _pairs(e):
    return {tuple(c) for c in np.asarray(e).T.tolist()}


def test_pixel_superpixel_graph_on_a_hand_made_image():
    img = np.zeros((4, 4))
    img[0, 0], img[0, 1], img[1, 1], img[3, 3] = 1.0, 0.5, 0.25, 1.0  # pixels 0..3 in row-major order
    x, e = gd.pixel_superpixel_graph(img, block=2)
    assert x.shape == (4 + 4, 5)
    assert np.allclose(x[:4, 0], [1.0, 0.5, 0.25, 1.0])
    assert np.allclose(x[:4, 1:3], [[0, 0], [0, 1 / 3], [1 / 3, 1 / 3], [1, 1]])
    assert np.allclose(x[4:, 0], [1.75 / 4, 0, 0, 0.25])  # tile means
    assert np.allclose(x[:, 3], [1, 1, 1, 1, 0, 0, 0, 0]) and np.allclose(x[:, 4], 1 - x[:, 3])
    pix = {(0, 1), (0, 2), (1, 2)}  # 8-neighbours among the lit pixels; (3,3) is isolated from them
    member = {(0, 4), (1, 4), (2, 4), (3, 7)}
    tiles = {(4, 5), (6, 7), (4, 6), (5, 7)}
    assert _pairs(e) == pix | member | tiles


def test_knn_graph_on_points_on_a_line():
    pts = np.array([[0.0], [1.0], [3.0], [7.0]])
    assert _pairs(gd.knn_graph(pts, 1)) == {(0, 1), (1, 2), (2, 3)}
    assert _pairs(gd.knn_graph(pts, 2)) == {(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)}


def test_collate_offsets_and_batch():
    x, e, b = gd.collate([(np.ones((2, 3)), np.array([[0], [1]])), (np.zeros((3, 3)), np.array([[0, 1], [2, 2]]))])
    assert x.shape == (5, 3)
    assert e.tolist() == [[0, 2, 3], [1, 4, 4]]
    assert b.tolist() == [0, 0, 1, 1, 1]


def test_random_molecule_carries_its_motif_and_valence():
    rng = np.random.default_rng(0)
    for label in range(4):
        x, e = gd.random_molecule(rng, label, motif_prob=1.0)
        deg = np.bincount(e.ravel(), minlength=x.shape[0])
        assert deg.max() <= 4 and x.sum(1).tolist() == [1.0] * x.shape[0]
        import networkx as nx

        g = nx.Graph(list(map(tuple, e.T)))
        cycles = [len(c) for c in nx.cycle_basis(g)]
        assert cycles == ([3] if label == 0 else [4] if label == 1 else [])
        if label == 2:  # a carbon with three type-2 leaves
            assert any(x[v, 0] == 1 and sum(deg[u] == 1 and x[u, 2] == 1 for u in g[v]) >= 3 for v in g)


def test_constraint_net_on_a_hand_made_case():
    inter = torch.tensor([[0, 1], [1, 2]])
    y = torch.tensor([0, 1, 0, 0, 1])
    labelled = torch.tensor([0, 2, 4])
    pairs, w = gn.constraint_net(inter, 5, y, labelled, None, label_weight=2.0)
    got = {}
    for (a, b), v in zip(pairs.T.tolist(), w.tolist()):
        got[(a, b)] = got.get((a, b), 0.0) + v
    assert got == {(0, 1): 1.0, (1, 0): 1.0, (1, 2): 1.0, (2, 1): 1.0, (0, 2): 2.0, (2, 0): 2.0}
    v = torch.tensor([[0.0], [0.1], [5.0], [5.2], [9.0]])
    pairs, w = gn.constraint_net(inter, 5, None, None, v, refine_k=1, refine_weight=0.5)
    refine = {tuple(c) for c, x in zip(pairs.T.tolist(), w.tolist()) if x == 0.5}
    assert refine == {(0, 1), (1, 0), (2, 3), (3, 2), (4, 3), (3, 4)}


def test_constraint_loss_matches_a_float64_rederivation():
    rng = np.random.default_rng(7)
    p = rng.normal(size=(6, 2))
    pairs = np.array([[0, 1, 2, 5], [1, 0, 4, 3]])
    w = np.array([1.0, 1.0, 0.5, 2.0])
    ref = 0.0
    for (i, j), wij in zip(pairs.T, w):
        logits = np.array([-np.sum((p[i] - p[k]) ** 2) for k in range(6) if k != i])
        ks = [k for k in range(6) if k != i]
        ref -= wij * (logits[ks.index(j)] - np.log(np.exp(logits).sum()))
    ref /= w.sum()
    got = gn.constraint_loss(torch.as_tensor(p), torch.as_tensor(pairs), torch.as_tensor(w))
    assert abs(float(got) - ref) < 1e-10
    assert torch.allclose(gn.positions_pi(torch.as_tensor(p)).exp().sum(1), torch.ones(6, dtype=torch.float64))


# --- equal size, training, determinism -----------------------------------------------------------

def test_baselines_have_the_parameter_count_of_n2gon():
    for d_in, c in ((5, 10), (4, 4)):
        counts = {m: gn.n_params(gn.build_model(gn.N2GONConfig(method=m, hidden=16), d_in, c, d_flat=9))
                  for m in gn.METHODS}
        assert counts["dual-encoder"] == counts["n2gon"]
        assert all(abs(v / counts["n2gon"] - 1) < 0.05 for v in counts.values())


def test_training_is_deterministic_and_learns_a_separable_gon():
    g = _small_gon(8, n_graphs=48)
    split = gd.split_nodes(np.random.default_rng(0), g.y, 4, 8)
    cfg = gn.N2GONConfig(method="n2gon", hidden=8, epochs=30, eval_every=5)
    a = gn.train(g, split, cfg, seed=3)
    b = gn.train(g, split, cfg, seed=3)
    ma, mb = a.pop("model"), b.pop("model")
    assert a == b
    assert np.array_equal(ma.predict_proba(g), mb.predict_proba(g))
    assert np.isfinite(a["l_con"]) and a["params"] > 0
    # four balanced classes: the validation accuracy must beat chance (0.25)
    assert a["val_acc"] > 0.25


def test_constraint_loss_changes_training_only_for_n2gon():
    g = _small_gon(9)
    split = gd.split_nodes(np.random.default_rng(1), g.y, 2, 6)
    base = gn.N2GONConfig(method="dual-encoder", hidden=8, epochs=6)
    a = gn.train(g, split, base, 0)
    b = gn.train(g, split, gn.N2GONConfig(**{**base.__dict__, "lam": 5.0}), 0)
    a.pop("model"), b.pop("model")
    assert np.isnan(a.pop("l_con")) and np.isnan(b.pop("l_con")) and a == b
    n2 = gn.train(g, split, gn.N2GONConfig(method="n2gon", hidden=8, epochs=6), 0)
    assert np.isfinite(n2["l_con"])


# --- bad input ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(method="mlp"), "method"), (dict(hidden=0), "hidden"), (dict(lam=-1.0), "lam"),
    (dict(lr=0.0), "lr"), (dict(dropout=1.0), "dropout"), (dict(epochs=2.5), "epochs"),
])
def test_config_rejects_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gn.N2GONConfig(**kwargs)


def test_constructors_reject_bad_input():
    with pytest.raises(ValueError, match="image"):
        gd.pixel_superpixel_graph(np.zeros(5))
    with pytest.raises(ValueError, match="block"):
        gd.pixel_superpixel_graph(np.zeros((4, 4)), block=0)
    with pytest.raises(ValueError, match="k must"):
        gd.knn_graph(np.zeros((4, 2)), 4)
    with pytest.raises(ValueError, match="features"):
        gd.knn_graph(np.array([[np.nan, 0.0], [0.0, 0.0]]), 1)
    with pytest.raises(ValueError, match="label"):
        gd.random_molecule(np.random.default_rng(0), 7)
    with pytest.raises(ValueError, match="graph 1"):
        gd.collate([(np.ones((2, 2)), np.zeros((2, 0))), (np.ones((2, 2)), np.array([[0], [5]]))])
    with pytest.raises(ValueError, match="n_images"):
        gd.digits_gon(np.random.default_rng(0), 5)


def test_train_rejects_bad_gon_and_split():
    g = _small_gon()
    split = gd.split_nodes(np.random.default_rng(0), g.y, 2, 4)
    cfg = gn.N2GONConfig(epochs=1)
    with pytest.raises(TypeError, match="gon"):
        gn.train({"x": g.x}, split, cfg, 0)
    bad = gd.GraphOfNet(x=g.x, intra_edges=g.intra_edges, batch=g.batch,
                        inter_edges=np.array([[0], [g.n_graphs]]), y=g.y)
    with pytest.raises(ValueError, match="inter_edges"):
        gn.train(bad, split, cfg, 0)
    with pytest.raises(ValueError, match="split"):
        gn.train(g, {**split, "test": np.array([], dtype=np.int64)}, cfg, 0)


# --- the trained model, the planted GON edges, the plain baselines (issue 39) ---------------------

def test_train_returns_the_model_of_the_reported_epoch():
    """``train`` used to return only accuracies; its model must reproduce the reported test accuracy."""
    g = _small_gon(8, n_graphs=48)
    split = gd.split_nodes(np.random.default_rng(0), g.y, 4, 8)
    for method in ("n2gon", "gcn"):
        out = gn.train(g, split, gn.N2GONConfig(method=method, hidden=8, epochs=20, eval_every=5), seed=1)
        pred = out["model"].predict(g)
        assert pred.shape == (g.n_graphs,)
        assert np.mean(pred[split["test"]] == g.y[split["test"]]) == pytest.approx(out["test_acc"])
        assert np.mean(pred[split["val"]] == g.y[split["val"]]) == pytest.approx(out["val_acc"])


def test_planted_edges_follow_the_labels_alone():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), 30)
    for h in (0.0, 1.0):
        e = gd.planted_edges(rng, y, 6.0, h)
        assert gd.edge_homophily(e, y) == h and np.all(e[0] < e[1])
    e = gd.planted_edges(rng, y, 6.0, 0.5)
    assert abs(gd.edge_homophily(e, y) - 0.5) < 0.1
    assert 2 * e.shape[1] / y.size <= 6.0
    with pytest.raises(ValueError, match="homophily"):
        gd.planted_edges(rng, y, 6.0, 1.5)
    g = gd.molecule_gon(np.random.default_rng(1), 40, edges="planted", homophily=1.0)
    assert gd.edge_homophily(g.inter_edges, g.y) == 1.0 and g.flat.shape == (40, 9)
    with pytest.raises(ValueError, match="edges"):
        gd.molecule_gon(np.random.default_rng(1), 40, edges="random")


def test_flat_features_fall_back_to_pooled_node_features():
    g = _small_gon(3)
    pooled = gd.flat_features(gd.GraphOfNet(x=g.x, intra_edges=g.intra_edges, batch=g.batch,
                                            inter_edges=g.inter_edges, y=g.y))
    i = 5
    idx = np.flatnonzero(g.batch == i)
    assert pooled.shape == (g.n_graphs, 2 * g.x.shape[1] + 5)
    assert np.allclose(pooled[i, :g.x.shape[1]], g.x[idx].mean(0))
    assert np.array_equal(gd.flat_features(g), g.flat)


def test_label_propagation_is_the_fixed_point_of_the_iteration():
    from rayml.graphs import graph_of_net_baselines as gb

    g = _small_gon(5)
    split = gd.split_nodes(np.random.default_rng(2), g.y, 2, 4)
    F = gb.label_propagation(g, split, 0.9)
    n = g.n_graphs
    A = np.zeros((n, n))
    A[g.inter_edges[0], g.inter_edges[1]] = A[g.inter_edges[1], g.inter_edges[0]] = 1.0
    d = A.sum(1)
    S = A / np.sqrt(np.outer(d, d))
    Y = np.zeros((n, g.n_classes))
    Y[split["train"], g.y[split["train"]]] = 1.0
    G = Y.copy()
    for _ in range(400):  # Zhou et al.'s iteration F <- alpha S F + Y
        G = 0.9 * S @ G + Y
    assert np.allclose(F, G, atol=1e-8)
    assert np.array_equal(F[split["train"]].argmax(1), g.y[split["train"]])
    with pytest.raises(ValueError, match="alpha"):
        gb.label_propagation(g, split, 1.0)


def test_logistic_regression_fits_separable_flat_vectors():
    from rayml.graphs import graph_of_net_baselines as gb

    g = _small_gon(6, n_graphs=40)
    flat = np.eye(g.n_classes, dtype=np.float32)[g.y] * 3.0
    g2 = gd.GraphOfNet(x=g.x, intra_edges=g.intra_edges, batch=g.batch, inter_edges=g.inter_edges, y=g.y, flat=flat)
    split = gd.split_nodes(np.random.default_rng(0), g.y, 3, 6)
    acc = gb.accuracies(gb.logistic_regression(g2, split, 1.0), g.y, split)
    assert acc == {"val_acc": 1.0, "test_acc": 1.0}
    with pytest.raises(ValueError, match="C must"):
        gb.logistic_regression(g2, split, 0.0)
