"""SSNI reproduction on scikit-learn's digits: clean and robust accuracy of DiffPure and GDMP with and without SSNI.

Setting (the paper's CIFAR-10 protocol scaled to 8x8 digits): a small CNN classifier and a small
VP-SDE score network, both trained by rayml on the digits training split (shipped weights); the
test split is attacked and purified. Defences: the classifier alone, DiffPure (``t* = 100``),
DiffPure + SSNI-N, DiffPure + SSNI-L, GDMP, GDMP + SSNI-N, GDMP + SSNI-L (``t* = 100``,
``b = 5``, ``K = 20`` as in the paper). Attacks (``l_inf``, radius ``eps``):

- ``pgd``: PGD on the bare classifier (for the defences, a transfer attack);
- ``adaptive``: PGD+EOT with full gradients through the purification (a surrogate reverse
  process with a larger stride), ``t(x)`` held constant inside each gradient;
- ``adaptive_t`` (SSNI defences): the same, also differentiating through the score norm and the
  reweighting (straight-through rounding) -- the reviewers' question;
- ``bpda``: BPDA+EOT.

Settings fixed before any SSNI result was seen: ``eps = 0.2`` in ``[0, 1]`` pixel units (the
radius at which PGD drives the undefended classifier to about 1%; at the paper's ratio of radius
to injected noise, about 0.03 here, the digits classifier is hardly attacked at all); ``t* = 100``
(the paper's value, and the best DiffPure level among 100..300 on training images under transfer
PGD); ``tau = 1`` reference standard deviation; GDMP guidance radius ``eps``, scale 1.
Smaller sizes use a strided (respaced) DDPM sampler for the defence (``stride``) and a coarser one
for the attack's surrogate (``attack_stride``); ``full`` uses the 1000-step DDPM.

``robust`` is the per-image worst case over the attacks every defence faces (``pgd``,
``adaptive``, ``bpda``: an image counts only if each of them fails on it); for the SSNI defences
``robust_with_t`` also includes ``adaptive_t``. Every defended prediction uses one fresh draw of the purification's noise.
The test images are cut into fixed chunks, one Ray task each (``pmap``), with per-chunk seeds,
so results do not depend on the number of workers. ``rayml bench ssni`` measures purified images
per second on a ``ResilientActorPool`` of 1 and 2 actors that hold the score model, and the
latency of the ``purify`` Serve endpoint over HTTP.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from rayml import runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim

PAPER = "Sample-specific Noise Injection for Diffusion-based Adversarial Purification (SSNI), ICML 2025"
METHOD = "ssni"
BASES = ("diffpure", "gdmp")
OURS = ("diffpure_ssni_n", "diffpure_ssni_l", "gdmp_ssni_n", "gdmp_ssni_l")
DEFENCES = ("classifier", "diffpure", "diffpure_ssni_n", "diffpure_ssni_l", "gdmp", "gdmp_ssni_n", "gdmp_ssni_l")
ATTACKS = ("pgd", "adaptive", "adaptive_t", "bpda")

_COMMON = dict(eps=0.2, t_star=100.0, bias=5.0, tau=1.0, eps_steps=20, guide_scale=1.0,
               classifier_pgd_iterations=20, reference_size=500)
SIZES = {
    "tiny": dict(n_test=12, chunk=6, attacks=["pgd", "adaptive"], pgd_iterations=1, eot=1,
                 stride=50.0, attack_stride=50.0, **{**_COMMON, "classifier_pgd_iterations": 2, "reference_size": 64}),
    "quick": dict(n_test=64, chunk=32, attacks=["pgd", "adaptive", "adaptive_t", "bpda"], pgd_iterations=5, eot=2,
                  stride=10.0, attack_stride=25.0, **_COMMON),
    "full": dict(n_test=540, chunk=30, attacks=["pgd", "adaptive", "adaptive_t", "bpda"], pgd_iterations=20, eot=8,
                 stride=1.0, attack_stride=10.0, **_COMMON),
}
BENCH_SIZES = {
    "tiny": dict(images=32, chunk=16, stride=50.0, requests=3),
    "quick": dict(images=512, chunk=64, stride=2.0, requests=10),
    "full": dict(images=4096, chunk=128, stride=1.0, requests=50),
}

_MODELS: dict = {}


def _models(config: Mapping[str, Any]) -> dict:
    """Score model, classifier and reference statistics, loaded once per worker process."""
    from rayml.purify.pool import load_models

    key = (int(config["eps_steps"]), int(config["reference_size"]))
    if key not in _MODELS:
        _MODELS[key] = load_models(eps_steps=key[0], reference_size=key[1])
    return _MODELS[key]


def _defence(name: str, config: Mapping[str, Any]):
    from rayml.purify import ssni as S

    if name == "classifier":
        return None, None
    base = name.split("_")[0]
    pcfg = S.PurifyConfig(method=base, t_star=float(config["t_star"]), stride=float(config["stride"]),
                          guide_radius=float(config["eps"]), guide_scale=float(config["guide_scale"]))
    scfg = None
    if "_ssni_" in name:
        scfg = S.SSNIConfig(variant=name[-1].upper(), t_star=float(config["t_star"]), bias=float(config["bias"]),
                            tau=float(config["tau"]), eps_steps=int(config["eps_steps"]))
    return pcfg, scfg


def evaluate_chunk(item: tuple[int, int, int], config: Mapping[str, Any]) -> dict:
    """Attack and purify one chunk ``(chunk index, start, seed)`` of the test split; per-image results."""
    import torch

    from rayml.purify import attacks as A
    from rayml.purify import diffusion as D
    from rayml.purify import ssni as S

    index, start, seed = item
    models = _models(config)
    score, clf, ref = models["score"], models["classifier"], models["ref"]
    _, _, xte, yte = D.digits_split()
    stop = min(start + int(config["chunk"]), int(config["n_test"]))
    x, y = xte[start:stop], yte[start:stop]
    eps, eot, iters = float(config["eps"]), int(config["eot"]), int(config["pgd_iterations"])
    seeds = iter(runtime.seeds(seed, 1000))

    def predict(name, images):
        pcfg, scfg = _defence(name, config)
        with torch.no_grad():
            if pcfg is None:
                return clf(images).argmax(1), None
            out, t = S.purify(score, images, pcfg, ssni=scfg, ref=ref, seed=next(seeds))
            return clf(out).argmax(1), t

    def surrogate(name, straight_through=False):
        pcfg, scfg = _defence(name, config)
        return lambda xs, g: S.purify(score, xs, pcfg, ssni=scfg, ref=ref, seed=g,
                                      straight_through=straight_through, stride=float(config["attack_stride"]))[0]

    correct: dict = {}
    levels: dict = {}
    x_pgd = A.pgd(A.classifier_grad(clf), x, y, eps=eps, iterations=int(config["classifier_pgd_iterations"]),
                  seed=next(seeds))
    for name in DEFENCES:
        pred, t = predict(name, x)
        correct[(name, "clean")] = (pred == y).numpy()
        if t is not None:
            levels[(name, "clean")] = t.numpy()
        for attack in config["attacks"]:
            if attack == "pgd" or (name == "classifier"):
                if attack != "pgd":
                    continue
                x_adv = x_pgd
            elif attack == "adaptive":
                x_adv = A.pgd(A.eot_grad(clf, surrogate(name), eot), x, y, eps=eps, iterations=iters, seed=next(seeds))
            elif attack == "adaptive_t":
                if "_ssni_" not in name:
                    continue
                x_adv = A.pgd(A.eot_grad(clf, surrogate(name, True), eot), x, y, eps=eps, iterations=iters,
                              seed=next(seeds))
            elif attack == "bpda":
                x_adv = A.pgd(A.bpda_eot_grad(clf, surrogate(name), eot), x, y, eps=eps, iterations=iters,
                              seed=next(seeds))
            else:
                raise ValueError(f"unknown attack {attack!r}; known: {ATTACKS}")
            pred, t = predict(name, x_adv)
            correct[(name, attack)] = (pred == y).numpy()
            if t is not None:
                levels[(name, attack)] = t.numpy()
    with torch.no_grad():
        norms = {"clean": S.score_norms(score, x, eps_steps=int(config["eps_steps"]), seed=next(seeds)).numpy(),
                 "pgd": S.score_norms(score, x_pgd, eps_steps=int(config["eps_steps"]), seed=next(seeds)).numpy()}
    return {"chunk": index, "seed": seed, "n": int(y.numel()), "correct": correct, "levels": levels, "norms": norms}


def _summarise(parts: list[dict], attacks: list[str]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name in DEFENCES:
        cat = lambda key: np.concatenate([p["correct"][key] for p in parts])  # noqa: E731
        d = {"clean": float(cat((name, "clean")).mean())}
        run = [a for a in attacks if (name, a) in parts[0]["correct"]]
        for a in run:
            d[a] = float(cat((name, a)).mean())
        common = [a for a in run if a != "adaptive_t"]
        d["robust"] = float(np.all([cat((name, a)) for a in common], axis=0).mean())
        if "adaptive_t" in run:
            d["robust_with_t"] = float(np.all([cat((name, a)) for a in run], axis=0).mean())
        if (name, "clean") in parts[0]["levels"]:
            for key in ["clean", *run]:
                d[f"t_{key}"] = float(np.concatenate([p["levels"][(name, key)] for p in parts]).mean())
        out[name] = d
    return out


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """The reproduction: every test chunk as a Ray task (attacks + purification), then accuracies and t*."""
    from rayml.purify import diffusion as D

    n_test, chunk = int(config["n_test"]), int(config["chunk"])
    _, _, xte, _ = D.digits_split()
    if not 1 <= n_test <= xte.shape[0]:
        raise ValueError(f"n_test must be in [1, {xte.shape[0]}], got {n_test}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    unknown = set(config["attacks"]) - set(ATTACKS)
    if unknown or "pgd" not in config["attacks"]:
        raise ValueError(f"attacks must include 'pgd' and be among {ATTACKS}, got {config['attacks']}")
    starts = list(range(0, n_test, chunk))
    items = [(i, s, sd) for i, (s, sd) in enumerate(zip(starts, runtime.seeds(seed, len(starts))))]
    parts = runtime.pmap(evaluate_chunk, items, shared=dict(config), chunk_size=1, desc="ssni chunks")
    summary = _summarise(parts, list(config["attacks"]))
    metrics = {name: summary[name] for name in OURS}
    metrics["n_test"] = n_test
    metrics["score_norm"] = {k: float(np.concatenate([p["norms"][k] for p in parts]).mean()) for k in ("clean", "pgd")}
    acc_rows = [{"defence": name, "attack": key[1], "chunk": p["chunk"], "seed": p["seed"], "metric": "accuracy",
                 "value": float(np.mean(v))}
                for p in parts for key, v in p["correct"].items() for name in [key[0]]]
    level_rows = [{"defence": key[0], "input": key[1], "chunk": p["chunk"], "image": j, "metric": "t", "value": float(t)}
                  for p in parts for key, v in p["levels"].items() for j, t in enumerate(v)]
    norm_rows = [{"input": k, "chunk": p["chunk"], "image": j, "metric": "score_norm", "value": float(v)}
                 for p in parts for k, arr in p["norms"].items() for j, v in enumerate(arr)]
    budget = {"attack": f"l_inf eps={config['eps']}", "pgd_iterations": int(config["pgd_iterations"]),
              "eot": int(config["eot"]), "classifier_pgd_iterations": int(config["classifier_pgd_iterations"]),
              "defence_stride": float(config["stride"]), "attack_surrogate_stride": float(config["attack_stride"]),
              "tuning": "none: t*, b, tau, eps fixed before any run; the same attacks for every defence"}
    return Outcome(metrics=metrics, baselines={name: summary[name] for name in ("classifier", *BASES)},
                   tables={"accuracy": acc_rows, "levels": level_rows, "score_norms": norm_rows}, budget=budget)


SOURCE_IMPROVES = ("abstract: 'incorporating our framework with existing DBP methods results in a notable "
                   "improvement in both accuracy and robustness on CIFAR-10 and ImageNet-1K'")


def _improves(ours: str, base: str, key: str, word: str) -> Claim:
    return Claim(text=f"SSNI-{ours[-1].upper()} improves {base}'s {word} accuracy",
                 metric=f"metrics.{ours}.{key}", compare=f"baselines.{base}.{key}", op=">", source=SOURCE_IMPROVES)


CLAIMS = (
    _improves("diffpure_ssni_n", "diffpure", "clean", "clean"),
    _improves("diffpure_ssni_n", "diffpure", "robust", "robust (worst case over the attacks)"),
    _improves("gdmp_ssni_n", "gdmp", "clean", "clean"),
    _improves("gdmp_ssni_n", "gdmp", "robust", "robust (worst case over the attacks)"),
    _improves("diffpure_ssni_l", "diffpure", "clean", "clean"),
    _improves("diffpure_ssni_l", "diffpure", "robust", "robust (worst case over the attacks)"),
    _improves("gdmp_ssni_l", "gdmp", "clean", "clean"),
    _improves("gdmp_ssni_l", "gdmp", "robust", "robust (worst case over the attacks)"),
    Claim(text="adversarial inputs get a larger score norm than clean ones (mean ||EPS||, PGD examples)",
          metric="metrics.score_norm.pgd", compare="metrics.score_norm.clean", op=">",
          source="abstract: 'SSNI uses a pre-trained score network to estimate how much a data point deviates "
                 "from the clean data distribution (i.e., score norms)'"),
    Claim(text="SSNI-N injects more noise into adversarial inputs than into clean ones (mean t*, PGD examples)",
          metric="metrics.diffpure_ssni_n.t_pgd", compare="metrics.diffpure_ssni_n.t_clean", op=">",
          source="abstract: 'the cleaner a sample is, the less the noise it should be injected, and vice versa'"),
    Claim(text="attack sanity: PGD drives the undefended classifier's accuracy below 10%",
          metric="baselines.classifier.pgd", compare=0.10, op="<", kind="sanity"),
    Claim(text="attack sanity: the adaptive attack (gradients through DiffPure, EOT) is at least as strong as transfer PGD",
          metric="baselines.diffpure.adaptive", compare="baselines.diffpure.pgd", op="<=", kind="sanity"),
)


def plots(record: Mapping) -> dict:
    """Distribution of t* for clean vs adversarial inputs (SSNI defences), and accuracies side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["levels"]
    names = [n for n in OURS if any(r["defence"] == n for r in rows)]
    fig, axes = plt.subplots(1, len(names), figsize=(3.6 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        inputs = list(dict.fromkeys(r["input"] for r in rows if r["defence"] == name))
        top = max(r["value"] for r in rows if r["defence"] == name)
        bins = np.linspace(0.0, top + 5.0, 28)
        for inp in inputs:
            vals = [r["value"] for r in rows if r["defence"] == name and r["input"] == inp]
            ax.hist(vals, bins=bins, alpha=0.5, label=inp)
        ax.set_title(name)
        ax.set_xlabel("t*(x)")
    axes[0][0].set_ylabel("images")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()

    acc = {**record["baselines"], **{k: v for k, v in record["metrics"].items() if k in OURS}}
    keys = [k for k in ("clean", *ATTACKS, "robust") if any(k in acc[d] for d in acc)]
    fig2, ax2 = plt.subplots(figsize=(9, 3.4))
    width = 0.8 / len(keys)
    for j, k in enumerate(keys):
        xs = [i + j * width for i in range(len(DEFENCES))]
        ax2.bar(xs, [acc[d].get(k, np.nan) for d in DEFENCES], width=width, label=k)
    ax2.set_xticks([i + 0.4 for i in range(len(DEFENCES))], DEFENCES, rotation=20, fontsize=7)
    ax2.set_ylabel("accuracy")
    ax2.legend(fontsize=7, ncol=3)
    fig2.tight_layout()
    return {"t_star_distribution": fig, "accuracy": fig2}


# ----------------------------------------------------------------------------- bench
def _http_latency(n: int, timeout_s: float = 60.0) -> dict:
    """Start the purify Serve app on the connected Ray, POST ``n`` images, report latency (seconds)."""
    import json
    import socket
    import urllib.request

    from ray import serve

    from rayml.actors.serve import purify as P
    from rayml.purify import diffusion as D

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(P.app, name="purify-bench", route_prefix="/purify-bench")
    # the app is a FastAPI ingress whose POST route is "/": without the slash Serve answers 307
    url = f"http://127.0.0.1:{port}/purify-bench/"
    _, _, xte, _ = D.digits_split()
    times, codes = [], []
    try:
        for i in range(n + 1):
            body = json.dumps({"image": xte[i, 0].tolist(), "ssni": "N", "seed": i}).encode()
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                codes.append(resp.status)
                resp.read()
            if i > 0:  # the first request warms the replica
                times.append(time.perf_counter() - t0)
    finally:
        serve.delete("purify-bench")
    return {"p50_s": float(np.median(times)), "mean_s": float(np.mean(times)), "max_s": float(np.max(times)),
            "requests": n, "ok": float(np.mean([c == 200 for c in codes]))}


def bench(config: Mapping[str, Any], seed: int) -> Outcome:
    """Purified images per second on 1 and 2 pool actors (SSNI-N + DiffPure), and HTTP endpoint latency."""
    from rayml.purify import diffusion as D
    from rayml.purify.pool import make_pool, purify_on_pool

    n, chunk, stride = int(config["images"]), int(config["chunk"]), float(config["stride"])
    xtr, _, xte, _ = D.digits_split()
    images = np.concatenate([xte.numpy(), xtr.numpy()])
    images = images[np.arange(n) % images.shape[0]]
    seconds, outputs = {}, {}
    for actors in (1, 2):
        pool = make_pool(actors=actors)
        try:
            pool.call_all("ping")
            purify_on_pool(pool, images[:chunk * actors], stride=stride, ssni="N", chunk=chunk, seed=seed)  # warm-up
            t0 = time.perf_counter()
            outputs[actors] = purify_on_pool(pool, images, stride=stride, ssni="N", chunk=chunk, seed=seed)
            seconds[actors] = time.perf_counter() - t0
        finally:
            pool.shutdown()
    same = bool(np.array_equal(outputs[1]["images"], outputs[2]["images"]) and np.array_equal(outputs[1]["t"], outputs[2]["t"]))
    latency = _http_latency(int(config["requests"]))
    metrics = {
        "images_per_s": {"1_actor": n / seconds[1], "2_actors": n / seconds[2]},
        "speedup_2_vs_1_actors": seconds[1] / seconds[2],
        "seconds": {"1_actor": seconds[1], "2_actors": seconds[2]},
        "identical_results": same,
        "endpoint_latency": latency,
    }
    rows = [{"actors": a, "metric": "images_per_s", "value": n / s} for a, s in seconds.items()]
    rows += [{"actors": 0, "metric": "endpoint_p50_s", "value": latency["p50_s"]}]
    return Outcome(metrics=metrics, tables={"throughput": rows},
                   budget={"images": n, "chunk": chunk, "stride": stride, "method": "diffpure + SSNI-N, t*=100"})


BENCH_CLAIMS = (
    Claim(text="2 actors purify more images per second than 1 actor", metric="metrics.speedup_2_vs_1_actors",
          compare=1.0, op=">", kind="sanity"),
    Claim(text="purified images and t* are identical with 1 and 2 actors", metric="metrics.identical_results",
          compare=1.0, op=">=", kind="sanity"),
    Claim(text="every endpoint request answered 200", metric="metrics.endpoint_latency.ok", compare=1.0, op=">=",
          kind="sanity"),
)

EXPERIMENT = Experiment(
    name=METHOD, paper=PAPER,
    ray="test chunks (attacks + purification) as pmap tasks; batch purification on a ResilientActorPool of "
        "actors holding the score model; the Serve endpoint rayml.actors.serve.purify:app",
    checked_against="the paper's method as summarised in the research notes (arXiv 2506.06027: score norm, "
                    "SSNI-N/SSNI-L reweighting, defaults t*=100, b=5, K=20), the abstract and the OpenReview "
                    "reviews; the authors' code (tmlr-group/SSNI) was not reachable here",
    sizes=SIZES, run=run, claims=CLAIMS, plots=plots,
    bench_sizes=BENCH_SIZES, bench=bench, bench_claims=BENCH_CLAIMS,
)
