"""Symmetric manifolds as projections of Euclidean space, for manifold-diffusion.

Mangoubi, He & Vishnoi, "Efficient Diffusion Models for Symmetric Manifolds" (ICML 2025,
arXiv 2505.21640), Section 2: a Euclidean Ornstein-Uhlenbeck process ``Z_t`` in ``R^D`` is
mapped onto the manifold by a projection ``phi``; data are mapped into ``R^D`` by ``psi`` with
``phi(psi(x)) = x``. Each manifold here supplies:

- ``psi(x)`` / ``phi(z)``: the two maps (``z`` is a dict of tensors: a vector part and, for the
  groups, a symmetric / Hermitian matrix ``A``);
- ``noise(batch)``: the isotropic Gaussian in ``R^D`` (in the matrix coordinates, GOE / GUE);
- ``drift_target(z_t, mean, var, beta)``: the Ito's-lemma drift of the projected reverse
  process in the manifold's tangent coordinates, with the closed-form conditional score
  ``-(z_t - mean) / var`` in place of the score (its conditional expectation given ``phi(z_t)``
  is the manifold drift ``f*``, eq. (5) of the paper in our notation);
- ``cov_target(z_t)``: the statistic the covariance model regresses;
- ``features(x)``: the network's input; ``step(x, drift, noise ...)``: one Euler-Maruyama step
  of the manifold SDE with a retraction.

Projections (paper, Table 1 / Section 2): torus ``phi(z) = z mod 2 pi``; sphere
``phi(z) = z / |z|``; SO(n) and U(n): the eigenvectors of ``A`` ordered by decreasing eigenvalue
(``psi(U) = U diag(n, ..., 1)/n U*``). The eigenvector map is defined only up to a sign (SO(n))
or a phase (U(n)) per column; we fix it canonically (first row real positive) and carry the
sign / phase on a torus ``w`` that is part of ``z``: SO(n): ``phi(A, w) = V(A) diag(s(w))``
with ``s_i = sign(cos w_i)`` for ``i < n`` and the last sign fixing ``det = 1``; U(n):
``phi(A, w) = V(A) diag(exp(i w))``. The authors' code carries the SO(n) signs on a torus the
same way (assumed for U(n), where their code leaves the phase to ``eigh``).

Ito's lemma for the eigenvectors (first- and second-order perturbation of ``A``; the matrix
noise is GOE / GUE, so ``u_j* dA u_i`` are independent for ``i < j`` with variance ``dt``):
``dU = U K``, ``K`` skew (skew-Hermitian), ``K_ji = u_j* dA u_i / (lambda_i - lambda_j)``; the
second-order term ``-1/2 sum_j dt / (lambda_i - lambda_j)^2 u_i`` is normal to the manifold and
is removed by the retraction. The covariance is set by the eigenvalue gaps: the covariance model
regresses them (assumed, as in the authors' code). For U(n) the canonical phase adds
``K_ii = i (dw_i - Im sum_j K_ji U_0j / U_0i)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "Torus",
    "Sphere",
    "SpecialOrthogonal",
    "Unitary",
    "make_manifold",
    "MANIFOLDS",
    "wrapped_normal_logpdf",
    "torus_mixture",
    "torus_mixture_logpdf",
    "vmf_mixture",
    "vmf_mixture_logpdf",
    "so_mixture",
    "unitary_evolutions",
    "canonical_sign",
    "canonical_phase",
    "sorted_eigh",
]

TWO_PI = 2.0 * math.pi


def _check_int(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _gen(seed) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed) % (2**63))
    return g


def sorted_eigh(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues in decreasing order and the matching eigenvectors (columns)."""
    lam, vec = torch.linalg.eigh(a)
    return lam.flip(-1), vec.flip(-1)


def canonical_sign(v: torch.Tensor) -> torch.Tensor:
    """Each column's sign flipped so that its first entry is >= 0 (real eigenvector gauge)."""
    s = torch.where(v[..., :1, :] < 0, -1.0, 1.0).to(v.dtype)
    return v * s


def canonical_phase(v: torch.Tensor) -> torch.Tensor:
    """Each column multiplied by a phase so that its first entry is real and >= 0."""
    top = v[..., :1, :]
    mag = top.abs().clamp_min(1e-30)
    return v * (top.conj() / mag)


def _skew_from_upper(upper: torch.Tensor, n: int) -> torch.Tensor:
    """The (batch, n, n) skew (or skew-Hermitian) matrix with the given strictly-upper entries."""
    iu = torch.triu_indices(n, n, offset=1)
    k = torch.zeros(upper.shape[:-1] + (n, n), dtype=upper.dtype)
    k[..., iu[0], iu[1]] = upper
    return k - k.transpose(-1, -2).conj()


def _upper(m: torch.Tensor) -> torch.Tensor:
    n = m.shape[-1]
    iu = torch.triu_indices(n, n, offset=1)
    return m[..., iu[0], iu[1]]


# --------------------------------------------------------------------------------------------
# the manifolds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Torus:
    """The flat torus ``T^d = [0, 2 pi)^d``; ``phi(z) = z mod 2 pi``, ``psi(x) = x``.

    The Jacobian of ``phi`` is the identity and its Hessian vanishes, so the drift target is the
    Euclidean reverse drift ``beta (z/2 - (z - mean)/var)`` itself, and the covariance is exactly
    ``beta I`` (no covariance model).
    """

    d: int
    name: str = "torus"

    def __post_init__(self):
        _check_int("d", self.d, 1)

    @property
    def dim(self) -> int:
        return self.d

    @property
    def euclid_dim(self) -> int:
        return self.d

    @property
    def n_drift(self) -> int:
        return self.d

    @property
    def n_cov(self) -> int:
        return 0

    @property
    def n_features(self) -> int:
        return 2 * self.d

    def psi(self, x: torch.Tensor) -> dict:
        return {"v": x.clone()}

    def phi(self, z: dict) -> torch.Tensor:
        return torch.remainder(z["v"], TWO_PI)

    def noise(self, batch: int, g: torch.Generator, dtype=torch.float32) -> dict:
        return {"v": torch.randn(batch, self.d, generator=g, dtype=dtype)}

    def drift_target(self, zt: dict, mean: dict, var: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        z = zt["v"]
        return beta * (0.5 * z - (z - mean["v"]) / var)

    def cov_target(self, zt: dict) -> torch.Tensor:
        return torch.zeros(zt["v"].shape[0], 0, dtype=zt["v"].dtype)

    def targets(self, zt, mean, var, beta):
        """``(phi(z), drift_target, cov_target)``."""
        return self.phi(zt), self.drift_target(zt, mean, var, beta), self.cov_target(zt)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.cos(x), torch.sin(x)], -1)

    def step(self, x, drift, cov, beta, h, g):
        xi = torch.randn(x.shape, generator=g, dtype=x.dtype)
        return torch.remainder(x + drift * h + torch.sqrt(beta * h) * xi, TWO_PI)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Coordinates for kernels and classifiers: ``(cos x, sin x)``."""
        return self.features(x)

    def act(self, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The group action: translation by ``c``."""
        return torch.remainder(x + c, TWO_PI)


@dataclass(frozen=True)
class Sphere:
    """The sphere ``S^d`` in ``R^{d+1}``; ``phi(z) = z/|z|``, ``psi(x) = x`` (assumed: unit scale).

    ``J phi(z) = (I - u u^T)/r`` with ``r = |z|``, ``u = z/r``; the Ito (Hessian) term is
    ``-(d/2) beta u / r^2``, normal to the sphere. The covariance of the projected motion is
    ``beta (I - u u^T) / r^2``: the covariance model regresses ``1/r^2``.
    """

    d: int
    name: str = "sphere"

    def __post_init__(self):
        _check_int("d", self.d, 1)

    @property
    def dim(self) -> int:
        return self.d

    @property
    def euclid_dim(self) -> int:
        return self.d + 1

    @property
    def n_drift(self) -> int:
        return self.d + 1

    @property
    def n_cov(self) -> int:
        return 1

    @property
    def n_features(self) -> int:
        return self.d + 1

    def psi(self, x: torch.Tensor) -> dict:
        return {"v": x.clone()}

    def phi(self, z: dict) -> torch.Tensor:
        v = z["v"]
        return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)

    def noise(self, batch: int, g: torch.Generator, dtype=torch.float32) -> dict:
        return {"v": torch.randn(batch, self.d + 1, generator=g, dtype=dtype)}

    @staticmethod
    def tangent(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return v - (v * x).sum(-1, keepdim=True) * x

    def drift_target(self, zt, mean, var, beta):
        z = zt["v"]
        r = z.norm(dim=-1, keepdim=True)
        b = beta * (0.5 * z - (z - mean["v"]) / var)
        return self.tangent(z / r, b) / r

    def cov_target(self, zt):
        return 1.0 / (zt["v"] ** 2).sum(-1, keepdim=True)

    def targets(self, zt, mean, var, beta):
        """``(phi(z), drift_target, cov_target)``."""
        return self.phi(zt), self.drift_target(zt, mean, var, beta), self.cov_target(zt)

    def features(self, x):
        return x

    def step(self, x, drift, cov, beta, h, g):
        xi = torch.randn(x.shape, generator=g, dtype=x.dtype)
        y = x + self.tangent(x, drift * h + torch.sqrt(beta * h * cov.clamp_min(0.0)) * xi)
        return y / y.norm(dim=-1, keepdim=True)

    def embed(self, x):
        return x

    def act(self, q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The group action: rotation ``x -> q x`` (``q`` orthogonal)."""
        return x @ q.T


@dataclass(frozen=True)
class SpecialOrthogonal:
    """``SO(n)`` (``d = n(n-1)/2``) as eigenvectors of a symmetric matrix, signs on a torus.

    A point is stored flat: ``V`` (canonical signs, ``n*n``) then the sign angles ``w``
    (``n-1``); ``point(x)`` gives the rotation ``V diag(s(w))``. Tangent coordinates: the
    strictly-upper entries of the skew frame drift ``K`` (``dV = V K``) then ``dw``.
    """

    n: int
    scale: float = 1.0
    name: str = "so"

    def __post_init__(self):
        _check_int("n", self.n, 2)
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale!r}")

    @property
    def dim(self) -> int:
        return self.n * (self.n - 1) // 2

    @property
    def euclid_dim(self) -> int:
        return self.n * (self.n + 1) // 2 + self.n - 1

    @property
    def n_drift(self) -> int:
        return self.dim + self.n - 1

    @property
    def n_cov(self) -> int:
        return self.dim

    @property
    def n_features(self) -> int:
        return self.n * self.n + 2 * (self.n - 1)

    def _lam(self, dtype) -> torch.Tensor:
        n = self.n
        return self.scale * torch.arange(n, 0, -1, dtype=dtype) / n

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = self.n
        return x[..., : n * n].reshape(x.shape[:-1] + (n, n)), x[..., n * n:]

    def join(self, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.cat([v.reshape(v.shape[:-2] + (-1,)), w], -1)

    def signs(self, v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        s = torch.where(torch.cos(w) >= 0, 1.0, -1.0).to(v.dtype)
        last = torch.linalg.det(v).sign()[..., None] * s.prod(-1, keepdim=True)
        return torch.cat([s, last], -1)

    def point(self, x: torch.Tensor) -> torch.Tensor:
        """The rotation matrices ``(batch, n, n)`` of flat points."""
        v, w = self.split(x)
        return v * self.signs(v, w)[..., None, :]

    def from_rotations(self, u: torch.Tensor) -> torch.Tensor:
        """Flat points of rotation matrices (the inverse of ``point``)."""
        v = canonical_sign(u)
        s = torch.where(u[..., 0, :-1] < 0, math.pi, 0.0).to(u.dtype)
        return self.join(v, s)

    def psi(self, x: torch.Tensor) -> dict:
        v, w = self.split(x)
        a = (v * self._lam(v.dtype)) @ v.transpose(-1, -2)
        return {"A": a, "v": w.clone()}

    def phi(self, z: dict) -> torch.Tensor:
        _, vec = sorted_eigh(z["A"])
        return self.join(canonical_sign(vec), torch.remainder(z["v"], TWO_PI))

    def noise(self, batch: int, g: torch.Generator, dtype=torch.float32) -> dict:
        n = self.n
        m = torch.randn(batch, n, n, generator=g, dtype=dtype)
        return {"A": (m + m.transpose(-1, -2)) / math.sqrt(2.0),  # GOE: off-diagonal var 1, diagonal 2
                "v": torch.randn(batch, n - 1, generator=g, dtype=dtype)}

    def targets(self, zt, mean, var, beta):
        """``(phi(z), drift_target, cov_target)`` from one eigendecomposition."""
        lam, vec = sorted_eigh(zt["A"])
        vec = canonical_sign(vec)
        x = self.join(vec, torch.remainder(zt["v"], TWO_PI))
        return x, self._drift(lam, vec, zt, mean, var, beta), _upper(lam[..., :, None] - lam[..., None, :])

    def drift_target(self, zt, mean, var, beta):
        lam, vec = sorted_eigh(zt["A"])
        return self._drift(lam, canonical_sign(vec), zt, mean, var, beta)

    def _drift(self, lam, vec, zt, mean, var, beta):
        b = beta[..., None] * (0.5 * zt["A"] - (zt["A"] - mean["A"]) / var[..., None])
        proj = vec.transpose(-1, -2) @ b @ vec                      # [j, i] = u_j^T B u_i
        gap = lam[..., None, :] - lam[..., :, None]                 # [j, i] = lambda_i - lambda_j
        k = proj / torch.where(gap.abs() > 0, gap, torch.ones_like(gap))
        zw = zt["v"]
        dw = beta * (0.5 * zw - (zw - mean["v"]) / var)
        return torch.cat([_upper(k), dw], -1)

    def cov_target(self, zt):
        lam = sorted_eigh(zt["A"])[0]
        return _upper(lam[..., :, None] - lam[..., None, :])     # lambda_i - lambda_j > 0, i < j

    def features(self, x):
        v, w = self.split(x)
        return torch.cat([v.reshape(v.shape[:-2] + (-1,)), torch.cos(w), torch.sin(w)], -1)

    def step(self, x, drift, cov, beta, h, g):
        n = self.n
        v, w = self.split(x)
        m = self.dim
        xi = torch.randn(x.shape[0], m, generator=g, dtype=x.dtype)
        gaps = cov.clamp_min(1e-3)
        upper = drift[..., :m] * h + torch.sqrt(beta * h) * xi / gaps
        # float64 exponential: the frame steps near s = 0 are large and float32 drifts off SO(n)
        rot = torch.linalg.matrix_exp(_skew_from_upper(upper.double(), n))
        v = canonical_sign(v.double() @ rot).to(x.dtype)
        xw = torch.randn(x.shape[0], n - 1, generator=g, dtype=x.dtype)
        w = torch.remainder(w + drift[..., m:] * h + torch.sqrt(beta * h) * xw, TWO_PI)
        return self.join(v, w)

    def embed(self, x):
        return self.point(x).reshape(x.shape[0], -1)


@dataclass(frozen=True)
class Unitary:
    """``U(n)`` (``d = n^2``) as eigenvectors of a Hermitian matrix times phases ``exp(i w)``.

    A point is stored flat as ``(Re U, Im U)`` (``2 n^2``). Tangent coordinates: the real and
    imaginary parts of the strictly-upper entries of the skew-Hermitian frame drift ``K``
    (``dU = U K``), then the phase drift ``dw``; the diagonal of ``K`` is
    ``i (dw - Im sum_j K_ji U_0j / U_0i)``, the gauge term that keeps ``V`` canonical.
    """

    n: int
    scale: float = 1.0
    name: str = "unitary"

    def __post_init__(self):
        _check_int("n", self.n, 2)
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale!r}")

    @property
    def dim(self) -> int:
        return self.n * self.n

    @property
    def euclid_dim(self) -> int:
        return self.n * self.n + self.n

    @property
    def n_drift(self) -> int:
        return self.n * (self.n - 1) + self.n

    @property
    def n_cov(self) -> int:
        return self.n * (self.n - 1) // 2

    @property
    def n_features(self) -> int:
        return 2 * self.n * self.n

    def point(self, x: torch.Tensor) -> torch.Tensor:
        n = self.n
        re, im = x[..., : n * n], x[..., n * n:]
        return torch.complex(re, im).reshape(x.shape[:-1] + (n, n))

    def from_unitaries(self, u: torch.Tensor) -> torch.Tensor:
        flat = u.reshape(u.shape[:-2] + (-1,))
        return torch.cat([flat.real, flat.imag], -1)

    def _lam(self, dtype) -> torch.Tensor:
        n = self.n
        return self.scale * torch.arange(n, 0, -1, dtype=dtype) / n

    def psi(self, x: torch.Tensor) -> dict:
        u = self.point(x)
        a = (u * self._lam(x.dtype)) @ u.transpose(-1, -2).conj()
        return {"A": a, "v": torch.angle(u[..., 0, :])}

    def phi(self, z: dict) -> torch.Tensor:
        _, vec = sorted_eigh(z["A"])
        u = canonical_phase(vec) * torch.exp(1j * z["v"].to(vec.real.dtype))[..., None, :]
        return self.from_unitaries(u)

    def noise(self, batch: int, g: torch.Generator, dtype=torch.float32) -> dict:
        n = self.n
        re = torch.randn(batch, n, n, generator=g, dtype=dtype)
        im = torch.randn(batch, n, n, generator=g, dtype=dtype)
        m = torch.complex(re, im) / math.sqrt(2.0)
        a = (m + m.transpose(-1, -2).conj()) / math.sqrt(2.0)  # GUE: E|A_ij|^2 = 1
        return {"A": a, "v": torch.randn(batch, n, generator=g, dtype=dtype)}

    def _gauge(self, k_off: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        # c_i = -Im sum_{j != i} K_ji U_0j / U_0i   (keeps the first row of V real)
        top = u[..., 0, :]
        s = (k_off * top[..., :, None]).sum(-2) / torch.where(top.abs() > 1e-12, top, torch.full_like(top, 1e-12))
        return -s.imag

    def targets(self, zt, mean, var, beta):
        """``(phi(z), drift_target, cov_target)`` from one eigendecomposition."""
        lam, vec = sorted_eigh(zt["A"])
        u = canonical_phase(vec) * torch.exp(1j * zt["v"].to(vec.real.dtype))[..., None, :]
        return (self.from_unitaries(u), self._drift(lam, u, zt, mean, var, beta),
                _upper(lam[..., :, None] - lam[..., None, :]))

    def drift_target(self, zt, mean, var, beta):
        lam, _ = sorted_eigh(zt["A"])
        return self._drift(lam, self.point(self.phi(zt)), zt, mean, var, beta)

    def _drift(self, lam, u, zt, mean, var, beta):
        b = beta[..., None] * (0.5 * zt["A"] - (zt["A"] - mean["A"]) / var[..., None])
        proj = u.transpose(-1, -2).conj() @ b @ u                  # [j, i] = u_j^* B u_i
        gap = (lam[..., None, :] - lam[..., :, None]).to(proj.dtype)
        k = proj / torch.where(gap.abs() > 0, gap, torch.ones_like(gap))
        k = k - torch.diag_embed(torch.diagonal(k, dim1=-2, dim2=-1))
        up = _upper(k)
        zw = zt["v"]
        dw = beta * (0.5 * zw - (zw - mean["v"]) / var)
        return torch.cat([up.real, up.imag, dw], -1)

    def cov_target(self, zt):
        lam = sorted_eigh(zt["A"])[0]
        return _upper(lam[..., :, None] - lam[..., None, :])

    def features(self, x):
        return x

    def _frame(self, upper: torch.Tensor, diag: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        k = _skew_from_upper(upper, self.n)
        c = self._gauge(k, u)
        return k + torch.diag_embed(1j * (diag + c).to(k.dtype))

    def step(self, x, drift, cov, beta, h, g):
        n, m = self.n, self.n_cov
        u = self.point(x)
        gaps = cov.clamp_min(1e-3)
        xr = torch.randn(x.shape[0], m, generator=g, dtype=x.dtype)
        xi = torch.randn(x.shape[0], m, generator=g, dtype=x.dtype)
        noise = torch.complex(xr, xi) / math.sqrt(2.0) * (torch.sqrt(beta * h) / gaps)
        upper = torch.complex(drift[..., :m], drift[..., m:2 * m]) * h + noise
        xw = torch.randn(x.shape[0], n, generator=g, dtype=x.dtype)
        diag = drift[..., 2 * m:] * h + torch.sqrt(beta * h) * xw
        u = u.to(torch.complex128)
        u = u @ torch.linalg.matrix_exp(self._frame(upper.to(torch.complex128), diag.double(), u))
        return self.from_unitaries(u).to(x.dtype)

    def embed(self, x):
        return x


MANIFOLDS = ("torus", "sphere", "so", "unitary")


def make_manifold(name: str, size: int):
    """The manifold ``name`` (``torus``, ``sphere``: ``size`` = d; ``so``, ``unitary``: n)."""
    if name == "torus":
        return Torus(size)
    if name == "sphere":
        return Sphere(size)
    if name == "so":
        return SpecialOrthogonal(size)
    if name == "unitary":
        return Unitary(size)
    raise ValueError(f"manifold must be one of {MANIFOLDS}, got {name!r}")


# --------------------------------------------------------------------------------------------
# data with known densities
# --------------------------------------------------------------------------------------------


def wrapped_normal_logpdf(x: np.ndarray, mean: np.ndarray, sigma2: float, images: int = 6) -> np.ndarray:
    """Log density on ``T^d`` of the wrapped normal ``N(mean, sigma2 I) mod 2 pi`` (image sum).

    The torus forward process started at ``x0`` has exactly this law with ``mean = a x0`` and
    ``sigma2`` its variance (paper, Section 2: the OU transition projected by ``mod 2 pi``).
    """
    x = np.asarray(x, dtype=np.float64)
    diff = (x - mean)[..., None] + TWO_PI * np.arange(-images, images + 1)
    per = np.log(np.exp(-diff ** 2 / (2 * sigma2)).sum(-1)) - 0.5 * np.log(2 * np.pi * sigma2)
    return per.sum(-1)


def _mixture_params(d: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, TWO_PI, size=(k, d))


def torus_mixture(d: int, n: int, seed: int, *, components: int = 4, sigma: float = 0.35,
                  params_seed: int = 12345) -> np.ndarray:
    """``n`` samples of an equal-weight wrapped Gaussian mixture on ``T^d`` (means fixed by
    ``params_seed``, the data draw by ``seed``)."""
    _check_int("d", d, 1), _check_int("n", n, 1), _check_int("components", components, 1)
    means = _mixture_params(d, components, params_seed)
    rng = np.random.default_rng(seed)
    idx = rng.integers(components, size=n)
    return np.remainder(means[idx] + sigma * rng.standard_normal((n, d)), TWO_PI)


def torus_mixture_logpdf(x: np.ndarray, d: int, *, components: int = 4, sigma: float = 0.35,
                         params_seed: int = 12345) -> np.ndarray:
    """The log density of ``torus_mixture`` at ``x``."""
    from scipy.special import logsumexp

    means = _mixture_params(d, components, params_seed)
    comp = np.stack([wrapped_normal_logpdf(x, m, sigma ** 2) for m in means], -1)
    return logsumexp(comp, axis=-1) - np.log(components)


def _vmf_means(d: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((k, d + 1))
    return m / np.linalg.norm(m, axis=-1, keepdims=True)


def vmf_mixture(d: int, n: int, seed: int, *, components: int = 4, kappa: float = 20.0,
                params_seed: int = 12345) -> np.ndarray:
    """``n`` samples of an equal-weight von Mises-Fisher mixture on ``S^d`` (scipy's sampler)."""
    from scipy.stats import vonmises_fisher

    means = _vmf_means(d, components, params_seed)
    rng = np.random.default_rng(seed)
    counts = np.bincount(rng.integers(components, size=n), minlength=components)
    parts = [vonmises_fisher(m, kappa).rvs(c, random_state=rng) for m, c in zip(means, counts) if c]
    out = np.concatenate(parts).reshape(n, d + 1)
    return out[rng.permutation(n)]


def vmf_mixture_logpdf(x: np.ndarray, d: int, *, components: int = 4, kappa: float = 20.0,
                       params_seed: int = 12345) -> np.ndarray:
    """The log density of ``vmf_mixture`` (w.r.t. the surface measure of ``S^d``)."""
    from scipy.special import logsumexp
    from scipy.stats import vonmises_fisher

    means = _vmf_means(d, components, params_seed)
    comp = np.stack([vonmises_fisher(m, kappa).logpdf(x) for m in means], -1)
    return logsumexp(comp, axis=-1) - np.log(components)


def so_mixture(n_mat: int, n: int, seed: int, *, components: int = 3, sigma: float = 0.3,
               params_seed: int = 12345) -> np.ndarray:
    """Wrapped Gaussian mixture on ``SO(n_mat)``: ``M_i expm(sigma * skew(xi))`` (the authors'
    README: a Gaussian in the Lie algebra pushed through the exponential map at each mean)."""
    from scipy.linalg import expm
    from scipy.stats import special_ortho_group

    _check_int("n_mat", n_mat, 2)
    means = special_ortho_group(n_mat).rvs(components, random_state=np.random.default_rng(params_seed))
    means = np.asarray(means).reshape(components, n_mat, n_mat)
    rng = np.random.default_rng(seed)
    idx = rng.integers(components, size=n)
    out = np.empty((n, n_mat, n_mat))
    iu = np.triu_indices(n_mat, 1)
    for i in range(n):
        s = np.zeros((n_mat, n_mat))
        s[iu] = sigma * rng.standard_normal(len(iu[0]))
        out[i] = means[idx[i]] @ expm(s - s.T)
    return out


def unitary_evolutions(n_mat: int, n: int, seed: int, *, t: float = 1.0, omega: tuple = (1.0, 3.0),
                       x0_sd: float = 0.3, length: float = 2.0) -> np.ndarray:
    """``exp(i H t)`` for random Hamiltonians ``H = -Laplacian_h + V_h`` of a quantum oscillator on
    ``n_mat`` grid points of ``[-length/2, length/2]``, ``V(x) = omega^2 (x - x0)^2 / 2`` with
    ``omega ~ U(omega)``, ``x0 ~ N(0, x0_sd^2)`` (the authors' README's U(n) data; grid and
    ranges assumed)."""
    from scipy.linalg import expm

    _check_int("n_mat", n_mat, 2)
    rng = np.random.default_rng(seed)
    grid = np.linspace(-length / 2, length / 2, n_mat)
    h = grid[1] - grid[0]
    lap = (np.diag(np.ones(n_mat - 1), 1) + np.diag(np.ones(n_mat - 1), -1) - 2 * np.eye(n_mat)) / h ** 2
    out = np.empty((n, n_mat, n_mat), dtype=np.complex128)
    for i in range(n):
        w = rng.uniform(*omega)
        x0 = x0_sd * rng.standard_normal()
        ham = -lap * (h ** 2 / 4) + np.diag(0.5 * w ** 2 * (grid - x0) ** 2)
        out[i] = expm(1j * t * ham)
    return out
