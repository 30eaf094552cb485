"""Linearly constrained (mixed-integer) quadratic programs: instances, solver labels, KKT checks.

The problem class of Chen, Chen, Liu, Wang and Yin, "Expressive Power of Graph Neural Networks for
(Mixed-Integer) Quadratic Programs" (ICML 2025), Eq. (1.1)/(LCQP) and (MI-LCQP)::

    min_x  1/2 x^T Q x + c^T x   s.t.  A_i x  (<= or =)  b_i,   l <= x <= u,   x_j in Z for j in I.

``random_lcqp`` follows the authors' instance generator (``generate_data.py`` of
liujl11git/GNN-QP: ``b ~ N(0, 1)``, ``c ~ 0.1 N(0, 1)``, ``Q`` a sparse SPD matrix with unit
diagonal, ``nnz`` nonzeros of ``A`` drawn ``N(0, 1)`` at random places, each constraint an
equality with probability 0.3, bounds two sorted ``N(0, 10^2)`` draws). ``bound_scale`` shrinks the
bounds so that a fraction of the instances is infeasible (for the feasibility task; assumed: the
paper's feasibility data are not described in what we could read).

Labels come from real solvers: Clarabel (interior point; optimal value, solution, duals and
infeasibility certificates), cross-checked against HiGHS and OSQP, and verified through the KKT
conditions (``kkt_residuals``). Mixed-integer labels (small instances only: the paper's
counter-examples) come from exact enumeration of the integer assignments with the continuous
remainder solved by Clarabel (``solve_miqp_enumerate``).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["QP", "Solution", "random_lcqp", "solve", "solve_highs", "solve_osqp", "solve_miqp_enumerate",
           "kkt_residuals", "objective", "is_feasible_point", "to_row", "from_row"]


@dataclass(frozen=True)
class QP:
    """One (MI-)LCQP: ``min 1/2 x'Qx + c'x`` s.t. ``A x (<=|=) b`` row-wise (``eq``), ``lb <= x <= ub``.

    ``lb``/``ub`` may hold ``-inf``/``inf``; ``integer[j]`` marks ``x_j in Z``.
    """

    Q: np.ndarray
    c: np.ndarray
    A: np.ndarray
    b: np.ndarray
    eq: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integer: np.ndarray = field(default=None)  # type: ignore[assignment]

    def __post_init__(self):
        n = np.asarray(self.c).shape[0] if np.ndim(self.c) == 1 else -1
        if n < 1:
            raise ValueError(f"c must be a 1-d array with at least one entry, got shape {np.shape(self.c)}")
        m = np.asarray(self.b).shape[0] if np.ndim(self.b) == 1 else -1
        if m < 0:
            raise ValueError(f"b must be a 1-d array, got shape {np.shape(self.b)}")
        if np.shape(self.Q) != (n, n):
            raise ValueError(f"Q must have shape ({n}, {n}), got {np.shape(self.Q)}")
        if not np.allclose(self.Q, np.asarray(self.Q).T, atol=1e-10):
            raise ValueError("Q must be symmetric")
        if np.shape(self.A) != (m, n):
            raise ValueError(f"A must have shape ({m}, {n}), got {np.shape(self.A)}")
        for name, arr, size in (("eq", self.eq, m), ("lb", self.lb, n), ("ub", self.ub, n)):
            if np.shape(arr) != (size,):
                raise ValueError(f"{name} must have shape ({size},), got {np.shape(arr)}")
        if np.any(np.asarray(self.lb) > np.asarray(self.ub)):
            raise ValueError("lb must be <= ub elementwise")
        if self.integer is None:
            object.__setattr__(self, "integer", np.zeros(n, dtype=bool))
        elif np.shape(self.integer) != (n,):
            raise ValueError(f"integer must have shape ({n},), got {np.shape(self.integer)}")
        for name in ("Q", "c", "A", "b", "lb", "ub"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=np.float64))
        object.__setattr__(self, "eq", np.asarray(self.eq, dtype=bool))
        object.__setattr__(self, "integer", np.asarray(self.integer, dtype=bool))

    @property
    def m(self) -> int:
        return int(self.b.shape[0])

    @property
    def n(self) -> int:
        return int(self.c.shape[0])

    def relaxed(self) -> "QP":
        """The continuous relaxation (integrality dropped)."""
        return QP(self.Q, self.c, self.A, self.b, self.eq, self.lb, self.ub, np.zeros(self.n, dtype=bool))


@dataclass(frozen=True)
class Solution:
    """A solver's answer: ``status`` is ``optimal`` or ``infeasible`` (or ``unbounded`` / ``failed``).

    ``z`` are Clarabel's duals of the stacked rows ``[A_eq; A_ub; I (ub); -I (lb)]`` when known.
    """

    status: str
    x: np.ndarray | None
    obj: float | None
    iterations: int
    seconds: float
    z: np.ndarray | None = None


def objective(qp: QP, x: np.ndarray) -> float:
    """``1/2 x'Qx + c'x``."""
    x = np.asarray(x, dtype=np.float64)
    return float(0.5 * x @ qp.Q @ x + qp.c @ x)


def is_feasible_point(qp: QP, x: np.ndarray, tol: float = 1e-6) -> bool:
    """Whether ``x`` satisfies every constraint of ``qp`` (integrality included) up to ``tol``."""
    x = np.asarray(x, dtype=np.float64)
    r = qp.A @ x - qp.b
    ok = np.all(np.abs(r[qp.eq]) <= tol) and np.all(r[~qp.eq] <= tol)
    ok = ok and np.all(x >= qp.lb - tol) and np.all(x <= qp.ub + tol)
    return bool(ok and np.all(np.abs(x[qp.integer] - np.round(x[qp.integer])) <= tol))


def random_lcqp(rng: np.random.Generator, *, m: int = 10, n: int = 50, nnz: int = 100, q_alpha: float = 0.9,
                prob_equal: float = 0.3, bound_scale: float = 10.0, integer_prob: float = 0.0) -> QP:
    """A random LCQP drawn like the authors' ``generate_lcqp`` (see the module docstring).

    Args:
        rng: the source of randomness.
        m, n: constraints and variables.
        nnz: nonzeros of ``A`` (at most ``m * n``).
        q_alpha: sparsity of ``Q`` (``sklearn.datasets.make_sparse_spd_matrix(alpha=...)``).
        prob_equal: probability that a constraint is an equality.
        bound_scale: standard deviation of the bound draws (10 in the authors' code).
        integer_prob: probability that a variable is integer (0: a continuous LCQP).
    """
    from sklearn.datasets import make_sparse_spd_matrix

    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    for name, v in (("m", m), ("n", n), ("nnz", nnz)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if nnz > m * n:
        raise ValueError(f"nnz must be <= m * n = {m * n}, got {nnz}")
    for name, v in (("q_alpha", q_alpha), ("prob_equal", prob_equal), ("integer_prob", integer_prob)):
        if not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")
    if not bound_scale > 0:
        raise ValueError(f"bound_scale must be > 0, got {bound_scale!r}")
    b = rng.normal(size=m)
    c = rng.normal(size=n) * 0.1
    Q = make_sparse_spd_matrix(n_dim=n, alpha=q_alpha, norm_diag=True,
                               random_state=int(rng.integers(2**31 - 1)))
    Q = 0.5 * (Q + Q.T)
    bounds = np.sort(rng.normal(0.0, bound_scale, size=(n, 2)), axis=1)
    A = np.zeros((m, n))
    flat = rng.choice(m * n, size=nnz, replace=False)
    A.flat[flat] = rng.normal(size=nnz)
    eq = rng.random(m) < prob_equal
    integer = rng.random(n) < integer_prob
    return QP(Q=Q, c=c, A=A, b=b, eq=eq, lb=bounds[:, 0], ub=bounds[:, 1], integer=integer)


def _stacked(qp: QP):
    """Rows ``[A_eq; A_ub; I(finite ub); -I(finite lb)]`` and right-hand sides, Clarabel's ``Ax + s = b``."""
    n = qp.n
    fu, fl = np.isfinite(qp.ub), np.isfinite(qp.lb)
    eye = np.eye(n)
    G = np.vstack([qp.A[qp.eq], qp.A[~qp.eq], eye[fu], -eye[fl]])
    h = np.concatenate([qp.b[qp.eq], qp.b[~qp.eq], qp.ub[fu], -qp.lb[fl]])
    return G, h, int(qp.eq.sum())


def solve(qp: QP, *, tol: float = 1e-9) -> Solution:
    """Solve the continuous LCQP with Clarabel (integrality ignored: use ``solve_miqp_enumerate``)."""
    import clarabel
    from scipy import sparse

    G, h, n_eq = _stacked(qp)
    P = sparse.triu(sparse.csc_matrix(qp.Q), format="csc")
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = tol
    cones = ([clarabel.ZeroConeT(n_eq)] if n_eq else []) + (
        [clarabel.NonnegativeConeT(G.shape[0] - n_eq)] if G.shape[0] > n_eq else [])
    t0 = time.perf_counter()
    sol = clarabel.DefaultSolver(P, qp.c, sparse.csc_matrix(G), h, cones, settings).solve()
    seconds = time.perf_counter() - t0
    status = str(sol.status)
    if status in ("Solved", "AlmostSolved"):
        x = np.array(sol.x)
        return Solution("optimal", x, objective(qp, x), int(sol.iterations), seconds, np.array(sol.z))
    if "PrimalInfeasible" in status:
        return Solution("infeasible", None, None, int(sol.iterations), seconds)
    if "DualInfeasible" in status:
        return Solution("unbounded", None, None, int(sol.iterations), seconds)
    return Solution("failed", None, None, int(sol.iterations), seconds)


def solve_highs(qp: QP) -> Solution:
    """Solve the continuous LCQP with HiGHS's QP solver (an independent check of ``solve``)."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    inf = highspy.kHighsInf
    n = qp.n
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n, qp.m
    lp.col_cost_ = qp.c.tolist()
    lp.col_lower_ = [v if np.isfinite(v) else -inf for v in qp.lb]
    lp.col_upper_ = [v if np.isfinite(v) else inf for v in qp.ub]
    lp.row_lower_ = [bi if e else -inf for bi, e in zip(qp.b, qp.eq)]
    lp.row_upper_ = qp.b.tolist()
    from scipy import sparse

    Ac = sparse.csc_matrix(qp.A)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = (
        Ac.indptr.tolist(), Ac.indices.tolist(), Ac.data.tolist())
    model = highspy.HighsModel()
    model.lp_ = lp
    Ql = sparse.tril(sparse.csc_matrix(qp.Q), format="csc")
    model.hessian_.dim_ = n
    model.hessian_.format_ = highspy.HessianFormat.kTriangular
    model.hessian_.start_, model.hessian_.index_, model.hessian_.value_ = (
        Ql.indptr.tolist(), Ql.indices.tolist(), Ql.data.tolist())
    h.passModel(model)
    t0 = time.perf_counter()
    h.run()
    seconds = time.perf_counter() - t0
    status = h.modelStatusToString(h.getModelStatus())
    if status == "Optimal":
        x = np.array(h.getSolution().col_value)
        return Solution("optimal", x, objective(qp, x), int(h.getInfo().qp_iteration_count), seconds)
    if "nfeasible" in status:
        return Solution("infeasible", None, None, 0, seconds)
    return Solution("failed", None, None, 0, seconds)


def solve_osqp(qp: QP, *, x0: np.ndarray | None = None, y0: np.ndarray | None = None, eps: float = 1e-5,
               max_iter: int = 100_000) -> Solution:
    """Solve with OSQP (ADMM), cold or warm-started from primal ``x0`` (and dual ``y0``).

    The iteration count and solve time are what the warm-start comparison measures. Rows are
    ``l <= [A; I] x <= u``; polishing is off and adaptive rho updates are on (OSQP's defaults),
    ``eps_abs = eps_rel = eps``; termination is checked every iteration so the counts are exact.
    """
    import osqp
    from scipy import sparse

    n = qp.n
    Aall = sparse.csc_matrix(np.vstack([qp.A, np.eye(n)]))
    lo = np.concatenate([np.where(qp.eq, qp.b, -np.inf), qp.lb])
    hi = np.concatenate([qp.b, qp.ub])
    solver = osqp.OSQP()
    solver.setup(sparse.triu(sparse.csc_matrix(qp.Q), format="csc"), qp.c, Aall, lo, hi, verbose=False,
                 eps_abs=eps, eps_rel=eps, max_iter=max_iter, polishing=False, warm_starting=True,
                 check_termination=1)
    if x0 is not None or y0 is not None:
        kwargs = {}
        if x0 is not None:
            kwargs["x"] = np.asarray(x0, dtype=np.float64)
        if y0 is not None:
            kwargs["y"] = np.asarray(y0, dtype=np.float64)
        solver.warm_start(**kwargs)
    t0 = time.perf_counter()
    res = solver.solve()
    seconds = time.perf_counter() - t0
    status = str(res.info.status).lower()
    it = int(res.info.iter)
    if status.startswith("solved") and "inaccurate" not in status:
        x = np.array(res.x)
        return Solution("optimal", x, objective(qp, x), it, seconds, np.array(res.y))
    if "infeasible" in status and "dual" not in status:
        return Solution("infeasible", None, None, it, seconds)
    return Solution("failed", None, None, it, seconds)


def kkt_residuals(qp: QP, x: np.ndarray, z: np.ndarray) -> dict:
    """The KKT residuals of a continuous LCQP at primal ``x`` and duals ``z`` (``solve``'s row order).

    Returns the max-norms of: stationarity ``Qx + c + G'z``; primal infeasibility; dual
    infeasibility (negative multipliers of inequality rows); complementary slackness ``z_i s_i``.
    """
    G, h, n_eq = _stacked(qp)
    x, z = np.asarray(x, dtype=np.float64), np.asarray(z, dtype=np.float64)
    if z.shape != (G.shape[0],):
        raise ValueError(f"z must have shape ({G.shape[0]},), got {z.shape}")
    slack = h - G @ x
    stat = qp.Q @ x + qp.c + G.T @ z
    primal = np.concatenate([np.abs(slack[:n_eq]), np.maximum(-slack[n_eq:], 0.0)])
    dual = np.maximum(-z[n_eq:], 0.0)
    comp = np.abs(z[n_eq:] * slack[n_eq:])
    mx = lambda a: float(np.max(a)) if a.size else 0.0  # noqa: E731
    return {"stationarity": mx(stat), "primal": mx(primal), "dual": mx(dual), "complementarity": mx(comp)}


def solve_miqp_enumerate(qp: QP, *, max_assignments: int = 4096) -> Solution:
    """Exact MI-LCQP solution by enumerating every integer assignment (small instances only).

    Integer variables need finite bounds; for each assignment the continuous remainder is solved by
    Clarabel (or, with no continuous variables left, checked and evaluated directly).
    """
    idx = np.flatnonzero(qp.integer)
    if idx.size and not (np.all(np.isfinite(qp.lb[idx])) and np.all(np.isfinite(qp.ub[idx]))):
        raise ValueError("integer variables need finite bounds for enumeration")
    domains = [np.arange(np.ceil(qp.lb[j]), np.floor(qp.ub[j]) + 1) for j in idx]
    total = int(np.prod([len(d) for d in domains])) if domains else 1
    if total > max_assignments:
        raise ValueError(f"{total} integer assignments exceed max_assignments={max_assignments}")
    cont = np.flatnonzero(~qp.integer)
    best: tuple[float, np.ndarray] | None = None
    t0 = time.perf_counter()
    for values in itertools.product(*domains):
        xi = np.array(values, dtype=np.float64)
        if cont.size == 0:
            x = np.zeros(qp.n)
            x[idx] = xi
            if not is_feasible_point(qp, x):
                continue
            cand = (objective(qp, x), x)
        else:
            # substitute the integer part: the remainder is an LCQP in the continuous variables
            Qcc, Qci = qp.Q[np.ix_(cont, cont)], qp.Q[np.ix_(cont, idx)]
            sub = QP(Qcc, qp.c[cont] + Qci @ xi, qp.A[:, cont], qp.b - qp.A[:, idx] @ xi, qp.eq,
                     qp.lb[cont], qp.ub[cont])
            s = solve(sub)
            if s.status != "optimal":
                continue
            x = np.zeros(qp.n)
            x[idx], x[cont] = xi, s.x
            cand = (objective(qp, x), x)
        if best is None or cand[0] < best[0] - 1e-12:
            best = cand
    seconds = time.perf_counter() - t0
    if best is None:
        return Solution("infeasible", None, None, total, seconds)
    return Solution("optimal", best[1], best[0], total, seconds)


def to_row(qp: QP, sol: Solution, **extra) -> dict:
    """A flat, Parquet-ready row of an instance and its label (lists of floats)."""
    return {"m": qp.m, "n": qp.n, "Q": qp.Q.ravel().tolist(), "c": qp.c.tolist(), "A": qp.A.ravel().tolist(),
            "b": qp.b.tolist(), "eq": qp.eq.tolist(), "lb": qp.lb.tolist(), "ub": qp.ub.tolist(),
            "integer": qp.integer.tolist(), "status": sol.status, "feasible": sol.status == "optimal",
            "obj": sol.obj if sol.obj is not None else float("nan"),
            "x": sol.x.tolist() if sol.x is not None else [], "iterations": sol.iterations, **extra}


def from_row(row: dict) -> QP:
    """The ``QP`` of a row written by ``to_row``."""
    m, n = int(row["m"]), int(row["n"])
    return QP(Q=np.reshape(row["Q"], (n, n)), c=np.asarray(row["c"]), A=np.reshape(row["A"], (m, n)),
              b=np.asarray(row["b"]), eq=np.asarray(row["eq"], dtype=bool), lb=np.asarray(row["lb"]),
              ub=np.asarray(row["ub"]), integer=np.asarray(row["integer"], dtype=bool))
