"""C-grid shallow water solver: exact conservation (periodic / closed), the linear dispersion
relation of the C-grid, the solver's own D4 symmetry, the staggered transform against a
point-by-point rotation of face positions and vectors, Parquet storage, determinism, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rayml.pde.shallow_water import (
    SWEConfig,
    discrete_dispersion,
    energy,
    initial_state,
    mass,
    momentum,
    read_trajectories_parquet,
    simulate,
    trajectories_to_parquet,
)
from rayml.pde.staggered_layers import group_elements, transform_state


@pytest.mark.parametrize("kind", ["bumps", "plateau"])
def test_periodic_solver_conserves_mass_and_momentum_to_round_off(kind):
    cfg = SWEConfig(n=16, boundary="periodic")
    x0 = initial_state(cfg, np.random.default_rng(3), kind)
    traj = simulate(x0, cfg, 20)
    m, p = mass(traj, cfg), momentum(traj, cfg)
    assert abs(p[0]).max() > 1e-3                  # a real drift: momentum is not trivially zero
    assert np.abs(m - m[0]).max() < 1e-14
    assert np.abs(p - p[0]).max() < 1e-14
    assert energy(traj, cfg)[-1] < energy(traj, cfg)[0]   # viscosity only removes energy
    assert np.abs(traj[-1] - traj[0]).max() > 1e-2       # and the state really evolved


def test_closed_basin_conserves_mass_keeps_walls_shut_and_momentum_is_not_conserved():
    cfg = SWEConfig(n=16, boundary="closed")
    x0 = initial_state(cfg, np.random.default_rng(4), "bumps")
    traj = simulate(x0, cfg, 20)
    m = mass(traj, cfg)
    assert np.abs(m - m[0]).max() < 1e-14
    assert np.all(traj[:, 1, :, -1] == 0) and np.all(traj[:, 2, -1, :] == 0)
    p = momentum(traj, cfg)
    assert np.abs(p - p[0]).max() > 1e-4          # the walls push: no momentum conservation here


def test_linear_gravity_wave_follows_the_c_grid_dispersion_relation():
    # eta = a cos(k x), at rest: eta(t) = a cos(k x) cos(omega t), omega = sqrt(gH) 2 sin(k dx/2)/dx.
    cfg = SWEConfig(n=16, boundary="periodic", nu=0.0, dt=0.005, stride=20)
    a, k = 1e-6, 2 * math.pi * 2
    x = (np.arange(cfg.n) + 0.5) * cfg.dx
    x0 = np.zeros((3, cfg.n, cfg.n))
    x0[0] = a * np.cos(k * x)[None, :]
    traj = simulate(x0, cfg, 10)
    t = np.arange(11) * cfg.dt * cfg.stride
    omega = discrete_dispersion(k, cfg)
    expected = a * np.cos(k * x)[None, None, :] * np.cos(omega * t)[:, None, None]
    err = np.abs(traj[:, 0] - expected).max() / a
    assert err < 1e-3
    wrong = a * np.cos(k * x)[None, None, :] * np.cos(k * t)[:, None, None]   # continuous omega = c k
    assert np.abs(traj[:, 0] - wrong).max() / a > 10 * err


@pytest.mark.parametrize("boundary", ["periodic", "closed"])
def test_solver_commutes_with_every_rotation_and_reflection_of_the_staggered_grid(boundary):
    cfg = SWEConfig(n=8, boundary=boundary)
    x0 = simulate(initial_state(cfg, np.random.default_rng(5)), cfg, 2)[-1]   # moving fluid in both cases
    end = simulate(x0, cfg, 3)[-1]
    for g in group_elements("p4m"):
        xg = transform_state(torch.tensor(x0), g, boundary).numpy()
        lhs = simulate(xg, cfg, 3)[-1]
        rhs = transform_state(torch.tensor(end), g, boundary).numpy()
        assert np.abs(lhs - rhs).max() < 1e-13, g


def _point_transform(x: np.ndarray, g, n: int) -> np.ndarray:
    """Reference: move every sample point (centres, east faces, north faces) by g about the
    domain centre, rotate / reflect the face vectors by g's matrix, and re-grid."""
    k, s = g
    rot = np.array([[0, -1], [1, 0]])
    mat = np.linalg.matrix_power(rot, k) @ (np.diag([1, -1]) if s else np.eye(2, dtype=int))
    c = n / 2.0
    out = np.zeros_like(x)
    for j in range(n):
        for i in range(n):
            # centre
            px, py = mat @ np.array([i + 0.5 - c, j + 0.5 - c])
            out[0, int(round(py + c - 0.5)), int(round(px + c - 0.5))] = x[0, j, i]
            # east face (U) and north face (V): the vector (U, 0) / (0, V) at its position
            for pos, vec in (((i + 1.0, j + 0.5), (x[1, j, i], 0.0)), ((i + 0.5, j + 1.0), (0.0, x[2, j, i]))):
                qx, qy = mat @ np.array([pos[0] - c, pos[1] - c])
                vx, vy = mat @ np.array(vec)
                qx, qy = (qx + c) % n, (qy + c) % n
                if abs(qx - round(qx)) < 1e-9:      # lands on a vertical face: x component, east face of cell qx-1
                    out[1, int(qy - 0.5), (int(round(qx)) - 1) % n] += vx
                else:                                # a horizontal face: y component, north face of cell qy-1
                    out[2, (int(round(qy)) - 1) % n, int(qx - 0.5)] += vy
    return out


def test_transform_state_matches_the_point_by_point_rotation_of_faces_and_vectors():
    n = 6
    rng = np.random.default_rng(6)
    x = rng.normal(size=(3, n, n))
    for g in group_elements("p4m"):
        ours = transform_state(torch.tensor(x), g, "periodic").numpy()
        assert np.allclose(ours, _point_transform(x, g, n), atol=1e-12), g


def test_trajectories_round_trip_through_parquet_with_their_parameters(tmp_path):
    cfg = SWEConfig(n=8)
    trajs = [simulate(initial_state(cfg, np.random.default_rng(s)), cfg, 2) for s in range(3)]
    params = [{"seed": s, "ic_kind": "bumps", "n": 8} for s in range(3)]
    trajectories_to_parquet(trajs, params, tmp_path / "d.parquet")
    back, meta = read_trajectories_parquet(tmp_path / "d.parquet")
    assert [m["seed"] for m in meta] == [0, 1, 2] and meta[0]["ic_kind"] == "bumps"
    assert all(np.array_equal(a, b) for a, b in zip(trajs, back))
    with pytest.raises(ValueError, match="params"):
        trajectories_to_parquet(trajs, params[:2], tmp_path / "e.parquet")


def test_the_same_seed_gives_the_same_trajectory():
    cfg = SWEConfig(n=8)
    a = simulate(initial_state(cfg, np.random.default_rng(9)), cfg, 3)
    b = simulate(initial_state(cfg, np.random.default_rng(9)), cfg, 3)
    c = simulate(initial_state(cfg, np.random.default_rng(10)), cfg, 3)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("kwargs,match", [
    (dict(n=7), "n must be"), (dict(n=2), "n must be"), (dict(boundary="open"), "boundary"),
    (dict(dt=0.2), "unstable"), (dict(nu=-1.0), "nu"), (dict(stride=0), "stride"), (dict(g=0.0), "g must"),
])
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SWEConfig(**kwargs)


def test_bad_state_and_kind_are_rejected():
    cfg = SWEConfig(n=8)
    with pytest.raises(ValueError, match="kind"):
        initial_state(cfg, np.random.default_rng(0), "vortex")
    with pytest.raises(ValueError, match="state must have shape"):
        simulate(np.zeros((3, 4, 4)), cfg, 1)
    with pytest.raises(ValueError, match="frames"):
        simulate(np.zeros((3, 8, 8)), cfg, -1)
