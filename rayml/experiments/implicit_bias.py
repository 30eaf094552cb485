"""Implicit bias of GD on non-homogeneous networks: margin, norm, direction and KKT residual tracked.

Data: ``n`` points in ``d`` dimensions, labelled by a random hyperplane and pushed ``gap`` away from
it (separable), a fresh draw per seed. Networks (``rayml.theory.implicit_bias``): a two-layer SiLU
net and a SiLU residual block (near-homogeneous, the paper's conditions), a two-layer ReLU net (the
homogeneous reference), and a two-layer tanh net (bounded activation: not near-homogeneous for its
order ``M = 2``, the control outside the paper's conditions). Each (network, seed) run is one Ray
task: GD on the exponential loss with loss-scaled steps, the tracker recording at log-spaced
checkpoints.

Measured after the risk first falls below ``1/n`` (``threshold``): the smoothed normalised margin's
gain and its largest drop below its running maximum relative to that gain (0: monotone), the
norm's growth, the direction's change between the middle and the last checkpoint
(``1 - cos``), and the KKT residual of the homogenised max-margin problem at the threshold and at
the end.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Implicit Bias of Gradient Descent for Non-Homogeneous Deep Networks, ICML 2025"
METHOD = "implicit-bias"
NEAR_HOMOGENEOUS = ("silu", "residual-silu")
REFERENCE, CONTROL = "relu", "tanh"

SIZES = {
    "tiny": dict(networks=["silu", "residual-silu", "relu", "tanh"], seeds=2, n=20, d=4, width=8, gap=0.3,
                 steps=400, lr=0.1, checkpoints=16, kkt_every=3, init_scale=0.3, max_step_norm=0.01),
    "quick": dict(networks=["silu", "residual-silu", "relu", "tanh"], seeds=4, n=40, d=5, width=16, gap=0.3,
                  steps=3000, lr=0.05, checkpoints=30, kkt_every=4, init_scale=0.3, max_step_norm=0.002),
    "full": dict(networks=["silu", "residual-silu", "relu", "tanh"], seeds=32, n=100, d=10, width=64, gap=0.3,
                 steps=20000, lr=0.05, checkpoints=60, kkt_every=6, init_scale=0.3, max_step_norm=0.002),
}


def _validate(config: Mapping[str, Any]) -> None:
    from rayml.theory.implicit_bias import NETWORKS

    nets = config["networks"]
    if not isinstance(nets, list) or any(n not in NETWORKS for n in nets) or len(set(nets)) != len(nets):
        raise ValueError(f"networks must list distinct names of {NETWORKS}, got {nets!r}")
    for need in (*NEAR_HOMOGENEOUS, CONTROL):
        if need not in nets:
            raise ValueError(f"networks must include {need!r} (the claims compare it)")
    for key in ("seeds", "n", "d", "width", "steps", "checkpoints", "kkt_every"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    for key in ("gap", "lr", "init_scale", "max_step_norm"):
        v = config[key]
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{key} must be a positive number, got {v!r}")


def _data(n: int, d: int, gap: float, seed: int):
    import torch

    g = torch.Generator().manual_seed(int(seed) % (2**63))
    X = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, generator=g, dtype=torch.float64)
    y = torch.sign(X @ w)
    y[y == 0] = 1.0
    return X + gap * y[:, None] * w / w.norm(), y


def run_task(item: tuple, config: Mapping[str, Any]) -> dict:
    """One GD run ``(network, seed index, seed)`` with the tracker; returns its checkpoint rows."""
    import torch

    from rayml.theory import implicit_bias as ib

    name, index, seed = item
    torch.manual_seed(0)
    X, y = _data(int(config["n"]), int(config["d"]), float(config["gap"]), seed)
    net = ib.make_network(name, int(config["d"]), int(config["width"]), seed=seed % (2**31),
                          scale=float(config["init_scale"]))
    cfg = ib.TrackerConfig(steps=int(config["steps"]), lr=float(config["lr"]), checkpoints=int(config["checkpoints"]),
                           kkt_every=int(config["kkt_every"]), max_step_norm=float(config["max_step_norm"]))
    rows = ib.track_gd(net, X, y, cfg)
    return {"network": name, "seed": index, "order": net.order, "rows": rows}


def summarize(rows: list[dict], n: int) -> dict:
    """Per-run numbers after the risk first falls below ``1/n``."""
    from rayml.theory.implicit_bias import near_monotonicity

    below = [i for i, r in enumerate(rows) if r["log_risk"] < -math.log(n)]
    if not below:
        return {"reached_threshold": 0.0, "rel_drop": 1.0, "margin_gain": math.nan, "norm_growth": math.nan,
                "direction_gap": math.nan, "direction_ratio": math.nan, "kkt_threshold": math.nan, "kkt_final": math.nan,
                "plain_rel_drop": 1.0, "homogenized_gap": math.nan}
    t0 = below[0]
    mono = near_monotonicity([r["smoothed_margin"] for r in rows], t0)
    plain = near_monotonicity([r["margin"] for r in rows], t0)
    # the first checkpoint after the threshold where the homogenised net separates the data (else the
    # homogenised problem has no feasible rescaling and no residual)
    kkt_rows = [r for r in rows[t0:] if np.isfinite(r.get("kkt_residual", math.nan))]
    last = rows[-1]
    mid = rows[t0 + (len(rows) - 1 - t0) // 2]
    first_half = 1.0 - float(np.clip(rows[t0]["direction_dot_mid"], -1, 1))
    second_half = 1.0 - float(np.clip(mid["cos_final"], -1, 1))
    return {
        "reached_threshold": 1.0, "threshold_step": rows[t0]["step"],
        "rel_drop": mono["rel_drop"], "margin_gain": mono["gain"], "plain_rel_drop": plain["rel_drop"],
        "norm_growth": last["norm"] / rows[t0]["norm"],
        "direction_gap": second_half,
        "direction_ratio": second_half / first_half if first_half > 0 else math.nan,
        "kkt_threshold": kkt_rows[0]["kkt_residual"] if kkt_rows else math.nan,
        "kkt_final": last.get("kkt_residual", math.nan),
        "final_margin": last["margin"], "final_homogenized_margin": last["homogenized_margin"],
        "homogenized_gap": abs(last["margin"] - last["homogenized_margin"]),
    }


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Every (network, seed) GD run as a pmap task; per-network summaries and the checkpoint table."""
    _validate(config)
    nets = list(config["networks"])
    seeds = runtime.seeds(seed, int(config["seeds"]))
    items = [(name, i, s) for name in nets for i, s in enumerate(seeds)]
    out = runtime.pmap(run_task, items, shared=dict(config), chunk_size=1, desc="implicit-bias runs")
    n = int(config["n"])
    run_rows, curve_rows, per = [], [], {}
    for o in out:
        rows = o["rows"]
        s = summarize(_with_cos_final(rows, n), n)
        per.setdefault(o["network"], []).append(s)
        group = ("near-homogeneous" if o["network"] in NEAR_HOMOGENEOUS
                 else "control" if o["network"] == CONTROL else "reference")
        for k, v in s.items():
            if np.isfinite(v):  # a run that never reached the threshold has no per-run numbers to pair
                run_rows.append({"network": o["network"], "group": group, "seed": o["seed"], "metric": k,
                                 "value": float(v)})
        for r in rows:
            for k in ("log_risk", "norm", "margin", "smoothed_margin", "homogenized_margin", "cos_prev",
                      "kkt_residual"):
                if k in r and r[k] is not None and not (isinstance(r[k], float) and math.isnan(r[k])):
                    curve_rows.append({"network": o["network"], "seed": o["seed"], "step": r["step"], "metric": k,
                                       "value": float(r[k])})

    def block(name):
        ss = per[name]
        finite = lambda xs: [x for x in xs if np.isfinite(x)]  # noqa: E731
        return {
            "runs": len(ss), "reached_threshold": float(np.mean([x["reached_threshold"] for x in ss])),
            "worst_rel_drop": float(max(x["rel_drop"] for x in ss)),
            "median_rel_drop": float(np.median([x["rel_drop"] for x in ss])),
            "worst_plain_rel_drop": float(max(x["plain_rel_drop"] for x in ss)),
            "min_norm_growth": float(min(x["norm_growth"] for x in ss)),
            "worst_direction_gap": float(max(x["direction_gap"] for x in ss)),
            "worst_direction_ratio": float(max(x["direction_ratio"] for x in ss)),
            "kkt_threshold": float(np.mean(finite([x["kkt_threshold"] for x in ss]) or [math.nan])),
            "kkt_final": float(np.mean(finite([x["kkt_final"] for x in ss]) or [math.nan])),
            "worst_homogenized_gap": float(max(x["homogenized_gap"] for x in ss)),
        }

    blocks = {name: block(name) for name in nets}
    near = [x for name in NEAR_HOMOGENEOUS for x in per[name]]
    metrics = {
        "near_homogeneous": {name: blocks[name] for name in NEAR_HOMOGENEOUS},
        "worst_rel_drop": float(max(x["rel_drop"] for x in near)),
        "worst_direction_gap": float(max(x["direction_gap"] for x in near)),
        "worst_direction_ratio": float(max(x["direction_ratio"] for x in near)),
        "min_norm_growth": float(min(x["norm_growth"] for x in near)),
        # runs without a KKT checkpoint after the threshold (tiny sizes) have no residual to average
        "kkt_threshold": float(np.nanmean([x["kkt_threshold"] for x in near])),
        "kkt_final": float(np.nanmean([x["kkt_final"] for x in near])),
        "reached_threshold": float(np.mean([x["reached_threshold"] for x in near])),
    }
    if REFERENCE in blocks:
        metrics["relu_margin_equals_homogenized"] = blocks[REFERENCE]["worst_homogenized_gap"]
    baselines = {name.replace("-", "_"): blocks[name] for name in nets if name not in NEAR_HOMOGENEOUS}
    budget = {"gd_steps": int(config["steps"]), "runs_per_network": int(config["seeds"]),
              "lr": float(config["lr"]), "schedule": "loss-scaled eta/L, step capped at max_step_norm*||theta||",
              "tuning": "none: one step size for every network"}
    return Outcome(metrics=metrics, baselines=baselines, tables={"runs": run_rows, "curves": curve_rows},
                   budget=budget)


def _with_cos_final(rows: list[dict], n: int) -> list[dict]:
    """Rows with ``cos_final`` (cosine of each checkpoint's direction with the last one's) and
    ``direction_dot_mid`` (with the checkpoint half-way from the risk threshold to the end)."""
    below = [i for i, r in enumerate(rows) if r["log_risk"] < -math.log(n)]
    t0 = below[0] if below else 0
    last = np.asarray(rows[-1]["direction"])
    mid = np.asarray(rows[t0 + (len(rows) - 1 - t0) // 2]["direction"])
    return [{**r, "cos_final": float(np.asarray(r["direction"]) @ last),
             "direction_dot_mid": float(np.asarray(r["direction"]) @ mid)} for r in rows]


SOURCE_MONO = "abstract: 'a normalized margin induced by the GD iterates increases nearly monotonically'"
SOURCE_DIR = "abstract: 'while the norm of the GD iterates diverges to infinity, the iterates themselves converge in direction'"
SOURCE_KKT = "abstract: 'this directional limit satisfies the Karush-Kuhn-Tucker (KKT) conditions of a margin maximization problem'"

CLAIMS = (
    Claim(text="after the risk falls below 1/n, the smoothed normalised margin of the near-homogeneous nets (SiLU, "
               "SiLU residual) rises with no drop larger than 5% of its range (worst run)",
          metric="metrics.worst_rel_drop", compare=0.05, op="<=", source=SOURCE_MONO,
          controls=(Control("tanh", "baselines.tanh.worst_rel_drop"),)),
    Claim(text="the direction converges: its change over the second half of the log-spaced checkpoints after the "
               "threshold (1 - cos(u_mid, u_end)) is at most half its change over the first half "
               "(1 - cos(u_threshold, u_mid)) (worst near-homogeneous run)",
          metric="metrics.worst_direction_ratio", compare=0.5, op="<=", source=SOURCE_DIR,
          controls=(Control("tanh", "baselines.tanh.worst_direction_ratio"),)),
    # a sanity check, not a paper claim: norm growth after separation is generic (tanh grows too)
    Claim(text="the norm diverges: it grows at least 10x after the threshold (worst near-homogeneous run)",
          metric="metrics.min_norm_growth", compare=10.0, op=">=", kind="sanity"),
    Claim(text="the KKT residual of the homogenised max-margin problem falls between the threshold and the end "
               "(paired over near-homogeneous runs)",
          metric="metrics.kkt_threshold", compare="metrics.kkt_final", op=">", test="paired sign test over seeds",
          table="runs", value="value", a={"group": "near-homogeneous", "metric": "kkt_threshold"},
          b={"group": "near-homogeneous", "metric": "kkt_final"},
          pair_on=("network", "seed"), source=SOURCE_KKT),
    Claim(text="every near-homogeneous run reaches the risk threshold 1/n", metric="metrics.reached_threshold",
          compare=1.0, op=">=", kind="sanity"),
    Claim(text="for the homogeneous ReLU net the normalised margin equals the homogenised one",
          metric="metrics.relu_margin_equals_homogenized", compare=1e-12, op="<=", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """Smoothed margin, norm, direction change and KKT residual against GD steps, per network."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["curves"]
    nets = list(dict.fromkeys(r["network"] for r in rows))
    panels = (("smoothed_margin", "smoothed normalised margin", "linear"), ("norm", "||theta||", "log"),
              ("cos_prev", "1 - cos(successive directions)", "log"), ("kkt_residual", "KKT residual", "log"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (metric, label, yscale) in zip(axes, panels):
        for name in nets:
            steps = sorted({r["step"] for r in rows if r["network"] == name and r["metric"] == metric})
            vals = []
            for s in steps:
                v = [r["value"] for r in rows if r["network"] == name and r["metric"] == metric and r["step"] == s]
                vals.append([1 - x for x in v] if metric == "cos_prev" else v)
            if not steps:
                continue
            x = np.array(steps, dtype=float) + 1
            med = np.array([np.median(v) for v in vals])
            lo = np.array([np.quantile(v, 0.1) for v in vals])
            hi = np.array([np.quantile(v, 0.9) for v in vals])
            style = dict(ls="--") if name == CONTROL else {}
            line, = ax.plot(x, med, label=name + (" (control)" if name == CONTROL else ""), **style)
            ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
        ax.set_xscale("log")
        ax.set_yscale(yscale)
        ax.set_xlabel("GD step + 1")
        ax.set_title(label)
    axes[0].set_ylim(bottom=max(-0.1, axes[0].get_ylim()[0]))
    axes[-1].legend(fontsize=7)
    fig.suptitle("GD on the exponential loss: medians and 10-90% bands over seeds", fontsize=9)
    fig.tight_layout()
    return {"implicit_bias": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="every (network, seed) GD run with its tracker is one pmap task",
    checked_against="abstract and secondary summaries of arXiv 2502.16075 (the full text was not reachable); "
                    "the homogeneous case against the classical normalised margin and Lyu & Li's smoothed margin",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
