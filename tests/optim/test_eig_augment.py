"""Max-min eigenvalue augmentation: the relaxation against brute force and a closed form, the
rounding's feasibility and mean, greedy, connectivity against networkx, determinism, bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rayml.experiments.eig_augment import connectivity_instance, e_design_instance, reduced_laplacian_basis
from rayml.optim.eig_augment import (
    AugmentationProblem,
    brute_force,
    greedy,
    randomized_rounding,
    round_many,
    same_size_subsets,
    solve_relaxation,
)


def _e_design(seed=0, n=4, m=7, k=3, batch=2):
    M, As = e_design_instance(n, m, batch, 0.1, np.random.default_rng(seed))
    return AugmentationProblem(M, As, k)


def test_relaxation_bounds_brute_force_and_rounding():
    P = _e_design()
    rel = solve_relaxation(P)
    assert rel.solver in ("CLARABEL", "SCS")
    assert np.all(rel.x >= 0) and np.all(rel.x <= 1) and rel.x.sum() <= P.k + 1e-9
    assert rel.value_at_x == pytest.approx(rel.bound, abs=1e-5)
    opt = brute_force(P)
    # brute force against a direct enumeration written here
    direct = max(np.linalg.eigvalsh(P.M + sum(P.As[list(s)]))[0] for s in itertools.combinations(range(P.m), P.k))
    assert opt.value == pytest.approx(direct)
    assert rel.bound >= opt.value - 1e-6
    best = round_many(P, rel.x, 64, seed=1)
    assert best.value <= opt.value + 1e-9 and best.value >= P.base - 1e-12
    assert greedy(P).value <= opt.value + 1e-9


def test_relaxation_closed_form_for_commuting_diagonal_matrices():
    # M = 0, A_i = e_i e_i^T (i < n), k = n - 1 < m = n: the relaxation spreads x_i = (n-1)/n on every
    # coordinate, value (n-1)/n, while every integral choice leaves one coordinate at 0 (OPT = 0).
    n = 4
    As = [np.diag(np.eye(n)[i]) for i in range(n)]
    with pytest.warns(UserWarning, match="can raise lambda_min"):
        P = AugmentationProblem(np.zeros((n, n)), As, k=n - 1)
    rel = solve_relaxation(P)
    assert rel.bound == pytest.approx((n - 1) / n, abs=1e-5)
    assert np.allclose(rel.x, (n - 1) / n, atol=1e-4)
    assert brute_force(P).value == pytest.approx(0.0)


def test_rounding_respects_the_budget_and_its_mean():
    rng = np.random.default_rng(0)
    x = np.array([0.9, 0.6, 0.3, 0.2, 0.0, 1.0])
    for scheme in ("iid", "bernoulli"):
        sets = [randomized_rounding(x, 3, rng, scheme) for _ in range(4000)]
        assert all(len(s) <= 3 and len(set(s.tolist())) == len(s) for s in sets)
        counts = np.bincount(np.concatenate(sets), minlength=x.size) / len(sets)
        assert counts[4] == 0  # zero mass is never drawn
    # iid: index i appears with probability 1 - (1 - x_i / sum x)^k
    sets = [randomized_rounding(x, 3, rng, "iid") for _ in range(20000)]
    counts = np.bincount(np.concatenate(sets), minlength=x.size) / len(sets)
    assert np.allclose(counts, 1 - (1 - x / x.sum()) ** 3, atol=0.015)


def test_without_replacement_rounding_fills_k_slots_with_successive_sampling_inclusions():
    rng = np.random.default_rng(1)
    x = np.array([0.9, 0.6, 0.3, 0.2, 0.0, 1.0])
    sets = [randomized_rounding(x, 3, rng, "without-replacement") for _ in range(20000)]
    assert all(len(s) == 3 and len(set(s.tolist())) == 3 and 4 not in s for s in sets)
    # exact inclusion probabilities of successive sampling proportional to x, by enumerating orders
    p = x / x.sum()
    exact = np.zeros(x.size)
    for order in itertools.permutations(np.flatnonzero(x > 0), 3):
        prob, left = 1.0, 1.0
        for i in order:
            prob *= p[i] / left
            left -= p[i]
        exact[list(order)] += prob
    counts = np.bincount(np.concatenate(sets), minlength=x.size) / len(sets)
    assert np.allclose(counts, exact, atol=0.015)
    # a support smaller than k: all of it
    assert randomized_rounding(np.array([0.5, 0.0, 0.2]), 3, rng, "without-replacement").tolist() == [0, 2]


def test_same_size_baseline_draws_as_many_distinct_indices_as_each_rounding():
    """Session 14 (R10): the i.i.d. rounding keeps fewer than k distinct indices; its random baseline
    draws, per rounding draw, a uniformly random subset of exactly that many distinct indices."""
    m, k = 12, 6
    x = np.array([1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0])
    P = AugmentationProblem(np.eye(3), [np.diag(np.random.default_rng(i).uniform(0, 1, 3)) for i in range(m)], k)
    rounds = round_many(P, x, 400, seed=3)
    # sizes are the draws' distinct counts: re-draw the same sets with the same seed and count them
    rng = np.random.default_rng(3)
    direct = [np.unique(rng.choice(m, size=k, replace=True, p=x / x.sum())).size for _ in range(400)]
    assert rounds.sizes.tolist() == direct
    assert rounds.sizes.min() < k  # i.i.d. draws lose slots to repeats here (the case the baseline is for)
    same = same_size_subsets(rounds.sizes, m, np.random.default_rng(4))
    assert [t.size for t in same] == rounds.sizes.tolist()
    assert all(np.unique(t).size == t.size and t.min() >= 0 and t.max() < m for t in same)
    # uniform over all m candidates, not the rounding's support: each index's inclusion rate is size / m
    draws = same_size_subsets(np.full(20000, 4), m, np.random.default_rng(5))
    counts = np.bincount(np.concatenate(draws), minlength=m) / len(draws)
    assert np.allclose(counts, 4 / m, atol=0.015)
    # the without-replacement rounding always keeps k, so its same-size baseline is a random k-subset
    wr = round_many(P, x, 50, seed=6, scheme="without-replacement")
    assert wr.sizes.tolist() == [k] * 50
    with pytest.raises(ValueError, match="sizes must lie"):
        same_size_subsets([3, m + 1], m, np.random.default_rng(0))
    with pytest.raises(ValueError, match="sizes must be"):
        same_size_subsets([2.5], m, np.random.default_rng(0))


def test_greedy_by_hand():
    M = np.diag([1.0, 2.0, 3.0])
    As = [np.diag([2.0, 0.0, 0.0]), np.diag([0.0, 2.0, 0.0]), np.diag([1.5, 1.5, 0.0]), np.diag([0, 0, 5.0])]
    P = AugmentationProblem(M, As, k=2)
    # step 1: values 2, 1, 2.5, 1 -> pick 2 (diag 2.5, 3.5, 3); step 2: +A0 -> 3, +A1 -> 2.5, +A3 -> 2.5
    res = greedy(P)
    assert res.selected.tolist() == [0, 2] and res.value == pytest.approx(3.0)
    assert res.evaluations == 4 + 3
    assert brute_force(P).value == pytest.approx(3.0)


def test_connectivity_matches_networkx_algebraic_connectivity():
    import networkx as nx

    M, As, G = connectivity_instance(7, 5, 2, np.random.default_rng(3))
    L = nx.laplacian_matrix(G, nodelist=range(8)).toarray().astype(float)
    assert np.linalg.eigvalsh(M)[0] == pytest.approx(np.sort(np.linalg.eigvalsh(L))[1], abs=1e-9)
    V = reduced_laplacian_basis(8)
    assert np.allclose(V.T @ V, np.eye(7)) and np.allclose(V.T @ np.ones(8), 0)
    P = AugmentationProblem(M, As, k=2)
    assert max(np.linalg.matrix_rank(A) for A in P.As) >= 2  # not rank one


def test_determinism():
    P = _e_design(seed=2)
    x = np.full(P.m, P.k / P.m)
    a, b = round_many(P, x, 20, seed=5), round_many(P, x, 20, seed=5)
    assert a.selected.tolist() == b.selected.tolist() and np.array_equal(a.values, b.values)


def test_bad_input():
    I2 = np.eye(2)
    with pytest.raises(ValueError, match=r"As\[1\] must be positive semidefinite"):
        AugmentationProblem(I2, [I2, np.diag([1.0, -1.0])], k=1)
    with pytest.raises(ValueError, match="M must be symmetric"):
        AugmentationProblem(np.array([[1.0, 2.0], [0.0, 1.0]]), [I2, I2], k=1)
    with pytest.raises(ValueError, match="M must be positive semidefinite"):
        AugmentationProblem(-I2, [I2, I2], k=1)
    with pytest.raises(ValueError, match=r"As\[0\] must be a \(2, 2\)"):
        AugmentationProblem(I2, [np.eye(3), I2], k=1)
    for k in (0, 2, 5, 1.0):
        with pytest.raises(ValueError, match="k must be"):
            AugmentationProblem(I2, [I2, I2], k=k)
    P = AugmentationProblem(I2, [I2, I2, I2], k=1)
    with pytest.raises(ValueError, match="scheme"):
        randomized_rounding(np.ones(3) / 3, 1, np.random.default_rng(0), scheme="pipage")
    with pytest.raises(ValueError, match="roundings"):
        round_many(P, np.ones(3) / 3, 0)
    with pytest.raises(ValueError, match="limit"):
        brute_force(P, limit=2)
    with pytest.raises(ValueError, match="solver"):
        solve_relaxation(P, solver="NOT_A_SOLVER")


def test_experiment_tiny_run_bounds_opt_and_judges_every_claim(tiny_record):
    # worker-count invariance is the cluster test's (tests/test_scaleout_cache.py, same shared tiny record)
    r1 = tiny_record("eig-augment")
    assert r1["metrics"]["min_bound_minus_opt"] >= -1e-6
    assert all(c["holds"] in (True, False) for c in r1["claims"])


def test_experiment_rejects_bad_settings_before_work():
    from rayml import experiments

    with pytest.raises(ValueError, match="shares"):
        experiments.run("eig-augment", size="tiny", overrides={"shares": [0.0, 1.0]})
    with pytest.raises(ValueError, match="k must satisfy"):
        experiments.run("eig-augment", size="tiny", overrides={"k": 1})
    with pytest.raises(ValueError, match="scheme"):
        experiments.run("eig-augment", size="tiny", overrides={"scheme": "pipage"})


def test_greedy_breaks_ties_by_log_det():
    # No single candidate lifts lambda_min(M) = 0.01 alone, so the first pick is a tie. By lowest
    # index (main before issue 36) greedy took A0 and ended at 0.11; by log det it takes A1 (then
    # A2) and reaches OPT = 1.01.
    M = np.diag([0.01, 0.01])
    P = AugmentationProblem(M, [np.diag([0.1, 0.0]), np.diag([1.0, 0.0]), np.diag([0.0, 1.0])], k=2)
    res = greedy(P)
    assert res.selected.tolist() == [1, 2]
    assert res.value == pytest.approx(brute_force(P).value) and res.value == pytest.approx(1.01)


def test_warns_when_rank_one_candidates_cannot_raise_lambda_min():
    with pytest.warns(UserWarning, match="cannot raise|can raise lambda_min"):
        P = AugmentationProblem(0.05 * np.eye(3), [np.outer(v, v) for v in np.eye(3)], k=2)
    assert P.cap == pytest.approx(0.05) and brute_force(P).value == pytest.approx(0.05)
    # the setting: k < n rank-one candidates, but the weak eigenspace has dimension 2 <= k
    import warnings

    from rayml.experiments.eig_augment import weak_subspace_instance

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        M, As = weak_subspace_instance(12, 2, 10, 0.5, np.random.default_rng(0))
        P = AugmentationProblem(M, As, k=5)
    assert P.cap == pytest.approx(10.0)


def test_weak_subspace_setting_reaches_the_regime():
    from rayml.experiments.eig_augment import weak_subspace_instance

    conditions = []
    for share in (0.05, 1.0):
        M, As = weak_subspace_instance(18, 2, 10, share, np.random.default_rng(4))
        P = AugmentationProblem(M, As, k=8)
        assert P.R == pytest.approx(1.0)
        conditions.append(P.condition(solve_relaxation(P).bound))
    assert conditions[0] <= 1 / np.log(8) and conditions[1] >= 1.0


def test_equal_evaluation_budget_is_greedys_count():
    from rayml.experiments.eig_augment import greedy_evals

    rng = np.random.default_rng(3)
    M, As = e_design_instance(4, 7, 2, 0.05, rng)
    for k in (2, 3):
        assert greedy(AugmentationProblem(M, As, k)).evaluations == greedy_evals(7, k)
