"""PoisonedEye reproduction: one poison against a small vision-language RAG over the digits.

The system (``rayml.adversarial.vlrag``): a knowledge base of ``kb_size`` digit images from the
training split with generated captions, rayml's digits CLIP (``rayml.data.image_text``, cached)
as the fused image+text retriever, and a rule-based majority reader as the generator stand-in
and, for the first ``llm_queries`` trials of each seed, a real LM generator: SmolLM2-135M-Instruct
(``rayml.llm.pretrained("smollm2-135m")``, at quick and full; the tests use rayml's shipped embedded
substrate, ``"base"``), greedy, text only (it reads the retrieved texts, not the images), success
being the release's ``target in answer``. Each trial draws a target query
(a held-out digit image and one of three questions) and a target answer: by default a wrong digit
(``target="wrong-digit"``), and also the release's default "I don't know" (table rows
``*/idk``). The attacks (``rayml.adversarial.poisonedeye``):

* ``poisonedeye``: the single-sample poison (poison text + PGD image whose fused key matches the
  query's), ``n`` poisons from different random starts for the poison-count sweep;
* ``poisonedeye-class``: the class-query poison (target: the mean of the query image's
  ``n_aux`` neighbours in an auxiliary image pool disjoint from the queries);
* ``text-only`` (the release's baseline: poison text with the unchanged query image, ``n`` copies)
  and ``random`` (poison text with ``n`` random images of other classes).

Measured: attack success rate (ASR: the reader answers the target) and retrieval success for the
target query against the number of poisons and the retrieval depth ``k``, the class-wise ASR (other
held-out images of the query's class, same question), and the effect of the defences
(``dedup``, ``similarity``, ``perplexity``; thresholds fitted on the clean knowledge base at 1 %
false removal) on ASR and on the clean system's accuracy. Every trial is a Ray task
(``runtime.pmap``); the encoder travels through the object store.

Tuning: the PGD radius of both optimised attacks is chosen on the grid ``eps_grid`` (the release's
8/255 inside it, step ``0.16 eps`` as in the release) on tuning trials kept apart from the test
trials, by ASR at ``k_main`` on the objective it is compared on (ties: the smaller radius): the
single-sample poison once for its target query and once for the class's other queries (its
class-wise numbers use that radius), the class-query poison for the class's other queries; the
baselines have no parameter. The record flags a chosen radius on the grid's edge
(``config.budget.tuning.eps_at_edge``): on the class objective the tuning ASR grows with the radius,
so the largest radius is chosen. The radii of ``eps_probe`` (past the grid's cap) are measured on
the same tuning trials but never chosen: there the poison stops being a perturbation of its query
image (the tuning table's ``own_class_1nn``: the poison's nearest training digit in pixel space has
the query's class; ``closer_than_other_class``: the poison moved less, in L2, than the distance from
the query to the nearest training digit of another class). The class comparison is also made at the
release's radius 8/255 for both attacks on the same test trials (``metrics.paper_eps``). Budget:
every attack injects the same number of pairs with the same text; PGD runs ``steps`` steps.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.evidence import on_edge
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = ("PoisonedEye: Knowledge Poisoning Attack on Retrieval-Augmented Generation based Large Vision-Language "
         "Models, ICML 2025")
METHOD = "poisonedeye"
METHODS = ("poisonedeye", "poisonedeye-class", "text-only", "random")
PAPER_EPS = 8.0 / 255.0
IDK = "I don't know"
# the LM generators: rayml's shipped embedded substrate (tests) and SmolLM2-135M-Instruct (quick, full)
GENERATORS = ("base", "smollm2-135m")

_COMMON = dict(k_main=3, n_aux=10, target="wrong-digit")
SIZES = {
    "tiny": dict(seeds=2, trials=2, tune_trials=2, kb_size=300, n_poisons=[1, 2], ks=[1, 3], n_class_eval=3,
                 eps_grid=[PAPER_EPS, 2 * PAPER_EPS], eps_probe=[4 * PAPER_EPS], steps=20, llm_queries=1,
                 generator="base", retrievers=[0], retriever_trials=1, **_COMMON),
    "quick": dict(seeds=2, trials=20, tune_trials=8, kb_size=1000, n_poisons=[1, 2], ks=[1, 3, 5, 10],
                  n_class_eval=8, eps_grid=[PAPER_EPS, 2 * PAPER_EPS, 4 * PAPER_EPS, 8 * PAPER_EPS],
                  eps_probe=[], steps=100, llm_queries=4, generator="smollm2-135m",
                  retrievers=[0, 1], retriever_trials=20, **_COMMON),
    "full": dict(seeds=10, trials=50, tune_trials=30, kb_size=1257, n_poisons=[1, 2, 3, 5], ks=[1, 3, 5, 10, 20],
                 n_class_eval=13, eps_grid=[PAPER_EPS / 2, PAPER_EPS, 2 * PAPER_EPS, 4 * PAPER_EPS, 8 * PAPER_EPS],
                 eps_probe=[16 * PAPER_EPS], steps=100,
                 llm_queries=20, generator="smollm2-135m", retrievers=[0, 1, 2], retriever_trials=50, **_COMMON),
}
SOURCE_ONE = ("abstract: 'Our attack successfully manipulates the response of the VLRAG system for the target query by "
              "injecting only one poison sample into the knowledge database.'")
SOURCE_PROPS = ("abstract: 'To construct the poison sample, we follow two key properties for the retrieval and "
                "generation process, and identify the solution by satisfying these properties.'")
SOURCE_CLASS = ("abstract: 'we also introduce a class query targeted poisoning attack, a more generalized strategy "
                "that extends the poisoning effect to an entire class of target queries'")

SOURCE_RETRIEVERS = ("abstract: 'Extensive experiments on multiple query datasets, retrievers, and LVLMs "
                     "demonstrate that our attack is highly effective'")

_STATE: dict = {}  # per worker process: knowledge bases and defence models by (kb_seed, kb_size)


def _int_list(config, key, lo=1):
    v = config[key]
    if not isinstance(v, list) or not v or any(isinstance(x, bool) or not isinstance(x, int) or x < lo for x in v):
        raise ValueError(f"{key} must be a non-empty list of integers >= {lo}, got {v!r}")
    if len(set(v)) != len(v):
        raise ValueError(f"{key} must not repeat values, got {v!r}")
    return sorted(v)


def _check(config: Mapping[str, Any]) -> None:
    for key in ("seeds", "trials", "tune_trials", "kb_size", "n_class_eval", "steps", "k_main", "n_aux"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    if isinstance(config["llm_queries"], bool) or not isinstance(config["llm_queries"], int) or \
            not 0 <= config["llm_queries"] <= config["trials"]:
        raise ValueError(f"llm_queries must be an integer in 0..trials, got {config['llm_queries']!r}")
    if config["generator"] not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {config['generator']!r}")
    rs = config["retrievers"]
    if (not isinstance(rs, list) or not rs or len(set(rs)) != len(rs)
            or any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in rs)):
        raise ValueError(f"retrievers must be a non-empty list of distinct encoder seeds >= 0, got {rs!r}")
    rt = config["retriever_trials"]
    if isinstance(rt, bool) or not isinstance(rt, int) or not 1 <= rt <= config["seeds"] * config["trials"]:
        raise ValueError(f"retriever_trials must be an integer in 1..seeds*trials, got {rt!r}")
    if config["kb_size"] > 1257 or config["kb_size"] < 20:
        raise ValueError(f"kb_size must be in 20..1257 (the training split), got {config['kb_size']}")
    if config["n_class_eval"] > 20:
        raise ValueError(f"n_class_eval must be <= 20 (held-out images per class), got {config['n_class_eval']}")
    if config["n_aux"] > 250:
        raise ValueError(f"n_aux must be <= 250 (the auxiliary pool), got {config['n_aux']}")
    ks = _int_list(config, "ks")
    if config["k_main"] not in ks:
        raise ValueError(f"k_main must be one of ks {ks}, got {config['k_main']}")
    if max(ks) > config["kb_size"]:
        raise ValueError(f"ks must not exceed kb_size, got {ks}")
    ns = _int_list(config, "n_poisons")
    if 1 not in ns or max(ns) > 10:
        raise ValueError(f"n_poisons must include 1 (the paper's single poison) and be <= 10, got {ns}")
    grid = config["eps_grid"]
    if (not isinstance(grid, list) or not grid
            or any(isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e <= 0.5 for e in grid)):
        raise ValueError(f"eps_grid must be a non-empty list of radii in (0, 0.5], got {grid!r}")
    if not any(abs(e - PAPER_EPS) < 1e-9 for e in grid):
        raise ValueError(f"eps_grid must hold the release's radius 8/255 = {PAPER_EPS:.6f}, got {grid!r}")
    probe = config["eps_probe"]
    if (not isinstance(probe, list)
            or any(isinstance(e, bool) or not isinstance(e, (int, float)) or not 0 < e <= 1 for e in probe)):
        raise ValueError(f"eps_probe must be a list (may be empty) of radii in (0, 1], got {probe!r}")
    if any(abs(e - g) < 1e-9 for e in probe for g in grid):
        raise ValueError(f"eps_probe must not repeat a radius of eps_grid {grid!r}, got {probe!r}")
    if config["target"] not in ("wrong-digit", "i-dont-know"):
        raise ValueError(f"target must be 'wrong-digit' or 'i-dont-know', got {config['target']!r}")


def _pools():
    from rayml.data import image_text as it

    xtr, ytr, xte, yte = it.digits_split()
    half = len(xte) // 2
    return xtr, ytr, xte[:half], yte[:half], xte[half:], yte[half:]


def _system(encoder, kb_seed: int, kb_size: int, retriever: int = 0):
    """The clean knowledge base of a seed, its defence model and the filters' masks (cached per process;
    ``retriever`` is the encoder's seed, part of the key)."""
    from rayml.adversarial import vlrag as V

    key = (getattr(encoder, "config", None), retriever, kb_seed, kb_size)
    if key not in _STATE:
        xtr, ytr, *_ = _pools()
        rng = np.random.default_rng(kb_seed)
        pick = np.sort(rng.choice(len(xtr), size=kb_size, replace=False))
        kb = V.build_knowledge_base(encoder, xtr[pick], V.knowledge_texts(ytr[pick], rng))
        dm = V.fit_defences(kb)
        masks = {d: dm.allowed(kb, d) for d in ("similarity", "perplexity")}
        _STATE.clear()
        _STATE[key] = (kb, dm, masks)
    return _STATE[key]


def _evaluate(encoder, kb, dm, masks, poisons, question, target, qkey, ks, defences, n):
    """ASR and retrieval of the first ``n`` poisons for one query, per (defence, k)."""
    from rayml.adversarial import vlrag as V

    images = np.stack([p.image for p in poisons[:n]])
    kb_n = kb.extend(encoder, images, [p.text for p in poisons[:n]])
    pm = {d: np.concatenate([masks[d], dm.allowed(V.KnowledgeBase(images, tuple(p.text for p in poisons[:n]),
                                                                  kb_n.image_emb[len(kb):], kb_n.text_emb[len(kb):],
                                                                  kb_n.keys[len(kb):]), d)])
          for d in masks}
    out = {}
    for d in defences:
        for k in ks:
            idx = V.defended_ranking(kb_n, qkey, k, d, dm, pm.get(d))
            ans = V.read(question, [kb_n.texts[j] for j in idx])
            out[(d, k)] = {"asr": float(ans == target), "retrieved": float(kb_n.poison[idx].any()),
                           "top1": float(kb_n.poison[idx[0]])}
    return out, kb_n


def run_trial(item: tuple, shared: Mapping[str, Any]) -> dict:
    """One target query: craft every attack's poisons, then measure retrieval and answers."""
    from rayml.adversarial import poisonedeye as pe
    from rayml.adversarial import vlrag as V
    from rayml.data import image_text as it

    phase, s_idx, t_idx, trial_seed, kb_seed, eps_set, *rest = item
    retriever = int(rest[0]) if rest else int(shared["config"]["retrievers"][0])
    enc, config = shared["encoders"][retriever], shared["config"]
    eps_sample, eps_sample_class, eps_class = eps_set
    steps = int(config["steps"])
    pgd = lambda e: pe.PoisonConfig(eps=e, step=0.16 * e, steps=steps)  # noqa: E731
    cfg_s, cfg_sc, cfg_c = pgd(eps_sample), pgd(eps_sample_class), pgd(eps_class)
    kb, dm, masks = _system(enc, kb_seed, int(config["kb_size"]), retriever)
    _, _, xq, yq, xa, ya = _pools()
    rng = np.random.default_rng(trial_seed)
    qi = int(rng.integers(len(xq)))
    y = int(yq[qi])
    question = V.QUESTIONS[int(rng.integers(len(V.QUESTIONS)))]
    wrong = it.NUMBER_WORDS[(y + 1 + int(rng.integers(9))) % 10]
    target = wrong if config["target"] == "wrong-digit" else IDK
    target_norm = V.normalize_answer(target)
    same = np.flatnonzero((yq == y) & (np.arange(len(yq)) != qi))
    # the class's queries far from the target (issue 43: every digit class is one tight cluster, so
    # random class queries sit at a ceiling): the lower half of their image similarity to the target
    sim_same = enc.encode_images(xq[same]) @ enc.encode_images(xq[qi][None])[0]
    far = same[sim_same <= np.median(sim_same)]
    class_q = rng.choice(far, size=min(int(config["n_class_eval"]), len(far)), replace=False)
    class_sim = {"far": float(np.mean(sim_same[np.isin(same, class_q)])), "all": float(np.mean(sim_same))}
    others = np.flatnonzero(ya != y)
    rnd_imgs = xa[rng.choice(others, size=max(config["n_poisons"]), replace=False)]
    start_seeds = [None] + [int(s) for s in rng.integers(1 << 31, size=max(config["n_poisons"]) - 1)]
    qkey = V.query_key(enc, xq[qi], question)
    ks, k_main = sorted(config["ks"]), int(config["k_main"])

    class_keys = [V.query_key(enc, xq[j], question) for j in class_q]

    def class_stats(kb_n):
        """ASR, top-1 retrieval rate and mean retrieval margin of the last entry (the poison) over the
        class's far queries."""
        hits, top1, margin = [], [], []
        for ck in class_keys:
            idx = V.retrieve(kb_n.keys, ck, k_main)
            hits.append(V.read(question, [kb_n.texts[i] for i in idx]) == target_norm)
            top1.append(idx[0] == len(kb_n) - 1)
            margin.append(pe.retrieval_margin(kb_n, kb_n.keys[-1], ck))
        return {"asr": float(np.mean(hits)), "top1": float(np.mean(top1)), "margin": float(np.mean(margin))}

    def class_asr(kb_n):
        return class_stats(kb_n)["asr"]

    if phase == "tune":
        p_s = pe.sample_poison(enc, xq[qi], question, target, cfg_s)
        res, kb_s = _evaluate(enc, kb, dm, masks, [p_s], question, target_norm, qkey, [k_main], ["none"], 1)
        p_c = pe.class_poison(enc, xq[qi], question, target, xa, int(config["n_aux"]), cfg_c)
        _, kb_c = _evaluate(enc, kb, dm, masks, [p_c], question, target_norm, qkey, [k_main], ["none"], 1)
        own = {"asr": res[("none", k_main)]["asr"], "top1": res[("none", k_main)]["top1"],
               "margin": pe.retrieval_margin(kb_s, kb_s.keys[-1], qkey)}
        stats = {"poisonedeye": own, "poisonedeye@class": class_stats(kb_s), "poisonedeye-class": class_stats(kb_c)}
        return {"phase": phase, "eps": eps_set, "stats": stats,
                "image": {"poisonedeye": _image_check(p_s.image, xq[qi], y),
                          "poisonedeye-class": _image_check(p_c.image, xq[qi], y)}}

    if phase == "retriever":  # another retriever: the single poison against its own encoder (white-box)
        row = {}
        for m, p in (("poisonedeye", pe.sample_poison(enc, xq[qi], question, target, cfg_s)),
                     ("text-only", pe.text_only_poison(enc, xq[qi], question, target))):
            res, kb_n = _evaluate(enc, kb, dm, masks, [p], question, target_norm, qkey, [k_main], ["none"], 1)
            row[m] = {"asr_sample": res[("none", k_main)]["asr"], "top1_sample": res[("none", k_main)]["top1"]}
        clean_idx = V.retrieve(kb.keys, qkey, k_main)
        row["clean"] = {"accuracy": float(V.read(question, [kb.texts[j] for j in clean_idx]) == it.NUMBER_WORDS[y])}
        return {"phase": phase, "retriever": retriever, "seed": s_idx, "query": t_idx, "single": row}

    poisons = {
        "poisonedeye": [pe.sample_poison(enc, xq[qi], question, target, cfg_s, seed=s) for s in start_seeds],
        "poisonedeye-class": [pe.class_poison(enc, xq[qi], question, target, xa, int(config["n_aux"]), cfg_c)],
        "text-only": [pe.text_only_poison(enc, xq[qi], question, target)] * max(config["n_poisons"]),
        "random": [pe.random_poison(enc, img, xq[qi], question, target) for img in rnd_imgs],
    }
    sweep, single = {}, {}
    for m, plist in poisons.items():
        for n in config["n_poisons"]:
            if n > len(plist):
                continue
            res, kb_n = _evaluate(enc, kb, dm, masks, plist, question, target_norm, qkey, ks, V.DEFENCES, n)
            for (d, k), v in res.items():
                sweep[(m, n, d, k)] = v
            if n == 1:
                single[m] = {"asr_sample": res[("none", k_main)]["asr"], "top1_sample": res[("none", k_main)]["top1"],
                             "retrieved_sample": res[("none", k_main)]["retrieved"],
                             "margin": pe.retrieval_margin(kb_n, kb_n.keys[-1], qkey), "asr_class": class_asr(kb_n)}
    # the class comparison at the release's radius for both attacks (same trials, same class queries)
    p8 = poisons["poisonedeye"][0] if eps_sample == PAPER_EPS else pe.sample_poison(enc, xq[qi], question, target,
                                                                                   pgd(PAPER_EPS))
    single["poisonedeye@paper-eps"] = {"asr_class": class_asr(kb.extend(enc, p8.image[None], [p8.text]))}
    p8 = poisons["poisonedeye-class"][0] if eps_class == PAPER_EPS else pe.class_poison(
        enc, xq[qi], question, target, xa, int(config["n_aux"]), pgd(PAPER_EPS))
    single["poisonedeye-class@paper-eps"] = {"asr_class": class_asr(kb.extend(enc, p8.image[None], [p8.text]))}
    # on the class's other queries the single-sample poison gets the radius tuned for that objective
    if eps_sample_class != eps_sample:
        p = pe.sample_poison(enc, xq[qi], question, target, cfg_sc)
        single["poisonedeye"]["asr_class"] = class_asr(kb.extend(enc, p.image[None], [p.text]))
    # the release's default target, "I don't know", for the single poison and the text-only baseline
    for m, p in (("poisonedeye/idk", pe.sample_poison(enc, xq[qi], question, IDK, cfg_s)),
                 ("text-only/idk", pe.text_only_poison(enc, xq[qi], question, IDK))):
        res, kb_n = _evaluate(enc, kb, dm, masks, [p], question, V.normalize_answer(IDK), qkey, [k_main], ["none"], 1)
        single[m] = {"asr_sample": res[("none", k_main)]["asr"], "top1_sample": res[("none", k_main)]["top1"],
                     "retrieved_sample": res[("none", k_main)]["retrieved"],
                     "margin": pe.retrieval_margin(kb_n, kb_n.keys[-1], qkey)}
    clean = {}
    for d in V.DEFENCES:
        for k in ks:
            idx = V.defended_ranking(kb, qkey, k, d, dm, masks.get(d))
            ans = V.read(question, [kb.texts[j] for j in idx])
            clean[(d, k)] = {"accuracy": float(ans == it.NUMBER_WORDS[y]), "target_rate": float(ans == target_norm)}
    gain = poisons["poisonedeye"][0].similarity - poisons["poisonedeye"][0].start_similarity
    contexts = None
    if t_idx < int(config["llm_queries"]):  # the retrieved texts at k_main, for the SmolLM2 generator
        contexts = {"clean": [kb.texts[j] for j in V.retrieve(kb.keys, qkey, k_main)]}
        for m in ("poisonedeye", "text-only", "random"):
            kb_n = kb.extend(enc, poisons[m][0].image[None], [poisons[m][0].text])
            contexts[m] = [kb_n.texts[j] for j in V.retrieve(kb_n.keys, qkey, k_main)]
    single["class-queries"] = {"similarity_far": class_sim["far"], "similarity_all": class_sim["all"]}
    return {"phase": phase, "seed": s_idx, "query": t_idx, "label": y, "sweep": sweep, "single": single,
            "clean": clean, "pgd_gain": float(gain), "llm": None if contexts is None else
            {"question": question, "target": target, "truth": it.NUMBER_WORDS[y], "contexts": contexts}}


_LM: dict = {}


def run_llm(item: tuple, shared: Mapping[str, Any]) -> dict:
    """The LM generator answers one trial's retrieved contexts (greedy, one prompt at a time)."""
    from rayml.adversarial import vlrag as V

    s_idx, t_idx, question, target, truth, contexts = item
    model = shared["generator"]
    if model not in _LM:
        import rayml.llm

        _LM.clear()
        _LM[model] = rayml.llm.pretrained(model)  # each node converts / caches its own copy
    lm = _LM[model]
    out = {}
    for name, texts in sorted(contexts.items()):
        system, user = V.lm_prompt(question, texts)
        if hasattr(lm.tokenizer, "chat"):
            prompt = lm.tokenizer.chat(user, system=system)
        else:  # the embedded substrate has no chat template
            prompt = f"{system}\n{user}\nAnswer:"
        answer = lm.generate([prompt], max_new_tokens=int(shared["max_new_tokens"]))[0]
        out[name] = {"answer": answer, "target": float(V.mentions(answer, target)),
                     "truth": float(V.mentions(answer, truth))}
    return {"seed": s_idx, "query": t_idx, "out": out}


def _image_check(poison_image, query_image, label: int) -> dict:
    """Is the poison still an image of its query's class? Pixel-space checks against the training split:
    its nearest training digit (L2) has the query's class, and it moved less from the query than the
    query's distance to the nearest training digit of another class."""
    xtr, ytr, *_ = _pools()
    d = np.linalg.norm(xtr - poison_image[None], axis=1)
    other = np.linalg.norm(xtr[ytr != label] - query_image[None], axis=1).min()
    return {"own_class_1nn": float(ytr[int(np.argmin(d))] == label),
            "closer_than_other_class": float(np.linalg.norm(poison_image - query_image) < other)}


def _tune(out, grid, probe=()):
    """Per optimised attack and objective: the radius of highest tuning top-1 retrieval rate (the poison
    ranked first), ties broken by the mean retrieval margin (issue 43: ASR at k = 3 is flat at 1.0, so
    ties went to the smallest radius).

    ``poisonedeye``: the single-sample poison on its target query; ``poisonedeye@class``: the same
    poison on the class's far queries; ``poisonedeye-class``: the class-query poison on them.
    Radii of ``probe`` are measured (rows with ``in_grid`` false) but never chosen. Returns the chosen
    radii, the tuning table's rows and, per objective, where the choice sits on the grid.
    """
    rows, chosen, where = [], {}, {}
    radii = sorted(grid) + sorted(probe)
    for name in ("poisonedeye", "poisonedeye@class", "poisonedeye-class"):
        score = {}
        for e in radii:
            mine = [o["stats"][name] for o in out if o["eps"][0] == e]
            vals = {m: float(np.mean([x[m] for x in mine])) for m in ("top1", "margin", "asr")}
            score[e] = (vals["top1"], vals["margin"])
            for m, v in vals.items():
                rows.append({"method": name, "eps": e, "in_grid": e in grid, "metric": f"tuning_{m}", "value": v})
        chosen[name] = max(grid, key=lambda e: score[e])
        where[name] = {"at_edge": on_edge(chosen[name], grid), "at_upper_edge": on_edge(chosen[name], grid, "high"),
                       "flat_grid": len({score[e][0] for e in grid}) == 1}
    for name in ("poisonedeye", "poisonedeye-class"):
        for metric in ("own_class_1nn", "closer_than_other_class"):
            for e in radii:
                rows.append({"method": name, "eps": e, "in_grid": e in grid, "metric": metric,
                             "value": float(np.mean([o["image"][name][metric] for o in out if o["eps"][0] == e]))})
    return chosen, rows, where


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune the PGD radius on held-out trials, then every test trial as a Ray task."""
    from rayml.data import image_text as it

    _check(config)
    retrievers = [int(r) for r in config["retrievers"]]
    encoders = {r: it.load_or_train(r) for r in retrievers}
    grid = [float(e) for e in config["eps_grid"]]
    probe = [float(e) for e in config["eps_probe"]]
    cfg = dict(config)
    shared = {"encoders": encoders, "config": cfg}
    tune_seeds = runtime.seeds(np.random.SeedSequence([seed, 1]), int(config["tune_trials"]) + 1)
    tune_items = [("tune", -1, t, ts, tune_seeds[-1], (e, e, e)) for t, ts in enumerate(tune_seeds[:-1])
                  for e in grid + probe]
    tuned = runtime.pmap(run_trial, tune_items, shared=shared, desc="poisonedeye tuning")
    chosen, tuning_rows, where = _tune(tuned, grid, probe)
    kb_seeds = runtime.seeds(np.random.SeedSequence([seed, 0]), int(config["seeds"]))
    items = []
    for s, kbs in enumerate(kb_seeds):
        for t, ts in enumerate(runtime.seeds(np.random.SeedSequence([seed, 2, s]), int(config["trials"]))):
            items.append(("test", s, t, ts, kbs, (chosen["poisonedeye"], chosen["poisonedeye@class"],
                                                  chosen["poisonedeye-class"])))
    # the other retrievers: the single poison at the radius tuned on the first, the first seeds' trials
    r_items = retriever_items(items, chosen["poisonedeye"], retrievers, int(config["retriever_trials"]))
    out = runtime.pmap(run_trial, items + r_items, shared=shared, desc="poisonedeye trials")
    out, r_out = [o for o in out if o["phase"] == "test"], [o for o in out if o["phase"] == "retriever"]
    items = items + r_items
    llm_items = [(o["seed"], o["query"], o["llm"]["question"], o["llm"]["target"], o["llm"]["truth"],
                  o["llm"]["contexts"]) for o in out if o["llm"] is not None]
    llm = []
    if llm_items:
        # one chunk per worker slot: each worker process loads SmolLM2 once
        llm = runtime.pmap(run_llm, llm_items, shared={"max_new_tokens": 16, "generator": config["generator"]},
                           chunk_size=max(1, -(-len(llm_items) // 2)), desc="poisonedeye SmolLM2 generator")
    outcome = _summarise(out, config, chosen, tuning_rows, grid, len(items) + len(tune_items), llm, where, probe)
    return _add_retrievers(outcome, out, r_out, retrievers)


def retriever_items(items, eps: float, retrievers, n: int) -> list[tuple]:
    """The other retrievers' trials: the first ``n`` test items again, as phase ``"retriever"`` with
    the encoder seed appended and the single poison's radius ``eps`` (tuned on the first retriever)."""
    return [("retriever", *item[1:5], (eps,) * 3, r) for r in retrievers[1:] for item in items[:n]]


def _add_retrievers(outcome: Outcome, out, r_out, retrievers) -> Outcome:
    """Per retriever (encoder seed): the single poison's top-1 and ASR and the text-only baseline's; the
    first retriever's from the main trials (the same first ``retriever_trials`` of them)."""
    n = len({(o["seed"], o["query"]) for o in r_out if o["retriever"] == retrievers[1]}) if len(retrievers) > 1 \
        else len(out)
    per = {}
    for r in retrievers:
        rows = [o["single"] for o in r_out if o["retriever"] == r] if r != retrievers[0] else [o["single"] for o in out[:n]]
        per[f"encoder_seed={r}"] = {
            "top1_sample": float(np.mean([x["poisonedeye"]["top1_sample"] for x in rows])),
            "asr_sample": float(np.mean([x["poisonedeye"]["asr_sample"] for x in rows])),
            "text_only_top1_sample": float(np.mean([x["text-only"]["top1_sample"] for x in rows])),
            "text_only_asr_sample": float(np.mean([x["text-only"]["asr_sample"] for x in rows])),
            "trials": len(rows)}
    outcome.metrics["retrievers"] = {**per, "top1_min": min(v["top1_sample"] for v in per.values()),
                                     "asr_min": min(v["asr_sample"] for v in per.values())}
    # the control's statistic is the claim's: the smallest over the retrievers (the largest is kept beside it)
    outcome.baselines["text_only"]["retrievers"] = {
        "top1_min": min(v["text_only_top1_sample"] for v in per.values()),
        "top1_max": max(v["text_only_top1_sample"] for v in per.values()),
        "asr_min": min(v["text_only_asr_sample"] for v in per.values())}
    outcome.tables["retrievers"] = [{"retriever": o["retriever"], "seed": o["seed"], "query": o["query"],
                                     "method": m, "metric": k, "value": float(v)}
                                    for o in r_out for m, d in o["single"].items() for k, v in d.items()]
    return outcome


def _summarise(out, config, chosen, tuning_rows, grid, tasks, llm=(), where=None, probe=()) -> Outcome:
    from rayml.adversarial import vlrag as V

    k_main, ks, ns = int(config["k_main"]), sorted(config["ks"]), sorted(config["n_poisons"])
    trial_rows, sweep_rows, clean_rows = [], [], []
    for o in out:
        for m, vals in o["single"].items():
            for metric, v in vals.items():
                trial_rows.append({"method": m, "seed": o["seed"], "query": o["query"], "metric": metric,
                                   "value": float(v)})
    seeds = sorted({o["seed"] for o in out})
    for s in seeds:
        mine = [o for o in out if o["seed"] == s]
        for key in mine[0]["sweep"]:
            m, n, d, k = key
            for metric in ("asr", "retrieved"):
                sweep_rows.append({"method": m, "n_poisons": n, "defence": d, "k": k, "seed": s, "metric": metric,
                                   "value": float(np.mean([o["sweep"][key][metric] for o in mine]))})
        for (d, k) in mine[0]["clean"]:
            for metric in ("accuracy", "target_rate"):
                clean_rows.append({"defence": d, "k": k, "seed": s, "metric": metric,
                                   "value": float(np.mean([o["clean"][(d, k)][metric] for o in mine]))})

    def mean_single(m, metric):
        return float(np.mean([o["single"][m][metric] for o in out]))

    def mean_sweep(m, n, d, k, metric="asr"):
        vals = [o["sweep"][(m, n, d, k)][metric] for o in out if (m, n, d, k) in o["sweep"]]
        return float(np.mean(vals)) if vals else None

    def block(m):
        b = {metric: mean_single(m, metric) for metric in ("asr_sample", "top1_sample", "retrieved_sample", "margin")}
        if m in METHODS:
            b["asr_class"] = mean_single(m, "asr_class")
            b["asr_by_k"] = {f"k={k}": mean_sweep(m, 1, "none", k) for k in ks}
            b["asr_by_n"] = {f"n={n}": mean_sweep(m, n, "none", max(ks)) for n in ns
                             if mean_sweep(m, n, "none", max(ks)) is not None}
            b["asr_by_defence"] = {d: {f"n={n}": mean_sweep(m, n, d, k_main) for n in ns
                                       if mean_sweep(m, n, d, k_main) is not None} for d in V.DEFENCES}
            b["asr_by_defence_kmax"] = {d: {f"n={n}": mean_sweep(m, n, d, max(ks)) for n in ns
                                            if mean_sweep(m, n, d, max(ks)) is not None} for d in V.DEFENCES}
        return b

    clean = {d: {f"k={k}": {metric: float(np.mean([o["clean"][(d, k)][metric] for o in out]))
                            for metric in ("accuracy", "target_rate")} for k in ks} for d in V.DEFENCES}
    metrics = {**block("poisonedeye"),
               "class_variant": block("poisonedeye-class"),
               "asr_class": mean_single("poisonedeye-class", "asr_class"),
               "idk_target": {"poisonedeye": block("poisonedeye/idk"), "text_only": block("text-only/idk")},
               "clean": clean,
               "clean_accuracy": clean["none"][f"k={k_main}"]["accuracy"],
               "clean_target_rate": clean["none"][f"k={k_main}"]["target_rate"],
               "paper_eps": {"eps": PAPER_EPS, "asr_class": mean_single("poisonedeye-class@paper-eps", "asr_class")},
               "pgd_gain_min": float(min(o["pgd_gain"] for o in out)),
               "class_queries": {"similarity_far": mean_single("class-queries", "similarity_far"),
                                 "similarity_all": mean_single("class-queries", "similarity_all")},
               "eps": chosen, "k_main": k_main, "trials": len(out)}
    baselines = {"sample_poison": {"asr_class": mean_single("poisonedeye", "asr_class")},
                 "sample_poison_paper_eps": {"asr_class": mean_single("poisonedeye@paper-eps", "asr_class")},
                 "text_only": block("text-only"), "random": block("random")}
    llm_rows = []
    if llm:
        for r in llm:
            for name, v in r["out"].items():
                for metric in ("target", "truth"):
                    llm_rows.append({"method": name, "seed": r["seed"], "query": r["query"], "metric": metric,
                                     "value": v[metric]})
        rate = lambda name, metric: float(np.mean([r["out"][name][metric] for r in llm]))  # noqa: E731
        metrics["llm"] = {"generator": config["generator"],
                          "trials": len(llm), "asr": rate("poisonedeye", "target"),
                          "clean_accuracy": rate("clean", "truth"), "clean_target_rate": rate("clean", "target")}
        baselines["text_only"]["llm_asr"] = rate("text-only", "target")
        baselines["random"]["llm_asr"] = rate("random", "target")
        baselines["clean_system"] = {"llm_asr": rate("clean", "target")}
    budget = {"poisons_per_attack": ns, "pgd_steps": int(config["steps"]), "step_over_eps": 0.16,
              "text": "the same poison text for every attack of a trial",
              "trials": len(out), "tasks": tasks, "kb_size": int(config["kb_size"]),
              "tuning": {"grid": grid, "chosen": chosen, "objective": "top-1 retrieval rate of the poison on tuning "
                         "trials apart from the test trials, ties broken by the mean retrieval margin "
                         "(poisonedeye: its target query; poisonedeye@class and poisonedeye-class: the class's "
                         "far queries)",
                         "eps_at_edge": {n: w["at_edge"] for n, w in (where or {}).items()},
                         "eps_at_upper_edge": {n: w["at_upper_edge"] for n, w in (where or {}).items()},
                         "flat_grid": {n: w["flat_grid"] for n, w in (where or {}).items()},
                         "probe": {"eps": list(probe), "note": "measured on the tuning trials past the grid's cap, "
                                   "never chosen (tuning table rows with in_grid false)"},
                         "paper_eps_comparison": "both class-wise attacks also at the release's 8/255 on the test "
                                                 "trials (metrics.paper_eps, baselines.sample_poison_paper_eps)",
                         "text-only / random": "no parameter"}}
    tables = {"trials": trial_rows, "sweep": sweep_rows, "clean": clean_rows, "tuning": tuning_rows,
              "llm": llm_rows, "llm_answers": [{"seed": r["seed"], "query": r["query"], "method": n,
                                                "answer": v["answer"]} for r in llm for n, v in r["out"].items()]}
    # this run as the pilot of every paired paper claim: the pairs its own test needs for power 0.8
    metrics["power"] = evidence.claim_power(tables, CLAIMS)
    return Outcome(metrics=metrics, baselines=baselines, tables=tables, budget=budget)


def _paired(text, metric, compare, table_metric, a_method, b_method, source, controls=()):
    return Claim(text=text, metric=metric, compare=compare, op=">", test="paired sign test over seeds",
                 table="trials", a={"method": a_method, "metric": table_metric},
                 b={"method": b_method, "metric": table_metric}, pair_on=("seed", "query"), source=source,
                 controls=controls)


CLAIMS = (
    Claim(text="one poison sample manipulates the answer to its target query: ASR >= 0.8 at k=3 (wrong-digit target)",
          metric="metrics.asr_sample", compare=0.8, op=">=", source=SOURCE_ONE,
          controls=(Control("text-only", "baselines.text_only.asr_sample"),
                    Control("random", "baselines.random.asr_sample"))),
    Claim(text="the retrieval property: the optimised poison is retrieved first for its target query in >= 90% of "
               "trials",
          metric="metrics.top1_sample", compare=0.9, op=">=", source=SOURCE_PROPS,
          controls=(Control("text-only", "baselines.text_only.top1_sample"),
                    Control("random", "baselines.random.top1_sample"))),
    _paired("the retrieval-optimised poison beats the text-only poison (generation property alone) in ASR, paired "
            "over (seed, query)", "metrics.asr_sample", "baselines.text_only.asr_sample", "asr_sample",
            "poisonedeye", "text-only", SOURCE_PROPS,
            (Control("random", "baselines.random.asr_sample", a={"method": "random", "metric": "asr_sample"}),)),
    _paired("the class-query poison beats the single-sample poison on the class's far queries (the lower half of "
            "within-class image similarity to the target), paired over (seed, query)", "metrics.asr_class", "baselines.sample_poison.asr_class", "asr_class",
            "poisonedeye-class", "poisonedeye", SOURCE_CLASS,
            (Control("text-only", "baselines.text_only.asr_class", a={"method": "text-only", "metric": "asr_class"}),)),
    _paired("at the release's radius 8/255 for both attacks, the class-query poison beats the single-sample poison "
            "on the class's far queries, paired over (seed, query)", "metrics.paper_eps.asr_class",
            "baselines.sample_poison_paper_eps.asr_class", "asr_class", "poisonedeye-class@paper-eps",
            "poisonedeye@paper-eps", SOURCE_CLASS + "; the release's radius 0.0625 in SigLIP units (8/255 in [0, 1] "
            "pixels, llava_inference_rag_poison_final_class.py)",
            (Control("text-only", "baselines.text_only.asr_class", a={"method": "text-only", "metric": "asr_class"}),)),
    Claim(text="the class-query poison extends to the class: ASR >= 0.5 over the class's far queries (the lower half "
               "of within-class image similarity to the target)",
          metric="metrics.asr_class", compare=0.5, op=">=", source=SOURCE_CLASS,
          controls=(Control("single-sample poison", "baselines.sample_poison.asr_class"),
                    Control("text-only", "baselines.text_only.asr_class"),
                    Control("random", "baselines.random.asr_class"))),
    Claim(text="on every retriever (digits CLIPs trained from encoder seeds 0 and 1, each attacked white-box), the "
               "optimised poison is retrieved first for its target query in >= 90% of trials",
          metric="metrics.retrievers.top1_min", compare=0.9, op=">=", source=SOURCE_RETRIEVERS,
          controls=(Control("text-only (its smallest over the retrievers)", "baselines.text_only.retrievers.top1_min"),)),
    Claim(text="with a real LM as the generator (SmolLM2-135M at quick), one poison makes it give the target answer: "
               "ASR >= 0.5 at k=3",
          metric="metrics.llm.asr", compare=0.5, op=">=", source=SOURCE_ONE,
          controls=(Control("text-only", "baselines.text_only.llm_asr"), Control("random", "baselines.random.llm_asr"),
                    Control("no poison", "baselines.clean_system.llm_asr"))),
    Claim(text="the LM generator answers the clean system's queries from the retrieved captions (accuracy >= 0.5)",
          metric="metrics.llm.clean_accuracy", compare=0.5, op=">=", kind="sanity"),
    Claim(text="the clean system works: reader accuracy >= 0.85 at k=3 without poison", metric="metrics.clean_accuracy",
          compare=0.85, op=">=", kind="sanity"),
    Claim(text="without poison the system almost never gives the target answer (rate <= 0.05)",
          metric="metrics.clean_target_rate", compare=0.05, op="<=", kind="sanity"),
    Claim(text="the class's far queries are farther from the target than the class's queries on average (mean image "
               "cosine)", metric="metrics.class_queries.similarity_far", compare="metrics.class_queries.similarity_all",
          op="<", kind="sanity"),
    Claim(text="PGD never lowers the poison's similarity to its target (best iterate kept)",
          metric="metrics.pgd_gain_min", compare=0.0, op=">=", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """ASR against retrieval depth and poison count (bands: min-max over seeds); defences."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["sweep"]
    k_main = record["metrics"]["k_main"]

    def series(m, x_key, fixed):
        pts = {}
        for r in rows:
            if r["method"] == m and r["metric"] == "asr" and all(r[k] == v for k, v in fixed.items()):
                pts.setdefault(r[x_key], []).append(r["value"])
        xs = sorted(pts)
        return (np.array(xs), np.array([np.mean(pts[x]) for x in xs]), np.array([np.min(pts[x]) for x in xs]),
                np.array([np.max(pts[x]) for x in xs]))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ks = sorted({r["k"] for r in rows})
    for m in METHODS:
        x, mu, lo, hi = series(m, "k", {"n_poisons": 1, "defence": "none"})
        axes[0].plot(x, mu, marker="o", label=m)
        axes[0].fill_between(x, lo, hi, alpha=0.2)
        x, mu, lo, hi = series(m, "n_poisons", {"k": max(ks), "defence": "none"})
        axes[1].plot(x, mu, marker="o", label=m)
        axes[1].fill_between(x, lo, hi, alpha=0.2)
    axes[0].set_xlabel("retrieval depth k (one poison)")
    axes[1].set_xlabel(f"number of poisons (k={max(ks)})")
    for ax in axes:
        ax.set_ylabel("attack success rate")
        ax.set_ylim(-0.05, 1.05)
    axes[0].legend(fontsize=7)
    fig.suptitle("PoisonedEye on the digits VLRAG: ASR for the target query")
    fig.tight_layout()

    axes[1].set_xticks(sorted({r["n_poisons"] for r in rows}))

    fig2, axes2 = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    defences = ("none", "dedup", "similarity", "perplexity")
    ns = sorted({r["n_poisons"] for r in rows})
    bars = [(m, n) for m in METHODS for n in ((1,) if m == "poisonedeye-class" else (ns[0], ns[-1]))]
    width = 0.8 / len(bars)
    for ax, k in zip(axes2, (k_main, max(ks))):
        for b, (m, n) in enumerate(bars):
            vals = [np.mean([r["value"] for r in rows if r["method"] == m and r["defence"] == d and r["k"] == k
                             and r["n_poisons"] == n and r["metric"] == "asr"] or [np.nan]) for d in defences]
            ax.bar(np.arange(len(defences)) + b * width, vals, width, label=f"{m}, n={n}")
        acc = [record["metrics"]["clean"][d][f"k={k}"]["accuracy"] for d in defences]
        ax.plot(np.arange(len(defences)) + 0.4 - width / 2, acc, "k*", markersize=10, label="clean accuracy")
        ax.set_xticks(np.arange(len(defences)) + 0.4 - width / 2, defences)
        ax.set_title(f"k={k}")
        ax.set_ylim(0, 1.05)
    axes2[0].set_ylabel("attack success rate")
    axes2[1].legend(fontsize=6, ncol=2)
    fig2.suptitle("defences: ASR of each attack (n poisons) and the clean system's accuracy")
    fig2.tight_layout()
    return {"asr": fig, "defences": fig2}


EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="every tuning and test trial (craft the poisons, query the poisoned knowledge base) as a pmap task; "
        "the encoder in the object store",
    checked_against="the authors' code (github.com/123000001212/PoisonedEye: database.py create_poison, "
                    "llava_inference_rag_poison_final[_class].py: fused keys, poison text, PGD, class aux images, "
                    "text-only baseline) and the abstract; the full text was not reachable",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
