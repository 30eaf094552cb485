"""Pseudo-spectral decaying turbulence: the Taylor-Green closed form, energy decay, spectral
derivatives, and the exactly divergence-free coarsening onto the staggered grid."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rayml.pde.turbulence import (
    INSConfig,
    coarsen,
    divergence,
    initial_vorticity,
    kinetic_energy,
    rhs,
    simulate_coarse,
    stream_function,
)


def _grid(n):
    x = 2 * np.pi * np.arange(n) / n
    return np.meshgrid(x, x, indexing="xy")


def test_taylor_green_vortex_decays_as_the_closed_form():
    # omega = 2 sin x sin y is a steady Euler flow; with viscosity it decays as exp(-2 nu t).
    cfg = INSConfig(n_fine=32, n=8, nu=0.05, dt=0.01, stride=10)
    X, Y = _grid(32)
    w0 = 2 * np.sin(X) * np.sin(Y)
    traj = simulate_coarse(w0, cfg, 5)
    expected = coarsen(w0, cfg) * math.exp(-2 * cfg.nu * 5 * cfg.stride * cfg.dt)
    assert np.abs(traj[-1] - expected).max() < 1e-8


def test_stream_function_and_rhs_match_hand_derivatives():
    X, Y = _grid(16)
    psi = np.sin(2 * X) * np.cos(Y)
    omega = -(4 + 1) * psi                                    # lap psi
    got = np.real(np.fft.ifft2(stream_function(np.fft.fft2(omega))))
    assert np.allclose(got, psi, atol=1e-12)
    # u = -psi_y, v = psi_x; -u.grad(omega) for this psi, nu = 0 part only
    u, v = np.sin(2 * X) * np.sin(Y), 2 * np.cos(2 * X) * np.cos(Y)
    wx, wy = -5 * 2 * np.cos(2 * X) * np.cos(Y), 5 * np.sin(2 * X) * np.sin(Y)
    cfg = INSConfig(n_fine=16, n=8, nu=1e-3)
    expected = -(u * wx + v * wy) + cfg.nu * (-5 * omega)
    got = np.real(np.fft.ifft2(rhs(np.fft.fft2(omega), cfg)))
    assert np.allclose(got, expected, atol=1e-10)


def test_random_turbulence_decays_and_its_coarse_velocities_are_divergence_free_with_zero_momentum():
    cfg = INSConfig(n_fine=32, n=16, stride=5)
    w0 = initial_vorticity(cfg, np.random.default_rng(0))
    assert kinetic_energy(w0) == pytest.approx(0.5)
    traj = simulate_coarse(w0, cfg, 6)
    scale = np.abs(traj[:, 1:]).mean()
    assert np.abs(divergence(traj)).max() < 1e-12 * max(scale, 1.0)
    assert np.abs(traj[:, 1:].sum(axis=(-1, -2))).max() < 1e-10
    e = [float((traj[t, 1:] ** 2).mean()) for t in range(len(traj))]
    assert e[-1] < e[0] and np.abs(traj[-1] - traj[0]).max() > 0.1


def test_coarse_velocity_is_the_face_average_of_the_fine_velocity():
    # psi = sin(x) sin(2y): U on the east face x = (i+1) dx is the average of u = -psi_y over the face
    cfg = INSConfig(n_fine=64, n=8)
    X, Y = _grid(64)
    psi = np.sin(X) * np.sin(2 * Y)
    omega = -(1 + 4) * psi
    U = coarsen(omega, cfg)[1]
    dx = 2 * np.pi / 8
    i, j = 2, 5
    x_face = (i + 1) * dx
    exact = -(np.sin(x_face) * (np.sin(2 * (j + 1) * dx) - np.sin(2 * j * dx))) / dx
    assert U[j, i] == pytest.approx(exact, abs=1e-12)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=7, n_fine=14), "n must be even"), (dict(n=16, n_fine=40), "divide"), (dict(nu=-1.0), "nu"),
    (dict(dt=10.0), "unstable"), (dict(stride=0), "stride"),
])
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        INSConfig(**kwargs)


def test_bad_input_is_rejected():
    cfg = INSConfig(n_fine=16, n=8)
    with pytest.raises(ValueError, match="k0"):
        initial_vorticity(cfg, np.random.default_rng(0), k0=-1.0)
    with pytest.raises(ValueError, match="omega0"):
        simulate_coarse(np.zeros((8, 8)), cfg, 1)
