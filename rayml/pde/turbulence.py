"""Decaying two-dimensional incompressible turbulence: a pseudo-spectral vorticity solver and its
coarsening onto a staggered grid (the second task of ``staggered-pde``).

Yunfei Huang, David S. Greenberg, "Geometric and Physical Constraints Synergistically Enhance
Neural PDE Surrogates", ICML 2025: surrogates are trained on decaying incompressible turbulence,
simulated at high resolution and coarsened to a staggered grid.

Solver: ``d omega/dt + u . grad omega = nu lap omega`` on the periodic square ``[0, 2 pi]^2``
with the stream function ``psi`` (``lap psi = omega``, ``u = -d psi/dy``, ``v = d psi/dx``),
Fourier pseudo-spectral derivatives, 2/3-rule dealiasing of the product, classical RK4 with a
fixed step. Initial vorticity: random phases with the energy spectrum
``E(k) ~ k^4 exp(-2 (k/k0)^2)`` (peak wavenumber ``k0``), normalised to energy 1/2.

Coarsening (``coarsen``): ``psi`` is sampled at the corners of an ``n x n`` staggered grid and
the face velocities are the exact face averages, ``U_east = -(psi_NE - psi_SE)/dx`` and
``V_north = (psi_NE - psi_NW)/dx``, so the coarse field is exactly divergence-free and carries
the fine solution's exact fluxes. States use the ``(eta, U, V)`` layout of
``rayml.pde.shallow_water`` with ``eta = 0`` (there is no free surface).

Assumed (not read in the paper): the spectrum's shape, ``nu``, the resolution ratio and the
time steps.

Examples:
    >>> import numpy as np
    >>> from rayml.pde.turbulence import INSConfig, initial_vorticity, simulate_coarse
    >>> cfg = INSConfig(n_fine=32, n=8)
    >>> traj = simulate_coarse(initial_vorticity(cfg, np.random.default_rng(0)), cfg, frames=2)
    >>> traj.shape
    (3, 3, 8, 8)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["INSConfig", "initial_vorticity", "rhs", "rk4_step", "coarsen", "simulate_coarse",
           "stream_function", "divergence", "kinetic_energy"]


@dataclass(frozen=True)
class INSConfig:
    """Decaying turbulence on ``[0, 2 pi]^2``.

    Attributes:
        n_fine: solver resolution (a multiple of ``n``).
        n: coarse staggered grid cells per side.
        nu: kinematic viscosity.
        dt: RK4 step of the fine solver.
        stride: fine steps per coarse frame.
        k0: peak wavenumber of the initial energy spectrum.
    """

    n_fine: int = 64
    n: int = 16
    nu: float = 1e-3
    dt: float = 0.02
    stride: int = 10
    k0: float = 4.0

    def __post_init__(self):
        for name in ("n_fine", "n", "stride"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.n % 2 or self.n_fine % self.n:
            raise ValueError(f"n must be even and divide n_fine, got n={self.n}, n_fine={self.n_fine}")
        for name in ("nu", "dt", "k0"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        kmax = self.n_fine // 3
        if self.nu * kmax**2 * self.dt > 2.5:
            raise ValueError(f"dt={self.dt} is unstable for nu={self.nu}, n_fine={self.n_fine}")


def _wavenumbers(n: int):
    k = np.fft.fftfreq(n, d=1.0 / n)
    KX, KY = np.meshgrid(k, k, indexing="xy")   # [j, i]: KX varies along x (columns)
    return KX, KY


def stream_function(omega_hat: np.ndarray) -> np.ndarray:
    """``psi_hat`` with ``lap psi = omega`` (zero mean)."""
    KX, KY = _wavenumbers(omega_hat.shape[-1])
    k2 = KX**2 + KY**2
    k2[0, 0] = 1.0
    psi = -omega_hat / k2
    psi[..., 0, 0] = 0.0
    return psi


def initial_vorticity(cfg: INSConfig, rng: np.random.Generator, k0: float | None = None) -> np.ndarray:
    """A random vorticity field ``(n_fine, n_fine)`` with spectrum peaked at ``k0`` (default ``cfg.k0``)."""
    k0 = cfg.k0 if k0 is None else float(k0)
    if not math.isfinite(k0) or k0 <= 0:
        raise ValueError(f"k0 must be > 0, got {k0!r}")
    N = cfg.n_fine
    KX, KY = _wavenumbers(N)
    k = np.sqrt(KX**2 + KY**2)
    spec = k**4 * np.exp(-2.0 * (k / k0) ** 2)
    # energy E(k) at |k| is spread over ~2 pi k modes; |psi_hat|^2 k^2 ~ E(k)/k
    amp = np.sqrt(np.divide(spec, np.maximum(k, 1e-12) ** 3, out=np.zeros_like(spec), where=k > 0))
    psi_hat = amp * np.exp(2j * np.pi * rng.random((N, N)))
    psi = np.real(np.fft.ifft2(psi_hat))
    omega_hat = -(KX**2 + KY**2) * np.fft.fft2(psi)
    omega = np.real(np.fft.ifft2(omega_hat))
    e = kinetic_energy(omega)
    return omega * math.sqrt(0.5 / max(e, 1e-300))


def kinetic_energy(omega: np.ndarray) -> float:
    """Mean kinetic energy ``<u^2 + v^2>/2`` of a vorticity field."""
    N = omega.shape[-1]
    KX, KY = _wavenumbers(N)
    psi = stream_function(np.fft.fft2(omega))
    u = np.real(np.fft.ifft2(-1j * KY * psi))
    v = np.real(np.fft.ifft2(1j * KX * psi))
    return float(0.5 * np.mean(u**2 + v**2))


def rhs(omega_hat: np.ndarray, cfg: INSConfig) -> np.ndarray:
    """``-u . grad omega + nu lap omega`` in Fourier space, the product dealiased (2/3 rule)."""
    N = omega_hat.shape[-1]
    KX, KY = _wavenumbers(N)
    psi = stream_function(omega_hat)
    u = np.real(np.fft.ifft2(-1j * KY * psi))
    v = np.real(np.fft.ifft2(1j * KX * psi))
    wx = np.real(np.fft.ifft2(1j * KX * omega_hat))
    wy = np.real(np.fft.ifft2(1j * KY * omega_hat))
    adv = np.fft.fft2(u * wx + v * wy)
    keep = (np.abs(KX) < N / 3.0) & (np.abs(KY) < N / 3.0)
    return -adv * keep - cfg.nu * (KX**2 + KY**2) * omega_hat


def rk4_step(omega_hat: np.ndarray, cfg: INSConfig) -> np.ndarray:
    """One classical RK4 step of ``rhs``."""
    dt = cfg.dt
    k1 = rhs(omega_hat, cfg)
    k2 = rhs(omega_hat + 0.5 * dt * k1, cfg)
    k3 = rhs(omega_hat + 0.5 * dt * k2, cfg)
    k4 = rhs(omega_hat + dt * k3, cfg)
    return omega_hat + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def coarsen(omega: np.ndarray, cfg: INSConfig) -> np.ndarray:
    """The staggered coarse state ``(3, n, n)`` = ``(0, U, V)`` of a fine vorticity field: exact
    face-averaged velocities from ``psi`` at the coarse cell corners."""
    N, n = cfg.n_fine, cfg.n
    psi = np.real(np.fft.ifft2(stream_function(np.fft.fft2(omega))))
    r = N // n
    # fine point m sits at x = 2 pi m / N; the NE corner of coarse cell i is at x = 2 pi (i + 1) / n
    corners = np.roll(psi[::r, ::r], -1, axis=(0, 1))       # corners[j, i] = psi at NE corner of cell (j, i)
    dx = 2 * np.pi / n
    U = -(corners - np.roll(corners, 1, axis=0)) / dx        # NE - SE
    V = (corners - np.roll(corners, 1, axis=1)) / dx         # NE - NW
    return np.stack([np.zeros_like(U), U, V])


def divergence(state: np.ndarray) -> np.ndarray:
    """Discrete divergence (per cell, times ``dx``) of staggered states ``(..., 3, n, n)``, periodic."""
    U, V = state[..., 1, :, :], state[..., 2, :, :]
    return (U - np.roll(U, 1, axis=-1)) + (V - np.roll(V, 1, axis=-2))


def simulate_coarse(omega0: np.ndarray, cfg: INSConfig, frames: int) -> np.ndarray:
    """Run the fine solver from ``omega0`` and return the coarse states ``(frames + 1, 3, n, n)``."""
    omega0 = np.asarray(omega0, dtype=np.float64)
    if omega0.shape != (cfg.n_fine, cfg.n_fine):
        raise ValueError(f"omega0 must have shape ({cfg.n_fine}, {cfg.n_fine}), got {omega0.shape}")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 0:
        raise ValueError(f"frames must be an integer >= 0, got {frames!r}")
    w_hat = np.fft.fft2(omega0)
    out = [coarsen(omega0, cfg)]
    for _ in range(int(frames)):
        for _ in range(cfg.stride):
            w_hat = rk4_step(w_hat, cfg)
        w = np.real(np.fft.ifft2(w_hat))
        if not np.all(np.isfinite(w)):
            raise FloatingPointError("the turbulence solver blew up; lower dt")
        out.append(coarsen(w, cfg))
    return np.stack(out)
