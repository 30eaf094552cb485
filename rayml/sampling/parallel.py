"""Parallel Picard sampling with O~(log d) adaptive rounds, and the samplers it is compared with.

Huanjian Zhou and Masashi Sugiyama, "Parallel Simulation for Log-concave Sampling and
Score-based Diffusion Models", ICML 2025 (PMLR 267; arXiv 2412.07435).

Target ``pi ∝ exp(-f)``; the samplers simulate overdamped Langevin ``dx = -grad f dt + sqrt(2) dB``
and take the score ``s = grad log pi = -grad f`` (a gradient of the log-density, vectorised over
rows: ``(K, d) -> (K, d)``). Every gradient query goes through an *evaluator* that receives the
whole batch of one adaptive round, so ``rayml.sampling.distributed.RayGradient`` can spread a
round over Ray tasks; ``SamplerInfo`` counts the rounds (sequential batches) and the queries.

Samplers (same blackjax-style interface: ``algo.init(position) -> SamplerState``,
``algo.step(seed, state) -> (SamplerState, SamplerInfo)``; one ``step`` runs the configured
schedule once, from ``state.position``; a position may hold many chains ``(chains, d)``):

* ``parallel_picard`` - the paper's Algorithm 1 (wavefront over time slices x Picard depth):
  N initial LMC rounds (lines 2-8), then the diagonals ``k = 1..N+J-1``; on a diagonal every
  active (slice n, depth j = k - n) starts from slice n-1's right end at depth j, warm-starts its
  grid from depth j-1 and runs P Picard sweeps (lines 9-26). Rounds ``N + P (N + J - 1)``, at
  most ``M N`` queries per chain and round (Theorem 4.2 counts ``N + P (N + J)``).
* ``picard_slices`` - the O~(log^2 d) baseline of Anari, Chewi & Vuong, "Fast parallel sampling
  under isoperimetry", COLT 2024 (arXiv 2401.09016), as described in Zhou & Sugiyama's technical
  overview: slices one after another, the whole grid of a slice initialised at its (final) left
  point, K Picard sweeps; rounds ``N K``.
* ``ula`` - the unadjusted Langevin algorithm (sequential; one round per step).
* ``randomized_midpoint`` - the randomized midpoint discretisation of overdamped Langevin
  (Shen & Lee, NeurIPS 2019; overdamped form of He, Balasubramanian & Erdogdu, 2020); two
  sequential rounds per step.

``theorem_schedule`` gives the parameters of Theorem 4.2 / Corollary 4.3, ``acv_theorem_schedule`` the
baseline's (Anari et al., Theorem 13, constants from a secondary summary), ``theorem_rounds`` both
prescribed round counts.

Details fixed here:
* The paper's phase-1 loop reads ``j = 1..min{k-1, J}`` (Algorithm 1, line 10); with it slice 0
  would never be updated in phase 1, so we use ``j = 1..min{k, J}``: each diagonal holds exactly
  the pairs with ``n + j = k``.
* Assumed: the Brownian values ``B_{nh + mh/M}`` of line 4 are one Brownian path: the increments
  ``Delta B_{n,m}`` are cumulative sums of ``m`` independent ``N(0, h/M I)`` steps (drawn once and
  shared by all depths), not independent draws per grid point as line 4 reads literally.
* Assumed: the score oracle is the exact gradient supplied by the user (``delta = 0``).
* The diffusion-model variant (the paper's Algorithm 2) is in ``rayml.sampling.diffusion``, from the
  main text's description (Appendix C.1 was not available).
* Checked line by line against the text of Algorithm 1 (time slicing, the anti-diagonal wavefront,
  the start point x^j_{n-1,M} at the same depth, the warm start from depth j-1, P sweeps per
  update, the sum over m' = 0..m-1 including s(x_{n,0})): no deviation beyond the two above.
  That the O~(log d) round count does not show at moderate d is a matter of constants: the
  wavefront costs about ``N (1 + 2P)`` rounds (``J >= N``) against ``N K`` for slice-by-slice
  Picard, so it needs fewer rounds only once the baseline's ``K`` exceeds about ``1 + 2P``.

Examples:
    >>> import numpy as np
    >>> from rayml.sampling.parallel import ParallelPicardConfig, parallel_picard
    >>> grad = lambda x: -x                      # standard normal target
    >>> algo = parallel_picard(grad, ParallelPicardConfig(slice_length=0.5, slices=8, grid=8,
    ...                                                    depth=12, inner=2))
    >>> state, info = algo.step(0, algo.init(np.zeros((2000, 3))))
    >>> info.rounds == 8 + 2 * (8 + 12 - 1)
    True
    >>> bool(abs(state.position.var() - 1.0) < 0.1)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

__all__ = [
    "SamplerState",
    "SamplerInfo",
    "SamplingAlgorithm",
    "ULAConfig",
    "RandomizedMidpointConfig",
    "PicardConfig",
    "ParallelPicardConfig",
    "TorchGradient",
    "ula",
    "randomized_midpoint",
    "picard_slices",
    "parallel_picard",
    "fine_grid_euler",
    "theorem_schedule",
    "acv_theorem_schedule",
    "theorem_rounds",
    "slice_noise",
]

GradientFn = Callable[[np.ndarray], np.ndarray]


class SamplerState(NamedTuple):
    """Positions of the chains, ``(chains, d)``."""

    position: np.ndarray


class SamplerInfo(NamedTuple):
    """What one ``step`` used.

    Attributes:
        rounds: adaptive rounds: sequential batches of gradient queries.
        grad_queries: gradient evaluations (points), over all chains.
        max_batch: the most queries in one round.
    """

    rounds: int
    grad_queries: int
    max_batch: int


class SamplingAlgorithm(NamedTuple):
    """``init(position) -> SamplerState`` and ``step(seed, state) -> (SamplerState, SamplerInfo)``."""

    init: Callable
    step: Callable


def _check_positive(name: str, value, integer: bool = False) -> None:
    if integer:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not (
        math.isfinite(value) and value > 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class ULAConfig:
    """Unadjusted Langevin: ``x <- x + step_size * grad log pi(x) + sqrt(2 step_size) xi``."""

    step_size: float
    steps: int

    def __post_init__(self):
        _check_positive("step_size", self.step_size)
        _check_positive("steps", self.steps, integer=True)


@dataclass(frozen=True)
class RandomizedMidpointConfig:
    """Randomized midpoint Langevin with step ``step_size`` for ``steps`` steps (2 rounds each)."""

    step_size: float
    steps: int

    def __post_init__(self):
        _check_positive("step_size", self.step_size)
        _check_positive("steps", self.steps, integer=True)


@dataclass(frozen=True)
class PicardConfig:
    """Slice-by-slice Picard (Anari, Chewi & Vuong 2024).

    Attributes:
        slice_length: ``h``, the length of a time slice.
        slices: ``N``, the number of slices (horizon ``N h``).
        grid: ``M``, grid points per slice (fine step ``h / M``).
        sweeps: ``K``, Picard sweeps per slice.
    """

    slice_length: float
    slices: int
    grid: int
    sweeps: int

    def __post_init__(self):
        _check_positive("slice_length", self.slice_length)
        _check_positive("slices", self.slices, integer=True)
        _check_positive("grid", self.grid, integer=True)
        _check_positive("sweeps", self.sweeps, integer=True)


@dataclass(frozen=True)
class ParallelPicardConfig:
    """The paper's Algorithm 1.

    Attributes:
        slice_length: ``h`` (Theorem 4.2: ``beta h = 0.1``).
        slices: ``N``, the number of time slices.
        grid: ``M``, grid points per slice.
        depth: ``J``, the Picard depth of the outer loop (Theorem 4.2: ``J - N >= O(log(d / eps^2))``).
        inner: ``P``, Picard sweeps per update (Theorem 4.2: ``P >= 2 log(kappa^3) + 4``).
    """

    slice_length: float
    slices: int
    grid: int
    depth: int
    inner: int = 1

    def __post_init__(self):
        _check_positive("slice_length", self.slice_length)
        _check_positive("slices", self.slices, integer=True)
        _check_positive("grid", self.grid, integer=True)
        _check_positive("depth", self.depth, integer=True)
        _check_positive("inner", self.inner, integer=True)

    @property
    def rounds(self) -> int:
        """Adaptive rounds of one run: ``N`` initial rounds and ``P`` per diagonal."""
        return self.slices + self.inner * (self.slices + self.depth - 1)


class TorchGradient:
    """``grad log pi`` of a torch-differentiable, row-vectorised log-density ``(K, d) -> (K,)``."""

    def __init__(self, log_density: Callable):
        if not callable(log_density):
            raise TypeError("log_density must be callable")
        self.log_density = log_density

    def __call__(self, points: np.ndarray) -> np.ndarray:
        import torch

        x = torch.tensor(np.asarray(points, dtype=float), dtype=torch.float64, requires_grad=True)
        value = self.log_density(x)
        (grad,) = torch.autograd.grad(value.sum(), x)
        return grad.detach().numpy()


class _Oracle:
    """Counts rounds and queries and checks every batch the evaluator returns."""

    def __init__(self, evaluate: GradientFn):
        self.evaluate = evaluate
        self.rounds = 0
        self.queries = 0
        self.max_batch = 0

    def __call__(self, points: np.ndarray) -> np.ndarray:
        grads = np.asarray(self.evaluate(points), dtype=float)
        if grads.shape != points.shape:
            raise ValueError(
                f"grad_log_density returned shape {grads.shape} for points of shape {points.shape} "
                f"(round {self.rounds + 1}); expected the same shape"
            )
        if not np.all(np.isfinite(grads)):
            raise FloatingPointError(
                f"grad_log_density returned non-finite values in round {self.rounds + 1}"
            )
        self.rounds += 1
        self.queries += points.shape[0]
        self.max_batch = max(self.max_batch, points.shape[0])
        return grads

    def info(self) -> SamplerInfo:
        return SamplerInfo(self.rounds, self.queries, self.max_batch)


def _seed_sequence(seed) -> np.random.SeedSequence:
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 or a numpy SeedSequence, got {seed!r}")
    return np.random.SeedSequence(int(seed))


def _as_positions(position, dim: int | None) -> np.ndarray:
    x = np.array(position, dtype=float)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] < 1 or x.shape[0] < 1:
        raise ValueError(f"position must have shape (d,) or (chains, d), got {np.shape(position)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"position has dimension {x.shape[1]}, but the sampler was built for dim={dim}")
    if not np.all(np.isfinite(x)):
        raise ValueError("position must be finite")
    return x


def _build(run: Callable, grad_log_density: GradientFn, config, config_type, evaluator, dim) -> SamplingAlgorithm:
    if not callable(grad_log_density):
        raise TypeError("grad_log_density must be callable")
    if not isinstance(config, config_type):
        raise TypeError(f"config must be a {config_type.__name__}, got {type(config).__name__}")
    if evaluator is not None and not callable(evaluator):
        raise TypeError("evaluator must be callable or None")
    if dim is not None:
        _check_positive("dim", dim, integer=True)
    evaluate = evaluator if evaluator is not None else grad_log_density

    def init(position) -> SamplerState:
        return SamplerState(_as_positions(position, dim))

    def step(seed, state: SamplerState):
        ss = _seed_sequence(seed)
        x0 = _as_positions(state.position, dim)
        oracle = _Oracle(evaluate)
        x = run(oracle, x0, config, ss)
        return SamplerState(x), oracle.info()

    return SamplingAlgorithm(init, step)


def slice_noise(ss: np.random.SeedSequence, slices: int, chains: int, grid: int, dim: int,
                slice_length: float) -> list[np.ndarray]:
    """``sqrt(2) Delta B_{n,m}`` for every slice: ``(chains, M + 1, d)`` arrays, row ``m = 0`` zero.

    One Brownian path on the fine grid (step ``h / M``): slice ``n`` uses its own child of ``ss``,
    so the Picard samplers and ``fine_grid_euler`` see the same path for the same seed.
    """
    dt = slice_length / grid
    out = []
    for child in ss.spawn(slices):
        xi = np.random.default_rng(child).standard_normal((chains, grid, dim))
        path = np.zeros((chains, grid + 1, dim))
        path[:, 1:] = np.sqrt(2.0 * dt) * np.cumsum(xi, axis=1)
        out.append(path)
    return out


def _run_ula(oracle: _Oracle, x: np.ndarray, cfg: ULAConfig, ss) -> np.ndarray:
    rng = np.random.default_rng(ss)
    eta = cfg.step_size
    for _ in range(cfg.steps):
        x = x + eta * oracle(x) + np.sqrt(2.0 * eta) * rng.standard_normal(x.shape)
    return x


def _run_midpoint(oracle: _Oracle, x: np.ndarray, cfg: RandomizedMidpointConfig, ss) -> np.ndarray:
    rng = np.random.default_rng(ss)
    eta = cfg.step_size
    for _ in range(cfg.steps):
        a = rng.uniform(size=(x.shape[0], 1))
        w1 = np.sqrt(a * eta) * rng.standard_normal(x.shape)          # B_{a eta}
        w2 = np.sqrt((1.0 - a) * eta) * rng.standard_normal(x.shape)  # B_eta - B_{a eta}
        mid = x + a * eta * oracle(x) + np.sqrt(2.0) * w1
        x = x + eta * oracle(mid) + np.sqrt(2.0) * (w1 + w2)
    return x


def _picard_sweep(oracle: _Oracle, start: np.ndarray, y: np.ndarray, noise: np.ndarray, dt: float) -> np.ndarray:
    """One Picard sweep on a batch of slices: ``y_m = a + dt sum_{m' < m} s(y_m') + sqrt(2) dB_m``.

    ``start``: ``(..., d)``; ``y``: ``(..., M + 1, d)`` with ``y[..., 0, :] = start``; all the
    ``M`` queries of every slice in the batch form one round.
    """
    d = y.shape[-1]
    grid = y.shape[-2] - 1
    g = oracle(y[..., :grid, :].reshape(-1, d)).reshape(y[..., :grid, :].shape)
    out = np.empty_like(y)
    out[..., 0, :] = start
    out[..., 1:, :] = start[..., None, :] + dt * np.cumsum(g, axis=-2) + noise[..., 1:, :]
    return out


def _run_picard_slices(oracle: _Oracle, x: np.ndarray, cfg: PicardConfig, ss, on_endpoint=None) -> np.ndarray:
    N, M, K, h = cfg.slices, cfg.grid, cfg.sweeps, cfg.slice_length
    noise = slice_noise(ss, N, x.shape[0], M, x.shape[1], h)
    for n in range(N):
        y = np.repeat(x[:, None, :], M + 1, axis=1)   # the whole grid starts at the slice's left point
        for _ in range(K):
            y = _picard_sweep(oracle, x, y, noise[n], h / M)
        x = y[:, M]
        if on_endpoint is not None:
            on_endpoint(n, x)
    return x


def _run_parallel_picard(oracle: _Oracle, x0: np.ndarray, cfg: ParallelPicardConfig, ss,
                         on_endpoint=None) -> np.ndarray:
    N, M, J, P, h = cfg.slices, cfg.grid, cfg.depth, cfg.inner, cfg.slice_length
    C, d = x0.shape
    dt = h / M
    noise = np.stack(slice_noise(ss, N, C, M, d, h))   # (N, C, M + 1, d)
    grid = np.empty((N, C, M + 1, d))
    # Lines 2-8: depth 0 by one LMC step of length m h / M from the previous slice's end.
    ramp = (np.arange(M + 1) * dt)[None, :, None]
    start = x0
    for n in range(N):
        g = oracle(start)
        grid[n] = start[:, None, :] + ramp * g[:, None, :] + noise[n]
        start = grid[n, :, M]
        if on_endpoint is not None:
            on_endpoint(n, 0, start)
    # Lines 9-26: the diagonals n + j = k, all active (n, j) at once, P sweeps each.
    for k in range(1, N + J):
        ns = np.arange(max(0, k - J), min(N - 1, k - 1) + 1)
        starts = np.empty((len(ns), C, d))
        for i, n in enumerate(ns):
            starts[i] = x0 if n == 0 else grid[n - 1, :, M]   # slice n-1 at depth j (diagonal k-1)
        y = grid[ns].copy()                                    # warm start: depth j-1
        y[:, :, 0] = starts
        for _ in range(P):
            y = _picard_sweep(oracle, starts, y, noise[ns], dt)
        grid[ns] = y
        if on_endpoint is not None:
            for i, n in enumerate(ns):
                on_endpoint(int(n), int(k - n), y[i, :, M])
    return grid[N - 1, :, M].copy()


def ula(grad_log_density: GradientFn, config: ULAConfig, *, evaluator: GradientFn | None = None,
        dim: int | None = None) -> SamplingAlgorithm:
    """Sequential unadjusted Langevin (one round, one query per chain, per step)."""
    return _build(_run_ula, grad_log_density, config, ULAConfig, evaluator, dim)


def randomized_midpoint(grad_log_density: GradientFn, config: RandomizedMidpointConfig, *,
                        evaluator: GradientFn | None = None, dim: int | None = None) -> SamplingAlgorithm:
    """Randomized midpoint Langevin: per step ``a ~ U(0, 1)``,
    ``x_mid = x + a eta s(x) + sqrt(2) B_{a eta}``, ``x' = x + eta s(x_mid) + sqrt(2) B_eta``."""
    return _build(_run_midpoint, grad_log_density, config, RandomizedMidpointConfig, evaluator, dim)


def picard_slices(grad_log_density: GradientFn, config: PicardConfig, *, evaluator: GradientFn | None = None,
                  dim: int | None = None) -> SamplingAlgorithm:
    """Anari-Chewi-Vuong parallel Langevin: slices in sequence, ``K`` Picard sweeps each (``N K`` rounds)."""
    return _build(_run_picard_slices, grad_log_density, config, PicardConfig, evaluator, dim)


def parallel_picard(grad_log_density: GradientFn, config: ParallelPicardConfig, *,
                    evaluator: GradientFn | None = None, dim: int | None = None) -> SamplingAlgorithm:
    """Zhou & Sugiyama's parallel Picard method (Algorithm 1), ``N + P (N + J - 1)`` rounds.

    Args:
        grad_log_density: ``grad log pi``, vectorised over rows ``(K, d) -> (K, d)``
            (``TorchGradient`` wraps a torch log-density).
        config: ``ParallelPicardConfig``.
        evaluator: evaluates the gradient on one round's batch (default: ``grad_log_density``
            itself; ``rayml.sampling.distributed.RayGradient`` spreads it over Ray).
        dim: if given, positions must have this dimension.
    """
    return _build(_run_parallel_picard, grad_log_density, config, ParallelPicardConfig, evaluator, dim)


def fine_grid_euler(grad_log_density: GradientFn, position, seed, *, slice_length: float, slices: int,
                    grid: int) -> np.ndarray:
    """Euler-Maruyama with step ``h / M`` on the same Brownian path as the Picard samplers.

    It is the fixed point both Picard schemes converge to (``N M`` sequential rounds).
    """
    x = _as_positions(position, None)
    noise = slice_noise(_seed_sequence(seed), slices, x.shape[0], grid, x.shape[1], slice_length)
    dt = slice_length / grid
    for n in range(slices):
        for m in range(grid):
            x = x + dt * grad_log_density(x) + (noise[n][:, m + 1] - noise[n][:, m])
    return x


def theorem_schedule(alpha: float, beta: float, dim: int, eps: float, kl0: float | None = None) -> ParallelPicardConfig:
    """Parameters of Theorem 4.2 with the initialisation bound of Corollary 4.3.

    ``beta h = 0.1``, ``M = ceil(kappa d / eps^2)``, ``N = ceil(10 kappa log(KL0 / eps^2))``,
    ``P = ceil(2 log(kappa^3) + 4)``, ``J = N + ceil(log(kappa KL0 + kappa^2 d / eps^2))`` with
    ``KL0 = (d / 2) log kappa`` (Corollary 4.3, start ``N(x*, I / beta)``) unless given.
    Assumed: natural logarithms; the ``N^3 kappa delta^2 h`` term of ``J - N`` dropped (exact
    gradients, ``delta = 0``); the O(.) constant of ``J - N`` equal to 1; ``N >= 1``.
    """
    _check_positive("alpha", alpha)
    _check_positive("beta", beta)
    _check_positive("dim", dim, integer=True)
    _check_positive("eps", eps)
    if alpha > beta:
        raise ValueError(f"alpha must be <= beta, got alpha={alpha}, beta={beta}")
    kappa = beta / alpha
    if kl0 is None:
        kl0 = dim / 2 * math.log(kappa)
    kl0 = max(float(kl0), eps**2 * math.e)   # keeps log(KL0 / eps^2) >= 1
    slices = max(1, math.ceil(10 * kappa * math.log(kl0 / eps**2)))
    depth = slices + max(1, math.ceil(math.log(kappa * kl0 + kappa**2 * dim / eps**2)))
    return ParallelPicardConfig(
        slice_length=0.1 / beta,
        slices=slices,
        grid=max(1, math.ceil(kappa * dim / eps**2)),
        depth=depth,
        inner=max(1, math.ceil(2 * math.log(kappa**3) + 4)),
    )


def acv_theorem_schedule(alpha: float, beta: float, dim: int, eps: float, kl0: float | None = None) -> PicardConfig:
    """Parameters of the slice-by-slice baseline (Anari, Chewi & Vuong 2024, Theorem 13, parallel LMC).

    ``beta h = 0.1``, ``M = ceil(7 max(kappa d / eps^2, kappa^2))``, ``K = ceil(2 + log M)`` sweeps per slice.
    Assumed: those constants come from a secondary summary of the COLT paper (not its text); ``N``
    equal to ``theorem_schedule``'s (the same Langevin horizon ``N h`` from the same ``KL0``).
    """
    ours = theorem_schedule(alpha, beta, dim, eps, kl0)
    kappa = beta / alpha
    grid = math.ceil(7 * max(kappa * dim / eps**2, kappa**2))
    return PicardConfig(slice_length=0.1 / beta, slices=ours.slices, grid=grid,
                        sweeps=math.ceil(2 + math.log(grid)))


def theorem_rounds(alpha: float, beta: float, dim: int, eps: float) -> dict:
    """Adaptive rounds the two theorems prescribe: ours ``N + P (N + J - 1)``, the baseline ``N K``."""
    ours = theorem_schedule(alpha, beta, dim, eps)
    acv = acv_theorem_schedule(alpha, beta, dim, eps)
    return {"ours": ours.rounds, "acv": acv.slices * acv.sweeps, "ours_config": ours, "acv_config": acv}
