"""Kernel-PDE reproduction: accuracy against references, and time and memory of complete solves.

Part 1 (accuracy): each case (PDE, grid, lengthscales) is solved to convergence by the paper's
Kronecker kernel solver with a MATRIX-FREE Gauss-Newton (each step by preconditioned conjugate
gradients with Kronecker mode products and the Kronecker-eigenbasis preconditioner of
``rayml.pde.kernel_solver``; memory ``O(N)``), by the same model with the authors' dense
Gauss-Newton (``N x N`` normal matrix, ``kronecker-dense``), by DAKS (Chen et al. 2021: derivative
functionals in a full Gram matrix, Gauss-Newton) with the same kernel and lengthscales, and by
finite differences on the same grid. Error: RMSE at the collocation points against the reference
(Cole-Hopf for Burgers, the manufactured solutions otherwise). Symmetric tuning: DAKS's nugget and
the Kronecker jitter each pick the best of the same grid ``REGULARISERS`` on a coarser grid of the
same PDE (``tune_fraction`` of the points per axis, the lengthscales scaled to keep the points per lengthscale;
session 9), never on the test grid.

Part 2 (scaling, nonlinear elliptic equation on ``n x n`` grids): the CPU time and peak traced
memory (``tracemalloc``, which sees numpy's buffers) of a COMPLETE solve by each method, and
whether it reached ``target_rel_l2``. Methods whose ``N x N`` (dense Gauss-Newton) or ``m x m``
(DAKS Gram) matrices would exceed ``max_gram_mib`` are not run (never to an out-of-memory kill);
the record gives the memory they would need.

Part 3 (the paper's hard cases, issue 36; ``hard_cases``, ``HARD_CASES``): Allen-Cahn with ``a = 15`` and ``20`` on
the authors' grids (49-90 points per axis), lengthscales and jitter, and Burgers with ``nu = 0.001`` on the authors'
grids (60 x 20 to 120 x 40). Each is solved by the matrix-free Gauss-Newton, by Adam (the authors' optimiser and
learning rate, Burgers with the authors' 800 boundary-only steps first) at the same number of mode products (one
grid-by-factor matrix product each; the solver counts them), by the dense Gauss-Newton where its ``N x N`` arrays fit
``max_gram_mib``, and by finite differences on the same grid. DAKS is not run there: its Gram needs 355 MiB at 49^2
(Allen-Cahn) and 3 GiB at 100^2. (Until session 17 its time ruled it out as well: each Gauss-Newton step formed the
dense ``(m x m)(m x N)`` product, m = 6,819 at 49^2; with the sparse step of ``daks_step`` a step costs about one
``N x N`` Cholesky, so DAKS on the hard cases whose Gram fits the cap, Allen-Cahn 49^2 and Burgers up to 84 x 28 at
full, is open, not added.)

Finite differences (session 14, outside review R11): ``fd``, the claims' baseline, is the strongest fair scheme per
equation (the fourth-order Laplacian with Newton for the elliptic and Allen-Cahn equations, ``fd_solve(order=4)``; the
Godunov flux with Crank-Nicolson for Burgers); ``fd2``, the second-order 5-point scheme of the earlier records, is the
control. The hard Allen-Cahn claim is gated on every solve it pools having converged, and the grid claim on the
largest a = 15 grid beating the smallest at the smallest grid's lengthscale too (``FIXED_LS``).

Per-equation accuracy claims (session 15, after outside review R13): the matrix-free solver against the strongest
FD on the easy cases is one claim per equation (nonlinear elliptic, Allen-Cahn a = 1, Burgers), a one-sided sign
test over that equation's cases (``EASY_TIE``: RMSEs within 10% are ties, dropped), gated on at least
``EASY_MIN_CASES`` cases and on every solve it pools having converged; the geometric mean over all cases (``metrics.
geo_mean_rmse``, which the elliptic case's 350x carried) stays a printed figure. Each equation has six (elliptic,
Allen-Cahn) or five (Burgers) cases at full: more grids of the same equations, the lengthscales scaled from the
equation's reference case (``scaled_lengthscale``). Every CG solve records its final relative residual.

Session 16 (outside review R15): the lengthscale is tuned with the regulariser, for both kernel solvers alike: a factor
on the case's lengthscales (``ls_factors``, the case's own at factor 1 strictly inside) crossed with the jitter /
nugget grid, on the tuning instance only (the coarser grid of the same PDE, never the test grid); the dense
Gauss-Newton takes the matrix-free solver's choice (the same model). The per-equation claims' pairs gate counts the
untied pairs (wins + losses; ``EASY_MIN_CASES``), not the cases, and a scaling solve reaches the target only when no
Gauss-Newton step's CG stopped at its cap.

Every (case, method) and (grid, method) cell is one Ray task through ``rayml.runtime.pmap``.
The solvers are deterministic, so there are no seeds to spread. Wall times and peak memory go
under ``timings`` (they depend on what else runs); ``timing=False`` records zeros there.

The speed claim (issue 36) is the slope of log(seconds) on log(N) over the grids where both the
matrix-free solver and DAKS ran (at least four), not one grid's times, paired over timing passes. The
passes are timed round-robin (session 8): pass p of every scaling cell in round p, one ``pmap`` per
round, the cells shuffled per round; DAKS is timed twice per round (``daks-replica``), the claim's
null control. Convergence (the accuracy gate, the tuning) is judged by one rule for every kernel
solver: the relative change of u on the grid in its last Gauss-Newton step below ``CONVERGED_CHANGE``.

Assumed: lengthscales per case (from the authors' configurations where they exist: Burgers
42 x 14 with (0.05, 0.3), elliptic 18 x 18 with 0.2), Allen-Cahn with ``a = 1`` in part 1 (the authors' 15 and 20
are part 3), ``v = 1e4``, ``tau = 1e8`` (the authors' Allen-Cahn code uses ``tau = 1e12``) for every case and both
optimisers. Ours, not the paper's: the
accuracy claim's limit ``ACCURACY_LIMIT`` (a mean log10 RMSE ratio to DAKS below 0.5 decades, "within about
3x"; the abstract states no number). Reported beside that claim (session 10): its value with DAKS at the fixed
nuggets ``FIXED_DAKS_NUGGETS`` instead of its tuned one (``metrics.accuracy_vs_daks_at_fixed_nugget``).
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.pde.baselines import daks_memory_bytes, daks_solve, fd_solve
from rayml.pde.kernel_solver import KernelPDEConfig, solve
from rayml.pde.problems import NonlinearElliptic, make_problem
from rayml.results import Claim, Control

PAPER = "Toward Efficient Kernel-Based Solvers for Nonlinear PDEs, ICML 2025"
NAME = "kernel-pde"
OURS = "kronecker"
DENSE = "kronecker-dense"
# session 14 (outside review R11): "fd" is the strongest fair finite-difference scheme per equation, the claims'
# baseline: the fourth-order Laplacian (``fd_solve(order=4)``) for the elliptic and Allen-Cahn equations, the Godunov
# flux with Crank-Nicolson for Burgers; "fd2" is the second-order 5-point scheme (the same Godunov scheme for
# Burgers), the baseline of the records before session 14, now a control
FD_METHODS = ("fd", "fd2")
ACC_METHODS = (OURS, DENSE, "daks", *FD_METHODS)
SCALE_METHODS = (OURS, DENSE, "daks")
# session 7: up to 1e-3 (was 1e-6), where DAKS converges on Burgers (session-3 and -6 reviews: its test RMSE
# 0.0045 at 1e-4 against 0.126 at the 1e-9 the old grid chose). Session 16: every other decade of the session-7 grid
# (1e-10 ... 1e-3, 8 values), so that the regulariser crossed with LS_FACTORS costs 12 tuning solves per (case, solver)
# instead of 40: measured (/tmp/kpde16/probe_cost.py, CPU seconds on the loaded machine) the 8 x 5 grid would cost
# about 425 CPU s at quick and 2,540 at full (DAKS on the Burgers 60 x 20 tuning instances: 15-20 s per solve),
# against 85 and 510 for the 8-value grid alone, past quick's 90 s and full's 30 minutes. An edge still extends by
# the same step (two decades), up to tune_extend times.
REGULARISERS = (1e-9, 1e-7, 1e-5, 1e-3)
# session 16 (R15, issue 36): the lengthscale factor grid, tuned jointly with REGULARISERS for both kernel solvers on
# each case's tuning instance: factor 1 (the authors' lengthscales where they exist, ours elsewhere) strictly inside, a
# choice on an edge extends the grid geometrically (tune_extend times, limits LS_FACTOR_LIMITS). The session-15 probe
# (/tmp/kpde36/probe_ls_tune.py, on tuning instances) picked 2 on Allen-Cahn a = 1 and 1 on the elliptic cases.
# Trimmed for the time budget (REGULARISERS) from the factors 0.5, 1, 1.5, 2, 3 to a ratio-2 grid; an edge extends by
# the same ratio (0.25, 4, ...).
LS_FACTORS = (0.5, 1.0, 2.0)
LS_FACTOR_LIMITS = (0.1, 10.0)
# session 10 (reviewer R3 of session 9): the accuracy claim's value with DAKS at these fixed nuggets (the matrix-free
# solver at its tuned jitter), reported beside the tuned one, so a reader sees how much of the verdict the tuning
# instance carries; a description, not a claim
FIXED_DAKS_NUGGETS = (1e-4, 1e-3)
# the accuracy claim's limit, ours (the abstract states no number): a mean log10 RMSE ratio below 0.5 decades
ACCURACY_LIMIT = 0.5
ABSTRACT_SCALE = ("abstract: 'This structure enables us to avoid computing the full Gram matrix, reducing costs "
                  "and scaling efficiently to a large number of collocation points.'")
ABSTRACT_RESULTS = ("abstract: 'In numerical experiments, we demonstrate the advantages of our method in solving "
                    "several benchmark PDEs.'")

# case: problem, parameters, grid, lengthscales
def scaled_lengthscale(grid: tuple[int, int], ref_grid: tuple[int, int], ref_ls: tuple[float, ...]) -> tuple[float, ...]:
    """``ref_ls`` (on ``ref_grid``) scaled by the ratio of the grid spacings, so that ``grid`` has as many points per
    lengthscale as ``ref_grid`` (4 significant digits): the rule of the cases added in issue 36 (session 15)."""
    return tuple(float(f"{l * (m - 1) / (n - 1):.4g}") for l, n, m in zip(ref_ls, grid, ref_grid))


CASES = {
    "burgers-0.02-42x14": ("burgers", {"nu": 0.02}, (42, 14), (0.05, 0.3)),
    "burgers-0.02-60x20": ("burgers", {"nu": 0.02}, (60, 20), (0.05, 0.3)),
    "burgers-0.01-60x20": ("burgers", {"nu": 0.01}, (60, 20), (0.04, 0.25)),
    "elliptic-12x12": ("elliptic", {}, (12, 12), (0.25, 0.25)),
    "elliptic-18x18": ("elliptic", {}, (18, 18), (0.2, 0.2)),
    "allen-cahn-12x12": ("allen-cahn", {"a": 1.0}, (12, 12), (0.15, 0.15)),
    "allen-cahn-20x20": ("allen-cahn", {"a": 1.0}, (20, 20), (0.1, 0.1)),
}
# issue 36 (session 15, after R13): the per-equation claims pair the matrix-free solver with the fourth-order FD over
# an equation's cases, and a one-sided sign test needs at least 5 pairs to reach p < 0.05, so each equation gets
# cases up to EASY_MIN_CASES or more. Declared before any of them was run: more grids of the same equations, the
# lengthscales of the equation's reference case (the authors' elliptic 18 x 18 with 0.2 and Burgers 42 x 14 with
# (0.05, 0.3); Burgers nu = 0.01 from its 60 x 20 case; Allen-Cahn a = 1 from its 20 x 20 case, ours) scaled to keep
# its points per lengthscale (scaled_lengthscale). Burgers 21 x 7 is tiny's only (the tests' Burgers case).
for _n in (14, 16, 20, 24):
    CASES[f"elliptic-{_n}x{_n}"] = ("elliptic", {}, (_n, _n), scaled_lengthscale((_n, _n), (18, 18), (0.2, 0.2)))
for _n in (14, 16, 24, 28):
    CASES[f"allen-cahn-{_n}x{_n}"] = ("allen-cahn", {"a": 1.0}, (_n, _n),
                                      scaled_lengthscale((_n, _n), (20, 20), (0.1, 0.1)))
CASES["burgers-0.02-36x12"] = ("burgers", {"nu": 0.02}, (36, 12), scaled_lengthscale((36, 12), (42, 14), (0.05, 0.3)))
CASES["burgers-0.01-42x14"] = ("burgers", {"nu": 0.01}, (42, 14), scaled_lengthscale((42, 14), (60, 20), (0.04, 0.25)))
CASES["burgers-0.02-21x7"] = ("burgers", {"nu": 0.02}, (21, 7), scaled_lengthscale((21, 7), (42, 14), (0.05, 0.3)))
EQUATIONS = ("elliptic", "allen-cahn", "burgers")
# the per-equation claims' tie tolerance (ours, fixed before the run): two RMSEs within 10% of the larger are a tie,
# neither a win nor a loss (the fourth-order FD's boundary row alone moves its easy-case RMSEs by 2-5x, R13)
EASY_TIE = (0.0, 0.1)
# the fewest untied pairs (wins + losses; the sign test drops ties) at which the one-sided sign test can reach
# p < 0.05 (2^-5 = 0.031). Session 16 (R15): the gate counts untied pairs, not cases (5 cases with a tie read "fails"
# at 4 / 0 / 1, p = 0.0625, a verdict the test could not have turned into "holds")
EASY_MIN_CASES = 5

# issue 36: the paper's hard cases, at the authors' configurations (XZT008/PDE-GP-Solver: allen_cahn.py and
# burgers.py `configs`): case -> problem, parameters, grid, lengthscales, jitter (the authors', not tuned), the
# authors' Adam epochs at that grid and Adam's schedule (learning rate; Burgers: boundary-only steps at their own
# learning rate first). Errors at the collocation points against the exact solution (Allen-Cahn) or the Cole-Hopf
# reference (Burgers; its Gauss-Hermite rule agrees with an independent trapezoid rule to 1e-15 at nu = 0.001,
# tests/pde). Each case is solved by the matrix-free Gauss-Newton (OURS), by Adam at the same number of mode
# products (``HARD_ADAM``; the authors' optimiser and learning rate, its epochs shortened to that budget), by the
# dense Gauss-Newton where its N x N arrays fit ``max_gram_mib``, and by finite differences on the same grid.
_AC_ADAM = {"lr": 1e-4}
_B_ADAM = {"lr": 1e-4, "boundary_steps": 800, "boundary_lr": 1e-3}
HARD_CASES = {
    "allen-cahn-15-25x25": ("allen-cahn", {"a": 15.0}, (25, 25), (0.01, 0.01), 5e-6, 10000, _AC_ADAM),
    "allen-cahn-15-35x35": ("allen-cahn", {"a": 15.0}, (35, 35), (0.04, 0.04), 5e-6, 10000, _AC_ADAM),
    "allen-cahn-15-49x49": ("allen-cahn", {"a": 15.0}, (49, 49), (0.04, 0.04), 5e-6, 100000, _AC_ADAM),
    "allen-cahn-15-70x70": ("allen-cahn", {"a": 15.0}, (70, 70), (0.04, 0.04), 5e-6, 250000, _AC_ADAM),
    "allen-cahn-15-90x90": ("allen-cahn", {"a": 15.0}, (90, 90), (0.03, 0.03), 5e-6, 300000, _AC_ADAM),
    "allen-cahn-20-49x49": ("allen-cahn", {"a": 20.0}, (49, 49), (0.04, 0.04), 5e-6, 100000, _AC_ADAM),
    "allen-cahn-20-70x70": ("allen-cahn", {"a": 20.0}, (70, 70), (0.03, 0.03), 5e-6, 250000, _AC_ADAM),
    "burgers-0.001-42x14": ("burgers", {"nu": 0.001}, (42, 14), (0.05, 0.3), 1e-8, 100000, _B_ADAM),
    "burgers-0.001-60x20": ("burgers", {"nu": 0.001}, (60, 20), (0.05, 0.3), 1e-8, 100000, _B_ADAM),
    "burgers-0.001-84x28": ("burgers", {"nu": 0.001}, (84, 28), (0.04, 0.2), 1e-9, 100000, _B_ADAM),
    "burgers-0.001-120x40": ("burgers", {"nu": 0.001}, (120, 40), (0.025, 0.1), 1e-9, 300000, _B_ADAM),
}
HARD_METHODS = (OURS, DENSE, "adam", *FD_METHODS)
# session 14 (R11): the matrix-free Gauss-Newton on the largest Allen-Cahn a = 15 grid at the smallest grid's
# lengthscale, the grid claim's gate (the error falls with the grid at a fixed lengthscale too)
FIXED_LS = "kronecker-fixed-lengthscale"

# cg_iterations: with the sum-of-Kronecker-terms preconditioner (issue 36) CG meets cg_tol in about 150-800 steps
# on the accuracy grids. Session 15 (R13): the cap is 5000 (was 1000, which every CG solve of the 48^2 / 64^2
# scaling grids and of the hard Allen-Cahn 70^2 / 90^2 cases reached, final relative residuals up to 0.014 / 0.17 /
# 6e-7 / 1.5e-3; /tmp/kpde36/probe_cap.py, not committed): at 5000 the 48^2, 64^2 and 70^2 solves meet cg_tol in
# every step (at most about 3,100 CG steps per Gauss-Newton step at 64^2) with the same rel-L2; 96^2 and 128^2 still
# reach it. The record counts the Gauss-Newton steps that hit the cap and the largest final CG residual per solve.
# tune_scale_lengthscale (session 9): the tuning grid keeps the test grid's points per lengthscale (tuning_instance)
_COMMON = dict(v=1e4, tau=1e8, tune_fraction=0.75, tune_scale_lengthscale=True, tune_extend=2, cg_iterations=5000, cg_tol=1e-8, target_rel_l2=0.01)
# session 9 (quick at 81 s of its 90 s idle budget): at quick, DAKS's Gram is capped at 48 MiB, so DAKS runs on the
# grids 16-28 (34.8 MiB at 28, 60.8 MiB at 32) and the slope uses those four; the accuracy cells are timed once
# (their seconds are no claim's); no timing rounds past DAKS's reach (no claim reads them). Re-read from the
# session-8 quick and full records, the slope verdicts over 16-28 are those over 16-32 (5/5, 5/5, replica 3/5).
# Full keeps its design: accuracy cells timed 6 times, two rounds past DAKS's reach.
# the easy cases per equation (quick: the elliptic and Allen-Cahn ones, Burgers 42 x 14 only: DAKS on Burgers 60 x 20
# takes 18-40 s of CPU per solve)
EASY_ELLIPTIC = [f"elliptic-{n}x{n}" for n in (12, 14, 16, 18, 20, 24)]
EASY_ALLEN_CAHN = [f"allen-cahn-{n}x{n}" for n in (12, 14, 16, 20, 24, 28)]
EASY_BURGERS = ["burgers-0.02-36x12", "burgers-0.02-42x14", "burgers-0.02-60x20", "burgers-0.01-42x14",
                "burgers-0.01-60x20"]
SIZES = {
    "tiny": dict(cases=["elliptic-12x12", "allen-cahn-12x12", "burgers-0.02-21x7"], scaling_grids=[8, 10, 12, 14], max_gram_mib=64,
                 gn_iterations=6, timing=True, timing_repeats=3, accuracy_repeats=3, rounds_past_daks=2,
                 hard_cases=["allen-cahn-15-25x25", "allen-cahn-15-35x35", "burgers-0.001-42x14"],
                 **{**_COMMON, "tune_extend": 0, "regularisers": (1e-7, 1e-5), "ls_factors": (1.0, 2.0)}),
    "quick": dict(cases=["burgers-0.02-42x14", *EASY_ELLIPTIC, *EASY_ALLEN_CAHN],
                  scaling_grids=[16, 20, 24, 28, 48, 64], max_gram_mib=48,
                  gn_iterations=20, timing=True, timing_repeats=6, accuracy_repeats=1, rounds_past_daks=0,
                  hard_cases=["allen-cahn-15-49x49", "allen-cahn-15-70x70", "burgers-0.001-60x20"], **_COMMON),
    "full": dict(cases=[*EASY_ELLIPTIC, *EASY_ALLEN_CAHN, *EASY_BURGERS], scaling_grids=[16, 20, 24, 28, 32, 40, 48, 64, 96, 128], max_gram_mib=1024,
                 gn_iterations=30, timing=True, timing_repeats=6, accuracy_repeats=6, rounds_past_daks=2,
                 hard_cases=["allen-cahn-15-49x49", "allen-cahn-15-70x70", "allen-cahn-15-90x90", "allen-cahn-20-49x49",
                             "allen-cahn-20-70x70", "burgers-0.001-60x20", "burgers-0.001-84x28",
                             "burgers-0.001-120x40"], **_COMMON),
}


def _check_config(config: Mapping[str, Any]) -> None:
    unknown = [c for c in config["cases"] if c not in CASES]
    if unknown or not config["cases"]:
        raise ValueError(f"cases must be a non-empty list from {sorted(CASES)}, got {config['cases']}")
    hard = config.get("hard_cases", [])
    if not isinstance(hard, (list, tuple)) or [c for c in hard if c not in HARD_CASES]:
        raise ValueError(f"hard_cases must be a list from {sorted(HARD_CASES)}, got {hard!r}")
    grids = config["scaling_grids"]
    if not grids or any(not isinstance(n, int) or n < 4 for n in grids):
        raise ValueError(f"scaling_grids: grid too small or not an integer (each >= 4), got {grids}")
    if not config["max_gram_mib"] > 0:
        raise ValueError(f"max_gram_mib must be > 0, got {config['max_gram_mib']}")
    if isinstance(config["timing_repeats"], bool) or not isinstance(config["timing_repeats"], int) \
            or config["timing_repeats"] < 1:
        raise ValueError(f"timing_repeats must be a positive integer, got {config['timing_repeats']!r}")
    for key, low in (("accuracy_repeats", 1), ("rounds_past_daks", 0)):
        v = config.get(key, low)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{key} must be an integer >= {low}, got {v!r}")
    if isinstance(config["gn_iterations"], bool) or not isinstance(config["gn_iterations"], int) \
            or config["gn_iterations"] < 1:
        raise ValueError(f"gn_iterations must be a positive integer, got {config['gn_iterations']!r}")
    if not 0 < float(config["tune_fraction"]) <= 1:
        raise ValueError(f"tune_fraction must lie in (0, 1], got {config['tune_fraction']}")
    if isinstance(config["tune_extend"], bool) or not isinstance(config["tune_extend"], int) \
            or config["tune_extend"] < 0:
        raise ValueError(f"tune_extend must be an integer >= 0, got {config['tune_extend']!r}")
    for key, default in (("regularisers", REGULARISERS), ("ls_factors", LS_FACTORS)):
        v = config.get(key, default)
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or not len(v) \
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0 for x in v):
            raise ValueError(f"{key} must be a non-empty list of positive numbers, got {v!r}")


def _solve(method: str, problem, grid, ls, reg: float, config: Mapping[str, Any]):
    if method in (OURS, DENSE):
        return solve(problem, KernelPDEConfig(
            grid=grid, lengthscale=ls, jitter=reg, v=config["v"], tau=config["tau"],
            iterations=int(config["gn_iterations"]), optimizer="gauss-newton-cg" if method == OURS else "gauss-newton",
            cg_iterations=int(config["cg_iterations"]), cg_tol=float(config["cg_tol"])))
    if method == "daks":
        return daks_solve(problem, grid, ls, nugget=reg, iterations=int(config["gn_iterations"]),
                          max_gram_bytes=float(config["max_gram_mib"]) * 2**20)
    if method in FD_METHODS:
        return fd_solve(problem, grid, order=fd_order(method, problem))
    raise ValueError(f"unknown method {method!r}")


def fd_order(method: str, problem) -> int:
    """The Laplacian's order of finite-difference ``method`` on ``problem``: "fd" (the strongest fair scheme) 4 on
    the stationary equations, "fd2" 2; Burgers has one scheme (Godunov flux, Crank-Nicolson: ``order=2``)."""
    return 4 if method == "fd" and problem.name != "burgers" else 2


def _cg_steps(res) -> list[int]:
    return list(getattr(res, "info", {}).get("cg_steps", []) or [])


def _cg_stats(res, config: Mapping[str, Any]) -> dict:
    """A solve's CG figures: ``cg_steps`` (total), ``cg_capped`` (Gauss-Newton steps whose CG reached
    ``config["cg_iterations"]``) and ``cg_max_residual``, the largest final relative CG residual over its steps
    (session 15, R13: a capped CG solve says how far from ``cg_tol`` it stopped; NaN for solvers without CG)."""
    cg = _cg_steps(res)
    r = list(getattr(res, "info", {}).get("cg_residuals", []) or [])
    return {"cg_steps": int(sum(cg)), "cg_capped": int(sum(k >= int(config["cg_iterations"]) for k in cg)),
            "cg_max_residual": float(max(r)) if r else float("nan")}


# session 8 (outside review): one convergence rule for every Gauss-Newton solver. Each solver keeps its own
# stopping rule (ours: relative loss decrease <= 1e-10, as the authors' code; DAKS: relative iterate change
# < 1e-10), which are not comparable (a loss decrease of 1e-10 is an iterate change of about 1e-5); the
# convergence gate and the tuning's converged-only rule read the same quantity for both: the relative change of
# the solution u on the grid in the solver's last Gauss-Newton step, below CONVERGED_CHANGE.
CONVERGED_CHANGE = 1e-6


def _u_change(method: str, res) -> float:
    """The relative change of u at the collocation points in the last Gauss-Newton step (NaN for FD)."""
    if method in (OURS, DENSE):
        return float(getattr(res, "info", {}).get("last_change", float("nan")))
    return float(getattr(res, "last_u_change", float("nan")))


def _converged(method: str, res) -> bool:
    """Finite differences when no Newton solve stopped at its cap; a kernel solver when its last step moved u by less
    than CONVERGED_CHANGE."""
    if method in FD_METHODS:
        return int(getattr(res, "capped_steps", 0)) == 0
    return bool(_u_change(method, res) < CONVERGED_CHANGE)


def _measured(method, problem, grid, ls, reg, config):
    """A complete solve with its CPU time and peak traced memory (zeros when timing is off).

    The time is the process's CPU time (``time.process_time``), not wall time: on a shared machine
    wall time mostly measures the other jobs. Memory is traced on the first solve, whose time is
    used only when there are no repeats (tracemalloc slows the solve it traces); then come
    ``timing_repeats - 1`` untraced complete solves (the solvers are deterministic), the timing
    *passes*. Returns ``(result, seconds, peak_mib, passes)``: ``seconds`` is the minimum over the
    passes, ``passes`` every pass's time in order (the slope claim is tested over passes)."""
    if not config["timing"]:
        res = _solve(method, problem, grid, ls, reg, config)
        return res, 0.0, 0.0, []
    tracemalloc.start()
    t0 = time.process_time()
    try:
        res = _solve(method, problem, grid, ls, reg, config)
        seconds = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()

    def untraced() -> float:
        t0 = time.process_time()
        _solve(method, problem, grid, ls, reg, config)
        return time.process_time() - t0

    passes = [untraced() for _ in range(int(config["timing_repeats"]) - 1)]
    return res, (min(passes) if passes else seconds), peak, passes


def _slope(grids: list[int], seconds: list[float]) -> float:
    """The least-squares slope of log(seconds) on log(N), ``N = n^2``, over ``grids`` (NaN below two)."""
    if len(grids) < 2:
        return float("nan")
    return float(np.polyfit(np.log([n * n for n in grids]), np.log(seconds), 1)[0])


def tuning_instance(case: str, config: Mapping[str, Any]) -> tuple[tuple[int, int], tuple[float, float]]:
    """The tuning instance of ``case``: the grid with ``tune_fraction`` of the points per axis (never the test
    grid) and, with ``tune_scale_lengthscale``, the lengthscales scaled by the ratio of the grid spacings, so the
    tuning grid has as many points per lengthscale as the test grid (session 9). A nugget's effect on the Gram
    matrix (its conditioning) depends on the lengthscale in units of the spacing; at the case's own lengthscales
    the 32 x 10 tuning grid of Burgers 42 x 14 has 0.78 spacings per x-lengthscale against 1.0 on the test grid,
    and there DAKS met the convergence rule at no nugget of 1e-10 ... 1e-3 (20 steps)."""
    _, _, grid, ls = CASES[case]
    small = tuple(max(6, int(round(n * float(config["tune_fraction"])))) for n in grid)
    if config.get("tune_scale_lengthscale", False):
        ls = tuple(float(l) * (n - 1) / (m - 1) for l, n, m in zip(ls, grid, small))
    return small, tuple(ls)


def tune_one(item: tuple[str, str, float, float], config: Mapping[str, Any]) -> dict:
    """``(case, method, regulariser, lengthscale factor)`` on the tuning instance of the same PDE
    (``tuning_instance``, its lengthscales times the factor; session 16): its RMSE, convergence and CPU seconds."""
    case, method, reg, factor = item
    name, params, _, _ = CASES[case]
    small, ls = tuning_instance(case, config)
    method = DENSE if method == OURS else method  # the jitter is the model's; the dense solve is faster here
    t0 = time.process_time()
    res = _solve(method, make_problem(name, **params), small, tuple(float(factor) * l for l in ls), reg, config)
    return {"case": case, "reg": reg, "ls_factor": float(factor), "rmse": float(res.rmse) if np.isfinite(res.rmse) else 1e300,
            "converged": _converged(method, res), "last_u_change": _u_change(method, res),
            "seconds": time.process_time() - t0}


def accuracy_one(item: tuple, config: Mapping[str, Any]) -> dict:
    """One (case, method, regulariser, lengthscale factor): errors, and the time and peak memory of the complete
    solve, at the case's lengthscales times the factor (session 16; 1 for finite differences, which have none)."""
    case, method, reg, factor = item
    name, params, grid, ls = CASES[case]
    ls = tuple(float(factor) * l for l in ls)
    res, seconds, peak, _ = _measured(method, make_problem(name, **params), grid, ls, reg,
                                      {**config, "timing_repeats": int(config.get("accuracy_repeats",
                                                                                  config["timing_repeats"]))})
    return {"case": case, "method": method, "ls_factor": float(factor), "rmse": res.rmse, "rel_l2": res.rel_l2,
            "seconds": seconds,
            "peak_mib": peak, "points": grid[0] * grid[1], "gn_iterations": int(res.iterations),
            "converged": _converged(method, res), "last_u_change": _u_change(method, res),
            "last_change": float(getattr(res, "last_change", float("nan"))), **_cg_stats(res, config)}


def accuracy_cell(item: tuple, config: Mapping[str, Any]) -> dict:
    """``(case, method, regulariser, lengthscale factor, fixed)``: ``accuracy_one``, untimed when ``fixed`` (DAKS at
    one of ``FIXED_DAKS_NUGGETS`` and its tuned lengthscale factor, a reported value beside the tuned solve, whose
    time no claim reads)."""
    case, method, reg, factor, fixed = item
    row = accuracy_one((case, method, reg, factor), {**config, "timing": False} if fixed else config)
    return {**row, "regulariser": float(reg), "fixed": bool(fixed)}


def fixed_nugget_values(rmse: Mapping[tuple[str, str], float], daks_at: Mapping[tuple[str, float], dict],
                        cases: list[str]) -> dict:
    """The accuracy claim's number (mean over cases of log10(matrix-free RMSE / DAKS RMSE)) with DAKS at each fixed
    nugget of ``FIXED_DAKS_NUGGETS`` (``daks_at[(case, nugget)]``: its ``rmse`` and ``converged``), the matrix-free
    solver at its tuned jitter (``rmse[(case, OURS)]``), and the share of DAKS's solves that converged."""
    out = {}
    for nug in FIXED_DAKS_NUGGETS:
        per = {c: float(np.log10(rmse[(c, OURS)] / daks_at[(c, nug)]["rmse"])) for c in cases}
        out[f"{nug:g}"] = {"log10_rmse_ratio_vs_daks": float(np.mean(list(per.values()))),
                           "below_limit": bool(np.mean(list(per.values())) < ACCURACY_LIMIT),
                           "per_case": per,
                           "daks_converged_share": float(np.mean([daks_at[(c, nug)]["converged"] for c in cases]))}
    return out


def adam_step_products(problem) -> int:
    """Mode products of one Adam step on ``problem``: every field of the residual and its adjoint (2 each), plus
    the boundary term's adjoint (``_Objective.value_and_grad``)."""
    return 4 * len(problem.fields) + 2


def hard_cell(item: tuple, config: Mapping[str, Any]) -> dict:
    """``(hard case, method, mode-product budget)``: one solve of a paper's hard case (``HARD_CASES``), its errors,
    CPU seconds, Gauss-Newton / CG steps and mode products. Adam gets ``budget // adam_step_products`` steps (the
    matrix-free Gauss-Newton's mode products on the same case); the dense Gauss-Newton is not run where its ``N x N``
    arrays would exceed ``max_gram_mib`` (``ran`` false, ``needed_mib``)."""
    case, method, budget = item
    name, params, grid, ls, jitter, epochs, adam = HARD_CASES[case]
    problem = make_problem(name, **params)
    n_pts = grid[0] * grid[1]
    row = {"case": case, "method": method, "points": n_pts, "ran": True, "needed_mib": 0.0,
           "authors_epochs": int(epochs)}
    if method == DENSE:
        row["needed_mib"] = 4 * 8 * n_pts**2 / 2**20
        if row["needed_mib"] > config["max_gram_mib"]:
            return {**row, "ran": False, "rmse": float("nan"), "rel_l2": float("nan"), "seconds": float("nan"),
                    "gn_iterations": 0, "cg_steps": 0, "cg_capped": 0, "cg_max_residual": float("nan"), "mode_products": 0,
                    "last_u_change": float("nan"), "converged": float("nan")}
    t0 = time.process_time()
    if method == FIXED_LS:   # the grid claim's gate: this grid at the smallest a = 15 grid's lengthscale
        ls = fixed_lengthscale(config.get("hard_cases", []))
        row["lengthscale"] = list(ls)
        res = _solve(OURS, problem, grid, ls, jitter, config)
    elif method == "adam":
        # its final loss evaluation costs 2 x fields more: the steps keep Adam's total within the budget
        steps = max(1, (int(budget) - 2 * len(problem.fields)) // adam_step_products(problem))
        res = solve(problem, KernelPDEConfig(grid=grid, lengthscale=ls, jitter=jitter, v=config["v"], tau=config["tau"],
                                             optimizer="adam", iterations=steps, **adam))
        row.update(adam_steps=steps, lr=adam["lr"], boundary_steps=int(adam.get("boundary_steps", 0)))
    else:
        res = _solve(method, problem, grid, ls, jitter, config)
    seconds = time.process_time() - t0
    solver = OURS if method == FIXED_LS else method   # the fixed-lengthscale cell is the matrix-free solver
    return {**row, "rmse": float(res.rmse), "rel_l2": float(res.rel_l2), "seconds": float(seconds),
            "gn_iterations": int(getattr(res, "iterations", 0)), **_cg_stats(res, config),
            "mode_products": int(getattr(res, "info", {}).get("mode_products", 0)) if method not in FD_METHODS else 0,
            "fd_newton_capped": int(res.capped_steps) if method in FD_METHODS else 0,
            "last_u_change": _u_change(solver, res) if solver in (OURS, DENSE) else float("nan"),
            # _converged's rule (kernel solvers: the last step's change of u; FD: no Newton solve capped);
            # Adam has no convergence test (NaN)
            "converged": float(_converged(solver, res)) if solver != "adam" else float("nan")}


def ac15_cases(hard_cases) -> list[str]:
    """The Allen-Cahn a = 15 cases of ``hard_cases``, smallest grid first."""
    return sorted((c for c in hard_cases if HARD_CASES[c][0] == "allen-cahn" and HARD_CASES[c][1]["a"] == 15.0),
                  key=lambda c: HARD_CASES[c][2][0] * HARD_CASES[c][2][1])


def fixed_lengthscale(hard_cases) -> tuple[float, float]:
    """The lengthscale of the smallest Allen-Cahn a = 15 grid of ``hard_cases`` (the grid claim's gate solves the
    largest grid at it)."""
    cases = ac15_cases(hard_cases)
    if not cases:
        raise ValueError(f"hard_cases has no Allen-Cahn a = 15 case: {list(hard_cases)!r}")
    return tuple(float(v) for v in HARD_CASES[cases[0]][3])


def hard_ac_text(sizes: Mapping[str, Mapping] | None = None) -> str:
    """The hard Allen-Cahn cases of each size, in words, from ``SIZES`` (the claim's text follows the configs)."""
    parts = []
    for size, cfg in (sizes or SIZES).items():
        by_a: dict = {}
        for c in sorted(cfg.get("hard_cases", []), key=lambda c: HARD_CASES[c][2][0]):
            if HARD_CASES[c][0] == "allen-cahn":
                by_a.setdefault(HARD_CASES[c][1]["a"], []).append(f"{HARD_CASES[c][2][0]}^2")
        if by_a:
            parts.append(f"{size}: " + ", ".join(f"a = {a:g} at {' / '.join(g)}" for a, g in sorted(by_a.items())))
    return "; ".join(parts)


def _geo(values: list[float]) -> float:
    v = [x for x in values if np.isfinite(x)]
    return float(np.exp(np.mean(np.log(v)))) if v and len(v) == len(values) else float("nan")


def hard_summary(rows: list[dict], method: str) -> dict:
    """Per hard case: errors, steps and mode products of ``method``; geometric mean RMSEs per family (Allen-Cahn,
    Burgers; NaN where a case did not run) and, for Allen-Cahn a = 15, the rel-L2 on its smallest and largest grid."""
    mine = {r["case"]: r for r in rows if r["method"] == method}
    out = {k: {c: r[k] for c, r in mine.items()} for k in ("rmse", "rel_l2")}
    if method in (OURS, "adam"):   # the budget's unit (the dense Gauss-Newton and FD do not work in mode products)
        out["mode_products"] = {c: r["mode_products"] for c, r in mine.items()}
    if method in (OURS, DENSE):
        out["gn_iterations"] = {c: r["gn_iterations"] for c, r in mine.items()}
        out["last_u_change"] = {c: r["last_u_change"] for c, r in mine.items()}
    if method == OURS:
        out["cg_steps"] = {c: {"total": r["cg_steps"], "capped_gn_steps": r["cg_capped"],
                               "max_final_residual": r["cg_max_residual"]} for c, r in mine.items()}
    if method != "adam":   # session 14 (R11): the convergence flag per case (kernel solvers' rule; FD: Newton uncapped)
        out["converged"] = {c: bool(r["converged"] == 1.0) for c, r in mine.items() if r["ran"]}
    if method == "adam":
        out["adam_steps"] = {c: r["adam_steps"] for c, r in mine.items()}
        out["authors_epochs"] = {c: r["authors_epochs"] for c, r in mine.items()}
    if method == DENSE:
        out["not_run_needs_mib"] = {c: r["needed_mib"] for c, r in mine.items() if not r["ran"]}
    for fam in ("allen-cahn", "burgers"):
        cs = [c for c in mine if HARD_CASES[c][0] == fam]
        out[f"{fam.replace('-', '_')}_geo_mean_rmse"] = _geo([mine[c]["rmse"] for c in cs])
    ac15 = ac15_cases(mine)
    out["allen_cahn_15_rel_l2_smallest_grid"] = float(mine[ac15[0]]["rel_l2"]) if len(ac15) >= 2 else float("nan")
    out["allen_cahn_15_rel_l2_largest_grid"] = float(mine[ac15[-1]]["rel_l2"]) if len(ac15) >= 2 else float("nan")
    return out


def hard_allen_cahn_summary(rows: list[dict], hard_cases, fixed_row: Mapping | None) -> dict:
    """The hard Allen-Cahn claim's gate and per-case reading (session 14, R11): the share of its cases where both
    solves it pools converged (the matrix-free Gauss-Newton by ``CONVERGED_CHANGE``, the strongest FD's Newton
    before its cap), the cases the matrix-free solver wins against each FD, and the grid claim's gate (the largest
    a = 15 grid at the smallest one's lengthscale: ``fixed_row``, the matrix-free solve of that grid where the two
    lengthscales are the same)."""
    by = {(r["case"], r["method"]): r for r in rows}
    ac = [c for c in hard_cases if HARD_CASES[c][0] == "allen-cahn"]
    out = {"allen_cahn_pooled_converged_share": (float(np.mean([by[(c, OURS)]["converged"] == 1.0
                                                                and by[(c, "fd")]["converged"] == 1.0 for c in ac]))
                                                 if ac else float("nan"))}
    for m in FD_METHODS:
        out[f"allen_cahn_cases_more_accurate_than_{m}"] = int(sum(by[(c, OURS)]["rmse"] < by[(c, m)]["rmse"] for c in ac))
    out["allen_cahn_cases"] = len(ac)
    if fixed_row is not None:
        out["allen_cahn_15_fixed_lengthscale"] = {"case": fixed_row["case"], "lengthscale": list(fixed_lengthscale(hard_cases)),
                                                  "rel_l2": float(fixed_row["rel_l2"]), "rmse": float(fixed_row["rmse"]),
                                                  "converged": bool(fixed_row["converged"] == 1.0)}
    out["allen_cahn_15_rel_l2_largest_grid_fixed_lengthscale"] = (float(fixed_row["rel_l2"]) if fixed_row is not None
                                                                  else float("nan"))
    return out


def easy_summary(rmse: Mapping[tuple[str, str], float], converged: Mapping[tuple[str, str], bool], cases,
                 method: str) -> dict:
    """Per equation of the easy cases (session 15, after R13): ``method``'s geometric mean RMSE over the equation's
    cases, its number of cases and, for the matrix-free solver, the cases where its solve and the fourth-order FD's
    both converged, and its wins / losses / ties against each FD (``EASY_TIE``; the per-equation claims' pairs)."""
    out = {}
    for eq in EQUATIONS:
        cs = [c for c in cases if CASES[c][0] == eq]
        row = {"cases": len(cs), "geo_mean_rmse": _geo([rmse[(c, method)] for c in cs]) if cs else float("nan")}
        if method == OURS:
            row["converged_cases"] = int(sum(bool(converged[(c, OURS)]) and bool(converged[(c, "fd")]) for c in cs))
            for fd in FD_METHODS:
                row[f"vs_{fd}"] = evidence.paired_counts([rmse[(c, OURS)] for c in cs], [rmse[(c, fd)] for c in cs],
                                                         tie=EASY_TIE)
            # session 16 (R15): the pairs the sign test keeps (it drops ties), the pairs gate's number
            row["untied_pairs"] = int(row["vs_fd"]["wins"] + row["vs_fd"]["losses"])
            row["log10_rmse_ratio_vs_fd"] = {c: float(np.log10(rmse[(c, OURS)] / rmse[(c, "fd")])) for c in cs}
        out[eq.replace("-", "_")] = row
    return out


def _needed_mib(method: str, n: int) -> float:
    if method == DENSE:
        return 4 * 8 * (n * n) ** 2 / 2**20   # J, B rows, H and its factor: about four N x N arrays
    if method == "daks":
        return daks_memory_bytes(NonlinearElliptic(), (n, n)) / 2**20
    return 0.0


REPLICA = "daks-replica"   # DAKS timed a second time in every round: the slope claim's null control


def scaling_one(item: tuple[int, str], config: Mapping[str, Any]) -> dict:
    """One (n, method): a complete solve of the elliptic equation on the ``n x n`` grid, traced for its peak
    memory (its time is the cell's ``seconds`` only when there are no timing rounds). The timing passes are
    separate tasks, run round-robin (``time_pass``; session 8)."""
    n, method = item
    row = {"n": n, "points": n * n, "method": method, "needed_mib": _needed_mib(method, n)}
    if row["needed_mib"] > config["max_gram_mib"]:
        return {**row, "ran": False, "reached": False, "rel_l2": float("nan"), "seconds": float("nan"),
                "peak_mib": float("nan"), "gn_iterations": 0, "cg_steps": 0, "cg_capped": 0,
                "cg_max_residual": float("nan"), "passes": []}
    res, seconds, peak, _ = _measured(method, NonlinearElliptic(), (n, n), (2.5 / n, 2.5 / n), 1e-8,
                                      {**config, "timing_repeats": 1})
    cg = _cg_stats(res, config)
    # session 16 (R15): a solve whose CG stopped at its cap in some Gauss-Newton step has not solved that step; it
    # reaches the target only with no capped step
    return {**row, "ran": True, "reached": bool(res.rel_l2 <= float(config["target_rel_l2"]) and cg["cg_capped"] == 0),
            "rel_l2": float(res.rel_l2), "seconds": seconds, "peak_mib": peak, "passes": [],
            "gn_iterations": int(res.iterations), **cg}


def time_pass(item: tuple[int, str, int], config: Mapping[str, Any]) -> float:
    """One timing pass ``(n, method, round)``: the CPU time of one untraced complete solve (``REPLICA`` solves
    with DAKS). Pass p of every cell runs in round p, one ``pmap`` per round, the cells shuffled within it, so
    the passes paired by the slope claim were timed together (session-8 review: back-to-back passes of one cell
    shared that cell's load, and the same solver against itself in another run won 5 of 5 passes)."""
    n, method, _ = item
    t0 = time.process_time()
    _solve("daks" if method == REPLICA else method, NonlinearElliptic(), (n, n), (2.5 / n, 2.5 / n), 1e-8, config)
    return time.process_time() - t0


def timing_rounds(cells: list[tuple[int, str]], rounds_of: Mapping[tuple[int, str], int], seed: int,
                  config: Mapping[str, Any], run_pass=None) -> tuple[dict, list[dict]]:
    """Round-robin timing: for each round p, every cell with more than p rounds is timed once, in an order
    shuffled per round (``numpy.random.default_rng([seed, p])``); one ``runtime.pmap`` per round (``run_pass``
    replaces it in tests). Returns ``{cell: [seconds of round 0, 1, ...]}`` and one row per pass
    (``round``, ``order`` within the round)."""
    passes: dict = {c: [] for c in cells}
    rows = []
    for p in range(max(rounds_of.values(), default=0)):
        todo = [c for c in cells if rounds_of[c] > p]
        order = np.random.default_rng([int(seed), p]).permutation(len(todo))
        items = [(*todo[i], p) for i in order]
        times = (run_pass(items) if run_pass is not None else
                 runtime.pmap(time_pass, items, shared=dict(config), chunk_size=1, desc=f"kernel-pde timing round {p}"))
        for j, ((n, m, _), t) in enumerate(zip(items, times)):
            passes[(n, m)].append(float(t))
            rows.append({"n": n, "points": n * n, "method": m, "round": p, "order": j, "metric": "pass_seconds",
                         "value": float(t)})
    return passes, rows


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tuning, accuracy cells and scaling cells as Ray tasks; summaries per method."""
    _check_config(config)
    cases = list(config["cases"])

    # (case, method, regulariser, lengthscale factor) -> (tuning RMSE, converged by the rule, CPU seconds)
    tuned: dict = {}

    def evaluate_with(require_converged: bool):
        def evaluate(items):
            """Each ((case, method), {lengthscale factor, regulariser})'s RMSE on the coarser tuning grid (pmap
            tasks); with ``require_converged`` a solve that did not converge scores NaN (ranks last)."""
            keys = [(c, m, st["regulariser"], st["ls_factor"]) for (c, m), st in items]
            todo = [k for k in dict.fromkeys(keys) if k not in tuned]
            for k, t in zip(todo, runtime.pmap(tune_one, todo, shared=dict(config), chunk_size=1,
                                               desc="kernel-pde tuning")):
                tuned[k] = (t["rmse"], t["converged"], t["seconds"])
            return [tuned[k][0] if tuned[k][1] or not require_converged else float("nan") for k in keys]
        return evaluate

    # the lowest tuning RMSE among the solves that converged (session 7: a solve stopped at its cap is
    # not a solution; DAKS at small nuggets runs every Burgers step without converging); regularisers
    # within 1% of it are tied (a plateau: the small jitters often give the same RMSE to 6 digits) and
    # the plateau's middle wins, away from its edges. A choice still on an edge extends the grid by a
    # decade (twice at most) before it is final; below 1e-13 the jitter is under float64's resolution
    # of a unit-diagonal Gram matrix. A (case, method) with no converged setting is tuned on the RMSE alone.
    # Session 16 (R15): the lengthscale factor is a second axis, crossed with the regulariser (the factor varies
    # slowest, so "middle" takes the middle of the tied settings in (factor, regulariser) order: the regulariser
    # plateau's middle when one factor holds the tied ones); its edges extend the same way (LS_FACTOR_LIMITS).
    factors = [float(f) for f in config.get("ls_factors", LS_FACTORS)]
    grid_of = {(c, m): {"ls_factor": list(factors), "regulariser": [float(r) for r in config.get("regularisers",
                                                                                                 REGULARISERS)]}
               for c in cases for m in (OURS, "daks")}
    rule = dict(extend=int(config["tune_extend"]), limits={"regulariser": (1e-13, 1e-1), "ls_factor": LS_FACTOR_LIMITS},
                tie=(0.0, 0.01), tie_break="middle")
    choices = evidence.tune(evaluate_with(True), grid_of, **rule)
    unconverged = [cm for cm, ch in choices.items() if not np.isfinite(ch.score)]
    if unconverged:
        choices.update(evidence.tune(evaluate_with(False), {cm: grid_of[cm] for cm in unconverged}, **rule))
    chosen = {cm: ch.setting["regulariser"] for cm, ch in choices.items()}
    factor = {cm: float(ch.setting["ls_factor"]) for cm, ch in choices.items()}
    chosen.update({(c, DENSE): chosen[(c, OURS)] for c in cases})
    factor.update({(c, DENSE): factor[(c, OURS)] for c in cases})   # the dense Gauss-Newton is the same model
    chosen.update({(c, m): 0.0 for c in cases for m in FD_METHODS})
    factor.update({(c, m): 1.0 for c in cases for m in FD_METHODS})   # no lengthscale
    fixed_items = [(c, "daks", nug, factor[(c, "daks")], True) for c in cases for nug in FIXED_DAKS_NUGGETS
                   if nug != chosen[(c, "daks")]]
    cells = runtime.pmap(accuracy_cell, [(c, m, chosen[(c, m)], factor[(c, m)], False) for c in cases
                                         for m in ACC_METHODS] + fixed_items,
                         shared=dict(config), chunk_size=1, desc="kernel-pde accuracy")
    acc = [r for r in cells if not r["fixed"]]
    # the paper's hard cases (issue 36): Gauss-Newton, dense Gauss-Newton and FD first, then Adam at the matrix-free
    # Gauss-Newton's mode products on the same case (largest grids first: the longest tasks start first)
    hard_cases = sorted(config.get("hard_cases", []), key=lambda c: -HARD_CASES[c][2][0] * HARD_CASES[c][2][1])
    # session 14 (R11): the largest a = 15 grid also at the smallest one's lengthscale (the grid claim's gate), where
    # the two differ (else the matrix-free solve of that grid is the gate's solve)
    ac15 = ac15_cases(hard_cases)
    fixed_cell = (len(ac15) >= 2 and tuple(HARD_CASES[ac15[-1]][3]) != fixed_lengthscale(hard_cases))
    hard = runtime.pmap(hard_cell, [(c, m, 0) for c in hard_cases for m in (OURS, DENSE, *FD_METHODS)]
                        + ([(ac15[-1], FIXED_LS, 0)] if fixed_cell else []), shared=dict(config),
                        chunk_size=1, desc="kernel-pde hard cases")
    gn_products = {r["case"]: r["mode_products"] for r in hard if r["method"] == OURS}
    hard += runtime.pmap(hard_cell, [(c, "adam", gn_products[c]) for c in hard_cases], shared=dict(config),
                         chunk_size=1, desc="kernel-pde hard cases, Adam")
    fixed_row = (next(r for r in hard if r["method"] == FIXED_LS) if fixed_cell else
                 next((r for r in hard if len(ac15) >= 2 and r["case"] == ac15[-1] and r["method"] == OURS), None))
    hard = [r for r in hard if r["method"] != FIXED_LS]
    daks_at = {(r["case"], r["regulariser"]): r for r in cells if r["method"] == "daks"}
    grids = sorted(set(int(n) for n in config["scaling_grids"]))
    scale = runtime.pmap(scaling_one, [(n, m) for n in grids for m in SCALE_METHODS], shared=dict(config),
                         chunk_size=1, desc="kernel-pde scaling")
    rmse = {(r["case"], r["method"]): r["rmse"] for r in acc}
    conv = {(r["case"], r["method"]): bool(r["converged"]) for r in acc}
    by = {(s["n"], s["method"]): s for s in scale}
    # the timing passes, round-robin (session 8): timing_repeats - 1 rounds for the cells of the grids where
    # DAKS ran (the slope's grids) and for DAKS's replica there, rounds_past_daks rounds past its reach (no slope there)
    n_rounds = int(config["timing_repeats"]) - 1 if config["timing"] else 0
    daks_grids = [n for n in grids if by[(n, "daks")]["ran"]]
    past = int(config.get("rounds_past_daks", 2))
    rounds_of = {(n, m): (n_rounds if n in daks_grids else min(past, n_rounds))
                 for n in grids for m in SCALE_METHODS if by[(n, m)]["ran"]}
    rounds_of = {c: r for c, r in rounds_of.items() if r > 0}
    rounds_of.update({(n, REPLICA): n_rounds for n in daks_grids})
    passes, pass_rows = timing_rounds(list(rounds_of), rounds_of, seed, config)
    for n in daks_grids:
        by[(n, REPLICA)] = {**by[(n, "daks")], "method": REPLICA}
    for cell, ts in passes.items():   # in place: the scaling rows read by the summaries are these dicts
        by[cell].update(passes=ts, seconds=min(ts) if ts else by[cell]["seconds"])

    def log_ratio(m, other):
        return float(np.mean([np.log10(rmse[(c, m)] / rmse[(c, other)]) for c in cases]))

    def per_method(method):
        rows = [r for r in acc if r["method"] == method]
        out = {"rmse": {r["case"]: r["rmse"] for r in rows}, "rel_l2": {r["case"]: r["rel_l2"] for r in rows},
               "geo_mean_rmse": float(np.exp(np.mean([np.log(r["rmse"]) for r in rows]))),
               "gn_iterations": {r["case"]: r["gn_iterations"] for r in rows},
               # stopped at its own tolerance before the Gauss-Newton cap (session 7's convergence gate)
               "converged": {r["case"]: r["converged"] for r in rows},
               "converged_share": float(np.mean([r["converged"] for r in rows])),
               "converged_cases": int(sum(bool(r["converged"]) for r in rows))}
        if method == "daks":  # the relative change of DAKS's iterate in its last step
            out["last_change"] = {r["case"]: r["last_change"] for r in rows}
        if method not in FD_METHODS:   # the gate's common quantity: relative change of u in the last step
            out["last_u_change"] = {r["case"]: r["last_u_change"] for r in rows}
        if method == OURS:
            out["cg_steps"] = {r["case"]: {"total": r["cg_steps"], "capped_gn_steps": r["cg_capped"],
                                           "max_final_residual": r["cg_max_residual"]} for r in rows}
        if method in SCALE_METHODS:
            reached = [s for s in scale if s["method"] == method and s["reached"]]
            out["largest_grid_points_to_target"] = int(max([s["points"] for s in reached], default=0))
            out["scaling"] = {str(s["n"]): ({"rel_l2": s["rel_l2"], "reached": s["reached"],
                                             "gn_iterations": s["gn_iterations"], "cg_steps": s["cg_steps"],
                                             "cg_capped_gn_steps": s["cg_capped"],
                                             "cg_max_final_residual": s["cg_max_residual"]} if s["ran"]
                                            else {"not_run_needs_mib": s["needed_mib"]})
                              for s in scale if s["method"] == method}
        out["timings"] = {
            "solve_seconds": {r["case"]: r["seconds"] for r in rows},
            "solve_peak_mib": {r["case"]: r["peak_mib"] for r in rows},
            "scaling": {str(s["n"]): {"seconds": s["seconds"], "peak_mib": s["peak_mib"]}
                        for s in scale if s["method"] == method and s["ran"]},
        }
        return out

    summary = {m: per_method(m) for m in ACC_METHODS}
    for m in ACC_METHODS:
        if m != "daks":
            summary[m]["log10_rmse_ratio_vs_daks"] = log_ratio(m, "daks")
    # time and memory of complete solves at the largest grid where every scaling method reached the target
    common = [n for n in grids if all(by[(n, m)]["reached"] for m in SCALE_METHODS)]
    largest = max(common) if common else None
    # time against N: the least-squares slope of log(seconds) on log(N) over the grids where every
    # scaling method ran (the paper's claim is about how the cost grows, not one grid)
    ran_all = [n for n in grids if by[(n, OURS)]["ran"] and by[(n, "daks")]["ran"]]
    slope_rows = []
    summary[REPLICA] = {"timings": {"scaling": {str(n): {"seconds": by[(n, REPLICA)]["seconds"]} for n in daks_grids}}}
    for m in (*SCALE_METHODS, REPLICA):
        t = summary[m]["timings"]
        ok = [n for n in ran_all if by[(n, m)]["ran"] and by[(n, m)]["seconds"] > 0]
        t["time_slope_grids"] = len(ok)
        t["time_slope_of_min"] = _slope(ok, [by[(n, m)]["seconds"] for n in ok])
        # one slope per timing pass (session-6 review: one run's slope moves by 0.03-0.33 with the
        # machine's load; the claim is a paired test over passes, the metric their median)
        n_pass = min((len(by[(n, m)]["passes"]) for n in ok), default=0)
        per_pass = [_slope(ok, [by[(n, m)]["passes"][p] for n in ok]) for p in range(n_pass)]
        slope_rows += [{"method": m, "pass": p, "metric": "time_slope", "value": v} for p, v in enumerate(per_pass)]
        t["time_slope_passes"] = n_pass
        t["time_slope"] = float(np.median(per_pass)) if per_pass else t["time_slope_of_min"]
        if m == REPLICA:
            continue
        t["at_largest_common_grid"] = ({"seconds": by[(largest, m)]["seconds"], "peak_mib": by[(largest, m)]["peak_mib"]}
                                       if largest is not None else {"seconds": float("nan"), "peak_mib": float("nan")})
    metrics = {**summary[OURS], "log10_rmse_ratio_vs_fd": log_ratio(OURS, "fd"),
               # session 14: the cases the matrix-free solver wins against the strongest FD (descriptive)
               "cases_more_accurate_than_fd": int(sum(rmse[(c, OURS)] < rmse[(c, "fd")] for c in cases)),
               # session 15 (after R13): the per-equation claims' numbers; the geometric mean over all cases
               # (geo_mean_rmse) stays a printed figure, no claim
               "easy": easy_summary(rmse, conv, cases, OURS),
               "accuracy_cases": len(cases),
               # the DAKS claim's gate, as counts (session 15): the cases where both kernel solvers converged
               "converged_cases_with_daks": int(sum(conv[(c, OURS)] and conv[(c, "daks")] for c in cases)),
               "slope_grids": [n for n in ran_all],
               "largest_common_grid_points": (largest or 0) ** 2,
               "converged_share_with_daks": min(summary[OURS]["converged_share"], summary["daks"]["converged_share"]),
               "tuned_regulariser": {f"{c}/{m}": chosen[(c, m)] for c in cases for m in (OURS, "daks")},
               # session 16 (R15): the lengthscale factor each kernel solver chose on the tuning instance, and the
               # lengthscales its accuracy solve used (the case's times the factor)
               "tuned_lengthscale_factor": {f"{c}/{m}": factor[(c, m)] for c in cases for m in (OURS, "daks")},
               "lengthscale": {f"{c}/{m}": [factor[(c, m)] * l for l in CASES[c][3]] for c in cases
                               for m in (OURS, "daks")},
               "accuracy_limit": ACCURACY_LIMIT,
               "accuracy_vs_daks_at_fixed_nugget": fixed_nugget_values(rmse, daks_at, cases)}
    baselines = {m: summary[m] for m in (*ACC_METHODS[1:], REPLICA)}
    for m in ACC_METHODS[1:]:
        baselines[m]["easy"] = easy_summary(rmse, conv, cases, m)
    if hard_cases:
        metrics["hard"] = hard_summary(hard, OURS)
        ours_h, adam_h = metrics["hard"], hard_summary(hard, "adam")
        # the matrix-free Gauss-Newton against the authors' optimiser at the same mode products: log10 RMSE ratio
        metrics["hard"]["log10_rmse_ratio_vs_adam"] = {c: float(np.log10(ours_h["rmse"][c] / adam_h["rmse"][c]))
                                                       for c in hard_cases}
        baselines["adam"] = {"hard": adam_h}
        for m in (DENSE, *FD_METHODS):
            baselines[m]["hard"] = hard_summary(hard, m)
        metrics["hard"].update(hard_allen_cahn_summary(hard, hard_cases, fixed_row))
        metrics["timings"]["hard_cpu_seconds"] = {r["case"]: r["seconds"] for r in hard if r["method"] == OURS}
        baselines["adam"]["timings"] = {"hard_cpu_seconds": {r["case"]: r["seconds"] for r in hard
                                                             if r["method"] == "adam"}}
        baselines[DENSE]["timings"]["hard_cpu_seconds"] = {r["case"]: r["seconds"] for r in hard
                                                            if r["method"] == DENSE and r["ran"]}
    acc_rows = [{"case": r["case"], "equation": CASES[r["case"]][0], "method": r["method"], "metric": k, "value": r[k]}
                for r in acc for k in ("rmse", "rel_l2")]
    timing_rows = ([{"case": r["case"], "method": r["method"], "metric": k, "value": r[k]}
                    for r in acc for k in ("seconds", "peak_mib")]
                   + [{"n": s["n"], "points": s["points"], "method": s["method"], "metric": k, "value": by[(s["n"], s["method"])][k]}
                      for s in scale for k in ("seconds", "peak_mib")]
                   + pass_rows)
    scale_rows = [{"n": s["n"], "points": s["points"], "method": s["method"], "metric": k, "value": float(s[k])}
                  for s in scale for k in ("rel_l2", "reached", "needed_mib")]
    hard_rows = [{"case": r["case"], "method": r["method"], "points": r["points"], "metric": k, "value": float(r[k])}
                 for r in hard if r["ran"] for k in ("rmse", "rel_l2", "mode_products", "gn_iterations", "cg_steps",
                                                     "converged")]
    if fixed_row is not None:
        hard_rows += [{"case": fixed_row["case"], "method": FIXED_LS, "points": fixed_row["points"], "metric": k,
                       "value": float(fixed_row[k])} for k in ("rmse", "rel_l2", "gn_iterations", "converged")]
    timing_rows += [{"case": r["case"], "method": r["method"], "metric": "hard_seconds", "value": r["seconds"]}
                    for r in hard if r["ran"]]
    tune_rows = evidence.tuning_rows(choices, keys=("case", "method"), metric="tuning_rmse")
    tune_rows += [{"case": c, "method": m, "regulariser": r, "ls_factor": f, "metric": "tuning_converged",
                   "value": float(conv)} for (c, m, r, f), (_, conv, _) in sorted(tuned.items())]
    timing_rows += [{"case": c, "method": m, "regulariser": r, "ls_factor": f, "metric": "tuning_seconds",
                     "value": float(sec)} for (c, m, r, f), (_, _, sec) in sorted(tuned.items())]
    # session 16: the tuning's CPU seconds per kernel solver (the lengthscale axis multiplies its solves)
    for m, out in ((OURS, metrics), ("daks", baselines["daks"])):
        out["timings"]["tuning_cpu_seconds"] = float(sum(sec for (_, mm, _, _), (_, _, sec) in tuned.items() if mm == m))
        out["timings"]["tuning_solves"] = int(sum(mm == m for (_, mm, _, _) in tuned))
    budget = {"gauss_newton_iterations": {m: config["gn_iterations"] for m in (OURS, DENSE, "daks")},
              "gauss_newton_stop": "each solver also stops early at its own tolerance (Kronecker: relative loss "
                                   "decrease <= 1e-10, as the authors' code; DAKS: relative iterate change < 1e-10); "
                                   "the iterations used are in metrics/baselines gn_iterations; convergence is judged "
                                   "by one rule for both (convergence_rule)",
              "cg": {"iterations": config["cg_iterations"], "tol": config["cg_tol"]},
              "timing": f"accuracy cells: minimum CPU time (time.process_time) of "
                        f"{config.get('accuracy_repeats', config['timing_repeats'])} "
                        f"complete solves per cell, back to back (the untraced ones when there are any); scaling "
                        f"cells: one traced solve for the peak memory, then {n_rounds} round-robin timing rounds "
                        f"(pass p of every cell in round p, one pmap per round, cells shuffled per round; "
                        f"{min(int(config.get('rounds_past_daks', 2)), n_rounds)} rounds past DAKS's reach), the minimum pass is the cell's seconds; DAKS is timed twice per round "
                        f"({REPLICA}, the slope claim's null control)",
              "convergence_rule": f"the gate and the tuning's converged-only rule: the relative change of u on the "
                                  f"grid in the last Gauss-Newton step < {CONVERGED_CHANGE:g}, for every kernel solver",
              "kernel": "product squared-exponential; each kernel solver at the case's lengthscales times its own "
                        "lengthscale factor, tuned on the same grid by the same rule (metrics.tuned_lengthscale_factor; "
                        "the dense Gauss-Newton takes the matrix-free solver's, the same model)",
              "tuning": f"jitter (Kronecker) and nugget (DAKS) from {[float(r) for r in grid_of[(cases[0], OURS)]['regulariser']]} "
                        f"crossed with a lengthscale factor from {factors} (session 16), a choice on an edge of "
                        f"either extending it geometrically (a decade for the regulariser) up to {config['tune_extend']} "
                        f"times (limits 1e-13, 1e-1; factor {LS_FACTOR_LIMITS}); RMSEs within "
                        f"1% of the best are tied and the middle of the tied ones in (factor, regulariser) grid order "
                        f"wins, among the tuning solves "
                        f"that converged by the convergence rule (on the RMSE alone where none did: "
                        f"{[f'{c}/{m}' for c, m in unconverged]}); on a "
                        f"grid of {config['tune_fraction']} x the points per axis of the same PDE"
                        + (", the lengthscales scaled by the ratio of the grid spacings (the test grid's points "
                           "per lengthscale)" if config.get("tune_scale_lengthscale") else ""),
              "tuned_on_grid_edge": {f"{c}/{m}": dict(ch.edges) for (c, m), ch in choices.items() if ch.edges},
              "tuning_extended": {f"{c}/{m}": {k: list(v) for k, v in ch.extended.items()}
                                  for (c, m), ch in choices.items() if ch.extended},
              "target_rel_l2": config["target_rel_l2"], "max_gram_mib": config["max_gram_mib"],
              "hard_cases": {c: {"grid": list(HARD_CASES[c][2]), "lengthscale": list(HARD_CASES[c][3]),
                                 "jitter": HARD_CASES[c][4], "authors_adam_epochs": HARD_CASES[c][5],
                                 "adam": dict(HARD_CASES[c][6]),
                                 "gauss_newton_mode_products": gn_products[c],
                                 "adam_steps": next(r["adam_steps"] for r in hard
                                                    if r["case"] == c and r["method"] == "adam")} for c in hard_cases},
              "hard_budget": "equal mode products (one grid-by-factor matrix product each; a CG step of the "
                             "matrix-free Gauss-Newton and its preconditioner count theirs, an Adam step "
                             "4 x fields + 2): Adam gets the matrix-free Gauss-Newton's count on the same case, at "
                             "the authors' learning rate, its epochs shortened to that budget; the jitter and "
                             "lengthscales are the authors', not tuned; v and tau as the other cases"}
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"accuracy": acc_rows, "hard": hard_rows, "scaling": scale_rows, "tuning": tune_rows, "timing": timing_rows,
                           "timing_slopes": slope_rows},
                   budget=budget)


_SLOPE_GATE = Claim(text="sanity (gate for the slope): the time-against-N slope is fitted over at least four grids "
                         "where both solvers ran", metric="metrics.timings.time_slope_grids", compare=4.0, op=">=",
                    kind="sanity")
_PASSES_GATE = Claim(text="sanity (gate for the slope): at least five timing passes, so that the one-sided sign test "
                          "over passes can reach p < 0.05 (its smallest p is 2^-passes)",
                     metric="metrics.timings.time_slope_passes", compare=5.0, op=">=", kind="sanity")
_SLOPE = Claim(text="the time of a complete solve grows more slowly with the number of collocation points N than "
                    "DAKS's: the slope of log(seconds) on log(N) over the grids where both ran is smaller, paired over "
                    "timing passes (CPU time of complete solves, same Gauss-Newton budget; the metric is the median "
                    "pass; pass p of every cell is timed in round p, cells shuffled per round; null control: DAKS "
                    "timed a second time in each round, which must not pass)", metric="metrics.timings.time_slope",
               compare="baselines.daks.timings.time_slope", op="<", source=ABSTRACT_SCALE,
               test="paired sign test over seeds", table="timing_slopes", a={"method": OURS, "metric": "time_slope"},
               b={"method": "daks", "metric": "time_slope"}, pair_on=("pass",),
               controls=(Control(DENSE, f"baselines.{DENSE}.timings.time_slope",
                                 a={"method": DENSE, "metric": "time_slope"}),
                         Control(REPLICA, f"baselines.{REPLICA}.timings.time_slope",
                                 a={"method": REPLICA, "metric": "time_slope"})))

# session 7 (the session-3 and -6 reviews): DAKS ran every Gauss-Newton step on Burgers without converging at
# the nugget the old grid chose, and that case carried the accuracy claim; the comparison counts only when
# both solvers' accuracy solves converged (stopped at their own tolerance before the cap)
_CONVERGED = Claim(text="sanity (gate for accuracy vs DAKS): every accuracy solve of the matrix-free solver and of "
                        f"DAKS converged by one rule for both: its last Gauss-Newton step changed u on the grid by "
                        f"less than {CONVERGED_CHANGE:g} (relative); counted: the cases where both converged, against "
                        "the number of cases (session 15)",
                   metric="metrics.converged_cases_with_daks", compare="metrics.accuracy_cases", op=">=", kind="sanity")


def _easy_claims(eq: str, label: str, controls: bool) -> tuple[Claim, ...]:
    """The per-equation easy-case claim of ``eq`` (session 15, after R13), behind its two gates: at least
    ``EASY_MIN_CASES`` untied pairs (wins + losses against the fourth-order FD; session 16, R15: the sign test drops
    ties, so counting cases let a claim that could not reach p < 0.05 read "fails"), and every solve it pools
    converged. Paired over the equation's cases (one-sided sign
    test, ``EASY_TIE`` ties dropped), so a claim fails when most cases lose; the metric is the equation's geometric
    mean RMSE (it must be below the FD's too). Control: the second-order FD in the matrix-free solver's place
    (elliptic and Allen-Cahn; on Burgers the second-order FD is the same scheme)."""
    key = eq.replace("-", "_")
    pairs = Claim(text=f"sanity (gate for the {label} claim): at least {EASY_MIN_CASES} untied {label} cases (wins + "
                       f"losses against the fourth-order FD; RMSEs within 10% are ties, which the sign test drops), so "
                       f"that the one-sided sign test over cases can reach p < 0.05",
                  metric=f"metrics.easy.{key}.untied_pairs", compare=float(EASY_MIN_CASES), op=">=", kind="sanity")
    conv = Claim(text=f"sanity (gate for the {label} claim): every solve it pools converged (the matrix-free "
                      f"Gauss-Newton by the convergence rule, every fourth-order FD Newton solve before its cap)",
                 metric=f"metrics.easy.{key}.converged_cases", compare=f"metrics.easy.{key}.cases", op=">=",
                 kind="sanity")
    claim = Claim(text=f"{label}: more accurate than the strongest finite-difference scheme on the same grids, case by "
                       f"case ({'fourth-order Laplacian, Newton' if eq != 'burgers' else 'Godunov flux, Crank-Nicolson'}"
                       f"; one-sided sign test over the {label} cases, RMSEs within 10% tied; the geometric mean RMSE "
                       f"over those cases below the FD's as well"
                       + ("; control: second-order FD)" if controls else ")"),
                  metric=f"metrics.easy.{key}.geo_mean_rmse", compare=f"baselines.fd.easy.{key}.geo_mean_rmse", op="<",
                  source=ABSTRACT_RESULTS + f" (per benchmark PDE: {label}; the paper's per-equation tables were not "
                                            "available to us)",
                  test="paired sign test over seeds", table="accuracy", pair_on=("case",), tie=EASY_TIE,
                  a={"method": OURS, "metric": "rmse", "equation": eq},
                  b={"method": "fd", "metric": "rmse", "equation": eq},
                  controls=((Control("fd2", f"baselines.fd2.easy.{key}.geo_mean_rmse",
                                     a={"method": "fd2", "metric": "rmse", "equation": eq}),) if controls else ()))
    return (pairs, conv, *evidence.gate(conv, *evidence.gate(pairs, claim)[1:])[1:])


EASY_CLAIMS = (*_easy_claims("elliptic", "nonlinear elliptic", True),
               *_easy_claims("allen-cahn", "Allen-Cahn (a = 1)", True),
               *_easy_claims("burgers", "Burgers (nu = 0.01, 0.02)", False))

# session 14 (outside review R11): the baseline is the strongest fair FD (the fourth-order Laplacian, R11's stencil),
# the second-order FD its control; the claim pools by the geometric mean (fixed before the run: the cases' errors
# differ by 10x and more, 0.007 to 0.3, and the arithmetic mean is the largest case's), and is decided only where
# every solve it pools converged (the gate); the cases of each size are in the text, from SIZES
_HARD_AC_GATE = Claim(text="sanity (gate for the hard Allen-Cahn claim): every solve it pools converged: the matrix-free "
                           f"Gauss-Newton's last step changed u on the grid by less than {CONVERGED_CHANGE:g} (relative), "
                           "and every Newton solve of the fourth-order FD met its tolerance before its cap",
                      metric="metrics.hard.allen_cahn_pooled_converged_share", compare=1.0, op=">=", kind="sanity")
HARD_AC = Claim(text=f"at the paper's hard Allen-Cahn settings ({hard_ac_text()}; the authors' grids, lengthscales "
                     "and jitter) the matrix-free solver is more accurate than the strongest finite-difference scheme on "
                     "the same grids (fourth-order Laplacian, Newton; geometric mean RMSE over those cases; control: "
                     "second-order FD)", metric="metrics.hard.allen_cahn_geo_mean_rmse",
                compare="baselines.fd.hard.allen_cahn_geo_mean_rmse", op="<", source=ABSTRACT_RESULTS,
                controls=(Control("fd2", "baselines.fd2.hard.allen_cahn_geo_mean_rmse"),))
# session 14 (R11): the grid claim's gate, the largest a = 15 grid solved at the smallest one's lengthscale too (the
# authors' lengthscale shrinks from 0.04 to 0.03 at 90^2): more points must pay at a fixed lengthscale as well
_HARD_AC_GRID_GATE = Claim(text="sanity (gate for the grid claim: not the lengthscale): at the smallest grid's lengthscale "
                                "the matrix-free solver's rel-L2 on the largest a = 15 grid is below that on the smallest "
                                "grid as well", metric="metrics.hard.allen_cahn_15_rel_l2_largest_grid_fixed_lengthscale",
                           compare="metrics.hard.allen_cahn_15_rel_l2_smallest_grid", op="<", kind="sanity")
HARD_AC_GRID = Claim(text="on Allen-Cahn a = 15 more collocation points pay: the matrix-free solver's rel-L2 on the "
                          "largest grid is below that on the smallest", metric="metrics.hard.allen_cahn_15_rel_l2_largest_grid",
                     compare="metrics.hard.allen_cahn_15_rel_l2_smallest_grid", op="<", source=ABSTRACT_SCALE)
HARD_B = Claim(text="at the paper's hard Burgers setting (nu = 0.001 on the authors' grids and lengthscales) the "
                    "matrix-free solver is more accurate than finite differences on the same grids (geometric mean "
                    "RMSE)", metric="metrics.hard.burgers_geo_mean_rmse", compare="baselines.fd.hard.burgers_geo_mean_rmse",
               op="<", source=ABSTRACT_RESULTS)

CLAIMS = (
    *evidence.gate(_CONVERGED, Claim(
        text="accuracy comparable to the full-Gram kernel solver DAKS with a tuned nugget (mean log10 RMSE ratio "
             "below 0.5, i.e. within about 3x)", metric="metrics.log10_rmse_ratio_vs_daks", compare=ACCURACY_LIMIT, op="<",
        source=ABSTRACT_RESULTS, controls=(Control("fd", "baselines.fd.log10_rmse_ratio_vs_daks"),
                                           Control("fd2", "baselines.fd2.log10_rmse_ratio_vs_daks")))),
    *EASY_CLAIMS,
    *evidence.gate(_HARD_AC_GATE, HARD_AC), *evidence.gate(_HARD_AC_GRID_GATE, HARD_AC_GRID), HARD_B,
    _SLOPE_GATE,
    *evidence.gate(_PASSES_GATE, *evidence.gate(_SLOPE_GATE, _SLOPE)[1:]),
    # Decided by the configuration: DAKS is not run where its m x m Gram (arithmetic: daks_memory_bytes)
    # exceeds max_gram_mib, and a dense Gram's memory is quadratic by construction. Kept as checks.
    Claim(text="sanity: the matrix-free solver reaches the target accuracy on larger grids than DAKS within the "
               "memory cap (DAKS is not run where its Gram's computed size exceeds the cap; a solve reaches the target "
               "only with no Gauss-Newton step whose CG stopped at its cap)",
          metric="metrics.largest_grid_points_to_target", compare="baselines.daks.largest_grid_points_to_target",
          op=">", kind="sanity"),
    Claim(text="sanity: ... and its traced peak memory is below DAKS's full Gram at the largest common grid "
               "(O(N) against O(m^2) by construction)",
          metric="metrics.timings.at_largest_common_grid.peak_mib",
          compare="baselines.daks.timings.at_largest_common_grid.peak_mib", op="<", kind="sanity"),
    Claim(text="sanity: the matrix-free Gauss-Newton traces less peak memory than the dense Gauss-Newton of the "
               "same model (no N x N normal matrix)",
          metric="metrics.timings.at_largest_common_grid.peak_mib",
          compare=f"baselines.{DENSE}.timings.at_largest_common_grid.peak_mib", op="<", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """RMSE per case and method; time and memory against grid points (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc = [r for r in record["tables"]["accuracy"] if r["metric"] == "rmse"]
    cases = list(dict.fromkeys(r["case"] for r in acc))
    fig, ax = plt.subplots(figsize=(0.9 * len(cases) + 3, 3.5))
    width = 0.8 / len(ACC_METHODS)
    for j, m in enumerate(ACC_METHODS):
        vals = [next(r["value"] for r in acc if r["case"] == c and r["method"] == m) for c in cases]
        ax.bar(np.arange(len(cases)) + j * width, vals, width, label=m)
    ax.set_xticks(np.arange(len(cases)) + width * (len(ACC_METHODS) - 1) / 2)
    ax.set_xticklabels(cases, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("RMSE vs reference")
    ax.legend(fontsize=7, ncol=len(ACC_METHODS), loc="upper center", bbox_to_anchor=(0.5, 1.15), frameon=False)
    fig.tight_layout()
    figs = {"accuracy": fig}
    sc = record["tables"]["timing"] + record["tables"]["scaling"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, metric in zip(axes, ("seconds", "peak_mib")):
        for m in SCALE_METHODS:
            pts = sorted((r["points"], r["value"]) for r in sc if r["method"] == m and r["metric"] == metric
                         and "points" in r and r["value"] is not None and r["value"] == r["value"])
            if pts:
                ax.loglog(*zip(*pts), "o-", label=m)
        need = sorted((r["points"], r["value"]) for r in sc if r["metric"] == "needed_mib" and r["method"] == "daks")
        if metric == "peak_mib" and need:
            ax.loglog(*zip(*need), "k:", label="daks Gram needs")
        ax.set_xlabel("collocation points N")
        ax.set_ylabel(f"complete solve: {metric}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    figs["scaling"] = fig
    return figs


EXPERIMENT = Experiment(
    name=NAME, paper=PAPER,
    ray="(case, method, regulariser) tuning cells, (case, method) accuracy cells and (grid, method) scaling cells "
        "as pmap tasks",
    checked_against="paper text (arXiv 2410.11165 abstract and method section via secondary summaries) and the "
                    "authors' code XZT008/PDE-GP-Solver (loss, whitening, weights, grids, lengthscales, "
                    "Cole-Hopf reference); DAKS from Chen et al. 2021's Gauss-Newton formulation",
    sizes=SIZES, run=run, check=_check_config, claims=CLAIMS, plots=plots,
)
