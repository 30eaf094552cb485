"""rayml.merging.irt: the 2PL fit recovers known item parameters from simulated responses; abilities,
the merged-ability combination and the mp-IRT / gmp-IRT estimators against their definitions."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.llm import irt


def simulate(M, N, D, seed):
    rng = np.random.default_rng(seed)
    A = rng.uniform(0.5, 2.0, (N, D))
    b = rng.normal(0.0, 1.0, N)
    theta = rng.normal(0.0, 1.0, (M, D))
    Y = (rng.random((M, N)) < irt.prob(theta, A, b)).astype(float)
    return A, b, theta, Y


def test_prob_is_the_2pl():
    A, b, theta = np.array([[1.0, 2.0]]), np.array([0.5]), np.array([0.3, -0.1])
    assert np.isclose(irt.prob(theta, A, b)[0], 1 / (1 + np.exp(-(0.3 - 0.2 - 0.5))))


def test_fit_recovers_known_item_parameters():
    A, b, theta, Y = simulate(400, 40, 1, seed=0)
    fit = irt.fit_irt(Y, dims=1, seed=0)
    sign = np.sign(np.corrcoef(fit.theta[:, 0], theta[:, 0])[0, 1])  # D=1: identified up to a sign
    assert np.corrcoef(fit.b, b)[0, 1] > 0.97
    assert np.corrcoef(sign * fit.A[:, 0], A[:, 0])[0, 1] > 0.85
    assert np.mean(np.abs(fit.b - b)) < 0.3
    assert np.mean(np.abs(sign * fit.A[:, 0] - A[:, 0])) < 0.3
    # abilities rest on 40 answers each, so the fitted probabilities carry their noise
    assert np.mean(np.abs(irt.prob(fit.theta, fit.A, fit.b) - irt.prob(theta, A, b))) < 0.07


def test_fit_is_deterministic_and_multidimensional():
    A, b, theta, Y = simulate(200, 30, 2, seed=1)
    f1, f2 = irt.fit_irt(Y, dims=2, seed=5), irt.fit_irt(Y, dims=2, seed=5)
    assert np.array_equal(f1.A, f2.A) and f1.A.shape == (30, 2) and f1.theta.shape == (200, 2)
    P_fit, P_true = irt.prob(f1.theta, f1.A, f1.b), irt.prob(theta, A, b)
    assert np.corrcoef(P_fit.ravel(), P_true.ravel())[0, 1] > 0.9


def test_ability_mle_with_items_fixed():
    rng = np.random.default_rng(2)
    A, b = rng.uniform(0.5, 2.0, (3000, 2)), rng.normal(0, 1, 3000)
    true = np.array([0.7, -0.4])
    y = (rng.random(3000) < irt.prob(true, A, b)).astype(float)
    assert np.max(np.abs(irt.fit_ability(y, A, b) - true)) < 0.15


def test_merged_ability_is_a_combination_of_endpoint_abilities():
    rng = np.random.default_rng(3)
    A, b = rng.uniform(0.5, 2.0, (4000, 2)), rng.normal(0, 1, 4000)
    t1, t2 = np.array([1.5, -1.0]), np.array([-0.5, 1.2])
    y = (rng.random(4000) < irt.prob(0.3 * t1 + 0.7 * t2, A, b)).astype(float)
    lam = irt.fit_lambda(y, A, b, np.arange(4000), [t1, t2])
    assert np.allclose(lam, [0.3, 0.7], atol=0.06)
    assert np.allclose(irt.merged_ability(y, A, b, np.arange(4000), [t1, t2]), lam @ np.stack([t1, t2]))


def test_mp_irt_and_gmp_irt_follow_their_definitions():
    rng = np.random.default_rng(4)
    A, b = rng.uniform(0.5, 2.0, (50, 2)), rng.normal(0, 1, 50)
    thetas = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    items = np.array([3, 7, 11, 20, 31])
    y = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    theta = irt.merged_ability(y, A, b, items, thetas)
    unseen = np.setdiff1d(np.arange(50), items)
    want = 5 / 50 * y.mean() + 45 / 50 * irt.prob(theta, A[unseen], b[unseen]).mean()
    assert np.isclose(irt.mp_irt(y, A, b, items, thetas), want)
    assert np.isclose(irt.gmp_irt(y, A, b, items, thetas), 0.5 * y.mean() + 0.5 * want)
    est = irt.estimates(y, A, b, items, thetas)
    assert np.isclose(est["mean"], y.mean()) and np.isclose(est["mp_irt"], want)
    # restricted to a group of items (one task): lambda = n / N_group
    group = np.arange(0, 25)
    g_items = items[items < 25]
    yg = y[:g_items.size]
    theta_g = irt.merged_ability(yg, A, b, g_items, thetas)
    rest = np.setdiff1d(group, g_items)
    want_g = g_items.size / 25 * yg.mean() + (1 - g_items.size / 25) * irt.prob(theta_g, A[rest], b[rest]).mean()
    assert np.isclose(irt.mp_irt(yg, A, b, g_items, thetas, population=group), want_g)
    # every item seen: the estimate is the observed accuracy
    yall = (rng.random(50) < 0.5).astype(float)
    assert np.isclose(irt.mp_irt(yall, A, b, np.arange(50), thetas), yall.mean())


def test_mp_irt_beats_the_plain_mean_on_simulated_merges():
    A, b, _, _ = simulate(1, 300, 2, seed=5)
    rng = np.random.default_rng(6)
    t1, t2 = np.array([1.0, -0.5]), np.array([-0.5, 1.0])
    err_mp, err_mean = [], []
    for _ in range(60):
        lam = rng.uniform(0, 1)
        y = (rng.random(300) < irt.prob(lam * t1 + (1 - lam) * t2, A, b)).astype(float)
        items = rng.choice(300, 10, replace=False)
        est = irt.estimates(y[items], A, b, items, [t1, t2])
        err_mp.append(abs(est["mp_irt"] - y.mean()))
        err_mean.append(abs(est["mean"] - y.mean()))
    assert np.mean(err_mp) < np.mean(err_mean)


def test_bad_input():
    with pytest.raises(ValueError, match="Y must"):
        irt.fit_irt(np.array([[0.0, 2.0]]))
    with pytest.raises(ValueError, match="dims"):
        irt.fit_irt(np.zeros((3, 4)), dims=0)
    with pytest.raises(ValueError, match="prior_theta"):
        irt.fit_irt(np.zeros((3, 4)), prior_theta=0)
    A, b = np.ones((5, 1)), np.zeros(5)
    with pytest.raises(ValueError, match="y must"):
        irt.fit_ability([1.0, 0.0], A, b, items=[0, 1, 2])
    with pytest.raises(ValueError, match="items"):
        irt.fit_ability([1.0], A, b, items=[7])
    with pytest.raises(ValueError, match="delta"):
        irt.estimates([1.0], A, b, [0], [np.ones(1), np.zeros(1)], delta=2.0)


def test_clipped_ability_fit_is_finite_and_only_a_guard():
    rng = np.random.default_rng(7)
    A, b = rng.uniform(0.5, 2.0, (80, 2)), rng.normal(0, 1, 80)
    for y in (np.zeros(80), np.ones(80)):  # no finite MLE exists: the fit must still end finite
        t = irt.fit_ability(y, A, b)
        assert np.all(np.isfinite(t)) and np.all(np.abs(A @ t - b) < 1e3)
    y = (rng.random(80) < irt.prob(np.array([0.5, -0.2]), A, b)).astype(float)
    # where no logit reaches +-30 the clip changes nothing
    assert np.allclose(irt.fit_ability(y, A, b), irt.fit_ability(y, A, b, clip=None))
    # started where every logit is past -30, the clipped objective is flat: the fit stays put
    far = np.array([-100.0, -100.0])
    assert np.allclose(irt.fit_ability(np.zeros(80), A, b, theta0=far), far)


def test_ability_prior_is_the_map_estimate():
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(8)
    A, b = rng.uniform(0.5, 2.0, (30, 1)), rng.normal(0, 1, 30)
    y = (rng.random(30) < irt.prob(np.array([1.0]), A, b)).astype(float)
    got = irt.fit_ability(y, A, b, clip=None, prior_sd=0.5)[0]

    def neg_log_post(t):  # independent float64 re-derivation of the MAP objective
        z = A[:, 0] * t - b
        return float(np.sum(np.log1p(np.exp(z)) - y * z) + t * t / (2 * 0.25))

    want = minimize_scalar(neg_log_post, bounds=(-10, 10), method="bounded", options={"xatol": 1e-9}).x
    assert abs(got - want) < 1e-4
    assert abs(got) < abs(irt.fit_ability(y, A, b, clip=None)[0])  # shrunk towards 0


def test_save_and_load_prefitted_item_parameters(tmp_path):
    A, b, theta, Y = simulate(30, 12, 2, seed=9)
    fit = irt.fit_irt(Y, dims=2, seed=0)
    irt.save_fit(fit, tmp_path / "items.npz")
    back = irt.load_fit(tmp_path / "items.npz")
    assert np.array_equal(back.A, fit.A) and np.array_equal(back.b, fit.b) and back.nll == fit.nll
    np.savez(tmp_path / "bad.npz", A=np.ones(3), b=np.ones(3), theta=np.ones(3), nll=np.array(0.0))
    with pytest.raises(ValueError, match="A must"):
        irt.load_fit(tmp_path / "bad.npz")


def test_regularisation_bad_input():
    A, b = np.ones((5, 1)), np.zeros(5)
    with pytest.raises(ValueError, match="clip"):
        irt.fit_ability(np.ones(5), A, b, clip=0.0)
    with pytest.raises(ValueError, match="prior_sd"):
        irt.fit_ability(np.ones(5), A, b, prior_sd=-1.0)
    with pytest.raises(ValueError, match="clip"):
        irt.fit_lambda(np.ones(5), A, b, np.arange(5), [np.ones(1)], clip=-3.0)
