"""GS-PowerOpt: Gaussian smoothing with a power-transformed objective.

Chen Xu, "Global Optimization with a Power-Transformed Objective and Gaussian Smoothing",
ICML 2025 (PMLR 267:69189-69216; arXiv 2412.05204).

The method MAXIMISES ``f`` (minimise ``g`` by passing ``-g``, or use ``minimize``):

1. Power transform (paper, Sec. 2): ``f_N = exp(N f)`` (EPGS, the exponential power) or
   ``f_N = f^N`` (PGS; needs ``f > 0``).
2. Gaussian-smoothed surrogate: ``F_N(mu) = E_{x ~ N(mu, sigma^2 I)}[f_N(x)]``, whose maximiser
   lies within ``delta`` of ``argmax f`` for large enough ``N``.
3. Its gradient (the Gaussian-smoothing identity used by the paper's Algorithm 1):
   ``grad F_N(mu) = sigma^-2 E[(x - mu) f_N(x)] = sigma^-1 E[xi f_N(mu + sigma xi)]``, estimated
   from ``K`` Monte Carlo samples ``xi_k ~ N(0, I)``; stochastic gradient ascent
   ``mu_{k+1} = mu_k + alpha_k g_k``.

Details taken from the authors' released code: the gradient estimate is normalised to unit length
before the step; the step size decays as ``alpha_k = alpha_0 c / (c + k)`` with ``c = 1000`` for
EPGS and ``c = 5000`` for PGS; ``f(mu)`` is evaluated each iteration beside the ``K`` samples.
Assumed: the weights are computed relative to the largest sampled value (``exp(N (f - max f))``,
``(f / max f)^N``) rather than relative to ``f(mu)`` as in the authors' code; both are positive
rescalings of ``f_N``, so the normalised step is the same, and the max never overflows.

The ``K + 1`` evaluations of each iteration are one batch handed to an ``evaluator``: pass
``rayml.runtime.batch_evaluator(f)`` to spread an expensive black-box ``f`` over Ray tasks.

Examples:
    >>> import numpy as np
    >>> from rayml.optim.gs_poweropt import GSPowerOptConfig, maximize
    >>> res = maximize(lambda x: -np.sum((x - 1.0) ** 2, axis=-1), np.zeros(2),
    ...                GSPowerOptConfig(iterations=300, lr=0.05), seed=0)
    >>> bool(np.linalg.norm(res.x - 1.0) < 0.2)
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rayml.optim._zeroth_order import (
    Budget,
    Evaluator,
    Negated,
    OptimizeResult,
    check_positive,
    check_x0,
    finish,
    local_evaluator,
)

__all__ = [
    "GSPowerOptConfig",
    "OptimizeResult",
    "power_transform",
    "smoothed_gradient",
    "step_size",
    "maximize",
    "minimize",
]

TRANSFORMS = ("exp", "power")


@dataclass(frozen=True)
class GSPowerOptConfig:
    """Hyperparameters of GS-PowerOpt.

    Attributes:
        sigma: standard deviation of the Gaussian smoothing (> 0).
        power: the power ``N`` (> 0).
        transform: ``"exp"`` for EPGS (``exp(N f)``), ``"power"`` for PGS (``f^N``, ``f > 0``).
        samples: Monte Carlo samples ``K`` per iteration.
        lr: the initial step size ``alpha_0``.
        decay: ``c`` in ``alpha_k = alpha_0 c / (c + k)``; ``None`` takes the authors' value
            (1000 for EPGS, 5000 for PGS).
        normalize: normalise the gradient estimate to unit length (the authors' code does).
        iterations: number of updates of ``mu``.
    """

    sigma: float = 0.5
    power: float = 5.0
    transform: str = "exp"
    samples: int = 100
    lr: float = 0.1
    decay: float | None = None
    normalize: bool = True
    iterations: int = 1000

    def __post_init__(self):
        check_positive("sigma", self.sigma)
        check_positive("power", self.power)
        check_positive("samples", self.samples, integer=True)
        check_positive("lr", self.lr)
        check_positive("iterations", self.iterations, integer=True)
        if self.decay is not None:
            check_positive("decay", self.decay)
        if self.transform not in TRANSFORMS:
            raise ValueError(f"transform must be one of {TRANSFORMS}, got {self.transform!r}")


def power_transform(values: np.ndarray, power: float, transform: str = "exp") -> np.ndarray:
    """``f_N`` of the paper up to a positive factor: weights of the sampled values.

    Returns ``exp(N (f - max f))`` for ``"exp"`` and ``(f / max f)^N`` for ``"power"``; the
    factor ``exp(-N max f)`` (resp. ``max f^-N``) cancels when the gradient is normalised.

    Raises:
        ValueError: ``"power"`` with a value ``f <= 0`` (PGS needs a positive objective).
    """
    values = np.asarray(values, dtype=float)
    top = float(np.max(values))
    if transform == "exp":
        return np.exp(power * (values - top))
    if transform == "power":
        if np.any(values <= 0):
            raise ValueError("transform='power' (PGS) needs f > 0 at every sample; shift f or use 'exp'")
        return (values / top) ** power
    raise ValueError(f"transform must be one of {TRANSFORMS}, got {transform!r}")


def smoothed_gradient(xi: np.ndarray, weights: np.ndarray, sigma: float) -> np.ndarray:
    """Monte Carlo estimate ``sigma^-1 mean_k(xi_k w_k)`` of ``grad_mu E[w(mu + sigma xi)]``.

    With ``w = f_N`` evaluated at ``mu + sigma xi_k`` this is the unbiased estimator of
    ``grad F_N(mu) = sigma^-2 E[(x - mu) f_N(x)]``.
    """
    xi = np.asarray(xi, dtype=float)
    weights = np.asarray(weights, dtype=float)
    return (weights[:, None] * xi).mean(axis=0) / sigma


def step_size(k: int, lr: float, decay: float) -> float:
    """``alpha_k = alpha_0 c / (c + k)``, the decaying step of the authors' code."""
    return lr * decay / (decay + k)


def maximize(
    f: Callable,
    x0,
    config: GSPowerOptConfig = GSPowerOptConfig(),
    *,
    seed: int | np.random.Generator = 0,
    evaluator: Evaluator | None = None,
    max_evals: int | None = None,
) -> OptimizeResult:
    """Maximise ``f`` from ``x0`` with GS-PowerOpt (the paper's Algorithm 1, EPGS or PGS).

    Args:
        f: the objective; called on batches ``(K, d)`` if vectorised, else row by row.
        x0: the starting mean ``mu_0``, shape ``(d,)``.
        config: the hyperparameters.
        seed: an int or a ``numpy.random.Generator`` for the Gaussian samples.
        evaluator: evaluates a batch of points; default evaluates ``f`` in-process.
        max_evals: stop when the next iteration would exceed this many evaluations.

    Returns:
        ``OptimizeResult`` with the final ``mu``.

    Raises:
        ValueError: bad ``x0`` or config, ``f`` non-finite, or ``f <= 0`` with PGS.
    """
    mu = check_x0(x0)
    if not callable(f):
        raise TypeError("f must be callable")
    if max_evals is not None:
        check_positive("max_evals", max_evals, integer=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    budget = Budget(evaluator or local_evaluator(f), max_evals)
    decay = config.decay if config.decay is not None else (1000.0 if config.transform == "exp" else 5000.0)
    d, K = mu.size, int(config.samples)
    history, iterates = [], []
    for k in range(int(config.iterations)):
        if budget.remaining() < K + 2:  # keep one evaluation for the final iterate
            break
        xi = rng.standard_normal((K, d))
        values = budget(np.vstack([mu + config.sigma * xi, mu[None, :]]), k)
        history.append(values[K])
        iterates.append(mu)
        g = smoothed_gradient(xi, power_transform(values[:K], config.power, config.transform), config.sigma)
        if config.normalize:
            norm = float(np.linalg.norm(g))
            g = g / norm if norm > 0 else g
        mu = mu + step_size(k, config.lr, decay) * g
    return finish(mu, budget, history, iterates)


def minimize(f: Callable, x0, config: GSPowerOptConfig = GSPowerOptConfig(), **kwargs) -> OptimizeResult:
    """Minimise ``f`` by maximising ``-f`` with GS-PowerOpt; ``fun`` and ``history`` are of ``f``."""
    res = maximize(Negated(f), x0, config, **kwargs)
    return OptimizeResult(res.x, -res.fun, res.evals, res.iterations, -res.history, res.x_best)
