"""GS-PowerOpt: the estimator against closed forms, convergence, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.optim import smoothing_baselines as sb
from rayml.optim.gs_poweropt import (
    GSPowerOptConfig,
    maximize,
    minimize,
    power_transform,
    smoothed_gradient,
    step_size,
)
from rayml.optim.test_functions import ackley, two_peak


def test_exp_power_gradient_matches_closed_form_on_a_quadratic():
    # f(x) = -|x - a|^2 / 2, f_N = exp(N f): F_N(mu) = (1 + N s^2)^(-d/2) exp(-N |mu - a|^2 / (2 (1 + N s^2)))
    # and grad F_N(mu) = -N (mu - a) / (1 + N s^2) F_N(mu).
    rng = np.random.default_rng(0)
    d, N, s = 3, 2.0, 0.7
    a, mu = np.array([0.5, -1.0, 0.2]), np.array([0.1, 0.3, -0.4])
    c = 1 + N * s * s
    F = c ** (-d / 2) * np.exp(-N * np.sum((mu - a) ** 2) / (2 * c))
    exact = -N * (mu - a) / c * F
    xi = rng.standard_normal((400_000, d))
    w = np.exp(-N * np.sum((mu + s * xi - a) ** 2, axis=1) / 2)
    est = smoothed_gradient(xi, w, s)
    se = (w[:, None] * xi).std(axis=0) / s / np.sqrt(xi.shape[0])
    assert np.all(np.abs(est - exact) < 5 * se), (est, exact, se)


def test_plain_smoothing_gradient_is_exact_for_a_quadratic_in_expectation():
    # E[f(mu + s xi)] for f = x^T A x + b^T x has gradient 2 A mu + b exactly.
    rng = np.random.default_rng(1)
    A = np.array([[2.0, 0.5], [0.5, 1.0]])
    b = np.array([1.0, -2.0])
    mu, s = np.array([0.3, -0.7]), 0.5
    xi = rng.standard_normal((400_000, 2))
    x = mu + s * xi
    f = np.einsum("ki,ij,kj->k", x, A, x) + x @ b
    f_mu = mu @ A @ mu + b @ mu
    est = smoothed_gradient(xi, f - f_mu, s)
    assert np.allclose(est, 2 * A @ mu + b, atol=0.03)


def test_power_transforms_are_positive_rescalings_of_f_N():
    v = np.array([0.2, 1.5, 0.9])
    w = power_transform(v, 3.0, "exp")
    assert np.allclose(w / w[0], np.exp(3.0 * v) / np.exp(3.0 * v[0]))
    assert w.max() == 1.0
    w = power_transform(v, 2.0, "power")
    assert np.allclose(w / w[0], v**2 / v[0] ** 2)
    with pytest.raises(ValueError, match="f > 0"):
        power_transform(np.array([1.0, -0.1]), 2.0, "power")
    # no overflow for values that would overflow exp(N f) directly
    assert np.all(np.isfinite(power_transform(np.array([1e4, 1e4 - 1]), 10.0, "exp")))


def test_step_size_schedule():
    assert step_size(0, 0.1, 1000) == pytest.approx(0.1)
    assert step_size(1000, 0.1, 1000) == pytest.approx(0.05)


def test_converges_to_the_global_optimum_of_ackley():
    cfg = GSPowerOptConfig(sigma=1.0, power=20.0, samples=50, lr=0.1, iterations=400)
    for seed in range(4):
        u = np.random.default_rng(seed).standard_normal(2)
        res = minimize(ackley, 3.0 * u / np.linalg.norm(u), cfg, seed=seed)
        assert np.max(np.abs(res.x)) < 0.25, res.x  # the global basin, not a lattice local minimum
        assert res.evals == 400 * 51 + 1
        assert res.history.shape == (401,)


def test_power_transform_finds_the_narrow_global_peak_that_plain_smoothing_misses():
    # From the origin, plain Gaussian smoothing (and the homotopy) at sigma = 0.3 climbs into the
    # wide local well at +0.5; with N = 60 the maximiser of F_N sits at the narrow global well.
    from rayml.optim._zeroth_order import Negated

    start, f = np.zeros(2), Negated(two_peak)
    sc = sb.SmoothingConfig(sigma=0.3, samples=200, lr=0.05, iterations=400)
    cfg = GSPowerOptConfig(sigma=0.3, power=60.0, samples=200, lr=0.05, iterations=400)
    near = lambda x, c: np.linalg.norm(x - c) < 0.2  # noqa: E731
    plain = [sb.gaussian_smoothing(f, start, sc, seed=s).x for s in range(4)]
    power = [maximize(f, start, cfg, seed=s).x for s in range(4)]
    assert all(near(x, 0.5) for x in plain)
    assert sum(near(x, -0.5) for x in power) >= 3


def test_same_seed_same_result_and_minimize_mirrors_maximize():
    cfg = GSPowerOptConfig(iterations=30, samples=8)
    r1 = minimize(ackley, np.ones(3), cfg, seed=7)
    r2 = maximize(lambda x: -ackley(x), np.ones(3), cfg, seed=7)
    assert np.array_equal(r1.x, r2.x)
    assert r1.fun == pytest.approx(-r2.fun)


def test_best_iterate_is_the_iterate_with_the_highest_value_for_every_method():
    f = lambda x: -ackley(x)  # noqa: E731
    x0 = np.full(2, 2.0)
    sc = sb.SmoothingConfig(samples=10, iterations=40)
    runs = [maximize(f, x0, GSPowerOptConfig(samples=10, iterations=40), seed=3),
            *(fn(f, x0, sc, seed=3) for fn in (sb.gaussian_smoothing, sb.gaussian_homotopy, sb.zo_slgh)),
            sb.cma_es(f, x0, samples=10, max_evals=300, seed=3)]
    for res in runs:
        assert res.x_best is not None and res.x_best.shape == x0.shape
        # re-evaluating the recorded best iterate gives the best value of the history
        assert f(res.x_best) == pytest.approx(res.history.max())
        assert res.history.max() >= res.history[-1]


def test_max_evals_is_respected_by_every_method():
    f = lambda x: -ackley(x)  # noqa: E731
    x0 = np.ones(2)
    assert maximize(f, x0, GSPowerOptConfig(samples=10), max_evals=100).evals <= 100
    sc = sb.SmoothingConfig(samples=10)
    for fn in (sb.gaussian_smoothing, sb.gaussian_homotopy, sb.zo_slgh):
        assert fn(f, x0, sc, max_evals=100).evals <= 100
    assert sb.cma_es(f, x0, samples=10, max_evals=100).evals <= 100


def test_non_vectorised_objective_is_evaluated_row_by_row():
    res = maximize(lambda x: -float(np.sum(np.asarray(x) ** 2)), np.ones(2), GSPowerOptConfig(iterations=5, samples=4))
    assert res.evals == 5 * 5 + 1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sigma=0.0), "sigma"),
        (dict(sigma=-1.0), "sigma"),
        (dict(power=0), "power"),
        (dict(power=float("nan")), "power"),
        (dict(samples=0), "samples"),
        (dict(samples=2.5), "samples"),
        (dict(iterations=0), "iterations"),
        (dict(transform="log"), "transform"),
        (dict(lr=-0.1), "lr"),
    ],
)
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GSPowerOptConfig(**kwargs)


def test_bad_inputs_are_rejected():
    f = lambda x: -np.sum(x**2, axis=-1)  # noqa: E731
    with pytest.raises(ValueError, match="x0"):
        maximize(f, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="x0"):
        maximize(f, [])
    with pytest.raises(ValueError, match="x0"):
        maximize(f, [np.nan, 1.0])
    with pytest.raises(ValueError, match="non-finite"):
        maximize(lambda x: np.full(len(x), np.inf), np.zeros(2), GSPowerOptConfig(iterations=2, samples=3))
    with pytest.raises(ValueError, match="values for"):
        maximize(lambda x: np.zeros(2), np.zeros(2), GSPowerOptConfig(iterations=2, samples=3),
                 evaluator=lambda pts: np.zeros(2))
    with pytest.raises(ValueError, match="f > 0"):
        maximize(lambda x: -np.ones(len(x)), np.zeros(2), GSPowerOptConfig(transform="power", iterations=2))
    with pytest.raises(ValueError, match="max_evals"):
        maximize(f, np.zeros(2), max_evals=0)
    with pytest.raises(ValueError, match="sigma_min"):
        sb.SmoothingConfig(sigma=0.1, sigma_min=0.5)


def test_ray_batch_evaluator_gives_the_serial_result(ray_session):
    from rayml import runtime

    cfg = GSPowerOptConfig(iterations=10, samples=9)
    f = lambda x: -ackley(x)  # noqa: E731
    serial = maximize(f, np.ones(4), cfg, seed=3)
    before = runtime.stats()["tasks"]
    ev = runtime.batch_evaluator(f, blocks=2)
    ray_res = maximize(f, np.ones(4), cfg, seed=3, evaluator=ev)
    assert np.array_equal(serial.x, ray_res.x)
    assert runtime.stats()["tasks"] - before == 2 * 10 + 1  # 2 blocks per iteration, 1 final


def test_the_pages_python_example_runs_on_a_users_own_function():
    """The runnable example of docs/methods/gs-poweropt.md (its first ```python block): GS-PowerOpt
    on a user's function with a narrow global well finds it where the plain transform (N = 1) does not."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "methods" / "gs-poweropt.md").read_text()
    block = re.search(r"```python\n(.*?)```", page, re.S)
    assert block, "the page has a runnable ```python example"
    exec(compile(block.group(1), "gs-poweropt.md", "exec"), {"__name__": "page_example"})
