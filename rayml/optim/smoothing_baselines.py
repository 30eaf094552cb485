"""The baselines GS-PowerOpt is compared with: plain Gaussian smoothing, Gaussian homotopy
(double loop and single loop), and CMA-ES. All MAXIMISE ``f`` and share GS-PowerOpt's batch
evaluator interface, so every method can spend the same number of evaluations.

* ``gaussian_smoothing``: zeroth-order gradient ascent on ``E[f(mu + sigma xi)]`` with a fixed
  ``sigma`` (the ZO-SGD family; Nesterov & Spokoiny 2017), gradient estimate
  ``sigma^-1 mean_k((f(mu + sigma xi_k) - f(mu)) xi_k)``.
* ``gaussian_homotopy``: the standard (double-loop) Gaussian homotopy / graduated continuation
  (Hazan, Levy & Shalev-Shwartz 2016; Mobahi & Fisher 2015): an outer loop shrinks
  ``sigma_j = sigma_0 gamma^j`` and an inner loop ascends the smoothed ``f`` at ``sigma_j``.
* ``zo_slgh``: the zeroth-order single-loop Gaussian homotopy (Iwakiri et al., NeurIPS 2022):
  one ascent step per iteration while ``sigma`` shrinks every iteration.
  Assumed: the variant with a fixed decrease factor ``sigma_{k+1} = max(gamma sigma_k,
  sigma_min)`` (their SLGH with decreasing ``t``), not the derivative-driven ``t`` update.
* ``cma_es``: CMA-ES (Hansen) from the ``cma`` package, population size ``K``.

Assumed for the comparison: the smoothing baselines take GS-PowerOpt's step (normalised
gradient, ``alpha_0 c / (c + k)``) so that the comparison isolates the objective transform
and the smoothing schedule; ``normalize=False`` gives the raw ZO-SGD step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rayml.optim._zeroth_order import (
    Budget,
    Evaluator,
    OptimizeResult,
    check_positive,
    check_x0,
    finish,
    local_evaluator,
)
from rayml.optim.gs_poweropt import smoothed_gradient, step_size

__all__ = ["SmoothingConfig", "gaussian_smoothing", "gaussian_homotopy", "zo_slgh", "cma_es"]


@dataclass(frozen=True)
class SmoothingConfig:
    """Hyperparameters of the smoothing baselines.

    Attributes:
        sigma: the smoothing scale (the starting scale for the homotopies).
        sigma_min: the final scale of the homotopies.
        stages: outer stages of the double-loop homotopy.
        samples: Monte Carlo samples ``K`` per iteration.
        lr, decay, normalize: the step, as in ``GSPowerOptConfig``.
        iterations: total ascent steps (over all stages).
    """

    sigma: float = 0.5
    sigma_min: float = 0.01
    stages: int = 5
    samples: int = 100
    lr: float = 0.1
    decay: float = 1000.0
    normalize: bool = True
    iterations: int = 1000

    def __post_init__(self):
        for name in ("sigma", "sigma_min", "lr", "decay"):
            check_positive(name, getattr(self, name))
        for name in ("stages", "samples", "iterations"):
            check_positive(name, getattr(self, name), integer=True)
        if self.sigma_min > self.sigma:
            raise ValueError(f"sigma_min must be <= sigma, got {self.sigma_min} > {self.sigma}")


def _ascend(f, x0, config, sigmas: Callable[[int], float], seed, evaluator, max_evals) -> OptimizeResult:
    mu = check_x0(x0)
    if max_evals is not None:
        check_positive("max_evals", max_evals, integer=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    budget = Budget(evaluator or local_evaluator(f), max_evals)
    K, history, iterates = int(config.samples), [], []
    for k in range(int(config.iterations)):
        if budget.remaining() < K + 2:
            break
        sigma = sigmas(k)
        xi = rng.standard_normal((K, mu.size))
        values = budget(np.vstack([mu + sigma * xi, mu[None, :]]), k)
        history.append(values[K])
        iterates.append(mu)
        g = smoothed_gradient(xi, values[:K] - values[K], sigma)
        if config.normalize:
            norm = float(np.linalg.norm(g))
            g = g / norm if norm > 0 else g
        mu = mu + step_size(k, config.lr, config.decay) * g
    return finish(mu, budget, history, iterates)


def gaussian_smoothing(f, x0, config: SmoothingConfig = SmoothingConfig(), *, seed=0,
                       evaluator: Evaluator | None = None, max_evals: int | None = None) -> OptimizeResult:
    """Maximise ``f`` by zeroth-order ascent on its Gaussian smoothing at a fixed ``sigma``."""
    return _ascend(f, x0, config, lambda k: config.sigma, seed, evaluator, max_evals)


def gaussian_homotopy(f, x0, config: SmoothingConfig = SmoothingConfig(), *, seed=0,
                      evaluator: Evaluator | None = None, max_evals: int | None = None) -> OptimizeResult:
    """Maximise ``f`` with the standard double-loop Gaussian homotopy.

    Stage ``j`` of ``config.stages`` runs ``iterations / stages`` steps at
    ``sigma_j = sigma (sigma_min / sigma)^(j / (stages - 1))``.
    """
    per_stage = max(1, int(np.ceil(config.iterations / config.stages)))
    ratio = (config.sigma_min / config.sigma) ** (1.0 / max(1, config.stages - 1))
    return _ascend(f, x0, config, lambda k: config.sigma * ratio ** min(k // per_stage, config.stages - 1),
                   seed, evaluator, max_evals)


def zo_slgh(f, x0, config: SmoothingConfig = SmoothingConfig(), *, seed=0,
            evaluator: Evaluator | None = None, max_evals: int | None = None) -> OptimizeResult:
    """Maximise ``f`` with single-loop Gaussian homotopy: ``sigma`` decays geometrically each step
    from ``sigma`` to ``sigma_min`` over the iterations."""
    gamma = (config.sigma_min / config.sigma) ** (1.0 / max(1, config.iterations - 1))
    return _ascend(f, x0, config, lambda k: max(config.sigma * gamma**k, config.sigma_min),
                   seed, evaluator, max_evals)


def cma_es(f, x0, *, sigma: float = 0.5, samples: int = 100, max_evals: int, seed: int = 0,
           evaluator: Evaluator | None = None) -> OptimizeResult:
    """Maximise ``f`` with CMA-ES (the ``cma`` package), population ``samples``, ``max_evals`` budget."""
    import cma

    x = check_x0(x0)
    check_positive("sigma", sigma)
    check_positive("samples", samples, integer=True)
    check_positive("max_evals", max_evals, integer=True)
    budget = Budget(evaluator or local_evaluator(f), max_evals)
    cma_seed = int(np.random.SeedSequence(int(seed)).generate_state(1)[0] % (2**31 - 2)) + 1
    es = cma.CMAEvolutionStrategy(x, sigma, {"popsize": int(samples), "seed": cma_seed, "verbose": -9})
    history, iterates = [], []
    while budget.remaining() >= samples + 2 and not es.stop():
        pop = np.asarray(es.ask())
        mean = np.array(es.mean, dtype=float)
        values = budget(np.vstack([pop, mean[None, :]]), len(history))
        history.append(values[-1])
        iterates.append(mean)
        es.tell(list(pop), list(-values[:-1]))
    return finish(np.array(es.mean, dtype=float), budget, history, iterates)
