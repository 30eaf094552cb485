"""Efficient diffusion models for symmetric manifolds, with the two baselines.

Mangoubi, He & Vishnoi, "Efficient Diffusion Models for Symmetric Manifolds" (ICML 2025,
arXiv 2505.21640). The forward process is a Euclidean Ornstein-Uhlenbeck process
``dZ = -beta(s)/2 Z ds + sqrt(beta(s)) dW`` (closed-form transition ``N(a_s z0, v_s I)``,
``a_s = exp(-B(s)/2)``, ``v_s = 1 - exp(-B(s))``) projected onto the manifold, ``X = phi(Z)``
(``rayml.generative.manifolds``). The reverse manifold process ``dY = f(Y, s) ds + G(Y, s) dB``
has, by Ito's lemma applied to ``phi`` along the reversed Euclidean process, the drift
``f* = E[J phi(Z) b(Z) + (beta/2) Lap phi(Z) | phi(Z) = x]`` with ``b = beta (z/2 + score)``
and the covariance ``E[beta J phi J phi^T | phi(Z) = x]`` (Algorithm 1 of the paper). Both are
learned by regression (``ours_loss``): the score is replaced by the closed-form conditional score
``-(z - a z0) / v`` (unbiased, as in denoising score matching), one network evaluation and one
gradient per step, ``O(n^3) = O(d^{1.5})`` arithmetic for the eigendecomposition on SO(n) / U(n),
no heat kernel. ``sample`` runs the manifold SDE backwards with Euler-Maruyama steps and a
retraction (the exponential map of the group, ``mod 2 pi`` on the torus, normalisation on the
sphere), starting from ``phi`` of the Euclidean stationary law.

Baselines:

- ``euclid``: plain Euclidean diffusion (VP-SDE, epsilon prediction) on ``psi(x)``, sampled in
  ``R^D`` and projected by ``phi`` at the end.
- ``rsgm``: the Riemannian score-based model of De Bortoli et al. (NeurIPS 2022) with the heat
  kernel: Brownian motion on the manifold, denoising score matching against the heat-kernel score
  computed by series (torus: the sum over images per coordinate; sphere: the Gegenbauer series,
  with the Varadhan approximation ``log_x(x0)/t`` for ``t < 0.05``), reverse geodesic random walk
  from the uniform law (torus and sphere only).
- ``ism`` (timing only): a Riemannian score model trained by implicit score matching with the
  exact divergence, ``|s|^2/2 + div s``, which costs ``d`` gradient evaluations per step (the
  RSGM / TDM objective on SO(n) and U(n), paper Table 1).

Assumed (the full text was not reachable; the authors' README and code were read): linear
``beta`` from 0.1 to ``beta_max`` on ``s in [0, 1]``; the drift network is parameterised as
``f = beta * net / sqrt(v_s)`` and regressed with unit weight (the epsilon scale of Euclidean
denoising score matching; RSGM's score likewise as ``net / sqrt(t)``), the covariance regression
is weighted by ``v_s``; the covariance model on SO(n) / U(n) regresses the eigenvalue gaps
and the sampler uses ``beta / gap^2`` as the variance of each frame coordinate (authors' code);
the sphere's covariance model regresses ``1/|z|^2``; ``psi`` of the sphere is the identity; RSGM's
``beta_max`` is 20 so that its forward process reaches the uniform law.

Examples:
    >>> from rayml.generative import manifold_diffusion as md, manifolds as mf
    >>> m = mf.Torus(2)
    >>> data = torch.as_tensor(mf.torus_mixture(2, 256, seed=0), dtype=torch.float32)
    >>> cfg = md.TrainConfig(steps=20, batch=64)
    >>> model = md.train(m, data, "ours", cfg, seed=0)
    >>> md.sample(m, model, 8, cfg, seed=1).shape
    torch.Size([8, 2])
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from rayml.generative import manifolds as mf

__all__ = [
    "METHODS",
    "Schedule",
    "TrainConfig",
    "MLP",
    "flatten_z",
    "unflatten_z",
    "ours_loss",
    "euclid_loss",
    "rsgm_loss",
    "ism_loss",
    "torus_heat_score",
    "sphere_heat_logpdf",
    "sphere_heat_score",
    "train",
    "sample",
    "mmd2",
    "c2st_accuracy",
    "time_per_step",
]

METHODS = ("ours", "euclid", "rsgm")


@dataclass(frozen=True)
class Schedule:
    """Linear ``beta(s) = beta_min + (beta_max - beta_min) s`` on forward time ``s in [0, 1]``."""

    beta_min: float = 0.1
    beta_max: float = 10.0

    def beta(self, s):
        return self.beta_min + (self.beta_max - self.beta_min) * s

    def integral(self, s):
        return self.beta_min * s + 0.5 * (self.beta_max - self.beta_min) * s * s

    def mean_var(self, s):
        big = self.integral(s)
        return torch.exp(-0.5 * big), -torch.expm1(-big)


@dataclass(frozen=True)
class TrainConfig:
    """Training and sampling settings shared by every method (equal budgets).

    Attributes:
        steps: optimiser steps; batch: samples per step; lr: Adam learning rate.
        hidden, layers: the MLP's width and number of hidden layers.
        sample_steps: Euler-Maruyama steps of every sampler.
        beta_max: the OU schedule's end (ours, euclid); rsgm_beta_max: the Brownian schedule's.
        t_eps: the smallest forward time trained on and sampled to.
    """

    steps: int = 1000
    batch: int = 256
    lr: float = 1e-3
    hidden: int = 128
    layers: int = 3
    sample_steps: int = 200
    beta_max: float = 10.0
    rsgm_beta_max: float = 20.0
    t_eps: float = 1e-3

    def __post_init__(self):
        for name in ("steps", "batch", "hidden", "layers", "sample_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("lr", "beta_max", "rsgm_beta_max"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.t_eps < 0.5:
            raise ValueError(f"t_eps must be in (0, 0.5), got {self.t_eps!r}")


class MLP(nn.Module):
    """``(features, s) -> R^out``: an MLP with SiLU and a small Fourier time embedding."""

    def __init__(self, n_in: int, n_out: int, hidden: int = 128, layers: int = 3):
        super().__init__()
        dims = [n_in + 9] + [hidden] * layers
        mods: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            mods += [nn.Linear(a, b), nn.SiLU()]
        mods.append(nn.Linear(dims[-1], n_out))
        self.net = nn.Sequential(*mods)
        self.register_buffer("freqs", torch.tensor([1.0, 2.0, 4.0, 8.0]) * math.pi)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        s = s.reshape(-1, 1).expand(x.shape[0], 1).to(x.dtype)
        emb = torch.cat([s, torch.sin(s * self.freqs), torch.cos(s * self.freqs)], -1)
        return self.net(torch.cat([x, emb], -1))


# --------------------------------------------------------------------------------------------
# Euclidean coordinates (isometric, so the forward noise is iid N(0, 1) in them)
# --------------------------------------------------------------------------------------------


def flatten_z(m, z: dict) -> torch.Tensor:
    """``z`` in flat coordinates of ``R^D`` in which the OU noise is ``N(0, I)``."""
    if "A" not in z:
        return z["v"]
    a = z["A"]
    n = a.shape[-1]
    iu = torch.triu_indices(n, n, offset=1)
    diag = torch.diagonal(a, dim1=-2, dim2=-1)
    up = a[..., iu[0], iu[1]]
    if torch.is_complex(a):
        parts = [diag.real, math.sqrt(2.0) * up.real, math.sqrt(2.0) * up.imag]
    else:
        parts = [diag / math.sqrt(2.0), up]
    return torch.cat(parts + [z["v"]], -1)


def unflatten_z(m, flat: torch.Tensor) -> dict:
    """The inverse of ``flatten_z``."""
    if isinstance(m, (mf.Torus, mf.Sphere)):
        return {"v": flat}
    n = m.n
    k = n * (n - 1) // 2
    iu = torch.triu_indices(n, n, offset=1)
    if isinstance(m, mf.Unitary):
        diag, re, im, v = flat[..., :n], flat[..., n:n + k], flat[..., n + k:n + 2 * k], flat[..., n + 2 * k:]
        up = torch.complex(re, im) / math.sqrt(2.0)
        a = torch.zeros(flat.shape[:-1] + (n, n), dtype=up.dtype)
        a[..., iu[0], iu[1]] = up
        a = a + a.transpose(-1, -2).conj() + torch.diag_embed(diag.to(up.dtype))
        return {"A": a, "v": v}
    diag, up, v = flat[..., :n] * math.sqrt(2.0), flat[..., n:n + k], flat[..., n + k:]
    a = torch.zeros(flat.shape[:-1] + (n, n), dtype=flat.dtype)
    a[..., iu[0], iu[1]] = up
    a = a + a.transpose(-1, -2) + torch.diag_embed(diag)
    return {"A": a, "v": v}


def _expand(c: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return c.reshape((-1,) + (1,) * (like.dim() - 1))


def _forward(m, z0: dict, s: torch.Tensor, sched: Schedule, g: torch.Generator):
    a, v = sched.mean_var(s)
    noise = m.noise(s.shape[0], g, dtype=z0["v"].dtype)
    mean = {k: _expand(a, t).to(t.dtype) * t for k, t in z0.items()}
    zt = {k: mean[k] + _expand(v.sqrt(), t).to(t.dtype) * noise[k] for k, t in z0.items()}
    return zt, mean, noise, v


# --------------------------------------------------------------------------------------------
# losses
# --------------------------------------------------------------------------------------------


def ours_loss(m, nets: dict, x0: torch.Tensor, sched: Schedule, g: torch.Generator, t_eps: float):
    """Algorithm 1 (paper): the drift and covariance regressions derived with Ito's lemma.

    ``x0`` are manifold points; ``Z_s ~ N(a_s psi(x0), v_s I)`` is drawn in closed form, projected
    to ``x_s = phi(Z_s)``, and the networks regress the Ito drift of the reversed process and the
    covariance statistic at ``x_s`` (weight ``v_s``). Returns the scalar loss.
    """
    s = t_eps + (1 - t_eps) * torch.rand(x0.shape[0], 1, generator=g, dtype=x0.dtype)
    zt, mean, _, v = _forward(m, m.psi(x0), s[:, 0], sched, g)
    beta = sched.beta(s)
    with torch.no_grad():
        xs, target, cov = m.targets(zt, mean, v[:, None], beta)
    feats = m.features(xs)
    # parameterised as f = beta * net / sqrt(v_s) (the epsilon-scale of Euclidean DSM; assumed)
    loss = ((nets["drift"](feats, s) - v[:, None].sqrt() * target / beta) ** 2).mean()
    if m.n_cov:
        loss = loss + (v[:, None] * (nets["cov"](feats, s) - cov) ** 2).mean()
    return loss


def euclid_loss(m, nets: dict, x0: torch.Tensor, sched: Schedule, g: torch.Generator, t_eps: float):
    """Denoising score matching (epsilon prediction) of the Euclidean VP-SDE on ``psi(x0)``."""
    s = t_eps + (1 - t_eps) * torch.rand(x0.shape[0], 1, generator=g, dtype=x0.dtype)
    zt, _, noise, _ = _forward(m, m.psi(x0), s[:, 0], sched, g)
    eps = flatten_z(m, noise)
    return ((nets["eps"](flatten_z(m, zt).to(x0.dtype), s) - eps.to(x0.dtype)) ** 2).mean()


def torus_heat_score(x: torch.Tensor, x0: torch.Tensor, t: torch.Tensor, images: int = 4) -> torch.Tensor:
    """``grad_x log p_t(x | x0)`` of Brownian motion on the torus (wrapped normal, image sum)."""
    k = mf.TWO_PI * torch.arange(-images, images + 1, dtype=x.dtype)
    diff = (x - x0)[..., None] + k
    w = torch.softmax(-diff ** 2 / (2 * t[..., None]), -1)
    return -(w * diff).sum(-1) / t


def _gegenbauer(c: torch.Tensor, alpha: float, terms: int) -> torch.Tensor:
    out = [torch.ones_like(c), 2 * alpha * c]
    for l in range(2, terms):
        out.append((2 * c * (l + alpha - 1) * out[-1] - (l + 2 * alpha - 2) * out[-2]) / l)
    return torch.stack(out[:terms], -1)


def _sphere_series(c: torch.Tensor, t: torch.Tensor, d: int, terms: int):
    alpha = (d - 1) / 2.0
    l = torch.arange(terms, dtype=c.dtype)
    coef = torch.exp(-l * (l + d - 1) * t[..., None] / 2) * (2 * l + d - 1) / (d - 1)
    val = (coef * _gegenbauer(c, alpha, terms)).sum(-1)
    dgeg = 2 * alpha * _gegenbauer(c, alpha + 1, terms - 1)              # d/dc C_l = 2a C_{l-1}^{a+1}
    dval = (coef[..., 1:] * dgeg).sum(-1)
    return val, dval


def sphere_heat_logpdf(x: torch.Tensor, x0: torch.Tensor, t: torch.Tensor, terms: int = 80) -> torch.Tensor:
    """Log heat kernel of ``S^d`` (``d >= 2``, generator ``Lap/2``) by its Gegenbauer series."""
    from scipy.special import gammaln

    d = x.shape[-1] - 1
    c = (x * x0).sum(-1).clamp(-1, 1)
    val, _ = _sphere_series(c, t, d, terms)
    log_area = math.log(2.0) + (d + 1) / 2 * math.log(math.pi) - float(gammaln((d + 1) / 2))
    return torch.log(val.clamp_min(1e-300)) - log_area


def sphere_heat_score(x: torch.Tensor, x0: torch.Tensor, t: torch.Tensor, terms: int = 80,
                      small_t: float = 0.05) -> torch.Tensor:
    """``grad_x log p_t(x | x0)`` on ``S^d`` (tangent at ``x``): the series for ``t >= small_t``,
    the Varadhan approximation ``log_x(x0) / t`` below it (as RSGM does)."""
    d = x.shape[-1] - 1
    c = (x * x0).sum(-1).clamp(-1 + 1e-7, 1 - 1e-7)
    direction = x0 - c[..., None] * x
    val, dval = _sphere_series(c, t.clamp_min(small_t), d, terms)
    series = (dval / val.clamp_min(1e-300))[..., None] * direction
    theta = torch.arccos(c)
    varadhan = (theta / torch.sin(theta))[..., None] * direction / t[..., None]
    return torch.where((t >= small_t)[..., None], series, varadhan)


def _sphere_exp(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    nv = v.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    y = torch.cos(nv) * x + torch.sin(nv) * v / nv
    return y / y.norm(dim=-1, keepdim=True)


def _sphere_bm(x0: torch.Tensor, t: torch.Tensor, g: torch.Generator, walk: int = 20) -> torch.Tensor:
    x = x0
    dt = (t / walk)[..., None]
    for _ in range(walk):
        xi = torch.randn(x.shape, generator=g, dtype=x.dtype)
        x = _sphere_exp(x, mf.Sphere.tangent(x, xi) * dt.sqrt())
    return x


def rsgm_loss(m, nets: dict, x0: torch.Tensor, sched: Schedule, g: torch.Generator, t_eps: float):
    """RSGM's denoising score matching with the heat-kernel score (torus, sphere)."""
    s = t_eps + (1 - t_eps) * torch.rand(x0.shape[0], 1, generator=g, dtype=x0.dtype)
    t = sched.integral(s)[:, 0]
    with torch.no_grad():
        if isinstance(m, mf.Torus):
            xt = torch.remainder(x0 + t[:, None].sqrt() * torch.randn(x0.shape, generator=g, dtype=x0.dtype), mf.TWO_PI)
            target = torus_heat_score(xt, x0, t[:, None])
        else:
            xt = _sphere_bm(x0, t, g)
            target = sphere_heat_score(xt, x0, t)
    pred = nets["score"](m.features(xt), s)             # the score is net / sqrt(t), as for ours
    if isinstance(m, mf.Sphere):
        pred = mf.Sphere.tangent(xt, pred)
    return ((pred - t[:, None].sqrt() * target) ** 2).mean()


def _ism_point(m, x: torch.Tensor, xi: torch.Tensor) -> torch.Tensor:
    """The point reached from ``x`` along tangent coordinates ``xi`` (retraction)."""
    if isinstance(m, mf.Torus):
        return x + xi
    if isinstance(m, mf.Sphere):
        basis = torch.linalg.qr(torch.cat([x[..., None], torch.eye(m.d + 1, m.d, dtype=x.dtype).expand(
            x.shape[0], -1, -1)], -1))[0][..., 1:]
        return _sphere_exp(x, (basis @ xi[..., None])[..., 0])
    if isinstance(m, mf.SpecialOrthogonal):
        v, w = m.split(x)
        k = mf._skew_from_upper(xi, m.n)
        return m.join(v @ torch.linalg.matrix_exp(k), w)
    n, q = m.n, m.n_cov
    up = torch.complex(xi[..., :q], xi[..., q:2 * q])
    k = mf._skew_from_upper(up, n) + torch.diag_embed(1j * xi[..., 2 * q:].to(up.dtype))
    return m.from_unitaries(m.point(x) @ torch.linalg.matrix_exp(k))


def ism_loss(m, nets: dict, x0: torch.Tensor, sched: Schedule, g: torch.Generator, t_eps: float):
    """Implicit score matching with the exact Riemannian divergence (``d`` gradient evaluations).

    The loss ``|s|^2/2 + sum_k d s_k / d xi_k`` in normal-like coordinates ``xi`` at each point;
    the noisy points are ``phi`` of the OU process (the objective's cost does not depend on how
    they are drawn; this baseline is used for the time per step).
    """
    s = t_eps + (1 - t_eps) * torch.rand(x0.shape[0], 1, generator=g, dtype=x0.dtype)
    zt, _, _, _ = _forward(m, m.psi(x0), s[:, 0], sched, g)
    with torch.no_grad():
        xs = m.phi(zt).to(x0.dtype)
    dim = m.dim
    xi = torch.zeros(x0.shape[0], dim, dtype=x0.dtype, requires_grad=True)
    score = nets["score"](m.features(_ism_point(m, xs, xi)), s)
    div = 0.0
    for k in range(dim):
        div = div + torch.autograd.grad(score[:, k].sum(), xi, create_graph=True)[0][:, k]
    return (0.5 * (score ** 2).sum(-1) + div).mean()


def _nets(m, method: str, cfg: TrainConfig) -> dict:
    mk = lambda n_in, n_out: MLP(n_in, n_out, cfg.hidden, cfg.layers)  # noqa: E731
    if method == "ours":
        nets = {"drift": mk(m.n_features, m.n_drift)}
        if m.n_cov:
            nets["cov"] = mk(m.n_features, m.n_cov)
        return nets
    if method == "euclid":
        return {"eps": mk(m.euclid_dim, m.euclid_dim)}
    if method == "rsgm":
        if not isinstance(m, (mf.Torus, mf.Sphere)):
            raise ValueError(f"method 'rsgm' (heat kernel) needs the torus or the sphere, got {m.name!r}")
        if isinstance(m, mf.Sphere) and m.d < 2:
            raise ValueError("method 'rsgm' on the sphere needs d >= 2 (the Gegenbauer series)")
        return {"score": mk(m.n_features, m.n_drift)}
    if method == "ism":
        return {"score": mk(m.n_features, m.dim)}
    raise ValueError(f"method must be one of {METHODS + ('ism',)}, got {method!r}")


_LOSSES = {"ours": ours_loss, "euclid": euclid_loss, "rsgm": rsgm_loss, "ism": ism_loss}


def _schedule(method: str, cfg: TrainConfig) -> Schedule:
    return Schedule(0.1, cfg.rsgm_beta_max if method == "rsgm" else cfg.beta_max)


def _check_data(m, data: torch.Tensor) -> torch.Tensor:
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"data must be a torch.Tensor, got {type(data).__name__}")
    want = {mf.Torus: m.dim, mf.Sphere: m.dim + 1}.get(type(m))
    if want is None:
        want = m.n * m.n + m.n - 1 if isinstance(m, mf.SpecialOrthogonal) else 2 * m.n * m.n
    if data.dim() != 2 or data.shape[1] != want or data.shape[0] < 2:
        raise ValueError(f"data must have shape (N >= 2, {want}) for {m.name}, got {tuple(data.shape)}")
    if not torch.isfinite(data).all():
        raise ValueError("data must be finite")
    return data.to(torch.float32)


def train(m, data: torch.Tensor, method: str, cfg: TrainConfig, seed: int) -> dict:
    """Train ``method`` (``ours``, ``euclid``, ``rsgm``, ``ism``) on manifold points ``data``.

    Returns ``{"method", "nets", "losses"}``; every method gets ``cfg.steps`` Adam steps of
    ``cfg.batch`` samples.
    """
    if method not in _LOSSES:
        raise ValueError(f"method must be one of {tuple(_LOSSES)}, got {method!r}")
    data = _check_data(m, data)
    torch.manual_seed(int(seed) % (2**63))
    g = mf._gen(seed)
    nets = _nets(m, method, cfg)
    params = [p for net in nets.values() for p in net.parameters()]
    opt = torch.optim.Adam(params, lr=cfg.lr)
    sched = _schedule(method, cfg)
    losses = []
    for _ in range(cfg.steps):
        idx = torch.randint(data.shape[0], (cfg.batch,), generator=g)
        loss = _LOSSES[method](m, nets, data[idx], sched, g, cfg.t_eps)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return {"method": method, "nets": nets, "losses": losses}


@torch.no_grad()
def sample(m, model: dict, n: int, cfg: TrainConfig, seed: int) -> torch.Tensor:
    """``n`` samples (flat manifold points) from a trained model, ``cfg.sample_steps`` steps."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    method, nets = model["method"], model["nets"]
    g = mf._gen(seed)
    sched = _schedule(method, cfg)
    steps = cfg.sample_steps
    h = (1.0 - cfg.t_eps) / steps
    if method == "euclid":
        z = flatten_z(m, m.noise(n, g))
        for k in range(steps):
            s = torch.full((n, 1), 1.0 - k * h)
            beta = sched.beta(s)
            _, v = sched.mean_var(s)
            score = -nets["eps"](z, s) / v.sqrt()
            z = z + (0.5 * beta * z + beta * score) * h + torch.sqrt(beta * h) * torch.randn(z.shape, generator=g)
        return m.phi(unflatten_z(m, z)).to(torch.float32)
    if method == "rsgm":
        if isinstance(m, mf.Torus):
            x = mf.TWO_PI * torch.rand(n, m.d, generator=g)
        else:
            x = torch.randn(n, m.d + 1, generator=g)
            x = x / x.norm(dim=-1, keepdim=True)
        for k in range(steps):
            s = torch.full((n, 1), 1.0 - k * h)
            beta = sched.beta(s)
            score = nets["score"](m.features(x), s) / sched.integral(s).sqrt()
            xi = torch.randn(x.shape, generator=g)
            if isinstance(m, mf.Torus):
                x = torch.remainder(x + beta * score * h + torch.sqrt(beta * h) * xi, mf.TWO_PI)
            else:
                x = _sphere_exp(x, mf.Sphere.tangent(x, beta * score * h + torch.sqrt(beta * h) * xi))
        return x
    if method != "ours":
        raise ValueError(f"cannot sample from method {method!r}")
    x = m.phi(m.noise(n, g)).to(torch.float32)
    for k in range(steps):
        s = torch.full((n, 1), 1.0 - k * h)
        feats = m.features(x)
        drift = sched.beta(s) * nets["drift"](feats, s) / sched.mean_var(s)[1].sqrt()
        cov = nets["cov"](feats, s) if m.n_cov else None
        x = m.step(x, drift, cov, sched.beta(s), h, g).to(torch.float32)
    return x


# --------------------------------------------------------------------------------------------
# sample quality and cost
# --------------------------------------------------------------------------------------------


def mmd2(x: np.ndarray, y: np.ndarray, bandwidth: float) -> float:
    """Unbiased squared MMD with the Gaussian kernel ``exp(-|a - b|^2 / (2 bandwidth^2))``."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)

    def k(a, b):
        d2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return np.exp(-np.maximum(d2, 0) / (2 * bandwidth ** 2))

    kxx, kyy, kxy = k(x, x), k(y, y), k(x, y)
    n, m = len(x), len(y)
    return float((kxx.sum() - np.trace(kxx)) / (n * (n - 1)) + (kyy.sum() - np.trace(kyy)) / (m * (m - 1))
                 - 2 * kxy.mean())


def median_bandwidth(x: np.ndarray) -> float:
    """The median pairwise distance of ``x`` (the kernel bandwidth heuristic)."""
    x = np.asarray(x, np.float64)
    d2 = (x * x).sum(1)[:, None] + (x * x).sum(1)[None, :] - 2 * x @ x.T
    iu = np.triu_indices(len(x), 1)
    return float(np.sqrt(np.median(np.maximum(d2[iu], 0))))


def c2st_accuracy(x: np.ndarray, y: np.ndarray, seed: int) -> float:
    """Classifier two-sample test: held-out accuracy of an MLP telling ``x`` from ``y`` (0.5 best)."""
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    feats = np.concatenate([x, y]).astype(np.float64)
    labels = np.r_[np.zeros(len(x)), np.ones(len(y))]
    a, b, la, lb = train_test_split(feats, labels, test_size=0.5, random_state=seed % (2**32), stratify=labels)
    clf = MLPClassifier(hidden_layer_sizes=(64, 64), max_iter=300, random_state=seed % (2**32))
    clf.fit(a, la)
    return float((clf.predict(b) == lb).mean())


def time_per_step(m, methods, cfg: TrainConfig, seed: int, repeats: int = 5) -> dict:
    """Seconds per training step of each of ``methods`` on ``m``: steps of the methods are
    interleaved (so a load change hits all of them alike) and the minimum over ``repeats`` is kept
    (the least-disturbed run), after one warm-up step each."""
    g = mf._gen(seed)
    x0 = m.phi(m.noise(cfg.batch, g)).to(torch.float32)
    torch.manual_seed(int(seed) % (2**63))
    state = {}
    for method in methods:
        nets = _nets(m, method, cfg)
        opt = torch.optim.Adam([p for net in nets.values() for p in net.parameters()], lr=cfg.lr)
        state[method] = (nets, opt, _schedule(method, cfg))
    times: dict = {method: [] for method in methods}
    for r in range(repeats + 1):
        for method in methods:
            nets, opt, sched = state[method]
            t0 = time.perf_counter()
            loss = _LOSSES[method](m, nets, x0, sched, g, cfg.t_eps)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if r:
                times[method].append(time.perf_counter() - t0)
    return {method: float(np.min(v)) for method, v in times.items()}
