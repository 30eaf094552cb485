"""Shared plumbing of rayml's zeroth-order optimisers: input checks, batched evaluation, results.

An ``Evaluator`` maps a batch of points ``(K, d)`` to ``(K,)`` values of the objective. The
default evaluates ``f`` on the batch in-process (``f`` may be vectorised over rows or not);
``rayml.runtime.batch_evaluator`` spreads each batch over Ray tasks instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

Evaluator = Callable[[np.ndarray], np.ndarray]

__all__ = ["Evaluator", "Negated", "OptimizeResult", "local_evaluator", "finish", "check_x0", "check_positive", "Budget"]


@dataclass(frozen=True)
class OptimizeResult:
    """What a rayml zeroth-order optimiser returns (it MAXIMISES ``f``).

    Attributes:
        x: the final iterate (GS methods: the mean ``mu``; CMA-ES: its distribution mean).
        fun: ``f(x)``.
        evals: evaluations of ``f`` used.
        iterations: iterations (or CMA-ES generations) run.
        history: ``f`` at the iterates ``x_0 .. x_T``, shape ``(iterations + 1,)``.
        x_best: the iterate with the highest ``f`` among ``x_0 .. x_T`` (the paper's "best
            iterate"; its value is ``history.max()``); ``None`` where the iterates were not kept.
    """

    x: np.ndarray
    fun: float
    evals: int
    iterations: int
    history: np.ndarray
    x_best: np.ndarray | None = None


def local_evaluator(f: Callable) -> Evaluator:
    """Evaluate ``f`` on a batch in this process; ``f`` takes ``(K, d)`` or a single ``(d,)``."""

    def evaluate(points: np.ndarray) -> np.ndarray:
        try:
            out = np.asarray(f(points), dtype=float)
            if out.shape == (points.shape[0],):
                return out
        except (ValueError, TypeError, IndexError):
            pass
        return np.array([float(f(p)) for p in points])

    return evaluate


class Budget:
    """Counts evaluations, checks that values are finite, and enforces a maximum."""

    def __init__(self, evaluate: Evaluator, max_evals: int | None = None):
        self.evaluate = evaluate
        self.max_evals = max_evals
        self.used = 0

    def remaining(self) -> int:
        return (self.max_evals - self.used) if self.max_evals is not None else 1 << 62

    def __call__(self, points: np.ndarray, iteration: int) -> np.ndarray:
        values = np.asarray(self.evaluate(points), dtype=float).reshape(-1)
        if values.shape[0] != points.shape[0]:
            raise ValueError(
                f"f returned {values.shape[0]} values for {points.shape[0]} points at iteration {iteration}"
            )
        if not np.all(np.isfinite(values)):
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(f"f returned a non-finite value ({values[bad]}) at iteration {iteration}")
        self.used += points.shape[0]
        return values


def check_x0(x0) -> np.ndarray:
    """``x0`` as a finite 1-D float array, or a ValueError naming ``x0``."""
    x = np.array(x0, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"x0 must be a non-empty 1-D array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x0 must be finite")
    return x


def check_positive(name: str, value, *, integer: bool = False) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a finite positive number (integer)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    ok = ok and np.isfinite(value) and value > 0
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        kind = "a positive integer" if integer else "a finite number > 0"
        raise ValueError(f"{name} must be {kind}, got {value!r}")


def finish(x: np.ndarray, budget: Budget, history: list, iterates: list | None = None) -> OptimizeResult:
    """Evaluate the final iterate and package the result.

    ``iterates`` (the points whose values ``history`` holds, in order) gives ``x_best``."""
    fun = float(budget(x[None, :], len(history))[0])
    history.append(fun)
    x_best = None
    if iterates is not None:
        path = list(iterates) + [x]
        if len(path) != len(history):
            raise ValueError(f"{len(path)} iterates for {len(history)} values")
        x_best = np.array(path[int(np.argmax(history))], dtype=float)
    return OptimizeResult(x=x, fun=fun, evals=budget.used, iterations=len(history) - 1,
                          history=np.asarray(history, dtype=float), x_best=x_best)


class Negated:
    """``-f`` as a picklable callable (Ray ships it to workers); minimisers maximise it."""

    def __init__(self, f: Callable):
        self.f = f

    def __call__(self, x):
        return -np.asarray(self.f(x), dtype=float)
