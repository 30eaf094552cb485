"""The LLM substrate's experiment: the shipped checkpoint's per-task scores, and its generation speed.

``rayml run llm-substrate``: loads the shipped checkpoint (``rayml/llm/weights/<checkpoint>/``)
and scores it, greedy, on held-out items of every task of ``rayml.llm.tasks`` (3-digit addition
from the held-out operand pairs, key-value retrieval over 8 documents, ...). Items are generated
from the seed; every (task, chunk of items) is one Ray task. The quality bar of the substrate
issue is declared as claims: >= 90% exact match on addition, >= 80% on retrieval, and a training
time of at most one hour on the CPU recorded in the card.

``rayml bench llm-substrate``: tokens/s of batched greedy generation with our KV cache against
Hugging Face ``transformers`` ``LlamaForCausalLM`` holding copies of the same weights (its own
KV cache and ``generate``), same prompts, same number of new tokens, same CPU thread, timed back
to back inside one Ray task per repetition (each holding two CPUs, so repetitions do not overlap;
torch on one thread), alternating, best of ``rounds`` each (the CPU is shared with other work).
The ratio ours / HF is the figure (goal: >= 1).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim

PAPER = "rayml substrate: an embedded small causal LM, tokenizer and verifiable task suite (issue 3)"
TASK_NAMES = ("add", "copy", "reverse", "sort", "retrieve", "json")

SIZES = {
    "tiny": dict(checkpoint="base", items=4, chunk=2, tasks=["add", "retrieve"]),
    "quick": dict(checkpoint="base", items=200, chunk=100, tasks=list(TASK_NAMES)),
    "full": dict(checkpoint="base", items=1000, chunk=250, tasks=list(TASK_NAMES)),
}
BENCH_SIZES = {
    "tiny": dict(checkpoint="base", batch=2, prompt_len=8, new_tokens=4, reps=2, rounds=1, wide=False),
    "quick": dict(checkpoint="base", batch=8, prompt_len=64, new_tokens=64, reps=2, rounds=5, wide=False),
    "full": dict(checkpoint="base", batch=16, prompt_len=256, new_tokens=128, reps=4, rounds=3, wide=True),
}
_MODELS: dict = {}


def _load(checkpoint: str):
    if checkpoint not in _MODELS:
        import rayml.llm

        _MODELS[checkpoint] = rayml.llm.pretrained(checkpoint, train_if_missing=False)
    return _MODELS[checkpoint]


def _score_chunk(item: tuple, config: Mapping[str, Any]) -> list[float]:
    from rayml.llm import tasks

    task, start, n, seed = item
    lm = _load(config["checkpoint"])
    rng = np.random.default_rng([seed, TASK_NAMES.index(task)])
    items = tasks.make_items(task, start + n, rng, split="test")[start:]
    return tasks.evaluate([lm], items, batch_size=50)[0].tolist()


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Per-task exact match of the shipped checkpoint on held-out items."""
    for t in config["tasks"]:
        if t not in TASK_NAMES:
            raise ValueError(f"tasks: unknown task {t!r}; known: {TASK_NAMES}")
    work = [(t, s, min(config["chunk"], config["items"] - s), seed)
            for t in config["tasks"] for s in range(0, config["items"], config["chunk"])]
    out = runtime.pmap(_score_chunk, work, shared=dict(config), desc="llm eval")
    per_task: dict[str, list] = {t: [] for t in config["tasks"]}
    for (t, *_), scores in zip(work, out):
        per_task[t] += scores
    lm = _load(config["checkpoint"])
    card = lm.card
    rows = []
    for t, scores in per_task.items():
        rows.append({"model": config["checkpoint"], "task": t, "seed": seed, "metric": "exact_match",
                     "value": float(np.mean(scores))})
    items_rows = [{"model": config["checkpoint"], "task": t, "item": i, "seed": seed, "metric": "correct", "value": v}
                  for t, scores in per_task.items() for i, v in enumerate(scores)]
    metrics = {
        "exact_match": {t: float(np.mean(s)) for t, s in per_task.items()},
        "items_per_task": config["items"],
        "card": {"training_seconds": float(card.get("training_seconds", float("nan"))),
                 "steps": card.get("steps"), "n_params": card.get("n_params"),
                 "final_loss": card.get("final_loss"), "command": card.get("command")},
    }
    return Outcome(metrics=metrics, tables={"scores": rows, "items": items_rows},
                   budget={"items_per_task": config["items"]})


# rayml's own substrate, not a paper: every claim is a sanity check of the shipped checkpoint and engine.
CLAIMS = [
    Claim("the shipped base checkpoint scores >= 90% exact match on held-out 3-digit addition",
          "metrics.exact_match.add", 0.9, op=">=", kind="sanity"),
    Claim("the shipped base checkpoint scores >= 80% on key-value retrieval over 8 documents",
          "metrics.exact_match.retrieve", 0.8, op=">=", kind="sanity"),
    Claim("the shipped base checkpoint was trained from scratch in at most 60 minutes on the CPU",
          "metrics.card.training_seconds", 3600.0, op="<=", kind="sanity"),
]


def _bench_rep(item: tuple, config: Mapping[str, Any]) -> dict:
    import torch

    from rayml.llm.generation import generate
    from rayml.llm.hf import to_hf_llama
    from rayml.llm.model import TransformerLM

    shape, seed = item
    torch.set_num_threads(1)  # both backends on one thread of the same core
    if shape == "base":
        model = _load(config["checkpoint"]).model
    else:  # a wider model of the same architecture (random weights): 256 wide, 8 layers
        base = _load(config["checkpoint"]).model.config
        from dataclasses import replace

        model = TransformerLM(replace(base, d_model=256, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=768)).eval()
        model.reset_parameters(torch.Generator().manual_seed(seed))
    hf = to_hf_llama(model)
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, model.config.vocab_size, (config["batch"], config["prompt_len"]), generator=g)
    n_new = config["new_tokens"]

    def ours():
        return generate(model, prompts.tolist(), max_new_tokens=n_new, eos_id=None).tokens

    def theirs():
        with torch.no_grad():
            out = hf.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=n_new,
                              min_new_tokens=n_new, do_sample=False, pad_token_id=0, eos_token_id=None)
        return out[:, prompts.shape[1]:].tolist()

    a, b = ours(), theirs()  # warm-up; also the agreement of the two greedy decodes
    agree = float(np.mean([x == y for x, y in zip(a, b)]))
    times = {"rayml": float("inf"), "hf": float("inf")}
    for _ in range(config.get("rounds", 3)):  # alternate; the best round of each (least disturbed)
        for name, fn in (("rayml", ours), ("hf", theirs)):
            t0 = time.perf_counter()
            fn()
            times[name] = min(times[name], time.perf_counter() - t0)
    toks = config["batch"] * n_new
    return {"shape": shape, "rayml_tps": toks / times["rayml"], "hf_tps": toks / times["hf"], "agree": agree,
            "n_params": model.num_parameters()}


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """Generation tokens/s, ours (KV cache) vs ``transformers`` with copied weights."""
    shapes = ["base"] + (["wide"] if config["wide"] else [])
    seeds = runtime.seeds(seed, config["reps"])
    work = [(s, sd) for s in shapes for sd in seeds]
    # each repetition holds two CPUs so that repetitions do not run (and compete) side by side
    slots = max(1, min(2, runtime.cluster_info()["cpus"]))
    res = runtime.pmap(_bench_rep, work, shared=dict(config), num_cpus=slots, desc="llm bench")
    rows, metrics, baselines = [], {}, {}
    for shape in shapes:
        rs = [r for r in res if r["shape"] == shape]
        for i, r in enumerate(rs):
            for m in ("rayml_tps", "hf_tps", "agree"):
                rows.append({"shape": shape, "rep": i, "seed": i, "metric": m, "value": r[m]})
            rows.append({"shape": shape, "rep": i, "seed": i, "metric": "ratio", "value": r["rayml_tps"] / r["hf_tps"]})
        key = "" if shape == "base" else f"_{shape}"
        metrics[f"tokens_per_s{key}"] = float(np.median([r["rayml_tps"] for r in rs]))
        metrics[f"ratio_vs_hf{key}"] = float(np.median([r["rayml_tps"] / r["hf_tps"] for r in rs]))
        metrics[f"greedy_agreement{key}"] = float(np.mean([r["agree"] for r in rs]))
        metrics[f"n_params{key}"] = rs[0]["n_params"]
        baselines[f"hf_transformers{key}"] = {"tokens_per_s": float(np.median([r["hf_tps"] for r in rs]))}
    return Outcome(metrics=metrics, baselines=baselines, tables={"throughput": rows},
                   budget={"batch": config["batch"], "prompt_len": config["prompt_len"],
                           "new_tokens": config["new_tokens"]})


BENCH_CLAIMS = [
    Claim("batched KV-cache generation is at least as fast as transformers' LlamaForCausalLM with the same "
          "weights on the same CPU", "metrics.ratio_vs_hf", 1.0, op=">=", kind="sanity"),
]

EXPERIMENT = Experiment(
    name="llm-substrate", paper=PAPER,
    ray="evaluation: one Ray task per (task, chunk of items); `rayml train` runs training as one Ray task "
        "(num_gpus=1 on GPU clusters); bench: one Ray task per repetition timing both backends",
    checked_against="Hugging Face transformers LlamaForCausalLM (logits match with copied weights); "
                    "KV-cache generation against full recompute",
    sizes=SIZES, run=run, claims=CLAIMS, bench_sizes=BENCH_SIZES, bench=bench, bench_claims=BENCH_CLAIMS,
)
