"""Standard multimodal test functions for global optimisation, vectorised over rows.

Each function maps an array of shape ``(K, d)`` (or ``(d,)``) to values of shape ``(K,)`` (or a
float), is to be MINIMISED, and has its global minimum 0 at the origin (Rosenbrock: at ones).
GS-PowerOpt maximises, so experiments hand it ``-f``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ackley", "rastrigin", "griewank", "rosenbrock", "two_peak", "FUNCTIONS", "optimum"]


def _rows(x: np.ndarray) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        return x[None, :], True
    if x.ndim != 2:
        raise ValueError(f"x must have shape (d,) or (K, d), got {x.shape}")
    return x, False


def _out(v: np.ndarray, single: bool):
    return float(v[0]) if single else v


def ackley(x: np.ndarray, a: float = 20.0, b: float = 0.2, c: float = 2 * np.pi):
    """Ackley: ``-a exp(-b sqrt(mean x^2)) - exp(mean cos(c x)) + a + e``; min 0 at 0."""
    x, single = _rows(x)
    r = np.sqrt(np.mean(x * x, axis=1))
    v = -a * np.exp(-b * r) - np.exp(np.mean(np.cos(c * x), axis=1)) + a + np.e
    return _out(np.maximum(v, 0.0), single)


def rastrigin(x: np.ndarray, a: float = 10.0):
    """Rastrigin: ``a d + sum(x^2 - a cos(2 pi x))``; min 0 at 0."""
    x, single = _rows(x)
    v = a * x.shape[1] + np.sum(x * x - a * np.cos(2 * np.pi * x), axis=1)
    return _out(v, single)


def griewank(x: np.ndarray):
    """Griewank: ``1 + sum(x^2)/4000 - prod(cos(x_i / sqrt(i)))``; min 0 at 0."""
    x, single = _rows(x)
    i = np.sqrt(np.arange(1, x.shape[1] + 1))
    v = 1.0 + np.sum(x * x, axis=1) / 4000.0 - np.prod(np.cos(x / i), axis=1)
    return _out(v, single)


def rosenbrock(x: np.ndarray):
    """Rosenbrock: ``sum(100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2)``; min 0 at ones."""
    x, single = _rows(x)
    v = np.sum(100.0 * (x[:, 1:] - x[:, :-1] ** 2) ** 2 + (1.0 - x[:, :-1]) ** 2, axis=1)
    return _out(v, single)


def two_peak(x: np.ndarray, sharp: float = 0.1, wide: float = 1.0, local_depth: float = 0.8):
    """A deceptive two-well function: a narrow global well at ``-0.5 * ones`` beside a wide,
    shallower local well at ``+0.5 * ones``.

    ``1 - exp(-|x - a|^2 / (2 sharp^2)) - local_depth exp(-|x - b|^2 / (2 wide^2))``. Smoothing at
    a large scale sees only the wide well; this is the situation GS-PowerOpt's power transform is
    built for (the paper's two-peak illustration). Its minimiser lies within ``1e-2`` of ``a`` for
    the default widths (the wide well's slope there is small against the narrow well's curvature).
    """
    x, single = _rows(x)
    a, b = -0.5, 0.5
    v = (1.0 - np.exp(-np.sum((x - a) ** 2, axis=1) / (2 * sharp**2))
         - local_depth * np.exp(-np.sum((x - b) ** 2, axis=1) / (2 * wide**2)))
    return _out(v, single)


FUNCTIONS = {"ackley": ackley, "two-peak": two_peak, "rastrigin": rastrigin, "griewank": griewank, "rosenbrock": rosenbrock}


def optimum(name: str, dim: int) -> np.ndarray:
    """The global minimiser of test function ``name`` in ``dim`` dimensions."""
    if name not in FUNCTIONS:
        raise ValueError(f"name must be one of {sorted(FUNCTIONS)}, got {name!r}")
    if name == "two-peak":
        return np.full(dim, -0.5)
    return np.ones(dim) if name == "rosenbrock" else np.zeros(dim)
