"""rayml.generative.manifold_diffusion / manifolds: closed forms, projections, equivariance, input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.generative import manifold_diffusion as md
from rayml.generative import manifolds as mf

torch.set_num_threads(1)


def _rot(n, seed):
    from scipy.stats import special_ortho_group

    return torch.as_tensor(special_ortho_group(n).rvs(random_state=seed))


# ---------------------------------------------------------------- projections: phi(psi(x)) = x


def test_torus_and_sphere_projections_invert_psi():
    x = torch.as_tensor(mf.torus_mixture(3, 50, seed=0))
    assert torch.allclose(mf.Torus(3).phi(mf.Torus(3).psi(x)), x)
    y = torch.as_tensor(mf.vmf_mixture(2, 50, seed=0))
    assert torch.allclose(mf.Sphere(2).phi(mf.Sphere(2).psi(y)), y, atol=1e-12)


def test_so_projection_inverts_psi_and_lands_on_so_n():
    m = mf.SpecialOrthogonal(4)
    u = torch.as_tensor(mf.so_mixture(4, 30, seed=1))
    x = m.from_rotations(u)
    back = m.point(m.phi(m.psi(x)))
    assert torch.allclose(back, u, atol=1e-8)
    z = m.noise(20, mf._gen(0), dtype=torch.float64)
    r = m.point(m.phi(z))
    assert torch.allclose(r @ r.transpose(-1, -2), torch.eye(4, dtype=torch.float64).expand(20, 4, 4), atol=1e-10)
    assert torch.allclose(torch.linalg.det(r), torch.ones(20, dtype=torch.float64), atol=1e-10)


def test_unitary_projection_inverts_psi_and_is_unitary():
    m = mf.Unitary(3)
    u = torch.as_tensor(mf.unitary_evolutions(3, 20, seed=2))
    assert torch.allclose(u @ u.transpose(-1, -2).conj(), torch.eye(3, dtype=u.dtype).expand(20, 3, 3), atol=1e-10)
    x = m.from_unitaries(u)
    assert torch.allclose(m.point(m.phi(m.psi(x))), u, atol=1e-8)


# ---------------------------------------------------------------- the forward process, closed form


def test_torus_forward_marginal_is_the_wrapped_normal():
    """phi of the OU transition from x0 has the wrapped-normal density N(a x0, v) mod 2 pi."""
    from scipy import stats

    sched = md.Schedule(0.1, 10.0)
    s = torch.tensor([0.3], dtype=torch.float64)
    a, v = (float(t) for t in sched.mean_var(s))
    x0 = torch.tensor([[5.5]], dtype=torch.float64)
    m = mf.Torus(1)
    zt, _, _, _ = md._forward(m, m.psi(x0.expand(20000, 1)), s.expand(20000), sched, mf._gen(3))
    xs = m.phi(zt).numpy()[:, 0]
    grid = np.linspace(0, 2 * np.pi, 2001)
    pdf = np.exp(mf.wrapped_normal_logpdf(grid[:, None], a * 5.5, v))
    from scipy.integrate import trapezoid
    assert abs(trapezoid(pdf, grid) - 1) < 1e-6
    cdf = np.concatenate([[0], np.cumsum((pdf[1:] + pdf[:-1]) / 2 * np.diff(grid))])
    ks = stats.kstest(xs, lambda q: np.interp(q, grid, cdf))
    assert ks.pvalue > 1e-3


def test_sphere_heat_kernel_integrates_to_one_and_score_matches_finite_differences():
    x0 = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    th = torch.linspace(0, math.pi, 4001, dtype=torch.float64)
    pts = torch.stack([torch.sin(th), torch.zeros_like(th), torch.cos(th)], -1)
    for t in (0.1, 0.5, 2.0):
        p = md.sphere_heat_logpdf(pts, x0, torch.full_like(th, t)).exp()
        total = float(torch.trapezoid(p * 2 * math.pi * torch.sin(th), th))
        assert abs(total - 1) < 1e-4
    x = torch.tensor([[0.6, 0.0, 0.8]], dtype=torch.float64)
    t = torch.tensor([0.3], dtype=torch.float64)
    sc = md.sphere_heat_score(x, x0, t)
    tangent = torch.tensor([[0.8, 0.0, -0.6]], dtype=torch.float64)
    eps = 1e-5
    fd = (md.sphere_heat_logpdf(md._sphere_exp(x, eps * tangent), x0, t)
          - md.sphere_heat_logpdf(md._sphere_exp(x, -eps * tangent), x0, t)) / (2 * eps)
    assert torch.allclose((sc * tangent).sum(-1), fd, rtol=1e-5)


def test_torus_heat_score_is_the_gradient_of_the_wrapped_normal_log_density():
    x = torch.tensor([[0.3, 6.0]], dtype=torch.float64)
    x0 = torch.tensor([[6.1, 0.2]], dtype=torch.float64)
    t = torch.tensor([[0.7]], dtype=torch.float64)
    sc = md.torus_heat_score(x, x0, t)
    eps = 1e-6
    for k in range(2):
        e = torch.zeros(1, 2, dtype=torch.float64)
        e[0, k] = eps
        f = lambda y: mf.wrapped_normal_logpdf(y.numpy(), x0.numpy(), 0.7)  # noqa: E731
        assert abs((f(x + e) - f(x - e))[0] / (2 * eps) - float(sc[0, k])) < 1e-6


# ---------------------------------------------------------------- Ito drift = J phi . b (finite differences)


def _drift_check(m, z, b_dict):
    """drift_target with beta = v = 1 and mean = b + z/2 gives J phi(z) . b (the first-order term)."""
    mean = {k: b_dict[k] + 0.5 * z[k] for k in z}
    one = torch.ones(1, 1, dtype=torch.float64)
    return m.drift_target(z, mean, one, one)


def test_so_drift_target_is_the_jacobian_of_the_eigenvector_map():
    m = mf.SpecialOrthogonal(4)
    g = mf._gen(5)
    z = m.noise(1, g, dtype=torch.float64)
    b = m.noise(1, g, dtype=torch.float64)
    target = _drift_check(m, z, b)
    eps = 1e-6
    zp = {k: z[k] + eps * b[k] for k in z}
    zm = {k: z[k] - eps * b[k] for k in z}
    v0, _ = m.split(m.phi(z))
    vp, wp = m.split(m.phi(zp))
    vm, wm = m.split(m.phi(zm))
    k_fd = v0.transpose(-1, -2) @ (vp - vm) / (2 * eps)
    iu = torch.triu_indices(4, 4, offset=1)
    assert torch.allclose(target[0, :6], k_fd[0, iu[0], iu[1]], atol=1e-6)
    assert torch.allclose(k_fd, -k_fd.transpose(-1, -2), atol=1e-6)
    assert torch.allclose(target[0, 6:], b["v"][0])


def test_unitary_drift_target_with_the_gauge_is_the_jacobian_of_phi():
    m = mf.Unitary(3)
    g = mf._gen(6)
    z = m.noise(1, g, dtype=torch.float64)
    b = m.noise(1, g, dtype=torch.float64)
    target = _drift_check(m, z, b)
    eps = 1e-6
    u0 = m.point(m.phi(z))
    up = m.point(m.phi({k: z[k] + eps * b[k] for k in z}))
    um = m.point(m.phi({k: z[k] - eps * b[k] for k in z}))
    k_fd = u0.transpose(-1, -2).conj() @ (up - um) / (2 * eps)
    q = m.n_cov
    upper = torch.complex(target[:, :q], target[:, q:2 * q])
    k = m._frame(upper, target[:, 2 * q:], u0)
    assert torch.allclose(k, k_fd, atol=1e-6)


def test_sphere_drift_target_is_the_tangent_jacobian():
    m = mf.Sphere(3)
    g = mf._gen(7)
    z, b = m.noise(1, g, dtype=torch.float64), m.noise(1, g, dtype=torch.float64)
    target = _drift_check(m, z, b)
    eps = 1e-6
    fd = (m.phi({"v": z["v"] + eps * b["v"]}) - m.phi({"v": z["v"] - eps * b["v"]})) / (2 * eps)
    assert torch.allclose(target, fd, atol=1e-8)


def test_gap_statistic_gives_the_eigenvector_covariance():
    """The frame noise u_j^T dA u_i / gap has variance 1/gap^2 (GOE normalisation of the noise)."""
    m = mf.SpecialOrthogonal(3)
    g = mf._gen(8)
    z = m.noise(1, g, dtype=torch.float64)
    gaps = m.cov_target(z)[0]
    lam, vec = mf.sorted_eigh(z["A"])
    noise = m.noise(40000, g, dtype=torch.float64)["A"]
    proj = vec.transpose(-1, -2) @ noise @ vec
    iu = torch.triu_indices(3, 3, offset=1)
    var = proj[:, iu[0], iu[1]].var(0)
    assert torch.allclose(var, torch.ones(3, dtype=torch.float64), atol=0.03)
    assert torch.all(gaps > 0)


# ---------------------------------------------------------------- exact equivariance of the samplers


def test_sphere_sampler_is_rotation_equivariant():
    """With the rotated model f_Q(y) = Q f(Q^T y) and the rotated noise, the step maps Q x to Q step(x)."""
    m = mf.Sphere(2)
    q = _rot(3, 1)
    x = torch.as_tensor(mf.vmf_mixture(2, 16, seed=3))
    f = torch.randn(16, 3, dtype=torch.float64)                      # any model output at x
    cov = torch.full((16, 1), 0.8, dtype=torch.float64)
    beta, h = torch.tensor(2.0, dtype=torch.float64), 0.01
    a = m.step(x, f, cov, beta, h, mf._gen(9))
    xi = torch.randn(x.shape, generator=mf._gen(9), dtype=x.dtype)   # the draw m.step made
    xr, fr = m.act(q, x), f @ q.T                                    # f_Q(Q x) = Q f(x)
    y = xr + m.tangent(xr, fr * h + torch.sqrt(beta * h * cov) * (xi @ q.T))
    assert torch.allclose(y / y.norm(dim=-1, keepdim=True), m.act(q, a), atol=1e-12)


def test_torus_sampler_commutes_with_translations():
    m = mf.Torus(3)
    x = torch.as_tensor(mf.torus_mixture(3, 10, seed=4), dtype=torch.float64)
    c = torch.tensor([1.0, 2.5, 4.0], dtype=torch.float64)
    drift = torch.randn(10, 3, dtype=torch.float64)
    a = m.step(x, drift, None, torch.tensor(1.0, dtype=torch.float64), 0.01, mf._gen(1))
    b = m.step(m.act(c, x), drift, None, torch.tensor(1.0, dtype=torch.float64), 0.01, mf._gen(1))
    diff = torch.remainder(b - m.act(c, a) + math.pi, 2 * math.pi) - math.pi
    assert diff.abs().max() < 1e-10


def test_so_sampler_is_left_equivariant():
    """The frame step V exp(K h) commutes with V -> Q V: the frame drift of canon(Q V) = Q V S is
    S K S, and the step lands on canon(Q step(V)). (Drift only: the frame noise law is invariant.)"""
    m = mf.SpecialOrthogonal(4)
    u = torch.as_tensor(mf.so_mixture(4, 8, seed=5))
    x = m.from_rotations(u)
    v, w = m.split(x)
    q = _rot(4, 2)
    vq = mf.canonical_sign(q @ v)
    xq = m.join(vq, w)
    sgn = torch.where((q @ v)[:, 0, :] < 0, -1.0, 1.0).double()      # canon(Q V) = Q V diag(sgn)
    k = torch.randn(8, m.dim, dtype=torch.float64)
    iu = torch.triu_indices(4, 4, offset=1)
    kq = k * sgn[:, iu[0]] * sgn[:, iu[1]]
    dw = torch.randn(8, 3, dtype=torch.float64)
    gaps = torch.full((8, m.n_cov), 0.7, dtype=torch.float64)
    zero = torch.tensor(0.0, dtype=torch.float64)
    a = m.step(x, torch.cat([k, dw], -1), gaps, zero, 0.05, mf._gen(2))
    b = m.step(xq, torch.cat([kq, dw], -1), gaps, zero, 0.05, mf._gen(2))
    va, wa = m.split(a)
    vb, wb = m.split(b)
    assert torch.allclose(mf.canonical_sign(q @ va), vb, atol=1e-10)
    assert torch.allclose(wa, wb)


# ---------------------------------------------------------------- training, sampling, determinism, input


def test_training_and_sampling_are_deterministic_and_stay_on_the_manifold():
    m = mf.SpecialOrthogonal(3)
    data = m.from_rotations(torch.as_tensor(mf.so_mixture(3, 64, seed=0))).float()
    cfg = md.TrainConfig(steps=5, batch=16, hidden=16, layers=1, sample_steps=5)
    a = md.train(m, data, "ours", cfg, seed=3)
    b = md.train(m, data, "ours", cfg, seed=3)
    assert a["losses"] == b["losses"]
    xa, xb = md.sample(m, a, 6, cfg, seed=1), md.sample(m, b, 6, cfg, seed=1)
    assert torch.equal(xa, xb)
    r = m.point(xa).double()
    assert torch.allclose(r @ r.transpose(-1, -2), torch.eye(3, dtype=torch.float64).expand(6, 3, 3), atol=1e-4)
    for method in ("euclid", "ism"):
        md.train(m, data, method, cfg, seed=0)


def test_mmd_is_zero_in_expectation_for_equal_laws_and_positive_otherwise():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 2)), rng.normal(size=(300, 2))
    assert abs(md.mmd2(x, y, 1.0)) < 0.01
    assert md.mmd2(x, y + 1.0, 1.0) > 0.1


def test_bad_input_is_rejected():
    m = mf.Torus(2)
    cfg = md.TrainConfig(steps=1, batch=4)
    with pytest.raises(ValueError, match="data"):
        md.train(m, torch.zeros(5, 3), "ours", cfg, 0)
    with pytest.raises(ValueError, match="method"):
        md.train(m, torch.zeros(5, 2), "nope", cfg, 0)
    with pytest.raises(ValueError, match="rsgm"):
        md.train(mf.SpecialOrthogonal(3), torch.zeros(5, 11), "rsgm", cfg, 0)
    with pytest.raises(ValueError, match="steps"):
        md.TrainConfig(steps=0)
    with pytest.raises(ValueError, match="manifold"):
        mf.make_manifold("klein", 2)
    with pytest.raises(ValueError, match="n"):
        mf.SpecialOrthogonal(1)
    with pytest.raises(TypeError, match="data"):
        md.train(m, np.zeros((5, 2)), "ours", cfg, 0)


def test_one_eigendecomposition_targets_equal_the_separate_ones():
    for m in (mf.SpecialOrthogonal(4), mf.Unitary(3), mf.Sphere(2), mf.Torus(2)):
        g = mf._gen(11)
        z, mean = m.noise(5, g, dtype=torch.float64), m.noise(5, g, dtype=torch.float64)
        var, beta = torch.full((5, 1), 0.3, dtype=torch.float64), torch.full((5, 1), 2.0, dtype=torch.float64)
        x, drift, cov = m.targets(z, mean, var, beta)
        assert torch.allclose(x, m.phi(z))
        assert torch.allclose(drift, m.drift_target(z, mean, var, beta))
        assert torch.allclose(cov, m.cov_target(z))


def test_time_per_step_reports_every_method():
    out = md.time_per_step(mf.SpecialOrthogonal(3), ("euclid", "ours", "ism"),
                           md.TrainConfig(batch=8, hidden=8, layers=1), seed=0, repeats=1)
    assert set(out) == {"euclid", "ours", "ism"} and all(v > 0 for v in out.values())
