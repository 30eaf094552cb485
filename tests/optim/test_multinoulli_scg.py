"""Multinoulli-SCG: the extension and its gradient against enumeration, the rounding, the
algorithm against brute force, the baselines, determinism, bad input, and the Ray evaluator."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rayml.optim import subset_baselines as sb
from rayml.optim.multinoulli_scg import (
    Partition,
    SCGConfig,
    exact_gradient,
    linear_maximizer,
    momentum_weight,
    multinoulli_scg,
    multinoulli_value,
    multinoulli_value_exact,
    path_difference,
    round_multinoulli,
    sampled_gradient,
)
from rayml.optim.subset_objectives import BayesianAOptimal, LogDetSummary, WeightedCoverage, make_instance


def _tiny():
    f, labels = make_instance("coverage", 6, 2, seed=3)
    return f, Partition(labels, [2, 1])


def _random_x(partition, rng, total=0.9):
    x = rng.random((partition.rank, partition.n)) * partition.allowed
    return x / x.sum(axis=1, keepdims=True) * total


def _naive_value(f, x, partition):
    # F(x) = sum over slot outcomes of prod(prob) f(union), written independently of the module
    options = []
    for s in range(partition.rank):
        elems = np.flatnonzero(partition.allowed[s])
        options.append([(None, 1 - x[s].sum())] + [(int(v), x[s, v]) for v in elems])
    total = 0.0
    for combo in itertools.product(*options):
        mask = np.zeros(partition.n)
        for v, _ in combo:
            if v is not None:
                mask[v] = 1
        total += np.prod([p for _, p in combo]) * f(mask[None])[0]
    return total


def test_extension_matches_independent_enumeration_and_monte_carlo():
    f, P = _tiny()
    x = _random_x(P, np.random.default_rng(0))
    exact = multinoulli_value_exact(f, x, P)
    assert exact == pytest.approx(_naive_value(f, x, P), rel=1e-12)
    assert multinoulli_value(f, x, P, samples=40_000, seed=1) == pytest.approx(exact, rel=0.02)
    # at a vertex the extension is f of that set
    vertex = np.zeros_like(x)
    vertex[[0, 1, 2], [0, 1, 4]] = 1.0
    mask = np.zeros(P.n)
    mask[[0, 1, 4]] = 1
    assert multinoulli_value_exact(f, vertex, P) == pytest.approx(f(mask[None])[0])


def test_gradient_is_a_finite_difference_of_an_affine_extension_and_the_estimator_is_unbiased():
    f, P = _tiny()
    x = _random_x(P, np.random.default_rng(1), total=0.6)
    g = exact_gradient(f, x, P)
    # F is affine in each slot: a step along one coordinate changes F by exactly g * step
    s, v = 0, int(np.flatnonzero(P.allowed[0])[1])
    step = np.zeros_like(x)
    step[s, v] = 0.3
    assert multinoulli_value_exact(f, x + step, P) - multinoulli_value_exact(f, x, P) == pytest.approx(0.3 * g[s, v])
    assert np.all(g[~P.allowed] == 0) and np.all(g >= -1e-12)  # monotone f: non-negative gradient
    est = sampled_gradient(f, x, P, np.random.default_rng(2), samples=4000)
    assert np.allclose(est, g, atol=0.15 * np.abs(g).max())


def test_path_difference_is_unbiased_and_skips_unmoved_draws():
    f, P = _tiny()
    rng = np.random.default_rng(8)
    x_old = _random_x(P, rng, total=0.5)
    x_new = x_old + _random_x(P, rng, total=0.2)
    exact = exact_gradient(f, x_new, P) - exact_gradient(f, x_old, P)
    est = path_difference(f, x_new, x_old, P, np.random.default_rng(9), batch=6000)
    assert np.allclose(est, exact, atol=0.1 * np.abs(exact).max())
    # the same point twice: every draw picks the same elements, nothing is evaluated, zero difference
    calls = []
    zero = path_difference(lambda m: calls.append(len(m)) or f(m), x_old, x_old, P, np.random.default_rng(1), 50)
    assert np.all(zero == 0) and calls == []


def test_rounding_fills_by_marginal_gain():
    # nothing is drawn (x = 0), so the fill decides: by gain it takes elements 1 and 2 (value 8);
    # main before issue 36 filled by mass, i.e. by index at zero mass, and took 0 and 1 (value 6)
    f = WeightedCoverage(np.eye(4, dtype=bool), np.array([1.0, 5.0, 3.0, 0.5]))
    P = Partition(np.array([0, 0, 0, 1]), [2, 1])
    masks = round_multinoulli(np.zeros((P.rank, P.n)), P, np.random.default_rng(0), draws=2, f=f)
    assert [np.flatnonzero(m).tolist() for m in masks] == [[1, 2, 3], [1, 2, 3]]
    assert f(masks).tolist() == [8.5, 8.5]
    # coverage overlap: after element 0 is drawn, the gain (not the weight) decides the next pick
    cover = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    g = WeightedCoverage(cover, np.array([2.0, 2.0, 1.0]))
    Q = Partition(np.array([0, 0, 0]), [2])
    x = np.zeros((2, 3))
    x[0, 0] = 1.0
    mask = round_multinoulli(x, Q, np.random.default_rng(0), f=g)[0]
    assert np.flatnonzero(mask).tolist() == [0, 2]


def test_momentum_schedule_and_linear_maximizer():
    assert momentum_weight(1) == pytest.approx(4 / 9 ** (2 / 3))
    assert momentum_weight(0) == pytest.approx(1.0)  # 4 / 8^(2/3)
    P = Partition(np.array([0, 0, 1, 1, 1]), [1, 2])
    d = np.array([[0.5, 2.0, 9, 9, 9], [9, 9, -1.0, -2.0, -0.5], [9, 9, 0.1, 0.3, 0.2]]) * P.allowed
    v = linear_maximizer(d, P)
    assert v.tolist() == [[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 1, 0]]


def test_rounding_is_feasible_full_and_lossless_in_expectation():
    f, P = _tiny()
    x = _random_x(P, np.random.default_rng(4), total=0.7)
    masks = round_multinoulli(x, P, np.random.default_rng(5), draws=3000)
    assert all(P.is_feasible(m) for m in masks[:200])
    assert np.all([m[p].sum() == b for m in masks[:200] for p, b in zip(P.parts, P.budgets)])
    mean_rounded = f(masks).mean()
    se = f(masks).std() / np.sqrt(len(masks))
    assert mean_rounded >= multinoulli_value_exact(f, x, P) - 3 * se
    # without the fill the rounding is unbiased: E f(S) = F(x)
    raw = round_multinoulli(x, P, np.random.default_rng(6), draws=20_000, fill=False)
    assert f(raw).mean() == pytest.approx(multinoulli_value_exact(f, x, P), rel=0.03)


@pytest.mark.parametrize("kind", ["coverage", "a-optimal", "video"])
def test_scg_against_brute_force_opt(kind):
    f, labels = make_instance(kind, 12, 3, seed=7)
    P = Partition(labels, [2, 2, 2])
    opt = sb.brute_force(f, P)
    masks = sb.feasible_bases(P)
    assert opt.value == pytest.approx(f(masks).max()) and opt.evals == 6**3
    for estimator in ("path-integrated", "momentum"):
        res = multinoulli_scg(f, P, SCGConfig(iterations=20, roundings=5, estimator=estimator), seed=0)
        assert P.is_feasible(np.isin(np.arange(P.n), res.selected)) and len(res.selected) == P.rank
        assert res.value <= opt.value + 1e-9
        assert res.value >= (1 - 1 / np.e) * opt.value
        assert res.x.sum(axis=1) == pytest.approx(np.ones(P.rank))
    # momentum: one gradient (sum_s (|V_k(s)| + 1) sets) per step, the 5 rounded sets, and the
    # marginal-gain fill's sets where two slots of a part drew the same element
    assert res.evals >= 20 * sum(len(P.parts[k]) + 1 for k in P.slot_part) + 5


def test_modular_objective_is_solved_exactly():
    # f(S) = sum of weights: the optimum takes the B_k heaviest elements of every part
    w = np.array([1.0, 5.0, 3.0, 2.0, 8.0, 1.0, 4.0])
    f = WeightedCoverage(np.eye(7, dtype=bool), w)
    P = Partition(np.array([0, 0, 0, 1, 1, 1, 1]), [2, 1])
    res = multinoulli_scg(f, P, SCGConfig(iterations=15), seed=1)
    assert sorted(res.selected.tolist()) == [1, 2, 4]
    g = sb.partition_greedy(f, P)
    assert g.selected.tolist() == [1, 2, 4]
    # 7 open candidates, then part 1 is full: 3, then 2, plus the final evaluation of S
    assert g.evals == 7 + 3 + 2 + 1


def test_baselines_are_feasible_and_count_evaluations():
    f, labels = make_instance("video", 10, 2, seed=2)
    P = Partition(labels, [2, 3])
    g = sb.partition_greedy(f, P)
    for res in (g, sb.distorted_local_search(f, P, samples=8, seed=0), sb.random_feasible(f, P, seed=0)):
        mask = np.isin(np.arange(P.n), res.selected)
        assert P.is_feasible(mask) and len(res.selected) == P.rank
        assert res.value == pytest.approx(f(mask[None])[0])
    dls = sb.distorted_local_search(f, P, samples=8, seed=0)
    assert dls.evals > 8 * P.rank  # each potential estimate costs `samples` evaluations


def test_random_order_greedy_is_feasible_counts_evaluations_and_escapes_the_trap():
    from rayml.optim.subset_objectives import greedy_trap_instance

    f, labels, opt = greedy_trap_instance(40, 4, 2, np.random.default_rng(0))
    P = Partition(labels, [2] * 4)
    planted = f(opt[None])[0]
    one = sb.random_order_greedy(f, P, orders=1, seed=3)
    best = sb.random_order_greedy(f, P, orders=8, seed=3)
    for res in (one, best):
        mask = np.isin(np.arange(P.n), res.selected)
        assert P.is_feasible(mask) and len(res.selected) == P.rank
        assert res.value == pytest.approx(f(mask[None])[0])
    # per order: each part's budget picks over its open elements, then one evaluation of the set
    per_order = sum(sum(len(part) - j for j in range(b)) for part, b in zip(P.parts, P.budgets)) + 1
    assert one.evals == per_order and best.evals == 8 * per_order
    # the first order is shared (same seed), so the best of 8 is at least the first
    assert best.value >= one.value
    # greedy takes every bait; some part order fills a victim part before its bait part
    assert sb.partition_greedy(f, P).value <= 0.6 * planted < best.value
    # one part: the order cannot matter, so it is partition greedy
    P1 = Partition(np.zeros(10, dtype=int), [3])
    f1, _ = make_instance("coverage", 10, 1, seed=4)
    assert sb.random_order_greedy(f1, P1, orders=3).selected.tolist() == sb.partition_greedy(f1, P1).selected.tolist()
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="orders"):
            sb.random_order_greedy(f, P, orders=bad)


def test_exact_distorted_potential_matches_quadrature_and_monte_carlo():
    from scipy.integrate import quad

    f, labels = make_instance("coverage", 8, 2, seed=4)
    P = Partition(labels, [2, 2])
    phi = 1.0
    A = np.zeros(8, dtype=bool)
    A[[0, 1, 5]] = True
    from rayml.optim.multinoulli_scg import CountingEvaluator

    exact = sb._ExactPotential(CountingEvaluator(f), 8, phi)(A[None])[0]
    # independent: sum over subsets B of f(B) * int rho(p) p^(|B|-1) (1-p)^(|A|-|B|) dp, by scipy quad
    rho = lambda p: phi * np.exp(phi * p) / np.expm1(phi)  # noqa: E731
    idx, ref = np.flatnonzero(A), 0.0
    for r in range(1, len(idx) + 1):
        for comb in itertools.combinations(idx, r):
            B = np.zeros(8, dtype=bool)
            B[list(comb)] = True
            w = quad(lambda p: rho(p) * p ** (r - 1) * (1 - p) ** (len(idx) - r), 0, 1)[0]
            ref += w * f(B[None])[0]
    assert exact == pytest.approx(ref, rel=1e-10)
    # the Monte Carlo potential estimates the same number
    rng = np.random.default_rng(0)
    p, keep = sb._distortion_samples(phi, 200_000, 8, rng)
    est = np.mean(f((A[None] & keep).astype(float)) / p)
    assert est == pytest.approx(exact, rel=0.02)


def test_exact_distorted_local_search_counts_each_distinct_set_once():
    f, labels = make_instance("coverage", 10, 2, seed=1)
    P = Partition(labels, [2, 2])
    res = sb.distorted_local_search(f, P, samples=None)
    # every evaluated set has at most rank elements: at most sum_{r<=4} C(10, r) distinct sets + the final one
    assert 0 < res.evals <= sum(len(list(itertools.combinations(range(10), r))) for r in range(1, 5)) + 1
    assert P.is_feasible(np.isin(np.arange(P.n), res.selected))
    assert res.value >= 0.5 * sb.brute_force(f, P).value


def test_objectives_are_normalised_and_monotone():
    rng = np.random.default_rng(0)
    for kind in ("coverage", "a-optimal", "video"):
        f, _ = make_instance(kind, 8, 2, seed=1)
        assert f(np.zeros((1, 8)))[0] == pytest.approx(0.0, abs=1e-12)
        a = rng.random((50, 8)) < 0.4
        b = a | (rng.random((50, 8)) < 0.3)
        assert np.all(f(b) >= f(a) - 1e-10)
    # A-optimal against a direct formula
    X = rng.standard_normal((4, 3))
    f = BayesianAOptimal(X, noise_sigma=0.5, prior_precision=2.0)
    m = np.array([1, 0, 1, 1])
    direct = 3 / 2.0 - np.trace(np.linalg.inv(2.0 * np.eye(3) + X[m > 0].T @ X[m > 0] / 0.25))
    assert f(m[None])[0] == pytest.approx(direct)


def test_determinism():
    f, P = _tiny()
    a = multinoulli_scg(f, P, SCGConfig(iterations=6, samples=2, roundings=3), seed=11)
    b = multinoulli_scg(f, P, SCGConfig(iterations=6, samples=2, roundings=3), seed=11)
    assert np.array_equal(a.x, b.x) and a.value == b.value
    d1 = sb.distorted_local_search(f, P, samples=5, seed=3)
    d2 = sb.distorted_local_search(f, P, samples=5, seed=3)
    assert d1.selected.tolist() == d2.selected.tolist() and d1.evals == d2.evals


def test_bad_input():
    with pytest.raises(ValueError, match="budgets"):
        Partition(np.array([0, 0, 1]), [3, 1])  # B_0 > |V_0|: infeasible
    with pytest.raises(ValueError, match="budgets"):
        Partition(np.array([0, 0, 1]), [1, 0])
    with pytest.raises(ValueError, match="budgets"):
        Partition(np.array([0, 0, 1]), [1])
    with pytest.raises(ValueError, match="labels"):
        Partition(np.array([0, 2, 2]), [1, 1, 1])  # part 1 empty
    with pytest.raises(ValueError, match="labels"):
        Partition(np.array([0.0, 1.0]), [1, 1])
    with pytest.raises(ValueError, match="iterations"):
        SCGConfig(iterations=0)
    with pytest.raises(ValueError, match="samples"):
        SCGConfig(samples=1.5)
    f, P = _tiny()
    with pytest.raises(ValueError, match="x must"):
        multinoulli_value_exact(f, np.ones((P.rank, P.n)), P)
    with pytest.raises(TypeError, match="partition"):
        multinoulli_scg(f, [0, 1], SCGConfig(iterations=2))
    with pytest.raises(ValueError, match="gamma"):
        sb.distorted_local_search(f, P, gamma=1.5)
    with pytest.raises(ValueError, match="limit"):
        sb.feasible_bases(P, limit=3)
    with pytest.raises(ValueError, match="symmetric positive semidefinite"):
        LogDetSummary(np.array([[1.0, 2.0], [2.0, 1.0]]))


def test_ray_evaluator_gives_identical_results(ray_session):
    from rayml import runtime

    f, labels = make_instance("video", 12, 3, seed=5)
    P = Partition(labels, [1, 2, 1])
    cfg = SCGConfig(iterations=4, samples=2, roundings=2)
    local = multinoulli_scg(f, P, cfg, seed=9)
    remote = multinoulli_scg(f, P, cfg, seed=9, evaluator=runtime.batch_evaluator(f, blocks=2))
    assert np.array_equal(local.x, remote.x) and local.value == remote.value and local.evals == remote.evals


def test_experiment_tiny_run_measures_ratios_and_judges_every_claim(tiny_record):
    # worker-count invariance is the cluster test's (tests/test_scaleout_cache.py, same shared tiny record)
    r1 = tiny_record("multinoulli-scg")
    assert {c["text"][:20] for c in r1["claims"]} and all(c["holds"] in (True, False) for c in r1["claims"])
    assert 0 < r1["metrics"]["mean_ratio"] <= 1 + 1e-9
    assert r1["env"]["tasks"] >= 2


def test_greedy_trap_plants_opt_and_traps_greedy():
    from rayml.optim.subset_objectives import greedy_trap_instance

    for seed in range(3):
        f, labels, opt = greedy_trap_instance(14, 2, 2, np.random.default_rng(seed))
        P = Partition(labels, [2, 2])
        planted = f(opt[None])[0]
        assert P.is_feasible(opt) and planted == pytest.approx(sb.brute_force(f, P).value)
        assert sb.partition_greedy(f, P).value <= 0.6 * planted
    with pytest.raises(ValueError, match="parts must be an even"):
        greedy_trap_instance(20, 3, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="too small"):
        greedy_trap_instance(6, 2, 2, np.random.default_rng(0))


def _greedy_in_part_order(f, P, order):
    # greedy that fills the parts in `order`, each to its budget by marginal gain (written apart from
    # subset_baselines.random_order_greedy)
    mask = np.zeros(P.n, dtype=bool)
    for k in order:
        for _ in range(P.budgets[k]):
            cand = [int(i) for i in P.parts[k] if not mask[i]]
            gains = []
            for i in cand:
                trial = mask.copy()
                trial[i] = True
                gains.append(f(trial[None])[0])
            mask[cand[int(np.argmax(gains))]] = True
    return f(mask[None])[0]


def test_every_order_trap_defeats_greedy_in_every_part_order():
    from rayml.optim.subset_objectives import every_order_trap_instance

    for seed, (n, parts, k) in enumerate([(14, 3, 2), (16, 2, 3), (20, 3, 3)]):
        f, labels, opt = every_order_trap_instance(n, parts, k, np.random.default_rng(seed))
        P = Partition(labels, [k] * parts)
        planted = f(opt[None])[0]
        # the planted columns are the optimum (brute force over every basis)
        assert P.is_feasible(opt) and planted == pytest.approx(sb.brute_force(f, P).value)
        bound = 1 - (1 - 1 / k) ** k
        ratios = [_greedy_in_part_order(f, P, order) / planted for order in itertools.permutations(range(parts))]
        # every part order ends at greedy's cardinality bound (plus the bonus terms), far below OPT
        assert max(ratios) <= bound + 0.01 and min(ratios) >= bound - 1e-9
        assert sb.partition_greedy(f, P).value / planted <= bound + 0.01
        assert sb.random_order_greedy(f, P, orders=8, seed=seed).value / planted <= bound + 0.01
    with pytest.raises(ValueError, match="budget >= 2"):
        every_order_trap_instance(20, 2, 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="too small"):
        every_order_trap_instance(7, 2, 2, np.random.default_rng(0))


def test_scg_escapes_the_every_order_trap():
    from rayml.optim.subset_objectives import every_order_trap_instance

    f, labels, opt = every_order_trap_instance(16, 2, 3, np.random.default_rng(5))
    P = Partition(labels, [3, 3])
    res = multinoulli_scg(f, P, SCGConfig(iterations=10, roundings=5), seed=0)
    assert res.value / f(opt[None])[0] > 1 - (1 - 1 / 3) ** 3 + 0.1


def test_random_search_spends_its_budget_on_feasible_bases():
    from rayml.experiments.multinoulli_scg import random_search

    f, labels = make_instance("coverage", 12, 3, seed=2)
    P = Partition(labels, [2, 1, 2])
    calls = []

    def counted(m):
        calls.append(m)
        return f(m)

    best = random_search(counted, P, 5000, np.random.default_rng(0))
    masks = np.concatenate(calls)
    assert len(masks) == 5000 and all(P.is_feasible(m) and m.sum() == P.rank for m in masks[:300])
    assert best == pytest.approx(f(masks).max()) and best <= sb.brute_force(f, P).value + 1e-9
