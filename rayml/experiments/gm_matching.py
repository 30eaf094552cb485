"""GM Matching reproduction: O(1/k) moment matching on clean data, robustness on noisy digits.

Part 1 (clean data, the paper's convergence claim): Gaussian points; the distance between the
mean of the selected subset and the geometric median, for GM Matching and for uniform random
subsets of the same size ``k``; the log-log slope of error against ``k`` (-1 for O(1/k), -0.5 for
O(1/sqrt k)).

Part 2 (robust selection): scikit-learn's ``load_digits`` (1797 images, 64 pixel features,
standardised on the training split), a stratified 70/30 train/test split per seed; the training
split is corrupted at each level (``label``: that fraction of labels flipped uniformly to another
class; ``feature``: that fraction of rows get additive Gaussian noise of standard deviation
``feature_noise`` in standardised units). Every selector picks a subset of each size fraction per
(observed) class; a multinomial logistic regression (the same settings for every selector) is
trained on the subset and scored on the clean test split.

The parallel part: one Ray task per seed (part 1) and per (corruption, level, seed) (part 2),
through ``rayml.runtime.pmap``; each item carries its own seed.

Assumed (not read in the paper): the classifier (logistic regression on raw pixels rather than a
network on CLIP embeddings), the corruption models and their strength, selection on standardised
pixels with the authors' defaults (unit-sphere herding, random start).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.data.gm_matching import METHODS, geometric_median, herding, select_per_class
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim

PAPER = "Geometric Median (GM) Matching for Robust k-Subset Selection from Noisy Data, ICML 2025"
NAME = "gm-matching"
OURS = "gm-matching"
BASELINES = tuple(m for m in METHODS if m != OURS)
CORRUPTIONS = ("label", "feature")

SIZES = {
    "tiny": dict(n_points=400, dim=8, ks=[5, 20, 80], conv_seeds=2, corruptions=["label", "feature"],
                 levels=[0.0, 0.4], fractions=[0.2], seeds=1, feature_noise=4.0, max_iter=200),
    "quick": dict(n_points=2000, dim=32, ks=[10, 30, 100, 300], conv_seeds=4, corruptions=["label", "feature"],
                  levels=[0.0, 0.2, 0.4], fractions=[0.1, 0.3], seeds=4, feature_noise=4.0, max_iter=300),
    "full": dict(n_points=5000, dim=32, ks=[10, 30, 100, 300, 1000], conv_seeds=20,
                 corruptions=["label", "feature"], levels=[0.0, 0.1, 0.2, 0.3, 0.4],
                 fractions=[0.1, 0.2, 0.3], seeds=20, feature_noise=4.0, max_iter=500),
}


def _check_config(config: Mapping[str, Any]) -> None:
    ks, n = list(config["ks"]), int(config["n_points"])
    if not ks or any((not isinstance(k, int)) or not 1 <= k <= n for k in ks):
        raise ValueError(f"ks must be integers in [1, n_points={n}], got {ks}")
    for key in ("conv_seeds", "seeds"):
        if int(config[key]) < 1:
            raise ValueError(f"{key} must be >= 1, got {config[key]}")
    if any(c not in CORRUPTIONS for c in config["corruptions"]):
        raise ValueError(f"corruptions must be in {CORRUPTIONS}, got {config['corruptions']}")
    if any(not 0 <= lv < 1 for lv in config["levels"]):
        raise ValueError(f"levels must be in [0, 1), got {config['levels']}")
    if any(not 0 < f <= 1 for f in config["fractions"]):
        raise ValueError(f"fractions must be in (0, 1], got {config['fractions']}")


def convergence_one(item: tuple[int, int], config: Mapping[str, Any]) -> list[dict]:
    """Part 1 for one seed: subset-mean error to the GM for GM Matching and random, per k."""
    seed_index, seed = item
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((int(config["n_points"]), int(config["dim"])))
    gm = geometric_median(X)
    rows = []
    for k in config["ks"]:
        s_gm = herding(X, k, gm, normalize=False, seed=rng)
        s_rand = rng.permutation(X.shape[0])[:k]
        for method, s in ((OURS, s_gm), ("random", s_rand)):
            rows.append({"method": method, "k": int(k), "seed": seed_index, "metric": "mean_error",
                         "value": float(np.linalg.norm(X[s].mean(axis=0) - gm))})
    return rows


def _digits_split(seed: int):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y, random_state=seed % (2**32))
    scaler = StandardScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


def corrupt(X: np.ndarray, y: np.ndarray, kind: str, level: float, noise: float, rng: np.random.Generator):
    """Corrupted copies of ``(X, y)``: ``level`` of the rows get flipped labels or feature noise."""
    X, y = X.copy(), y.copy()
    n_bad = int(round(level * len(y)))
    bad = rng.permutation(len(y))[:n_bad]
    if kind == "label":
        classes = np.unique(y)
        for i in bad:
            y[i] = rng.choice(classes[classes != y[i]])
    elif kind == "feature":
        X[bad] += noise * rng.standard_normal((n_bad, X.shape[1]))
    else:
        raise ValueError(f"kind must be one of {CORRUPTIONS}, got {kind!r}")
    return X, y


def robustness_one(item: tuple[str, float, int, int], config: Mapping[str, Any]) -> list[dict]:
    """Part 2 for one (corruption, level, seed): test accuracy of every selector at every fraction."""
    from sklearn.linear_model import LogisticRegression

    kind, level, seed_index, seed = item
    rng = np.random.default_rng(seed)
    X_tr, X_te, y_tr, y_te = _digits_split(seed)
    X_obs, y_obs = corrupt(X_tr, y_tr, kind, level, float(config["feature_noise"]), rng)
    rows = []
    for frac in config["fractions"]:
        k = max(len(np.unique(y_obs)), int(round(frac * len(y_obs))))
        for method in METHODS:
            sel_seed = np.random.default_rng([seed, int(frac * 1000), METHODS.index(method)])
            idx = select_per_class(X_obs, y_obs, k, method, seed=sel_seed)
            clf = LogisticRegression(max_iter=int(config["max_iter"]))
            clf.fit(X_obs[idx], y_obs[idx])
            rows.append({"method": method, "corruption": kind, "level": float(level), "fraction": float(frac),
                         "seed": seed_index, "metric": "accuracy", "value": float(clf.score(X_te, y_te))})
    return rows


def _slope(rows: list[dict], method: str, ks: list[int]) -> float:
    means = [np.mean([r["value"] for r in rows if r["method"] == method and r["k"] == k]) for k in ks]
    return float(np.polyfit(np.log(ks), np.log(means), 1)[0])


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Both parts as Ray tasks, then per-selector summaries."""
    _check_config(config)
    root = np.random.SeedSequence(seed)
    conv_ss, rob_ss = root.spawn(2)
    conv_items = list(enumerate(runtime.seeds(conv_ss, int(config["conv_seeds"]))))
    rob_seeds = runtime.seeds(rob_ss, int(config["seeds"]))
    rob_items = [(c, float(lv), i, s) for c in config["corruptions"] for lv in config["levels"]
                 for i, s in enumerate(rob_seeds)]
    conv_rows = [r for rs in runtime.pmap(convergence_one, conv_items, shared=dict(config), desc="gm convergence")
                 for r in rs]
    rob_rows = [r for rs in runtime.pmap(robustness_one, rob_items, shared=dict(config), desc="gm robustness")
                for r in rs]
    ks = list(config["ks"])
    heavy = max(config["levels"])
    for r in rob_rows:
        r["heavy"] = r["level"] == heavy

    def summary(method: str) -> dict:
        mine = [r for r in rob_rows if r["method"] == method]
        by = {f"{c}@{lv:g}": float(np.mean([r["value"] for r in mine if r["corruption"] == c and r["level"] == lv]))
              for c in config["corruptions"] for lv in config["levels"]}
        return {
            "heavy_accuracy": float(np.mean([r["value"] for r in mine if r["level"] == heavy])),
            "clean_accuracy": float(np.mean([r["value"] for r in mine if r["level"] == min(config["levels"])])),
            "accuracy": by,
        }

    errors = {m: {str(k): float(np.mean([r["value"] for r in conv_rows if r["method"] == m and r["k"] == k]))
                  for k in ks} for m in (OURS, "random")}
    ratio = max(errors[OURS][str(k)] / errors["random"][str(k)] for k in ks)
    summaries = {m: summary(m) for m in METHODS}
    best_other = max(summaries[b]["heavy_accuracy"] for b in BASELINES)
    metrics = {
        **summaries[OURS],
        "error_slope": _slope(conv_rows, OURS, ks),
        "mean_error": errors[OURS],
        "max_error_ratio_vs_random": float(ratio),
        "heavy_margin_vs_best_baseline": summaries[OURS]["heavy_accuracy"] - best_other,
        "heavy_level": float(heavy),
    }
    baselines = {b: summaries[b] for b in BASELINES}
    baselines["random"] = {**baselines["random"], "error_slope": _slope(conv_rows, "random", ks),
                           "mean_error": errors["random"]}
    budget = {"subset_fractions": list(config["fractions"]), "classifier": "LogisticRegression, same for all",
              "tuning": "none", "robustness_tasks": len(rob_items), "convergence_tasks": len(conv_items)}
    return Outcome(metrics=metrics, baselines=baselines, tables={"convergence": conv_rows, "robustness": rob_rows},
                   budget=budget)


def _heavy_claim(b: str) -> Claim:
    return Claim(
        text=f"under the heaviest corruption GM Matching's subsets train a more accurate classifier than {b}",
        metric="metrics.heavy_accuracy", compare=f"baselines.{b}.heavy_accuracy", op=">",
        test="wilcoxon signed-rank over seeds", table="robustness",
        a={"method": OURS, "heavy": True}, b={"method": b, "heavy": True},
        pair_on=("corruption", "fraction", "seed"),
    )


CLAIMS = (
    Claim(text="the subset mean approaches the geometric median at rate O(1/k) on clean data "
               "(log-log slope of error vs k below -0.75; random subsets: -0.5)",
          metric="metrics.error_slope", compare=-0.75, op="<"),
    Claim(text="GM Matching's subset-mean error is below random sampling's at every k",
          metric="metrics.max_error_ratio_vs_random", compare=1.0, op="<"),
    Claim(text="GM Matching is the best selector under the heaviest corruption level (40% in every size) (mean accuracy above the best baseline)",
          metric="metrics.heavy_margin_vs_best_baseline", compare=0.0, op=">"),
    *(_heavy_claim(b) for b in BASELINES),
)


def plots(record: Mapping) -> dict:
    """Error vs k (log-log) and accuracy vs corruption level per selector."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = {}
    conv = record["tables"]["convergence"]
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for m in (OURS, "random"):
        ks = sorted({r["k"] for r in conv if r["method"] == m})
        ax.loglog(ks, [np.mean([r["value"] for r in conv if r["method"] == m and r["k"] == k]) for k in ks],
                  "o-", label=m)
    ax.set_xlabel("k")
    ax.set_ylabel("||mean(S) - GM||")
    ax.legend()
    fig.tight_layout()
    figs["convergence"] = fig
    rob = record["tables"]["robustness"]
    kinds = list(dict.fromkeys(r["corruption"] for r in rob))
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.5 * len(kinds), 3.5), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        for m in METHODS:
            lv = sorted({r["level"] for r in rob if r["corruption"] == kind})
            ax.plot(lv, [np.mean([r["value"] for r in rob if r["corruption"] == kind and r["method"] == m
                                  and r["level"] == v]) for v in lv], "o-", label=m)
        ax.set_title(f"{kind} corruption")
        ax.set_xlabel("corrupted fraction")
        ax.set_ylabel("test accuracy (mean over fractions, seeds)")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    figs["robustness"] = fig
    return figs


EXPERIMENT = Experiment(
    name=NAME, paper=PAPER,
    ray="convergence seeds and (corruption, level, seed) robustness cells as pmap tasks",
    checked_against="authors' code (anishacharya/GM-Matching: Weiszfeld settings, herding, baselines, per-class "
                    "budget); paper abstract and secondary notes for Algorithm 1 and the claims",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
