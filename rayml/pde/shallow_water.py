"""Shallow water equations on an Arakawa C-grid, periodic or closed: the training data of
``staggered-pde``.

Yunfei Huang, David S. Greenberg, "Geometric and Physical Constraints Synergistically Enhance
Neural PDE Surrogates", ICML 2025: the surrogates are trained on the shallow water equations
with closed boundaries on a staggered (C-)grid. This module is the reference solver.

Grid (``n x n`` square cells of side ``dx = length / n``; arrays indexed ``[j, i]`` = ``[y, x]``,
``y`` pointing north): the depth ``h`` sits at cell centres, the transport ``U = h u`` on the
*east* face of each cell and ``V = h v`` on its *north* face. With ``boundary="periodic"`` the
west face of cell ``i`` is the east face of cell ``i - 1`` (wrapping); with ``"closed"`` the
domain is a basin with walls: ``U[:, -1] = 0`` and ``V[-1, :] = 0`` (the east / north walls),
and the west / south walls are implicit zeros.

Equations (flux form, ``f = 0`` so the problem keeps the p4m symmetry of the square)::

    dh/dt = -(dU/dx + dV/dy)
    dU/dt = -d(U u)/dx - d(V u)/dy - g d(h^2/2)/dx + nu lap U
    dV/dt = -d(U v)/dx - d(V v)/dy - g d(h^2/2)/dy + nu lap V

Discretisation: every tendency is a difference of fluxes across cell (or face) boundaries, so
the domain sums of ``h`` (both boundaries) and of ``U``, ``V`` (periodic) are conserved to
round-off by each right-hand side and by every Runge-Kutta stage. The pressure term on a U-face
uses the face depth ``(h_E + h_W)/2`` times ``(h_E - h_W)``, which equals ``(h_E^2 - h_W^2)/2``
and telescopes. Advective fluxes: ``U u`` at cell centres, ``V u`` / ``U v`` at cell corners
(centred averages); walls are free-slip. Time: classical RK4 with a fixed ``dt``.

Assumed (the paper's appendix was not reachable): non-dimensional ``g = H = length = 1``, no
Coriolis or drag, a small Laplacian viscosity for stability at coarse resolution, initial
Gaussian bumps of the surface (plus, on the periodic domain, a random smooth flow with a mean
drift so that momentum is not trivially zero).

Examples:
    >>> import numpy as np
    >>> from rayml.pde.shallow_water import SWEConfig, initial_state, simulate
    >>> cfg = SWEConfig(n=16, boundary="closed")
    >>> traj = simulate(initial_state(cfg, np.random.default_rng(0)), cfg, frames=3)
    >>> traj.shape
    (4, 3, 16, 16)
    >>> bool(abs(traj[-1, 0].sum() - traj[0, 0].sum()) < 1e-10)
    True
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = [
    "BOUNDARIES",
    "IC_KINDS",
    "SWEConfig",
    "tendency",
    "rk4_step",
    "initial_state",
    "simulate",
    "mass",
    "momentum",
    "energy",
    "discrete_dispersion",
    "trajectories_to_parquet",
    "read_trajectories_parquet",
    "config_dict",
]

BOUNDARIES = ("periodic", "closed")
IC_KINDS = ("bumps", "plateau")


@dataclass(frozen=True)
class SWEConfig:
    """The shallow water problem.

    Attributes:
        n: cells per side (the grid is ``n x n``).
        boundary: ``"periodic"`` or ``"closed"`` (a walled basin).
        length: side of the square domain.
        g: gravity.
        depth: the mean depth ``H`` (``h = H + eta``).
        nu: Laplacian viscosity on the transports.
        dt: the RK4 time step.
        stride: RK4 steps per saved frame (the surrogate's time step is ``stride * dt``).
    """

    n: int = 32
    boundary: str = "periodic"
    length: float = 1.0
    g: float = 1.0
    depth: float = 1.0
    nu: float = 2e-3
    dt: float = 0.01
    stride: int = 5

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n < 4 or self.n % 2:
            raise ValueError(f"n must be an even integer >= 4, got {self.n!r}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, got {self.boundary!r}")
        for name in ("length", "g", "depth", "dt"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        if not isinstance(self.nu, (int, float)) or not math.isfinite(self.nu) or self.nu < 0:
            raise ValueError(f"nu must be a finite number >= 0, got {self.nu!r}")
        if isinstance(self.stride, bool) or not isinstance(self.stride, (int, np.integer)) or self.stride < 1:
            raise ValueError(f"stride must be an integer >= 1, got {self.stride!r}")
        dx = self.length / self.n
        # gravity waves (speed sqrt(g h), h up to ~1.5 H) and viscosity must both be resolved by RK4
        if self.dt * math.sqrt(self.g * 1.5 * self.depth) / dx > 1.0 or self.nu * self.dt / dx**2 > 0.3:
            raise ValueError(f"dt={self.dt} is unstable for n={self.n}, g={self.g}, depth={self.depth}, nu={self.nu}")

    @property
    def dx(self) -> float:
        return self.length / self.n


# --- neighbour shifts: value of the neighbour to the E / W / N / S of each cell (or face) -------

def _shift(a: np.ndarray, axis: int, step: int, periodic: bool, fill: str | float) -> np.ndarray:
    """``a`` shifted so that entry ``k`` holds ``a[k + step]`` along ``axis`` (``step`` = +-1)."""
    if periodic:
        return np.roll(a, -step, axis=axis)
    out = np.roll(a, -step, axis=axis)
    edge = [slice(None)] * a.ndim
    edge[axis] = -1 if step > 0 else 0
    edge = tuple(edge)
    out[edge] = a[edge] if fill == "edge" else fill
    return out


def tendency(h: np.ndarray, U: np.ndarray, V: np.ndarray, cfg: SWEConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The semi-discrete right-hand side ``(dh/dt, dU/dt, dV/dt)`` on the C-grid (flux form)."""
    per = cfg.boundary == "periodic"
    dx, g, nu = cfg.dx, cfg.g, cfg.nu

    def E(a, fill=0.0):
        return _shift(a, -1, +1, per, fill)

    def W(a, fill=0.0):
        return _shift(a, -1, -1, per, fill)

    def N(a, fill=0.0):
        return _shift(a, -2, +1, per, fill)

    def S(a, fill=0.0):
        return _shift(a, -2, -1, per, fill)

    h_u = 0.5 * (h + E(h, "edge"))          # depth at east faces
    h_v = 0.5 * (h + N(h, "edge"))          # depth at north faces
    u, v = U / h_u, V / h_v

    dh = -(U - W(U) + V - S(V)) / dx

    # U-momentum on east faces
    f_uu = 0.5 * (U + W(U)) * 0.5 * (u + W(u))              # at cell centres
    f_vu = 0.5 * (V + E(V)) * 0.5 * (u + N(u, "edge"))       # at NE corners (V carries u north)
    press_u = g * (E(h, "edge") ** 2 - h**2) / (2 * dx)
    lap_u = (E(U) + W(U) - 2 * U) + (N(U, "edge") + S(U, "edge") - 2 * U)
    dU = -(E(f_uu) - f_uu) / dx - (f_vu - S(f_vu)) / dx - press_u + nu * lap_u / dx**2

    # V-momentum on north faces
    f_vv = 0.5 * (V + S(V)) * 0.5 * (v + S(v))              # at cell centres
    f_uv = 0.5 * (U + N(U)) * 0.5 * (v + E(v, "edge"))       # at NE corners (U carries v east)
    press_v = g * (N(h, "edge") ** 2 - h**2) / (2 * dx)
    lap_v = (N(V) + S(V) - 2 * V) + (E(V, "edge") + W(V, "edge") - 2 * V)
    dV = -(N(f_vv) - f_vv) / dx - (f_uv - W(f_uv)) / dx - press_v + nu * lap_v / dx**2

    if not per:  # wall faces carry no flow
        dU[..., :, -1] = 0.0
        dV[..., -1, :] = 0.0
    return dh, dU, dV


def rk4_step(h, U, V, cfg: SWEConfig):
    """One classical RK4 step of ``tendency``; each stage conserves what the tendency conserves."""
    dt = cfg.dt
    k1 = tendency(h, U, V, cfg)
    k2 = tendency(*(x + 0.5 * dt * k for x, k in zip((h, U, V), k1)), cfg)
    k3 = tendency(*(x + 0.5 * dt * k for x, k in zip((h, U, V), k2)), cfg)
    k4 = tendency(*(x + dt * k for x, k in zip((h, U, V), k3)), cfg)
    return tuple(x + dt / 6.0 * (a + 2 * b + 2 * c + d) for x, a, b, c, d in zip((h, U, V), k1, k2, k3, k4))


def _centres(cfg: SWEConfig):
    c = (np.arange(cfg.n) + 0.5) * cfg.dx
    return np.meshgrid(c, c, indexing="xy")  # X[j, i] = x_i, Y[j, i] = y_j


def _dist(a: np.ndarray, b: float, cfg: SWEConfig) -> np.ndarray:
    d = a - b
    if cfg.boundary == "periodic":
        d = (d + 0.5 * cfg.length) % cfg.length - 0.5 * cfg.length
    return d


def initial_state(cfg: SWEConfig, rng: np.random.Generator, kind: str = "bumps") -> np.ndarray:
    """A random initial state ``(3, n, n)`` = ``(eta, U, V)`` with ``eta = h - H``.

    ``kind="bumps"`` (the training family): 1-3 Gaussian bumps of the surface, amplitude
    0.05-0.15 H, width 0.07-0.14 L. ``kind="plateau"`` (unseen initial conditions, after the
    paper's L-shaped test): a smoothed L-shaped plateau of height 0.1-0.15 H at a random place.
    On the periodic domain a random smooth rotational flow plus a mean drift is added; in the
    closed basin the fluid starts at rest.
    """
    if kind not in IC_KINDS:
        raise ValueError(f"kind must be one of {IC_KINDS}, got {kind!r}")
    X, Y = _centres(cfg)
    L = cfg.length
    eta = np.zeros((cfg.n, cfg.n))
    if kind == "bumps":
        for _ in range(int(rng.integers(1, 4))):
            x0, y0 = rng.uniform(0.2 * L, 0.8 * L, size=2)
            amp = rng.uniform(0.05, 0.15) * cfg.depth * rng.choice([-1.0, 1.0], p=[0.3, 0.7])
            w = rng.uniform(0.07, 0.14) * L
            eta += amp * np.exp(-(_dist(X, x0, cfg) ** 2 + _dist(Y, y0, cfg) ** 2) / (2 * w**2))
    else:
        x0, y0 = rng.uniform(0.25 * L, 0.5 * L, size=2)
        a, b = rng.uniform(0.25, 0.35) * L, rng.uniform(0.1, 0.14) * L
        s = 0.03 * L

        def box(xa, xb, ya, yb):
            sx = 0.5 * (np.tanh((X - xa) / s) - np.tanh((X - xb) / s))
            sy = 0.5 * (np.tanh((Y - ya) / s) - np.tanh((Y - yb) / s))
            return sx * sy

        shape = np.maximum(box(x0, x0 + a, y0, y0 + b), box(x0, x0 + b, y0, y0 + a))
        k = int(rng.integers(0, 4))  # a random orientation of the L
        eta = np.rot90(shape, k) * rng.uniform(0.1, 0.15) * cfg.depth
    h = cfg.depth + eta
    U = np.zeros_like(h)
    V = np.zeros_like(h)
    if cfg.boundary == "periodic":
        # random smooth stream function on corners -> divergence-free face velocities, plus a drift
        kx = np.fft.fftfreq(cfg.n, d=1.0 / cfg.n)
        KX, KY = np.meshgrid(kx, kx, indexing="xy")
        k2 = KX**2 + KY**2
        spec = (rng.normal(size=k2.shape) + 1j * rng.normal(size=k2.shape)) * np.exp(-k2 / 4.0)
        spec[0, 0] = 0.0
        psi = np.real(np.fft.ifft2(spec))
        psi *= 0.02 / max(np.abs(psi).max(), 1e-12) * cfg.length
        u = -(psi - np.roll(psi, 1, axis=0)) / cfg.dx   # psi at NE corners: u = -dpsi/dy
        v = (psi - np.roll(psi, 1, axis=1)) / cfg.dx    # v = dpsi/dx
        u += rng.uniform(-0.05, 0.05)
        v += rng.uniform(-0.05, 0.05)
        U = 0.5 * (h + np.roll(h, -1, axis=1)) * u
        V = 0.5 * (h + np.roll(h, -1, axis=0)) * v
    return np.stack([eta, U, V])


def simulate(state: np.ndarray, cfg: SWEConfig, frames: int) -> np.ndarray:
    """Integrate ``frames * cfg.stride`` RK4 steps from ``state`` (``(3, n, n)``: eta, U, V).

    Returns:
        ``(frames + 1, 3, n, n)`` float64: the initial state and every ``stride``-th step.
    """
    state = np.asarray(state, dtype=np.float64)
    if state.shape != (3, cfg.n, cfg.n):
        raise ValueError(f"state must have shape (3, {cfg.n}, {cfg.n}), got {state.shape}")
    if isinstance(frames, bool) or not isinstance(frames, (int, np.integer)) or frames < 0:
        raise ValueError(f"frames must be an integer >= 0, got {frames!r}")
    h, U, V = cfg.depth + state[0], state[1].copy(), state[2].copy()
    if cfg.boundary == "closed":
        U[:, -1] = 0.0
        V[-1, :] = 0.0
    out = [np.stack([h - cfg.depth, U, V])]
    for _ in range(int(frames)):
        for _ in range(cfg.stride):
            h, U, V = rk4_step(h, U, V, cfg)
        if not np.all(np.isfinite(h)) or h.min() <= 0:
            raise FloatingPointError("the shallow water solver blew up (h <= 0 or non-finite); lower dt")
        out.append(np.stack([h - cfg.depth, U, V]))
    return np.stack(out)


def mass(x: np.ndarray, cfg: SWEConfig) -> np.ndarray:
    """Total mass anomaly ``sum(eta) dx^2`` of states ``(..., 3, n, n)`` (conserved exactly)."""
    return np.asarray(x)[..., 0, :, :].sum(axis=(-1, -2)) * cfg.dx**2


def momentum(x: np.ndarray, cfg: SWEConfig) -> np.ndarray:
    """Total momentum ``(sum U, sum V) dx^2`` of states ``(..., 3, n, n)`` (conserved when periodic)."""
    x = np.asarray(x)
    return np.stack([x[..., 1, :, :].sum(axis=(-1, -2)), x[..., 2, :, :].sum(axis=(-1, -2))], axis=-1) * cfg.dx**2


def energy(x: np.ndarray, cfg: SWEConfig) -> np.ndarray:
    """Total energy ``sum(g eta^2/2 + (U^2 + V^2) / (2 H)) dx^2`` (linearised; decays with nu)."""
    x = np.asarray(x)
    e = 0.5 * cfg.g * x[..., 0, :, :] ** 2 + 0.5 * (x[..., 1, :, :] ** 2 + x[..., 2, :, :] ** 2) / cfg.depth
    return e.sum(axis=(-1, -2)) * cfg.dx**2


def discrete_dispersion(k: float, cfg: SWEConfig) -> float:
    """Angular frequency of a linear gravity wave ``cos(k x)`` on the C-grid (semi-discrete,
    inviscid): ``omega = sqrt(g H) * 2 sin(k dx / 2) / dx``."""
    return math.sqrt(cfg.g * cfg.depth) * 2.0 * math.sin(k * cfg.dx / 2.0) / cfg.dx


def trajectories_to_parquet(trajectories, params, path) -> None:
    """Store trajectories (each ``(T+1, 3, n, n)``) with their parameters as one Parquet file.

    One row per trajectory: the parameter columns (``params``: one dict per trajectory, e.g.
    seed, initial-condition kind, ``SWEConfig`` fields), ``shape`` and the float64 ``data``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    trajectories = [np.asarray(t, dtype=np.float64) for t in trajectories]
    if len(trajectories) != len(params):
        raise ValueError(f"params must have one entry per trajectory ({len(trajectories)}), got {len(params)}")
    cols: dict = {}
    for p in params:
        for k in p:
            cols.setdefault(k, [])
    for k in cols:
        cols[k] = [p.get(k) for p in params]
    cols["shape"] = [list(t.shape) for t in trajectories]
    cols["data"] = [t.ravel() for t in trajectories]
    pq.write_table(pa.table(cols), str(path))


def read_trajectories_parquet(path):
    """Read ``trajectories_to_parquet``'s file: ``(list of arrays, list of parameter dicts)``."""
    import pyarrow.parquet as pq

    rows = pq.read_table(str(path)).to_pylist()
    trajs = [np.asarray(r.pop("data"), dtype=np.float64).reshape(r.pop("shape")) for r in rows]
    return trajs, rows


def config_dict(cfg: SWEConfig) -> dict:
    """``cfg`` as a plain dict (for the Parquet parameter columns)."""
    return asdict(cfg)
