"""Design interface reproduction: targeted control of prototypes through the domain-specific
interface against direct command generation by the same model, with and without the automated
domain specification.

The paper (Shi et al., ICML 2025) shows, by machine-based evaluation and human studies, that its
interface lets LLMs control prototype models "precisely and effectively". Here each instruction of
the generated suite (three product domains; absolute values, percentages, degree words and hole
features, with paraphrases) is decoded by one model in three pipelines: ``direct`` (modelling
commands), ``interface_generic`` (the interface over a generic geometry-level specification) and
``interface_ads`` (the interface over the specification derived automatically from each domain's
corpus). An ``oracle`` pipeline (the exact DSL statement) checks the interface's compiler. Every
pipeline has the same budget (``max_statements`` statements, each a fixed sequence of slot
choices). Task success = every parameter of the resulting model within 1% of the target (same
parts, same holes); parameter precision = the intended quantity within 2%; voxel IoU, volume,
bounding box, hole count and symmetry are recorded too.

Two comparisons run. (1) The sanity comparison: the deterministic retrieval / template parser
(``models``) decodes every pipeline slot by slot; its knob is tuned per pipeline on instructions
from tuning seeds (``--set models='["smollm2"]'`` puts the older slot-scoring SmolLM2 chooser
there). (2) The paper comparison (``rayml.agents.design_dsl_lm``): one language model (``model``:
``smollm2-135m``, or the weights-free ``uniform`` slot picker by default) writes each pipeline's
whole program with grammar-constrained greedy decoding (ZapFormat) after the same worked examples,
with the same line and token budgets, on ``lm_per_cell`` x ``lm_seeds`` instructions per
(domain, kind); the number of worked examples is tuned per pipeline on ``shots_grid`` (one value,
untuned, at quick).

Claims are paired over (instruction, seed) with a sign test; per-kind win counts keep one kind of
instruction from carrying the aggregate. Every language-model claim is gated (``evidence.gate``) on the
slot holding a language model and on that model completing more tasks than the uniform slot picker on
the same episodes (run next to it, or the model itself with ``model=uniform``): with the default
``model=uniform`` they are incomplete, not decided by a random picker.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.agents import design_dsl as dd
from rayml.agents import design_dsl_domains as dom
from rayml.agents import design_dsl_models as dm
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "Targeted control of fast prototyping through domain-specific interface (ICML 2025)"
METHOD = "design-dsl"
PIPES = dm.PIPELINES + ("oracle",)
METRICS = ("success", "precise", "param_error", "iou", "volume_error", "bbox_error", "holes_ok", "symmetry_ok",
           "collateral")

LM_MODELS = ("uniform", "smollm2-135m")
_COMMON = dict(domains=list(dom.DOMAINS), kinds=list(dom.KINDS_OF_INSTRUCTION), max_statements=6,
               corpus_variants=24, corpus_edits=400, model="uniform", shots_grid=[2, 4], lm_max_statements=12,
               max_new_tokens=128)
SIZES = {
    "tiny": dict(per_cell=1, seeds=1, tune_per_cell=1, models=["retrieval"], chunk=4, lm_per_cell=1, lm_seeds=1,
                 lm_tune_per_cell=1, **_COMMON),
    # quick: one number of worked examples (4: one per instruction kind) for every pipeline, untuned
    # (SmolLM2 takes about a minute per episode on the loaded 2-core machine); full tunes {2, 4}
    # quick: 3 LM instructions per (domain, kind) cell x 2 seeds = 66 episodes per pipeline (22 gave 4 discordant
    # pairs, where a sign test cannot go below p = 0.0625)
    "quick": dict(per_cell=4, seeds=3, tune_per_cell=2, models=["retrieval"], chunk=8, lm_per_cell=3, lm_seeds=2,
                  lm_tune_per_cell=1, **{**_COMMON, "shots_grid": [4]}),
    "full": dict(per_cell=10, seeds=5, tune_per_cell=3, models=["retrieval"], chunk=8, lm_per_cell=10, lm_seeds=5,
                 lm_tune_per_cell=3, **_COMMON),
}

_LM: dict = {}


def _chooser(model: str, knob):
    if model == "retrieval":
        return dm.RetrievalChooser(int(knob))
    if "lm" not in _LM:
        import torch

        import rayml.llm

        torch.set_num_threads(1)
        _LM["lm"] = rayml.llm.pretrained("smollm2-135m")
    return dm.SmolLMChooser(_LM["lm"], float(knob))


def run_task(item: tuple, shared: Mapping[str, Any]) -> list[dict]:
    """One chunk of episodes: ``(phase, model, pipeline, knob, [(uid, seed index, instruction)])``."""
    phase, model, pipe, knob, chunk = item
    specs = shared["specs"]
    out = []
    for uid, s, ins in chunk:
        ch = _chooser(model, knob)
        r = dm.run_episode(ch, pipe, ins, specs[ins.domain], int(shared["max_statements"]))
        out.append({"phase": phase, "model": model, "pipeline": pipe, "knob": knob, "uid": uid, "seed": s,
                    "domain": ins.domain, "kind": ins.kind, "decisions": getattr(ch, "calls", 0),
                    **{m: float(r[m]) for m in METRICS}, "statements": r["statements"][:8]})
    return out


def run_lm_task(item: tuple, shared: Mapping[str, Any]) -> list[dict]:
    """One chunk of language-model episodes: ``(phase, pipeline, shots, [(uid, seed index, episode seed,
    instruction)])``, all of one domain (the prompt prefix is cached per pipeline, domain and shots)."""
    from rayml.agents import design_dsl_lm as dl

    phase, pipe, shots, chunk = item
    model = shared["model"]
    out = []
    for uid, s, ep_seed, ins in chunk:
        if model == "uniform":
            gen = dl.UniformGenerator(ep_seed)
        else:
            if "gen" not in _LM:
                import torch

                import rayml.llm

                torch.set_num_threads(1)
                _LM["gen"] = dl.SmolLMGenerator(rayml.llm.pretrained("smollm2-135m"))
            gen = _LM["gen"]
        r = dl.lm_episode(gen, pipe, ins, shared["specs"][ins.domain], shared["shots"][ins.domain][:shots],
                          int(shared["max_statements"]), int(shared["max_new_tokens"]))
        out.append({"phase": phase, "model": model, "pipeline": pipe, "knob": shots, "uid": uid, "seed": s,
                    "domain": ins.domain, "kind": ins.kind, "tokens": r["tokens"], "decisions": 0,
                    **{m: float(r[m]) for m in METRICS}, "text": r["text"][:400]})
    return out


def _check(config):
    if config["model"] not in LM_MODELS:
        raise ValueError(f"model must be one of {LM_MODELS}, got {config['model']!r}")
    g = config["shots_grid"]
    if not g or any(isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 8 for k in g):
        raise ValueError(f"shots_grid must be a non-empty list of integers in [0, 8], got {g!r}")
    for key in ("lm_per_cell", "lm_seeds", "lm_tune_per_cell", "lm_max_statements", "max_new_tokens"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    models = list(config["models"])
    if not models or any(m not in dm.MODELS for m in models):
        raise ValueError(f"models must be a non-empty list from {dm.MODELS}, got {config['models']!r}")
    for d in config["domains"]:
        if d not in dom.DOMAINS:
            raise ValueError(f"domains: unknown domain {d!r} (known: {sorted(dom.DOMAINS)})")
    for k in config["kinds"]:
        if k not in dom.KINDS_OF_INSTRUCTION:
            raise ValueError(f"kinds: unknown kind {k!r} (known: {dom.KINDS_OF_INSTRUCTION})")
    for key in ("per_cell", "seeds", "tune_per_cell", "max_statements", "chunk", "corpus_variants", "corpus_edits"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    if config["corpus_variants"] < 3:
        raise ValueError(f"corpus_variants must be >= 3, got {config['corpus_variants']}")
    return models


def _items(phase, model, pipe, knob, instructions, chunk):
    return [(phase, model, pipe, knob, instructions[i:i + chunk]) for i in range(0, len(instructions), chunk)]


def _mean(rows, metric):
    return float(np.mean([r[metric] for r in rows])) if rows else float("nan")


def _summary(rows) -> dict:
    out = {m: _mean(rows, m) for m in METRICS}
    out["param_error_median"] = float(np.median([r["param_error"] for r in rows])) if rows else float("nan")
    out["precision"] = out.pop("precise")
    out["decisions_mean"] = _mean(rows, "decisions")
    kinds = sorted({r["kind"] for r in rows})
    out["by_kind"] = {k: {"success": _mean([r for r in rows if r["kind"] == k], "success"),
                          "precision": _mean([r for r in rows if r["kind"] == k], "precise")} for k in kinds}
    seeds = sorted({r["seed"] for r in rows})
    out["success_by_seed"] = [_mean([r for r in rows if r["seed"] == s], "success") for s in seeds]
    return out


def _by_domain_items(phase, pipe, shots, instructions, chunk):
    items = []
    for d in sorted({ins.domain for *_, ins in instructions}):
        own = [x for x in instructions if x[-1].domain == d]
        items += [(phase, pipe, shots, own[i:i + chunk]) for i in range(0, len(own), chunk)]
    return items


def _power(rows) -> dict:
    """Pairs a one-sided sign test needs (80 % power, alpha 0.05) for the run's own interface-vs-direct
    success differences (``evidence.power_from_pilot``): the record says whether its size can
    detect the effect it measured."""
    val = {(r["pipeline"], r["uid"], r["seed"]): r["value"] for r in rows if r["metric"] == "success"}
    diffs = [v - val[("direct", u, s)] for (p, u, s), v in val.items() if p == "interface_ads" and ("direct", u, s) in val]
    return {"interface_ads_vs_direct_success": evidence.power_from_pilot(diffs) if diffs else None}


def _lm_part(config, seeds: Mapping[str, Any], specs) -> dict:
    """The paper's comparison for a language model (``config["model"]``): the number of worked
    examples tuned per pipeline on tuning instructions, then every pipeline on the test
    instructions, every episode with the same grammar-constrained decoding and budget.

    ``seeds``: ``test`` (one per LM test seed), ``shots``, ``tune`` and ``episodes`` (the seed the
    per-episode seeds are spawned from), all from ``evidence.split_seeds`` in ``run``."""
    shot_seed, tune_seed, test_seeds = seeds["shots"], seeds["tune"], seeds["test"]
    shots = {}
    for d in config["domains"]:
        pool = dom.instruction_suite(2, shot_seed, domains=[d], kinds=config["kinds"], prefix="shot")
        shots[d] = sorted(pool, key=lambda ins: (int(ins.uid.rsplit("-", 1)[1]), config["kinds"].index(ins.kind)))
    tune = dom.instruction_suite(int(config["lm_tune_per_cell"]), tune_seed, domains=config["domains"],
                                 kinds=config["kinds"], prefix="lmtune")
    test = [(s, ins) for s, ts in enumerate(test_seeds)
            for ins in dom.instruction_suite(int(config["lm_per_cell"]), ts, domains=config["domains"],
                                             kinds=config["kinds"], prefix="lmtest")]
    ep_seeds = runtime.seeds(seeds["episodes"], len(tune) + len(test))
    tune_ins = [(ins.uid, -1, ep_seeds[i], ins) for i, ins in enumerate(tune)]
    test_ins = [(ins.uid, s, ep_seeds[len(tune) + i], ins) for i, (s, ins) in enumerate(test)]
    shared = {"specs": specs, "shots": shots, "model": config["model"],
              "max_statements": int(config["lm_max_statements"]), "max_new_tokens": int(config["max_new_tokens"])}
    # the uniform picker ignores the prompt: nothing to tune
    grid = list(config["shots_grid"]) if config["model"] != "uniform" else list(config["shots_grid"])[:1]
    chunk = int(config["chunk"])
    precision, n_tune_items = {}, [0]

    def evaluate(problems):
        """Each (pipeline, {shots})'s mean tuning success (pmap tasks; a one-value grid runs nothing)."""
        if len(grid) == 1:
            return [0.0 for _ in problems]
        items = [it for _, st in problems for it in _by_domain_items("tune", st["pipeline"], st["shots"], tune_ins,
                                                                     chunk)]
        n_tune_items[0] += len(items)
        rows = [r for part in runtime.pmap(run_lm_task, items, shared=shared, chunk_size=1,
                                           desc="design-dsl LM tuning") for r in part]
        out = []
        for _, st in problems:
            own = [r for r in rows if r["pipeline"] == st["pipeline"] and r["knob"] == st["shots"]]
            precision[(st["pipeline"], st["shots"])] = _mean(own, "precise")
            out.append(_mean(own, "success"))
        return out

    # the highest tuning success; a tie goes to the higher precision, then to the fewer worked examples
    # (the pipeline is a one-value axis so that the tie-break key sees it)
    choices = evidence.tune(evaluate, {p: {"pipeline": [p], "shots": grid} for p in dm.PIPELINES},
                            lower_is_better=False,
                            tie_break=lambda st: (-precision.get((st["pipeline"], st["shots"]), 0.0), st["shots"]))
    chosen = {p: ch.setting["shots"] for p, ch in choices.items()}
    tuning_rows = evidence.tuning_rows(choices, keys=("pipeline",), metric="tuning_success") if len(grid) > 1 else []
    items = [it for p in dm.PIPELINES for it in _by_domain_items("test", p, chosen[p], test_ins, chunk)]
    out = [r for part in runtime.pmap(run_lm_task, items, shared=shared, chunk_size=1,
                                      desc="design-dsl LM episodes") for r in part]
    # the gate's floor: the uniform slot picker on the same test episodes (same instructions, worked
    # examples and episode seeds; it ignores the prompt); with model=uniform it is the model itself,
    # its episodes not run twice
    if config["model"] == "uniform":
        floor = out
    else:
        floor = [r for part in runtime.pmap(run_lm_task, items, shared={**shared, "model": "uniform"}, chunk_size=1,
                                            desc="design-dsl uniform floor") for r in part]
    versus = [{"picker": who, "pipeline": r["pipeline"], "uid": r["uid"], "seed": r["seed"], "metric": "success",
               "value": r["success"]} for who, rs in (("lm", out), ("uniform", floor)) for r in rs]
    summ = {p: _summary([r for r in out if r["pipeline"] == p]) for p in dm.PIPELINES}
    for p in dm.PIPELINES:
        summ[p]["tokens_mean"] = _mean([r for r in out if r["pipeline"] == p], "tokens")
    summ["language_model"] = float(config["model"] != "uniform")
    summ["pooled_success"] = _mean(out, "success")
    summ["uniform_picker"] = {"pooled_success": _mean(floor, "success"),
                              **{p: {"success": _mean([r for r in floor if r["pipeline"] == p], "success")}
                                 for p in dm.PIPELINES},
                              "episodes": "the model's own (model=uniform)" if floor is out else "run on the same episodes"}
    kinds = sorted(summ["direct"]["by_kind"])
    for p in dm.PIPELINES:
        summ[p]["kinds_won_vs_direct"] = sum(summ[p]["by_kind"][k]["success"] > summ["direct"]["by_kind"][k]["success"]
                                             for k in kinds)
    rows = [{"uid": r["uid"], "seed": r["seed"], "domain": r["domain"], "kind": r["kind"], "model": r["model"],
             "pipeline": r["pipeline"], "metric": mt, "value": r[mt]} for r in out
            for mt in ("success", "precise", "param_error", "collateral")]
    programs = [{"uid": r["uid"], "seed": r["seed"], "pipeline": r["pipeline"], "text": r["text"],
                 "success": r["success"], "precise": r["precise"]} for r in out if r["seed"] == 0][:150]
    budget = {"model": config["model"], "max_statements (lines)": int(config["lm_max_statements"]),
              "max_new_tokens": int(config["max_new_tokens"]), "decoding": "greedy, grammar-constrained (ZapFormat)",
              "episodes_per_pipeline": len(test_ins), "tuning_episodes_per_shots": len(tune_ins),
              "tuning": {"shots_grid": grid, "chosen": chosen,
                         "rule": "highest tuning success; ties: higher precision, then fewer worked examples"},
              "power": _power(rows), "tasks": len(items) + n_tune_items[0]}
    return {"metrics": {"model": config["model"], **summ}, "rows": rows, "tuning": tuning_rows,
            "programs": programs, "budget": budget, "versus": versus}


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Derive each domain's specification from its corpus, tune each model's knob per pipeline on
    tuning seeds, then run every (model, pipeline, instruction, seed) episode as Ray tasks."""
    models = _check(config)
    n_parser, n_lm = int(config["seeds"]), int(config["lm_seeds"])
    # test seeds (the parser's, then the language model's) apart from the corpus, tuning, worked-example and
    # episode seeds
    test_all, (corpus_seed, tune_seed, lm_tune_seed, shot_seed, episode_seed) = evidence.split_seeds(
        seed, n_parser + n_lm, 5)
    test_seeds = test_all[:n_parser]
    lm_seeds = {"test": test_all[n_parser:], "tune": lm_tune_seed, "shots": shot_seed, "episodes": episode_seed}
    specs = {d: dd.derive_spec(dom.corpus(d, int(config["corpus_variants"]), int(config["corpus_edits"]),
                                          corpus_seed % (2 ** 31))) for d in config["domains"]}
    shared = {"specs": specs, "max_statements": int(config["max_statements"])}
    chunk = int(config["chunk"])
    tune_ins = [(ins.uid, -1, ins) for ins in dom.instruction_suite(int(config["tune_per_cell"]), tune_seed,
                                                                     domains=config["domains"], kinds=config["kinds"],
                                                                     prefix="tune")]
    test_ins = [(ins.uid, s, ins) for s, ts in enumerate(test_seeds)
                for ins in dom.instruction_suite(int(config["per_cell"]), ts, domains=config["domains"],
                                                 kinds=config["kinds"], prefix="test")]

    def evaluate(problems):
        """Each ((model, pipeline), {knob})'s mean success on the tuning instructions (pmap tasks)."""
        tune_items = [it for (m, p), st in problems for it in _items("tune", m, p, st["knob"], tune_ins, chunk)]
        tuned = [r for part in runtime.pmap(run_task, tune_items, shared=shared, chunk_size=1,
                                            desc="design-dsl tuning") for r in part]
        return [_mean([r for r in tuned if r["model"] == m and r["pipeline"] == p and r["knob"] == st["knob"]],
                      "success") for (m, p), st in problems]

    # the highest tuning success; ties: the first knob of the grid (the smaller)
    choices = evidence.tune(evaluate, {(m, p): {"knob": list(dm.KNOB_GRID[m])} for m in models for p in dm.PIPELINES},
                            lower_is_better=False)
    chosen = {mp: ch.setting["knob"] for mp, ch in choices.items()}
    tuning_rows = evidence.tuning_rows(choices, keys=("model", "pipeline"), metric="tuning_success")
    n_tune_items = sum(len(_items("tune", m, p, k, tune_ins, chunk)) for (m, p), ch in choices.items()
                       for k in ch.axes["knob"])
    items = [it for m in models for p in dm.PIPELINES for it in _items("test", m, p, chosen[(m, p)], test_ins, chunk)]
    items += _items("test", models[0], "oracle", 0, test_ins, chunk)
    out = [r for part in runtime.pmap(run_task, items, shared=shared, chunk_size=1, desc="design-dsl episodes")
           for r in part]
    primary = models[0]
    by = {(m, p): [r for r in out if r["model"] == m and r["pipeline"] == p] for m in models for p in PIPES}
    summ = {k: _summary(v) for k, v in by.items() if v}
    main = summ[(primary, "interface_ads")]
    direct = summ[(primary, "direct")]
    kinds = sorted(main["by_kind"])
    main["kinds_won_vs_direct"] = sum(main["by_kind"][k]["success"] > direct["by_kind"][k]["success"] for k in kinds)
    gen = summ[(primary, "interface_generic")]
    gen["kinds_won_vs_direct"] = sum(gen["by_kind"][k]["success"] > direct["by_kind"][k]["success"] for k in kinds)
    direct["kinds_won_vs_direct"] = 0
    true_dofs = {d: len(dom.DOMAINS[d].attrs) for d in config["domains"]}
    metrics = {**main, "model": primary,
               "spec": {"basis_matches": sum(len(specs[d].basis) == true_dofs[d] for d in specs),
                        "domains": len(specs),
                        "per_domain": {d: {"basis": specs[d].basis, "true_attributes": true_dofs[d],
                                           "degree_words": {w: round(v, 4) for w, v in sorted(specs[d].degree.items())},
                                           "hole_factor": specs[d].hole_factor} for d in specs}}}
    baselines = {"direct": direct, "interface_generic": gen, "oracle": summ[(primary, "oracle")]}
    for m in models[1:]:
        for p in dm.PIPELINES:
            baselines[f"{m}_{p}"] = summ[(m, p)]
    keep = ("success", "precise", "param_error")
    episodes = [{"uid": r["uid"], "seed": r["seed"], "domain": r["domain"], "kind": r["kind"], "model": r["model"],
                 "pipeline": r["pipeline"], "metric": mt, "value": r[mt]} for r in out for mt in keep]
    examples = [{"uid": r["uid"], "seed": r["seed"], "model": r["model"], "pipeline": r["pipeline"],
                 "statements": " | ".join(r["statements"]), "success": r["success"]}
                for r in out if r["seed"] == 0][:200]
    budget = {"max_statements": int(config["max_statements"]), "episodes_per_pipeline": len(test_ins),
              "tuning_episodes_per_knob": len(tune_ins),
              "tuning": {"grid": {m: list(dm.KNOB_GRID[m]) for m in models},
                         "knob": {"retrieval": "multi (keep emitting statements for targets tied with the first)",
                                  "smollm2": "alpha (length normalisation of option log-likelihoods)"},
                         "chosen": {f"{m}/{p}": chosen[(m, p)] for (m, p) in sorted(chosen)}},
              "corpus": {"variants": int(config["corpus_variants"]), "edits": int(config["corpus_edits"])},
              "tasks": len(items) + n_tune_items}
    lm = _lm_part(config, lm_seeds, specs)
    metrics["lm"] = lm["metrics"]
    budget["lm"] = lm["budget"]
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"episodes": [e for e in episodes if e["model"] == primary], "episodes_all": episodes,
                           "tuning": tuning_rows, "examples": examples, "lm_episodes": lm["rows"],
                           "lm_tuning": lm["tuning"], "lm_programs": lm["programs"],
                           "lm_vs_uniform": lm["versus"]}, budget=budget)


SRC_EFFECTIVE = ("abstract: 'demonstrate the interface's potential to function as an auxiliary module for Large "
                 "Language Models, enabling precise and effective targeted control of prototype models'")
SRC_ADS = ("abstract: 'we devise the interface's operational mechanism and develop an algorithm for its automated "
           "domain specification'")


def _paired(text, metric, compare, a_pipe, b_pipe, value_metric, source):
    return Claim(text=text, metric=metric, compare=compare, op=">", test="paired sign test over seeds",
                 table="episodes", a={"pipeline": a_pipe, "metric": value_metric},
                 b={"pipeline": b_pipe, "metric": value_metric}, pair_on=("uid", "seed"), source=source,
                 kind=_KIND)


# Review: the claims below mirror the abstract, but the primary model at tiny and quick is the lexical parser,
# whose only domain knowledge is the specification it is given and whose instructions come from the same
# templates as the corpus the specification is derived from; with it, direct generation and the generic
# interface score identically and the derived specification wins by construction. The paper's statement is
# about LLMs, so these are sanity checks of the interface and its derivation, not evidence for the paper.
_KIND = "sanity"
_PARSER = " [decoder: the run's primary model; at quick the lexical parser, not an LLM]"


_LM_NOTE = (" [the generating language model: SmolLM2-135M with --set model=smollm2-135m; by default the uniform slot "
            "picker stands in and the claim is incomplete, gated on a language model that beats it]")


def _lm_paired(text, a_pipe, b_pipe, value_metric, summary_metric, source, op=">"):
    return Claim(text=text + _LM_NOTE, metric=f"metrics.lm.{a_pipe}.{summary_metric}",
                 compare=f"metrics.lm.{b_pipe}.{summary_metric}", op=op, test="paired sign test over seeds",
                 table="lm_episodes", a={"pipeline": a_pipe, "metric": value_metric},
                 b={"pipeline": b_pipe, "metric": value_metric}, pair_on=("uid", "seed"), source=source, kind="paper",
                 tie=1e-9)


# Paper claims: one language model writes every pipeline's program with the same grammar-constrained
# greedy decoding (ZapFormat), the same worked-example instructions (the number tuned per pipeline on
# the same grid), the same line and token budgets; decided by the @model=smollm2-135m record (the
# default records, quick and full, put a uniform slot picker in the model's place: a weights-free floor, not
# evidence; the gates below make every one of these claims incomplete there).
_ORACLE = Claim(text="the interface's compiler carries out the exact DSL statement of every instruction (oracle "
                     "success 1): the precondition for any pipeline through the interface to succeed",
                metric="baselines.oracle.success", compare=1.0, op=">=", kind="sanity")
_BASIS = Claim(text="the automated specification recovers each domain's number of independent designer quantities "
                    "(from a corpus phrased in sentence frames held out from the test instructions)",
               metric="metrics.spec.basis_matches", compare="metrics.spec.domains", op=">=", kind="sanity")
_LM_SUCCESS = _lm_paired(
    "the same language model completes more targeted-control tasks through the interface (automated domain "
    "specification) than by generating modelling commands directly (paired over instruction x seed)",
    "interface_ads", "direct", "success", "success", SRC_EFFECTIVE)
_LM_PRECISION = _lm_paired(
    "through the interface, the language model's parameter precision (intended quantity within 2%) is higher than "
    "with direct command generation (paired over instruction x seed)",
    "interface_ads", "direct", "precise", "precision", SRC_EFFECTIVE)
_LM_TARGETED = _lm_paired(
    "targeted control: through the interface, the language model changes fewer of the parameters the instruction "
    "leaves alone (collateral edits, the fraction changed) than with direct command generation (paired over "
    "instruction x seed; lower is better)", "interface_ads", "direct", "collateral", "collateral", SRC_EFFECTIVE,
    op="<")
_LM_ADS = _lm_paired(
    "the automated domain specification matters for the language model: the interface over the derived "
    "specification beats the same interface over the generic geometry-level specification (paired over "
    "instruction x seed)", "interface_ads", "interface_generic", "success", "success", SRC_ADS)
_LM_EFFECTIVE = Claim(
    text="targeted control through the interface is effective for the language model: task success >= 0.5" + _LM_NOTE,
    metric="metrics.lm.interface_ads.success", compare=0.5, op=">=", source=SRC_EFFECTIVE, kind="paper",
    controls=(Control("direct command generation", "metrics.lm.direct.success"),
              Control("interface over the generic specification", "metrics.lm.interface_generic.success")))
_LM_KINDS = Claim(
    text="the language model's gain over direct generation is not carried by one kind of instruction: the interface "
         "wins (higher success) in at least 3 of the 4 instruction kinds" + _LM_NOTE,
    metric="metrics.lm.interface_ads.kinds_won_vs_direct", compare=3, op=">=", source=SRC_EFFECTIVE, kind="paper",
    controls=(Control("interface over the generic specification",
                      "metrics.lm.interface_generic.kinds_won_vs_direct"),))
# The paper's precondition for every language-model claim (session 16 audit: the default, quick and
# full, records judged them on the uniform slot picker): a language model is in the slot, and it does
# something there, i.e. completes more tasks than the uniform picker on the same episodes.
_IS_LM = Claim(text="the paper's precondition: the generating slot holds a language model (SmolLM2-135M with --set "
                    "model=smollm2-135m; by default, model=uniform, it holds the uniform slot picker, and every claim "
                    "about the language model's behaviour is incomplete)",
               metric="metrics.lm.language_model", compare=1.0, op=">=", kind="sanity")
_BEATS_UNIFORM = Claim(
    text="the language model does something: it completes more tasks than the uniform slot picker on the same "
         "episodes (same instructions, worked examples and episode seeds; pooled over the three pipelines, paired "
         "sign test over pipeline x instruction x seed)",
    metric="metrics.lm.pooled_success", compare="metrics.lm.uniform_picker.pooled_success", op=">",
    test="paired sign test over seeds", table="lm_vs_uniform", a={"picker": "lm", "metric": "success"},
    b={"picker": "uniform", "metric": "success"}, pair_on=("pipeline", "uid", "seed"), kind="sanity", tie=1e-9)
# gates: every claim is about the language model's behaviour, so every one needs a language model that beats
# the uniform picker; every claim through the interface needs a compiler that carries out the exact
# statement; the specification claim also a derived specification with the domain's quantities
_LM_ALL = (_LM_SUCCESS, _LM_PRECISION, _LM_TARGETED, _LM_ADS, _LM_EFFECTIVE, _LM_KINDS)
_IS_LM, *_LM_ALL = evidence.gate(_IS_LM, *_LM_ALL)
_BEATS_UNIFORM, *_LM_ALL = evidence.gate(_BEATS_UNIFORM, *_LM_ALL)
_ORACLE, *_LM_ALL = evidence.gate(_ORACLE, *_LM_ALL)
_LM_SUCCESS, _LM_PRECISION, _LM_TARGETED, _LM_ADS, _LM_EFFECTIVE, _LM_KINDS = _LM_ALL
_BASIS, _LM_ADS = evidence.gate(_BASIS, _LM_ADS)
LM_CLAIMS = (_LM_SUCCESS, _LM_PRECISION, _LM_TARGETED, _LM_ADS, _LM_EFFECTIVE, _LM_KINDS)

CLAIMS = LM_CLAIMS + (
    _paired("through the interface (automated domain specification), the same model completes more targeted-control "
            "tasks than by generating modelling commands directly (paired over instruction x seed)" + _PARSER,
            "metrics.success", "baselines.direct.success", "interface_ads", "direct", "success", SRC_EFFECTIVE),
    _paired("through the interface, parameter precision (intended quantity within 2%) is higher than with direct "
            "command generation (paired over instruction x seed)" + _PARSER,
            "metrics.precision", "baselines.direct.precision", "interface_ads", "direct", "precise", SRC_EFFECTIVE),
    _paired("the automated domain specification matters: the interface over the derived specification beats the "
            "same interface over a generic geometry-level specification (paired over instruction x seed)" + _PARSER,
            "metrics.success", "baselines.interface_generic.success", "interface_ads", "interface_generic", "success",
            SRC_ADS),
    Claim(text="targeted control through the interface is effective: task success >= 0.7" + _PARSER,
          metric="metrics.success", compare=0.7, op=">=", source=SRC_EFFECTIVE, kind=_KIND,
          controls=(Control("direct", "baselines.direct.success"),
                    Control("interface_generic", "baselines.interface_generic.success"))),
    Claim(text="the gain over direct generation is not carried by one kind of instruction: the interface wins "
               "(higher success) in at least 3 of the 4 instruction kinds" + _PARSER,
          metric="metrics.kinds_won_vs_direct", compare=3, op=">=", source=SRC_EFFECTIVE, kind=_KIND,
          controls=(Control("interface_generic", "baselines.interface_generic.kinds_won_vs_direct"),)),
    _ORACLE, _BASIS, _IS_LM, _BEATS_UNIFORM,
)


def plots(record: Mapping) -> dict:
    """Success and parameter precision per pipeline (bars, with the spread over seeds), and success
    per instruction kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["episodes"]
    pipes = [p for p in PIPES if any(r["pipeline"] == p for r in rows)]
    seeds = sorted({r["seed"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for j, metric in enumerate(("success", "precise")):
        per = np.array([[np.mean([r["value"] for r in rows if r["pipeline"] == p and r["seed"] == s
                                  and r["metric"] == metric]) for s in seeds] for p in pipes])
        mean = per.mean(1)
        axes[0].bar(np.arange(len(pipes)) + 0.4 * j, mean, width=0.4, label=metric,
                    yerr=[mean - per.min(1), per.max(1) - mean], capsize=3)
    axes[0].set_xticks(np.arange(len(pipes)) + 0.2, pipes, rotation=15, fontsize=8)
    axes[0].set_ylabel("rate (min-max over seeds)")
    axes[0].set_title(f"model: {record['metrics'].get('model')}")
    axes[0].legend(fontsize=8)
    kinds = sorted({r["kind"] for r in rows})
    for j, p in enumerate(pipes):
        vals = [np.mean([r["value"] for r in rows if r["pipeline"] == p and r["kind"] == k
                         and r["metric"] == "success"]) for k in kinds]
        axes[1].bar(np.arange(len(kinds)) + 0.2 * j, vals, width=0.2, label=p)
    axes[1].set_xticks(np.arange(len(kinds)) + 0.3, kinds, fontsize=8)
    axes[1].set_ylabel("task success")
    axes[1].set_title("by instruction kind")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    figs = {"success": fig}
    lm_rows = record["tables"].get("lm_episodes") or []
    if lm_rows:
        model = record["metrics"].get("lm", {}).get("model", "lm")
        kinds = sorted({r["kind"] for r in lm_rows})
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for j, metric in enumerate(("success", "precise")):
            vals = [[r["value"] for r in lm_rows if r["pipeline"] == p and r["metric"] == metric] for p in dm.PIPELINES]
            mean = np.array([np.mean(v) for v in vals])
            half = np.array([1.96 * np.sqrt(m * (1 - m) / max(len(v), 1)) for m, v in zip(mean, vals)])
            axes[0].bar(np.arange(3) + 0.4 * j, mean, width=0.4, label=metric, yerr=half, capsize=3)
        axes[0].set_xticks(np.arange(3) + 0.2, dm.PIPELINES, rotation=15, fontsize=8)
        axes[0].set_ylabel("rate (95% normal band)")
        axes[0].set_title(f"same LM, three pipelines: {model}")
        axes[0].legend(fontsize=8)
        for j, p in enumerate(dm.PIPELINES):
            v = [np.mean([r["value"] for r in lm_rows if r["pipeline"] == p and r["kind"] == kd
                          and r["metric"] == "success"]) for kd in kinds]
            axes[1].bar(np.arange(len(kinds)) + 0.27 * j, v, width=0.27, label=p)
        axes[1].set_xticks(np.arange(len(kinds)) + 0.27, kinds, fontsize=8)
        axes[1].set_ylabel("task success")
        axes[1].set_title("by instruction kind")
        axes[1].legend(fontsize=7)
        fig.tight_layout()
        figs["lm_success"] = fig
    return figs


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="(model x pipeline x knob x chunk of instructions) episodes as pmap tasks (tuning, then test), and the "
        "language model's (pipeline x worked examples x domain chunk) episodes likewise (the model loaded once per "
        "worker process); the specifications are derived once in the driver and shared through the object store",
    checked_against="abstract and the opening of the introduction (arXiv 2506.11070 HTML); the same group's AutoDSL "
                    "(ACL 2024) for how a DSL is derived from a domain corpus (secondary summaries); no code is "
                    "public; the interface's compiler is checked against the exact statement of every instruction "
                    "(oracle) and the voxel kernel against closed-form volumes",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
