"""SB-GDRO and SB-EXP3: hand-computed updates, exact optima, sparsity, accounting, determinism, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayml.bandits import gdro, sleeping


def test_dominant_set_cuts_at_the_first_gap_above_0_7_lambda():
    risks = np.array([[0.85, 0.9, 0.3, 0.2],      # sorted 0.9, 0.85 | 0.3: first gap 0.55 > 0.14
                      [0.5, 0.45, 0.4, 0.35],     # no gap > 0.14: every group (fallback)
                      [0.9, 0.1, 0.5, 0.45]])     # sorted 0.9 | 0.5: gap 0.4 > 0.14 right away
    got = gdro.dominant_set(risks, 0.2)
    assert got.tolist() == [[True, True, False, False], [True] * 4, [True, False, False, False]]
    # lambda per run: 0.7 * 0.8 = 0.56 > 0.55 keeps all of run 0
    per_run = gdro.dominant_set(risks, np.array([0.8, 0.2, 0.2]))
    assert per_run[0].all()


def test_sb_exp3_hand_computed_update():
    regret = np.zeros((1, 3))
    awake = np.array([[True, True, False]])
    p = sleeping.probabilities(regret, awake, 1.0)
    assert np.allclose(p, [[0.5, 0.5, 0.0]])
    new = sleeping.update(regret, p, awake, np.array([0]), np.array([0.4]), 0.1)
    lhat = 0.4 / 0.6
    assert np.allclose(new, [[0.5 * lhat - lhat, 0.5 * lhat, 0.0]])   # sleeping arm untouched
    p2 = sleeping.probabilities(new, awake, 1.0)
    assert np.allclose(p2[0, :2], np.exp([-0.5 * lhat, 0.5 * lhat]) / np.exp([-0.5 * lhat, 0.5 * lhat]).sum())


def test_sb_exp3_with_every_arm_awake_is_exp3_ix():
    rng = np.random.default_rng(3)
    K, eta, gamma = 4, 0.3, 0.15
    regret, cum_lhat = np.zeros((1, K)), np.zeros(K)
    awake = np.ones((1, K), dtype=bool)
    for _ in range(50):
        p = sleeping.probabilities(regret, awake, eta)
        ix = np.exp(-eta * (cum_lhat - cum_lhat.min()))
        assert np.allclose(p[0], ix / ix.sum())
        arm = sleeping.sample_arms(p, rng)
        loss = rng.random(1)
        regret = sleeping.update(regret, p, awake, arm, loss, gamma)
        cum_lhat[arm[0]] += loss[0] / (p[0, arm[0]] + gamma)


def test_sample_arms_follows_the_probabilities_and_skips_sleeping_arms():
    rng = np.random.default_rng(0)
    p = np.tile([0.2, 0.0, 0.8], (20000, 1))
    arms = sleeping.sample_arms(p, rng)
    assert not np.any(arms == 1)
    assert abs(np.mean(arms == 2) - 0.8) < 0.02


def test_quadratic_construction_optimum_and_sparsity():
    from scipy.optimize import minimize

    prob = gdro.SparseQuadraticGroups(8, 3, dim=4)
    assert abs(prob.gap(prob.minimiser()[None])[0]) < 1e-12
    best = min(minimize(lambda th: prob.risks(prob.project(th[None])).max(), x0, method="Nelder-Mead",
                        options=dict(maxiter=20000, xatol=1e-9, fatol=1e-12)).fun
               for x0 in np.random.default_rng(0).uniform(-0.5, 0.5, (3, 4)))
    assert best == pytest.approx(prob.optimal_value(), abs=1e-6)
    theta = prob.project(np.random.default_rng(1).uniform(-1, 1, (500, 4)))
    r = prob.risks(theta)
    assert np.all(r[:, :3].min(axis=1) - r[:, 3:].max(axis=1) >= 0.2)        # (0.2, 3)-sparse everywhere
    assert np.all((r >= 0) & (r <= 1))


def test_loss_grad_matches_finite_differences_and_atom_losses():
    rng = np.random.default_rng(2)
    for prob in (gdro.SparseQuadraticGroups(6, 2), gdro.breast_cancer_groups()):
        theta = prob.project(rng.uniform(-0.5, 0.5, (5, prob.dim)))
        groups = rng.integers(prob.n_groups, size=5)
        atoms = prob.sample_atoms(groups, rng)
        loss, grad = prob.loss_grad(theta, groups, atoms)
        assert np.allclose(loss, prob.atom_losses(theta)[np.arange(5), groups, atoms])
        h = 1e-6
        for i in range(prob.dim):
            e = np.zeros(prob.dim)
            e[i] = h
            fd = (prob.loss_grad(theta + e, groups, atoms)[0] - prob.loss_grad(theta - e, groups, atoms)[0]) / (2 * h)
            assert np.allclose(fd, grad[:, i], atol=1e-5)


def test_hinge_optimum_is_the_linear_programme_value():
    prob = gdro.breast_cancer_groups()
    L = prob.optimal_value()
    assert prob.risks(prob.theta_star[None]).max() == pytest.approx(L, abs=1e-7)
    rng = np.random.default_rng(0)
    assert np.all(prob.risks(rng.uniform(-1, 1, (300, prob.dim))).max(axis=1) >= L - 1e-9)
    assert prob.sizes.min() < 0.1 * prob.sizes.max() * 2           # imbalanced groups


def test_empirical_risks_closed_form_summary_matches_atom_sums():
    prob = gdro.SparseQuadraticGroups(5, 2)
    est = gdro.EmpiricalRisks(prob, 3)
    est.redraw(np.arange(3), np.array([50, 500, 5000]), np.random.default_rng(0))
    theta = prob.project(np.random.default_rng(1).uniform(-1, 1, (3, prob.dim)))
    direct = np.einsum("rkj,rkj->rk", prob.atom_losses(theta), est.weights)
    assert np.allclose(est(theta), direct)
    assert np.abs(est(theta)[2] - prob.risks(theta)[2]).max() < 0.03


def test_sb_gdro_spends_K_m_lambda_on_estimation_and_plays_only_dominant_groups():
    prob = gdro.SparseQuadraticGroups(10, 2)
    cfg = gdro.GDROConfig(method="sb-gdro", rounds=200, lam=0.2)
    res = gdro.play(prob, cfg, 3, 0)
    m = int(gdro.samples_per_group(0.2, 10, cfg.delta, prob.dim))
    assert m == math.ceil((prob.dim + math.log(2 * 10 / 0.01)) / (2 * 0.03**2))
    assert np.all(res.estimation_samples == 10 * m)
    assert np.allclose(res.samples[:, -1], 10 * m + 200)
    assert np.all(res.group_counts[:, 2:] == 0)                       # easy groups never sampled
    assert np.all(res.awake_mean <= 2)
    base = gdro.play(prob, gdro.GDROConfig(method="smd-gdro", rounds=200), 3, 0)
    assert np.all(base.awake_mean == 10) and np.all(base.estimation_samples == 0)


def test_every_variant_runs_and_improves_its_gap_and_is_deterministic():
    prob = gdro.SparseQuadraticGroups(8, 2)
    for method in gdro.METHODS:
        cfg = gdro.GDROConfig(method=method, rounds=300, checkpoints=5)
        a, b = gdro.play(prob, cfg, 2, 7), gdro.play(prob, cfg, 2, 7)
        assert np.array_equal(a.gap, b.gap) and np.array_equal(a.samples, b.samples)
        assert np.all(a.gap >= -1e-12)
        assert a.gap[:, -1].mean() < a.gap[:, 0].mean()
    sa = gdro.play(prob, gdro.GDROConfig(method="sb-gdro-sa", rounds=50), 2, 0)
    assert np.all(sa.lam < 1.0) and np.all(sa.lam >= 0.05)             # halved at least once


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="n_groups"):
        gdro.SparseQuadraticGroups(1, 1)
    with pytest.raises(ValueError, match="beta"):
        gdro.SparseQuadraticGroups(4, 4)
    with pytest.raises(ValueError, match="rounds"):
        gdro.GDROConfig(rounds=0)
    with pytest.raises(ValueError, match="method"):
        gdro.GDROConfig(method="nope")
    with pytest.raises(ValueError, match="lam"):
        gdro.GDROConfig(lam=0.0)
    with pytest.raises(ValueError, match="runs"):
        gdro.play(gdro.SparseQuadraticGroups(4, 2), gdro.GDROConfig(rounds=5), 0, 0)
    with pytest.raises(ValueError, match="risk_estimates"):
        gdro.dominant_set(np.zeros(3), 0.2)
    with pytest.raises(ValueError, match="same shape"):
        sleeping.probabilities(np.zeros((2, 3)), np.ones((2, 4), dtype=bool), 1.0)
    with pytest.raises(ValueError, match="eta"):
        sleeping.SBExp3Config(eta=0.0)
    with pytest.raises(ValueError, match="K"):
        sleeping.default_rates(1, 10)
    with pytest.raises(ValueError, match="X"):
        gdro.HingeGroups(np.zeros((3, 2)), np.ones(4), np.zeros(3))


def test_experiment_fixes_the_game_budget_per_K_and_rejects_bad_settings():
    """Issue 37: the old claim 3's budget grew with K; now every K plays the same game samples."""
    from rayml.experiments import gdro_sparsity as exp

    cfg = dict(exp.SIZES["quick"])
    assert "budget_ratio" not in cfg and int(cfg["rounds"]) > 0
    assert exp.curve_ratio(np.array([1, 10, 100]), np.array([9.0, 1.0, 0.5]), np.array([1.0, 2.0, 1.0]), 10) == 0.5
    with pytest.raises(ValueError, match="start"):
        exp.curve_ratio(np.array([1, 10]), np.ones(2), np.ones(2), 11)
    with pytest.raises(ValueError, match="lam"):
        exp._check({**cfg, "lam": 0.3})                                   # above this instance's lambda* = 0.2
    with pytest.raises(ValueError, match="eta_grid"):
        exp._check({**cfg, "eta_grid": [0.5, 2.0]})                       # the stated rate 1 must be inside
    with pytest.raises(ValueError, match="groups"):
        exp._check({**cfg, "groups": [8]})


def test_just_below_instance_is_sparse_with_a_moving_top_group():
    """Issue 37's instance: lambda* = 0.2 with the non-dominant groups just lambda* below, and which
    hard group is on top (alone awake or not) changes with theta."""
    p = gdro.SparseQuadraticGroups(16, 2, 2, s=0.05, hard=(0.5, 0.4), easy=(0.2, 0.1))
    assert p.lam_star == pytest.approx(0.2)
    theta = p.project(np.random.default_rng(0).uniform(-1, 1, (2000, 2)))
    r = p.risks(theta)
    assert np.all(r[:, :2].min(1) - r[:, 2:].max(1) >= 0.2 - 1e-12)      # (0.2, 2)-sparse everywhere
    assert (r[:, :2].min(1) - r[:, 2:].max(1)).min() < 0.25              # ... and just that: easy groups close
    top = r[:, :2].argmax(1)
    assert set(top.tolist()) == {0, 1}                                     # the top hard group moves with theta
    alone = (r[:, :2].max(1) - r[:, :2].min(1)) > 0.7 * 0.2
    assert alone.any() and (~alone).any()                                   # the awake set is {top} or the pair
    with pytest.raises(ValueError, match="hard"):
        gdro.SparseQuadraticGroups(6, 2, 2, hard=(0.25, 0.4), easy=(0.2, 0.1))
    with pytest.raises(ValueError, match="easy"):
        gdro.SparseQuadraticGroups(6, 2, 2, easy=(0.0, 0.0))


def _smd_fixed_by_hand(prob, T, scale, seed):
    """SMD-GDRO with the fixed rate, one game, a plain per-round loop (independent of ``play``)."""
    rng = np.random.default_rng(seed)
    K = prob.n_groups
    eta_theta = prob.diameter / (prob.lipschitz * math.sqrt(T))
    eta = scale * math.sqrt(math.log(K) / (T * K))
    theta, theta_sum, R = np.zeros(prob.dim), np.zeros(prob.dim), [0.0] * K
    for _ in range(T):
        top = max(R)
        w = [math.exp(eta * (x - top)) for x in R]
        p = [x / sum(w) for x in w]
        cdf = np.cumsum(p)
        arm = min(int((cdf < rng.random(1)[0] * cdf[-1]).sum()), K - 1)
        acdf = np.cumsum(prob.probs[arm])
        atom = min(int((acdf < rng.random(1)[0] * acdf[-1]).sum()), prob.probs.shape[1] - 1)
        z = prob.Z[arm, atom]
        loss = prob.c[arm] + prob.w[arm] * float((theta - z) @ (theta - z)) / prob.M
        grad = 2 * prob.w[arm] / prob.M * (theta - z)
        lhat = (1.0 - loss) / (p[arm] + eta / 2)
        R = [x + p[arm] * lhat - (lhat if a == arm else 0.0) for a, x in enumerate(R)]
        theta_sum += theta
        theta = prob.project((theta - eta_theta * grad)[None])[0]
    return theta_sum / T


def test_smd_gdro_fixed_rate_equals_a_per_round_loop():
    prob = gdro.SparseQuadraticGroups(6, 2, 2, s=0.05, hard=(0.5, 0.4), easy=(0.2, 0.1))
    res = gdro.play(prob, gdro.GDROConfig(method="smd-gdro", rounds=300, max_rate="fixed", eta_scale=2.0), 1, 5)
    assert np.allclose(res.theta_bar[0], _smd_fixed_by_hand(prob, 300, 2.0, 5), atol=1e-12)
    with pytest.raises(ValueError, match="max_rate"):
        gdro.GDROConfig(method="sb-gdro", max_rate="fixed")
    with pytest.raises(ValueError, match="eta_scale"):
        gdro.GDROConfig(eta_scale=0.0)


def test_separated_instance_has_the_stated_lambda_and_optimum():
    p = gdro.SparseQuadraticGroups(6, 2, 2, hard=(0.6, 0.4))
    assert p.lam_star == pytest.approx(0.5)
    rng = np.random.default_rng(0)
    thetas = p.project(rng.uniform(-1, 1, (200, 2)))
    r = p.risks(thetas)
    assert np.all(r[:, :2].min(1) >= 0.6) and np.all(r[:, 2:].max(1) <= 0.1)
    assert r.max(1).min() >= p.optimal_value() - 1e-12
    assert p.risks(p.minimiser()[None]).max() == pytest.approx(p.optimal_value())
    res = gdro.play(p, gdro.GDROConfig(lam=0.5, rounds=200), 2, 0)
    assert np.allclose(res.awake_mean, 2.0)                              # the dominant set is the hard pair
    with pytest.raises(ValueError, match="hard"):
        gdro.SparseQuadraticGroups(6, 2, 2, hard=(0.05, 0.4))
