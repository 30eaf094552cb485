"""Mid-angle replay reproduction: forgetting against the task angle, and buffers chosen by angle.

Part 1 (the theory's setting, the authors' synthetic script): task 1 with signal ``e_1``, task 2
with the signal rotated by each angle, the two-layer ``ReLU^3`` patch CNN trained by full-batch GD;
task-1 test error after task 2 without replay and with 10% replay. Part 2 (split ``load_digits``,
tasks 0/1, 2/3, 4/5, 6/7, 8/9, a small CNN): no replay, and replay from per-class buffers chosen by
mid / small / large angle, random and reservoir; average final accuracy and average forgetting.
Every (angle, seed) and (rule, seed) run is a Ray task; every rule gets the same buffer size,
epochs and learning rate (no tuning: the authors' settings scaled down).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.data import midangle_replay as mr
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Understanding the Forgetting of (Replay-based) Continual Learning via Feature Learning: Angle Matters, ICML 2025"
METHOD = "midangle-replay"

SIZES = {
    "tiny": dict(angles=[0, 180], synthetic_seeds=1, epochs=100, n_train=60, n_test=200, digits_seeds=2,
                 digits_epochs=1, per_class=5, benign_error=0.1, acute_max=90, obtuse_min=150),
    "quick": dict(angles=[0, 30, 60, 90, 105, 120, 135, 150, 165, 180], synthetic_seeds=2, epochs=400, n_train=100,
                  n_test=500, digits_seeds=6, digits_epochs=3, per_class=10, benign_error=0.1, acute_max=90,
                  obtuse_min=150),
    "full": dict(angles=list(range(0, 181, 10)), synthetic_seeds=10, epochs=3000, n_train=100, n_test=1000,
                 digits_seeds=50, digits_epochs=5, per_class=10, benign_error=0.1, acute_max=90, obtuse_min=150),
}


def _validate(config: Mapping[str, Any]) -> None:
    angles = config["angles"]
    if not isinstance(angles, list) or len(angles) < 2 or any(not isinstance(a, (int, float)) or not 0 <= a <= 180
                                                              for a in angles):
        raise ValueError(f"angles must be a list of at least 2 angles in [0, 180], got {angles!r}")
    if not any(a <= config["acute_max"] for a in angles) or not any(a >= config["obtuse_min"] for a in angles):
        raise ValueError("angles must include one <= acute_max and one >= obtuse_min")
    for key in ("synthetic_seeds", "epochs", "n_train", "n_test", "digits_seeds", "digits_epochs", "per_class"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    if not 0 < config["benign_error"] < 1:
        raise ValueError(f"benign_error must be in (0, 1), got {config['benign_error']!r}")


def task(item: tuple, config: Mapping[str, Any]) -> dict:
    """``("synthetic", angle, seed index, seed)`` or ``("digits", rule, seed index, seed)``."""
    kind, what, index, seed = item
    if kind == "synthetic":
        out = mr.forgetting_after(float(what), seed % (2**32), n_train=int(config["n_train"]),
                                  n_test=int(config["n_test"]), epochs=int(config["epochs"]))
        return {"kind": kind, "seed": index, **out}
    rule = None if what == "none" else what
    out = mr.run_sequence(rule, seed % (2**31), per_class=int(config["per_class"]), epochs=int(config["digits_epochs"]))
    return {"kind": kind, "rule": what, "seed": index, **out}


def _benign_range(angles, errors, level):
    """The largest angle up to which every error is at most ``level`` (from 0 degrees upwards)."""
    best = None
    for a, e in sorted(zip(angles, errors)):
        if e > level:
            break
        best = a
    return float(best if best is not None else -1.0)


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The angle sweep and the split-digits sequences as pmap tasks."""
    _validate(config)
    syn_seeds = runtime.seeds(seed, int(config["synthetic_seeds"]))
    dig_seeds = runtime.seeds(seed + 7919, int(config["digits_seeds"]))
    items = [("synthetic", a, i, s) for a in config["angles"] for i, s in enumerate(syn_seeds)]
    items += [("digits", r, i, s) for r in ("none",) + mr.RULES for i, s in enumerate(dig_seeds)]
    out = runtime.pmap(task, items, shared=dict(config), chunk_size=1, desc="midangle-replay runs")
    syn = [o for o in out if o["kind"] == "synthetic"]
    dig = [o for o in out if o["kind"] == "digits"]
    angles = sorted({o["angle"] for o in syn})
    mean = {k: [float(np.mean([o[k] for o in syn if o["angle"] == a])) for a in angles]
            for k in ("error_before", "error_no_replay", "error_replay")}
    acute = [i for i, a in enumerate(angles) if a <= config["acute_max"]]
    obtuse = [i for i, a in enumerate(angles) if a >= config["obtuse_min"]]

    def contrast(errs):
        return float(np.mean([errs[i] for i in obtuse]) - np.mean([errs[i] for i in acute]))

    level = float(config["benign_error"])
    curve_rows = [{"angle": a, "variant": k.replace("error_", ""), "metric": "task1_error", "value": mean[k][j]}
                  for k in mean for j, a in enumerate(angles)]
    curve_rows += [{"angle": o["angle"], "variant": k.replace("error_", ""), "seed": o["seed"],
                    "metric": "task1_error_run", "value": o[k]} for o in syn for k in mean]
    run_rows = [{"method": o["rule"], "seed": o["seed"], "metric": m, "value": o[m]}
                for o in dig for m in ("average_accuracy", "forgetting")]

    def rule_block(r):
        rs = [o for o in dig if o["rule"] == r]
        return {"average_accuracy": float(np.mean([o["average_accuracy"] for o in rs])),
                "forgetting": float(np.mean([o["forgetting"] for o in rs])), "runs": len(rs)}

    metrics = {
        "no_replay_harmful_minus_benign": contrast(mean["error_no_replay"]),
        "benign_range_replay": _benign_range(angles, mean["error_replay"], level),
        "task1_error_before_max": float(max(mean["error_before"])),
        "mid": rule_block("mid"),
        "forgetting_curve": {f"{a:g}": {"no_replay": mean["error_no_replay"][j], "replay": mean["error_replay"][j]}
                             for j, a in enumerate(angles)},
    }
    baselines = {r: rule_block(r) for r in ("none",) + mr.RULES if r != "mid"}
    baselines["no_replay"] = {"benign_range": _benign_range(angles, mean["error_no_replay"], level)}
    baselines["before_task2"] = {"harmful_minus_benign": contrast(mean["error_before"])}
    baselines["replay"] = {"harmful_minus_benign": contrast(mean["error_replay"])}
    budget = {"synthetic": {"gd_epochs": int(config["epochs"]), "n_train": int(config["n_train"]),
                            "replay_fraction": 0.1},
              "digits": {"epochs_per_task": int(config["digits_epochs"]), "buffer_per_class": int(config["per_class"]),
                         "tasks": 5},
              "tuning": "none: one setting for every rule"}
    return Outcome(metrics=metrics, baselines=baselines, tables={"angle_curve": curve_rows, "digits": run_rows},
                   budget=budget)


SRC_ANGLE = ("abstract: 'acute or small obtuse angles lead to benign forgetting, whereas larger obtuse angles result "
             "in harmful forgetting'")
SRC_REPLAY = "abstract: 'the replay method alleviates forgetting by expanding the range of angles corresponding to benign forgetting'"
SRC_MID = ("abstract: 'mid-angle sampling, which selects examples with moderate angles to the prototype, can enhance "
           "the replay method's ability to mitigate forgetting'")


def _vs(rule: str, metric: str, op: str) -> Claim:
    word = "higher average accuracy" if metric == "average_accuracy" else "less forgetting"
    return Claim(text=f"mid-angle buffers give {word} than {rule} buffers on split digits (paired over seeds)",
                 metric=f"metrics.mid.{metric}", compare=f"baselines.{rule}.{metric}", op=op,
                 test="paired sign test over seeds", table="digits", a={"method": "mid", "metric": metric},
                 b={"method": rule, "metric": metric}, source=SRC_MID)


CLAIMS = (
    Claim(text="without replay, task-1 error after task 2 is at least 0.3 higher at large obtuse angles "
               "(>= obtuse_min) than at acute ones (<= acute_max)",
          metric="metrics.no_replay_harmful_minus_benign", compare=0.3, op=">=", source=SRC_ANGLE,
          controls=(Control("before_task2", "baselines.before_task2.harmful_minus_benign"),)),
    Claim(text="replay widens the range of angles (from 0) with benign forgetting (task-1 error <= benign_error)",
          metric="metrics.benign_range_replay", compare="baselines.no_replay.benign_range", op=">", source=SRC_REPLAY),
    Claim(text="replay from random buffers forgets less than no replay on split digits (paired over seeds)",
          metric="baselines.none.forgetting", compare="baselines.random.forgetting", op=">",
          test="paired sign test over seeds", table="digits", a={"method": "none", "metric": "forgetting"},
          b={"method": "random", "metric": "forgetting"}, source=SRC_REPLAY),
    _vs("random", "average_accuracy", ">"),
    _vs("small", "average_accuracy", ">"),
    _vs("large", "average_accuracy", ">"),
    _vs("random", "forgetting", "<"),
    Claim(text="task 1 is learned before task 2 (test error <= 0.05 at every angle)",
          metric="metrics.task1_error_before_max", compare=0.05, op="<=", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """Forgetting against the angle (mean and per-seed range), and accuracy / forgetting per rule."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["angle_curve"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8))
    for variant in ("no_replay", "replay"):
        pts = sorted((r["angle"], r["value"]) for r in rows if r["variant"] == variant and r["metric"] == "task1_error")
        runs = [r for r in rows if r["variant"] == variant and r["metric"] == "task1_error_run"]
        angles = [p[0] for p in pts]
        lo = [min(r["value"] for r in runs if r["angle"] == a) for a in angles]
        hi = [max(r["value"] for r in runs if r["angle"] == a) for a in angles]
        line, = ax.plot(angles, [p[1] for p in pts], marker="o", label=variant.replace("_", " "))
        ax.fill_between(angles, lo, hi, alpha=0.15, color=line.get_color())
    ax.set_xlabel("angle between task signal vectors (degrees)")
    ax.set_ylabel("task-1 test error after task 2")
    ax.set_title("theory setting: forgetting vs angle")
    ax.legend(fontsize=8)
    drows = record["tables"]["digits"]
    rules = list(dict.fromkeys(r["method"] for r in drows))
    for k, metric in enumerate(("average_accuracy", "forgetting")):
        vals = [[r["value"] for r in drows if r["method"] == m and r["metric"] == metric] for m in rules]
        pos = np.arange(len(rules)) + (k - 0.5) * 0.35
        bx.bar(pos, [np.mean(v) for v in vals], width=0.35, label=metric.replace("_", " "),
               yerr=[np.std(v) for v in vals], capsize=2)
    bx.set_xticks(np.arange(len(rules)), rules, rotation=30)
    bx.set_title("split digits: replay buffers by rule (mean, std over seeds)")
    bx.legend(fontsize=8)
    fig.tight_layout()
    return {"midangle": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="every (angle, seed) run of the theory setting and every (buffer rule, seed) split-digits sequence is a pmap task",
    checked_against="the abstract and the authors' code (iLearn-Lab/ICML25-Theory_CL: synthetic/cl_cnn_replay_ewc.py, "
                    "real-world/sampling_mnist.py); the full text was not read",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
