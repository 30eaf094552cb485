"""Max-min eigenvalue augmentation reproduction: the abstract's regime ``OPT - lambda_min(M) =
Omega(R ln k)`` swept at a fixed budget ``k`` (issue 36).

Setting (the issue's): ``M = diag(0.05 I_2, 10 I_10)`` (a weak 2-D subspace), ``m`` rank-one
candidates ``A_i = v_i v_i^T`` with ``tr A_i = |v_i|^2 = 1`` (so ``R = 1``), ``v_i = sqrt(s) w_i +
sqrt(1 - s) u_i`` with unit ``w_i`` in the weak subspace and unit ``u_i`` in the strong one. The
weak share ``s`` sets the optimal increase (about ``s k / 2``), so the condition ``(OPT -
lambda_min(M)) / (R ln k)`` sweeps from about 0.1 to about ``k / (2 ln k)`` at fixed ``k`` on the
same random directions (one instance seed = one set of ``w_i, u_i`` for every ``s``). No single
candidate can lift ``lambda_min`` (rank one against a 2-D weak eigenspace), so greedy's first pick
is a tie that ``greedy`` breaks by ``log det``.

Every instance is kept (no selection on greedy's result). Per instance and level: the SDP
relaxation (its value ``bound`` >= OPT; the condition and every share below use it, the paper's
uses OPT: assumed, conservative), greedy (``G_k = sum_{t<k} (m - t)`` ``lambda_min`` evaluations),
the best of ``R = G_k`` roundings and the mean of those draws (one rounding's expected value), and
the best of ``R`` uniformly random ``k``-subsets as a control. Brute-force OPT runs on the first
``bf_instances`` instances (the sanity check that the relaxation bounds it). ``fraction = (value -
lambda_min(M)) / (bound - lambda_min(M))``. An instance-level is *in the regime* when its condition
is at least 1, *out of it* when at most ``1 / ln k`` (the increase is at most one candidate's trace).
One pmap task per instance seed runs every level.

The regime claim (session 10, R6) is the abstract's statement against the strongest fair baseline: one
rounding's extra share over one random subset (both expected values: the mean of the ``R`` draws) is
larger in the regime than out of it, per instance (a difference in differences), so a rise that a
random subset shows too (the instances', not the rounding's) cancels. Since session 14 (after R10) the
random subset is matched to the rounding draw by draw: for each of the ``R`` draws a uniformly random
subset of as many distinct indices as that draw kept (``same_size_subsets``); the ``"iid"`` rounding
keeps about 7 of ``k = 10``, so a random ``k``-subset, which always fills all ``k`` slots, had charged
it for the items it did not pick. Controls, in the rounding's place: a second, independent same-size
draw (no extra share in or out: the null) and one random ``k``-subset (the former baseline). The plain
in-vs-out shares and the extra share over a ``k``-subset stay in the metrics, and ``tables.per_level``
gives the extra share over the same-size subset per weak-share level (wins / losses over instances, a
sign test per level as a description) beside the ``k``-subset's.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.optim.eig_augment import (SCHEMES, AugmentationProblem, brute_force, greedy, round_many,
                                     same_size_subsets, solve_relaxation)
from rayml.results import Claim, Control

PAPER = "Simple Randomized Rounding for Max-Min Eigenvalue Augmentation, ICML 2025"
METHOD = "eig-augment"
SHARES = [0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0]

SIZES = {
    "tiny": dict(m=10, k=4, weak=2, strong=4, shares=[0.1, 1.0], instances=2, bf_instances=1, scheme="iid"),
    "quick": dict(m=18, k=8, weak=2, strong=10, shares=SHARES, instances=30, bf_instances=2, scheme="iid"),
    "full": dict(m=20, k=10, weak=2, strong=10, shares=SHARES, instances=60, bf_instances=4, scheme="iid"),
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


def weak_subspace_instance(m: int, weak: int, strong: int, share: float, rng: np.random.Generator):
    """``(M, As)``: ``M = diag(0.05 I_weak, 10 I_strong)`` and ``m`` trace-one rank-one candidates
    with weight ``share`` in the weak subspace (the directions come from ``rng``)."""
    if not 0 < share <= 1:
        raise ValueError(f"share must lie in (0, 1], got {share}")
    M = np.diag([0.05] * weak + [10.0] * strong)
    w = rng.standard_normal((m, weak))
    u = rng.standard_normal((m, strong))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    V = np.hstack([math.sqrt(share) * w, math.sqrt(1 - share) * u])
    return M, [np.outer(v, v) for v in V]


def build_problem(config: Mapping[str, Any], share: float, inst_seed: int) -> AugmentationProblem:
    """The instance for seed ``inst_seed`` at weak share ``share`` (same directions for every share)."""
    M, As = weak_subspace_instance(int(config["m"]), int(config["weak"]), int(config["strong"]), float(share),
                                   np.random.default_rng(inst_seed))
    return AugmentationProblem(M, As, int(config["k"]))


def solve_instance(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """Every level of one instance: relaxation, greedy, ``R`` roundings, ``R`` random ``k``-subsets, two
    independent draws of ``R`` random subsets of the roundings' sizes (draw by draw), and brute force
    when ``inst < bf_instances``."""
    inst, inst_seed = item
    out = []
    for level, share in enumerate(config["shares"]):
        problem = build_problem(config, share, inst_seed)
        rel = solve_relaxation(problem)
        g = greedy(problem)
        R = greedy_evals(problem.m, problem.k)
        # spawn(4) keeps the first two children of spawn(2) and spawn(3): the roundings and the random
        # k-subsets draw as before; the third child (session 10's second k-subset draw) now seeds the
        # same-size null control, the fourth the same-size baseline
        rs, cs, cs2, ss = np.random.SeedSequence([inst_seed, level]).spawn(4)
        rounds = round_many(problem, rel.x, R, seed=np.random.default_rng(rs), scheme=str(config["scheme"]))
        rng = np.random.default_rng(cs)
        rand = [problem.value(rng.choice(problem.m, size=problem.k, replace=False)) for _ in range(R)]
        # session 14 (R10): per rounding draw, a uniformly random subset of as many distinct indices as
        # that draw kept, the regime claim's baseline; a second, independent such draw is its null control
        same = same_size_subsets(rounds.sizes, problem.m, np.random.default_rng(ss))
        same2 = same_size_subsets(rounds.sizes, problem.m, np.random.default_rng(cs2))
        same_vals = [problem.value(t) for t in same]
        same2_vals = [problem.value(t) for t in same2]
        opt = brute_force(problem, limit=500_000).value if inst < int(config["bf_instances"]) else None
        gap = rel.bound - problem.base
        rec = {"instance": inst, "share": float(share), "condition": problem.condition(rel.bound),
               "bound": rel.bound, "base": problem.base, "opt": opt, "solver": rel.solver,
               "rounding_size": float(rounds.sizes.mean()), "samesize_size": float(np.mean([t.size for t in same])),
               "samesize2_size": float(np.mean([t.size for t in same2]))}
        for name, v in (("rounding_best", rounds.value), ("rounding_mean", float(rounds.values.mean())),
                        ("greedy", g.value), ("random_best", max(rand)), ("random_mean", float(np.mean(rand))),
                        ("samesize_best", max(same_vals)), ("samesize_mean", float(np.mean(same_vals))),
                        ("samesize2_mean", float(np.mean(same2_vals)))):
            rec[name] = (v - problem.base) / gap
        # the regime claim's quantity: one rounding's extra share over one random subset of the same size
        # (expected values); its controls put a second same-size draw and a random k-subset in its place
        rec["rounding_excess"] = rec["rounding_mean"] - rec["samesize_mean"]
        rec["samesize2_excess"] = rec["samesize2_mean"] - rec["samesize_mean"]
        rec["random_excess"] = rec["random_mean"] - rec["samesize_mean"]
        # the former (session 10-13) quantity, against a random k-subset, kept for comparison
        rec["rounding_excess_k"] = rec["rounding_mean"] - rec["random_mean"]
        out.append(rec)
    return out


def _check(config: Mapping[str, Any]) -> None:
    m, k = int(config["m"]), int(config["k"])
    if not 2 <= k < m:
        raise ValueError(f"k must satisfy 2 <= k < m = {m}, got {k}")
    for key in ("instances", "weak", "strong"):
        if int(config[key]) < 1:
            raise ValueError(f"{key} must be >= 1, got {config[key]}")
    if int(config["bf_instances"]) < 1:
        raise ValueError(f"bf_instances must be >= 1, got {config['bf_instances']}")
    if str(config.get("scheme", "iid")) not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {config['scheme']!r}")
    if not config["shares"] or any(not 0 < float(s) <= 1 for s in config["shares"]):
        raise ValueError(f"shares must be weak shares in (0, 1], got {config['shares']}")


NAMES = ("rounding_best", "rounding_mean", "greedy", "random_best", "random_mean", "samesize_best", "samesize_mean",
         "samesize2_mean", "rounding_excess", "samesize2_excess", "random_excess", "rounding_excess_k")
# the mean number of distinct indices per draw: the rounding's and its same-size baselines' (equal by construction)
SIZE_NAMES = ("rounding_size", "samesize_size", "samesize2_size")


def power_estimates(per_regime: list[dict]) -> dict:
    """The two paired claims' power (``evidence.power_from_pilot``, exact one-sided sign test at
    0.05, power 0.8; this run as the pilot): instances needed for the in-vs-out comparison of one
    rounding (and of its random-subset control) and for the best of ``R`` roundings against greedy
    in the regime, and for the regime claim's difference in differences (the rounding's extra share over
    a same-size random subset in the regime against out of it). ``pairs_needed`` is ``None`` where the run shows no effect in the claim's direction."""
    val = {(r["instance"], r["regime"], r["method"]): r["value"] for r in per_regime}
    insts = sorted({i for i, _, _ in val})

    def estimate(a, b):
        d = [val[(i, *a)] - val[(i, *b)] for i in insts if (i, *a) in val and (i, *b) in val]
        return evidence.power_from_pilot(d, test="sign") if len(d) >= 2 else None

    return {"pilot": "this run (instances as pairs)",
            "rounding_in_vs_out": estimate(("in", "rounding_mean"), ("out", "rounding_mean")),
            "random_subset_in_vs_out": estimate(("in", "random_mean"), ("out", "random_mean")),
            "samesize_subset_in_vs_out": estimate(("in", "samesize_mean"), ("out", "samesize_mean")),
            "rounding_excess_in_vs_out": estimate(("in", "rounding_excess"), ("out", "rounding_excess")),
            "best_of_r_vs_greedy_in_regime": estimate(("in", "rounding_best"), ("in", "greedy"))}


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Every instance seed as one pmap task over all weak-share levels; regime tables on the driver."""
    _check(config)
    k = int(config["k"])
    items = list(enumerate(runtime.seeds(seed, int(config["instances"]))))
    recs = [r for per in runtime.pmap(solve_instance, items, shared=dict(config), desc="eig-augment instances")
            for r in per]
    out_edge = 1.0 / math.log(k)
    rows = []
    for r in recs:
        regime = "in" if r["condition"] >= 1.0 else ("out" if r["condition"] <= out_edge else "between")
        r["regime"] = regime
        for name in NAMES:
            rows.append({"instance": r["instance"], "share": r["share"], "regime": regime, "method": name,
                         "metric": "excess_over_random" if "_excess" in name else "fraction",
                         "value": r[name]})
        for name in SIZE_NAMES:
            rows.append({"instance": r["instance"], "share": r["share"], "regime": regime, "method": name,
                         "metric": "distinct_indices", "value": r[name]})
        rows.append({"instance": r["instance"], "share": r["share"], "regime": regime, "method": "relaxation",
                     "metric": "condition", "value": r["condition"]})
    # one row per (instance, regime, method): the mean over that instance's levels in the regime
    per_regime = []
    for inst in sorted({r["instance"] for r in recs}):
        for regime in ("in", "out"):
            sel = [r for r in recs if r["instance"] == inst and r["regime"] == regime]
            if sel:
                for name in NAMES:
                    per_regime.append({"instance": inst, "regime": regime, "method": name,
                                       "value": float(np.mean([r[name] for r in sel]))})

    def mean(name, regime=None):
        vals = [r[name] for r in recs if regime is None or r["regime"] == regime]
        return float(np.mean(vals)) if vals else float("nan")

    by_share = {}
    for share in config["shares"]:
        sel = [r for r in recs if r["share"] == float(share)]
        by_share[str(share)] = {"condition": float(np.mean([r["condition"] for r in sel])),
                                **{name: float(np.mean([r[name] for r in sel])) for name in NAMES + SIZE_NAMES}}
    # R6 / R10: the regime claim's quantity per weak-share level, paired over instances: the rounding's
    # extra share over a same-size random subset (wins / losses over instances and a one-sided sign test
    # per level; a description, not a claim), beside its extra share over a random k-subset
    per_level = evidence.per_case(rows, a={"method": "rounding_mean", "metric": "fraction"},
                                  b={"method": "samesize_mean", "metric": "fraction"}, by=("share",),
                                  pair_on=("instance",), lower_is_better=False, test="paired sign test over seeds")
    for row in per_level:
        sel = [r for r in recs if r["share"] == row["share"]]
        row.update({"condition": float(np.mean([r["condition"] for r in sel])),
                    "in_regime": sum(r["regime"] == "in" for r in sel),
                    "out_of_regime": sum(r["regime"] == "out" for r in sel),
                    "rounding_size": float(np.mean([r["rounding_size"] for r in sel])),
                    "rounding_mean": float(np.mean([r["rounding_mean"] for r in sel])),
                    "samesize_mean": float(np.mean([r["samesize_mean"] for r in sel])),
                    "random_mean": float(np.mean([r["random_mean"] for r in sel])),
                    "rounding_excess": float(np.mean([r["rounding_excess"] for r in sel])),
                    "rounding_excess_k": float(np.mean([r["rounding_excess_k"] for r in sel])),
                    "k_subset_wins": sum(r["rounding_excess_k"] > 0 for r in sel),
                    "k_subset_losses": sum(r["rounding_excess_k"] < 0 for r in sel)})
    bf = [r for r in recs if r["opt"] is not None]
    metrics = {
        "fraction_mean_rounding_in_regime": mean("rounding_mean", "in"),
        "fraction_mean_rounding_out_of_regime": mean("rounding_mean", "out"),
        "fraction_best_rounding_in_regime": mean("rounding_best", "in"),
        "fraction_best_rounding_out_of_regime": mean("rounding_best", "out"),
        "rounding_excess_in_regime": mean("rounding_excess", "in"),
        "rounding_excess_out_of_regime": mean("rounding_excess", "out"),
        "rounding_excess_over_k_subset_in_regime": mean("rounding_excess_k", "in"),
        "rounding_excess_over_k_subset_out_of_regime": mean("rounding_excess_k", "out"),
        "rounding_distinct_mean": mean("rounding_size"),
        "levels_in_regime": sum(r["regime"] == "in" for r in recs),
        "levels_out_of_regime": sum(r["regime"] == "out" for r in recs),
        "max_condition": float(max(r["condition"] for r in recs)),
        "min_condition": float(min(r["condition"] for r in recs)),
        "out_of_regime_edge": out_edge,
        "min_bound_minus_opt": float(min((r["bound"] - r["opt"]) / max(1.0, abs(r["bound"])) for r in bf)),
        "opt_fraction_brute_forced": float(np.mean([(r["opt"] - r["base"]) / (r["bound"] - r["base"]) for r in bf])),
        "by_share": by_share,
        "solver": recs[0]["solver"],
        "scheme": str(config["scheme"]),
        "power": power_estimates(per_regime),
    }
    baselines = {name: {"fraction_in_regime": mean(name, "in"), "fraction_out_of_regime": mean(name, "out"),
                        "fraction": mean(name)}
                 for name in ("greedy", "random_best", "random_mean", "samesize_best", "samesize_mean", "samesize2_mean")}
    # the regime claim's controls: their extra share over the same-size subset, in and out of the regime
    baselines["samesize2_mean"].update({"excess_in_regime": mean("samesize2_excess", "in"),
                                        "excess_out_of_regime": mean("samesize2_excess", "out")})
    baselines["random_mean"].update({"excess_in_regime": mean("random_excess", "in"),
                                     "excess_out_of_regime": mean("random_excess", "out")})
    budget = {"roundings": "R = greedy's lambda_min evaluations: sum_{t<k} (m - t)",
              "R": greedy_evals(int(config["m"]), k), "rounding_extra": "one SDP relaxation solve per instance-level",
              "random_subsets": "R random k-subsets and two independent draws of R random subsets of the "
                                "roundings' sizes, draw by draw, per instance-level (the regime claim's baseline "
                                "and its null control)",
              "scheme": config["scheme"], "instances": len(items), "levels": len(config["shares"]),
              "selection": "none: every instance seed is kept", "tuning": "none"}
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"runs": rows, "per_regime": per_regime, "per_level": per_level},
                   budget=budget)


_IN_REGIME = Claim(text="(gate) the sweep reaches the abstract's regime: some instance-level has (bound - "
                        "lambda_min(M)) >= R ln k",
                   metric="metrics.max_condition", compare=1.0, op=">=", kind="sanity")
_OUT_OF_REGIME = Claim(text="(gate) the sweep also covers the out-of-regime side: some instance-level has an increase "
                            "of at most R (condition <= 1 / ln k)",
                       metric="metrics.min_condition", compare="metrics.out_of_regime_edge", op="<=", kind="sanity")
_CONSTANT = Claim(text="constant factor when OPT - lambda_min(M) = Omega(R ln k), against the strongest fair "
                       "baseline: a single rounding's extra share of the relaxation's increase over a random subset of "
                       "the same size (per draw, as many distinct indices as the rounding kept) is larger in the "
                       "regime (condition >= 1) than out of it (condition <= 1 / ln k): a difference in differences, "
                       "paired over instances (same directions, different weak share)",
                  metric="metrics.rounding_excess_in_regime", compare="metrics.rounding_excess_out_of_regime",
                  op=">", test="paired sign test over seeds", table="per_regime",
                  a={"method": "rounding_excess", "regime": "in"}, b={"method": "rounding_excess", "regime": "out"},
                  pair_on=("instance",), source=ABSTRACT,
                  # session 10, R6: one random subset rises from out of the regime to in it as much as one rounding
                  # (0.694 vs 0.656 against 0.554 vs 0.518), so the plain in-vs-out rise belongs to the instances;
                  # the claim subtracts it. Session 14, R10: the i.i.d. rounding keeps about 7 of k = 10 distinct
                  # indices, so the random subset it is measured against has the same size, draw by draw. Controls
                  # in the rounding's place: a second, independent same-size draw, and one random k-subset
                  controls=(Control("one same-size random subset", "baselines.samesize2_mean.excess_in_regime",
                                    a={"method": "samesize2_excess", "regime": "in"},
                                    b={"method": "samesize2_excess", "regime": "out"},
                                    compare="baselines.samesize2_mean.excess_out_of_regime"),
                            Control("one random k-subset", "baselines.random_mean.excess_in_regime",
                                    a={"method": "random_excess", "regime": "in"},
                                    b={"method": "random_excess", "regime": "out"},
                                    compare="baselines.random_mean.excess_out_of_regime")))
_BEST_OF_R = Claim(text="in the regime the best of R roundings (R = greedy's lambda_min evaluations) reaches a larger "
                        "share of the relaxation's increase than greedy (log-det tie-break), paired over instances",
                   metric="metrics.fraction_best_rounding_in_regime", compare="baselines.greedy.fraction_in_regime",
                   op=">", test="paired sign test over seeds", table="per_regime",
                   a={"method": "rounding_best", "regime": "in"}, b={"method": "greedy", "regime": "in"},
                   pair_on=("instance",), source=ABSTRACT,
                   controls=(Control("random-best-of-R", "baselines.random_best.fraction_in_regime",
                                     a={"method": "random_best", "regime": "in"}),))
# the in-regime gate gates both paper claims, the out-of-regime gate the in-vs-out comparison
_out_gate, _constant = evidence.gate(_OUT_OF_REGIME, _CONSTANT)
_in_gate, _constant, _best_of_r = evidence.gate(_IN_REGIME, _constant, _BEST_OF_R)
CLAIMS = (
    _in_gate,
    _out_gate,
    Claim(text="the relaxation bounds OPT from above (brute force; relative solver tolerance 1e-6)",
          metric="metrics.min_bound_minus_opt", compare=-1e-6, op=">=", kind="sanity"),
    _constant,
    _best_of_r,
)


_CURVES = (("rounding_best", "best of R roundings (ours)", "C0", "-"), ("rounding_mean", "one rounding (mean)", "C0", "--"),
           ("greedy", "greedy (log-det ties)", "C1", "-"), ("random_best", "best of R random k-subsets", "C2", "-"),
           ("samesize_mean", "one same-size random subset (mean)", "C3", "--"),
           ("random_mean", "one random k-subset (mean)", "C2", "--"))


def plots(record: Mapping) -> dict:
    """Share of the relaxation's increase against the condition, one point per weak share (means)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = record["metrics"]["by_share"]
    shares = sorted(by, key=float)
    cond = [by[s]["condition"] for s in shares]
    fig, ax = plt.subplots(figsize=(5.4, 4.2))
    for name, label, color, ls in _CURVES:
        ax.plot(cond, [by[s][name] for s in shares], marker="o", color=color, ls=ls, label=label)
    ax.axvline(1.0, color="grey", ls=":", lw=1)
    ax.axvline(record["metrics"]["out_of_regime_edge"], color="grey", ls=":", lw=1)
    ax.set_xlabel("(bound - $\\lambda_{min}(M)$) / (R ln k)")
    ax.set_ylabel("share of the relaxation's increase (mean)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return {"fraction_vs_condition": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="one pmap task per instance seed: relaxation, greedy, roundings, random subsets (and brute force on the "
        "first instances) at every weak-share level",
    checked_against="abstract only (PMLR 267:32406-32419; full-text searches found none): the relaxation and "
                    "the rounding scheme are reconstructions; OPT by brute force on the first instances",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
