"""rayml.graphs.stop: the context-aware units, the models' inductiveness, the data, determinism."""

import copy

import numpy as np
import pytest
import torch

from rayml.graphs import stop as st


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small graphs: one thread is much faster than a contended pool (and is what Ray tasks use)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_cau_equals_a_dense_re_derivation_and_blocks_masked_nodes():
    torch.manual_seed(0)
    cau = st.ContextAwareUnit(8, 8, cores=3, heads=2)
    z = torch.randn(2, 5, 8)
    out = cau(z)
    # dense re-derivation of the core aggregation for batch 0, head 0
    q = cau.value(z).view(2, 5, 2, 4)
    aff = torch.einsum("cd,nd->cn", cau.cores[0], q[0, :, 0]) / 2.0
    v = z.view(2, 5, 2, 4)[0, :, 0]
    core = torch.softmax(aff, 1) @ v  # (cores, d)
    back = torch.softmax(aff, 0).t() @ core  # (n, d)
    # recompute the module's broadcast through its own path and compare head 0
    to_core = torch.softmax(torch.einsum("hcd,bnhd->bhcn", cau.cores, q) / 2.0, -1)
    to_node = torch.softmax(torch.einsum("hcd,bnhd->bhcn", cau.cores, q) / 2.0, -2)
    mod_back = torch.einsum("bhcd,bhcn->bnhd", torch.einsum("bnhd,bhcn->bhcd", z.view(2, 5, 2, 4), to_core), to_node)
    assert torch.allclose(mod_back[0, :, 0], back, atol=1e-5)
    assert out.shape == z.shape
    # a masked node sends nothing: changing its features leaves the cores (and other nodes) unchanged
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[:, 2] = False
    z2 = z.clone()
    z2[:, 2] += 5.0
    a, b = cau(z, mask), cau(z2, mask)
    keep = [0, 1, 3, 4]
    assert torch.allclose(a[:, keep], b[:, keep], atol=1e-5)


def _flow(rng, n, days, spd, shift_day, **kw):
    pos, edges = st.road_graph(rng, n)
    return edges, st.simulate_traffic(rng, pos, edges, days=days, steps_per_day=spd, shift_day=shift_day, **kw)


@pytest.mark.parametrize("method", st.METHODS)
def test_models_are_inductive_and_permutation_equivariant(method):
    rng = np.random.default_rng(0)
    edges, x = _flow(rng, 10, 3, 12, 2)
    X, Y = st.windows(x, 12, 0, 20, 6, 4)
    cfg = st.STConfig(method=method, dim=16, epochs=1, envs=2)
    model = st.train_forecaster(X[:, :, :8], Y[:, :, :8], edges[:, (edges < 8).all(0)], cfg, seed=1,
                                tod_size=12, scale=(0.0, 1.0), n_nodes=10)
    p = st.predict(model, X, edges, (0.0, 1.0))  # all 10 nodes, 2 of them unseen
    assert p.shape == Y.shape and np.isfinite(p).all()
    perm = rng.permutation(10)
    inv = np.argsort(perm)
    pp = st.predict(model, X[:, :, perm], inv[edges], (0.0, 1.0))  # the node ids travel with the columns
    assert np.allclose(pp, p[:, :, perm], atol=1e-4)


def test_node_tables_reject_ids_they_do_not_hold():
    rng = np.random.default_rng(0)
    edges, x = _flow(rng, 10, 3, 12, 2)
    X, Y = st.windows(x, 12, 0, 20, 6, 4)
    model = st.train_forecaster(X[:, :, :8], Y[:, :, :8], edges[:, (edges < 8).all(0)],
                                st.STConfig(method="stid", dim=16, epochs=1), 1, tod_size=12, scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="n_nodes"):
        st.predict(model, X, edges, (0.0, 1.0))  # ids 8, 9 lie outside the table inferred from training


def test_residual_branch_has_its_own_encoder():
    """The authors' default same=0: the residual branch runs a deep copy of the backbone's encoder."""
    torch.manual_seed(0)
    m = st.STOP(6, 4, 16, 12)
    a, b = list(m.backbone.encoder.parameters()), list(m.res_encoder.parameters())
    assert all(p is not q for p, q in zip(a, b)) and all(torch.equal(p, q) for p, q in zip(a, b))
    before = copy.deepcopy(b)
    with torch.no_grad():
        a[0].add_(1.0)
    assert all(torch.equal(p, q) for p, q in zip(before, m.res_encoder.parameters()))


def test_only_stop_trains_on_perturbed_environments():
    """stop-nodro (the ablation) is STOP's model on the plain MAE: with one environment and no
    perturbation, STOP's DRO step is the plain step, so both train to the same weights."""
    rng = np.random.default_rng(4)
    edges, x = _flow(rng, 8, 2, 12, 1)
    X, Y = st.windows(x, 12, 0, 18, 6, 4)
    kw = dict(dim=16, epochs=1, envs=1, s_ratio=0.0, t_ratio=0.0, dropout=0.0)
    p = [st.predict(st.train_forecaster(X, Y, edges, st.STConfig(method=m, **kw), 3, tod_size=12,
                                        scale=(0.0, 1.0)), X, edges, (0.0, 1.0)) for m in ("stop", "stop-nodro")]
    assert np.allclose(p[0], p[1], atol=1e-5)
    perturbed = st.train_forecaster(X, Y, edges, st.STConfig(method="stop", **(kw | {"envs": 3, "s_ratio": 0.2})), 3,
                                    tod_size=12, scale=(0.0, 1.0))
    assert not np.allclose(st.predict(perturbed, X, edges, (0.0, 1.0)), p[0], atol=1e-5)


def test_flow_carries_a_spatial_signal_only_through_the_graph():
    """The ridge check: neighbour history helps (> 10%) with the flow on, not without it."""
    gains = {}
    for flow in (0.8, 0.0):
        rng = np.random.default_rng(5)
        edges, x = _flow(rng, 30, 8, 24, 8, flow=flow)
        own, nbr = st.neighbour_gain(x, edges, 24, 5 * 24, 5 * 24, 8 * 24, seq=12, horizon=12)
        gains[flow] = 1 - nbr / own
    assert gains[0.8] > 0.10 and abs(gains[0.0]) < 0.03


def test_rewire_keeps_the_number_of_roads_and_changes_some():
    rng = np.random.default_rng(6)
    pos, edges = st.road_graph(rng, 30)
    after = st.rewire(rng, pos, edges, 0.3)
    assert after.shape == edges.shape
    assert {tuple(e) for e in after.T} == {tuple(e) for e in after[::-1].T}  # symmetric
    und = lambda e: {(min(i, j), max(i, j)) for i, j in e.T}  # noqa: E731
    assert len(und(edges) - und(after)) == round(0.3 * len(und(edges)))
    with pytest.raises(ValueError, match="frac"):
        st.rewire(rng, pos, edges, 1.5)


def test_simulation_has_daily_period_and_a_shift():
    rng = np.random.default_rng(1)
    edges, x = _flow(rng, 20, 6, 24, 4, noise=0.0)
    d1, d2 = x[24:48].mean(1), x[48:72].mean(1)
    assert np.corrcoef(d1, d2)[0, 1] > 0.95
    assert x[4 * 24:].mean() > x[:4 * 24].mean()


def test_training_is_deterministic_and_bad_input_rejected():
    rng = np.random.default_rng(2)
    edges, x = _flow(rng, 8, 2, 12, 1)
    X, Y = st.windows(x, 12, 0, 18, 6, 4)
    cfg = st.STConfig(method="stop", dim=16, epochs=1, envs=2)
    p1 = st.predict(st.train_forecaster(X, Y, edges, cfg, 3, tod_size=12, scale=(0.0, 1.0)), X, edges, (0.0, 1.0))
    p2 = st.predict(st.train_forecaster(X, Y, edges, cfg, 3, tod_size=12, scale=(0.0, 1.0)), X, edges, (0.0, 1.0))
    assert np.array_equal(p1, p2)
    with pytest.raises(ValueError, match="method"):
        st.STConfig(method="stgcn")
    with pytest.raises(ValueError, match="X must be"):
        st.train_forecaster(X[0], Y, edges, cfg, 0, tod_size=12, scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="shift_day"):
        st.simulate_traffic(rng, np.zeros((8, 2)), edges, days=2, steps_per_day=12, shift_day=5)


def _ar_windows(rng, coef, *, n=30, T=600, spd=12, seq=4, nbr=0.0, edges=None, noise=0.1):
    """A linear AR process per node (lags ``coef``, plus ``nbr`` x the mean of its ring neighbours' last
    value, plus a time-of-day level), windowed as the models see it (horizon 1)."""
    level = rng.normal(size=spd)
    x = np.zeros((T, n))
    src, dst = edges
    for t in range(len(coef), T):
        own = sum(c * x[t - 1 - k] for k, c in enumerate(coef))
        nb = np.zeros(n)
        np.add.at(nb, dst, x[t - 1, src])
        nb /= np.bincount(dst, minlength=n)
        x[t] = own + nbr * nb + level[t % spd] + noise * rng.normal(size=n)
    return st.windows(x, spd, 0, T, seq, 1), level


def _ring(n):
    i = np.arange(n)
    return np.concatenate([np.stack([i, (i + 1) % n]), np.stack([(i + 1) % n, i])], 1)


def test_ridge_recovers_a_linear_ar_process():
    """Own history: the lag coefficients (last input step first in time order: weights[seq-1] is lag 1);
    with neighbours: the neighbour-mean coefficient of the last step, the others near zero."""
    rng = np.random.default_rng(0)
    edges = _ring(30)
    (X, Y), _ = _ar_windows(rng, [0.5, -0.2], edges=edges)
    m = st.fit_ridge(X, Y, edges, penalty=1e-3, neighbours=False, tod_size=12, scale=(0.0, 1.0))
    w = m.weights[:4, 0]
    np.testing.assert_allclose(w, [0.0, 0.0, -0.2, 0.5], atol=0.02)
    (X, Y), _ = _ar_windows(rng, [0.3], edges=edges, nbr=0.4)
    own = st.fit_ridge(X, Y, edges, penalty=1e-3, neighbours=False, tod_size=12, scale=(0.0, 1.0))
    m = st.fit_ridge(X, Y, edges, penalty=1e-3, neighbours=True, tod_size=12, scale=(0.0, 1.0))
    np.testing.assert_allclose(m.weights[3, 0], 0.3, atol=0.03)
    np.testing.assert_allclose(m.weights[7, 0], 0.4, atol=0.03)
    np.testing.assert_allclose(m.weights[4:7, 0], 0.0, atol=0.03)
    err = lambda f: np.abs(st.predict(f, X, edges, (0.0, 1.0)) - Y).mean()  # noqa: E731
    assert err(m) < 0.1 and err(m) < err(own)  # noise sd 0.1: MAE near 0.08 (0.8 sd) once the neighbours are in
    # a scale only changes units: the same forecasts (the penalty is tiny against the data)
    scaled = st.fit_ridge(X * np.array([3.0, 1, 1, 1], np.float32) + np.array([2.0, 0, 0, 0], np.float32),
                          3 * Y + 2, edges, penalty=1e-6, neighbours=True, tod_size=12, scale=(2.0, 3.0))
    np.testing.assert_allclose(scaled.predict(X * np.array([3.0, 1, 1, 1], np.float32)
                                              + np.array([2.0, 0, 0, 0], np.float32), edges),
                               3 * st.predict(m, X, edges, (0.0, 1.0)) + 2, atol=2e-3)


def test_ridge_penalty_shrinks_and_the_graph_matters_only_with_neighbours():
    rng = np.random.default_rng(1)
    edges = _ring(30)
    (X, Y), _ = _ar_windows(rng, [0.3], edges=edges, nbr=0.4)
    small = st.fit_ridge(X, Y, edges, penalty=1e-3, neighbours=True, tod_size=12, scale=(0.0, 1.0))
    big = st.fit_ridge(X, Y, edges, penalty=1e5, neighbours=True, tod_size=12, scale=(0.0, 1.0))
    assert np.linalg.norm(big.weights) < 0.1 * np.linalg.norm(small.weights)
    other = _ring(30)[:, ::-1][[1, 0]][:, : 30]  # half the ring's edges
    own = st.fit_ridge(X, Y, edges, penalty=1.0, neighbours=False, tod_size=12, scale=(0.0, 1.0))
    assert np.array_equal(own.predict(X, edges), own.predict(X, other))
    assert not np.allclose(small.predict(X, edges), small.predict(X, other))


@pytest.mark.parametrize("kw, match", [
    ({"penalty": 0.0}, "penalty"), ({"penalty": -1.0}, "penalty"), ({"penalty": float("nan")}, "penalty"),
    ({"penalty": True}, "penalty"), ({"tod_size": 0}, "tod_size"), ({"scale": (0.0, 0.0)}, "scale"),
])
def test_ridge_refuses_bad_arguments(kw, match):
    rng = np.random.default_rng(2)
    (X, Y), _ = _ar_windows(rng, [0.3], n=6, T=60, edges=_ring(6))
    args = dict(penalty=1.0, neighbours=True, tod_size=12, scale=(0.0, 1.0)) | kw
    with pytest.raises(ValueError, match=match):
        st.fit_ridge(X, Y, _ring(6), **args)


def test_ridge_refuses_bad_shapes_and_edges():
    rng = np.random.default_rng(3)
    (X, Y), _ = _ar_windows(rng, [0.3], n=6, T=60, edges=_ring(6))
    args = dict(penalty=1.0, neighbours=True, tod_size=12, scale=(0.0, 1.0))
    with pytest.raises(ValueError, match="X must be"):
        st.fit_ridge(X, Y[:, :, :5], _ring(6), **args)
    with pytest.raises(ValueError, match="edges"):
        st.fit_ridge(X, Y, _ring(7), **args)


def test_pernode_ridge_fits_each_node_its_own_coefficients_and_reads_the_given_graph():
    """Per-node ridges (R12's reference rows): nodes with different AR coefficients are each fitted (a shared
    fit could not be exact for both); with hops the neighbour means of the given graph enter, and a wrong
    context (a graph without the driving edge) loses them."""
    from rayml.graphs import stop_data as sd

    rng = np.random.default_rng(4)
    T, spd = 400, 12
    x = np.zeros((T, 3))
    for t in range(2, T):  # node 0: AR(1) 0.8; node 1: AR(1) -0.5; node 2: node 0's last value
        e = 0.05 * rng.normal(size=3)
        x[t] = [0.8 * x[t - 1, 0] + 1 + e[0], -0.5 * x[t - 1, 1] + 1 + e[1], x[t - 1, 0] + e[2]]
        x[t, :2] += rng.normal(size=2)
    nodes = np.arange(3)
    ring = np.array([[0, 2], [2, 0]])  # the graph 0 - 2 (local ids); node 1 alone
    none = np.zeros((2, 0), dtype=np.int64)
    test = [(nodes, nodes, ring, 300, T)]
    own = sd.pernode_ridge(x, spd, (nodes, ring, 300), test, seq=2, horizon=1, hops=0, penalty=1e-3)[0]
    nbr = sd.pernode_ridge(x, spd, (nodes, ring, 300), test, seq=2, horizon=1, hops=1, penalty=1e-3)[0]
    cut = sd.pernode_ridge(x, spd, (nodes, ring, 300), [(nodes, nodes, none, 300, T)], seq=2, horizon=1, hops=1,
                           penalty=1e-3)[0]
    assert own[:2] == pytest.approx([0.8, 0.8], abs=0.12)  # noise sd 1: MAE ~ 0.8 for both AR nodes
    assert nbr[2] < 0.1 < own[2]  # node 2 is node 0's last value: read through the graph
    assert cut[2] > 0.5  # the same weights with the edge gone (a stale graph) lose it
    with pytest.raises(ValueError, match="not fitted"):
        sd.pernode_ridge(x, spd, (nodes[:2], none, 300), test, seq=2, horizon=1)
    with pytest.raises(ValueError, match="hops"):
        sd.pernode_ridge(x, spd, (nodes, ring, 300), test, seq=2, horizon=1, hops=-1)


def test_training_reports_the_epoch_early_stopping_kept():
    rng = np.random.default_rng(2)
    edges, x = _flow(rng, 8, 2, 12, 1)
    X, Y = st.windows(x, 12, 0, 18, 6, 4)
    cfg = st.STConfig(method="stid", dim=16, epochs=3)
    assert st.train_forecaster(X, Y, edges, cfg, 3, tod_size=12, scale=(0.0, 1.0)).kept_epoch == 3  # no validation
    # with validation: the best validation epoch, one of 1 .. 3
    m = st.train_forecaster(X, Y, edges, cfg, 3, tod_size=12, scale=(0.0, 1.0), val=(X, Y))
    assert 1 <= m.kept_epoch <= 3
