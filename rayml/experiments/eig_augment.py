"""Max-min eigenvalue augmentation reproduction: relaxation bound, best-of-R randomized rounding,
greedy and brute-force OPT on Bayesian E-optimal design and algebraic connectivity augmentation.

Instances (non-rank-one augmentation matrices, ``k < n``):

- ``e-design``: ``M = prior_precision * I`` in ``R^n``; candidate ``i`` is a batch of ``batch``
  Gaussian measurements ``X_i``, ``A_i = X_i^T X_i`` (rank ``batch``).
- ``connectivity``: a connected Watts-Strogatz ring graph on ``n + 1`` nodes (networkx); candidate
  ``i`` is a bundle of ``batch`` absent edges, ``A_i`` its Laplacian; all matrices are restricted
  to the complement of the all-ones vector, so ``lambda_min`` is the algebraic connectivity.

No rank-deficient cases: for ``e-design`` every ``k`` must satisfy ``k * batch >= n`` (otherwise
``lambda_min`` cannot rise above the prior for ANY subset and every method ties at zero), checked
before any work; the record holds the smallest optimal increase.

Instances are scanned per (case, k) and kept when greedy reaches at most ``greedy_below`` of the
optimal increase (the regime where a rounding could matter); the record holds how many were
scanned. Equal evaluations: greedy evaluates ``lambda_min`` ``G_k = sum_{t<k} (m - t)`` times, so
the rounding keeps the best of ``R = G_k`` roundings (one ``lambda_min`` each; plus one SDP solve),
and a control draws ``R`` uniformly random ``k``-subsets and keeps the best. A single rounding's
expected value (the mean over the ``R`` draws) is reported beside the best of ``R``.
For each case and budget ``k`` the relaxation, greedy and brute force run as one pmap task per
instance; the roundings of each relaxation run as further pmap tasks (chunks with their own
seeds) and the best is kept. ``fraction = (lambda_min(M + A_I) -
lambda_min(M)) / (bound - lambda_min(M))`` is the share of the relaxation's increase achieved, and
``condition = (bound - lambda_min(M)) / (R ln k)`` the paper's regime variable, which grows with
``k`` here.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.optim.eig_augment import AugmentationProblem, brute_force, greedy, round_many, solve_relaxation
from rayml.results import Claim, Control

PAPER = "Simple Randomized Rounding for Max-Min Eigenvalue Augmentation, ICML 2025"
METHOD = "eig-augment"
CASES = ("e-design", "connectivity")

_COMMON = dict(cases=list(CASES), prior_precision=0.05, scheme="iid", greedy_below=0.97, scan_limit=200)
SIZES = {
    "tiny": dict(n=5, m=8, ks=[2, 3], batch=3, instances=1, chunks=2, **_COMMON),
    "quick": dict(n=8, m=14, ks=[2, 3, 4, 6], batch=4, instances=3, chunks=4, **_COMMON),
    "full": dict(n=12, m=20, ks=[2, 3, 4, 6, 8], batch=6, instances=10, chunks=16, **_COMMON),
}
ABSTRACT = ("abstract: 'We show that a simple randomized rounding method provides a constant-factor approximation "
            "if the optimal increase is sufficiently large, specifically, if OPT - lambda_min(M) = Omega(R ln k)'")


def greedy_evals(m: int, k: int) -> int:
    """``lambda_min`` evaluations greedy spends: ``sum_{t<k} (m - t)``."""
    return sum(m - t for t in range(k))


def reduced_laplacian_basis(n_nodes: int) -> np.ndarray:
    """An orthonormal basis ``V`` (``n_nodes x (n_nodes - 1)``) of the complement of the ones vector."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(n_nodes), np.eye(n_nodes)[:, : n_nodes - 1]]))
    return q[:, 1:]


def e_design_instance(n: int, m: int, batch: int, prior_precision: float, rng: np.random.Generator):
    """``(M, As)`` of Bayesian E-optimal design with batches of ``batch`` measurements per candidate."""
    M = prior_precision * np.eye(n)
    As = []
    for _ in range(m):
        X = rng.standard_normal((batch, n)) * rng.uniform(0.5, 1.5)
        As.append(X.T @ X)
    return M, As


def connectivity_instance(n: int, m: int, batch: int, rng: np.random.Generator):
    """``(M, As, graph)``: a ring-like graph on ``n + 1`` nodes and ``m`` bundles of absent edges."""
    import networkx as nx

    nodes = n + 1
    G = nx.connected_watts_strogatz_graph(nodes, 2, 0.1, seed=int(rng.integers(2**31)))
    absent = [(u, v) for u in range(nodes) for v in range(u + 1, nodes) if not G.has_edge(u, v)]
    V = reduced_laplacian_basis(nodes)
    L0 = nx.laplacian_matrix(G, nodelist=range(nodes)).toarray().astype(float)
    As = []
    for _ in range(m):
        H = nx.Graph()
        H.add_nodes_from(range(nodes))
        H.add_edges_from(absent[j] for j in rng.choice(len(absent), size=batch, replace=False))
        L = nx.laplacian_matrix(H, nodelist=range(nodes)).toarray().astype(float)
        As.append(V.T @ L @ V)
    return V.T @ L0 @ V, As, G


def build_problem(config: Mapping[str, Any], case: str, k: int, inst_seed: int) -> AugmentationProblem:
    """The instance of ``case`` for seed ``inst_seed`` with budget ``k`` (the matrices do not depend on ``k``)."""
    rng = np.random.default_rng(inst_seed)
    n, m, batch = int(config["n"]), int(config["m"]), int(config["batch"])
    if case == "e-design":
        M, As = e_design_instance(n, m, batch, float(config["prior_precision"]), rng)
    elif case == "connectivity":
        M, As, _ = connectivity_instance(n, m, batch, rng)
    else:
        raise ValueError(f"case must be one of {CASES}, got {case!r}")
    return AugmentationProblem(M, As, k)


def select(item: tuple, config: Mapping[str, Any]) -> dict:
    """``(case, k, seed)``: the first ``instances`` instance seeds whose greedy reaches at most
    ``greedy_below`` of the optimal increase (brute force)."""
    case, k, seed = item
    kept, below = [], float(config["greedy_below"])
    for scanned, s in enumerate(runtime.seeds(seed, int(config["scan_limit"])), start=1):
        problem = build_problem(config, case, k, s)
        opt = brute_force(problem).value
        if opt - problem.base <= 1e-9:
            continue
        if greedy(problem).value - problem.base <= below * (opt - problem.base):
            kept.append(int(s))
            if len(kept) == int(config["instances"]):
                return {"case": case, "k": k, "seeds": kept, "scanned": scanned}
    raise ValueError(f"case {case!r}, k={k}: only {len(kept)} of {config['scan_limit']} scanned instances have "
                     f"greedy <= {below} of the optimal increase; raise scan_limit or greedy_below")


def solve_one(item: tuple, config: Mapping[str, Any]) -> dict:
    """Relaxation, greedy and brute force for ``(case, k, instance index, instance seed)``."""
    case, k, inst, inst_seed = item
    problem = build_problem(config, case, k, inst_seed)
    rel = solve_relaxation(problem)
    g = greedy(problem)
    return {"case": case, "k": k, "instance": inst, "x": rel.x, "bound": rel.bound, "base": problem.base,
            "R": problem.R, "greedy": g.value, "greedy_evals": g.evaluations, "opt": brute_force(problem).value,
            "condition": problem.condition(rel.bound), "solver": rel.solver}


def round_chunk(item: tuple, config: Mapping[str, Any]) -> dict:
    """One chunk of randomized roundings of a relaxation's ``x``, and as many uniformly random
    ``k``-subsets (the control); returns the best and the sum of each."""
    case, k, inst, inst_seed, x, count, seed = item
    problem = build_problem(config, case, k, inst_seed)
    rounding_seed, random_seed = np.random.SeedSequence(seed).spawn(2)
    res = round_many(problem, x, int(count), seed=np.random.default_rng(rounding_seed), scheme=str(config["scheme"]))
    rng = np.random.default_rng(random_seed)
    rand = [problem.value(rng.choice(problem.m, size=k, replace=False)) for _ in range(int(count))]
    return {"best": res.value, "sum": float(res.values.sum()), "count": int(count), "random_best": float(max(rand))}


def _check(config: Mapping[str, Any]) -> None:
    for case in config["cases"]:
        if case not in CASES:
            raise ValueError(f"cases: {case!r} is not one of {CASES}")
    for key in ("instances", "chunks", "scan_limit", "batch"):
        if int(config[key]) < 1:
            raise ValueError(f"{key} must be >= 1, got {config[key]}")
    if any(not 1 <= int(k) < int(config["m"]) for k in config["ks"]):
        raise ValueError(f"ks must lie in [1, m) = [1, {config['m']}), got {config['ks']}")
    if "e-design" in config["cases"]:
        short = [int(k) for k in config["ks"] if int(k) * int(config["batch"]) < int(config["n"])]
        if short:
            raise ValueError(f"ks {short}: k * batch < n makes every e-design subset rank-deficient "
                             f"(lambda_min stays at the prior); need k * batch >= n = {config['n']}")
    if not 0 < float(config["greedy_below"]) <= 1:
        raise ValueError(f"greedy_below must lie in (0, 1], got {config['greedy_below']}")


NAMES = ("rounding_best", "rounding_mean", "greedy", "random_best", "opt")


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Instance selection, relaxations as pmap tasks, then the roundings as pmap tasks."""
    _check(config)
    cases, ks = list(config["cases"]), [int(k) for k in config["ks"]]
    sel_items = [(c, k, s) for (c, k), s in zip([(c, k) for c in cases for k in ks],
                                                  runtime.seeds(seed, len(cases) * len(ks)))]
    chosen = runtime.pmap(select, sel_items, shared=dict(config), desc="eig-augment instance selection")
    items = [(sel["case"], sel["k"], i, s) for sel in chosen for i, s in enumerate(sel["seeds"])]
    solved = runtime.pmap(solve_one, items, shared=dict(config), desc="eig-augment relaxations")
    chunks = int(config["chunks"])
    round_items, spans = [], []
    for j, (item, s) in enumerate(zip(items, solved)):
        R = int(s["greedy_evals"])  # equal lambda_min evaluations
        counts = [len(a) for a in np.array_split(np.arange(R), min(chunks, R)) if len(a)]
        spans.append(len(counts))
        for count, cs in zip(counts, runtime.seeds(seed + 1 + j, len(counts))):
            round_items.append((*item, s["x"], count, cs))
    rounded = runtime.pmap(round_chunk, round_items, shared=dict(config), desc="eig-augment roundings")
    rows, records = [], []
    pos = 0
    for item, s, span in zip(items, solved, spans):
        mine = rounded[pos : pos + span]
        pos += span
        gap = s["bound"] - s["base"]
        rec = {"case": s["case"], "k": s["k"], "instance": s["instance"], "condition": s["condition"],
               "bound_minus_opt": (s["bound"] - s["opt"]) / max(1.0, abs(s["bound"])),
               "opt_increase": s["opt"] - s["base"], "roundings": sum(r["count"] for r in mine),
               "rounding_best": max(r["best"] for r in mine),
               "rounding_mean": sum(r["sum"] for r in mine) / sum(r["count"] for r in mine),
               "random_best": max(r["random_best"] for r in mine),
               "greedy": s["greedy"], "opt": s["opt"]}
        for name in NAMES:
            rec[f"fraction_{name}"] = (rec[name] - s["base"]) / gap
            rec[f"ratio_to_opt_{name}"] = (rec[name] - s["base"]) / max(s["opt"] - s["base"], 1e-12)
        records.append(rec)
        for name in NAMES:
            for metric in ("fraction", "ratio_to_opt"):
                rows.append({"case": s["case"], "k": s["k"], "instance": s["instance"], "method": name,
                             "metric": metric, "value": rec[f"{metric}_{name}"]})
        rows.append({"case": s["case"], "k": s["k"], "instance": s["instance"], "method": "relaxation",
                     "metric": "condition", "value": s["condition"]})

    def mean(key, sel):
        return float(np.mean([r[key] for r in sel]))

    by_setting = {}
    at_max, at_min = [], []
    keys = ("condition", *(f"fraction_{n}" for n in NAMES), *(f"ratio_to_opt_{n}" for n in NAMES))
    for c in cases:
        per_k = {}
        for k in ks:
            sel = [r for r in records if r["case"] == c and r["k"] == k]
            per_k[str(k)] = {key: mean(key, sel) for key in keys}
        by_setting[c] = per_k
        order = sorted(per_k.values(), key=lambda v: v["condition"])
        at_min.append(order[0])
        at_max.append(order[-1])

    def at(points, key):
        return float(np.mean([v[key] for v in points]))

    metrics = {
        "fraction_best_rounding": mean("fraction_rounding_best", records),
        "fraction_mean_rounding": mean("fraction_rounding_mean", records),
        "ratio_to_opt_best_rounding": mean("ratio_to_opt_rounding_best", records),
        "ratio_to_opt_mean_rounding": mean("ratio_to_opt_rounding_mean", records),
        "fraction_best_rounding_at_max_condition": at(at_max, "fraction_rounding_best"),
        "fraction_mean_rounding_at_max_condition": at(at_max, "fraction_rounding_mean"),
        "fraction_mean_rounding_at_min_condition": at(at_min, "fraction_rounding_mean"),
        "max_condition": at(at_max, "condition"),
        "min_condition": at(at_min, "condition"),
        "min_bound_minus_opt": float(min(r["bound_minus_opt"] for r in records)),
        "min_opt_increase": float(min(r["opt_increase"] for r in records)),
        "by_setting": by_setting,
        "instances_scanned": {f"{c['case']}-k{c['k']}": c["scanned"] for c in chosen},
        "solver": solved[0]["solver"],
    }
    baselines = {
        "greedy": {"fraction": mean("fraction_greedy", records), "ratio_to_opt": mean("ratio_to_opt_greedy", records),
                   "fraction_at_max_condition": at(at_max, "fraction_greedy")},
        "random-best-of-R": {"fraction": mean("fraction_random_best", records),
                             "ratio_to_opt": mean("ratio_to_opt_random_best", records),
                             "fraction_at_max_condition": at(at_max, "fraction_random_best")},
        "brute-force": {"fraction": mean("fraction_opt", records)},
        "relaxation-bound": {"fraction": 1.0},
    }
    budget = {"roundings": "R = greedy's lambda_min evaluations per (case, k): sum_{t<k} (m - t)",
              "R_by_k": {str(k): greedy_evals(int(config["m"]), k) for k in ks},
              "rounding_extra": "one SDP relaxation solve per instance", "scheme": config["scheme"],
              "instances": len(items), "tuning": "none"}
    return Outcome(metrics=metrics, baselines=baselines, tables={"runs": rows}, budget=budget)


def _vs_greedy(text: str, method: str, metric: str) -> Claim:
    return Claim(text=text, metric=metric, compare="baselines.greedy.ratio_to_opt", op=">",
                 test="paired sign test over seeds", table="runs",
                 a={"method": method, "metric": "ratio_to_opt"}, b={"method": "greedy", "metric": "ratio_to_opt"},
                 pair_on=("case", "k", "instance"), source=ABSTRACT)


CLAIMS = (
    Claim(text="constant factor where OPT - lambda_min(M) is large relative to R ln k: at the largest condition the "
               "best of R roundings (R = greedy's evaluations) reaches at least half of the relaxation's increase "
               "(1/2 is our choice of constant; the abstract gives none)",
          metric="metrics.fraction_best_rounding_at_max_condition", compare=0.5, op=">=", source=ABSTRACT,
          controls=(Control("greedy", "baselines.greedy.fraction_at_max_condition"),
                    Control("random-best-of-R", "baselines.random-best-of-R.fraction_at_max_condition"))),
    _vs_greedy("on instances where greedy is below OPT, the best of R roundings at greedy's evaluation count reaches "
               "a larger share of the optimal increase than greedy (paired over case, k, instance)",
               "rounding_best", "metrics.ratio_to_opt_best_rounding"),
    _vs_greedy("a single rounding (its expected value) reaches a larger share of the optimal increase than greedy",
               "rounding_mean", "metrics.ratio_to_opt_mean_rounding"),
    Claim(text="a single rounding's expected share of the relaxation's increase grows with "
               "(OPT - lambda_min(M)) / (R ln k)",
          metric="metrics.fraction_mean_rounding_at_max_condition",
          compare="metrics.fraction_mean_rounding_at_min_condition", op=">", source=ABSTRACT),
    Claim(text="the relaxation bounds OPT from above (brute force; relative solver tolerance 1e-6)",
          metric="metrics.min_bound_minus_opt", compare=-1e-6, op=">=", kind="sanity"),
    Claim(text="no rank-deficient instance: the optimal increase is positive everywhere",
          metric="metrics.min_opt_increase", compare=1e-6, op=">", kind="sanity"),
)


_CURVES = (("opt", "OPT (brute force)", "k", ":"), ("rounding_best", "best of R roundings (ours)", "C0", "-"),
           ("rounding_mean", "one rounding (mean)", "C0", "--"), ("greedy", "greedy", "C1", "-"),
           ("random_best", "best of R random subsets", "C2", "-"))


def plots(record: Mapping) -> dict:
    """Share of the relaxation's increase against the condition (bound - lambda_min(M)) / (R ln k), one
    panel per case: per (case, k) the median over instances with its IQR band; the top axis names each k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = record["metrics"]["by_setting"]
    runs = [r for r in record["tables"]["runs"] if r["metric"] == "fraction"]
    fig, axes = plt.subplots(1, len(by), figsize=(4.6 * len(by), 4.2), squeeze=False)
    for ax, (case, per_k) in zip(axes[0], by.items()):
        ks = sorted(per_k, key=lambda k: per_k[k]["condition"])
        cond = [per_k[k]["condition"] for k in ks]
        for method, label, color, ls in _CURVES:
            vals = [[r["value"] for r in runs if r["case"] == case and str(r["k"]) == k and r["method"] == method]
                    for k in ks]
            if not all(vals):
                continue
            q25, med, q75 = np.array([np.quantile(v, [0.25, 0.5, 0.75]) for v in vals]).T
            ax.plot(cond, med, marker="o", color=color, ls=ls, label=label, lw=2.2 if "(ours)" in label else 1.3)
            if method != "opt":
                ax.fill_between(cond, q25, q75, color=color, alpha=0.12, lw=0)
        top = ax.secondary_xaxis("top")  # which k each condition value comes from
        top.set_xticks(cond, [str(k) for k in ks], fontsize=7)
        top.set_xlabel("k (candidates chosen)", fontsize=8)
        ax.axhline(1.0, color="grey", ls="-.", lw=1, label="relaxation bound")
        ax.set_ylim(bottom=0)
        ax.set_title(case, fontsize=10)
        ax.set_xlabel("(bound - $\\lambda_{min}(M)$) / (R ln k), mean over instances")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("share of the relaxation's increase\n(median, IQR over instances)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle("Randomized rounding against greedy at greedy's lambda_min evaluation count (R)", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return {"fraction_vs_condition": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="relaxation + greedy + brute force per (case, k, instance) as pmap tasks; the repeated randomized "
        "roundings of every relaxation as pmap tasks (chunks with their own seeds), best kept on the driver",
    checked_against="abstract only (PMLR 267:32406-32419; a new full-text search found none): the relaxation and "
                    "the rounding scheme are reconstructions; OPT by brute force; algebraic connectivity checked "
                    "against networkx",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
