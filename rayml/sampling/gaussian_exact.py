"""Exact output laws of the samplers in ``rayml.sampling.parallel`` on Gaussian targets.

On ``pi = N(0, diag(1 / lam))`` started from ``N(0, v0 I)`` every sampler is linear in its start
and its noise, and every sampler is rotation-equivariant, so coordinates evolve independently and
the output of ULA and of both Picard schemes is Gaussian with a variance computable in closed
form per eigenvalue. ``W2`` to the target then needs no samples:
``W2^2 = sum_i (sqrt(var_i) - 1 / sqrt(lam_i))^2`` (means stay 0). The randomized midpoint output
is a Gaussian mixture (random midpoints); for it we compute the exact second moment and report the
Gelbrich bound (the W2 of the moment-matched Gaussian), a lower bound on its true W2.

Algorithm 1 of Zhou & Sugiyama (ICML 2025) in coefficient form: each grid value is tracked as its
coefficients on ``x0`` and on the ``M`` standard-normal increments of one slice's Brownian path.
The response of the state (slice n, depth j) to the noise of slice n' equals the response of
(slice n - n', depth j) to the noise of slice 0 (every slice, and slice 0 at every depth, starts
from a point that does not depend on its own noise), so one table over (n, j) with ``M + 1``
coefficients gives the exact variance of ``x^j_{n,M}`` for every ``N <= N_max``, ``J <= J_max``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "spectrum",
    "w2_to_target",
    "ula_variance",
    "midpoint_second_moment",
    "picard_slice_map",
    "wavefront_tables",
    "wavefront_variance",
    "fine_grid_stationary_variance",
]


def spectrum(alpha: float, beta: float, dim: int, levels: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Target precisions ``lam`` (``min(dim, levels)`` values evenly spaced in ``[alpha, beta]``)
    and their multiplicities (summing to ``dim``, as equal as possible)."""
    if not (0 < alpha <= beta):
        raise ValueError(f"need 0 < alpha <= beta, got alpha={alpha}, beta={beta}")
    if dim < 1 or levels < 1:
        raise ValueError(f"dim and levels must be >= 1, got {dim}, {levels}")
    L = min(dim, levels)
    lam = np.linspace(alpha, beta, L) if L > 1 else np.array([beta])
    mult = np.full(L, dim // L) + (np.arange(L) < dim % L)
    return lam, mult.astype(float)


def w2_to_target(var: np.ndarray, lam: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """``W2`` between ``N(0, diag(var))`` and ``N(0, diag(1 / lam))``; ``var``'s last axis is the spectrum."""
    return np.sqrt(np.sum(mult * (np.sqrt(var) - 1.0 / np.sqrt(lam)) ** 2, axis=-1))


def ula_variance(lam: np.ndarray, v0: float, eta: float, steps: np.ndarray) -> np.ndarray:
    """Variance after ``steps`` ULA steps of size ``eta``: ``a^{2k} v0 + 2 eta (1 - a^{2k}) / (1 - a^2)``."""
    a2 = (1.0 - eta * lam) ** 2
    k = np.asarray(steps, dtype=float)[..., None]
    ak = a2 ** k
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = np.where(np.isclose(a2, 1.0), k, (1.0 - ak) / (1.0 - a2))
    return ak * v0 + 2.0 * eta * geo


def midpoint_second_moment(lam: np.ndarray, v0: float, eta: float, steps: np.ndarray) -> np.ndarray:
    """Second moment after ``steps`` randomized-midpoint steps (midpoint ``a ~ U(0, 1)``).

    One step maps ``y`` to ``A y + sqrt(2) ((1 - eta lam) W1 + W2)`` with
    ``A = 1 - eta lam + a eta^2 lam^2``, ``W1 ~ N(0, a eta)``, ``W2 ~ N(0, (1 - a) eta)``, so
    ``E y'^2 = E[A^2] E y^2 + eta ((1 - eta lam)^2 + 1)``.
    """
    b = 1.0 - eta * lam
    c = eta**2 * lam**2
    r = b**2 + b * c + c**2 / 3.0
    q = eta * (b**2 + 1.0)
    k = np.asarray(steps, dtype=float)[..., None]
    rk = r ** k
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = np.where(np.isclose(r, 1.0), k, (1.0 - rk) / (1.0 - r))
    return rk * v0 + q * geo


def picard_slice_map(lam: np.ndarray, h: float, grid: int, sweeps: int) -> tuple[np.ndarray, np.ndarray]:
    """One slice of the slice-by-slice Picard scheme: ``var' = a^2 var + e``; returns ``(a, e)``."""
    M, dt = int(grid), h / grid
    L = lam.shape[0]
    inject = _noise_injection(M, dt)                    # (M + 1, M + 1)
    start = np.zeros((L, M + 1))
    start[:, 0] = 1.0
    y = np.repeat(start[:, None, :], M + 1, axis=1)     # (L, M + 1 points, M + 1 coefs)
    for _ in range(sweeps):
        y = _sweep(y, start, lam, dt, inject)
    end = y[:, M]
    return end[:, 0], np.sum(end[:, 1:] ** 2, axis=-1)


def _noise_injection(M: int, dt: float) -> np.ndarray:
    # row m: coefficients of sqrt(2) Delta B_m on the slice's M standard-normal increments
    out = np.zeros((M + 1, M + 1))
    for m in range(1, M + 1):
        out[m, 1 : m + 1] = np.sqrt(2.0 * dt)
    return out


def _sweep(y: np.ndarray, start: np.ndarray, lam: np.ndarray, dt: float, inject: np.ndarray | None) -> np.ndarray:
    """Coefficient form of one Picard sweep; ``y``: (..., L, M + 1, C), ``start``: (..., L, C).

    ``x_m = x_0 - dt sum_{m' < m} lam x_{m'} + inject_m`` with ``inject`` ``None`` for a slice
    whose noise is not tracked. Written in place into a fresh array (this is the hot loop of the
    exact laws: a few large temporaries cost more than the arithmetic)."""
    M = y.shape[-2] - 1
    out = np.empty_like(y)
    out[..., 0, :] = start
    body = out[..., 1:, :]
    np.cumsum(y[..., :M, :], axis=-2, out=body)
    body *= (-dt * lam)[:, None, None]
    body += start[..., None, :]
    if inject is not None:
        body += inject[1:]
    return out


def wavefront_tables(lam: np.ndarray, h: float, grid: int, inner: int, slices: int, depth: int):
    """Algorithm 1 in coefficient form for every ``n < slices``, ``j <= depth``.

    Returns ``(A, E)``, both ``(slices, depth + 1, L)``: ``A[n, j]`` is the coefficient of ``x0`` in
    ``x^j_{n,M}`` and ``E[n, j]`` the variance that slice 0's noise contributes to it.
    """
    M, dt, N, J, P = int(grid), h / grid, int(slices), int(depth), int(inner)
    L = lam.shape[0]
    C = M + 1
    inject = _noise_injection(M, dt)
    x0 = np.zeros((L, C))
    x0[:, 0] = 1.0
    A = np.full((N, J + 1, L), np.nan)
    E = np.full((N, J + 1, L), np.nan)
    grid_ = np.empty((N, L, M + 1, C))
    ramp = (np.arange(M + 1) * dt)[None, :, None]
    start = x0
    for n in range(N):
        noise = inject if n == 0 else 0.0
        grid_[n] = start[:, None, :] + ramp * (-lam[:, None, None] * start[:, None, :]) + noise
        start = grid_[n, :, M]
        A[n, 0], E[n, 0] = start[:, 0], np.sum(start[:, 1:] ** 2, axis=-1)
    for k in range(1, N + J):
        ns = np.arange(max(0, k - J), min(N - 1, k - 1) + 1)
        starts = np.stack([x0 if n == 0 else grid_[n - 1, :, M] for n in ns])
        y = grid_[ns].copy()
        y[:, :, 0] = starts
        for _ in range(P):   # only slice 0 carries the tracked noise
            if ns[0] == 0:
                y0 = _sweep(y[:1], starts[:1], lam, dt, inject)
                rest = _sweep(y[1:], starts[1:], lam, dt, None) if len(ns) > 1 else y[1:]
                y = np.concatenate([y0, rest]) if len(ns) > 1 else y0
            else:
                y = _sweep(y, starts, lam, dt, None)
        grid_[ns] = y
        ends = y[:, :, M]
        A[ns, k - ns] = ends[..., 0]
        E[ns, k - ns] = np.sum(ends[..., 1:] ** 2, axis=-1)
    return A, E


def wavefront_variance(A: np.ndarray, E: np.ndarray, v0: float) -> np.ndarray:
    """Variance of ``x^j_{n,M}`` (the output with ``N = n + 1``, ``J = j``): ``A^2 v0 + sum_{r<=n} E[r, j]``."""
    return A**2 * v0 + np.cumsum(E, axis=0)


def fine_grid_stationary_variance(lam: np.ndarray, eta: float) -> np.ndarray:
    """Stationary variance of Euler-Maruyama / ULA with step ``eta``: ``1 / (lam (1 - eta lam / 2))``."""
    return 1.0 / (lam * (1.0 - eta * lam / 2.0))
