"""DPSDP reproduction on the embedded LM: multi-turn refinement of additions by an actor and a critic,
trained by per-turn DPO on pairs ranked by Monte-Carlo Q estimates under the reference system.

Setup. The reference system is the shipped ``base`` checkpoint after a supervised warm-up on the
refinement formats (first answers, critiques ``"ok"`` / ``"x<k>"`` and refinements, written by
the verifier's oracle, as the paper distils a stronger model); the warm-up runs as one Ray task
and is cached on the driver under ``~/.cache/rayml/alignment/`` (``RAYML_CACHE``). Questions are
additions of ``train_digits`` operand lengths (in distribution) and ``ood_digits`` (out of
distribution, never trained on); correctness is the substrate's verifier (exact match).

Steps (Ray tasks through ``rayml.runtime.pmap``):
1. data collection: chunks of training questions, each a task that rolls the reference system
   out at temperature 1, draws ``n_candidates`` actions per state and estimates their Q (the
   critic's by ``mc_rollouts`` refinements of the reference actor);
2. training and evaluation: per seed, DPSDP with two agents (actor on D0 u D2, critic on D1)
   and the single-agent ablation (one model on D0 u D1 u D2 for both roles), at the same total
   optimizer steps and pairs per step; the beta of each is tuned on ``beta_grid`` (the paper's
   range 0.1-1.0 inside it) on a tuning split of the training questions kept apart from the test
   questions;
3. greedy refinement over ``turns`` answers on the test questions: pass@turn1, majority vote
   over the answers, pass@turnT, for the SFT system, DPSDP and the single agent.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Reinforce LLM Reasoning through Multi-Agent Reflection (DPSDP), ICML 2025"
METHOD = "dpsdp"
SYSTEMS = ("sft", "dpsdp", "single_agent")

SIZES = {
    "tiny": dict(train_digits=[3, 4], ood_digits=[5], sft_items=8, sft_steps=2, sft_lr=1e-3, train_questions=8,
                 tune_questions=4, chunk=4, n_candidates=2, mc_rollouts=1, dpo_steps=2, batch_size=4, lr_grid=[1e-5],
                 beta_grid=[0.1], test_per_level=3, turns=3, seeds=2),
    "quick": dict(train_digits=[3, 4], ood_digits=[5], sft_items=1500, sft_steps=900, sft_lr=1e-3,
                  train_questions=128, tune_questions=32, chunk=16, n_candidates=4, mc_rollouts=2, dpo_steps=30,
                  batch_size=16, lr_grid=[1e-5, 3e-5, 1e-4, 3e-4], beta_grid=[0.01, 0.03, 0.1, 0.5, 2.0], test_per_level=40, turns=5,
                  seeds=2),
    "full": dict(train_digits=[3, 4], ood_digits=[2, 5], sft_items=1500, sft_steps=900, sft_lr=1e-3,
                 train_questions=1024, tune_questions=128, chunk=32, n_candidates=8, mc_rollouts=4, dpo_steps=200,
                 batch_size=16, lr_grid=[1e-5, 3e-5, 1e-4], beta_grid=[0.1, 0.3, 1.0], test_per_level=250, turns=5, seeds=4),
}


def _check(config: Mapping[str, Any]) -> None:
    from rayml.alignment.preference import _check_levels

    _check_levels(config["train_digits"])
    _check_levels(config["ood_digits"])
    if set(config["train_digits"]) & set(config["ood_digits"]):
        raise ValueError("ood_digits must not overlap train_digits")
    for key in ("sft_items", "sft_steps", "train_questions", "tune_questions", "chunk", "n_candidates",
                "mc_rollouts", "dpo_steps", "batch_size", "test_per_level", "turns", "seeds"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    if config["n_candidates"] < 2:
        raise ValueError(f"n_candidates must be >= 2, got {config['n_candidates']}")
    if not isinstance(config["sft_lr"], (int, float)) or not config["sft_lr"] > 0:
        raise ValueError(f"sft_lr must be a number > 0, got {config['sft_lr']!r}")
    for key in ("beta_grid", "lr_grid"):
        grid = config[key]
        if not grid or any(isinstance(b, bool) or not isinstance(b, (int, float)) or b <= 0 for b in grid):
            raise ValueError(f"{key} must hold numbers > 0, got {grid!r}")


@lru_cache(maxsize=1)
def _base():
    import rayml.llm

    lm = rayml.llm.pretrained("base")
    return lm.model, lm.tokenizer


def _items(digits, n_per, split, seed):
    from rayml.llm import tasks

    rng = np.random.default_rng(seed)
    return [it for d in digits for it in tasks.make_items("add", int(n_per), rng, split=split, digits=int(d))]


def _state(model) -> dict:
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def _load(state: Mapping[str, np.ndarray]):
    import copy

    import torch

    base, _ = _base()
    m = copy.deepcopy(base)
    m.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    return m.eval()


# ------------------------------------------------------------------------------------------
# Ray work items

def sft_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """The supervised warm-up of the reference system (both roles, one model)."""
    import copy

    from rayml.alignment import dpo, dpsdp as dp

    config, seed = shared["config"], item[1]
    base, tok = _base()
    rng = np.random.default_rng(seed)
    train = _items(config["train_digits"], max(1, config["sft_items"] // len(config["train_digits"])), "train",
                   rng.integers(2**31))
    ex = dp.sft_examples(train, rng)
    model = dpo.sft(copy.deepcopy(base), [tok.encode(s, bos=True) for s, _ in ex],
                    [tok.encode(a) + [tok.eos_id] for _, a in ex], steps=int(config["sft_steps"]), batch_size=32,
                    lr=float(config["sft_lr"]), seed=int(rng.integers(2**31)))
    return {"state": _state(model)}


def collect_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """Data collection for one chunk of training questions under the reference system."""
    from rayml.alignment import dpsdp as dp

    phase, idx, seed = item
    config = shared["config"]
    ref = _load(shared["sft"])
    _, tok = _base()
    qs = shared["questions"][phase][idx]
    pairs = dp.collect_pairs(ref, ref, tok, qs, n_candidates=int(config["n_candidates"]),
                             mc_rollouts=int(config["mc_rollouts"]), seed=seed)
    return {"phase": phase, "d0": pairs.d0, "d1": pairs.d1, "d2": pairs.d2, "q": pairs.q_means}


def _train_system(system, data, config, beta, lr, seed):
    """Two agents (actor on D0 u D2, critic on D1) or one agent on everything, same total steps."""
    from rayml.alignment import dpo, dpsdp as dp

    _, tok = _base()
    ref = _load(data["sft"])
    total = int(config["dpo_steps"])
    actor_pairs = dp.encode_state_pairs(data["d0"] + data["d2"], tok)
    critic_pairs = dp.encode_state_pairs(data["d1"], tok)

    def cfg(steps):
        return dpo.DPOConfig(beta=float(beta), lr=float(lr), steps=max(1, steps),
                             batch_size=int(config["batch_size"]), length_grouped=True)

    if system == "single_agent":
        both = actor_pairs + critic_pairs
        if not both:
            return ref, ref, 0
        m = dpo.train_dpo(ref, both, cfg(total), seed=seed, pad_id=tok.pad_id).model
        return m, m, total
    n_a, n_c = len(actor_pairs), len(critic_pairs)
    if n_a + n_c == 0:
        return ref, ref, 0
    steps_a = int(round(total * n_a / (n_a + n_c)))
    steps_c = total - steps_a
    actor = dpo.train_dpo(ref, actor_pairs, cfg(steps_a), seed=seed, pad_id=tok.pad_id).model if n_a and steps_a else ref
    critic = dpo.train_dpo(ref, critic_pairs, cfg(steps_c), seed=seed + 1, pad_id=tok.pad_id).model \
        if n_c and steps_c else ref
    return actor, critic, (steps_a if n_a else 0) + (steps_c if n_c else 0)


def system_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """Train one system (or take the SFT one) and refine the evaluation questions greedily."""
    from rayml.alignment import dpsdp as dp

    phase, system, beta, lr, s_idx, seed = item
    config = shared["config"]
    _, tok = _base()
    data = {"sft": shared["sft"], **shared["pairs"][phase]}
    if system == "sft":
        actor = critic = _load(shared["sft"])
        steps = 0
    else:
        actor, critic, steps = _train_system(system, data, config, beta, lr, seed)
    out = {"phase": phase, "system": system, "beta": float(beta), "lr": float(lr), "seed": int(s_idx),
           "steps": steps}
    for split, items in shared["eval"][phase].items():
        ro = dp.refine(actor, critic, tok, [it.prompt for it in items], turns=int(config["turns"]))
        out[split] = dp.refine_metrics(ro, items)
    return out


# ------------------------------------------------------------------------------------------
# the run

def _cache_path(config, seed) -> Path:
    from rayml.llm.checkpoint import file_sha256
    from rayml.llm import WEIGHTS_DIR

    keys = {k: config[k] for k in ("train_digits", "sft_items", "sft_steps", "sft_lr")}
    blob = json.dumps({"recipe": keys, "seed": seed, "base": file_sha256(WEIGHTS_DIR / "base" / "model.safetensors")},
                      sort_keys=True)
    root = Path(os.environ.get("RAYML_CACHE", Path.home() / ".cache" / "rayml"))
    return root / "alignment" / f"dpsdp-sft-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.npz"


WARMUP_SEED = 0  # one warm-up per recipe, shared by every run (and by selective-dpo)


def sft_state(config: Mapping[str, Any], seed: int = WARMUP_SEED) -> dict:
    """The refinement SFT warm-up of the shipped base for ``config``'s recipe (``train_digits``,
    ``sft_items``, ``sft_steps``, ``sft_lr``): cached on the driver, else trained as one Ray task."""
    path = _cache_path(config, seed)
    if path.exists():
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    keys = ("train_digits", "sft_items", "sft_steps", "sft_lr")
    state = runtime.pmap(sft_task, [("sft", seed)], shared={"config": {k: config[k] for k in keys}},
                         desc="SFT warm-up")[0]["state"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **state)
    os.replace(tmp, path)
    return state


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """SFT warm-up (cached), data collection, tuning, training and evaluation as pmap tasks."""
    _check(config)
    ss = runtime.seeds(seed, 6)
    sft = sft_state(config)
    digits = list(config["train_digits"])
    per = lambda n: max(1, n // len(digits))  # noqa: E731
    train_q = _items(digits, per(config["train_questions"]), "train", ss[1] % 2**31)
    tune_q = _items(digits, per(config["tune_questions"]), "train", ss[2] % 2**31)
    chunk = int(config["chunk"])
    questions = {"test": [train_q[i:i + chunk] for i in range(0, len(train_q), chunk)],
                 "tune": [tune_q[i:i + chunk] for i in range(0, len(tune_q), chunk)]}
    col_seeds = runtime.seeds(ss[3], len(questions["test"]) + len(questions["tune"]))
    col_items = [(ph, i, col_seeds[k]) for k, (ph, i) in enumerate(
        [("test", i) for i in range(len(questions["test"]))] + [("tune", i) for i in range(len(questions["tune"]))])]
    shared = {"config": dict(config), "sft": sft, "questions": questions}
    collected = runtime.pmap(collect_task, col_items, shared=shared, chunk_size=1, desc="rollouts")
    pairs = {ph: {"d0": [], "d1": [], "d2": [], "q": []} for ph in ("test", "tune")}
    for c in collected:
        for k in ("d0", "d1", "d2"):
            pairs[c["phase"]][k] += [tuple(p) for p in c[k]]
        pairs[c["phase"]]["q"].append(c["q"])
    # tuning: both trained systems on the beta grid, scored by maj@turnT on held-apart training questions
    tune_eval = _items(digits, per(config["tune_questions"]), "train", ss[4] % 2**31)
    test_eval = {"id": _items(digits, config["test_per_level"], "test", ss[5] % 2**31),
                 "ood": _items(config["ood_digits"], config["test_per_level"], "test", (ss[5] + 1) % 2**31)}
    shared = {"config": dict(config), "sft": sft, "pairs": pairs,
              "eval": {"tune": {"id": tune_eval}, "test": test_eval}}
    run_seeds = runtime.seeds(ss[4], int(config["seeds"]))
    grid = [(float(b), float(lr)) for b in config["beta_grid"] for lr in config["lr_grid"]]
    tune_items = [("tune", s, b, lr, 0, run_seeds[0] % 2**31) for s in SYSTEMS[1:] for b, lr in grid]
    tuned = runtime.pmap(system_task, tune_items, shared=shared, chunk_size=1, desc="tuning")
    best = {}
    for s in SYSTEMS[1:]:
        sc = {(t["beta"], t["lr"]): t["id"]["maj_turnT"] for t in tuned if t["system"] == s}
        best[s] = max(sorted(sc), key=lambda bl: (sc[bl], -bl[0], -bl[1]))  # ties: smaller beta, then lr
    test_items = [("test", "sft", 0.0, 0.0, 0, 0)] + [("test", s, *best[s], k, run_seeds[k] % 2**31)
                                                     for s in SYSTEMS[1:] for k in range(int(config["seeds"]))]
    out = runtime.pmap(system_task, test_items, shared=shared, chunk_size=1, desc="systems")
    return _summarize(config, out, tuned, best, pairs)


def _summarize(config, out, tuned, best, pairs) -> Outcome:
    seeds = int(config["seeds"])
    rows, turn_rows = [], []
    for r in out:
        reps = range(seeds) if r["system"] == "sft" else [r["seed"]]  # the SFT system is deterministic
        for split in ("id", "ood"):
            m = r[split]
            for k in reps:
                for i, (t1, mj) in enumerate(zip(m["per_item_turn1"], m["per_item_maj"])):
                    rows.append({"system": r["system"], "split": split, "seed": k, "item": i, "metric": "turn1",
                                 "value": t1})
                    rows.append({"system": r["system"], "split": split, "seed": k, "item": i, "metric": "maj",
                                 "value": mj})
            for t, v in enumerate(m["per_turn"]):
                turn_rows.append({"system": r["system"], "split": split, "seed": r["seed"], "turn": t + 1,
                                  "metric": "accuracy", "value": v})

    def mean(system, split, key):
        v = [r[split][key] for r in out if r["system"] == system]
        return float(np.mean(v)) if v else float("nan")

    def block(system):
        return {split: {"pass1_turn1": mean(system, split, "pass1_turn1"), "maj_turnT": mean(system, split, "maj_turnT"),
                        "pass1_turnT": mean(system, split, "pass1_turnT")} for split in ("id", "ood")}

    ours = block("dpsdp")
    metrics = {**ours, "maj_gain_id": ours["id"]["maj_turnT"] - ours["id"]["pass1_turn1"],
               "beta": best["dpsdp"][0], "lr": best["dpsdp"][1],
               "pairs": {k: len(pairs["test"][k]) for k in ("d0", "d1", "d2")},
               "q_means": {k: float(np.mean([q[k] for q in pairs["test"]["q"]])) for k in ("q0", "q1", "q2")}}
    sft, single = block("sft"), block("single_agent")
    baselines = {"sft": {**sft, "maj_gain_id": sft["id"]["maj_turnT"] - sft["id"]["pass1_turn1"]},
                 "single_agent": {**single, "beta": best["single_agent"][0], "lr": best["single_agent"][1],
                                  "maj_gain_id": single["id"]["maj_turnT"] - single["id"]["pass1_turn1"]}}
    steps = sorted({r["steps"] for r in out if r["system"] != "sft"})
    budget = {"dpo_steps_total": int(config["dpo_steps"]), "pairs_per_step": int(config["batch_size"]),
              "steps_used": steps, "collection": {"questions": int(config["train_questions"]),
                                                  "n_candidates": int(config["n_candidates"]),
                                                  "mc_rollouts": int(config["mc_rollouts"])},
              "tuning": {"grid": {"beta": list(config["beta_grid"]), "lr": list(config["lr_grid"])},
                         "chosen": {s: {"beta": b, "lr": lr} for s, (b, lr) in best.items()},
                         "questions": int(config["tune_questions"]), "rule": "highest maj@turnT on tuning questions"},
              "turns": int(config["turns"]), "seeds": seeds}
    tune_rows = [{"system": t["system"], "beta": t["beta"], "lr": t["lr"], "metric": "maj_turnT",
                  "value": t["id"]["maj_turnT"]} for t in tuned]
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"items": rows, "turns": turn_rows, "tuning": tune_rows}, budget=budget)


_SIGN = dict(test="paired sign test over seeds", table="items", pair_on=("seed", "item"))
CLAIMS = (
    Claim(text="after DPSDP, majority vote over the turns is more often correct than the first turn (in distribution)",
          metric="metrics.id.maj_turnT", compare="metrics.id.pass1_turn1", op=">", **_SIGN,
          a={"system": "dpsdp", "split": "id", "metric": "maj"}, b={"system": "dpsdp", "split": "id", "metric": "turn1"},
          source="abstract: 'majority voting over five refinement steps increases first-turn accuracy from 58.2% "
                 "to 63.2%'",
          controls=(Control("sft", "baselines.sft.id.maj_turnT", a={"system": "sft", "split": "id", "metric": "maj"}),)),
    Claim(text="DPSDP's majority vote beats the SFT system's, in distribution",
          metric="metrics.id.maj_turnT", compare="baselines.sft.id.maj_turnT", op=">", **_SIGN,
          a={"system": "dpsdp", "split": "id", "metric": "maj"}, b={"system": "sft", "split": "id", "metric": "maj"},
          source="abstract: 'show improvements on both in- and out-of-distribution benchmarks'"),
    Claim(text="DPSDP's majority vote beats the SFT system's, out of distribution (operand lengths never trained)",
          metric="metrics.ood.maj_turnT", compare="baselines.sft.ood.maj_turnT", op=">", **_SIGN,
          a={"system": "dpsdp", "split": "ood", "metric": "maj"}, b={"system": "sft", "split": "ood", "metric": "maj"},
          source="abstract: 'show improvements on both in- and out-of-distribution benchmarks'"),
    Claim(text="two agents (actor and critic) beat one model in both roles at the same budget (majority vote, id)",
          metric="metrics.id.maj_turnT", compare="baselines.single_agent.id.maj_turnT", op=">", **_SIGN,
          a={"system": "dpsdp", "split": "id", "metric": "maj"},
          b={"system": "single_agent", "split": "id", "metric": "maj"},
          source="abstract: 'An ablation study further confirms the benefits of multi-agent collaboration'"),
)


def plots(record: Mapping) -> dict:
    """Accuracy per turn for each system (mean over seeds, band = seed range), in and out of distribution."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["turns"]
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.3), sharey=True)
    for ax, split in zip(axes, ("id", "ood")):
        for j, system in enumerate(SYSTEMS):
            turns = sorted({r["turn"] for r in rows if r["system"] == system and r["split"] == split})
            if not turns:
                continue
            vals = [[r["value"] for r in rows if r["system"] == system and r["split"] == split and r["turn"] == t]
                    for t in turns]
            m = [np.mean(v) for v in vals]
            ax.plot(turns, m, marker="o", color=f"C{j}", label=system)
            ax.fill_between(turns, [min(v) for v in vals], [max(v) for v in vals], color=f"C{j}", alpha=0.2)
            maj = record["metrics" if system == "dpsdp" else "baselines"]
            maj = (maj if system == "dpsdp" else maj[system])[split]["maj_turnT"]
            ax.axhline(maj, color=f"C{j}", ls=":", lw=1)
        ax.set_title(f"{split} (dotted: majority vote over turns)")
        ax.set_xlabel("turn (answer index)")
    axes[0].set_ylabel("verifier accuracy")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return {"turns": fig}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="the SFT warm-up as a task; data collection (reference rollouts, candidates, Monte-Carlo Q) in chunks of "
        "questions as pmap tasks; each (system, beta / seed) trained and evaluated as a task; weights travel "
        "through the object store",
    checked_against="the paper's abstract and a secondary digest of the full text (Algorithm 1's restarts, "
                    "Q estimates per turn, reduced Markovian state, actor on D0 u D2 and critic on D1, "
                    "single-agent ablation, metrics p1@t1 / m1@t5 / p1@t5); no official code exists",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
)
