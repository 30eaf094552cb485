"""CATE bounds from learned instrument partitions, against k-means partitions and the naive bounds.

Data: the paper's generators (``mixture``: a 1-D instrument from a mixture; ``binary``: 20 binary
instruments), ``n`` samples, the authors' 40/20/40 train/validation/test split, true CATE known.
Per (dataset, seed) one Ray task trains the first-stage nuisances once, then for every ``K`` the
representation (ours) and four partitions of the test instruments pushed through the *same*
aggregation (``partition_bounds``): k-means, the plug-in partition (``K`` bins of the first stage's
own estimate of ``P(A = 1 | Z)``), the oracle (``K`` bins of the true instrument strength: the gate
that the effect is reachable), a uniformly random partition (a control) and, for the record, the
authors' k-means baseline with its own nuisances on the level; plus the naive bounds (one level)
and the plug-in point estimate (its confounding bias says how much room validity has to fail).
Measured on the test split: coverage of the true CATE, mean bound width and the number of levels
the learned partition uses.

Claims (session 7): tightness per instrument is against the stronger fixed partition of that
instrument (the plug-in on the 1-D mixture, k-means on the 20-D binary instrument, from the full
record and the session-5/6 reviews), with the other fixed partition and the random one as controls.
Session 8: narrower bounds count only where they cover, for both sides: the tightness claim is
paired over the (K, seed) runs where the learned partition *and* its comparison cover the true
CATE on at least 95% of test points (``valid_pairs``; the runs dropped are recorded), instead of
gating the whole claim on every learned run covering (the oracle misses too at narrow widths, so
that gate charged the first stage's misses to the learned partition alone). Validity, the gate,
is the mean coverage over an instrument's runs (>= 95%): a systematic failure, not one run.
Session 9 (review R2: one collapsed run, a 34 / 766 split of 800 test instruments whose small level
falls under the 5% cut, reversed the mixture's mean against an 18 / 8 sign test): the levels sanity
claim counts the levels that enter the bounds (``effective_levels``); a collapsed run counts in the
tightness claims as it is (the method's output there is the naive bounds: a loss) and is listed in
``metrics.collapsed_runs``; the direction of the tightness claims is the median paired gap, the
sign test's own statistic, not the mean widths (still recorded).
Session 10 (review R4: the pooled sign test treated the three K of a seed as independent draws, though
they share the seed's data, first stage and split; and K = 2 decided the mixture verdict): the seed is
the unit. The tightness claim pairs each seed's mean width over its K (those of the valid pairs) with
the comparison's over the same K (table ``seed_pairs``), median seed gap and sign test over seeds; the
abstract claims tight bounds, not tight bounds at every K, so the claim is the one over K, and each K's
wins / losses / median gap / p with Holm's correction across K is reported beside it (``metrics.per_K``,
table ``per_K``), so a reader who picks the K that pass sees the corrected p. Tuning on 4 seeds (2 let
the chosen rate flip with the root seed).

Tuning (``tuning_seeds > 0``): the representation's learning rate on ``rep_lr_grid`` (the
authors' 0.03 inside), per dataset, by mean test width on seeds kept apart from the test seeds
(``rayml.evidence``), mean widths within ``TIE`` of the best tied and broken toward the authors'
0.03 (nearest in log scale), a top- or bottom-edge choice extended once within
``REP_LR_LIMITS``; the partitions through the same aggregation have nothing to tune.
"""

from __future__ import annotations

from typing import Any, Mapping

import math

import numpy as np

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Learning Representations of Instruments for Partial Identification of Treatment Effects, ICML 2025"
METHOD = "cate-bounds"
PAPER_REP_LR = 0.03
TIE = 1e-3  # widths within 0.001 (of an outcome range near 2) are a tie
REP_LR_LIMITS = (1e-4, 1.0)  # the tuning's extension bounds (session 8: 0.3 blocked the step 0.1 -> 0.333)
VALID_COVERAGE = 0.95  # a run's bounds are valid when they cover the true CATE on this share of test points
MIN_LEVEL_SHARE = 0.05  # a level holding less of the test instruments does not enter the bounds (level_mask)

SIZES = {
    "tiny": dict(datasets=["mixture", "binary"], Ks=[2], seeds=1, n=400, nuisance_epochs=3, rep_epochs=3,
                 nuisance_lr=0.01, rep_patience=10, rep_lr=PAPER_REP_LR, tuning_seeds=0,
                 rep_lr_grid=[0.01, 0.03, 0.1]),
    # quick: 5 seeds, the fewest at which the tightness claim's sign test over seeds can reach p < 0.05 (1 / 32)
    "quick": dict(datasets=["mixture", "binary"], Ks=[2, 8], seeds=5, n=2000, nuisance_epochs=20,
                  rep_epochs=20, nuisance_lr=0.01, rep_patience=10, rep_lr=PAPER_REP_LR, tuning_seeds=0,
                  rep_lr_grid=[0.01, 0.03, 0.1]),
    # full: K in {2, 4, 8}, 10 test seeds and 4 tuning seeds (session 10: 2 let the chosen rate flip with the
    # root seed) so that it fits 30 minutes on an idle 2-core machine; the seeds the claims need are recorded
    # (metrics.power_vs_comparison) and are more than this
    "full": dict(datasets=["mixture", "binary"], Ks=[2, 4, 8], seeds=10, n=2000, nuisance_epochs=100,
                 rep_epochs=100, nuisance_lr=0.001, rep_patience=50, rep_lr=PAPER_REP_LR, tuning_seeds=4,
                 rep_lr_grid=[0.01, 0.03, 0.1]),
}
METHODS = ("ours", "kmeans_agg", "plugin", "oracle", "random", "kmeans", "naive", "point")


def _validate(config: Mapping[str, Any]) -> None:
    from rayml.causal.cate_bounds import DATASETS

    ds = config["datasets"]
    if not isinstance(ds, list) or not ds or any(d not in DATASETS for d in ds):
        raise ValueError(f"datasets must be a non-empty list of {DATASETS}, got {ds!r}")
    Ks = config["Ks"]
    if not isinstance(Ks, list) or not Ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 2 for k in Ks):
        raise ValueError(f"Ks must be a non-empty list of integers >= 2, got {Ks!r}")
    for key in ("seeds", "n", "nuisance_epochs", "rep_epochs", "rep_patience"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    t = config["tuning_seeds"]
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f"tuning_seeds must be an integer >= 0, got {t!r}")
    if config["n"] < 100:
        raise ValueError(f"n must be at least 100, got {config['n']}")
    for key in ("nuisance_lr", "rep_lr"):
        if not config[key] > 0:
            raise ValueError(f"{key} must be > 0, got {config[key]!r}")
    grid = config["rep_lr_grid"]
    if not isinstance(grid, list) or not grid or any(not (isinstance(v, (int, float)) and v > 0) for v in grid):
        raise ValueError(f"rep_lr_grid must be a non-empty list of learning rates > 0, got {grid!r}")


def task(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """One (dataset, seed): nuisances, then for every K ours (at each learning rate of ``lrs``) and,
    unless ``tuning``, the partitions through the same aggregation, the authors' k-means and the
    naive bounds."""
    import dataclasses

    import torch

    from rayml.causal import cate_bounds as cb

    dataset, index, seed, lrs, tuning = item
    torch.manual_seed(0)
    d = cb.generate(dataset, int(config["n"]), seed)
    n = len(d["Y"])
    perm = np.random.default_rng(seed).permutation(n)
    tr, va, te = perm[: int(0.4 * n)], perm[int(0.4 * n): int(0.6 * n)], perm[int(0.6 * n):]
    support = (float(d["Y"].min()), float(d["Y"].max()))
    cfg = cb.TrainConfig(nuisance_epochs=int(config["nuisance_epochs"]), rep_epochs=int(config["rep_epochs"]),
                         nuisance_lr=float(config["nuisance_lr"]), rep_patience=int(config["rep_patience"]))
    s = seed % (2**31)
    nu = cb.fit_nuisances(d, tr, va, cfg, seed=s)
    cate = d["cate"][te]
    # the thread count the learned rows were trained with (they reproduce only in the same setting: session 8)
    rows = [{"method": "env", "dataset": dataset, "K": 0, "seed": index, "metric": "torch_threads",
             "value": float(torch.get_num_threads())}]

    def record(method, K, b, **extra):
        width = float(np.mean(b[:, 1] - b[:, 0]))
        cover = float(np.mean((b[:, 0] <= cate) & (cate <= b[:, 1])))
        for metric, v in (("width", width), ("coverage", cover), ("range", support[1] - support[0]), *extra.items()):
            rows.append({"method": method, "dataset": dataset, "K": K, "seed": index, "metric": metric, "value": v})

    for K in config["Ks"]:
        K = int(K)
        for lr in lrs:
            rep = cb.fit_repnet(d, nu, K, tr, va, support, dataclasses.replace(cfg, rep_lr=float(lr)), seed=s + K,
                                allow_one_level=True)
            levels = cb.repnet_levels(rep, d, te)
            record("ours" if not tuning else f"ours@{lr:g}", K,
                   cb.partition_bounds(nu, d, te, levels, K, support, min_share=MIN_LEVEL_SHARE),
                   levels=float(len(np.unique(levels))), effective_levels=float(effective_levels(levels, K)))
        if tuning:
            continue
        parts = {"kmeans_agg": cb.kmeans_levels(d["Z"][te], K, seed=s + K),
                 "plugin": cb.propensity_partition(nu, d, te, K),
                 "oracle": cb.oracle_partition(d["strength"][te], K),
                 "random": np.random.default_rng([s, K]).integers(0, K, len(te))}
        for name, levels in parts.items():
            record(name, K, cb.partition_bounds(nu, d, te, levels, K, support, min_share=MIN_LEVEL_SHARE))
        record("kmeans", K, cb.kmeans_bounds(d, K, tr, va, te, support, cfg, seed=s + K))
    if not tuning:
        naive = cb.kmeans_bounds(d, 1, tr, va, te, support, cfg, seed=s)
        point = _plug_in(cb, nu, d, te)
        for K in config["Ks"]:
            record("naive", int(K), naive)  # the same bounds, repeated so every K has its pair
            record("point", int(K), point, bias=float(np.mean(point[:, 0] - cate)))
    return rows


def effective_levels(levels: np.ndarray, K: int, min_share: float = MIN_LEVEL_SHARE) -> int:
    """The levels of a partition that enter its bounds: those holding at least ``min_share`` of the
    instruments (``level_mask``, the cut ``partition_bounds`` applies). One such level gives the
    naive (no-instrument) bounds, however many argmax levels the partition uses (session-9 review:
    34 of 800 test instruments in the second level counted as two levels)."""
    import torch
    import torch.nn.functional as F

    from rayml.causal.cate_bounds import level_mask

    phi = F.one_hot(torch.as_tensor(np.asarray(levels), dtype=torch.long), K).float()
    return int(level_mask(phi, min_share).sum())


def _plug_in(cb, nu, d, te) -> np.ndarray:
    """The plug-in CATE ``mu(x, 1) - mu(x, 0)`` averaged over the instruments, as a zero-width
    interval: what ignoring the unobserved confounder gives (the validity claim's control)."""
    import torch

    X, Z, A, _ = cb._tensors(d, te)
    with torch.no_grad():
        mu, _ = cb.level_nuisances(cb.pair_nuisances(nu, X, Z), torch.ones(len(te), 1), A)
    est = (mu[:, 0, 1] - mu[:, 0, 0]).numpy()
    return np.stack([est, est], 1)


def _tune_lr(config: Mapping[str, Any], tune_seeds: list[int]) -> dict:
    """The representation's learning rate per dataset on the tuning seeds (mean test width)."""
    def evaluate(items):
        lrs = {}
        for ds, setting in items:
            lrs.setdefault(ds, []).append(float(setting["rep_lr"]))
        jobs = [(ds, i, s, lrs[ds], True) for ds in lrs for i, s in enumerate(tune_seeds)]
        out = runtime.pmap(task, jobs, shared=dict(config), chunk_size=1, desc="cate-bounds tuning")
        rows = [r for part in out for r in part if r["metric"] == "width"]
        return [float(np.mean([r["value"] for r in rows if r["dataset"] == ds and r["method"] == f"ours@{s['rep_lr']:g}"]))
                for ds, s in items]

    grids = {ds: {"rep_lr": list(config["rep_lr_grid"])} for ds in config["datasets"]}
    return evidence.tune(evaluate, grids, paper={"rep_lr": PAPER_REP_LR}, extend=1, limits={"rep_lr": REP_LR_LIMITS},
                         tie=TIE, tie_break=_toward_paper)


def _toward_paper(setting: Mapping[str, Any]) -> float:
    """The tie-break key of the tuning: distance from the authors' learning rate in log scale."""
    return abs(math.log(float(setting["rep_lr"]) / PAPER_REP_LR))


def valid_pairs(rows: list[dict], dataset: str, comparison: str, *, level: float = VALID_COVERAGE) -> tuple[list[dict], dict]:
    """The width rows of ``dataset`` at the (K, seed) runs where the learned partition (``ours``) and
    ``comparison`` both cover the true CATE on at least ``level`` of test points, every method's row
    of those runs kept (so controls are paired on the same runs); and the counts: ``runs``, ``kept``,
    ``dropped``, and the runs where ``ours`` / ``comparison`` miss (a run may count in both)."""
    cov = {(r["method"], r["K"], r["seed"]): r["value"] for r in rows
           if r["dataset"] == dataset and r["metric"] == "coverage"}
    runs = sorted({(K, s) for (m, K, s) in cov if m == "ours"})
    miss = {m: {run for run in runs if not cov.get((m, *run), math.nan) >= level} for m in ("ours", comparison)}
    keep = [run for run in runs if run not in miss["ours"] | miss[comparison]]
    kept = set(keep)
    out = [r for r in rows if r["dataset"] == dataset and r["metric"] == "width" and (r["K"], r["seed"]) in kept]
    return out, {"runs": len(runs), "kept": len(keep), "dropped": len(runs) - len(keep),
                 "ours_below": len(miss["ours"]), "comparison_below": len(miss[comparison])}


def median_gaps(width_rows: list[dict], comparison: str,
                methods=("ours", "plugin", "kmeans_agg", "random", "oracle"), on=("K", "seed")) -> dict:
    """Per method, the median over the runs (keyed by ``on``: (K, seed), or the seed alone for the
    seed summaries) of its width minus ``comparison``'s at the same run (NaN without a pair): the
    tightness claims' direction (session 9), the sign test's own statistic, so one outlying pair
    cannot reverse the verdict the test gives."""
    def key(r):
        return tuple(r[k] for k in on)

    ref = {key(r): r["value"] for r in width_rows if r["method"] == comparison}
    out = {}
    for m in methods:
        gaps = [r["value"] - ref[key(r)] for r in width_rows if r["method"] == m and key(r) in ref]
        out[m] = float(np.median(gaps)) if gaps else math.nan
    return out


def seed_means(width_rows: list[dict]) -> list[dict]:
    """The seed as the unit (session 10): per (dataset, seed, method), the mean width over the seed's
    K in ``width_rows`` (the valid pairs: every method of a kept (K, seed) run is kept, so the methods
    of a seed are averaged over the same K), with ``Ks``, how many K entered. The K of one seed share
    its data, first stage and split, so they are one draw, not several."""
    groups: dict = {}
    for r in width_rows:
        groups.setdefault((r["dataset"], r["seed"], r["method"]), []).append(r["value"])
    return [{"method": m, "dataset": ds, "seed": sd, "metric": "width", "value": float(np.mean(v)), "Ks": len(v)}
            for (ds, sd, m), v in sorted(groups.items(), key=lambda kv: repr(kv[0]))]


def per_k(width_rows: list[dict], comparison: str) -> list[dict]:
    """Each K's verdict against ``comparison`` over the seeds (session 10, review R4): wins, losses,
    ties within ``TIE``, pairs, the median gap (ours minus the comparison), the one-sided sign test's
    p and its Holm-adjusted p across the K (``evidence.holm``), and whether that K holds after the
    correction (median gap below 0 and adjusted p <= 0.05). A description beside the claim over K."""
    from rayml.results import ALPHA

    table = evidence.per_case(width_rows, a={"method": "ours"}, b={"method": comparison}, by=("K",),
                              pair_on=("seed",), tie=TIE, test="paired sign test over seeds")
    for row in table:
        rows_k = [r for r in width_rows if r["K"] == row["K"]]
        row["median_gap"] = median_gaps(rows_k, comparison, methods=("ours",), on=("seed",))["ours"]
    adj = evidence.holm([row["p_value"] for row in table])
    for row, p in zip(table, adj):
        row["p_holm"] = p
        row["holds_holm"] = bool(row["median_gap"] < 0 and p <= ALPHA)
    return table


def level_metrics(rows: list[dict]) -> dict:
    """From the learned partitions' ``effective_levels`` rows (levels holding >= 5% of the test
    instruments): the share of runs with at least 2 (the levels sanity claim), the fewest, and the
    collapsed runs (one effective level: the naive bounds), which count in the tightness claims as
    they are (session 9)."""
    eff = [r for r in rows if r["method"] == "ours" and r["metric"] == "effective_levels"]
    return {"share_multi_level": float(np.mean([r["value"] >= 2 for r in eff])) if eff else math.nan,
            "min_levels": float(min(r["value"] for r in eff)) if eff else math.nan,
            "collapsed_runs": [{"dataset": r["dataset"], "K": r["K"], "seed": r["seed"]} for r in eff
                               if r["value"] < 2]}


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune the representation's lr (when asked), then every (dataset, seed) as a pmap task."""
    _validate(config)
    test_seeds, tune_seeds = evidence.split_seeds(seed, int(config["seeds"]), int(config["tuning_seeds"]))
    if tune_seeds:
        choices = _tune_lr(config, tune_seeds)
        lr_of = {ds: float(choices[ds].setting["rep_lr"]) for ds in config["datasets"]}
        tuning = {"rep_lr": {ds: c.summary() for ds, c in choices.items()}, "seeds": len(tune_seeds)}
        tuning_table = evidence.tuning_rows(choices, keys=("dataset",), metric="mean_test_width")
    else:
        lr_of = {ds: float(config["rep_lr"]) for ds in config["datasets"]}
        tuning, tuning_table = f"none at this size: the authors' rep_lr {config['rep_lr']:g} for every dataset", []
    items = [(ds, i, s, [lr_of[ds]], False) for ds in config["datasets"] for i, s in enumerate(test_seeds)]
    out = runtime.pmap(task, items, shared=dict(config), chunk_size=1, desc="cate-bounds runs")
    rows = [r for part in out for r in part]
    threads = sorted({int(r["value"]) for r in rows if r["metric"] == "torch_threads"})
    rows = [r for r in rows if r["metric"] != "torch_threads"]

    def agg(method, metric, fn=np.mean, **flt):
        vals = [r["value"] for r in rows if r["method"] == method and r["metric"] == metric
                and all(r[k] == v for k, v in flt.items())]
        return float(fn(vals))

    def block(method):
        by = {f"{ds}_K{K}": {"width": agg(method, "width", dataset=ds, K=K),
                             "coverage": agg(method, "coverage", dataset=ds, K=K)}
              for ds in config["datasets"] for K in config["Ks"]}
        per_ds = {ds: {"width": agg(method, "width", dataset=ds), "coverage": agg(method, "coverage", dataset=ds),
                       "min_coverage": agg(method, "coverage", fn=np.min, dataset=ds),
                       "runs_below_95": int(agg(method, "coverage", fn=lambda v: np.sum(np.array(v) < 0.95),
                                                dataset=ds))}
                  for ds in config["datasets"]}
        return {"width": agg(method, "width"), "coverage": agg(method, "coverage"),
                "min_coverage": agg(method, "coverage", fn=np.min), "by_case": by, "by_dataset": per_ds}

    metrics = block("ours")
    levels = [r["value"] for r in rows if r["method"] == "ours" and r["metric"] == "levels"]
    metrics.update(level_metrics(rows))
    metrics["min_argmax_levels"] = float(min(levels))
    naive = [r for r in rows if r["method"] == "naive"]
    ranges = {(r["dataset"], r["seed"]): r["value"] for r in rows if r["metric"] == "range"}
    metrics["naive_width_minus_range"] = float(max(abs(r["value"] - ranges[(r["dataset"], r["seed"])])
                                                   for r in naive if r["metric"] == "width"))
    metrics["rep_lr"] = lr_of
    # the sign test's power against each instrument's comparison, from this run's paired widths
    metrics["power_vs_comparison"] = {}
    # the tightness claims' rows: the runs where ours and the comparison both cover (session 8)
    paired_rows, seed_rows, per_k_rows, metrics["valid_pairs"], metrics["per_K"] = [], [], [], {}, {}
    metrics["seed_level"] = {}
    for ds in config["datasets"]:
        kept, counts = valid_pairs(rows, ds, COMPARISON[ds])
        paired_rows += kept
        seeds_ds = seed_means(kept)
        seed_rows += seeds_ds
        ks = per_k(kept, COMPARISON[ds])
        per_k_rows += [{"dataset": ds, **r} for r in ks]
        metrics["per_K"][ds] = {f"K{r['K']}": {k: v for k, v in r.items() if k != "K"} for r in ks}
        metrics["seed_level"][ds] = {
            "seeds": len({r["seed"] for r in seeds_ds}),
            "width": {m: float(np.mean([r["value"] for r in seeds_ds if r["method"] == m]))
                      if any(r["method"] == m for r in seeds_ds) else math.nan
                      for m in ("ours", "plugin", "kmeans_agg", "random", "oracle")},
            "median_gap": median_gaps(seeds_ds, COMPARISON[ds], on=("seed",))}
        counts["comparison"] = COMPARISON[ds]
        counts["width"] = {}
        for m in ("ours", "plugin", "kmeans_agg", "random", "oracle"):
            vals = [r["value"] for r in kept if r["method"] == m]
            counts["width"][m] = float(np.mean(vals)) if vals else math.nan  # no pair left: unmeasured
        counts["median_gap"] = median_gaps(kept, COMPARISON[ds])
        metrics["valid_pairs"][ds] = counts
    for ds in config["datasets"]:  # the seeds the claim's sign test over seeds needs (session 10: the seed is the unit)
        ref = {r["seed"]: r["value"] for r in seed_rows if r["dataset"] == ds and r["method"] == COMPARISON[ds]}
        diffs = np.array([ref[r["seed"]] - r["value"] for r in seed_rows
                          if r["dataset"] == ds and r["method"] == "ours" and r["seed"] in ref])
        metrics["power_vs_comparison"][ds] = ({"unit": "seeds", **evidence.power_from_pilot(diffs, test="sign", tie=TIE)}
                                              if diffs.size >= 2 else None)
    baselines = {m: block(m) for m in METHODS if m != "ours"}
    for ds in config["datasets"]:  # how far ignoring the confounder moves the point estimate
        baselines["point"]["by_dataset"][ds]["bias"] = agg("point", "bias", dataset=ds)
    budget = {"n": int(config["n"]), "split": "40/20/40", "nuisance_epochs": int(config["nuisance_epochs"]),
              "rep_epochs": int(config["rep_epochs"]), "rep_patience": int(config["rep_patience"]),
              "min_level_share": MIN_LEVEL_SHARE, "tuning": tuning, "torch_threads_per_task": threads,
              "same_aggregation": "kmeans_agg, oracle and random partitions use ours' nuisances and aggregation; "
                                  "kmeans is the authors' baseline (its own nuisances on the level)"}
    tables = {"runs": [r for r in rows if r["metric"] != "range"], "valid_pairs": paired_rows,
              "seed_pairs": seed_rows, "per_K": per_k_rows}
    if tuning_table:
        tables["tuning"] = tuning_table
    return Outcome(metrics=metrics, baselines=baselines, tables=tables, budget=budget)


SRC_TIGHT = "abstract: 'a two-step procedure that learns tight bounds using a tailored neural partitioning of the latent instrument space'"

# rayml.causal.cate_bounds.DATASETS (not imported here: that module imports torch); a test keeps them equal
TIGHT_DATASETS = ("mixture", "binary")
# the tightness claim's comparison per instrument: the stronger fixed partition through the same aggregation,
# from the full record (session 6): on the mixture the plug-in P(A | Z) bins (0.773 against k-means' 1.013 over
# 30 pairs, 24 / 6), on the binary instrument k-means (the plug-in 1.908 against 1.893, 1 / 8 over 9 pairs)
COMPARISON = {"mixture": "plugin", "binary": "kmeans_agg"}
_FIXED = {"plugin": "the plug-in partition (K bins of the first stage's estimate of P(A = 1 | Z))",
          "kmeans_agg": "a k-means partition of the instrument"}


def _valid(dataset: str) -> Claim:
    """Validity on one dataset, the gate of its tightness claim (see ``_tighter``): the mean coverage, a
    systematic failure; a run's own misses drop it from the tightness claim's pairs (``valid_pairs``)."""
    return Claim(text=f"validity, the precondition of tightness (the paper's theorem for any partition of a valid "
                      f"instrument): the learned partition's bounds cover the true CATE on at least 95% of test "
                      f"points on average over the runs (K x seed) on the {dataset} instrument (a run below 95% "
                      f"leaves the tightness claim's pairs)",
                 metric=f"metrics.by_dataset.{dataset}.coverage", compare=VALID_COVERAGE, op=">=", kind="sanity")


def _tighter(dataset: str) -> Claim:
    """The tightness claim on one dataset, against the stronger fixed partition of that instrument.

    Session 5: pooled over both instruments the 1-D mixture carried it, so it is made per instrument.
    Session 6: the plug-in partition (sorting instruments by the first stage's estimated strength,
    nothing learned) beat k-means 24 / 6 on the mixture, so there it is the comparison, and k-means
    a control; on the binary instrument k-means is the stronger one and the plug-in a control.
    Session 8: paired only over the runs where both sides' bounds are valid (``valid_pairs``).
    Session 9: the direction is the median paired gap (ours minus the comparison) below 0, the sign
    test's own statistic, instead of the mean widths (one collapsed pair reversed the mean against an
    18 / 8 sign test); a collapsed run (one level holding >= 5% of instruments: the naive bounds)
    counts as it is, a loss, and is listed in ``metrics.collapsed_runs``.
    Session 10 (review R4): the seed is the unit. The three K of a seed share its data, first stage
    and split, so the claim pairs each seed's mean width over its valid K with the comparison's over
    the same K (``seed_pairs``) and tests over seeds; the abstract's sentence is about the method's
    bounds, not about every K, so the claim is over K, and the per-K verdicts with Holm's correction
    are reported beside it (``metrics.per_K``)."""
    ref = COMPARISON[dataset]
    other = next(m for m in _FIXED if m != ref)
    v = f"metrics.seed_level.{dataset}.median_gap"
    return Claim(text=f"the learned partition gives narrower bounds than {_FIXED[ref]} through the same aggregation "
                      f"on the {dataset} instrument, over the K of the run (the seed is the unit: each seed's mean "
                      f"width over its K x seed runs where both cover the true CATE on at least 95% of test points, "
                      f"paired over seeds; the median seed gap below 0 and the sign test over seeds; a collapsed "
                      f"learned partition counts as it is; per-K verdicts with Holm's correction beside it)",
                 metric=f"{v}.ours", compare=0.0,
                 op="<", test="paired sign test over seeds", table="seed_pairs",
                 a={"method": "ours", "metric": "width", "dataset": dataset},
                 b={"method": ref, "metric": "width", "dataset": dataset}, pair_on=("seed",), tie=TIE,
                 source=SRC_TIGHT,
                 # a random partition must not pass (the max / min over noisy level pairs alone must not win),
                 # nor the other fixed partition (else the comparison is not the stronger baseline)
                 controls=(Control("random", f"{v}.random",
                                   a={"method": "random", "metric": "width", "dataset": dataset}),
                           Control(other, f"{v}.{other}",
                                   a={"method": other, "metric": "width", "dataset": dataset})))


SIGNAL = Claim(
    text="the effect is reachable here: the oracle partition (K bins of the instrument's true strength) gives "
         "narrower bounds than the k-means partition through the same aggregation (paired over dataset x K x seed)",
    metric="baselines.oracle.width", compare="baselines.kmeans_agg.width", op="<", kind="sanity",
    test="paired sign test over seeds", table="runs", a={"method": "oracle", "metric": "width"},
    b={"method": "kmeans_agg", "metric": "width"}, pair_on=("dataset", "K", "seed"), tie=TIE)

CLAIMS = (
    Claim(text="the naive (one-level) bounds are as wide as the outcome's range (to float32 precision)",
          metric="metrics.naive_width_minus_range", compare=1e-5, op="<=", kind="sanity"),  # float32 nets
    # session 9: counted with the 5% cut the bounds apply (a 34 / 766 split of 800 passed as two levels)
    Claim(text="every learned partition uses at least 2 levels holding at least 5% of the test instruments each "
               "(the levels that enter the bounds; one such level gives the naive bounds)",
          metric="metrics.share_multi_level", compare=1.0, op=">=", kind="sanity"),
    Claim(text="the learned partition gives narrower bounds than the naive bounds without an instrument (paired over "
               "dataset x K x seed)", metric="metrics.width", compare="baselines.naive.width", op="<", kind="sanity",
          test="paired sign test over seeds", table="runs", a={"method": "ours", "metric": "width"},
          b={"method": "naive", "metric": "width"}, pair_on=("dataset", "K", "seed"), tie=TIE),
    # each instrument's tightness claim behind two gates: the effect is reachable (oracle beats k-means) and
    # the learned bounds it compares are valid on that instrument
    SIGNAL,
    *(c for ds in TIGHT_DATASETS for c in evidence.gate(_valid(ds), *evidence.gate(SIGNAL, _tighter(ds))[1:])),
)


def plots(record: Mapping) -> dict:
    """Bound width and coverage against K, per dataset (mean and range over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["runs"]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(2, len(datasets), figsize=(4.5 * len(datasets), 6.4), squeeze=False)
    for j, ds in enumerate(datasets):
        for i, metric in enumerate(("width", "coverage")):
            ax = axes[i][j]
            for method in METHODS:
                Ks = sorted({r["K"] for r in rows if r["dataset"] == ds})
                vals = [[r["value"] for r in rows if r["dataset"] == ds and r["method"] == method and r["K"] == K
                         and r["metric"] == metric] for K in Ks]
                line, = ax.plot(Ks, [np.mean(v) for v in vals], marker="o", label=method)
                ax.fill_between(Ks, [min(v) for v in vals], [max(v) for v in vals], alpha=0.15, color=line.get_color())
            ax.set_title(f"{ds}: {metric}")
            ax.set_xlabel("K (partition levels)")
    axes[0][0].set_ylabel("mean bound width (test)")
    axes[1][0].set_ylabel("coverage of the true CATE")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    return {"cate_bounds": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="every (dataset, seed) is a pmap task: first-stage nuisances, then the representation and the partitions "
        "through the same aggregation for every K, the authors' k-means baseline and the naive bounds; the tuning "
        "seeds' runs are pmap tasks too",
    checked_against="the authors' code (JSchweisthal/ComplexPartialIdentif: src/models.py, src/utils.py, "
                    "src/data/data1.py and data3.py, src/run_main.py) and the abstract; bounds on a discrete "
                    "instrument against a hand computation",
    sizes=SIZES, run=run, check=_validate, claims=CLAIMS, plots=plots,
)
