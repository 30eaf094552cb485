"""ZapFormat reproduction: dynamic pruning of the Earley chart, and the structured-generation benchmark.

``run``: the paper's claim ("Earley-Driven Dynamic Pruning for Efficient Structured Decoding",
ICML 2025: pruning "significantly reduc[es] memory occupation of the Earley algorithm's states"
and, through the state cache it enables, speeds up mask computation). For each (schema, seed)
a token sequence is sampled under our own masks with random logits (no model: every output is
checked to parse and validate with ``jsonschema`` when installed); the same tokens are then
replayed by the same engine with pruning on and with pruning off (both with the chart-keyed state
cache, fresh caches each), recording live Earley items, chart depth (Earley sets), the chart's
bytes, the state-cache hit rate, per-mask time, and whether the two masks are identical at every
step. Tasks run through ``rayml.runtime.pmap``.

``bench``: ``BENCH_SUITE``, 24 hand-written JSON Schemas (nesting, ``$ref`` recursion,
``maxLength`` / ``minLength``, ``pattern``, ``format``, ``enum``, ``anyOf``, bounded arrays,
``additionalProperties``, long free text), then generated ones for larger sizes. Per vocabulary
(Mistral 32k SentencePiece, Tekken 131k) and schema, ``queries`` token sequences are sampled
under the intersection of every engine's masks, then every engine (ours: the fast engine on the
compiled core, the same engine in pure Python (``rayml-pure``), the unpruned ablation and the
pure-Python memo-free reference; the peers installed: xgrammar, llguidance,
outlines-core; formatron 0.5.0 cannot import with pydantic >= 2.12) compiles the schema with its
caches cleared and replays them: query 0 is the cold request (ours pays the vocabulary walks the
cleared caches held; the counted walks of the JSON string character DFAs are made once per
vocabulary with the ``TokenIndex``, outside the timing, as the peers' tokenizer preprocessing is,
and kept), the later queries are warm. Reported per engine: compile p50, mask mean /
p50 / p99 cold and warm apart, accept mean, failures (compile errors and rejected sequences), the
share of steps whose mask equals xgrammar's exactly, and the ratios to the fastest peer; the load
average before and after is printed with the table (timings: the calling thread's CPU time, so that
time preempted on a shared machine is not counted; ``clock=wall`` for wall clock; one thread).

Assumed: random logits with a bonus for closing bytes (``"``, ``]``, ``}``) and EOS after
``budget`` steps stand in for a model, so that generations end; timings are single-threaded
wall clock on a shared CPU.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.decoding import (GrammarMatcher, MatcherConfig, TokenIndex, allocate_token_bitmask, bitmask_to_bool,
                               byte_vocabulary, compile_grammar, load_mistral, schema_grammar)
from rayml.decoding.json_schema import clear_caches
from rayml.results import Claim

SOURCE_MEMORY = ("abstract: 'a novel dynamic pruning strategy based on the Earley algorithm that identifies and "
                 "eliminates invalid or redundant Earley states in real-time, significantly reducing memory "
                 "occupation of the Earley algorithm's states'")
SOURCE_CACHE = ("abstract: 'This further enables us to use a state cache to speed up structured generations on a "
                "large number of queries'")

PAPER = "Earley-Driven Dynamic Pruning for Efficient Structured Decoding (ZapFormat, Formatron), ICML 2025"
METHOD = "zapformat"
ARMS = ("pruned", "unpruned")

SIZES = {
    "tiny": dict(vocab="bytes", schemas=2, seeds=2, max_tokens=60, budget=15, suite_seed=0),
    "quick": dict(vocab="mistral-32k", schemas=6, seeds=4, max_tokens=150, budget=40, suite_seed=0),
    "full": dict(vocab="tekken-131k", schemas=50, seeds=16, max_tokens=400, budget=80, suite_seed=0),
}
BENCH_SIZES = {
    "tiny": dict(vocabs=["bytes"], schemas=2, queries=2, max_tokens=40, budget=10, peers=["xgrammar"], suite_seed=1,
                 clock="thread"),
    "quick": dict(vocabs=["mistral-32k", "tekken-131k"], schemas=24, queries=2, max_tokens=120, budget=40,
                  peers=["xgrammar", "llguidance", "outlines-core", "formatron"], suite_seed=1, clock="thread",
                  # outlines-core indexes each schema's regex over the whole vocabulary: about 100 s a
                  # schema on Tekken 131k, hours for the suite on a shared 2-core machine
                  skip={"outlines-core": ["tekken-131k"]},
                  vllm=dict(batch=8, max_tokens=96, rounds=3)),  # zapformat_vllm: skipped without the vLLM venv
    "full": dict(vocabs=["mistral-32k", "tekken-131k"], schemas=60, queries=4, max_tokens=300, budget=60,
                 peers=["xgrammar", "llguidance", "outlines-core", "formatron"], suite_seed=1, clock="thread",
                 skip={"outlines-core": ["tekken-131k"]},  # as at quick: hours on Tekken 131k
                 vllm=dict(batch=8, max_tokens=96, rounds=6)),
}

# ------------------------------------------------------------------------------------------
# the schema suite

_WORDS = ["id", "name", "age", "tags", "email", "score", "items", "price", "kind", "meta", "owner", "city", "note",
          "count", "flag", "level", "code", "title", "data", "value"]


def _leaf(rng: np.random.Generator) -> dict:
    k = int(rng.integers(0, 10))
    if k == 0:
        return {"type": "string"}
    if k == 1:
        return {"type": "string", "maxLength": int(rng.integers(3, 40))}
    if k == 2:
        lo = int(rng.integers(0, 5))
        return {"type": "string", "minLength": lo, "maxLength": lo + int(rng.integers(20, 100))}
    if k == 3:
        return {"type": "integer"}
    if k == 4:
        lo = int(rng.integers(-100, 100))
        return {"type": "integer", "minimum": lo, "maximum": lo + int(rng.integers(1, 1000))}
    if k == 5:
        return {"type": "number"}
    if k == 6:
        return {"type": "boolean"}
    if k == 7:
        return {"enum": [str(w) for w in rng.choice(_WORDS, size=int(rng.integers(2, 6)), replace=False)]}
    if k == 8:
        return {"anyOf": [{"type": "integer"}, {"type": "null"}, {"type": "string", "maxLength": 10}]}
    return {"type": "null"}


def random_schema(rng: np.random.Generator, depth: int = 0) -> dict:
    """A random JSON Schema: objects (1-6 properties, random required set, no extra keys) and
    arrays (random ``minItems`` / ``maxItems``) nested up to depth 3, leaves from ``_leaf``."""
    r = rng.random()
    if depth < 3 and (depth == 0 or r < 0.45):
        names = [str(w) for w in rng.choice(_WORDS, size=int(rng.integers(1, 7)), replace=False)]
        props = {n: random_schema(rng, depth + 1) for n in names}
        req = [n for n in names if rng.random() < 0.6] or names[:1]
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}
    if depth < 3 and r < 0.65:
        lo = int(rng.integers(0, 3))
        s = {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo}
        if rng.random() < 0.6:
            s["maxItems"] = lo + int(rng.integers(1, 5))
        return s
    return _leaf(rng)


def schema_suite(n: int, seed: int) -> list[dict]:
    """``n`` schemas of varied shape (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    return [random_schema(rng) for _ in range(n)]


# ------------------------------------------------------------------------------------------
# per-process caches (vocabularies, token indexes, peers are rebuilt in each worker)

_VOCABS: dict = {}


def vocab_and_index(name: str):
    """The named vocabulary (``bytes`` or a Mistral one) and its ``TokenIndex``, cached."""
    if name not in _VOCABS:
        vocab = byte_vocabulary() if name == "bytes" else load_mistral(name)
        _VOCABS[name] = (vocab, TokenIndex(vocab))
    return _VOCABS[name]


def sample_tokens(compiled, vocab, seed: int, max_tokens: int, budget: int, others=()) -> list[int]:
    """Mask-constrained sampling with random logits (closing bytes and EOS favoured after
    ``budget`` steps); returns the token ids, ending with EOS when the text completed. With
    ``others`` (peer matchers), tokens are drawn from the intersection of all masks, so that every
    engine accepts the sequence (peers deviate from RFC 8259 in places, and llguidance allows only
    canonical tokenizations of forced text)."""
    rng = np.random.default_rng(seed)
    bonus = np.zeros(compiled.index.vocab_size)
    bonus[: vocab.size] = [sum(b in b'"]}' for b in t) for t in vocab.tokens]
    # prefer the canonical token among byte-identical ones (SentencePiece byte-fallback pieces
    # duplicate normal pieces; llguidance allows only the canonical one where text is forced)
    last_id: dict = {}
    for i, t in enumerate(vocab.tokens):
        if t:
            last_id[t] = i
    penalty = np.zeros(compiled.index.vocab_size)
    penalty[[i for i, t in enumerate(vocab.tokens) if t and last_id[t] != i]] = -50.0
    eos = np.zeros(compiled.index.vocab_size, bool)
    eos[list(vocab.eos_ids)] = True
    m = GrammarMatcher(compiled)
    out = []
    words = np.zeros(compiled.index.n_words, np.uint32)
    for step in range(max_tokens):
        if others:
            common = m.next_token_words().copy()
            for o in others:
                o.fill(words)
                common &= words
            allowed = np.flatnonzero(bitmask_to_bool(common.view(np.int32)[None], compiled.index.vocab_size)[0])
            if not allowed.size:
                break
        else:
            allowed = m.allowed_tokens()
        logits = rng.standard_normal(allowed.size) * 2 + penalty[allowed]
        if step >= budget:
            logits = logits + 3 * bonus[allowed] + 8 * eos[allowed]
        tok = int(allowed[np.argmax(logits)])
        m.accept_token(tok)
        for o in others:
            o.accept(tok)
        out.append(tok)
        if eos[tok]:
            break
    return out


def _chart_bytes(chart) -> int:
    import sys

    total = 0
    for s in chart:
        total += sys.getsizeof(s.scan) + sys.getsizeof(s.wait) + sys.getsizeof(s.leo) + sys.getsizeof(s.key[0])
        for its in list(s.scan.values()) + list(s.wait.values()):
            total += sys.getsizeof(its) + sum(sys.getsizeof(it) for it in its)
    return total


def replay_ours(schema, index: TokenIndex, sequences: list[list[int]], prune: bool, memory: bool = False,
                cold: bool = False) -> dict:
    """Compile ``schema`` once and replay every token sequence (one query each) with pruning
    on/off; the compiled grammar, and so the state cache, is shared by the queries. Every replay
    compiles from scratch (DFAs included); ``cold`` also empties the vocabulary index's cache of
    string-character walks (``TokenIndex.count_base``), which otherwise persists across grammars.

    Runs the pure-Python engine (``MatcherConfig(native=False)``): the chart bytes and the peak
    memory measured here are those of Python objects (``sys.getsizeof``, ``tracemalloc``), which
    do not see the compiled core's memory; the bench times the compiled core separately."""
    clear_caches()
    if cold:
        index.clear_cache()
    t0 = time.perf_counter()
    cg = compile_grammar(schema_grammar(schema), index, MatcherConfig(prune=prune, native=False))
    compile_s = time.perf_counter() - t0
    bm = allocate_token_bitmask(1, index.vocab_size)
    times, items, depth, cbytes, digests, warm = [], [], [], [], [], []
    if memory:
        tracemalloc.start()
    for q, tokens in enumerate(sequences):
        m = GrammarMatcher(cg)
        for tok in tokens:
            t0 = time.perf_counter()
            m.fill_next_token_bitmask(bm)
            times.append(time.perf_counter() - t0)
            if q > 0:
                warm.append(times[-1])
            items.append(m.live_items())
            depth.append(m.chart_depth())
            if not memory:
                cbytes.append(_chart_bytes(m.chart))
            digests.append(hash(bm.tobytes()))
            if not m.accept_token(tok):
                raise AssertionError("a replayed token was rejected")
    peak = 0
    if memory:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    st = cg.stats
    return {"compile_s": compile_s, "mask_s": times, "warm_mask_s": warm, "live_items": items, "depth": depth, "chart_bytes": cbytes,
            "digests": digests, "peak_bytes": peak,
            "cache_hit_rate": st["cache_hits"] / max(1, st["cache_hits"] + st["cache_misses"])}


def _validate(text: bytes, schema) -> float:
    try:
        import jsonschema
    except ImportError:  # pragma: no cover
        jsonschema = None
    try:
        doc = json.loads(text.decode("utf-8"))
        if jsonschema is not None:
            jsonschema.validate(doc, schema)
        return 1.0
    except Exception:  # noqa: BLE001 - an invalid output is a measured failure
        return 0.0


def run_one(item: tuple, config: Mapping[str, Any]) -> dict:
    """One schema: sample ``seeds`` token sequences (queries), then replay them all with pruning
    on and off (one compiled grammar per arm, shared by the queries)."""
    k, seeds, schema = item
    vocab, index = vocab_and_index(config["vocab"])
    cg = compile_grammar(schema_grammar(schema), index)
    sequences = [sample_tokens(cg, vocab, s, int(config["max_tokens"]), int(config["budget"])) for s in seeds]
    completed = [bool(t) and t[-1] in vocab.eos_ids for t in sequences]
    valid = [_validate(b"".join(vocab.tokens[x] for x in t[:-1]), schema) for t, c in zip(sequences, completed) if c]
    arms = {}
    for arm in ARMS:
        r = replay_ours(schema, index, sequences, prune=(arm == "pruned"))
        mem = replay_ours(schema, index, sequences, prune=(arm == "pruned"), memory=True)
        arms[arm] = {
            "mean_live_items": float(np.mean(r["live_items"])),
            "max_live_items": float(np.max(r["live_items"])),
            "mean_depth": float(np.mean(r["depth"])),
            "max_depth": float(np.max(r["depth"])),
            "mean_chart_kib": float(np.mean(r["chart_bytes"])) / 1024,
            "max_chart_kib": float(np.max(r["chart_bytes"])) / 1024,
            "cache_hit_rate": float(r["cache_hit_rate"]),
            "digests": r["digests"],
            "timing_mask_us": float(np.mean(r["mask_s"]) * 1e6),
            "timing_warm_mask_us": float(np.mean(r["warm_mask_s"]) * 1e6) if r["warm_mask_s"] else float("nan"),
            "timing_peak_kib": mem["peak_bytes"] / 1024,
        }
    same = float(arms["pruned"]["digests"] == arms["unpruned"]["digests"])
    for a in arms.values():
        del a["digests"]
    return {"schema": k, "seed": 0, "tokens": float(np.mean([len(t) for t in sequences])),
            "completed": float(np.mean(completed)), "valid": valid, "masks_identical": same, "arms": arms}


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The reproduction (module docstring): (schema, seed) tasks through ``pmap``."""
    n, n_seeds = int(config["schemas"]), int(config["seeds"])
    if n < 1 or n_seeds < 1:
        raise ValueError(f"schemas and seeds must be >= 1, got {n}, {n_seeds}")
    suite = schema_suite(n, int(config["suite_seed"]))
    seeds = runtime.seeds(seed, n * n_seeds)
    items = [(k, seeds[k * n_seeds:(k + 1) * n_seeds], suite[k]) for k in range(n)]
    results = runtime.pmap(run_one, items, shared=dict(config), desc="zapformat replays")
    rows, timing_rows = [], []
    for r in results:
        for arm, a in r["arms"].items():
            for metric, value in a.items():
                row = {"method": arm, "schema": r["schema"], "seed": r["seed"], "metric": metric, "value": value}
                (timing_rows if metric.startswith("timing") else rows).append(row)

    def mean(arm, metric):
        return float(np.mean([r["arms"][arm][metric] for r in results]))

    summary = {arm: {m: mean(arm, m) for m in ("mean_live_items", "max_live_items", "mean_depth", "max_depth",
                                                "mean_chart_kib", "max_chart_kib", "cache_hit_rate")}
               for arm in ARMS}
    timings = {arm: {"mask_us": mean(arm, "timing_mask_us"), "warm_mask_us": mean(arm, "timing_warm_mask_us"),
                     "peak_kib": mean(arm, "timing_peak_kib")} for arm in ARMS}
    p, u = summary["pruned"], summary["unpruned"]
    valid = [v for r in results for v in r["valid"]]
    metrics = {
        **p,
        "live_items_ratio": p["mean_live_items"] / max(u["mean_live_items"], 1e-12),
        "chart_kib_ratio": p["mean_chart_kib"] / max(u["mean_chart_kib"], 1e-12),
        "masks_identical": float(np.mean([r["masks_identical"] for r in results])),
        "completed_rate": float(np.mean([r["completed"] for r in results])),
        "valid_rate": float(np.mean(valid)) if valid else float("nan"),
        "mean_tokens": float(np.mean([r["tokens"] for r in results])),
        "timings": {**timings,
                    "mask_speedup": timings["unpruned"]["mask_us"] / max(timings["pruned"]["mask_us"], 1e-12),
                    "warm_mask_speedup": timings["unpruned"]["warm_mask_us"] / max(timings["pruned"]["warm_mask_us"], 1e-12)},
    }
    budget = {"replays": len(items), "vocab": config["vocab"], "max_tokens": int(config["max_tokens"]),
              "same tokens replayed by both arms": True}
    return Outcome(metrics=metrics, baselines={"unpruned": {**u, "timings": timings["unpruned"]}},
                   tables={"replays": rows, "timing": timing_rows}, budget=budget)


CLAIMS = (
    Claim(text="dynamic pruning shrinks the live Earley chart (mean live items, paired over schemas)",
          metric="metrics.mean_live_items", compare="baselines.unpruned.mean_live_items", op="<",
          test="paired sign test over seeds", table="replays", a={"method": "pruned", "metric": "mean_live_items"},
          b={"method": "unpruned", "metric": "mean_live_items"}, pair_on=("schema",), source=SOURCE_MEMORY),
    Claim(text="pruning reduces the memory of the Earley states (chart bytes)",
          metric="metrics.mean_chart_kib", compare="baselines.unpruned.mean_chart_kib", op="<", source=SOURCE_MEMORY),
    Claim(text="pruning makes the chart-keyed state cache hit more often",
          metric="metrics.cache_hit_rate", compare="baselines.unpruned.cache_hit_rate", op=">", source=SOURCE_CACHE),
    Claim(text="pruning speeds up mask computation against the same engine without pruning, over many queries "
               "of one schema (masks after the first query, whose per-terminal precomputation both arms share)",
          metric="metrics.timings.pruned.warm_mask_us", compare="metrics.timings.unpruned.warm_mask_us", op="<",
          source=SOURCE_CACHE),
    Claim(text="pruning speeds up mask computation including the first (cold) query",
          metric="metrics.timings.pruned.mask_us", compare="metrics.timings.unpruned.mask_us", op="<",
          source=SOURCE_CACHE),
    Claim(text="pruning lowers the peak Python memory of replaying the queries (tracemalloc)",
          metric="metrics.timings.pruned.peak_kib", compare="metrics.timings.unpruned.peak_kib", op="<",
          source=SOURCE_MEMORY),
    Claim(text="pruning never changes a mask (identical masks at every replayed step; a soundness check of "
               "the pruning, not a result)",
          metric="metrics.masks_identical", compare=1.0, op=">=", kind="sanity"),
)


# ------------------------------------------------------------------------------------------
# benchmark

_STR = {"type": "string"}
_INT = {"type": "integer"}
_ADDRESS = {"type": "object", "properties": {"street": {"type": "string", "maxLength": 60},
                                             "city": {"type": "string", "minLength": 1, "maxLength": 30},
                                             "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "city"], "additionalProperties": False}


def _obj(props: dict, required=None, extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


# 24 hand-written schemas of the shapes real requests use (the fixed part of the bench suite)
BENCH_SUITE = (
    _obj({"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": _STR, "maxItems": 5}},
         ["name", "age"]),
    {"$defs": {"node": _obj({"value": _INT, "children": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                         "maxItems": 3}})}, "$ref": "#/$defs/node"},
    {"$defs": {"cell": _obj({"head": {"type": "string", "maxLength": 12},
                             "tail": {"anyOf": [{"$ref": "#/$defs/cell"}, {"type": "null"}]}})},
     "$ref": "#/$defs/cell"},
    _obj({"status": {"enum": ["open", "closed", "pending", "escalated"]},
          "priority": {"enum": ["low", "medium", "high", "urgent"]}, "assignee": {"type": "string", "maxLength": 30}}),
    _obj({"value": {"anyOf": [_INT, {"type": "string", "maxLength": 20}, {"type": "null"}]},
          "unit": {"anyOf": [{"enum": ["kg", "lb", "g"]}, {"type": "null"}]}}),
    _obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
          "phone": {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}, "qty": {"type": "integer", "minimum": 1}}),
    {"type": "object", "additionalProperties": _INT},
    {"type": "object", "properties": {"id": _INT, "label": {"type": "string", "maxLength": 20}}, "required": ["id"],
     "additionalProperties": True},
    _obj({"title": {"type": "string", "minLength": 5, "maxLength": 80},
          "body": {"type": "string", "minLength": 200, "maxLength": 2000}}),
    _obj({"summary": _STR, "details": _STR}),
    _obj({"order_id": _INT, "customer": _obj({"name": {"type": "string", "maxLength": 40}, "address": _ADDRESS}),
          "lines": {"type": "array", "minItems": 1, "maxItems": 4,
                    "items": _obj({"sku": {"type": "string", "maxLength": 10}, "qty": {"type": "integer", "minimum": 1,
                                                                                       "maximum": 99}})}}),
    {"type": "array", "minItems": 1, "maxItems": 4,
     "items": _obj({"x": {"type": "number"}, "y": {"type": "number"}, "label": {"type": "string", "maxLength": 8}})},
    {"type": "array", "items": {"type": "number", "minimum": -100, "maximum": 100}, "minItems": 2, "maxItems": 10},
    _obj({"reasoning": {"type": "string", "maxLength": 600}, "answer": {"enum": ["A", "B", "C", "D"]},
          "confidence": {"type": "number", "minimum": 0, "maximum": 1}}),
    _obj({"event_id": {"type": "string", "format": "uuid"}, "at": {"type": "string", "format": "date-time"},
          "kind": {"enum": ["create", "update", "delete"]}}),
    {"anyOf": [_obj({"type": {"const": "circle"}, "r": {"type": "number"}}),
               _obj({"type": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}})]},
    _obj({"active": {"type": "boolean"}, "deleted": {"type": "boolean"}, "parent": {"type": ["integer", "null"]},
          "note": {"type": ["string", "null"], "maxLength": 50}}),
    _obj({"matrix": {"type": "array", "minItems": 1, "maxItems": 3,
                     "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                               "minItems": 3, "maxItems": 3}}}),
    {"definitions": {"address": _ADDRESS},
     **_obj({"billing": {"$ref": "#/definitions/address"}, "shipping": {"$ref": "#/definitions/address"}})},
    {"type": "object", "additionalProperties": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 16}},
    _obj({"code": {"type": "string", "minLength": 5}, "name": {"type": "string", "minLength": 2, "maxLength": 24}}),
    _obj({"products": {"type": "array", "maxItems": 3, "items": _obj({
        "name": {"type": "string", "maxLength": 30}, "price": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD", "GBP"]}, "stock": {"type": "integer", "minimum": 0}}, ["name", "price"])}}),
    {"$defs": {"expr": {"anyOf": [{"type": "number"},
                                  _obj({"op": {"enum": ["+", "-", "*", "/"]},
                                        "args": {"type": "array", "items": {"$ref": "#/$defs/expr"},
                                                 "minItems": 2, "maxItems": 2}})]}},
     "$ref": "#/$defs/expr"},
    _obj({"article": _obj({"headline": {"type": "string", "maxLength": 120}, "text": _STR,
                           "keywords": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 8}}),
          "meta": {"type": "object", "additionalProperties": _STR}}),
)


def bench_suite(n: int, seed: int) -> list[dict]:
    """The benchmark's schemas: ``BENCH_SUITE`` first, then ``schema_suite`` schemas beyond it."""
    fixed = list(BENCH_SUITE[:n])
    return fixed + (schema_suite(n - len(fixed), seed) if n > len(fixed) else [])


_PEERS: dict = {}
# outlines-core expands a string length bound into a regex repetition and indexes its DFA over the
# whole vocabulary: above this bound it runs for minutes and gigabytes, so the schema is counted as
# a compile failure of that peer instead of being run
PEER_MAX_LENGTH = {"outlines-core": 256}


def _max_length(schema) -> int:
    if isinstance(schema, dict):
        own = max([int(schema[k]) for k in ("maxLength", "minLength") if isinstance(schema.get(k), int)], default=0)
        return max([own] + [_max_length(v) for v in schema.values()])
    if isinstance(schema, list):
        return max([_max_length(v) for v in schema], default=0)
    return 0


def _peer_compile(name: str, peer, schema):
    """``peer.compile(schema)``, or ``ValueError`` for a schema past the peer's limits."""
    if _max_length(schema) > PEER_MAX_LENGTH.get(name, float("inf")):
        raise ValueError(f"{name}: string length bound above {PEER_MAX_LENGTH[name]} (not run)")
    return peer.compile(schema)


def _peer(name: str, vocab_name: str):
    key = (name, vocab_name)
    if key not in _PEERS:
        from rayml.decoding.peers import make_peer

        vocab, index = vocab_and_index(vocab_name)
        try:
            _PEERS[key] = make_peer(name, vocab, index.vocab_size)
        except Exception as exc:  # noqa: BLE001 - an unavailable peer is reported, not fatal
            _PEERS[key] = f"{type(exc).__name__}: {exc}"[:160]
    return _PEERS[key]


def _digest(words: np.ndarray, vocab_size: int) -> int:
    """A hash of the mask bits of the real tokens (padding bits beyond the vocabulary ignored)."""
    w = words.view(np.uint32).copy()
    tail = vocab_size & 31
    if tail:
        w[vocab_size >> 5] &= np.uint32((1 << tail) - 1)
    return hash(w[: (vocab_size + 31) // 32].tobytes())


def bench_clock(config: Mapping[str, Any]):
    """The bench's clock: ``thread`` (default), the CPU time of the calling thread
    (``time.thread_time``: time the process spends preempted on a shared machine is not counted;
    every engine masks in the calling thread), or ``wall`` (``time.perf_counter``)."""
    name = config.get("clock", "thread")
    if name not in ("thread", "wall"):
        raise ValueError(f"clock must be 'thread' or 'wall', got {name!r}")
    return time.thread_time if name == "thread" else time.perf_counter


def _replay(matcher_of, sequences, n_words: int, vocab_size: int, eos=(), clock=time.perf_counter) -> dict:
    """Replay ``sequences`` (one fresh matcher per query from ``matcher_of()``): per query the
    mask and accept times and the mask digests; a token the engine masks out or rejects ends
    that query (counted)."""
    words = np.zeros(n_words, np.uint32)
    out = {"mask_s": [], "accept_s": [], "digests": [], "rejected": 0}
    for tokens in sequences:
        m = matcher_of()
        tm, ta, dg = [], [], []
        for tok in tokens:
            t0 = clock()
            m.fill(words)
            tm.append(clock() - t0)
            dg.append(_digest(words, vocab_size))
            if not (words[tok >> 5] >> np.uint32(tok & 31)) & np.uint32(1):
                out["rejected"] += 1
                break
            if tok in eos:
                break  # end of the query (some peers raise when EOS is consumed)
            t0 = clock()
            ok = m.accept(tok)
            ta.append(clock() - t0)
            if not ok:
                out["rejected"] += 1
                break
        out["mask_s"].append(tm)
        out["accept_s"].append(ta)
        out["digests"].append(dg)
    return out


class _Ours:
    """Our matcher behind the peers' ``fill`` / ``accept`` interface (for ``_replay``)."""

    def __init__(self, compiled):
        self.m = GrammarMatcher(compiled)
        self.bm = allocate_token_bitmask(1, compiled.index.vocab_size)

    def fill(self, words):
        self.m.fill_next_token_bitmask(self.bm)
        words[:] = self.bm[0].view(np.uint32)

    def accept(self, tok):
        return self.m.accept_token(tok)


# rayml: the fast engine on the compiled core (rayml.decoding.native, when built); rayml-pure: the same
# engine in pure Python (the fallback); rayml-unpruned: the pruning ablation (compiled core);
# rayml-reference: pure Python with no memos, the reference every other arm's masks are checked against
OURS = {"rayml": MatcherConfig(), "rayml-pure": MatcherConfig(native=False),
        "rayml-unpruned": MatcherConfig(prune=False),
        "rayml-reference": MatcherConfig(memo=False, native=False)}


def bench_one(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """One (vocabulary, schema): sample ``queries`` token sequences under the intersection of every
    engine's masks, then replay them in every engine, from a compile with every cache cleared
    (ours: the schema caches and the vocabulary index's walks, except the JSON string walks made with
    the index, ``TokenIndex.precompute_strings``): query 0 is the cold request, the
    others are warm (same compiled grammar)."""
    vocab_name, k, seed, schema = item
    vocab, index = vocab_and_index(vocab_name)
    cg = compile_grammar(schema_grammar(schema), index)
    peers = {}
    for name in config["peers"]:
        if vocab_name in config.get("skip", {}).get(name, ()):
            continue
        peer = _peer(name, vocab_name)
        if not isinstance(peer, str):
            try:
                peers[name] = (peer, _peer_compile(name, peer, schema))
            except Exception:  # noqa: BLE001 - counted below as a compile error
                pass
    sequences = []
    for q in range(int(config["queries"])):
        others = [p.matcher(c) for p, c in peers.values()]
        sequences.append(sample_tokens(cg, vocab, seed + q, int(config["max_tokens"]), int(config["budget"]), others))
    rows = []

    def add(engine, metric, value, **extra):
        rows.append({"vocab": vocab_name, "schema": k, "engine": engine, "metric": metric, "value": float(value),
                     **extra})

    digests = {}

    def record(engine, r):
        for q in range(len(r["mask_s"])):
            tag = "cold" if q == 0 else "warm"
            for t in r["mask_s"][q]:
                add(engine, f"mask_{tag}_s", t)
            for t in r["accept_s"][q]:
                add(engine, "accept_s", t)
        add(engine, "rejected", r["rejected"])
        digests[engine] = r["digests"]

    eos = set(vocab.eos_ids)
    clock = bench_clock(config)
    arms = [e for e in OURS if e in config.get("ours", list(OURS))]
    for engine in arms:
        clear_caches()
        index.clear_cache()
        t0 = clock()
        ours = compile_grammar(schema_grammar(schema), index, OURS[engine])
        add(engine, "compile_s", clock() - t0)
        record(engine, _replay(lambda: _Ours(ours), sequences, index.n_words, index.vocab_size, eos, clock))
        if engine in ("rayml", "rayml-unpruned"):
            mem = replay_ours(schema, index, sequences, prune=engine == "rayml", memory=True)
            add(engine, "peak_kib", mem["peak_bytes"] / 1024)
            add(engine, "live_items", float(np.mean(mem["live_items"])))
    for name in config["peers"]:
        if vocab_name in config.get("skip", {}).get(name, ()):
            add(name, "unavailable", 1)
            continue
        peer = _peer(name, vocab_name)
        if isinstance(peer, str):
            add(name, "unavailable", 1)
            continue
        t0 = clock()
        try:
            compiled = _peer_compile(name, peer, schema)
            first = peer.matcher(compiled)
        except Exception:  # noqa: BLE001 - a schema a peer cannot compile is a failure
            add(name, "compile_error", 1)
            continue
        add(name, "compile_s", clock() - t0)
        made = iter([first])
        record(name, _replay(lambda: next(made, None) or peer.matcher(compiled), sequences, index.n_words,
                             index.vocab_size, eos, clock))
    ref = digests.get("xgrammar")
    for engine, dg in digests.items():
        if ref is None:
            break
        for q, (a, b) in enumerate(zip(dg, ref)):
            for x, y in zip(a, b):
                add(engine, "agrees_with_xgrammar", x == y)
    if "rayml-reference" in digests:
        for engine in ("rayml", "rayml-pure"):
            if engine in digests:
                add(engine, "identical_to_reference", digests["rayml-reference"] == digests[engine])
    return rows


def _stats(values) -> dict:
    v = np.asarray(values, float)
    if v.size == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p99": float("nan")}
    return {"mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99))}


def _load() -> float:
    try:
        import os

        return float(os.getloadavg()[0])
    except (OSError, AttributeError):  # pragma: no cover
        return float("nan")


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """The benchmark (module docstring): every engine on the same schemas and token sequences."""
    n = int(config["schemas"])
    if n < 1:
        raise ValueError(f"schemas must be >= 1, got {n}")
    if int(config["queries"]) < 2:
        raise ValueError(f"queries must be >= 2 (one cold, the rest warm), got {config['queries']}")
    bench_clock(config)
    suite = bench_suite(n, int(config["suite_seed"]))
    seeds = runtime.seeds(seed, n)
    items = [(v, k, seeds[k], suite[k]) for v in config["vocabs"] for k in range(n)]
    load = [_load()]
    chunks = runtime.pmap(bench_one, items, shared=dict(config), desc="zapformat bench")
    load.append(_load())
    rows = [r for chunk in chunks for r in chunk]
    engines = [e for e in OURS if e in config.get("ours", list(OURS))] + list(config["peers"])
    per_vocab: dict = {}
    us = lambda d: {k: 1e6 * x for k, x in d.items()}  # noqa: E731
    for v in config["vocabs"]:
        out = {}
        for e in engines:
            sel = [r for r in rows if r["vocab"] == v and r["engine"] == e]
            if not sel or any(r["metric"] == "unavailable" for r in sel):
                out[e] = {"available": 0.0}
                continue
            get = lambda m: [r["value"] for r in sel if r["metric"] == m]  # noqa: E731
            comp = get("compile_s")
            out[e] = {"available": 1.0,
                      "compile_ms": {**{k: 1e3 * x for k, x in _stats(comp).items()}},
                      "mask_warm_us": us(_stats(get("mask_warm_s"))), "mask_cold_us": us(_stats(get("mask_cold_s"))),
                      "mask_us": us(_stats(get("mask_warm_s") + get("mask_cold_s"))),
                      "accept_us": us(_stats(get("accept_s"))),
                      "masks": float(len(get("mask_warm_s")) + len(get("mask_cold_s"))),
                      "compile_errors": float(sum(get("compile_error"))),
                      "rejected_sequences": float(sum(get("rejected"))),
                      "agreement_with_xgrammar": float(np.mean(get("agrees_with_xgrammar")))
                      if get("agrees_with_xgrammar") else float("nan")}
            out[e]["failures"] = out[e]["compile_errors"] + out[e]["rejected_sequences"]
            if get("identical_to_reference"):
                out[e]["identical_to_reference"] = float(np.mean(get("identical_to_reference")))
            if get("peak_kib"):
                out[e]["peak_kib"] = float(np.mean(get("peak_kib")))
                out[e]["live_items"] = float(np.mean(get("live_items")))
        peers = [e for e in config["peers"] if out.get(e, {}).get("available")]
        for e in engines:
            if out[e].get("available") and peers:
                for stat in ("mask_warm_us", "mask_cold_us", "mask_us", "accept_us"):
                    for q in ("mean", "p50", "p99"):
                        best = min(out[p][stat][q] for p in peers)
                        out[e].setdefault("ratio_to_fastest_peer", {})[f"{stat}.{q}"] = out[e][stat][q] / best
                out[e]["ratio_to_fastest_peer"]["compile_ms.p50"] = out[e]["compile_ms"]["p50"] / min(
                    out[p]["compile_ms"]["p50"] for p in peers)
        per_vocab[v] = out
    first = per_vocab[config["vocabs"][0]]
    metrics = {"per_vocab": per_vocab, "schemas": n,
               "timings": {"load_before_after": load},
               "pruned_live_items": first["rayml"]["live_items"],
               "unpruned_live_items": first["rayml-unpruned"]["live_items"],
               "pruned_peak_kib": first["rayml"]["peak_kib"],
               "unpruned_peak_kib": first["rayml-unpruned"]["peak_kib"],
               "identical_to_reference": float(np.mean([o["rayml"].get("identical_to_reference", float("nan"))
                                                        for o in per_vocab.values()]))}
    print(bench_table(metrics, load, config.get("clock", "thread")))
    from rayml.experiments.zapformat_vllm import run_vllm

    vllm = run_vllm(config)  # after the mask bench, alone on the machine's share of CPU
    tables = {}
    if vllm.get("rows"):
        tables["vllm"] = [{k: float("nan") if v is None else v for k, v in r.items() if k != "texts"}
                          for r in vllm.pop("rows")]
    metrics["vllm"] = vllm
    timing_rows = [r for r in rows if r["metric"].endswith("_s") or r["metric"] == "peak_kib"]
    other_rows = [r for r in rows if not (r["metric"].endswith("_s") or r["metric"] == "peak_kib")]
    return Outcome(metrics=metrics, baselines={}, tables={"engines": other_rows, "timing": timing_rows, **tables},
                   budget={"schemas": n, "vocabs": list(config["vocabs"]), "max_tokens": int(config["max_tokens"]),
                           "queries per schema": int(config["queries"]), "clock": config.get("clock", "thread")})


def bench_table(metrics: Mapping[str, Any], load=None, clock: str = "thread") -> str:
    """The bench's per-vocabulary table (markdown) from its metrics."""
    if load is None:
        load = metrics.get("timings", {}).get("load_before_after", [float("nan")] * 2)
    lines = [f"[zapformat bench] {metrics['schemas']} schemas, clock {clock}, 1-minute load "
             "average before/after: " + " / ".join(f"{x:.1f}" for x in load)]
    for v, out in metrics["per_vocab"].items():
        lines += [f"\n{v}: compile p50 ms | mask mean / p50 / p99 us, cold (first query, caches cleared) | warm "
                  "(later queries) | accept mean us | failures | agreement with xgrammar | ratio to the fastest "
                  "peer of the mask mean cold / warm and of the accept mean",
                  "| engine | compile p50 | cold mask mean / p50 / p99 | warm mask mean / p50 / p99 | accept mean "
                  "| failures | = xgrammar | ratio cold / warm / accept |",
                  "|---|---|---|---|---|---|---|---|"]
        for e, d in out.items():
            if not d.get("available"):
                lines.append(f"| {e} | unavailable | | | | | | |")
                continue
            c, w, r = d["mask_cold_us"], d["mask_warm_us"], d.get("ratio_to_fastest_peer", {})
            nan = float("nan")
            lines.append(
                f"| {e} | {d['compile_ms']['p50']:.1f} | {c['mean']:.1f} / {c['p50']:.1f} / {c['p99']:.0f} "
                f"| {w['mean']:.1f} / {w['p50']:.1f} / {w['p99']:.0f} | {d['accept_us']['mean']:.1f} "
                f"| {d['failures']:.0f} | {100 * d['agreement_with_xgrammar']:.0f}% "
                f"| {r.get('mask_cold_us.mean', nan):.2f} / {r.get('mask_warm_us.mean', nan):.2f} / "
                f"{r.get('accept_us.mean', nan):.2f} |")
    return "\n".join(lines)


BENCH_CLAIMS = (
    Claim(text="pruning shrinks the live Earley chart on the benchmark suite",
          metric="metrics.pruned_live_items", compare="metrics.unpruned_live_items", op="<", source=SOURCE_MEMORY),
    Claim(text="pruning lowers the peak Python memory of mask computation",
          metric="metrics.pruned_peak_kib", compare="metrics.unpruned_peak_kib", op="<", source=SOURCE_MEMORY),
    Claim(text="the fast engine (interned charts, memoised steps, exits and accepts; on the compiled core when "
               "built) gives masks bit-identical to the pure-Python reference engine at every replayed step (a "
               "soundness check, not a result)",
          metric="metrics.identical_to_reference", compare=1.0, op=">=", kind="sanity"),
)

EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="(schema, seed) replays and (vocabulary, schema) benchmark cases as pmap tasks",
    checked_against="authors' code (Dan-wanna-M/kbnf compaction, Leo items, caches), the abstract and the research "
                    "notes (the full paper text was not found); masks checked against brute force and xgrammar",
    sizes=SIZES, run=run, claims=CLAIMS, bench_sizes=BENCH_SIZES, bench=bench, bench_claims=BENCH_CLAIMS,
)
