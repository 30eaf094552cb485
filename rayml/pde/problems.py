"""Benchmark PDEs on 2-D rectangles, with their reference solutions computed in-process.

Each problem gives its domain, the derivative fields its residual needs (multi-indices ``(a, b)``
= ``d^a/dx1^a d^b/dx2^b``), the residual and its derivative with respect to each field (for
Gauss-Newton), the Dirichlet boundary edges with their values, and a reference solution.

- ``Burgers(nu)``: ``u_t + u u_x - nu u_xx = 0`` on ``x in [-1, 1]``, ``t in [0, 1]``,
  ``u(x, 0) = -sin(pi x)``, ``u(+-1, t) = 0``; axis 1 is ``x``, axis 2 is ``t``. Reference: the
  Cole-Hopf solution by Gauss-Hermite quadrature (as in the paper's and the authors' setup).
- ``NonlinearElliptic()``: ``-Lap u + u^3 = f`` on ``[0, 1]^2``, manufactured
  ``u* = sin(pi x) sin(pi y) + 2 sin(4 pi x) sin(4 pi y)`` (the authors' code), zero boundary.
- ``AllenCahn(a)``: ``Lap u + u^3 - u = f`` on ``[0, 1]^2``, manufactured
  ``u* = sin(2 pi a x) cos(2 pi a y) + sin(2 pi x) cos(2 pi y)`` (the authors' code uses a = 15
  and 20), Dirichlet data from ``u*`` on all edges. Assumed: the quick runs use a smaller ``a``
  so that grids a laptop solves in seconds resolve it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Problem", "Burgers", "NonlinearElliptic", "AllenCahn", "make_problem", "PROBLEMS"]


@dataclass(frozen=True)
class Problem:
    """Base class: a nonlinear PDE ``R(u, derivatives) = 0`` on a rectangle with Dirichlet edges."""

    name = "problem"
    lower = (0.0, 0.0)
    upper = (1.0, 1.0)
    fields = ((0, 0),)
    # edges with Dirichlet data: (axis, 0 for the lower end / -1 for the upper end)
    edges = ((0, 0), (0, -1), (1, 0), (1, -1))

    def residual(self, F: dict, X1: np.ndarray, X2: np.ndarray) -> np.ndarray:
        """The PDE residual on the grid from the fields ``F[(a, b)]`` (arrays shaped like ``X1``)."""
        raise NotImplementedError

    def dresidual(self, F: dict, X1: np.ndarray, X2: np.ndarray) -> dict:
        """``{(a, b): dR/dF[(a, b)]}`` on the grid (the Gauss-Newton linearisation)."""
        raise NotImplementedError

    def reference(self, X1: np.ndarray, X2: np.ndarray) -> np.ndarray:
        """The reference solution at the points ``(X1, X2)``."""
        raise NotImplementedError

    def boundary_mask(self, shape: tuple[int, int]) -> np.ndarray:
        """Boolean grid mask of the Dirichlet points."""
        mask = np.zeros(shape, dtype=bool)
        for axis, end in self.edges:
            if axis == 0:
                mask[end, :] = True
            else:
                mask[:, end] = True
        return mask

    def boundary_values(self, X1: np.ndarray, X2: np.ndarray) -> np.ndarray:
        """Dirichlet data on the grid (only read where ``boundary_mask`` is true)."""
        return self.reference(X1, X2)


@dataclass(frozen=True)
class Burgers(Problem):
    """Viscous Burgers' equation in space-time (axis 1: x in [-1, 1], axis 2: t in [0, 1])."""

    nu: float = 0.02
    quadrature: int = 200
    name = "burgers"
    lower = (-1.0, 0.0)
    upper = (1.0, 1.0)
    fields = ((0, 0), (1, 0), (0, 1), (2, 0))
    edges = ((0, 0), (0, -1), (1, 0))  # x = -1, x = 1, t = 0

    def __post_init__(self):
        if not self.nu > 0:
            raise ValueError(f"nu must be > 0, got {self.nu}")

    def residual(self, F, X1, X2):
        return F[(0, 1)] + F[(0, 0)] * F[(1, 0)] - self.nu * F[(2, 0)]

    def dresidual(self, F, X1, X2):
        one = np.ones_like(F[(0, 0)])
        return {(0, 0): F[(1, 0)], (1, 0): F[(0, 0)], (0, 1): one, (2, 0): -self.nu * one}

    def reference(self, X1, X2):
        """Cole-Hopf: u = -int sin(pi(x - s)) f(x - s) G(s) ds / int f(x - s) G(s) ds, Gauss-Hermite in s."""
        x, t = np.broadcast_arrays(np.asarray(X1, float), np.asarray(X2, float))
        z, w = np.polynomial.hermite.hermgauss(self.quadrature)
        out = -np.sin(np.pi * x)
        pos = t > 0
        y = x[pos][:, None] - np.sqrt(4 * self.nu * t[pos])[:, None] * z[None, :]
        expo = -np.cos(np.pi * y) / (2 * np.pi * self.nu)
        expo -= expo.max(axis=1, keepdims=True)
        e = w * np.exp(expo)
        out = out.copy()
        out[pos] = -np.sum(e * np.sin(np.pi * y), axis=1) / np.sum(e, axis=1)
        return out

    def boundary_values(self, X1, X2):
        return np.where(np.isclose(X2, 0.0), -np.sin(np.pi * X1), 0.0)


def _elliptic_truth(x, y):
    return np.sin(np.pi * x) * np.sin(np.pi * y) + 2 * np.sin(4 * np.pi * x) * np.sin(4 * np.pi * y)


def _elliptic_laplacian(x, y):
    return (-2 * np.pi**2 * np.sin(np.pi * x) * np.sin(np.pi * y)
            - 2 * 32 * np.pi**2 * np.sin(4 * np.pi * x) * np.sin(4 * np.pi * y))


@dataclass(frozen=True)
class NonlinearElliptic(Problem):
    """``-Lap u + u^3 = f`` on the unit square with the authors' manufactured solution."""

    name = "elliptic"
    fields = ((0, 0), (2, 0), (0, 2))

    def source(self, X1, X2):
        u = _elliptic_truth(X1, X2)
        return -_elliptic_laplacian(X1, X2) + u**3

    def residual(self, F, X1, X2):
        return -F[(2, 0)] - F[(0, 2)] + F[(0, 0)] ** 3 - self.source(X1, X2)

    def dresidual(self, F, X1, X2):
        one = np.ones_like(F[(0, 0)])
        return {(0, 0): 3 * F[(0, 0)] ** 2, (2, 0): -one, (0, 2): -one}

    def reference(self, X1, X2):
        return _elliptic_truth(X1, X2)


@dataclass(frozen=True)
class AllenCahn(Problem):
    """Stationary Allen-Cahn ``Lap u + u^3 - u = f`` with the authors' manufactured solution."""

    a: float = 1.0
    name = "allen-cahn"
    fields = ((0, 0), (2, 0), (0, 2))

    def __post_init__(self):
        if not self.a > 0:
            raise ValueError(f"a must be > 0, got {self.a}")

    def _terms(self, x, y):
        w = 2 * np.pi * self.a
        u = np.sin(w * x) * np.cos(w * y) + np.sin(2 * np.pi * x) * np.cos(2 * np.pi * y)
        lap = (-2 * w**2 * np.sin(w * x) * np.cos(w * y)
               - 2 * (2 * np.pi) ** 2 * np.sin(2 * np.pi * x) * np.cos(2 * np.pi * y))
        return u, lap

    def source(self, X1, X2):
        u, lap = self._terms(X1, X2)
        return lap + u**3 - u

    def residual(self, F, X1, X2):
        return F[(2, 0)] + F[(0, 2)] + F[(0, 0)] ** 3 - F[(0, 0)] - self.source(X1, X2)

    def dresidual(self, F, X1, X2):
        one = np.ones_like(F[(0, 0)])
        return {(0, 0): 3 * F[(0, 0)] ** 2 - 1, (2, 0): one, (0, 2): one}

    def reference(self, X1, X2):
        return self._terms(X1, X2)[0]


PROBLEMS = ("burgers", "elliptic", "allen-cahn")


def make_problem(name: str, **params) -> Problem:
    """``"burgers"`` (``nu=``), ``"elliptic"`` or ``"allen-cahn"`` (``a=``)."""
    if name == "burgers":
        return Burgers(**params)
    if name == "elliptic":
        return NonlinearElliptic(**params)
    if name == "allen-cahn":
        return AllenCahn(**params)
    raise ValueError(f"problem must be one of {PROBLEMS}, got {name!r}")
