"""Parallel Picard sampling for score-based diffusion models (the reverse SDE), and its baselines.

Huanjian Zhou and Masashi Sugiyama, "Parallel Simulation for Log-concave Sampling and
Score-based Diffusion Models", ICML 2025 (arXiv 2412.07435), Section 5 (Algorithm 2, Theorem 5.4).

Forward process (Eq. 1): the OU process ``dx = -x/2 dt + dB`` from the data law ``q_0``. Backward
process (Eqs. 2-3), in backward time ``tau = T - t``:
``dy = (y / 2 + s(T - tau, y)) dtau + dB``, ``y_0 ~ N(0, I)``, with ``s(t, x) ~ grad log q_t(x)``
(the user's score, vectorised: ``score(t, x)`` with ``t`` of shape ``(K,)`` and ``x`` of shape
``(K, d)``; forward times). The run stops early at forward time ``eta`` (backward time ``T - eta``).

Samplers (same interface as ``rayml.sampling.parallel``: ``algo.init``, ``algo.step(seed, state)``):

* ``parallel_diffusion`` - Algorithm 2 as the main text describes it: the same wavefront over
  (time slice, Picard depth) as Algorithm 1 (N initial rounds, then the anti-diagonals
  ``k = 1..N+J-1``), with ONE Picard sweep per update (``P = 1``), the exponential integrator inside
  every sweep, and a grid whose steps shrink towards the data end plus early stopping. Rounds
  ``N + (N + J - 1)`` (Theorem 5.4 counts ``2N + J``).
* ``picard_diffusion`` - the slice-by-slice Picard method for diffusion models (Chen, Ren, Ying &
  Rotskoff, "Accelerating Diffusion Models with Parallel Sampling: Inference at Sub-Linear Time
  Complexity", NeurIPS 2024), the O~(log^2 d) method the paper improves on, as the paper's technical
  overview describes the prior schemes: slices one after another, the grid of a slice initialised at
  its final left point, ``K`` exponential-integrator Picard sweeps; rounds ``N K``.
* ``sequential_diffusion`` - the sequential exponential integrator (SDE / DDPM-type) on the same grid:
  one round per grid step.

What was read: the main text (Sections 2.2, 3, 5.1-5.3, Theorem 5.4, Table 2). Appendix C.1
(Algorithm 2's pseudo-code) was NOT available, so these details are assumed:

* Assumed: the grid. Slices ``n = 0..N-2`` have length ``h`` (backward time) and ``M`` uniform steps;
  the last slice runs from forward time ``h`` down to ``eta`` with ``M`` geometric steps
  (``t_m = h (eta / h)^(m / M)``): "a shrinking step size discretization scheme towards the data end,
  and the early stopping technique" (Section 5.1). Horizon ``T = N h``.
* Assumed: the exponential integrator freezes the score on each grid step (Chen et al. 2023 form):
  ``y_m = e^{r_m/2} (a + sum_{m'<m} 2 (e^{-r_m'/2} - e^{-r_{m'+1}/2}) s_m'(y_m') + G_1 + ... + G_m)``
  with ``r`` the backward time from the slice start and ``G_i = int e^{-u/2} dB_u`` over step ``i``
  (independent, variance ``e^{-r_{i-1}} - e^{-r_i}``; one Brownian path shared by all depths).
* Assumed: the initialisation mirrors Algorithm 1 (lines 2-7): one exponential-integrator step from
  the previous slice's end, read at every grid point of the slice.
* Assumed: slice 0 starts from the same ``y_0`` at every depth; the wavefront's loop bounds as in
  ``rayml.sampling.parallel`` (every pair with ``n + j = k``).

Examples:
    >>> import numpy as np
    >>> from rayml.sampling.diffusion import DiffusionConfig, parallel_diffusion, gaussian_score
    >>> score = gaussian_score(np.array([0.5, 1.5]))      # data N(0, diag(0.5, 1.5))
    >>> algo = parallel_diffusion(score, DiffusionConfig(slices=10, grid=16, depth=13))
    >>> state, info = algo.step(0, algo.init(np.random.default_rng(0).standard_normal((4000, 2))))
    >>> info.rounds == 10 + 10 + 13 - 1
    True
    >>> bool(np.all(np.abs(state.position.var(0) / np.array([0.5, 1.5]) - 1) < 0.1))
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from rayml.sampling.parallel import (
    SamplerInfo,
    SamplerState,
    SamplingAlgorithm,
    _as_positions,
    _check_positive,
    _seed_sequence,
)

__all__ = [
    "DiffusionConfig",
    "diffusion_grid",
    "gaussian_score",
    "parallel_diffusion",
    "picard_diffusion",
    "sequential_diffusion",
    "diffusion_noise",
    "sequential_gaussian_law",
    "exact_output_law",
]

ScoreFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class DiffusionConfig:
    """Time grid and iteration counts of the diffusion samplers.

    Attributes:
        slices: ``N``; the horizon is ``T = N * slice_length``.
        grid: ``M``, steps per slice.
        depth: ``J`` (Algorithm 2: Picard depth; Theorem 5.4: ``J = O(N + log(N d / eps^2))``).
        sweeps: ``K``, Picard sweeps per slice of the slice-by-slice baseline.
        slice_length: ``h`` (Theorem 5.4: ``h = Theta(1)``; Remark 5.7: ``h`` must shrink like
            ``1 / L_s^2`` for a score with Lipschitz constant ``L_s``). Assumed default 0.5: with
            ``h = 1`` the wavefront's intermediate depths blow up by 10^4 on the Gaussian data of the
            tests before converging.
        early_stop: ``eta``, the forward time at which the run stops.
    """

    slices: int
    grid: int
    depth: int = 1
    sweeps: int = 1
    slice_length: float = 0.5
    early_stop: float = 1e-3

    def __post_init__(self):
        _check_positive("slices", self.slices, integer=True)
        _check_positive("grid", self.grid, integer=True)
        _check_positive("depth", self.depth, integer=True)
        _check_positive("sweeps", self.sweeps, integer=True)
        _check_positive("slice_length", self.slice_length)
        _check_positive("early_stop", self.early_stop)
        if self.early_stop >= self.slice_length:
            raise ValueError(f"early_stop must be < slice_length, got {self.early_stop} >= {self.slice_length}")

    @property
    def horizon(self) -> float:
        """``T = N h``."""
        return self.slices * self.slice_length


def diffusion_grid(config: DiffusionConfig) -> np.ndarray:
    """Forward times of every grid point, ``(N, M + 1)``, decreasing from ``T`` to ``eta``.

    Slices ``0..N-2``: uniform steps of ``h / M``; the last slice: geometric steps from ``h`` to ``eta``.
    """
    N, M, h = config.slices, config.grid, config.slice_length
    out = np.empty((N, M + 1))
    frac = np.arange(M + 1) / M
    for n in range(N - 1):
        out[n] = (N - n) * h - frac * h
    out[N - 1] = h * (config.early_stop / h) ** frac
    return out


def gaussian_score(data_variance: np.ndarray, data_mean=0.0) -> ScoreFn:
    """Exact score of the OU marginals of data ``N(mu, diag(v))``:
    ``grad log q_t(x) = -(x - mu e^{-t/2}) / (v e^{-t} + 1 - e^{-t})``."""
    v = np.asarray(data_variance, dtype=float)
    mu = np.broadcast_to(np.asarray(data_mean, dtype=float), v.shape)

    def score(t: np.ndarray, x: np.ndarray) -> np.ndarray:
        e = np.exp(-np.asarray(t, dtype=float))[:, None]
        return -(x - mu * np.sqrt(e)) / (v * e + 1.0 - e)

    return score


class _ScoreOracle:
    """Counts rounds and queries and checks every batch the score returns."""

    def __init__(self, score: ScoreFn):
        self.score = score
        self.rounds = self.queries = self.max_batch = 0

    def __call__(self, t: np.ndarray, x: np.ndarray) -> np.ndarray:
        out = np.asarray(self.score(t, x), dtype=float)
        if out.shape != x.shape:
            raise ValueError(f"score returned shape {out.shape} for points of shape {x.shape}; expected the same")
        if not np.all(np.isfinite(out)):
            raise FloatingPointError(f"score returned non-finite values in round {self.rounds + 1}")
        self.rounds += 1
        self.queries += x.shape[0]
        self.max_batch = max(self.max_batch, x.shape[0])
        return out

    def info(self) -> SamplerInfo:
        return SamplerInfo(self.rounds, self.queries, self.max_batch)


def diffusion_noise(ss: np.random.SeedSequence, slices: int, chains: int, grid: int, dim: int) -> np.ndarray:
    """Standard normals ``(N, chains, M, d)``: slice ``n`` from its own child of ``ss``."""
    return np.stack([np.random.default_rng(c).standard_normal((chains, grid, dim)) for c in ss.spawn(slices)])


class _Slices:
    """Per-slice exponential-integrator weights: ``y_m = e^{r_m/2} (a + cumsum(w s)_{m-1} + W_m)``."""

    def __init__(self, config: DiffusionConfig):
        self.times = diffusion_grid(config)                       # forward times (N, M + 1)
        r = self.times[:, :1] - self.times                        # backward time from slice start
        self.grow = np.exp(r / 2.0)                               # e^{r_m / 2}
        self.w = 2.0 * (np.exp(-r[:, :-1] / 2.0) - np.exp(-r[:, 1:] / 2.0))   # (N, M)
        self.g_sd = np.sqrt(np.exp(-r[:, :-1]) - np.exp(-r[:, 1:]))          # sd of G_i, (N, M)

    def paths(self, xi: np.ndarray) -> np.ndarray:
        """``W_m = G_1 + ... + G_m`` from standard normals ``xi`` ``(N, C, M, d)``: ``(N, C, M + 1, d)``."""
        N, C, M, d = xi.shape
        out = np.zeros((N, C, M + 1, d))
        out[:, :, 1:] = np.cumsum(self.g_sd[:, None, :, None] * xi, axis=2)
        return out


def _sweep(oracle, sl: _Slices, ns: np.ndarray, starts: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """One exponential-integrator Picard sweep of slices ``ns`` (one round).

    ``starts``: ``(S, C, d)``; ``y``, ``W``: ``(S, C, M + 1, d)``.
    """
    S, C, M1, d = y.shape
    M = M1 - 1
    t = np.broadcast_to(sl.times[ns, None, :M], (S, C, M)).reshape(-1)
    s = oracle(t, y[:, :, :M].reshape(-1, d)).reshape(S, C, M, d)
    acc = np.zeros_like(y)
    acc[:, :, 1:] = np.cumsum(sl.w[ns, None, :, None] * s, axis=2)
    out = sl.grow[ns, None, :, None] * (starts[:, :, None, :] + acc + W)
    return out


def _run_parallel(oracle, y0: np.ndarray, cfg: DiffusionConfig, xi: np.ndarray, on_endpoint=None) -> np.ndarray:
    N, M, J = cfg.slices, cfg.grid, cfg.depth
    C, d = y0.shape
    sl = _Slices(cfg)
    W = sl.paths(xi)
    grid = np.empty((N, C, M + 1, d))
    # initialisation: one exponential-integrator step from the previous slice's end (N rounds)
    start = y0
    for n in range(N):
        s = oracle(np.full(C, sl.times[n, 0]), start)
        r_w = 2.0 * (1.0 - 1.0 / sl.grow[n])                                # 2 (1 - e^{-r_m/2})
        grid[n] = sl.grow[n][None, :, None] * (start[:, None, :] + r_w[None, :, None] * s[:, None, :] + W[n])
        start = grid[n, :, M]
        if on_endpoint is not None:
            on_endpoint(n, 0, start)
    # the wavefront, one sweep per update (P = 1)
    for k in range(1, N + J):
        ns = np.arange(max(0, k - J), min(N - 1, k - 1) + 1)
        starts = np.stack([y0 if n == 0 else grid[n - 1, :, M] for n in ns])
        y = grid[ns].copy()
        y[:, :, 0] = starts
        y = _sweep(oracle, sl, ns, starts, y, W[ns])
        grid[ns] = y
        if on_endpoint is not None:
            for i, n in enumerate(ns):
                on_endpoint(int(n), int(k - n), y[i, :, M])
    return grid[N - 1, :, M].copy()


def _run_slices(oracle, y0: np.ndarray, cfg: DiffusionConfig, xi: np.ndarray) -> np.ndarray:
    N, M, K = cfg.slices, cfg.grid, cfg.sweeps
    sl = _Slices(cfg)
    W = sl.paths(xi)
    x = y0
    for n in range(N):
        ns = np.array([n])
        y = np.repeat(x[None, :, None, :], M + 1, axis=2)
        for _ in range(K):
            y = _sweep(oracle, sl, ns, x[None], y, W[ns])
        x = y[0, :, M]
    return x


def _run_sequential(oracle, y0: np.ndarray, cfg: DiffusionConfig, xi: np.ndarray) -> np.ndarray:
    sl = _Slices(cfg)
    W = sl.paths(xi)
    x = y0
    C = x.shape[0]
    for n in range(cfg.slices):
        for m in range(cfg.grid):
            s = oracle(np.full(C, sl.times[n, m]), x)
            # one step from grid point m: the sweep formula restricted to its last term
            x = (sl.grow[n, m + 1] / sl.grow[n, m]) * x + sl.grow[n, m + 1] * (
                sl.w[n, m] * s + W[n, :, m + 1] - W[n, :, m])
    return x


def _builder(run):
    def build(score: ScoreFn, config: DiffusionConfig, *, dim: int | None = None) -> SamplingAlgorithm:
        if not callable(score):
            raise TypeError("score must be callable")
        if not isinstance(config, DiffusionConfig):
            raise TypeError(f"config must be a DiffusionConfig, got {type(config).__name__}")
        if dim is not None:
            _check_positive("dim", dim, integer=True)

        def init(position) -> SamplerState:
            return SamplerState(_as_positions(position, dim))

        def step(seed, state: SamplerState):
            y0 = _as_positions(state.position, dim)
            xi = diffusion_noise(_seed_sequence(seed), config.slices, y0.shape[0], config.grid, y0.shape[1])
            oracle = _ScoreOracle(score)
            return SamplerState(run(oracle, y0, config, xi)), oracle.info()

        return SamplingAlgorithm(init, step)

    return build


_parallel = _builder(_run_parallel)
_slices = _builder(_run_slices)
_sequential = _builder(_run_sequential)


def parallel_diffusion(score: ScoreFn, config: DiffusionConfig, *, dim: int | None = None) -> SamplingAlgorithm:
    """Algorithm 2 (wavefront, ``P = 1``, exponential integrator): ``N + (N + J - 1)`` rounds.

    ``init(position)`` takes the backward start ``y_0`` (draws of ``N(0, I)``); ``step`` returns the
    sample at forward time ``eta``.
    """
    return _parallel(score, config, dim=dim)


def picard_diffusion(score: ScoreFn, config: DiffusionConfig, *, dim: int | None = None) -> SamplingAlgorithm:
    """Slice-by-slice Picard (Chen et al. 2024 as the paper describes it): ``N K`` rounds."""
    return _slices(score, config, dim=dim)


def sequential_diffusion(score: ScoreFn, config: DiffusionConfig, *, dim: int | None = None) -> SamplingAlgorithm:
    """Sequential exponential integrator on the same grid: ``N M`` rounds."""
    return _sequential(score, config, dim=dim)


def sequential_gaussian_law(data_variance: np.ndarray, config: DiffusionConfig, v0: float = 1.0,
                            data_mean=0.0) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form output mean and variance of ``sequential_diffusion`` for data ``N(mu, diag(v))``,
    start ``N(0, v0 I)``. One step of length ``D`` at forward time ``t``: ``y' = c y + b + noise``,
    ``c = e^{D/2} - w / v_t``, ``b = w mu e^{-t/2} / v_t``, ``w = 2 (e^{D/2} - 1)``, noise variance
    ``e^{D} - 1``."""
    v = np.asarray(data_variance, dtype=float)
    mu = np.broadcast_to(np.asarray(data_mean, dtype=float), v.shape)
    times = diffusion_grid(config)
    var, mean = np.full_like(v, v0), np.zeros_like(v)
    for n in range(config.slices):
        for m in range(config.grid):
            t, D = times[n, m], times[n, m] - times[n, m + 1]
            vt = v * math.exp(-t) + 1.0 - math.exp(-t)
            w = 2.0 * (math.exp(D / 2) - 1.0)
            c = math.exp(D / 2) - w / vt
            mean = c * mean + w * mu * math.exp(-t / 2) / vt
            var = c * c * var + math.expm1(D)
    return mean, var


def exact_output_law(method: str, data_variance: np.ndarray, config: DiffusionConfig, v0: float = 1.0,
                     data_mean=0.0, depths: bool = False):
    """Exact output mean and variance per coordinate on Gaussian data, by running the sampler itself.

    With the affine score of ``gaussian_score`` every sampler is affine in ``(y_0, xi)``: the run with
    ``y_0 = 0, xi = 0`` gives the offset ``b`` (the mean), the run with ``y_0 = 1, xi = 0`` gives
    ``A + b``, and one chain per noise variable (``xi = e_i``) gives ``c_i + b``; the variance is
    ``A^2 v0 + sum_i c_i^2``. ``method``: ``"parallel"`` (with ``depths=True`` it returns
    ``{j: (mean, variance)}`` for every depth ``j <= J`` of the last slice), ``"slices"`` or
    ``"sequential"``.
    """
    v = np.asarray(data_variance, dtype=float)
    N, M, d = config.slices, config.grid, v.size
    C = 2 + N * M
    y0 = np.zeros((C, d))
    y0[1] = 1.0
    xi = np.zeros((N, C, M, d))
    idx = np.arange(N * M)
    xi[idx // M, 2 + idx, idx % M, :] = 1.0
    oracle = _ScoreOracle(gaussian_score(v, data_mean))

    def law(out):
        b = out[0]
        return b, (out[1] - b) ** 2 * v0 + np.sum((out[2:] - b) ** 2, axis=0)

    if method == "parallel":
        if not depths:
            return law(_run_parallel(oracle, y0, config, xi))
        seen = {}

        def keep(n, j, x):
            if n == N - 1:
                seen[j] = law(x)

        _run_parallel(oracle, y0, config, xi, keep)
        return seen
    if method == "slices":
        return law(_run_slices(oracle, y0, config, xi))
    if method == "sequential":
        return law(_run_sequential(oracle, y0, config, xi))
    raise ValueError(f"method must be 'parallel', 'slices' or 'sequential', got {method!r}")
