"""Max-min eigenvalue augmentation: the convex relaxation and its simple randomized rounding.

Jourdain Lamperski, Haeseong Yang, Oleg Prokopyev, "Simple Randomized Rounding for Max-Min
Eigenvalue Augmentation", ICML 2025 (PMLR 267:32406-32419).

Problem (paper, abstract): given symmetric PSD ``n x n`` matrices ``M, A_1 .. A_m`` and an integer
``k < m``, choose ``I``, ``|I| <= k``, maximising ``lambda_min(M + sum_{i in I} A_i)``. The ``A_i``
need not be rank one. Guarantee (abstract): a simple randomized rounding of the relaxation is a
constant-factor approximation when ``OPT - lambda_min(M) = Omega(R ln k)``, ``R = max_i tr A_i``,
proved with an intrinsic-dimension matrix Chernoff bound for the minimum eigenvalue of a sum of
independent random PSD matrices. Only the abstract was available to us. Assumed:

- the relaxation (``solve_relaxation``) is the natural concave program ``max lambda_min(M + sum x_i
  A_i)`` s.t. ``sum x_i <= k``, ``0 <= x <= 1`` (an SDP; solved with cvxpy and Clarabel or SCS);
  its value bounds OPT from above;
- the rounding (``randomized_rounding``), scheme ``"iid"`` (the default): draw ``k`` indices
  independently from ``p = x / sum x`` and keep the distinct ones, so ``|I| <= k`` always and
  ``sum_j A_{i_j}`` is a sum of ``k`` independent random PSD matrices with mean ``(k / sum x) sum
  x_i A_i``; scheme ``"bernoulli"``: keep ``i`` independently with probability ``x_i``, redrawn
  until ``|I| <= k`` (at most ``max_tries`` times, then the lowest-``x`` extras are dropped);
  scheme ``"without-replacement"`` (a declared variant, session 10): ``k`` distinct indices drawn
  one after another with probability proportional to ``x`` among those not yet drawn (numpy's
  ``choice(replace=False, p=...)``), all of the support when it holds fewer than ``k``; every draw
  fills all ``k`` slots, where ``"iid"`` loses the slots of repeated indices;
- repeated roundings with the best kept (``round_many``; the experiment runs them on Ray);
  ``round_many`` records how many distinct indices each draw kept (``sizes``), and
  ``same_size_subsets`` draws, per rounding, a uniformly random subset of that many distinct
  indices: the fair random baseline of a rounding whose draws select a variable number of items
  (``"iid"`` keeps about 7 of ``k = 10``; session 14, after outside review R10).

Examples:
    >>> import numpy as np
    >>> from rayml.optim.eig_augment import AugmentationProblem, greedy
    >>> M = np.diag([1.0, 2.0])
    >>> As = [np.diag([3.0, 0.0]), np.diag([0.0, 1.0]), np.diag([1.5, 1.5])]
    >>> res = greedy(AugmentationProblem(M, As, k=1))
    >>> res.selected.tolist(), round(res.value, 6)
    ([2], 2.5)
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = [
    "AugmentationProblem",
    "AugmentResult",
    "Relaxation",
    "check_psd",
    "lambda_min",
    "solve_relaxation",
    "randomized_rounding",
    "round_many",
    "same_size_subsets",
    "greedy",
    "brute_force",
    "raise_cap",
    "SCHEMES",
]

SCHEMES = ("iid", "bernoulli", "without-replacement")


def check_psd(name: str, A, n: int | None = None, tol: float = 1e-8) -> np.ndarray:
    """``A`` as a float array after checking it is a symmetric PSD ``n x n`` matrix (``ValueError``
    naming ``name`` otherwise); eigenvalues down to ``-tol * max(1, |A|)`` count as zero."""
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1] or (n is not None and A.shape[0] != n):
        want = f"({n}, {n})" if n is not None else "square"
        raise ValueError(f"{name} must be a {want} matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} has non-finite entries")
    scale = max(1.0, float(np.abs(A).max()))
    if not np.allclose(A, A.T, atol=tol * scale):
        raise ValueError(f"{name} must be symmetric")
    low = float(np.linalg.eigvalsh(A)[0])
    if low < -tol * scale:
        raise ValueError(f"{name} must be positive semidefinite (lambda_min = {low:.3g})")
    return (A + A.T) / 2


def lambda_min(S: np.ndarray) -> float:
    """The smallest eigenvalue of the symmetric matrix ``S``."""
    return float(np.linalg.eigvalsh(S)[0])


def _logdet(S: np.ndarray) -> float:
    """``log det S`` of a symmetric PSD ``S`` (``-inf`` when singular)."""
    sign, value = np.linalg.slogdet(S)
    return float(value) if sign > 0 else -np.inf


def raise_cap(M: np.ndarray, ranks: Sequence[int], k: int) -> float:
    """Weyl's cap on ``lambda_min(M + sum_{i in I} A_i)`` over ``|I| <= k``: with ``r`` the sum of the
    ``k`` largest ranks, a rank-``r`` update cannot lift ``lambda_min`` above ``lambda_{r+1}(M)``
    (``inf`` when ``r >= n``)."""
    r = int(sum(sorted((int(x) for x in ranks), reverse=True)[: int(k)]))
    eig = np.linalg.eigvalsh(M)
    return float(eig[r]) if r < eig.size else float("inf")


class AugmentationProblem:
    """``max lambda_min(M + sum_{i in I} A_i)`` over ``|I| <= k``.

    Args:
        M: the base PSD matrix ``(n, n)``.
        As: the ``m`` PSD augmentation matrices ``(n, n)`` (any rank).
        k: the cardinality budget, ``1 <= k < m``.

    Attributes:
        M, As (``(m, n, n)``), k, n, m, R (``max_i tr A_i``), base (``lambda_min(M)``), ranks (of
        each ``A_i``), cap (``raise_cap``: no subset lifts ``lambda_min`` above it).

    Warns:
        UserWarning: when no ``k`` candidates can raise ``lambda_min(M)`` at all (e.g. ``k < n``
        rank-one candidates and ``M = c I``): every method then ties at ``lambda_min(M)``.
    """

    def __init__(self, M, As: Sequence, k: int):
        self.M = check_psd("M", M)
        self.n = self.M.shape[0]
        if len(As) < 2:
            raise ValueError(f"As must hold at least 2 matrices, got {len(As)}")
        self.As = np.stack([check_psd(f"As[{i}]", A, self.n) for i, A in enumerate(As)])
        self.m = self.As.shape[0]
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k < self.m:
            raise ValueError(f"k must be an integer with 1 <= k < m = {self.m}, got {k!r}")
        self.k = int(k)
        self.R = float(np.trace(self.As, axis1=1, axis2=2).max())
        self.base = lambda_min(self.M)
        self.ranks = [int(np.linalg.matrix_rank(A, tol=1e-9 * max(1.0, float(np.abs(A).max())))) for A in self.As]
        self.cap = raise_cap(self.M, self.ranks, self.k)
        if self.cap <= self.base + 1e-9 * max(1.0, abs(self.base)):
            warnings.warn(f"no k = {self.k} of these candidates can raise lambda_min(M) = {self.base:.4g}: their "
                          f"ranks add up to at most {sum(sorted(self.ranks, reverse=True)[: self.k])} < n = {self.n} "
                          f"and lambda_min(M) has multiplicity beyond that, so every subset ties at lambda_min(M) "
                          f"(Weyl); raise k or use higher-rank candidates", UserWarning, stacklevel=2)

    def value(self, subset) -> float:
        """``lambda_min(M + sum_{i in subset} A_i)``."""
        idx = np.asarray(list(subset), dtype=int)
        return lambda_min(self.M + self.As[idx].sum(axis=0)) if idx.size else self.base

    def fractional_value(self, x) -> float:
        """``lambda_min(M + sum_i x_i A_i)``."""
        return lambda_min(self.M + np.tensordot(np.asarray(x, dtype=float), self.As, axes=1))

    def condition(self, opt: float) -> float:
        """``(opt - lambda_min(M)) / (R ln k)``: the paper's regime variable (``inf`` for ``k = 1``)."""
        return (opt - self.base) / (self.R * math.log(self.k)) if self.k > 1 else float("inf")


@dataclass(frozen=True)
class AugmentResult:
    """A chosen index set, its ``lambda_min`` and, for roundings, how many draws were made, every
    draw's value (``values``) and how many distinct indices each draw kept (``sizes``)."""

    selected: np.ndarray
    value: float
    evaluations: int = 1
    values: np.ndarray | None = field(default=None, repr=False)
    sizes: np.ndarray | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Relaxation:
    """The relaxation's solution: ``x``, the solver's optimal value ``bound`` (>= OPT up to solver
    accuracy), ``lambda_min`` at ``x`` (``value_at_x``), the solver and its status."""

    x: np.ndarray
    bound: float
    value_at_x: float
    solver: str
    status: str


def solve_relaxation(problem: AugmentationProblem, solver: str | None = None) -> Relaxation:
    """Solve ``max_x lambda_min(M + sum x_i A_i)`` s.t. ``sum x <= k``, ``0 <= x <= 1`` with cvxpy.

    Args:
        problem: the instance.
        solver: a cvxpy solver name; default Clarabel, else SCS (both open source, SDP-capable).
    """
    import cvxpy as cp

    names = cp.installed_solvers()
    if solver is None:
        solver = next((s for s in ("CLARABEL", "SCS") if s in names), None)
        if solver is None:
            raise RuntimeError("no SDP-capable cvxpy solver installed: pip install clarabel or scs")
    elif solver not in names:
        raise ValueError(f"solver {solver!r} is not installed; installed: {names}")
    x = cp.Variable(problem.m)
    S = problem.M + sum(x[i] * problem.As[i] for i in range(problem.m))
    prob = cp.Problem(cp.Maximize(cp.lambda_min((S + S.T) / 2)), [x >= 0, x <= 1, cp.sum(x) <= problem.k])
    prob.solve(solver=solver)
    if prob.status not in ("optimal", "optimal_inaccurate") or x.value is None:
        raise RuntimeError(f"relaxation solver {solver} ended with status {prob.status}")
    xv = np.clip(np.asarray(x.value, dtype=float), 0.0, 1.0)
    if xv.sum() > problem.k:
        xv *= problem.k / xv.sum()
    at_x = problem.fractional_value(xv)
    return Relaxation(xv, float(max(prob.value, at_x)), at_x, solver, prob.status)


def randomized_rounding(x, k: int, rng: np.random.Generator, scheme: str = "iid", max_tries: int = 100) -> np.ndarray:
    """One rounding of the fractional ``x`` to at most ``k`` indices (module docstring, Assumed)."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    if x.ndim != 1 or x.sum() <= 0:
        raise ValueError("x must be a 1-d vector with positive mass")
    if scheme == "iid":
        draws = rng.choice(x.size, size=int(k), replace=True, p=x / x.sum())
        return np.unique(draws)
    if scheme == "bernoulli":
        for _ in range(int(max_tries)):
            keep = np.flatnonzero(rng.random(x.size) < x)
            if keep.size <= k:
                return keep
        return np.sort(keep[np.argsort(-x[keep], kind="stable")[:k]])
    if scheme == "without-replacement":
        support = np.flatnonzero(x > 0)
        if support.size <= k:
            return support
        return np.sort(rng.choice(support, size=int(k), replace=False, p=x[support] / x[support].sum()))
    raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")


def round_many(problem: AugmentationProblem, x, roundings: int, seed: int | np.random.Generator = 0,
               scheme: str = "iid") -> AugmentResult:
    """``roundings`` independent roundings of ``x``; the best set is kept (``values``: all draws,
    ``sizes``: the number of distinct indices of each draw)."""
    if isinstance(roundings, bool) or not isinstance(roundings, (int, np.integer)) or roundings < 1:
        raise ValueError(f"roundings must be an integer >= 1, got {roundings!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    sets = [randomized_rounding(x, problem.k, rng, scheme) for _ in range(int(roundings))]
    values = np.array([problem.value(s) for s in sets])
    best = int(np.argmax(values))
    sizes = np.array([s.size for s in sets], dtype=int)
    return AugmentResult(sets[best], float(values[best]), int(roundings), values, sizes)


def same_size_subsets(sizes, m: int, rng: np.random.Generator) -> list[np.ndarray]:
    """For each ``s`` in ``sizes``, a uniformly random subset of ``s`` distinct indices of ``range(m)``
    (sorted): the random baseline matched to a rounding's draws one by one (``round_many``'s
    ``sizes``), so it selects exactly as many items as the rounding did."""
    sizes = np.asarray(sizes)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
        raise ValueError("sizes must be a 1-d array of integers")
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be a positive integer, got {m!r}")
    if sizes.size and (sizes.min() < 0 or sizes.max() > m):
        raise ValueError(f"sizes must lie in [0, m = {m}], got {sizes.min()}..{sizes.max()}")
    return [np.sort(rng.choice(int(m), size=int(s), replace=False)) for s in sizes]


def greedy(problem: AugmentationProblem, tie_tol: float = 1e-9) -> AugmentResult:
    """Add, ``k`` times, the index whose addition gives the largest ``lambda_min``.

    Ties (``lambda_min`` within ``tie_tol * max(1, |best|)`` of the best, as when no single candidate
    of rank below ``n`` can lift ``lambda_min`` alone) are broken by the largest ``log det`` of the
    sum, then by the lowest index: without it the first picks are arbitrary.
    """
    chosen: list[int] = []
    current = problem.M.copy()
    evals = 0
    for _ in range(problem.k):
        cand = [i for i in range(problem.m) if i not in chosen]
        vals = np.array([lambda_min(current + problem.As[i]) for i in cand])
        evals += len(cand)
        tied = np.flatnonzero(vals >= vals.max() - tie_tol * max(1.0, abs(float(vals.max()))))
        if tied.size > 1:
            logdets = [_logdet(current + problem.As[cand[t]]) for t in tied]
            j = cand[int(tied[int(np.argmax(logdets))])]
        else:
            j = cand[int(tied[0])]
        chosen.append(j)
        current = current + problem.As[j]
    return AugmentResult(np.array(sorted(chosen)), lambda_min(current), evals)


def brute_force(problem: AugmentationProblem, limit: int = 200_000) -> AugmentResult:
    """OPT by enumerating every ``k``-subset (adding a PSD matrix never lowers ``lambda_min``)."""
    count = math.comb(problem.m, problem.k)
    if count > limit:
        raise ValueError(f"C(m, k) = {count} subsets exceed limit={limit}; brute force is for small m, k")
    best_val, best = -np.inf, None
    combos = itertools.combinations(range(problem.m), problem.k)
    while True:  # batches of subsets, one batched eigvalsh each
        batch = np.array(list(itertools.islice(combos, 4096)), dtype=int)
        if batch.size == 0:
            break
        vals = np.linalg.eigvalsh(problem.M + problem.As[batch].sum(axis=1))[:, 0]
        j = int(np.argmax(vals))
        if vals[j] > best_val:
            best_val, best = float(vals[j]), batch[j]
    return AugmentResult(np.array(best), float(best_val), count)
