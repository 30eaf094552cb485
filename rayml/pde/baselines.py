"""Baselines of the kernel-PDE reproduction: DAKS (full Gram with derivative functionals) and FD.

- ``daks_solve``: the kernel solver of Chen, Hosseini, Owhadi, Stuart, "Solving and learning
  nonlinear PDEs with Gaussian processes" (J. Comput. Phys. 2021), which the ICML 2025 paper
  compares with. The unknowns ``z`` are the values of the functionals ``phi`` = point values at
  all collocation points plus every derivative the PDE needs at the interior points; the Gram
  matrix ``Theta = [phi_i phi_j k]`` embeds the differential operators in the kernel. Their
  Gauss-Newton iteration: linearise the PDE at ``z_k`` and take the minimum-RKHS-norm solution of
  the linear constraints, ``z_{k+1} = Theta A^T (A Theta A^T)^{-1} b``. ``Theta`` is
  ``m x m`` with ``m = N + (#derivatives) N_interior``: this is the memory the paper's method
  avoids. Assumed: the nugget is Chen et al.'s adaptive one (each diagonal block of ``Theta`` gets
  ``nugget * trace(block) / trace(point block)``), with a fixed ``nugget``.
- ``fd_solve``: second-order finite differences on the same grid: a Newton solve of the
  5-point-Laplacian discretisation for the elliptic and Allen-Cahn equations; for Burgers,
  Crank-Nicolson in time with the conservative Godunov flux of ``u^2 / 2`` (upwind: the standard
  scheme for a shock) and the central second difference for ``nu u_xx``, a semi-smooth Newton solve
  per time step (session 13, outside review R11: the central difference of ``u u_x`` it replaced is
  unstable at the cell Peclet numbers of ``nu = 0.001``, ``max |u|`` grew to 72 where the solution is
  bounded by 1). ``capped_steps`` counts the Newton solves that stopped at ``iterations`` unconverged.
  ``order=4`` (session 14, outside review R11; the elliptic and Allen-Cahn equations only): the
  fourth-order Laplacian, in each axis the central ``[-1, 16, -30, 16, -1] / (12 h^2)`` and, on the
  first interior row next to each boundary (where the central stencil would reach past it), the
  second-order ``[1, -2, 1] / h^2`` (``_second_diff4``); same Newton. The O(h^2) truncation error on that
  one row costs no order: its effect on the solution is O(h^2) times the discrete Green's function's
  O(h) weight summed over O(1/h) rows of points, O(h^4) (measured: order 3.8-4.4 on the manufactured
  solutions, ``tests/pde``). The one-sided fourth-order closure ``[10, -15, -4, 14, -6, 1] / (12 h^2)``
  was measured too (session 14): more accurate on the coarse smooth cases, less on 4 of the 5 hard
  Allen-Cahn cases; the record uses the second-order row (R11's stencil).
  (Assumed: the paper names a finite-difference baseline without these details.)

Both report RMSE and relative L2 error at the collocation points against the problem's reference.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve
from scipy.sparse.linalg import spsolve

from rayml.pde.kernel_solver import _grid, se_kernel_derivative
from rayml.pde.problems import Burgers, Problem

__all__ = ["BaselineResult", "daks_functionals", "daks_memory_bytes", "daks_gram", "daks_solve", "daks_step",
           "fd_solve"]


@dataclass(frozen=True)
class BaselineResult:
    """Grid solution, errors at the collocation points, iterations and wall time; ``last_change``:
    DAKS's relative change of the iterate in its last Gauss-Newton step (how far from converged a
    solve stopped at its cap is; NaN for finite differences); ``last_u_change``: the relative change of
    the solution on the grid (``u`` at the collocation points) in that step; ``capped_steps``: finite
    differences' Newton solves that stopped at their iteration cap unconverged."""

    U: np.ndarray
    rmse: float
    rel_l2: float
    iterations: int
    seconds: float
    last_change: float = float("nan")
    last_u_change: float = float("nan")
    u_changes: tuple = ()
    capped_steps: int = 0


def _errors(problem: Problem, U: np.ndarray, X1: np.ndarray, X2: np.ndarray) -> tuple[float, float]:
    ref = problem.reference(X1, X2)
    err = U - ref
    return float(np.sqrt(np.mean(err**2))), float(np.linalg.norm(err) / max(np.linalg.norm(ref), 1e-300))


def daks_functionals(problem: Problem, grid: tuple[int, int]) -> list[tuple[tuple[int, int], np.ndarray]]:
    """``[(multi-index, flat point indices)]``: values everywhere, derivatives at interior points."""
    mask = problem.boundary_mask(grid).ravel()
    everywhere = np.arange(mask.size)
    interior = np.flatnonzero(~mask)
    return [((0, 0), everywhere)] + [(ab, interior) for ab in problem.fields if ab != (0, 0)]


def daks_memory_bytes(problem: Problem, grid: tuple[int, int], dtype_bytes: int = 8) -> int:
    """Bytes of DAKS's Gram matrix ``Theta`` alone (``m^2`` entries)."""
    m = sum(len(idx) for _, idx in daks_functionals(problem, grid))
    return int(dtype_bytes * m * m)


def daks_gram(problem: Problem, grid: tuple[int, int], lengthscale, nugget: float) -> np.ndarray:
    """``Theta``: the product-SE kernel acted on by every pair of functionals, plus the nugget.

    Each entry is a product of two one-dimensional derivative kernels, one per axis, and on a grid each axis has
    only ``n_d`` distinct coordinates: the ``n_d x n_d`` axis kernel of every derivative-order pair is computed once
    (``se_kernel_derivative`` on the axis points) and gathered at the functionals' axis indices (session 17: the
    same floating-point values as evaluating the kernel at every pair of points, which took half of a DAKS solve's
    time)."""
    axes, X1, X2 = _grid(problem, grid)
    ix = np.indices(tuple(grid)).reshape(2, -1)   # each flat point's index on each axis
    funcs = daks_functionals(problem, grid)
    axis_kernel: dict = {}

    def kernel_1d(d: int, a: int, c: int) -> np.ndarray:
        if (d, a, c) not in axis_kernel:
            axis_kernel[(d, a, c)] = se_kernel_derivative(axes[d], axes[d], lengthscale[d], a, c)
        return axis_kernel[(d, a, c)]

    blocks = [[None] * len(funcs) for _ in funcs]
    for i, ((a, b), pi) in enumerate(funcs):
        for j, ((c, d), pj) in enumerate(funcs):
            if j < i:
                blocks[i][j] = blocks[j][i].T
                continue
            blocks[i][j] = (kernel_1d(0, a, c)[np.ix_(ix[0][pi], ix[0][pj])]
                            * kernel_1d(1, b, d)[np.ix_(ix[1][pi], ix[1][pj])])
    base = np.trace(blocks[0][0]) / blocks[0][0].shape[0]
    for i in range(len(funcs)):
        scale = np.trace(blocks[i][i]) / blocks[i][i].shape[0] / base
        blocks[i][i] = blocks[i][i] + nugget * scale * base * np.eye(blocks[i][i].shape[0])
    return np.block(blocks)


def daks_step(theta: np.ndarray, A: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    """One DAKS Gauss-Newton update ``Theta A^T (A Theta A^T)^{-1} b`` with the linearised constraints ``A`` sparse
    (one nonzero per functional a PDE row uses, one per boundary row): ``A Theta`` gathers rows of ``Theta`` (``O(nnz
    m)``) in place of the dense ``(m x m) (m x N)`` product of the records before session 17, which took about 20x the
    time of the Cholesky of ``A Theta A^T`` (profiled on Allen-Cahn 28 x 28; the same update up to rounding).
    ``Theta`` is symmetric (``daks_gram``; up to one rounding in a few entries), so ``Theta A^T = (A Theta)^T``."""
    At = A @ theta                                   # A Theta (N x m), dense
    S = A @ At.T                                      # A Theta A^T (N x N)
    return At.T @ cho_solve(cho_factor(S), b)


def daks_solve(problem: Problem, grid: tuple[int, int], lengthscale, *, nugget: float = 1e-9,
               iterations: int = 10, tol: float = 1e-10, max_gram_bytes: float = 2e9) -> BaselineResult:
    """DAKS Gauss-Newton (Chen et al. 2021) on the grid; refuses Grams above ``max_gram_bytes``."""
    need = daks_memory_bytes(problem, grid)
    if need > max_gram_bytes:
        raise MemoryError(f"DAKS needs {need / 2**30:.2f} GiB for its Gram matrix at grid {grid}, "
                          f"above max_gram_bytes={max_gram_bytes / 2**30:.2f} GiB")
    t0 = time.perf_counter()
    axes, X1, X2 = _grid(problem, grid)
    mask = problem.boundary_mask(grid).ravel()
    g = problem.boundary_values(X1, X2).ravel()
    funcs = daks_functionals(problem, grid)
    offsets = np.cumsum([0] + [len(idx) for _, idx in funcs])
    theta = daks_gram(problem, grid, lengthscale, nugget)
    N = mask.size
    interior = np.flatnonzero(~mask)
    bnd = np.flatnonzero(mask)
    # position of each interior point inside the derivative blocks
    pos_in_interior = np.full(N, -1)
    pos_in_interior[interior] = np.arange(len(interior))
    z = np.zeros(offsets[-1])
    it, change, u_change, u_changes = 0, float("nan"), float("nan"), []
    for it in range(1, iterations + 1):
        F = {}
        for k, (ab, idx) in enumerate(funcs):
            full = np.zeros(N)
            full[idx] = z[offsets[k] : offsets[k + 1]]
            F[ab] = full.reshape(grid)
        R = problem.residual(F, X1, X2).ravel()
        C = {ab: v.ravel() for ab, v in problem.dresidual(F, X1, X2).items()}
        rows = np.arange(len(interior))
        b = np.zeros(len(interior) + len(bnd))
        b[rows] = -R[interior]
        r_idx, c_idx, vals = [], [], []
        for k, (ab, idx) in enumerate(funcs):
            cols = offsets[k] + (interior if ab == (0, 0) else pos_in_interior[interior])
            r_idx.append(rows)
            c_idx.append(cols)
            vals.append(C[ab][interior])
            b[rows] += C[ab][interior] * z[cols]
        r_idx.append(len(interior) + np.arange(len(bnd)))
        c_idx.append(bnd)
        vals.append(np.ones(len(bnd)))
        A = sp.csr_matrix((np.concatenate(vals), (np.concatenate(r_idx), np.concatenate(c_idx))),
                          shape=(len(b), offsets[-1]))
        b[len(interior):] = g[bnd]
        z_new = daks_step(theta, A, b)
        change = np.linalg.norm(z_new - z) / max(np.linalg.norm(z_new), 1e-300)
        u_change = np.linalg.norm(z_new[:N] - z[:N]) / max(np.linalg.norm(z_new[:N]), 1e-300)
        u_changes.append(float(u_change))
        z = z_new
        if change < tol:
            break
    U = z[: N].reshape(grid)
    rmse, rel = _errors(problem, U, X1, X2)
    return BaselineResult(U, rmse, rel, it, time.perf_counter() - t0, float(change), float(u_change),
                          tuple(u_changes))


def _second_diff(n: int, h: float) -> sp.csr_matrix:
    return sp.diags([np.ones(n - 1), -2 * np.ones(n), np.ones(n - 1)], [-1, 0, 1]) / h**2


def _second_diff4(n: int, h: float) -> sp.csr_matrix:
    """Fourth-order second difference on ``n >= 4`` points: ``[-1, 16, -30, 16, -1] / (12 h^2)`` on rows
    ``2 .. n - 3``, the second-order ``[1, -2, 1] / h^2`` on rows ``1`` and ``n - 2`` (next to the boundary, where
    the five-point stencil would reach past it); rows ``0`` and ``n - 1`` (boundary points, never equations)
    keep the central stencil's in-range part."""
    D = sp.diags([-np.ones(n - 2), 16 * np.ones(n - 1), -30 * np.ones(n), 16 * np.ones(n - 1), -np.ones(n - 2)],
                 [-2, -1, 0, 1, 2]).tolil() / 12.0
    for i in (1, n - 2):
        D[i, :] = 0.0
        D[i, i - 1], D[i, i], D[i, i + 1] = 1.0, -2.0, 1.0
    return D.tocsr() / h**2


def _fd_stationary(problem: Problem, grid, iterations: int, tol: float, order: int = 2):
    axes, X1, X2 = _grid(problem, grid)
    n1, n2 = grid
    h1, h2 = axes[0][1] - axes[0][0], axes[1][1] - axes[1][0]
    mask = problem.boundary_mask(grid)
    U = np.where(mask, problem.boundary_values(X1, X2), 0.0)
    inner = ~mask.ravel()
    d2 = _second_diff4 if order == 4 else _second_diff
    lap = sp.kron(d2(n1, h1), sp.eye(n2)) + sp.kron(sp.eye(n1), d2(n2, h2))
    lap = lap.tocsr()
    it = 0
    for it in range(1, iterations + 1):
        L = (lap @ U.ravel()).reshape(grid)
        F = {(0, 0): U, (2, 0): L, (0, 2): np.zeros_like(U)}  # the Laplacian carried in (2, 0)
        R = problem.residual(F, X1, X2).ravel()
        c = problem.dresidual(F, X1, X2)
        J = (sp.diags(c[(0, 0)].ravel()) + sp.diags(c[(2, 0)].ravel()) @ lap).tocsr()
        delta = spsolve(J[inner][:, inner].tocsc(), -R[inner])
        flat = U.ravel().copy()
        flat[inner] += delta
        U = flat.reshape(grid)
        if np.linalg.norm(delta) <= tol * max(np.linalg.norm(flat), 1e-300):
            break
    return U, X1, X2, it


def _godunov(u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The Godunov flux of ``f(u) = u^2 / 2`` at the faces between neighbouring nodes, and its
    derivatives with respect to the left and right states (one-sided where the flux is not smooth)."""
    uL, uR = u[:-1], u[1:]
    rarefaction = uL <= uR
    left = np.where(rarefaction, uL > 0, 0.5 * uL**2 >= 0.5 * uR**2)
    right = np.where(rarefaction, uR < 0, ~left)
    F = np.where(left, 0.5 * uL**2, np.where(right, 0.5 * uR**2, 0.0))
    return F, np.where(left, uL, 0.0), np.where(right, uR, 0.0)


def _fd_burgers(problem: Burgers, grid, iterations: int, tol: float):
    axes, X1, X2 = _grid(problem, grid)
    nx, nt = grid
    x, t = axes
    h, dt = x[1] - x[0], t[1] - t[0]
    D2 = _second_diff(nx, h).tocsr()
    U = np.zeros(grid)
    U[:, 0] = -np.sin(np.pi * x)
    U[0, :] = U[-1, :] = 0.0
    inner = np.arange(1, nx - 1)
    steps, capped = 0, 0

    def rhs(u):
        """``u_t = rhs(u)``: minus the flux divergence plus viscosity, and its Jacobian (interior rows)."""
        F, dL, dR = _godunov(u)
        out = np.zeros_like(u)
        out[1:-1] = -(F[1:] - F[:-1]) / h
        out = out + problem.nu * (D2 @ u)
        # d out_i = -(dL_i du_i + dR_i du_{i+1} - dL_{i-1} du_{i-1} - dR_{i-1} du_i) / h
        main = np.zeros(nx)
        main[1:-1] = -(dL[1:] - dR[:-1]) / h
        upper, lower = np.zeros(nx - 1), np.zeros(nx - 1)
        upper[1:] = -dR[1:] / h
        lower[:-1] = dL[:-1] / h
        J = sp.diags([lower, main, upper], [-1, 0, 1]) + problem.nu * D2
        return out, J

    for n in range(nt - 1):
        u_old = U[:, n]
        f_old, _ = rhs(u_old)
        u = u_old.copy()
        converged = False
        for _ in range(iterations):
            steps += 1
            f_new, Jf = rhs(u)
            G = (u - u_old) / dt - 0.5 * (f_new + f_old)
            J = (sp.eye(nx) / dt - 0.5 * Jf).tocsr()
            delta = spsolve(J[inner][:, inner].tocsc(), -G[inner])
            u[inner] += delta
            if np.linalg.norm(delta) <= tol * max(np.linalg.norm(u), 1e-300):
                converged = True
                break
        capped += not converged
        U[:, n + 1] = u
    return U, X1, X2, steps, capped


def fd_solve(problem: Problem, grid: tuple[int, int], *, order: int = 2, iterations: int = 50,
             tol: float = 1e-12) -> BaselineResult:
    """Finite differences with Newton on the collocation grid (see the module docstring). ``order``: the
    Laplacian's order for the elliptic and Allen-Cahn equations, 2 (5-point) or 4 (``_second_diff4``); Burgers
    has one scheme (Godunov flux, Crank-Nicolson) and takes only ``order=2``."""
    if order not in (2, 4) or isinstance(order, bool):
        raise ValueError(f"order must be 2 or 4, got {order!r}")
    if order == 4 and isinstance(problem, Burgers):
        raise ValueError("order=4 is the fourth-order Laplacian of the stationary problems; Burgers takes order=2 "
                         "(its Godunov / Crank-Nicolson scheme)")
    if min(grid) < 4:
        raise ValueError(f"grid too small: each axis needs >= 4 points, got {grid!r}")
    t0 = time.perf_counter()
    if isinstance(problem, Burgers):
        U, X1, X2, it, capped = _fd_burgers(problem, tuple(grid), iterations, tol)
    else:
        U, X1, X2, it = _fd_stationary(problem, tuple(grid), iterations, tol, order)
        capped = int(it >= iterations)  # the last Newton step did not meet the tolerance (or landed on the cap)
    rmse, rel = _errors(problem, U, X1, X2)
    return BaselineResult(U, rmse, rel, it, time.perf_counter() - t0, capped_steps=capped)
