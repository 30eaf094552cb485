"""rayml.optim.qp_gnn / qp_instances: solver labels by KKT and peer solvers, GNN equivariance, WL pairs."""

import itertools

import numpy as np
import pytest
import torch

from rayml.optim import qp_gnn as qg
from rayml.optim import qp_instances as qi


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Small graphs: one thread is much faster than a contended pool (and is what Ray tasks use)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _instances(k, seed=0, **kw):
    rng = np.random.default_rng(seed)
    return [qi.random_lcqp(rng, **kw) for _ in range(k)]


def test_clarabel_labels_satisfy_kkt_and_agree_with_highs_and_osqp():
    seen = {"optimal": 0, "infeasible": 0}
    for qp in _instances(16, m=6, n=15, nnz=30):
        s = qi.solve(qp)
        h = qi.solve_highs(qp)
        assert s.status == h.status
        seen[s.status] += 1
        if s.status != "optimal":
            continue
        kkt = qi.kkt_residuals(qp, s.x, s.z)
        assert max(kkt.values()) < 1e-6, kkt
        assert qi.is_feasible_point(qp, s.x, tol=1e-7)
        assert abs(h.obj - s.obj) <= 1e-6 * max(1.0, abs(s.obj))
        o = qi.solve_osqp(qp, eps=1e-7)
        assert o.status == "optimal" and abs(o.obj - s.obj) <= 1e-4 * max(1.0, abs(s.obj))
    assert seen["optimal"] and seen["infeasible"], "the generator gives both feasible and infeasible instances"


def test_kkt_residuals_detect_a_wrong_solution():
    qp = next(q for q in _instances(10, seed=3, m=5, n=10, nnz=20) if qi.solve(q).status == "optimal")
    s = qi.solve(qp)
    bad = qi.kkt_residuals(qp, s.x + 0.1, s.z)
    assert max(bad.values()) > 1e-3


def test_enumeration_matches_scipy_milp_on_mixed_integer_lps():
    from scipy.optimize import LinearConstraint, milp

    rng = np.random.default_rng(5)
    for _ in range(5):
        n, m = 5, 3
        A = rng.normal(size=(m, n))
        b = A @ rng.integers(0, 3, size=n) + 0.5
        c = rng.normal(size=n)
        integer = np.array([1, 1, 1, 0, 0], bool)
        qp = qi.QP(Q=np.zeros((n, n)), c=c, A=A, b=b, eq=np.zeros(m, bool), lb=np.zeros(n), ub=2 * np.ones(n),
                   integer=integer)
        ours = qi.solve_miqp_enumerate(qp)
        ref = milp(c, constraints=LinearConstraint(A, -np.inf, b), integrality=integer.astype(int),
                   bounds=(np.zeros(n), 2 * np.ones(n)))
        assert ours.status == "optimal" and ref.status == 0
        assert ours.obj == pytest.approx(ref.fun, abs=1e-6)


def test_separation_pairs_have_the_stated_labels_and_wl_equivalence():
    pairs = qg.separation_pairs()
    a, b, _ = pairs["milcqp-objective"]
    assert qi.solve_miqp_enumerate(a).obj == pytest.approx(3.0)
    assert qi.solve_miqp_enumerate(b).obj == pytest.approx(4.0)
    assert qi.solve(a.relaxed()).obj == pytest.approx(qi.solve(b.relaxed()).obj, abs=1e-6)
    a, b, _ = pairs["milcqp-feasibility"]
    assert qi.solve_miqp_enumerate(a).status == "optimal" and qi.solve_miqp_enumerate(b).status == "infeasible"
    assert qi.solve(a.relaxed()).status == qi.solve(b.relaxed()).status == "optimal"
    for name in ("milcqp-objective", "milcqp-feasibility"):
        assert qg.wl_indistinguishable(*pairs[name][:2])
    a, b, _ = pairs["lcqp-q-sign"]
    assert not qg.wl_indistinguishable(a, b)
    assert qi.solve(a).obj == pytest.approx(-2 / 3, abs=1e-6) and qi.solve(b).obj == pytest.approx(-2.0, abs=1e-6)


@pytest.mark.parametrize("gnn_class", ["qp-gnn", "lp-gnn"])
def test_mp_gnns_cannot_separate_wl_equivalent_pairs_for_any_weights(gnn_class):
    pairs = qg.separation_pairs()
    for seed in range(3):
        torch.manual_seed(seed)
        model = qg.QPGNN(8, 3, gnn_class=gnn_class)
        node = qg.QPGNN(8, 3, level="node", gnn_class=gnn_class)
        for name in ("milcqp-objective", "milcqp-feasibility"):
            a, b, _ = pairs[name]
            ga, gb = qg.collate([qg.encode(a)]), qg.collate([qg.encode(b)])
            assert model(ga).item() == pytest.approx(model(gb).item(), abs=1e-5)
            # vertex-transitive graphs: every variable gets the same output
            assert torch.allclose(node(ga), node(gb), atol=1e-5)
    # the Q-blind class also cannot see the sign of Q_12; the paper's class can
    a, b, _ = pairs["lcqp-q-sign"]
    torch.manual_seed(0)
    out = qg.QPGNN(8, 2, gnn_class=gnn_class)
    ya, yb = out(qg.collate([qg.encode(a)])).item(), out(qg.collate([qg.encode(b)])).item()
    assert (abs(ya - yb) < 1e-7) == (gnn_class == "lp-gnn")


def _permuted(qp, pr, pc):
    return qi.QP(Q=qp.Q[np.ix_(pc, pc)], c=qp.c[pc], A=qp.A[np.ix_(pr, pc)], b=qp.b[pr], eq=qp.eq[pr],
                 lb=qp.lb[pc], ub=qp.ub[pc], integer=qp.integer[pc])


@pytest.mark.parametrize("gather_first", [False, True])
def test_gnn_is_permutation_invariant_and_equivariant(gather_first):
    qp = _instances(1, seed=2, m=5, n=9, nnz=20)[0]
    rng = np.random.default_rng(0)
    pr, pc = rng.permutation(qp.m), rng.permutation(qp.n)
    qp2 = _permuted(qp, pr, pc)
    torch.manual_seed(0)
    g, n = qg.QPGNN(12, 3, gather_first=gather_first), qg.QPGNN(12, 3, level="node", gather_first=gather_first)
    g1, g2 = qg.collate([qg.encode(qp)]), qg.collate([qg.encode(qp2)])
    assert g(g1).item() == pytest.approx(g(g2).item(), rel=1e-5, abs=1e-6)
    assert torch.allclose(n(g1)[torch.as_tensor(pc)], n(g2), atol=1e-5)


def test_batching_equals_one_graph_at_a_time():
    qps = _instances(3, seed=4, m=4, n=7, nnz=12)
    torch.manual_seed(0)
    model = qg.QPGNN(8, 2, level="node")
    batched = model(qg.collate([qg.encode(q) for q in qps]))
    single = torch.cat([model(qg.collate([qg.encode(q)])) for q in qps])
    assert torch.allclose(batched, single, atol=1e-6)


def test_random_instances_are_unfoldable_and_wl_refinement_matches_brute_force_on_small_graphs():
    assert all(qg.is_unfoldable(q) for q in _instances(3, seed=1, m=4, n=6, nnz=10))
    a, b, _ = qg.separation_pairs()["milcqp-objective"]
    assert not qg.is_unfoldable(a)
    # a relabelled copy is always WL-equivalent; changing one coefficient breaks it
    rng = np.random.default_rng(1)
    q = _instances(1, seed=7, m=3, n=5, nnz=8)[0]
    q2 = _permuted(q, rng.permutation(3), rng.permutation(5))
    assert qg.wl_indistinguishable(q, q2)
    c = q2.c.copy()
    c[0] += 1.0
    assert not qg.wl_indistinguishable(q, qi.QP(q2.Q, c, q2.A, q2.b, q2.eq, q2.lb, q2.ub))


def test_training_fits_and_is_deterministic():
    qps = [q for q in _instances(60, seed=9, m=4, n=8, nnz=12) if qi.solve(q).status == "optimal"][:16]
    labels = [qi.solve(q).obj for q in qps]
    graphs = [qg.encode(q) for q in qps]
    cfg = qg.TrainConfig(target="objective", emb=16, epochs=60, batch=16, lr=3e-3)
    m1, s1 = qg.train(graphs, labels, cfg, seed=3)
    m2, s2 = qg.train(graphs, labels, cfg, seed=3)
    p1, p2 = qg.predict(m1, graphs, s1), qg.predict(m2, graphs, s2)
    assert p1 == p2
    e_fit = qg.relative_errors("objective", p1, labels).mean()
    e_mean = qg.relative_errors("objective", [float(np.mean(labels))] * len(labels), labels).mean()
    assert e_fit < 0.5 * e_mean


def test_warm_start_from_the_optimum_saves_osqp_iterations():
    qp = next(q for q in _instances(10, seed=11, m=6, n=15, nnz=30) if qi.solve(q).status == "optimal")
    s, cold = qi.solve_osqp(qp, eps=1e-6), None
    cold = qi.solve_osqp(qp, eps=1e-6)
    warm = qi.solve_osqp(qp, x0=s.x, y0=s.z, eps=1e-6)
    assert warm.status == "optimal" and warm.iterations < cold.iterations


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="Q must have shape"):
        qi.QP(Q=np.eye(2), c=np.zeros(3), A=np.zeros((1, 3)), b=np.zeros(1), eq=[False], lb=np.zeros(3),
              ub=np.ones(3))
    with pytest.raises(ValueError, match="lb must be <= ub"):
        qi.QP(Q=np.eye(1), c=np.zeros(1), A=np.zeros((1, 1)), b=np.zeros(1), eq=[False], lb=[1.0], ub=[0.0])
    with pytest.raises(ValueError, match="nnz"):
        qi.random_lcqp(np.random.default_rng(0), m=2, n=2, nnz=5)
    with pytest.raises(TypeError, match="rng"):
        qi.random_lcqp(0)
    with pytest.raises(ValueError, match="target"):
        qg.TrainConfig(target="dual")
    with pytest.raises(ValueError, match="gnn_class"):
        qg.QPGNN(8, 2, gnn_class="gat")
    with pytest.raises(ValueError, match="max_assignments"):
        qi.solve_miqp_enumerate(qi.QP(Q=np.eye(20), c=np.zeros(20), A=np.zeros((1, 20)), b=np.zeros(1), eq=[False],
                                      lb=np.zeros(20), ub=np.ones(20), integer=np.ones(20, bool)))


def test_q_twins_are_lp_identical_and_their_floor_bounds_every_q_blind_predictor():
    from rayml.experiments.qp_gnn import twin_floor, twin_label_task

    rows = twin_label_task((0, 7, 3), {"m": 4, "n": 10, "nnz": 16})
    assert len(rows) == 6 and all(r["feasible"] for r in rows)
    for a, b in zip(rows[0::2], rows[1::2]):
        qa, qb = qi.from_row(a), qi.from_row(b)
        for name in ("A", "b", "c", "lb", "ub"):
            np.testing.assert_array_equal(getattr(qa, name), getattr(qb, name))
        np.testing.assert_array_equal(np.diag(qa.Q), np.diag(qb.Q))
        np.testing.assert_allclose(np.abs(qa.Q), np.abs(qb.Q))
        torch.manual_seed(0)
        g = qg.collate([qg.encode(qa), qg.encode(qb)])
        with torch.no_grad():
            out = qg.QPGNN(8, 2, level="graph", gnn_class="lp-gnn")(g)
        assert out[0] == out[1]  # blind to off-diagonal Q: the same output on both twins
    labels = [r["obj"] for r in rows]
    floor = twin_floor("objective", labels)
    # brute force: the best shared prediction per pair over a fine grid never beats the floor, and reaches it
    best = []
    for y1, y2 in zip(labels[0::2], labels[1::2]):
        grid = np.linspace(min(y1, y2) - 1, max(y1, y2) + 1, 20001)
        err = qg.relative_errors("objective", grid, [y1] * grid.size) + qg.relative_errors("objective", grid,
                                                                                            [y2] * grid.size)
        best.append(err.min() / 2)
    assert np.mean(best) >= floor - 1e-9
    assert np.mean(best) <= floor + 1e-3
