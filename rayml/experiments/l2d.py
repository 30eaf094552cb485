"""L2D reproduction: accuracy against the number of ODE steps, LoRA at equal budget, on the substrate
and on SmolLM2-135M.

Substrate (``model="base"``): the shipped base model (``rayml.llm.pretrained("base")``) adds 3-digit
numbers perfectly and 4-digit numbers never (the sum is written least-significant digit first). The
paper finetunes capable bases (their accuracy well above zero) and adds test-time compute; asked to
add a skill the base lacks (4-digit addition only: the base scores 0%), L2D reached 0.01-0.02 after
1200 steps while LoRA reached 0.99 (issue 42). So the items mix the ``digits`` list (3 and 4
digits, half each): the base scores about 50%, and a sanity claim (L2D's accuracy at its most steps
above the frozen base's, paired over seed x item) gates the step-count claims. L2D adds a flow path beside the frozen base and is trained on
these items with the flow-matching cross-entropy; the baseline is LoRA finetuning of the same base on the same items with the same
number of trainable parameters (rank chosen to match), steps, batch and learning-rate grid. Test
accuracy (exact match of the generated sum, greedy) is measured for the base (``steps = 0``: the L2D
model at ``t = 0`` is the base bit for bit), for L2D with Euler and midpoint at each number of steps,
and for the adaptive solver, whose evaluations per problem are recorded.

SmolLM2 (``model="smollm2-135m"``): the frozen base is SmolLM2-135M-Instruct (``rayml.llm.pretrained``;
its Q4_1-quantised weights, dequantised) and the items are plain-text questions a verifier scores
(``rayml.alignment.text_tasks``: ``task="add"`` asks ``What is 3+5?`` with the reply led to ``3+5=``,
``levels`` the operand digits; ``task="lookup"`` asks for one of ``levels`` facts); the other settings
come from the size's ``real`` block (cut to what a 2-core CPU trains: a few dozen steps). The flow
path runs only at the answer positions in training (``l2d_loss(only_targets=True)``: the same loss).

Ray: training runs (method x lr x tuning seed, then method x test seed) are tasks; evaluations
(method x seed x solver x steps) are tasks; each worker process loads the frozen base once (from the
package or its own node's cache) and the trained adapters travel through the object store. Tuning:
each method's learning rate on the same grid (the authors' 1e-4 inside it) by held-out loss on a
tuning seed kept apart from the test seeds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.evidence import gate
from rayml.experiments import Experiment, Outcome, with_real_settings
from rayml.results import Claim, Control

PAPER = "Large Language Models to Diffusion Finetuning (L2D), ICML 2025"
METHOD = "l2d"
IGNORE = -100

REAL_MODELS = ("smollm2-135m",)
# a real pretrained LM (``model=smollm2-135m``): plain-text questions, settings cut to what a 2-core CPU
# trains and evaluates in a few minutes (SmolLM2 is ~140x the substrate's size)
_REAL = dict(train_items=512, eval_items=32, adaptive_items=6, adaptive_max_evals=24, steps=32, batch=4,
             lr_grid=[1e-4, 1e-3], tune_seeds=1, seeds=2, ode_steps=[1, 2, 4, 8], solvers=["euler"], lora_rank=4,
             flow_dim=16, cond_dim=8)
_COMMON = dict(model="base", task="add", levels=[1, 2], digits=[3, 4])
SIZES = {
    "tiny": dict(_COMMON, train_items=64, eval_items=4, adaptive_items=1, adaptive_max_evals=6, steps=3, batch=8,
                 lr_grid=[1e-3], tune_seeds=1, seeds=2, ode_steps=[1, 2], solvers=["euler"], adaptive_tol=0.05, lora_rank=8,
                 flow_dim=32, noise_scale=64.0, cond_dim=16,
                 real=dict(train_items=16, eval_items=2, adaptive_items=1, adaptive_max_evals=4, steps=1, batch=2,
                           seeds=1, lora_rank=1, flow_dim=8, cond_dim=4)),
    # a preview: 200 steps (48 had left L2D at 0.00, below its base: the flow path had not learned yet; a pilot
    # measured 0.31 at one Euler step after 200)
    "quick": dict(_COMMON, train_items=2000, eval_items=24, adaptive_items=4, adaptive_max_evals=24, steps=200, batch=16,
                  lr_grid=[1e-4, 1e-3], tune_seeds=1, seeds=2, ode_steps=[1, 4], solvers=["euler"],
                  adaptive_tol=0.05, lora_rank=8, flow_dim=64, noise_scale=64.0, cond_dim=32, real=dict(_REAL)),
    # 2000 steps per run (the review's 6000 did not fit this session's shared machine: about 30 ms of CPU per L2D
    # step at batch 16, so ~1 CPU-minute a run); 12 runs (3 lrs x 2 methods on a tuning seed, 2 methods x 3 test
    # seeds); ``--set steps=6000`` is the review's setting
    "full": dict(_COMMON, train_items=50000, eval_items=160, adaptive_items=24, adaptive_max_evals=128, steps=2000, batch=16,
                 lr_grid=[1e-4, 1e-3, 3e-3], tune_seeds=1, seeds=3, ode_steps=[1, 2, 4, 8, 16],
                 solvers=["euler", "midpoint"], adaptive_tol=0.02, lora_rank=8, flow_dim=64, noise_scale=64.0,
                 cond_dim=32,
                 real=dict(_REAL, train_items=20000, eval_items=200, adaptive_items=40, adaptive_max_evals=128, steps=1000,
                           batch=16, lr_grid=[1e-4, 3e-4, 1e-3], seeds=3, ode_steps=[1, 2, 4, 8, 16, 32], lora_rank=8,
                           flow_dim=64, cond_dim=32)),
}


def _effective(config: Mapping[str, Any]) -> dict:
    """The config a run uses: a real pretrained model takes its settings from ``config["real"]``."""
    return with_real_settings(config, REAL_MODELS)


def _real(config) -> bool:
    return config["model"] in REAL_MODELS


def _check(config: Mapping[str, Any]) -> None:
    from rayml.alignment.text_tasks import KINDS

    if config.get("model") not in ("base",) + REAL_MODELS:
        raise ValueError(f"model must be one of {('base',) + REAL_MODELS}, got {config.get('model')!r}")
    real = config.get("real") or {}
    if not isinstance(real, dict) or set(real) - set(config) or {"model", "real"} & set(real):
        raise ValueError(f"real must be a dict of other settings of this config, got {real!r}")
    if config["task"] not in KINDS:
        raise ValueError(f"task must be one of {KINDS} (questions for a real model), got {config['task']!r}")
    levels = config["levels"]
    if (not isinstance(levels, list) or not levels
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 9 for v in levels)):
        raise ValueError(f"levels must be a non-empty list of integers in 1..9, got {levels!r}")
    config = _effective(config)
    digits = config["digits"]
    if (not isinstance(digits, list) or not digits
            or any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 6 for v in digits)):
        raise ValueError(f"digits must be a non-empty list of integers in 1..6 (the context stays short), got {digits!r}")
    for key in ("train_items", "eval_items", "adaptive_items", "adaptive_max_evals", "steps", "batch", "tune_seeds", "seeds",
                "lora_rank", "flow_dim", "cond_dim"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be a positive integer, got {v!r}")
    if _real(config) and config["eval_items"] < len(config["levels"]):
        raise ValueError(f"eval_items ({config['eval_items']}) must be >= the number of levels ({len(config['levels'])})")
    if config["adaptive_items"] > config["eval_items"]:
        raise ValueError(f"adaptive_items ({config['adaptive_items']}) must be <= eval_items ({config['eval_items']})")
    for key in ("lr_grid", "ode_steps"):
        grid = config[key]
        if not isinstance(grid, list) or not grid or any(not isinstance(v, (int, float)) or v <= 0 for v in grid):
            raise ValueError(f"{key} must be a non-empty list of numbers > 0, got {grid!r}")
    if any(not isinstance(s, int) for s in config["ode_steps"]) or len(config["ode_steps"]) < 2:
        raise ValueError(f"ode_steps must list at least two integers, got {config['ode_steps']!r}")
    from rayml.architectures.l2d import SOLVERS

    bad = [s for s in config["solvers"] if s not in SOLVERS or s == "adaptive_heun"]
    if not config["solvers"] or bad:
        raise ValueError(f"solvers must be fixed-step solvers of {SOLVERS[:2]}, got {config['solvers']!r}")
    if not 0 < float(config["adaptive_tol"]) < 1 or not float(config["noise_scale"]) > 0:
        raise ValueError("adaptive_tol must be in (0, 1) and noise_scale > 0")


def _l2d_cfg(config):
    from rayml.architectures.l2d import L2DConfig

    return L2DConfig(lora_rank=int(config["lora_rank"]), lora_alpha=float(config["lora_rank"]),
                     flow_dim=int(config["flow_dim"]), noise_scale=float(config["noise_scale"]),
                     cond_dim=int(config["cond_dim"]))


@lru_cache(maxsize=1)
def _base(model: str = "base"):
    """The frozen base and its tokenizer, loaded once per process (nothing modifies it: the flow path
    and the LoRA baseline wrap it). Loading builds a model, whose default initialisation draws from
    the global torch random stream: forked here, so no caller's later draws depend on whether this
    process had loaded it before (what made the LoRA runs differ per worker, issue 17)."""
    import torch

    import rayml.llm as L

    with torch.random.fork_rng():
        lm = L.pretrained(model)
    lm.model.eval()
    return lm.model, lm.tokenizer


def _build(method, config, base):
    """The L2D flow path or the LoRA baseline around ``base``; its new weights come from the global
    torch random stream, so callers seed it right before (nothing else may draw in between)."""
    from rayml.architectures import l2d

    if method == "l2d":
        return l2d.FlowLM(base, _l2d_cfg(config))
    return l2d.LoRALM(base, l2d.lora_rank_for_budget(base.config, _budget(config, base.config)))


def _budget(config, base_config) -> int:
    """Trainable parameters of the L2D flow path for this config (the LoRA baseline matches it).

    Counted on the meta device, afresh each call: no per-process cache and no draw from the global
    torch random stream. (Before: a per-process cache filled by loading a base, whose initialisation
    drew from the global stream between ``torch.manual_seed`` and the LoRA's initialisation in the
    first LoRA run of each worker process only, so the record depended on which worker ran what.)
    """
    from rayml.architectures import l2d

    return l2d.flow_budget(base_config, _l2d_cfg(config))


def _encode(tok, item, real: bool) -> tuple[list[int], list[int]]:
    """(prompt ids starting with BOS, answer ids ending with the end token) of one item."""
    if real:
        from rayml.alignment import text_tasks as tt

        return tok.encode(tt.prompt_text(item), bos=True), tok.encode(item.answer) + [tok.eos_id]
    return [tok.bos_id] + tok.encode(item.prompt), tok.encode(item.answer) + [tok.eos_id]


def _batch(tok, items, real: bool = False):
    """(ids, targets) of ``<bos> prompt answer <eos>`` rows, right-padded, loss on answer and eos only."""
    import torch

    rows = []
    for it in items:
        p, a = _encode(tok, it, real)
        ids = p + a
        tgt = [IGNORE] * (len(p) - 1) + a + [IGNORE]
        rows.append((ids, tgt))
    L = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), L), tok.pad_id, dtype=torch.long)
    tgt = torch.full((len(rows), L), IGNORE, dtype=torch.long)
    for i, (a, b) in enumerate(rows):
        ids[i, :len(a)] = torch.tensor(a)
        tgt[i, :len(b)] = torch.tensor(b)
    return ids, tgt


def _items(config, seed, n, split):
    """``n`` items: the substrate's reversed-sum additions, or (a real model) plain-text questions of
    ``task`` with levels drawn uniformly (training) or ``n // len(levels)`` per level, interleaved (test)."""
    if _real(config):
        from rayml.alignment import text_tasks as tt

        levels = [int(v) for v in config["levels"]]
        rng = np.random.default_rng(seed)
        if split == "train":
            return [tt.make_item(config["task"], int(levels[rng.integers(len(levels))]), rng, "train") for _ in range(n)]
        per = max(1, n // len(levels))
        by_level = [[tt.make_item(config["task"], lv, rng, "test") for _ in range(per)] for lv in levels]
        return [it for group in zip(*by_level) for it in group]
    from rayml.llm import tasks

    digits = [int(d) for d in config["digits"]]  # an equal share of each, interleaved
    per = [tasks.make_items("add", n // len(digits) + (k < n % len(digits)), int(seed) + k, split=split, digits=d)
           for k, d in enumerate(digits)]
    return [it for k in range(max(map(len, per))) for group in per if k < len(group) for it in [group[k]]]


def _trainable_state(model) -> dict:
    return {k: v.detach().numpy().copy() for k, v in model.named_parameters() if v.requires_grad}


def _load_state(model, state):
    import torch

    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in state.items():
            params[k].copy_(torch.as_tensor(np.array(v)))


def train_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """One finetuning run ``(phase, method, lr, seed index, seed)``: trainable weights, held-out loss."""
    import time

    import torch

    from rayml.architectures import l2d

    phase, method, lr, si, seed = item
    config = shared["config"]
    real = _real(config)
    base, tok = _base(config["model"])
    torch.manual_seed(int(seed) % (2**63))  # the adapters' initialisation depends on the item only
    model = _build(method, config, base)
    train = shared["train"]
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(int(seed) % (2**63))
    steps, bsz = int(config["steps"]), int(config["batch"])
    t0, c0 = time.perf_counter(), time.process_time()
    losses = []
    for step in range(steps):
        rows = np.random.default_rng([int(seed) % (2**63), step]).integers(0, len(train), bsz)
        ids, tgt = _batch(tok, [train[i] for i in rows], real)
        scale = min(1.0, (step + 1) / max(1, steps // 10))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        loss = (l2d.l2d_loss(model, ids, tgt, gen, only_targets=True) if method == "l2d"
                else l2d.lm_loss(model, ids, tgt))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    timings = {"train_s": time.perf_counter() - t0, "train_cpu_s": time.process_time() - c0}
    ids, tgt = _batch(tok, shared["heldout"], real)
    with torch.no_grad():
        g2 = torch.Generator().manual_seed(12345)
        held = float(l2d.l2d_loss(model, ids, tgt, g2, only_targets=True) if method == "l2d"
                     else l2d.lm_loss(model, ids, tgt))
        diag = _flow_diagnostics(model, ids, tgt) if method == "l2d" else {}
    return {"phase": phase, "method": method, "lr": lr, "si": si, "state": _trainable_state(model),
            "heldout_loss": held, "curve": losses[:: max(1, steps // 30)], "timings": timings,
            "trainable": l2d.trainable_parameters(model), "diagnostics": diag}


DIAG_TIMES = (0.0, 0.5, 0.9, 1.0)  # t = 0 is the frozen base exactly


def _flow_diagnostics(flow, ids, tgt) -> dict:
    """Issue 42's diagnostics of a trained flow path on the held-out rows: the cross-entropy per answer
    token at fixed ``t`` (at ``t = 1`` the flow input is the target's own representation, so a path that
    reads its input reaches about 0 there; at ``t = 0.5`` the input is nearly pure noise and only the
    context helps) and the norm of the output scale ``m(t) - m(0)`` (zero at initialisation: how far the
    modulation has opened)."""
    import torch

    from rayml.architectures import l2d

    out = {}
    for t in DIAG_TIMES:
        g = torch.Generator().manual_seed(12345)
        out[f"heldout_ce_t{t:g}"] = float(l2d.l2d_loss(flow, ids, tgt, g, only_targets=True, t=t))
        c = flow._cond(torch.full((1, 1), t), None)
        out[f"scale_norm_t{t:g}"] = float((flow.head(c) - flow.head(flow._cond(torch.zeros(1, 1), None))).norm())
    return out


def _by_length(generate, prompts: list, max_new: int):
    """Run ``generate(prompt tensor)`` -> ``(ids (b, max_new), evals (b,))`` on each group of prompts of
    equal token length and put the rows back in the items' order."""
    import torch

    ids = torch.zeros(len(prompts), max_new, dtype=torch.long)
    evals = torch.zeros(len(prompts), dtype=torch.long)
    for n in sorted({len(p) for p in prompts}):
        rows = [i for i, p in enumerate(prompts) if len(p) == n]
        out, ev = generate(torch.tensor([prompts[i] for i in rows]))
        ids[rows], evals[rows] = out, ev
    return ids, evals


def _generate_base(model, prompts, max_new):
    """Greedy answers of an ordinary LM (base or LoRA) for prompts of equal token length."""
    import torch

    cache = model.new_cache(prompts.shape[0], capacity=prompts.shape[1] + max_new + 1)
    logits = model(prompts, cache=cache, last_only=True)
    out = []
    for _ in range(max_new):
        nxt = logits[:, -1].argmax(-1)
        out.append(nxt)
        logits = model(nxt[:, None], cache=cache)
    return torch.stack(out, 1), torch.ones(prompts.shape[0], dtype=torch.long)


def _generate_l2d(flow, prompts, max_new, method, steps, gen, tol, max_evals=256):
    """Answers of the L2D model for prompts of equal length: per token, the ODE from noise (drawn from
    ``gen``) to the argmax representation; velocity evaluations per row."""
    import torch

    from rayml.architectures import l2d

    b = prompts.shape[0]
    cache = flow.base.new_cache(b, capacity=prompts.shape[1] + max_new + 1)
    h, cache = flow.main_path(prompts, cache)
    out, evals = [], torch.zeros(b, dtype=torch.long)
    for _ in range(max_new):
        x0 = torch.randn(b, 1, flow.cfg.flow_dim, generator=gen) * flow.cfg.noise_scale
        logits, ev = l2d.solve(flow, h[:, -1:], cache, x0, method=method, steps=max(1, steps), rtol=tol, atol=tol,
                               max_evals=max_evals)
        nxt = logits[:, -1].argmax(-1)
        out.append(nxt)
        evals += ev
        h, cache = flow.main_path(nxt[:, None], cache)
    return torch.stack(out, 1), evals


def _score(tok, items, gen_ids, real: bool):
    if real:
        from rayml.alignment.text_tasks import score
    else:
        from rayml.llm.tasks import score

    scores = []
    for it, row in zip(items, gen_ids.tolist()):
        cut = row.index(tok.eos_id) if tok.eos_id in row else len(row)
        scores.append(score(it, tok.decode(row[:cut])))
    return scores


def _max_new(config) -> int:
    """Tokens generated per answer: the longest answer and the end token (digits are single tokens)."""
    if _real(config):
        return (max(int(v) for v in config["levels"]) + 1 if config["task"] == "add" else 3) + 1
    return max(int(d) for d in config["digits"]) + 2


def eval_task(item: tuple, shared: Mapping[str, Any]) -> dict:
    """Accuracy of one ``(method, seed index, solver, steps, state, eval seed)`` on the test items."""
    import torch

    method, si, solver, steps, state, eseed = item
    config = shared["config"]
    real = _real(config)
    base, tok = _base(config["model"])
    items = shared["test"]
    max_new = _max_new(config)
    out = {"method": method, "si": si, "solver": solver, "steps": steps}
    with torch.no_grad():
        if method == "base":
            model = base
        elif method == "lora":
            model = _build("lora", config, base)
            _load_state(model, state)
            model = model.base
        else:
            torch.manual_seed(1000 + si)
            flow = _build("l2d", config, base)
            if state is not None:
                _load_state(flow, state)
            if solver == "adaptive_heun":
                items = items[: int(config["adaptive_items"])]
        prompts = [_encode(tok, it, real)[0] for it in items]
        if method in ("base", "lora"):
            ids, evals = _by_length(lambda p: _generate_base(model, p, max_new), prompts, max_new)
        else:
            gen = torch.Generator().manual_seed(int(eseed) % (2**63))
            ids, evals = _by_length(lambda p: _generate_l2d(flow, p, max_new, solver, steps, gen,
                                                            float(config["adaptive_tol"]),
                                                            int(config["adaptive_max_evals"])), prompts, max_new)
    out["correct"] = _score(tok, items, ids, real)
    out["evals"] = (evals.float() / max_new).tolist()  # velocity evaluations per generated token
    return out


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune, finetune (L2D and LoRA at equal trainable parameters), evaluate against ODE steps; on Ray."""
    _check(config)
    config = _effective(config)
    s_train, s_held, s_test, s_eval = runtime.seeds(seed, 4)
    train = _items(config, s_train, int(config["train_items"]), "train")
    held = _items(config, s_held, 32 if _real(config) else 64, "train")
    test = _items(config, s_test, int(config["eval_items"]), "test")
    n_tune, n_test = int(config["tune_seeds"]), int(config["seeds"])
    all_seeds = runtime.seeds(seed + 1, n_tune + n_test)
    lrs = [float(v) for v in config["lr_grid"]]
    shared = {"config": dict(config), "train": train, "heldout": held, "test": test}
    methods = ("l2d", "lora")
    tune = runtime.pmap(train_task, [("tune", m, lr, i, s) for m in methods for lr in lrs
                                     for i, s in enumerate(all_seeds[:n_tune])],
                        shared=shared, chunk_size=1, desc="l2d tuning runs")
    chosen = {m: min(lrs, key=lambda lr: np.mean([r["heldout_loss"] for r in tune if r["method"] == m and r["lr"] == lr]))
              for m in methods}
    trained = runtime.pmap(train_task, [("train", m, chosen[m], i, s) for m in methods
                                        for i, s in enumerate(all_seeds[n_tune:])],
                           shared=shared, chunk_size=1, desc="l2d training runs")
    eval_seeds = runtime.seeds(s_eval, n_test)
    steps_list = [int(s) for s in config["ode_steps"]]
    jobs = [("base", -1, "none", 0, None, 0)]
    for r in trained:
        if r["method"] == "lora":
            jobs.append(("lora", r["si"], "none", 0, r["state"], 0))
        else:
            jobs += [("l2d", r["si"], sv, st, r["state"], eval_seeds[r["si"]])
                     for sv in config["solvers"] for st in steps_list]
            jobs.append(("l2d", r["si"], "adaptive_heun", 1, r["state"], eval_seeds[r["si"]]))
    for i in range(n_test):  # the control: a flow path at its initialisation (no finetuning)
        jobs += [("untrained", i, config["solvers"][0], st, None, eval_seeds[i]) for st in (steps_list[0], steps_list[-1])]
    evals = runtime.pmap(eval_task, jobs, shared=shared, chunk_size=1, desc="l2d evaluations")

    acc_rows, step_rows = [], []
    for e in evals:
        seeds_of = range(n_test) if e["method"] == "base" else [e["si"]]
        name = f"l2d-{e['solver']}" if e["method"] == "l2d" else e["method"]
        for si in seeds_of:
            for j, (c, ev) in enumerate(zip(e["correct"], e["evals"])):
                level = "top" if e["steps"] == max(steps_list) else ("first" if e["steps"] == steps_list[0] else "mid")
                acc_rows.append({"method": name, "seed": si, "steps": e["steps"], "level": level, "item": j,
                                 "metric": "correct", "value": float(c)})
                if e["solver"] == "adaptive_heun":
                    step_rows.append({"method": name, "seed": si, "item": j, "metric": "evals_per_token",
                                      "value": float(ev)})
    # the base at steps = 0 is also the L2D model at t = 0 (tested exactly): one curve
    for sv in config["solvers"]:
        for r in [r for r in acc_rows if r["method"] == "base"]:
            acc_rows.append({**r, "method": f"l2d-{sv}", "steps": 0, "level": "zero"})

    def acc(method, steps=None, seed=None):
        v = [r["value"] for r in acc_rows if r["method"] == method and (steps is None or r["steps"] == steps)
             and (seed is None or r["seed"] == seed)]
        return float(np.mean(v)) if v else float("nan")

    main = f"l2d-{config['solvers'][0]}"
    top = max(steps_list)
    curve = {sv: {str(st): acc(f"l2d-{sv}", st) for st in [0] + steps_list} for sv in config["solvers"]}
    means = [curve[config["solvers"][0]][str(st)] for st in [0] + steps_list]
    gains = np.diff(means)
    adaptive_evals = [r["value"] for r in step_rows]
    metrics = {
        "accuracy": acc(main, top), "accuracy_1_step": acc(main, steps_list[0]), "accuracy_base": acc("base"),
        "accuracy_by_steps": curve, "step_gain": acc(main, top) - acc(main, steps_list[0]),
        "monotone_fraction": float(np.mean(gains >= -1e-12)),
        "adaptive": {"accuracy": acc("l2d-adaptive_heun"), "evals_per_token_mean": float(np.mean(adaptive_evals)),
                     "evals_per_token_min": float(np.min(adaptive_evals)), "evals_per_token_max": float(np.max(adaptive_evals))},
        "accuracy_top_steps_on_adaptive_items": float(np.mean([r["value"] for r in acc_rows if r["method"] == main
                                                               and r["steps"] == top and r["item"] < int(config["adaptive_items"])])),
        "trainable_parameters": trained[0]["trainable"] if trained[0]["method"] == "l2d" else trained[-1]["trainable"],
    }
    # issue 42: does the flow path read its own input (the loss at t = 1 far below t = 0.5), has the modulation opened
    l2d_runs = [r for r in trained if r["method"] == "l2d"]
    metrics["flow_diagnostics"] = {k: float(np.mean([r["diagnostics"][k] for r in l2d_runs]))
                                   for k in l2d_runs[0]["diagnostics"]} if l2d_runs else {}
    metrics["flow_diagnostics"]["lora_heldout_ce"] = float(np.mean([r["heldout_loss"] for r in trained
                                                                    if r["method"] == "lora"]))
    metrics["adaptive"]["accuracy_ratio_to_top_steps"] = ratio(metrics["adaptive"]["accuracy"],
                                                              metrics["accuracy_top_steps_on_adaptive_items"])
    # the share of problems whose every token's adaptive solve ran out of evaluations (issue 42: nearly all did)
    cap = int(config["adaptive_max_evals"])
    metrics["adaptive"]["cap_share"] = float(np.mean([r["value"] >= cap - 1e-6 for r in step_rows])) if step_rows else float("nan")
    first_adaptive = np.mean([r["value"] for r in acc_rows if r["method"] == main and r["steps"] == steps_list[0]
                              and r["item"] < int(config["adaptive_items"])])
    metrics["accuracy_ratio_1_step_on_adaptive_items"] = ratio(float(first_adaptive),
                                                               metrics["accuracy_top_steps_on_adaptive_items"])
    lora_tr = next(r["trainable"] for r in trained if r["method"] == "lora")
    baselines = {"lora": {"accuracy": acc("lora"), "trainable_parameters": lora_tr},
                 "base": {"accuracy": acc("base")},
                 "untrained_flow": {"accuracy": acc("untrained", top),
                                    "step_gain": acc("untrained", top) - acc("untrained", steps_list[0])}}
    budget = {"trainable_parameters": {"l2d": metrics["trainable_parameters"], "lora": lora_tr},
              "steps": int(config["steps"]), "batch": int(config["batch"]), "train_items": int(config["train_items"]),
              "tuning": {"lr_grid": lrs, "chosen_lr": chosen, "tune_seeds": n_tune, "criterion": "held-out loss"},
              "test_seeds": n_test, "model": config["model"]}
    tuning_rows = [{"method": r["method"], "lr": r["lr"], "seed": r["si"], "metric": "heldout_loss",
                    "value": r["heldout_loss"]} for r in tune]
    curve_rows = [{"method": r["method"], "seed": r["si"], "point": j, "metric": "train_loss", "value": v}
                  for r in trained for j, v in enumerate(r["curve"])]
    timing_rows = [{"method": r["method"], "seed": r["si"], "metric": k, "value": v}
                   for r in trained for k, v in r["timings"].items()]
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"accuracy": acc_rows, "adaptive_steps": step_rows, "tuning": tuning_rows,
                           "curves": curve_rows, "timing_train": timing_rows},
                   budget=budget)


def ratio(num: float, den: float) -> float:
    """``num / den``, or NaN when ``den`` is 0: a ratio of two zero accuracies decides nothing, so a
    claim on it is ``incomplete`` (issue 42), neither holding nor failing."""
    return float(num) / float(den) if den else float("nan")


def _claims(config_solver="euler"):
    main = f"l2d-{config_solver}"
    # The gate compares L2D with the frozen base it starts from (session 5): the base already answers about
    # half the items (its 3-digit sums), so an absolute floor (the old ">= 20%") passed with a flow path
    # that had learned nothing (full record: 0.502 against the base's 0.500).
    learned = Claim(text="sanity (gate): the flow path learned something: L2D at its most ODE steps answers more test "
                         "items than the frozen base it starts from (paired over seed x item); without it the "
                         "step-count claims compare the base with itself",
                    metric="metrics.accuracy", compare="metrics.accuracy_base", op=">", kind="sanity",
                    test="paired sign test over seeds", table="accuracy",
                    a={"method": main, "level": "top"}, b={"method": "base"}, pair_on=("seed", "item"))
    steps_up = Claim(
        text="L2D's accuracy rises with ODE steps: most steps vs one step (paired over seed x item)",
        metric="metrics.accuracy", compare="metrics.accuracy_1_step", op=">",
        test="paired sign test over seeds", table="accuracy",
        a={"method": main, "level": "top"}, b={"method": main, "level": "first"}, pair_on=("seed", "item"),
        source="abstract: 'By increasing the number of diffusion steps, we show our finetuned models "
               "achieve monotonically increasing accuracy'")
    adaptive = Claim(
        text="the adaptive solver keeps >= 95% of the most-steps accuracy (same items), choosing its steps per problem",
        metric="metrics.adaptive.accuracy_ratio_to_top_steps", compare=0.95, op=">=",
        source="abstract: 'autonomously determine the compute required for a given problem by leveraging "
               "adaptive ODE solvers'",
        controls=(Control("euler, 1 step", "metrics.accuracy_ratio_1_step_on_adaptive_items"),))
    g, steps_up, adaptive = gate(learned, steps_up, adaptive)
    return (
        steps_up,
        Claim(text="L2D at its most steps is more accurate than LoRA finetuning with the same trainable parameters",
              metric="metrics.accuracy", compare="baselines.lora.accuracy", op=">",
              test="paired sign test over seeds", table="accuracy",
              a={"method": main, "level": "top"}, b={"method": "lora"},
              pair_on=("seed", "item"),
              source="abstract: 'We show our method can be more effective ... than traditional finetuning'",
              controls=(Control("base", "baselines.base.accuracy", a={"method": "base"}),)),
        adaptive,
        g,
    )


CLAIMS = _claims()


def plots(record: Mapping) -> dict:
    """Accuracy against ODE steps (seed spread as a band) with LoRA and the base; adaptive evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["accuracy"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax = axes[0]
    for method in sorted({r["method"] for r in rows if r["method"].startswith("l2d-") and r["method"] != "l2d-adaptive_heun"}):
        steps = sorted({r["steps"] for r in rows if r["method"] == method})
        seeds = sorted({r["seed"] for r in rows if r["method"] == method})
        per = np.array([[np.mean([r["value"] for r in rows if r["method"] == method and r["steps"] == st
                                  and r["seed"] == s]) for st in steps] for s in seeds])
        x = np.array(steps, dtype=float)
        x[0] = 0.5  # steps 0 (the base) on the log axis
        ax.plot(x, per.mean(0), marker="o", label=method)
        ax.fill_between(x, per.min(0), per.max(0), alpha=0.2)
    for name, style in (("lora", "--"), ("base", ":")):
        ax.axhline(record["baselines"][name]["accuracy"], ls=style, color="k", label=f"{name} (equal budget)" if name == "lora" else name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ODE steps (0.5 = base, t = 0)")
    cfg = record.get("config", {})
    what = (f"{cfg.get('model')}: {cfg.get('task')} questions, levels {cfg.get('levels')}" if cfg.get("model") in REAL_MODELS
            else "4-digit addition")
    ax.set_ylabel(f"test accuracy ({what})", fontsize=8)
    ax.legend(fontsize=7)
    ax = axes[1]
    ev = [r["value"] for r in record["tables"]["adaptive_steps"]]
    ax.hist(ev, bins=20)
    ax.set_xlabel("adaptive solver: velocity evaluations per token, per problem")
    ax.set_ylabel("problems x seeds")
    fig.tight_layout()
    return {"accuracy_vs_steps": fig}


EXPERIMENT = Experiment(
    name=METHOD,
    paper=PAPER,
    ray="finetuning runs (method x lr x tuning seed, method x test seed) and evaluations (method x seed x solver x "
        "steps) as tasks; adapters through the object store, the frozen base (substrate or SmolLM2-135M) loaded once "
        "per worker process from the package or that node's own cache",
    checked_against="abstract; the authors' code (SakanaAI/L2D: flow path, modulation head, velocity, solvers); "
                    "research notes; t = 0 reproduces the base logits exactly, on the substrate and on SmolLM2-135M "
                    "(tests); an untrained flow path generates SmolLM2's greedy answers token for token (test); the "
                    "answer-positions-only loss equals the full-sequence loss and its gradients (test)",
    sizes=SIZES,
    run=run, check=_check,
    claims=CLAIMS,
    plots=plots,
)
