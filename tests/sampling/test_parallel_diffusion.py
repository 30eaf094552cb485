"""Diffusion-model samplers (Algorithm 2 as described): exact laws, fixed point, rounds, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayml.sampling import diffusion as sd
from rayml.sampling.parallel import SamplerState

V = np.array([0.5, 1.0, 1.6])
MU = np.array([1.0, -2.0, 0.5])


def _y0(chains, seed=2):
    return np.random.default_rng(seed).standard_normal((chains, V.size))


def test_gaussian_score_matches_a_finite_difference_of_the_ou_marginal_log_density():
    t, x = np.array([0.7]), np.array([[0.3, -1.0, 2.0]])
    vt = V * math.exp(-0.7) + 1 - math.exp(-0.7)
    mt = MU * math.exp(-0.35)

    def logq(z):
        return -0.5 * np.sum((z - mt) ** 2 / vt)

    fd = np.array([(logq(x[0] + 1e-6 * e) - logq(x[0] - 1e-6 * e)) / 2e-6 for e in np.eye(3)])
    np.testing.assert_allclose(sd.gaussian_score(V, MU)(t, x)[0], fd, rtol=1e-6)


def test_grid_shrinks_towards_the_data_end_and_stops_early():
    g = sd.diffusion_grid(sd.DiffusionConfig(slices=3, grid=4, slice_length=0.5, early_stop=1e-3))
    assert g[0, 0] == pytest.approx(1.5) and g[-1, -1] == pytest.approx(1e-3)
    np.testing.assert_allclose(g[:-1, -1], g[1:, 0])                 # slices meet
    steps = -np.diff(g, axis=1)
    np.testing.assert_allclose(steps[:-1], 0.125)                     # uniform slices
    assert np.all(np.diff(steps[-1]) < 0)                             # shrinking last slice


def test_all_samplers_converge_to_the_sequential_integrator_on_the_same_path():
    cfg = sd.DiffusionConfig(slices=4, grid=5, depth=4 + 14, sweeps=12)
    score = sd.gaussian_score(V, MU)
    y0 = _y0(6)
    seq, _ = sd.sequential_diffusion(score, cfg).step(5, SamplerState(y0))
    par, _ = sd.parallel_diffusion(score, cfg).step(5, SamplerState(y0))
    sli, _ = sd.picard_diffusion(score, cfg).step(5, SamplerState(y0))
    np.testing.assert_allclose(par.position, seq.position, atol=1e-9)
    np.testing.assert_allclose(sli.position, seq.position, atol=1e-9)
    few, _ = sd.parallel_diffusion(score, sd.DiffusionConfig(slices=4, grid=5, depth=2)).step(5, SamplerState(y0))
    assert np.max(np.abs(few.position - seq.position)) > 1e-3        # not vacuous


def test_exact_laws_agree_with_the_closed_form_sequential_recursion():
    cfg = sd.DiffusionConfig(slices=3, grid=4, depth=3, sweeps=2)
    mean, var = sd.sequential_gaussian_law(V, cfg, data_mean=MU)
    m2, v2 = sd.exact_output_law("sequential", V, cfg, data_mean=MU)
    np.testing.assert_allclose(m2, mean, rtol=1e-10)
    np.testing.assert_allclose(v2, var, rtol=1e-10)
    laws = sd.exact_output_law("parallel", V, cfg, data_mean=MU, depths=True)
    np.testing.assert_allclose(laws[3][1], sd.exact_output_law("parallel", V, cfg, data_mean=MU)[1])
    assert sorted(laws) == [0, 1, 2, 3]


@pytest.mark.parametrize("kind", ["parallel", "slices"])
def test_sample_moments_match_the_exact_law_within_monte_carlo_error(kind):
    C = 20000
    cfg = sd.DiffusionConfig(slices=3, grid=4, depth=2, sweeps=2)   # truncated: not the fixed point
    build = sd.parallel_diffusion if kind == "parallel" else sd.picard_diffusion
    state, _ = build(sd.gaussian_score(V, MU), cfg).step(11, SamplerState(_y0(C, 4)))
    mean, var = sd.exact_output_law(kind, V, cfg, data_mean=MU)
    x = state.position
    np.testing.assert_array_less(np.abs(x.mean(0) - mean), 5 * np.sqrt(var / C))
    np.testing.assert_array_less(np.abs(x.var(0) / var - 1), 5 * np.sqrt(2 / C))


def test_converged_sampler_reaches_the_data_law_up_to_discretisation():
    # the samplers' common fixed point (previous tests) on a long horizon and a fine grid
    cfg = sd.DiffusionConfig(slices=16, grid=64, slice_length=0.5)
    mean, var = sd.sequential_gaussian_law(V, cfg, data_mean=MU)
    np.testing.assert_allclose(mean, MU, atol=0.03)
    np.testing.assert_allclose(var, V, rtol=0.05)


def test_rounds_and_queries_are_counted():
    cfg = sd.DiffusionConfig(slices=4, grid=3, depth=5, sweeps=2)
    score, y0 = sd.gaussian_score(V), _y0(2)
    _, info = sd.parallel_diffusion(score, cfg).step(0, SamplerState(y0))
    assert info.rounds == 4 + (4 + 5 - 1)                             # Theorem 5.4: 2N + J
    # queries: N initial (one per chain), then per diagonal (active slices) * M per chain
    active = sum(len(range(max(0, k - 5), min(3, k - 1) + 1)) for k in range(1, 4 + 5))
    assert info.grad_queries == 2 * (4 + active * 3)
    _, info = sd.picard_diffusion(score, cfg).step(0, SamplerState(y0))
    assert info.rounds == 4 * 2 and info.max_batch == 2 * 3
    _, info = sd.sequential_diffusion(score, cfg).step(0, SamplerState(y0))
    assert info.rounds == 4 * 3 and info.max_batch == 2


def test_seeded_runs_are_reproducible():
    algo = sd.parallel_diffusion(sd.gaussian_score(V), sd.DiffusionConfig(slices=3, grid=3, depth=3))
    a, _ = algo.step(1, SamplerState(_y0(3)))
    b, _ = algo.step(1, SamplerState(_y0(3)))
    c, _ = algo.step(2, SamplerState(_y0(3)))
    np.testing.assert_array_equal(a.position, b.position)
    assert not np.array_equal(a.position, c.position)


def test_bad_input_is_rejected_clearly():
    with pytest.raises(ValueError, match="slice_length"):
        sd.DiffusionConfig(slices=2, grid=2, slice_length=0.0)
    with pytest.raises(ValueError, match="early_stop"):
        sd.DiffusionConfig(slices=2, grid=2, slice_length=0.5, early_stop=0.5)
    with pytest.raises(ValueError, match="grid"):
        sd.DiffusionConfig(slices=2, grid=0)
    cfg = sd.DiffusionConfig(slices=2, grid=2, depth=2)
    with pytest.raises(FloatingPointError, match="non-finite"):
        sd.parallel_diffusion(lambda t, x: x * np.nan, cfg).step(0, SamplerState(_y0(2)))
    with pytest.raises(ValueError, match="shape"):
        sd.parallel_diffusion(lambda t, x: x[:, :1], cfg).step(0, SamplerState(_y0(2)))
    with pytest.raises(ValueError, match="dim=5"):
        sd.parallel_diffusion(sd.gaussian_score(V), cfg, dim=5).init(_y0(2))
    with pytest.raises(ValueError, match="method"):
        sd.exact_output_law("euler", V, cfg)
