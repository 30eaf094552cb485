"""GS-PowerOpt reproduction: multimodal test functions, many seeds, smoothing baselines and CMA-ES.

Every method gets the same budget of function evaluations per run (``iterations * (samples + 1)
+ 1``), the same start point per seed and the same tuning grid size: as in the paper's protocol
(each method at its best setting from a grid), each method picks, per case, the best of its
``GRIDS`` settings (4 each) by mean best gap on ``tuning_seeds`` seeds kept apart from the test
seeds; ``tuning_seeds=0`` runs every method at the shared default setting instead. All runs
(tuning and test: case x method x setting x seed) are independent Ray tasks.

Metrics per run: ``final_gap = f(x_T) - f*`` at the last iterate, ``best_gap`` = the lowest
``f(x_k) - f*`` over the iterates (each method evaluates its iterate every iteration, so this
needs no oracle), and ``success`` = the last iterate lies within ``success_radius`` (max-norm)
of the global minimiser. ``rayml bench gs-poweropt`` times the same optimiser with an expensive
CPU-bound ``f`` evaluated serially and through Ray.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.optim import smoothing_baselines as sb
from rayml.optim.gs_poweropt import GSPowerOptConfig, maximize
from rayml.optim.test_functions import FUNCTIONS, optimum
from rayml.optim._zeroth_order import Negated, local_evaluator
from rayml.results import Claim

PAPER = "Global Optimization with a Power-Transformed Objective and Gaussian Smoothing (GS-PowerOpt), ICML 2025"
METHOD = "gs-poweropt"
SMOOTHING = ("gaussian-smoothing", "homotopy", "zo-slgh")
METHODS = (METHOD, *SMOOTHING, "cma-es")
START_RADIUS = {"ackley": 3.0, "rastrigin": 3.0, "griewank": 3.0, "rosenbrock": 2.0, "two-peak": 0.7}

_COMMON = dict(sigma=1.0, power=20.0, lr=0.1, sigma_min=0.01, stages=5, success_radius=0.25)
SIZES = {
    "tiny": dict(cases=["ackley-2", "two-peak-2"], seeds=2, tuning_seeds=1, iterations=20, samples=10,
                 **_COMMON),
    "quick": dict(cases=["ackley-2", "ackley-10", "rastrigin-2", "rastrigin-10", "two-peak-2"],
                  seeds=10, tuning_seeds=4, iterations=300, samples=50, **_COMMON),
    "full": dict(cases=["ackley-2", "ackley-10", "ackley-50", "rastrigin-2", "rastrigin-10",
                        "rastrigin-50", "griewank-10", "two-peak-2", "two-peak-5"],
                 seeds=30, tuning_seeds=10, iterations=1000, samples=100, **_COMMON),
}
# The tuning grid of each method: the same number of settings for every method. GS-PowerOpt tunes
# its power N where the smoothing baselines tune their step, and CMA-ES its initial step size.
_SMOOTHING_GRID = [dict(sigma=s, lr=lr) for s in (0.5, 1.0) for lr in (0.1, 0.03)]
GRIDS = {
    METHOD: [dict(sigma=s, power=n) for s in (0.5, 1.0) for n in (5.0, 20.0)],
    **{b: _SMOOTHING_GRID for b in SMOOTHING},
    "cma-es": [dict(sigma=s) for s in (0.5, 1.0, 2.0, 3.0)],
}
BENCH_SIZES = {
    "tiny": dict(dim=5, samples=4, iterations=2, call_ms=2.0),
    "quick": dict(dim=10, samples=16, iterations=8, call_ms=20.0),
    "full": dict(dim=10, samples=32, iterations=25, call_ms=20.0),
}
CURVE_POINTS = 25


def parse_case(case: str) -> tuple[str, int]:
    """``"ackley-10"`` -> ``("ackley", 10)``, with a clear error for anything else."""
    name, _, dim = case.rpartition("-")
    if name not in FUNCTIONS or not dim.isdigit() or int(dim) < 1:
        raise ValueError(f"case {case!r}: expected '<function>-<dim>' with function in {sorted(FUNCTIONS)}")
    return name, int(dim)


def start_point(case: str, seed: int) -> np.ndarray:
    """The start of every method for ``(case, seed)``: uniform on a sphere around the optimum."""
    name, dim = parse_case(case)
    u = np.random.default_rng(seed).standard_normal(dim)
    return optimum(name, dim) + START_RADIUS[name] * u / np.linalg.norm(u)


def run_one(item: tuple, config: Mapping[str, Any]) -> dict:
    """One optimisation run ``(case, method, seed index, seed, setting)``; returns its metrics and
    curve. ``setting`` overrides ``sigma`` / ``power`` / ``lr`` of ``config``."""
    case, method, seed_index, seed, setting = item
    config = {**config, **setting}
    name, dim = parse_case(case)
    f = Negated(FUNCTIONS[name])
    x0 = start_point(case, seed)
    K, T = int(config["samples"]), int(config["iterations"])
    budget = T * (K + 1) + 1
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    sc = sb.SmoothingConfig(sigma=config["sigma"], sigma_min=config["sigma_min"], stages=config["stages"],
                            samples=K, lr=config["lr"], iterations=T)
    if method == METHOD:
        cfg = GSPowerOptConfig(sigma=config["sigma"], power=config["power"], samples=K, lr=config["lr"], iterations=T)
        res = maximize(f, x0, cfg, seed=rng, max_evals=budget)
    elif method == "gaussian-smoothing":
        res = sb.gaussian_smoothing(f, x0, sc, seed=rng, max_evals=budget)
    elif method == "homotopy":
        res = sb.gaussian_homotopy(f, x0, sc, seed=rng, max_evals=budget)
    elif method == "zo-slgh":
        res = sb.zo_slgh(f, x0, sc, seed=rng, max_evals=budget)
    elif method == "cma-es":
        res = sb.cma_es(f, x0, sigma=config["sigma"], samples=K, max_evals=budget, seed=seed)
    else:
        raise ValueError(f"unknown method {method!r}")
    f_star = float(FUNCTIONS[name](optimum(name, dim)))
    gaps = -res.history - f_star
    x_star = optimum(name, dim)
    per_eval = res.evals / max(1, len(gaps))
    idx = np.unique(np.linspace(0, len(gaps) - 1, CURVE_POINTS).astype(int))
    return {
        "case": case, "method": method, "seed": seed_index,
        "final_gap": float(gaps[-1]),
        "best_gap": float(np.min(gaps)),
        "distance": float(np.linalg.norm(res.x - x_star)),
        "success": float(np.max(np.abs(res.x - x_star)) < config["success_radius"]),
        "evals": int(res.evals),
        "curve": [(float((i + 1) * per_eval), float(gaps[i])) for i in idx],
    }


def _summaries(runs: list[dict], cases: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for method in METHODS:
        mine = [r for r in runs if r["method"] == method]
        by_case = {}
        for case in cases:
            rs = [r for r in mine if r["case"] == case]
            by_case[case] = {k: float(np.mean([r[k] for r in rs])) for k in ("success", "final_gap", "best_gap")}
        out[method] = {
            "success_rate": float(np.mean([r["success"] for r in mine])),
            "mean_final_gap": float(np.mean([r["final_gap"] for r in mine])),
            "mean_best_gap": float(np.mean([r["best_gap"] for r in mine])),
            "evals_per_run": int(max(r["evals"] for r in mine)),
            "cases": by_case,
        }
    return out


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The reproduction: every case x method x seed as Ray tasks, then summaries and curves."""
    cases = list(config["cases"])
    for case in cases:
        parse_case(case)
    if int(config["seeds"]) < 1:
        raise ValueError(f"seeds must be >= 1, got {config['seeds']}")
    n_test, n_tune = int(config["seeds"]), int(config["tuning_seeds"])
    if n_tune < 0:
        raise ValueError(f"tuning_seeds must be >= 0, got {n_tune}")
    all_seeds = runtime.seeds(seed, n_test + n_tune)
    test_seeds, tune_seeds = all_seeds[:n_test], all_seeds[n_test:]
    chosen, tuning_rows = _tune(cases, tune_seeds, config)
    items = [(c, m, i, s, chosen[c][m]) for c in cases for m in METHODS for i, s in enumerate(test_seeds)]
    runs = runtime.pmap(run_one, items, shared=dict(config), desc="gs-poweropt runs")
    summary = _summaries(runs, cases)
    ours = summary[METHOD]
    pairs = [(c, b) for c in cases for b in SMOOTHING]
    wins = [ours["cases"][c]["best_gap"] < summary[b]["cases"][c]["best_gap"] for c, b in pairs]
    metrics = {**ours, "win_rate_vs_smoothing": float(np.mean(wins)), "cases_x_baselines": len(pairs)}
    run_rows = [
        {"case": r["case"], "method": r["method"], "seed": r["seed"], "metric": k, "value": r[k]}
        for r in runs for k in ("final_gap", "best_gap", "distance", "success")
    ]
    curve_rows = []
    for c in cases:
        for m in METHODS:
            curves = np.array([[g for _, g in r["curve"]] for r in runs if r["case"] == c and r["method"] == m])
            evals = [e for e, _ in next(r for r in runs if r["case"] == c and r["method"] == m)["curve"]]
            for j, e in enumerate(evals):
                curve_rows.append({"case": c, "method": m, "evals": e, "metric": "mean_gap",
                                   "value": float(curves[:, j].mean())})
    budget = {"evals_per_run": int(config["iterations"]) * (int(config["samples"]) + 1) + 1,
              "test_runs": len(items),
              "tuning": (f"best of {len(GRIDS[METHOD])} settings per method and case on {n_tune} separate seeds"
                         if n_tune else "none: the shared default setting for every method")}
    return Outcome(metrics=metrics, baselines={b: summary[b] for b in METHODS[1:]},
                   tables={"runs": run_rows, "curve": curve_rows, "tuning": tuning_rows}, budget=budget)


def _tune(cases: list[str], tune_seeds: list[int], config: Mapping[str, Any]) -> tuple[dict, list[dict]]:
    """Each method's setting per case: the grid point with the lowest mean best gap on the tuning
    seeds (no tuning seeds: the config's defaults). Returns the choice and the tuning table."""
    if not tune_seeds:
        return {c: {m: {} for m in METHODS} for c in cases}, []
    items = [(c, m, j, s, setting) for c in cases for m in METHODS
             for j, setting in enumerate(GRIDS[m]) for s in tune_seeds]
    runs = runtime.pmap(run_one, items, shared=dict(config), desc="gs-poweropt tuning")
    chosen: dict = {c: {} for c in cases}
    rows = []
    for c in cases:
        for m in METHODS:
            scores = [float(np.mean([r["best_gap"] for it, r in zip(items, runs)
                                     if it[0] == c and it[1] == m and it[2] == j]))
                      for j in range(len(GRIDS[m]))]
            best = int(np.argmin(scores))
            chosen[c][m] = GRIDS[m][best]
            rows += [{"case": c, "method": m, "setting": j, **{k: float(v) for k, v in GRIDS[m][j].items()},
                      "chosen": float(j == best), "metric": "tuning_mean_best_gap", "value": sc}
                     for j, sc in enumerate(scores)]
    return chosen, rows


def _baseline_claim(b: str) -> Claim:
    return Claim(
        text=f"GS-PowerOpt reaches a lower best gap than {b} (paired over cases and seeds)",
        metric="metrics.mean_best_gap", compare=f"baselines.{b}.mean_best_gap", op="<",
        test="paired sign test over seeds", table="runs",
        a={"method": METHOD, "metric": "best_gap"}, b={"method": b, "metric": "best_gap"},
        pair_on=("case", "seed"),
    )


CLAIMS = (
    Claim(text="finds better solutions than other smoothing methods in most cases "
               "(share of case x smoothing-baseline pairs with a lower mean best gap)",
          metric="metrics.win_rate_vs_smoothing", compare=0.5, op=">"),
    *(_baseline_claim(b) for b in SMOOTHING),
)


def plots(record: Mapping) -> dict:
    """Convergence: mean gap against evaluations, one panel per case, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["curve"]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    fig, axes = plt.subplots(1, len(cases), figsize=(4 * len(cases), 3.4), squeeze=False)
    for ax, case in zip(axes[0], cases):
        for method in METHODS:
            pts = [(r["evals"], r["value"]) for r in rows if r["case"] == case and r["method"] == method]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, np.maximum(np.array(ys, dtype=float), 1e-8), label=method)
        ax.set_yscale("log")
        ax.set_title(case)
        ax.set_xlabel("function evaluations")
    axes[0][0].set_ylabel("mean f(x_k) - f*")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    return {"convergence": fig}


class ExpensiveObjective:
    """A CPU-bound black box: Ackley plus ``reps`` passes of real numpy work (never a sleep)."""

    def __init__(self, reps: int, width: int = 4096):
        self.reps, self.width = int(reps), int(width)

    def _work(self, x: np.ndarray) -> float:
        v = np.full(self.width, float(np.sum(x)) * 1e-3)
        for _ in range(self.reps):
            v = np.sin(v) + 1e-3
        return float(v[0]) * 0.0

    def __call__(self, x: np.ndarray) -> float:
        x = np.asarray(x, dtype=float)
        return -float(FUNCTIONS["ackley"](x)) + self._work(x)


def calibrate(call_ms: float) -> tuple[int, float]:
    """Reps of ``ExpensiveObjective`` that take about ``call_ms`` per call here, and the measured ms."""
    probe = ExpensiveObjective(200)
    x = np.ones(4)
    probe(x)
    t0 = time.perf_counter()
    for _ in range(5):
        probe(x)
    per_rep = (time.perf_counter() - t0) / (5 * 200)
    reps = max(1, int(round(call_ms * 1e-3 / per_rep)))
    objective = ExpensiveObjective(reps)
    t0 = time.perf_counter()
    for _ in range(5):
        objective(x)
    return reps, (time.perf_counter() - t0) / 5 * 1e3


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """Wall time of one GS-PowerOpt run with an expensive ``f``: serial vs Ray with 1 and 2 workers."""
    reps, call_ms = calibrate(float(config["call_ms"]))
    f = ExpensiveObjective(reps)
    dim, K, T = int(config["dim"]), int(config["samples"]), int(config["iterations"])
    cfg = GSPowerOptConfig(sigma=1.0, power=20.0, samples=K, lr=0.1, iterations=T)
    x0 = start_point(f"ackley-{dim}", seed)
    warm = GSPowerOptConfig(sigma=1.0, power=20.0, samples=K, lr=0.1, iterations=1)

    def timed(evaluator, workers):
        with runtime.max_workers(workers):
            maximize(f, x0, warm, seed=seed, evaluator=evaluator)  # warm-up: workers up, f loaded
            t0 = time.perf_counter()
            res = maximize(f, x0, cfg, seed=seed, evaluator=evaluator)
            return time.perf_counter() - t0, res

    serial_s, serial = timed(local_evaluator(f), None)
    ray1_s, ray1 = timed(runtime.batch_evaluator(f, blocks=1), 1)
    ray2_s, ray2 = timed(runtime.batch_evaluator(f, blocks=2), 2)
    evals = serial.evals
    same = bool(np.array_equal(serial.x, ray1.x) and np.array_equal(serial.x, ray2.x))
    metrics = {
        "speedup_2_workers": serial_s / ray2_s,
        "speedup_1_worker": serial_s / ray1_s,
        "ray_2_vs_1_workers": ray1_s / ray2_s,
        "evals_per_s": {"serial": evals / serial_s, "ray_1_worker": evals / ray1_s, "ray_2_workers": evals / ray2_s},
        "seconds": {"serial": serial_s, "ray_1_worker": ray1_s, "ray_2_workers": ray2_s},
        "evals": evals,
        "call_ms_measured": call_ms,
        "identical_results": same,
    }
    rows = [{"mode": m, "metric": "seconds", "value": v} for m, v in metrics["seconds"].items()]
    return Outcome(metrics=metrics, baselines={"serial": {"seconds": serial_s, "evals_per_s": evals / serial_s}},
                   tables={"timing": rows}, budget={"evals": evals, "reps_per_call": reps})


BENCH_CLAIMS = (
    Claim(text="evaluating f through Ray on 2 workers is faster than serial evaluation",
          metric="metrics.speedup_2_workers", compare=1.0, op=">"),
    Claim(text="the optimiser's result is identical serially and on 1 or 2 Ray workers",
          metric="metrics.identical_results", compare=1.0, op=">="),
)

EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="the K+1 evaluations of f per iteration as batched Ray tasks (BatchEvaluator); "
        "cases x methods x seeds as pmap tasks",
    checked_against="paper text (arXiv 2412.05204 v2) and the author's released code",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
    bench_sizes=BENCH_SIZES, bench=bench, bench_claims=BENCH_CLAIMS,
)
