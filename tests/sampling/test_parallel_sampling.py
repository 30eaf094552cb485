"""Parallel Picard sampling: fixed point, exact laws against Monte Carlo, round counts, Ray, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.sampling import gaussian_exact as ge
from rayml.sampling.parallel import (
    ParallelPicardConfig,
    PicardConfig,
    RandomizedMidpointConfig,
    SamplerState,
    TorchGradient,
    ULAConfig,
    fine_grid_euler,
    parallel_picard,
    picard_slices,
    randomized_midpoint,
    theorem_schedule,
    ula,
)

LAM = np.array([0.3, 1.0, 2.0])


def gauss_grad(x):
    return -x * LAM


def _start(chains, v0=0.5, seed=3):
    return np.sqrt(v0) * np.random.default_rng(seed).standard_normal((chains, LAM.size))


def test_both_picard_schemes_converge_to_fine_grid_euler_on_the_same_path():
    # The fixed point of every slice's Picard map is Euler-Maruyama with step h/M (same Brownian path).
    x0 = _start(5)
    ref = fine_grid_euler(gauss_grad, x0, 7, slice_length=0.6, slices=5, grid=6)
    ours, _ = parallel_picard(gauss_grad, ParallelPicardConfig(0.6, 5, 6, 40, 2)).step(7, SamplerState(x0))
    acv, _ = picard_slices(gauss_grad, PicardConfig(0.6, 5, 6, 14)).step(7, SamplerState(x0))
    np.testing.assert_allclose(ours.position, ref, atol=1e-12)
    np.testing.assert_allclose(acv.position, ref, atol=1e-12)


def test_picard_truncation_differs_from_the_fixed_point():
    # Few iterations must not equal the converged path (the test above is not vacuous).
    x0 = _start(5)
    ref = fine_grid_euler(gauss_grad, x0, 7, slice_length=0.6, slices=5, grid=6)
    ours, _ = parallel_picard(gauss_grad, ParallelPicardConfig(0.6, 5, 6, 2, 1)).step(7, SamplerState(x0))
    assert np.max(np.abs(ours.position - ref)) > 1e-3


@pytest.mark.parametrize("kind", ["ours", "acv", "ula", "midpoint"])
def test_sample_moments_match_the_exact_law_within_monte_carlo_error(kind):
    C, v0 = 20000, 0.5
    x0 = _start(C, v0)
    h, N, M = 0.8, 4, 3
    if kind == "ours":
        state, _ = parallel_picard(gauss_grad, ParallelPicardConfig(h, N, M, 3, 2)).step(1, SamplerState(x0))
        A, E = ge.wavefront_tables(LAM, h, M, 2, N, 3)
        exact = ge.wavefront_variance(A, E, v0)[N - 1, 3]
    elif kind == "acv":
        state, _ = picard_slices(gauss_grad, PicardConfig(h, N, M, 2)).step(1, SamplerState(x0))
        a, e = ge.picard_slice_map(LAM, h, M, 2)
        exact = np.full(3, v0)
        for _ in range(N):
            exact = a * a * exact + e
    elif kind == "ula":
        state, _ = ula(gauss_grad, ULAConfig(0.3, 7)).step(1, SamplerState(x0))
        exact = ge.ula_variance(LAM, v0, 0.3, 7)
    else:
        state, _ = randomized_midpoint(gauss_grad, RandomizedMidpointConfig(0.6, 7)).step(1, SamplerState(x0))
        exact = ge.midpoint_second_moment(LAM, v0, 0.6, 7)
    x = state.position
    m2 = np.mean(x**2, axis=0)
    se_m2 = np.std(x**2, axis=0) / np.sqrt(C)
    assert np.all(np.abs(m2 - exact) < 5 * se_m2), (m2, exact)
    assert np.all(np.abs(x.mean(0)) < 5 * np.sqrt(exact / C))
    # off-diagonal covariance is zero for the independent coordinates
    cov = np.cov(x.T)
    assert np.all(np.abs(cov[np.triu_indices(3, 1)]) < 5 * np.sqrt(np.outer(exact, exact)[np.triu_indices(3, 1)] / C))


def test_converged_sampler_is_close_to_the_target_with_the_euler_bias():
    # Long horizon, converged Picard: the covariance is Euler's stationary 1/(lam (1 - eta lam / 2)).
    C = 8000
    state, _ = parallel_picard(gauss_grad, ParallelPicardConfig(1.0, 10, 4, 20, 2)).step(2, SamplerState(_start(C)))
    var = state.position.var(0)
    expected = ge.fine_grid_stationary_variance(LAM, 0.25)
    se = expected * np.sqrt(2 / C)
    assert np.all(np.abs(var - expected) < 5 * se)
    # and within the Euler bias bound of the target's variance 1 / lam
    assert np.all(np.abs(var - 1 / LAM) < np.abs(expected - 1 / LAM) + 5 * se)


def test_wavefront_table_matches_a_brute_force_forward_mode():
    # Independent reference: track coefficients on x0 and on ALL slices' noise (no shift invariance).
    lam, h, M, N, J, P, v0 = np.array([0.7]), 0.9, 3, 3, 4, 2, 0.4
    dt = h / M
    nz = N * M

    def inject(n):
        out = np.zeros((M + 1, 1 + nz))
        for m in range(1, M + 1):
            out[m, 1 + n * M: 1 + n * M + m] = np.sqrt(2 * dt)
        return out

    x0 = np.zeros(1 + nz)
    x0[0] = 1.0
    grid = np.zeros((N, M + 1, 1 + nz))
    start = x0
    for n in range(N):
        grid[n] = start + np.arange(M + 1)[:, None] * dt * (-lam[0] * start) + inject(n)
        start = grid[n, M]
    for k in range(1, N + J):
        new = {}
        for n in range(max(0, k - J), min(N - 1, k - 1) + 1):
            a = x0 if n == 0 else grid[n - 1, M]
            y = grid[n].copy()
            y[0] = a
            for _ in range(P):
                y = np.vstack([a, a + dt * np.cumsum(-lam[0] * y[:M], axis=0) + inject(n)[1:]])
            new[n] = y
        for n, y in new.items():
            grid[n] = y
    brute = grid[N - 1, M, 0] ** 2 * v0 + np.sum(grid[N - 1, M, 1:] ** 2)
    A, E = ge.wavefront_tables(lam, h, M, P, N, J)
    assert np.isclose(ge.wavefront_variance(A, E, v0)[N - 1, J, 0], brute)


def test_rounds_and_queries_are_counted():
    x0 = _start(3)
    cfg = ParallelPicardConfig(0.5, 4, 5, 6, 3)
    calls = []

    def counting(points):
        calls.append(points.shape[0])
        return gauss_grad(points)

    _, info = parallel_picard(counting, cfg).step(0, SamplerState(x0))
    assert info.rounds == len(calls) == 4 + 3 * (4 + 6 - 1) == cfg.rounds
    assert info.grad_queries == sum(calls)
    # N initial rounds of one query per chain, then P sweeps per diagonal of M queries per active slice
    active = [min(3, k - 1) - max(0, k - 6) + 1 for k in range(1, 4 + 6)]
    assert info.grad_queries == 4 * 3 + sum(3 * a * 5 * 3 for a in active)
    assert info.max_batch == max(active) * 5 * 3 <= 4 * 5 * 3
    _, info = picard_slices(gauss_grad, PicardConfig(0.5, 4, 5, 3)).step(0, SamplerState(x0))
    assert (info.rounds, info.grad_queries) == (12, 12 * 5 * 3)
    _, info = ula(gauss_grad, ULAConfig(0.1, 9)).step(0, SamplerState(x0))
    assert (info.rounds, info.grad_queries) == (9, 27)
    _, info = randomized_midpoint(gauss_grad, RandomizedMidpointConfig(0.1, 9)).step(0, SamplerState(x0))
    assert (info.rounds, info.grad_queries) == (18, 54)


def test_seeded_runs_are_reproducible_and_seeds_matter():
    algo = parallel_picard(gauss_grad, ParallelPicardConfig(0.5, 3, 4, 4, 1))
    a, _ = algo.step(11, algo.init(_start(4)))
    b, _ = algo.step(11, algo.init(_start(4)))
    c, _ = algo.step(12, algo.init(_start(4)))
    assert np.array_equal(a.position, b.position)
    assert not np.array_equal(a.position, c.position)


def test_torch_gradient_matches_the_analytic_gradient():
    import torch

    grad = TorchGradient(lambda x: -0.5 * (x**2 * torch.tensor(LAM)).sum(dim=1))
    x = _start(6)
    np.testing.assert_allclose(grad(x), gauss_grad(x), atol=1e-12)


def test_theorem_schedule_follows_corollary_4_3():
    cfg = theorem_schedule(alpha=0.5, beta=1.0, dim=100, eps=0.5)
    kappa, kl0 = 2.0, 50 * np.log(2.0)
    assert cfg.slice_length == pytest.approx(0.1)
    assert cfg.grid == int(np.ceil(kappa * 100 / 0.25))
    assert cfg.slices == int(np.ceil(10 * kappa * np.log(kl0 / 0.25)))
    assert cfg.inner == int(np.ceil(2 * np.log(kappa**3) + 4))
    assert cfg.depth > cfg.slices


def test_acv_schedule_and_prescribed_rounds():
    from rayml.sampling.parallel import acv_theorem_schedule, theorem_rounds

    acv = acv_theorem_schedule(alpha=0.5, beta=1.0, dim=100, eps=0.5)
    ours = theorem_schedule(alpha=0.5, beta=1.0, dim=100, eps=0.5)
    assert acv.grid == int(np.ceil(7 * 2.0 * 100 / 0.25)) and acv.slices == ours.slices
    assert acv.sweeps == int(np.ceil(2 + np.log(acv.grid)))
    r = theorem_rounds(0.5, 1.0, 100, 0.5)
    assert r["ours"] == ours.slices + ours.inner * (ours.slices + ours.depth - 1)
    assert r["acv"] == acv.slices * acv.sweeps
    # the prescribed ratio ours / ACV falls with d (O(log d) against O(log^2 d))
    ratios = [theorem_rounds(0.5, 1.0, 10**e, 0.5)["ours"] / theorem_rounds(0.5, 1.0, 10**e, 0.5)["acv"]
              for e in (1, 5, 10, 20)]
    assert all(b < a for a, b in zip(ratios, ratios[1:]))


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="slice_length"):
        ParallelPicardConfig(0.0, 2, 2, 2)
    with pytest.raises(ValueError, match="step_size"):
        ULAConfig(-0.1, 3)
    with pytest.raises(ValueError, match="depth"):
        ParallelPicardConfig(0.5, 2, 2, 0)
    algo = parallel_picard(gauss_grad, ParallelPicardConfig(0.5, 2, 2, 2), dim=3)
    with pytest.raises(ValueError, match="dim=3"):
        algo.init(np.zeros(4))
    with pytest.raises(ValueError, match="position"):
        algo.init(np.array([0.0, np.nan, 1.0]))
    bad = parallel_picard(lambda x: x[:, :2], ParallelPicardConfig(0.5, 2, 2, 2))
    with pytest.raises(ValueError, match="shape"):
        bad.step(0, bad.init(np.zeros(3)))
    nonfinite = ula(lambda x: np.where(x > 0.5, np.inf, -x), ULAConfig(0.5, 50))
    with pytest.raises(FloatingPointError, match="non-finite"):
        nonfinite.step(0, nonfinite.init(np.zeros((4, 3))))
    with pytest.raises(ValueError, match="seed"):
        algo.step(-1, algo.init(np.zeros(3)))
    with pytest.raises(TypeError, match="config"):
        parallel_picard(gauss_grad, ULAConfig(0.1, 2))


def test_ray_rounds_give_identical_samples_for_1_and_2_workers(ray_session):
    from rayml import runtime
    from rayml.sampling.distributed import RayGradient

    x0 = _start(3)
    cfg = ParallelPicardConfig(0.5, 3, 4, 4, 1)
    local, info_local = parallel_picard(gauss_grad, cfg).step(5, SamplerState(x0))
    outs = []
    for workers in (1, 2):
        with runtime.max_workers(workers):
            algo = parallel_picard(gauss_grad, cfg, evaluator=RayGradient(gauss_grad, blocks=2))
            state, info = algo.step(5, SamplerState(x0))
        outs.append(state.position)
        assert info == info_local
    assert np.array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], local.position, atol=1e-14)


def test_rate_fit_with_an_intercept_tells_log_d_from_log2_d():
    from rayml.experiments.parallel_sampling import growth

    dims = [10, 100, 1000, 10**4, 10**5]
    L = np.log(np.array(dims, dtype=float))
    # a large constant overhead must not pass for slow growth (the fit without intercept did that)
    assert growth(dims, 200 + 5 * L)["exponent_in_log_d"] == pytest.approx(1.0, abs=0.02)
    assert growth(dims, 3 + 1.0 * L**2)["exponent_in_log_d"] == pytest.approx(2.0, abs=0.02)
    assert growth(dims, np.round(10 + 0.8 * L**2))["exponent_in_log_d"] > 1.5
    fit = growth(dims, 7 + 4 * L)
    assert fit["rss_log_d"] < fit["rss_log2_d"] and fit["intercept"] == pytest.approx(7, abs=1e-6)
    assert np.isnan(growth(dims[:2], [1, 2])["exponent_in_log_d"])


def test_ray_gradient_is_put_in_the_object_store_once(ray_session):
    from rayml.sampling.distributed import RayGradient

    rg = RayGradient(gauss_grad, blocks=2)
    x = _start(3)
    first = rg(x)
    ref = rg.grad_ref()
    second = rg(x)
    assert rg.grad_ref() is ref
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, gauss_grad(x))


def test_experiment_tiny_run_counts_rounds_in_and_out_of_the_papers_regime(tiny_record):
    # worker-count invariance is the cluster test's (tests/test_scaleout_cache.py, same shared tiny record)
    a = tiny_record("parallel-sampling")
    assert a["env"]["tasks"] >= 2
    assert {c["text"] for c in a["claims"]} and all(isinstance(c["holds"], bool) for c in a["claims"])
    rounds = a["metrics"]["rounds_by_d"]
    assert set(rounds) == {"10", "100", "1000"}
    # the paper's regime J >= N is a restriction of the free search: never fewer rounds
    regime = a["metrics"]["paper_regime"]
    for d, r in rounds.items():
        assert regime["rounds_by_d"][d] >= r
        s = regime["settings_by_d"][d]
        assert s["depth"] >= s["slices"]


def test_rounds_per_decade_separates_log_d_from_log2_d():
    from rayml.experiments.parallel_sampling import per_decade

    dims = [10, 100, 1000, 10000, 100000]
    log_d = per_decade(dims, [5 + 7 * k for k in range(1, 6)])
    log2_d = per_decade(dims, [5 + 2 * k * k for k in range(1, 6)])
    assert log_d["rounds_per_decade"] == pytest.approx(7.0)
    assert list(log_d["increase_per_decade"].values()) == pytest.approx([7.0] * 4)
    assert list(log2_d["increase_per_decade"].values()) == pytest.approx([6.0, 10.0, 14.0, 18.0])
    assert log2_d["rounds_per_decade"] == pytest.approx(12.0)
    assert np.isnan(per_decade([10], [3])["rounds_per_decade"])
