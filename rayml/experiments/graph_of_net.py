"""N2GON reproduction: node (= graph) classification on two Graph-of-Nets against ablations of equal size.

GONs (``rayml.graphs.graph_of_net_data``): ``digits`` (``load_digits`` images as pixel /
superpixel graphs, linked by a kNN graph over the images) and ``molecules`` (small molecule-like
random graphs with a class motif, linked by a kNN graph over a composition / degree fingerprint).
Per (dataset, seed): a fresh GON and a semi-supervised split (``labels_per_class`` labelled
node-graphs per class, ``n_val`` for validation, the rest test). Methods, all with the same
parameter count (within a few percent; recorded), epochs and tuning grid: N2GON (dual encoders +
constraint network, ``rayml.graphs.graph_of_net``), intra-graph-only, inter-graph-only, and the
dual encoder without the constraint network (the ablation); and, as a diagnostic without a claim,
N2GON whose constraint net has no label must-links.

Tuning: each method's learning rate on ``lr_grid`` (containing the assumed paper setting 0.01) by
validation accuracy on tuning seeds (a GON and split per dataset) kept apart from the test seeds.
Aggregation: paired Wilcoxon tests over (dataset, seed), and per-dataset wins.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "N2GON: Neural Networks for Graph-of-Net with Position Awareness, ICML 2025"
NAME = "graph-of-net"
METHODS = ("n2gon", "intra-only", "inter-only", "dual-encoder")
# Diagnostic (no claim): N2GON whose constraint net has no label must-links (GON edges + refinement only),
# to see whether the constraint loss helps through positions alone or through the labels used twice.
DIAGNOSTIC = "n2gon-no-label-links"
RUNS = METHODS + (DIAGNOSTIC,)
DATASETS = ("digits", "molecules")
PAPER_LR = 0.01  # assumed: the paper's learning rate was not reachable

SIZES = {
    "tiny": dict(datasets=["digits", "molecules"], n_graphs=60, k=4, labels_per_class=3, n_val=12, hidden=16,
                 epochs=10, lam=1.0, lr_grid=[0.01], seeds=2, eval_every=5),
    "quick": dict(datasets=["digits", "molecules"], n_graphs=300, k=5, labels_per_class=10, n_val=60, hidden=16,
                  epochs=100, lam=1.0, lr_grid=[0.003, 0.01, 0.03, 0.1], seeds=4, eval_every=5),
    "full": dict(datasets=["digits", "molecules"], n_graphs=1500, k=5, labels_per_class=20, n_val=300, hidden=32,
                 epochs=300, lam=1.0, lr_grid=[0.001, 0.003, 0.01, 0.03, 0.1], seeds=10, eval_every=5),
}


def _int(config, key, lo):
    v = config[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ValueError(f"{key} must be an integer >= {lo}, got {v!r}")


def _check(config: Mapping[str, Any]) -> None:
    for key, lo in (("n_graphs", 20), ("k", 1), ("labels_per_class", 1), ("n_val", 1), ("hidden", 2),
                    ("epochs", 1), ("seeds", 1), ("eval_every", 1)):
        _int(config, key, lo)
    ds = config["datasets"]
    if not isinstance(ds, list) or not ds or any(d not in DATASETS for d in ds) or len(set(ds)) != len(ds):
        raise ValueError(f"datasets must be a non-empty list of distinct names from {DATASETS}, got {ds!r}")
    if config["k"] >= config["n_graphs"]:
        raise ValueError(f"k must be < n_graphs, got k={config['k']}, n_graphs={config['n_graphs']}")
    if "digits" in ds and config["n_graphs"] > 1797:
        raise ValueError(f"n_graphs must be <= 1797 (the load_digits images), got {config['n_graphs']}")
    classes = max(10 if d == "digits" else 4 for d in ds)
    if config["labels_per_class"] * classes + config["n_val"] >= config["n_graphs"] * 0.8:
        raise ValueError("labels_per_class * classes + n_val must leave >= 20% of n_graphs for testing, got "
                         f"{config['labels_per_class']} * {classes} + {config['n_val']} of {config['n_graphs']}")
    lam = config["lam"]
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam!r}")
    grid = config["lr_grid"]
    if not isinstance(grid, list) or not grid or any(isinstance(r, bool) or not isinstance(r, (int, float))
                                                      or not 0 < r < 1 for r in grid):
        raise ValueError(f"lr_grid must be a non-empty list of learning rates in (0, 1), got {grid!r}")


@functools.lru_cache(maxsize=8)
def _gon(dataset: str, n_graphs: int, k: int, labels_per_class: int, n_val: int, data_seed: int):
    """The GON and split of one (dataset, seed): a pure function of its arguments (cached per process)."""
    from rayml.graphs import graph_of_net_data as gd

    rng = np.random.default_rng(data_seed)
    gon = gd.digits_gon(rng, n_graphs, k) if dataset == "digits" else gd.molecule_gon(rng, n_graphs, k)
    split = gd.split_nodes(rng, gon.y, labels_per_class, n_val)
    return gon, split


def run_task(item: tuple, config: Mapping[str, Any]) -> dict:
    """Train one method on one (dataset, seed) GON; test accuracy at the best validation epoch."""
    from rayml.graphs import graph_of_net as gn
    from rayml.graphs.graph_of_net_data import edge_homophily

    phase, dataset, method, lr, seed_idx, data_seed, train_seed = item
    gon, split = _gon(dataset, int(config["n_graphs"]), int(config["k"]), int(config["labels_per_class"]),
                      int(config["n_val"]), int(data_seed))
    cfg = gn.N2GONConfig(method="n2gon" if method == DIAGNOSTIC else method, hidden=int(config["hidden"]),
                         epochs=int(config["epochs"]), lr=float(lr), lam=float(config["lam"]),
                         label_weight=0.0 if method == DIAGNOSTIC else 1.0, eval_every=int(config["eval_every"]))
    out = gn.train(gon, split, cfg, int(train_seed))
    return {"phase": phase, "dataset": dataset, "method": method, "lr": float(lr), "seed": int(seed_idx), **out,
            "inter_homophily": edge_homophily(gon.inter_edges, gon.y),
            "nodes_per_graph": float(gon.x.shape[0] / gon.n_graphs)}


def _wins(means: dict, method: str, datasets: list) -> float:
    """The fraction of datasets on which ``method``'s mean accuracy beats both other models of the
    three-way comparison (N2GON, intra-only, inter-only)."""
    rivals = [m for m in ("n2gon", "intra-only", "inter-only") if m != method]
    return float(np.mean([all(means[(d, method)] > means[(d, r)] for r in rivals) for d in datasets]))


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune each method's learning rate on tuning seeds, then every (dataset, method, seed) as a task."""
    _check(config)
    datasets, grid = list(config["datasets"]), [float(r) for r in config["lr_grid"]]
    n_seeds = int(config["seeds"])
    tune_seed, test_seed = runtime.seeds(seed, 2)
    tseeds = runtime.seeds(tune_seed, 2 * len(datasets))
    tune_items = [("tune", d, m, lr, 0, tseeds[2 * di], tseeds[2 * di + 1])
                  for di, d in enumerate(datasets) for m in RUNS for lr in grid]
    tuned = runtime.pmap(run_task, tune_items, shared=dict(config), chunk_size=1, desc="graph-of-net tuning")
    best = {}
    for m in RUNS:  # one lr per method: mean validation accuracy over the tuning GONs (ties: nearest 0.01)
        score = {lr: np.mean([o["val_acc"] for o in tuned if o["method"] == m and o["lr"] == lr]) for lr in grid}
        best[m] = max(grid, key=lambda lr: (score[lr], -abs(np.log(lr / PAPER_LR)), -lr))
    seeds = runtime.seeds(test_seed, 2 * len(datasets) * n_seeds)
    items = []
    for di, d in enumerate(datasets):
        for s in range(n_seeds):
            ds_, ts_ = seeds[2 * (di * n_seeds + s)], seeds[2 * (di * n_seeds + s) + 1]
            items += [("main", d, m, best[m], s, ds_, ts_) for m in RUNS]
    out = runtime.pmap(run_task, items, shared=dict(config), chunk_size=1, desc="graph-of-net runs")

    rows = [{"dataset": o["dataset"], "method": o["method"], "seed": o["seed"], "metric": "test_acc",
             "value": o["test_acc"]} for o in out]
    rows += [{"dataset": o["dataset"], "method": o["method"], "seed": o["seed"], "metric": "val_acc",
              "value": o["val_acc"]} for o in out]
    tune_rows = [{"dataset": o["dataset"], "method": o["method"], "lr": o["lr"], "metric": "val_acc",
                  "value": o["val_acc"]} for o in tuned]
    means = {(d, m): float(np.mean([o["test_acc"] for o in out if o["dataset"] == d and o["method"] == m]))
             for d in datasets for m in RUNS}
    params = {m: int(next(o["params"] for o in out if o["method"] == m and o["dataset"] == datasets[0]))
              for m in RUNS}
    param_gap = max(abs(o["params"] / next(p["params"] for p in out if p["method"] == "n2gon"
                                           and p["dataset"] == o["dataset"]) - 1) for o in out)

    def summary(m):
        return {"acc": float(np.mean([o["test_acc"] for o in out if o["method"] == m])),
                "per_dataset": {d: means[(d, m)] for d in datasets},
                "datasets_won": _wins(means, m, datasets) if m in ("n2gon", "intra-only", "inter-only") else None,
                "params": params[m], "lr": best[m]}

    metrics = summary("n2gon")
    metrics["param_gap_max"] = float(param_gap)
    metrics["l_con_final"] = float(np.mean([o["l_con"] for o in out if o["method"] == "n2gon"]))
    metrics["inter_homophily"] = {d: float(np.mean([o["inter_homophily"] for o in out if o["dataset"] == d]))
                                  for d in datasets}
    metrics["nodes_per_graph"] = {d: float(np.mean([o["nodes_per_graph"] for o in out if o["dataset"] == d]))
                                  for d in datasets}
    baselines = {m.replace("-", "_"): {k: v for k, v in summary(m).items() if v is not None} for m in RUNS[1:]}
    budget = {"epochs": int(config["epochs"]), "params": params,
              "param_gap_max": float(param_gap),
              "tuning": f"learning rate per method on {grid} (assumed paper setting {PAPER_LR}) by mean validation "
                        "accuracy on one tuning GON per dataset, seeds apart from the test seeds",
              "tuned_lr": best, "labels_per_class": int(config["labels_per_class"]),
              "lam": float(config["lam"])}
    return Outcome(metrics=metrics, baselines=baselines, tables={"runs": rows, "tuning": tune_rows}, budget=budget)


_SRC = ("abstract: 'Our model demonstrates significant improvements over baselines in empirical evaluations on "
        "various datasets.'")


def _vs(base: str, why: str) -> Claim:
    return Claim(text=f"N2GON's test accuracy beats {base} ({why}; equal size, tuned lr; paired over dataset x seed)",
                 metric="metrics.acc", compare=f"baselines.{base.replace('-', '_')}.acc", op=">",
                 test="wilcoxon signed-rank over seeds", table="runs",
                 a={"method": "n2gon", "metric": "test_acc"}, b={"method": base, "metric": "test_acc"},
                 pair_on=("dataset", "seed"), kind="paper", source=_SRC)


CLAIMS = (
    _vs("intra-only", "the GON's edges unused"),
    _vs("inter-only", "no intra-graph message passing"),
    Claim(text="the constraint network helps: N2GON beats the same dual encoders trained without it (lam = 0; "
               "paired over dataset x seed)",
          metric="metrics.acc", compare="baselines.dual_encoder.acc", op=">", test="wilcoxon signed-rank over seeds",
          table="runs", a={"method": "n2gon", "metric": "test_acc"}, b={"method": "dual-encoder", "metric": "test_acc"},
          pair_on=("dataset", "seed"), kind="paper",
          source="abstract: 'Our model employs dual encoders and graph constructors to build and refine a constraint "
                 "network' (and the paper's Ablation Study, whose numbers were not reachable)"),
    Claim(text="N2GON has the best mean accuracy on every dataset against intra-only and inter-only "
               "(each baseline is the control, judged the same way)",
          metric="metrics.datasets_won", compare=1.0, op=">=", kind="paper", source=_SRC,
          controls=(Control("intra_only", "baselines.intra_only.datasets_won"),
                    Control("inter_only", "baselines.inter_only.datasets_won"))),
    Claim(text="sanity: every baseline's parameter count is within 5% of N2GON's",
          metric="metrics.param_gap_max", compare=0.05, op="<", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """Test accuracy per dataset and method (mean, min-max band over seeds); paired gaps per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in record["tables"]["runs"] if r["metric"] == "test_acc"]
    datasets = sorted({r["dataset"] for r in rows})
    figs = {}
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    shown = [m for m in RUNS if any(r["method"] == m for r in rows)]
    width = 0.8 / len(shown)
    for mi, m in enumerate(shown):
        xs = np.arange(len(datasets)) + (mi - (len(shown) - 1) / 2) * width
        vals = [[r["value"] for r in rows if r["method"] == m and r["dataset"] == d] for d in datasets]
        mean = np.array([np.mean(v) for v in vals])
        lo, hi = np.array([np.min(v) for v in vals]), np.array([np.max(v) for v in vals])
        ax.bar(xs, mean, width, label=m, alpha=0.8)
        ax.errorbar(xs, mean, yerr=[mean - lo, hi - mean], fmt="none", ecolor="k", capsize=3, lw=1)
    ax.set_xticks(np.arange(len(datasets)))
    ax.set_xticklabels(datasets)
    ax.set_ylabel("node-graph classification accuracy (test)")
    ax.set_title("N2GON vs equal-size baselines (bars: mean; whiskers: min-max over seeds)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["accuracy_per_dataset"] = fig
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    base = {(r["dataset"], r["seed"]): r["value"] for r in rows if r["method"] == "n2gon"}
    for mi, m in enumerate(shown[1:]):
        gaps = [(d, base[(r["dataset"], r["seed"])] - r["value"]) for d in datasets for r in rows
                if r["method"] == m and r["dataset"] == d]
        xs = [datasets.index(d) + (mi - (len(shown) - 2) / 2) * 0.18 for d, _ in gaps]
        ax.scatter(xs, [g for _, g in gaps], label=f"N2GON - {m}", s=18)
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xticks(np.arange(len(datasets)))
    ax.set_xticklabels(datasets)
    ax.set_ylabel("paired accuracy gap (per seed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    figs["paired_gaps"] = fig
    return figs


EXPERIMENT = Experiment(
    name=NAME, paper=PAPER,
    ray="tuning runs (dataset x method x learning rate) and (dataset x method x seed) training runs as pmap tasks",
    checked_against="the abstract, the OpenReview page and a reproducibility summary quoting Algorithm 1 (F1 Eq. 2, "
                    "F2 Eq. 3, constraint net Eq. 4, Pi Eq. 6, L_con Eq. 7 + NLL); no official code; the full text "
                    "was not reachable, so the forms of Eqs. 2-7 are assumed (see the module docstring)",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
