"""GM Matching: Weiszfeld against a generic optimiser, herding by hand and its O(1/k) rate,
the baselines against sorting, the estimator, determinism and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from rayml.data.gm_matching import (
    METHODS,
    GMMatching,
    geometric_median,
    gm_matching,
    herding,
    select,
    select_per_class,
    weiszfeld,
)


def _sum_dist(z, X):
    return np.linalg.norm(X - z, axis=1).sum()


def test_weiszfeld_matches_a_generic_minimiser_of_the_sum_of_distances():
    X = np.random.default_rng(0).standard_exponential((60, 3))
    res = weiszfeld(X, tol=1e-10, max_iter=10000)
    ref = minimize(_sum_dist, X.mean(axis=0), args=(X,), method="Nelder-Mead",
                   options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    assert res.converged
    assert np.allclose(res.median, ref.x, atol=1e-5)
    assert _sum_dist(res.median, X) <= ref.fun + 1e-9


def test_geometric_median_in_one_dimension_is_the_median():
    x = np.array([[0.0], [1.0], [2.0], [10.0], [100.0]])
    assert geometric_median(x, tol=1e-12, max_iter=20000)[0] == pytest.approx(2.0, abs=1e-6)


def test_geometric_median_resists_outliers_that_drag_the_mean():
    rng = np.random.default_rng(1)
    inliers = rng.standard_normal((70, 5))
    outliers = 50.0 + rng.standard_normal((30, 5))
    X = np.vstack([inliers, outliers])
    assert np.linalg.norm(geometric_median(X)) < 2.0
    assert np.linalg.norm(X.mean(axis=0)) > 30.0


def test_herding_update_by_hand():
    # points on a line, target 0.5: theta0 = target; pick argmax <theta, x> then theta += target - x.
    X = np.array([[1.0], [0.0], [0.6], [0.4]])
    idx = herding(X, 4, np.array([0.5]), normalize=False, init="target")
    # t1: theta=0.5 -> x=1.0 (i0); theta=0. t2: scores all 0 -> first available (i1, x=0); theta=0.5.
    # t3: theta=0.5 -> x=0.6 (i2); theta=0.4. t4: i3.
    assert idx.tolist() == [0, 1, 2, 3]
    idx = herding(X, 2, np.array([0.5]), normalize=False, init="target")
    assert X[idx].mean() == pytest.approx(0.5)


def test_gm_matching_error_decays_like_one_over_k_and_beats_random():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((2000, 16))
    gm = geometric_median(X)
    err = {k: np.linalg.norm(X[herding(X, k, gm, normalize=False, seed=0)].mean(axis=0) - gm) for k in (20, 200)}
    rand = np.mean([np.linalg.norm(X[rng.permutation(2000)[:200]].mean(axis=0) - gm) for _ in range(20)])
    assert err[200] < 0.2 * err[20]  # O(1/k): a factor 10 in k gives ~10x; O(1/sqrt k) only ~3.2x
    assert err[200] < 0.3 * rand


def test_normalized_herding_selects_distinct_points_towards_the_normalized_target():
    X = np.random.default_rng(3).standard_normal((300, 6)) + 2.0
    idx = gm_matching(X, 100, normalize=True, seed=0)
    assert len(set(idx.tolist())) == 100
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    gm = geometric_median(X)
    assert np.linalg.norm(U[idx].mean(axis=0) - gm / np.linalg.norm(gm)) < 0.05


def test_easy_hard_moderate_follow_distance_order():
    X = np.arange(10, dtype=float)[:, None] ** 1.5
    d = np.abs(X[:, 0] - X.mean())
    order = np.argsort(d)
    assert set(select(X, 3, "easy")) == set(order[:3])
    assert set(select(X, 3, "hard")) == set(order[-3:])
    assert set(select(X, 4, "moderate")) == set(order[3:7])


def test_per_class_budget_split_and_estimator():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((90, 4))
    y = np.repeat([0, 1, 2], [50, 30, 10])
    for method in METHODS:
        idx = select_per_class(X, y, 31, method, seed=0)
        assert len(idx) == 31 and len(set(idx.tolist())) == 31
        counts = np.bincount(y[idx], minlength=3)
        assert counts.tolist() == [11, 10, 10]
    idx = select_per_class(X, y, 60, "random", seed=0)  # class 2 has only 10: the rest is spread
    assert np.bincount(y[idx]).tolist()[2] == 10 and len(idx) == 60
    sel = GMMatching(fraction=0.2, random_state=7).fit(X, y)
    assert sel.n_selected_ == 18 and set(sel.centers_) == {0, 1, 2}
    assert np.array_equal(sel.transform(X), X[sel.indices_])
    again = GMMatching(fraction=0.2, random_state=7).fit(X, y)
    assert np.array_equal(sel.indices_, again.indices_)
    assert GMMatching(k=5).set_params(method="hard").get_params()["method"] == "hard"


def test_bad_input_is_rejected_with_the_argument_named():
    X = np.random.default_rng(5).standard_normal((20, 3))
    with pytest.raises(ValueError, match="k must be in"):
        gm_matching(X, 0)
    with pytest.raises(ValueError, match="k must be in"):
        GMMatching(k=21).fit(X)
    with pytest.raises(TypeError, match="k must be an integer"):
        select(X, 2.5)
    with pytest.raises(ValueError, match="method"):
        select(X, 3, "best")
    with pytest.raises(ValueError, match="fraction"):
        GMMatching(fraction=1.5).fit(X)
    with pytest.raises(ValueError, match="y must have shape"):
        select_per_class(X, np.zeros(5), 4)
    with pytest.raises(ValueError, match="number of classes"):
        select_per_class(X, np.arange(20) % 5, 3)
    with pytest.raises(ValueError, match="X must be finite"):
        geometric_median(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="target"):
        herding(X, 2, np.zeros(4))
    with pytest.raises(ValueError, match="max_iter"):
        weiszfeld(X, max_iter=0)


def test_experiment_cells_are_deterministic_and_bad_configs_fail():
    from rayml.experiments import gm_matching as exp

    config = dict(exp.SIZES["tiny"], embed_dim=4, max_iter=30)   # small: determinism needs no converged fit
    a = exp.robustness_one(("shift", 0.4, 0, 123), config)
    b = exp.robustness_one(("shift", 0.4, 0, 123), config)
    assert a == b and {r["method"] for r in a} == {*METHODS, exp.LEVEL_AWARE, exp.FULL_DATA, *exp.VARIANTS}
    assert exp.convergence_one((0, 9), config) == exp.convergence_one((0, 9), config)
    with pytest.raises(ValueError, match="ks"):
        exp.run({**config, "ks": [0, 5]}, 0)
    with pytest.raises(ValueError, match="levels"):
        exp.run({**config, "levels": [1.5]}, 0)



def test_k_center_is_farthest_first_and_covers_better_than_random():
    from rayml.data.gm_matching import k_center

    X = np.random.default_rng(3).standard_normal((60, 2))
    idx = k_center(X, 8)
    assert len(set(idx.tolist())) == 8
    assert idx[0] == np.argmin(np.linalg.norm(X - X.mean(0), axis=1))
    for t in range(1, 8):                                   # each pick is the farthest from those before
        d = np.min(np.linalg.norm(X[:, None] - X[idx[:t]][None], axis=2), axis=1)
        assert d[idx[t]] == pytest.approx(d.max())
    radius = lambda s: np.max(np.min(np.linalg.norm(X[:, None] - X[s][None], axis=2), axis=1))  # noqa: E731
    assert radius(idx) < radius(np.random.default_rng(0).permutation(60)[:8])


def test_normalisation_is_off_by_default_and_refuses_a_target_at_the_origin():
    X = np.random.default_rng(4).standard_normal((50, 3))
    X -= X.mean(0)
    with pytest.raises(ValueError, match="origin"):
        herding(X, 5, np.zeros(3), normalize=True)
    assert herding(X, 5, np.zeros(3), seed=0).shape == (5,)             # Euclidean by default
    assert GMMatching(k=5).get_params()["normalize"] is False


def test_shift_and_cluster_corruption_move_the_mean_not_the_geometric_median():
    from rayml.experiments import gm_matching as exp

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 6))
    y = np.zeros(400, dtype=int)
    for kind in ("shift", "cluster"):
        Xc, yc = exp.corrupt(X, y, kind, 0.3, 4.0, np.random.default_rng(1))
        assert np.array_equal(yc, y) and (np.abs(Xc - X).sum(1) > 0).sum() == 120
        mean_move = np.linalg.norm(Xc.mean(0) - X.mean(0))
        gm_move = np.linalg.norm(geometric_median(Xc) - geometric_median(X))
        assert mean_move > 0.8 and gm_move < 0.5 * mean_move
    y2 = np.repeat([0, 1, 2, 3], 100)
    Xl, yl = exp.corrupt(X, y2, "label", 0.25, 4.0, np.random.default_rng(2))
    assert np.array_equal(Xl, X) and (yl != y2).sum() == 100


def test_gm_filter_random_draws_only_from_the_share_nearest_the_geometric_median():
    from rayml.data.gm_matching import gm_filter_random

    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((60, 3)), 50.0 + rng.standard_normal((40, 3))])  # 40% far cluster
    gm = geometric_median(X)
    order = np.argsort(np.linalg.norm(X - gm, axis=1), kind="stable")
    for keep in (0.5, 0.6):
        idx = gm_filter_random(X, 20, keep=keep, seed=1)
        assert len(set(idx)) == 20 and set(idx) <= set(order[:int(np.ceil(keep * 100))])
        assert np.all(idx < 60)                                 # no point of the far cluster
    assert sorted(gm_filter_random(X, 30, keep=0.1, seed=2)) == sorted(order[:30])   # pool never below k
    assert len(set(gm_filter_random(X, 20, keep=1.0, seed=3))) == 20                    # keep 1: plain random
    with pytest.raises(ValueError, match="keep"):
        gm_filter_random(X, 5, keep=0.0)
    assert select_per_class(X, np.r_[np.zeros(50), np.ones(50)], 10, "gm-filter-random", seed=0, keep=0.5).size == 10


def test_subsampled_geometric_median_is_the_median_of_a_random_share():
    from rayml.data.gm_matching import geometric_median_subsampled

    X = np.random.default_rng(3).standard_normal((101, 4))
    assert np.allclose(geometric_median_subsampled(X, 1.0, seed=0), geometric_median(X))   # gamma = 1: all rows
    rows = np.random.default_rng(7).permutation(101)[:51]                                     # ceil(0.5 * 101)
    assert np.allclose(geometric_median_subsampled(X, 0.5, seed=7), geometric_median(X[rows]))
    with pytest.raises(ValueError, match="gamma"):
        geometric_median_subsampled(X, 0.0)


def _herd_loop(X, k, target, first):
    """A plain herding loop from a given first direction (independent of the module's vectorised one)."""
    theta, chosen = X[first].copy(), []
    for _ in range(k):
        j = max((i for i in range(len(X)) if i not in chosen), key=lambda i: float(X[i] @ theta))
        chosen.append(j)
        theta = theta + target - X[j]
    return chosen


def test_batched_herding_herds_each_random_batch_with_a_proportional_budget():
    from rayml.data.gm_matching import batched_herding

    X = np.random.default_rng(4).standard_normal((30, 3))
    gm = geometric_median(X)
    idx = batched_herding(X, 10, gm, n_batches=4, seed=9)
    # the same draws by hand: a permutation cut into 8, 8, 7, 7 rows, budgets 3, 3, 2, 2 (largest remainders),
    # then one random start per batch
    rng = np.random.default_rng(9)
    batches = np.array_split(rng.permutation(30), 4)
    ref = []
    for b, kb in zip(batches, (3, 3, 2, 2)):
        first = int(rng.integers(len(b)))
        ref += [int(b[j]) for j in _herd_loop(X[b], kb, gm, first)]
    assert idx.tolist() == ref and len(set(ref)) == 10
    assert np.allclose(X[batched_herding(X, 30, gm, seed=1)].mean(0), X.mean(0))   # k = n: the whole set
    with pytest.raises(ValueError, match="n_batches"):
        batched_herding(X, 3, gm, n_batches=0)


def test_variants_are_selectable_but_not_baselines():
    from rayml.data.gm_matching import VARIANTS

    X = np.random.default_rng(6).standard_normal((60, 3))
    y = np.arange(60) % 3
    for v in VARIANTS:
        assert v not in METHODS
        idx = select_per_class(X, y, 12, v, seed=0)
        assert idx.size == 12 and np.array_equal(np.bincount(y[idx]), [4, 4, 4])
        assert GMMatching(k=12, method=v, random_state=0).fit(X, y).n_selected_ == 12
