"""FDGen reproduction: a GNN's fairness gaps and the structure of graphs from FDGen and its baselines.

Real graphs (``cases``), each with a binary label ``y`` and a binary sensitive attribute ``s`` that
shape both the features and the structure (the feature and structural bias FDGen targets):

- ``sbm-h<h>``: a two-block SBM (``rayml.graphs.generators.homophilous_sbm``, ``classes=2``) whose
  blocks are the sensitive groups, so the structure is ``s``-homophilous at edge homophily ``h``
  (structural bias); the generator's block-correlated attribute is the label, ``P(y = 1 | s) =
  0.5 +/- label_bias`` (as in the fairness datasets, where labels and groups are correlated).
- ``karate`` and ``lesmis``: networkx's bundled Zachary karate club (``s`` = the club attribute it
  ships) and Les Miserables (``s`` = a Kernighan-Lin bisection, a two-community split), with ``y``
  planted in the same way (assumed: these graphs ship no labels or features).

Features everywhere: ``y_signal * mu_y + s_signal * nu_s + N(0, I / d)`` (random unit class and
group means): the group shows in the features more than the label does (feature bias), so a GNN
trained on the real graph uses ``s`` as a proxy for ``y``.

Methods, all from the same generator (``rayml.graphs.fdgen``) at the same budget (epochs, latent
size, samples): ``fdgen`` (with the feature- and structural-bias terms), ``plain`` (the same
generator without them), ``fairgen-post`` (``plain``'s samples after structure-only parity
post-processing). Reference: ``real`` (the GNN trained on the real graph). (An Erdos-Renyi
structure reference was dropped: ER is nearly the true model of an SBM, and the paper compares
other generators.)

Protocol per (case, seed): nodes split 50 / 50 into train / test; each generator
draws ``samples`` graphs over the real node set (labels and ``s`` stay with their nodes); on each, a
two-layer GCN is trained on the train nodes and its accuracy, ``Delta_SP`` and ``Delta_EO`` are
measured on the test nodes of that graph (assumed: the fairness of the data the generated graph
would be used as; the same GCN's numbers on the real graph's test nodes are recorded as
``transfer_*``). Structure: degree, clustering and spectral MMD of the samples against the real graph,
and a community statistic (``bethe_l2``: the Bethe Hessian's second eigenvalue, which tells a
detectable two-block SBM from G(n, m)); the structure claims are decided per case, with the control
(uniform random graphs with plain's edge counts) applied per case: a case where the control is within
the margin of plain too is *not discriminating* and left out (``structure_verdicts``; session-9
review: pooled over cases, the claim mixed SBMs where the MMD cannot tell a generator from noise with
small graphs where it can). Session 12 (R7): the margin is a share (``STRUCTURE_SHARE``) of the random graphs'
gap over plain in each cell, so statistics of different scales count alike, and a cell where FDGen is
shown farther than both plain and the random graphs counts as a failure instead of being left out.
Session 10: each case x statistic cell is decided by seed-level one-sided
Wilcoxon tests against the margin (FDGen within it; the control within or beyond it), with its
leave-one-seed-out range; the small networkx graphs get ``nx_seeds`` test seeds for these tests, the
fairness claims pair only the first ``seeds`` of every case (rows with ``core`` 1). Session 10 (R5): the
MMD claim is decided per (case, statistic) cell, degree, clustering and spectral MMD each on its own (the
mean of the three let a close statistic carry a far one); the mean is kept for reference
(``structure_summary``).

Tuning: one fairness strength per fair method, on grids of the same size, on tuning seeds
kept apart from the test seeds: FDGen's ``lambda`` (both terms; the grid holds 1, assumed to be
the paper's setting as its value could not be read) and the post-processing ``strength``, each
chosen by the same rule (``tuning_score`` through ``rayml.evidence.tune``): the fairest value
(lowest ``Delta_SP + Delta_EO`` on the held-out half of the tuning graphs, averaged over the cases)
among those whose accuracy stays within 0.05 of the plain generator's there; a choice on a grid
edge extends that grid by one value past it (geometric; the strength stops at 1), twice at most,
before the test runs. The same sweep (every value evaluated, extensions included) gives the
matched-accuracy fronts (``matched_front``). ``evidence_problems`` says whether a size has enough
pairs for its tests and the paper's values inside its grids (recorded under ``budget``).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from rayml import evidence, runtime
from rayml.experiments import Experiment, Outcome
from rayml.results import Claim, Control

PAPER = "FDGen: A Fairness-Aware Graph Generation Model (Wang and Zhang), ICML 2025"
NAME = "fdgen"
METHODS = ("fdgen", "plain", "fairgen-post")
NX_GRAPHS = ("karate", "lesmis")

# session 10: the structure cells of the small networkx graphs (cheap: 34 and 77 nodes) get more test seeds than
# the 1000-node SBMs; power estimate (rayml.evidence.power_from_pilot, Wilcoxon, power 0.8, from the previous
# records' per-seed differences; on the page): SBM cells 9 pairs, lesmis MMD 27, karate MMD 99, karate community
# ~200. 40 decides the SBM and lesmis cells within the run's deadline, not karate's. The fairness claims pair
# only the first ``seeds`` seeds of every case (column ``core``), so the extra seeds do not tilt them.
NX_SEEDS_FULL = 40

SIZES = {
    "tiny": dict(n=120, degree=6.0, feat_dim=8, y_signal=0.5, s_signal=1.0, label_bias=0.2,
                 sbm_homophily=[0.8], nx_graphs=["karate"], epochs=100, latent=8, hidden=16, samples=1,
                 gnn_epochs=20, lambda_grid=[1.0], post_grid=[1.0], seeds=2, nx_seeds=6, tune_seeds=1),
    # quick: a preview within the 90 s budget; sbm-h0.5 is the case of unbiased structure and biased features.
    # 6 seeds: a leave-one-seed-out Wilcoxon keeps 5 pairs (smallest p 1/32); karate is cheap, so its structure
    # cells get 16 seeds (still a preview: the pilot's karate cells need ~200, see the page)
    "quick": dict(n=200, degree=8.0, feat_dim=16, y_signal=0.5, s_signal=1.0, label_bias=0.2,
                  sbm_homophily=[0.5, 0.9], nx_graphs=["karate"], epochs=100, latent=16, hidden=32,
                  samples=1, gnn_epochs=80, lambda_grid=[0.25, 1.0, 4.0],
                  post_grid=[0.2, 0.6, 1.0], seeds=6, nx_seeds=16, tune_seeds=2),
    "full": dict(n=1000, degree=10.0, feat_dim=32, y_signal=0.5, s_signal=1.0, label_bias=0.2,
                 sbm_homophily=[0.5, 0.7, 0.9], nx_graphs=["karate", "lesmis"], epochs=300, latent=32, hidden=64,
                 samples=2, gnn_epochs=150, lambda_grid=[0.25, 0.5, 1.0, 2.0, 4.0],
                 post_grid=[0.2, 0.4, 0.6, 0.8, 1.0], seeds=10, nx_seeds=NX_SEEDS_FULL, tune_seeds=3),
}


def _check(config: Mapping[str, Any]) -> None:
    for key in ("n", "feat_dim", "epochs", "latent", "hidden", "samples", "gnn_epochs", "seeds", "nx_seeds",
                "tune_seeds"):
        v = config[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{key} must be an integer >= 1, got {v!r}")
    if config["nx_seeds"] < config["seeds"]:
        raise ValueError(f"nx_seeds must be >= seeds, got {config['nx_seeds']!r} < {config['seeds']!r}")
    if config["n"] < 40:
        raise ValueError(f"n must be >= 40, got {config['n']!r}")
    if not 0 < config["degree"] < config["n"] / 4:
        raise ValueError(f"degree must lie in (0, n / 4), got {config['degree']!r}")
    if not 0 <= config["label_bias"] < 0.5:
        raise ValueError(f"label_bias must lie in [0, 0.5), got {config['label_bias']!r}")
    for key in ("y_signal", "s_signal"):
        if not isinstance(config[key], (int, float)) or not config[key] >= 0:
            raise ValueError(f"{key} must be a number >= 0, got {config[key]!r}")
    hs = config["sbm_homophily"]
    if any(not isinstance(h, (int, float)) or not 0 <= h <= 1 for h in hs):
        raise ValueError(f"sbm_homophily must hold values in [0, 1], got {hs!r}")
    bad = [g for g in config["nx_graphs"] if g not in NX_GRAPHS]
    if bad:
        raise ValueError(f"nx_graphs: unknown graphs {bad}; known: {list(NX_GRAPHS)}")
    if not hs and not config["nx_graphs"]:
        raise ValueError("sbm_homophily and nx_graphs are both empty: no graph to run on")
    lg, pg = config["lambda_grid"], config["post_grid"]
    if not lg or any(not isinstance(v, (int, float)) or not v > 0 for v in lg):
        raise ValueError(f"lambda_grid must hold values > 0, got {lg!r}")
    if not pg or any(not isinstance(v, (int, float)) or not 0 < v <= 1 for v in pg):
        raise ValueError(f"post_grid must hold strengths in (0, 1], got {pg!r}")


def cases(config: Mapping[str, Any]) -> list[str]:
    """The real graphs of a config, in order."""
    return [f"sbm-h{float(h):g}" for h in config["sbm_homophily"]] + list(config["nx_graphs"])


def evidence_problems(config: Mapping[str, Any]) -> list[str]:
    """Why a size could not show the claims (empty: it can); ``run`` records it, the tests hold full and quick to it.

    A one-sided Wilcoxon signed-rank test over ``n`` pairs cannot reach p < 0.05 below 5 pairs (its smallest
    p is ``2^-n``): the matched-accuracy claims pair (case, tuning seed), the cut claims (case, test seed). The
    tuning grids must hold the paper's values (FDGen's ``lambda`` 1, assumed; the full parity step 1) with
    ``lambda`` strictly inside its grid.
    """
    n_cases = len(cases(config))
    out = [p for p in (
        evidence.too_few_pairs(n_cases * int(config["tune_seeds"]), "cases x tune_seeds"),
        evidence.too_few_pairs(n_cases * int(config["seeds"]), "cases x seeds"),
        evidence.too_few_pairs(int(config["seeds"]), "seeds (per case: the structure tests)"),
        evidence.paper_not_inside("lambda_grid", config["lambda_grid"], PAPER_LAMBDA, "lambda")) if p]
    if 1.0 not in config["post_grid"]:
        out.append(f"post_grid {list(config['post_grid'])} must hold the full parity step 1.0")
    return out


def _features(rng, y, s, config):
    """``y_signal * mu_y + s_signal * nu_s + N(0, I / d)`` with random unit class and group means."""
    d = int(config["feat_dim"])
    mu, nu = rng.normal(size=(2, d)), rng.normal(size=(2, d))
    mu /= np.linalg.norm(mu, axis=1, keepdims=True)
    nu /= np.linalg.norm(nu, axis=1, keepdims=True)
    x = float(config["y_signal"]) * mu[y] + float(config["s_signal"]) * nu[s] + rng.normal(size=(y.size, d)) / np.sqrt(d)
    return x.astype(np.float32)


def real_graph(case: str, config: Mapping[str, Any], seed: int) -> dict:
    """``{"x", "edges" (u < v), "y", "s"}`` of one real graph (see the module docstring)."""
    rng = np.random.default_rng(seed)
    if case.startswith("sbm-h"):
        from rayml.graphs.generators import homophilous_sbm

        # the SBM's two blocks are the sensitive groups (structure driven by s, edge homophily h);
        # its attribute correlated with the block is the label: P(y = 1 | s) = 0.5 +/- label_bias
        g = homophilous_sbm(rng, n=int(config["n"]), classes=2, degree=float(config["degree"]),
                            homophily=float(case[5:]), feat_dim=int(config["feat_dim"]), feat_signal=0.0,
                            sensitive_bias=float(config["label_bias"]))
        s, y = g.y, g.sensitive
        return {"x": _features(rng, y, s, config), "edges": g.edges, "y": y, "s": s}
    import networkx as nx

    if case == "karate":
        G = nx.karate_club_graph()
        s = np.array([int(G.nodes[v]["club"] != "Mr. Hi") for v in range(G.number_of_nodes())])
    elif case == "lesmis":
        G = nx.convert_node_labels_to_integers(nx.les_miserables_graph(), ordering="sorted")
        part0, _ = nx.community.kernighan_lin_bisection(G, seed=0)
        s = np.array([int(v not in part0) for v in range(G.number_of_nodes())])  # indexed by label, not G's order
    else:
        raise ValueError(f"unknown case {case!r}")
    e = np.array([(min(u, v), max(u, v)) for u, v in G.edges() if u != v], dtype=np.int64).T
    p = 0.5 + np.where(s == 1, 1, -1) * float(config["label_bias"])
    y = (rng.random(s.size) < p).astype(np.int64)
    x = _features(rng, y, s.astype(np.int64), config)
    return {"x": x, "edges": e, "y": y, "s": s.astype(np.int64)}


def _split(rng, n):
    perm = rng.permutation(n)
    return perm[: n // 2], perm[n // 2:]


def _judge(x, edges, g, split, seed, gnn_epochs, transfer=True):
    """Train the GCN on (x, edges)'s train nodes; gaps on that graph's held-out nodes (and on the real graph's)."""
    from rayml.graphs import fdgen_eval as ev

    tr, te = split
    model = ev.train_gcn(x, edges, g["y"], tr, seed, epochs=gnn_epochs)
    own = ev.fairness_gaps(ev.predict_gcn(model, x, edges)[te], g["y"][te], g["s"][te])
    out = dict(own)
    if transfer:
        real = ev.fairness_gaps(ev.predict_gcn(model, g["x"], g["edges"])[te], g["y"][te], g["s"][te])
        out.update({f"transfer_{k}": v for k, v in real.items()})
    return out


def _mean_dicts(ds):
    return {k: float(np.nanmean([d[k] for d in ds])) if any(np.isfinite(d[k]) for d in ds) else float("nan")
            for k in ds[0]}


def _generate(g, config, lam, seed):
    """``samples`` graphs of the generator at fairness weight ``lam`` (0: without the fairness terms)."""
    from rayml.graphs import fdgen as fd

    cfg = fd.GeneratorConfig(latent=int(config["latent"]), hidden=int(config["hidden"]), epochs=int(config["epochs"]),
                             lambda_feature=float(lam), lambda_structure=float(lam), kl_weight=0.1)
    fit_seed, *sample_seeds = runtime.seeds(seed, 1 + 2 * int(config["samples"]))
    gen = fd.fit_generator(g["x"], g["edges"], g["s"], cfg, fit_seed)
    return [{**fd.sample_graph(gen, g["x"], sample_seeds[2 * k]), "post_seed": sample_seeds[2 * k + 1]}
            for k in range(int(config["samples"]))]


def _post(smps, g, strength):
    """FairGen-style structure-only post-processing of ``plain``'s samples (features untouched)."""
    from rayml.graphs import fdgen as fd

    return [{**s_, "edges": fd.fairgen_postprocess(s_["edges"], g["s"], s_["probs"], float(strength),
                                                   np.random.default_rng(s_["post_seed"]))} for s_ in smps]


def tune_task(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """One (case, tuning seed) and the grid values ``(method, value)`` to judge on it (``with_plain``: the
    plain generator too), each judged on the held-out nodes of its generated graphs."""
    case, tune_idx, seed, settings, with_plain = item
    g_seed, split_seed, gen_seed, gnn_seed = runtime.seeds(seed, 4)
    g = real_graph(case, config, g_seed)
    split = _split(np.random.default_rng(split_seed), g["y"].size)
    # the plain generator: the reference accuracy, and the post-processing's input (same seed: the same graphs)
    need = with_plain or any(m == "fairgen-post" for m, _ in settings)
    plain = _generate(g, config, 0.0, gen_seed) if need else None
    runs = [("plain", 0.0, plain)] if with_plain else []
    runs += [(m, float(v), _generate(g, config, v, gen_seed) if m == "fdgen" else _post(plain, g, v))
             for m, v in settings]
    rows = []
    for method, v, smps in runs:
        res = _mean_dicts([_judge(s_["x"], s_["edges"], g, split, gnn_seed, int(config["gnn_epochs"]), False)
                           for s_ in smps])
        rows.append({"case": case, "tune_seed": tune_idx, "method": method, "strength": v,
                     "val_acc": res["acc"], "val_dsp": res["dsp"], "val_deo": res["deo"]})
    return rows


def tuning_score(rows: list[dict], method: str, value: float, utility_margin: float = 0.05) -> float:
    """The tuning score of one grid value (lower is better): its mean held-out ``Delta_SP + Delta_EO`` over the
    tuning graphs when its mean accuracy is within ``utility_margin`` of the plain generator's there; else
    ``10 +`` its accuracy shortfall, so that when no value keeps the accuracy the most accurate wins."""
    plain_acc = float(np.mean([r["val_acc"] for r in rows if r["method"] == "plain"]))
    sel = [r for r in rows if r["method"] == method and r["strength"] == value]
    if not sel:
        raise ValueError(f"no tuning rows for {method} at {value}")

    def mean(key):
        xs = [r[key] for r in sel]
        return float(np.nanmean(xs)) if np.isfinite(xs).any() else float("inf")

    acc = mean("val_acc")
    if acc >= plain_acc - utility_margin:
        return mean("val_dsp") + mean("val_deo")
    return 10.0 + (plain_acc - acc)


def select_strength(rows: list[dict], method: str, utility_margin: float = 0.05) -> float:
    """The fairest grid value (lowest mean ``Delta_SP + Delta_EO``) whose mean held-out accuracy is within
    ``utility_margin`` of the plain generator's on the same tuning graphs; the most accurate if none is."""
    vals = sorted({r["strength"] for r in rows if r["method"] == method})
    return min(vals, key=lambda v: (tuning_score(rows, method, v, utility_margin), v))


PAPER_LAMBDA = 1.0  # assumed: the paper's fairness weight (its value could not be read)
EXTEND = 2  # evidence.tune extends a grid past an edge that holds the choice, at most this many times
MATCH_MARGIN = 0.05  # the accuracy budget of the matched-accuracy comparison (and of select_strength)


def matched_front(rows: list[dict], margin: float = MATCH_MARGIN) -> list[dict]:
    """The Pareto comparison at matched accuracy over the strength sweep of ``tune_task``'s rows.

    For every (case, sweep seed) and fair method: the lowest held-out ``Delta_SP`` and ``Delta_EO``
    among that method's grid values (the plain generator, strength 0, included: it is on both
    fronts) whose held-out accuracy is at least the plain generator's minus ``margin``. Each is the
    method's front read at the same accuracy budget, with no value selected on these seeds.
    Tidy rows ``{case, seed, method, margin, metric: dsp_matched | deo_matched, value}``.
    """
    out = []
    for case, seed in sorted({(r["case"], r["tune_seed"]) for r in rows}):
        here = [r for r in rows if r["case"] == case and r["tune_seed"] == seed]
        plain = [r for r in here if r["method"] == "plain"]
        floor = float(np.mean([r["val_acc"] for r in plain])) - margin
        for method in ("fdgen", "fairgen-post"):
            ok = [r for r in here if r["method"] in (method, "plain") and r["val_acc"] >= floor]
            for metric, key in (("dsp_matched", "val_dsp"), ("deo_matched", "val_deo")):
                vals = [r[key] for r in ok if np.isfinite(r[key])]
                out.append({"case": case, "seed": seed, "method": method, "margin": margin, "metric": metric,
                            "value": float(min(vals)) if vals else float("nan")})
    return out


def _random_graph(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """``m`` distinct node pairs ``u < v`` drawn uniformly: an Erdos-Renyi G(n, m) edge list (2, m)."""
    iu = np.triu_indices(n, 1)
    pick = rng.choice(iu[0].size, size=min(m, iu[0].size), replace=False)
    return np.stack([iu[0][pick], iu[1][pick]])


def bethe_l2(edges: np.ndarray, n: int) -> float:
    """The community statistic: the second-smallest eigenvalue of the Bethe Hessian
    ``H(r) = (r^2 - 1) I - r A + D``, ``r = sqrt(<d^2> / <d> - 1)`` (Saade, Krzakala and Zdeborova,
    NeurIPS 2014), divided by ``r^2 - 1``. ``H`` has one negative eigenvalue per detectable community:
    about 0.03 for a G(n, m) graph of mean degree 10 (one community), negative for a two-block SBM whose
    blocks are detectable (about -0.05 at edge homophily 0.7, -0.97 at 0.9 with 1000 nodes), so it tells
    such an SBM from G(n, m) where degree, clustering and spectral histograms barely do (session-9
    review). NaN when ``r <= 1`` (too sparse to define it)."""
    from scipy.linalg import eigh

    A = np.zeros((n, n))
    A[edges[0], edges[1]] = 1.0
    A = np.maximum(A, A.T)
    np.fill_diagonal(A, 0.0)
    d = A.sum(1)
    if d.sum() == 0:
        return float("nan")
    r2 = float((d ** 2).mean() / d.mean() - 1.0)
    if not r2 > 1.0:
        return float("nan")
    H = (r2 - 1.0) * np.eye(n) - np.sqrt(r2) * A + np.diag(d)
    w = eigh(H, eigvals_only=True, subset_by_index=[0, 1])
    return float(w[1] / (r2 - 1.0))


STRUCTURE_SHARE = 0.25  # "maintaining competitive generation performance" (session 12, R7): FDGen may give up at
# most a quarter of what the plain generator gains over uniform random graphs on a statistic, in that (case,
# statistic); a scale-free margin (the three MMDs and the community gap differ in scale by 60x), fixed before a run
STRUCTURE_TEST = "wilcoxon signed-rank over seeds"  # the seed-level test of every structure cell (session 10)
STRUCTURE_ALPHA = 0.05


def _structure_cell(vals: Mapping[str, Mapping[int, float]], share: float, test: str, alpha: float) -> dict:
    """One case x statistic cell from ``{method: {seed: distance to the real graph}}``: the seed-level tests
    (``rayml.evidence.margin_p`` on per-seed contrasts, paired over the seeds every method has) and the verdict.

    Session 12 (R7): the margin is a share of the control's gap, seed by seed: a method ``M`` is *within* when
    ``(M - plain) - share * (random - plain) < 0`` is shown (one-sided, ``test`` at ``alpha``), *beyond* when
    ``> 0`` is shown. Scale-free: multiplying a statistic by any positive number changes no verdict. The cell
    *discriminates* when random graphs are shown farther from the real graph than plain (``random - plain > 0``);
    there FDGen holds or fails. A cell that does not discriminate still counts, as a failure, when FDGen is shown
    farther than both plain and the random graphs (``FDGen - max(plain, random) > 0`` per seed: worse than noise
    on that statistic, R7's dropped cell); otherwise it is left out."""
    keys = sorted(set.intersection(*(set(vals[m]) for m in ("plain", "fdgen", "random-graph"))))
    arr = {m: np.array([vals[m].get(k, np.nan) for k in keys]) for m in vals}
    pl, rg = arr["plain"], arr["random-graph"]

    def p(x, side):
        x = x[np.isfinite(x)]
        return evidence.margin_p(x, np.zeros_like(x), 0.0, side=side, test=test)

    def contrast(method):
        return (arr[method] - pl) - share * (rg - pl)

    out = {"seeds": len(keys), "share": share,
           "p_fdgen_within": p(contrast("fdgen"), "within"), "p_fdgen_beyond": p(contrast("fdgen"), "beyond"),
           "p_control_within": p(contrast("random-graph"), "within"),
           "p_control_beyond": p(rg - pl, "beyond"),  # the discrimination test: random graphs farther than plain
           "p_fdgen_worse_than_noise": p(arr["fdgen"] - np.maximum(pl, rg), "beyond"),
           "p_post_within": p(contrast("fairgen-post"), "within") if "fairgen-post" in arr else float("nan")}
    if not out["p_control_beyond"] < alpha:
        # random graphs not shown farther than plain: the statistic cannot tell the generator from noise here; the
        # cell is left out unless FDGen is shown farther than both (then it fails: R7)
        verdict = "fails (farther than random graphs)" if out["p_fdgen_worse_than_noise"] < alpha \
            else "not discriminating"
    elif out["p_fdgen_within"] < alpha:
        verdict = "holds"
    else:
        verdict = "fails (shown outside)" if out["p_fdgen_beyond"] < alpha else "fails (not shown within)"
    out["verdict"] = verdict
    return out


def structure_verdicts(rows: list[dict], metric: str, share: float = STRUCTURE_SHARE, test: str = STRUCTURE_TEST,
                       alpha: float = STRUCTURE_ALPHA) -> dict:
    """The structure claim decided per case by seed-level tests (session-9 reviews: pooled over cases the
    claim mixed SBMs where random graphs are within the margin too with small graphs where they are not;
    per case, a mean-within-margin rule over 5 seeds was decided by single seeds in 3 of 6 cells).

    For each case, paired over its seeds, ``metric`` (a distance to the real graph: lower is closer) of
    ``fdgen``, ``fairgen-post`` and the control ``random-graph`` against ``plain``'s, through
    ``_structure_cell``'s one-sided tests of the scale-free contrast ``(method - plain) - share * (random -
    plain)`` (session 12, R7: the margin is ``share`` of the control's gap in that case, not one absolute
    number for statistics whose scales differ by 60x). A case *counts* when random graphs are shown farther
    than plain (it discriminates), or when FDGen is shown farther than both plain and the random graphs (a
    failure: R7); there FDGen *holds* when it is shown within, else it *fails* ("shown outside" when its
    beyond test rejects, "not shown within", or "farther than random graphs"). Every case also carries the
    means, FDGen's gap as a share of the control's (``share_of_control_gap``, descriptive), the
    leave-one-seed-out range of its verdict, of FDGen's mean difference and of its p, and the Wilcoxon pairs a
    power-0.8 test would need in the direction the mean contrast points (``rayml.evidence.power_from_pilot``).

    Returns ``{"per_case": {case: {...}}, "discriminating_cases", "counted_cases", "cases", "within_share"``
    (FDGen's share of the counted cases; NaN when there is none; every case must hold, an intersection-union
    test, so no multiplicity correction), ``"control_within_share"`` (the control's share of the same cases,
    through the same test), ``"post_within_share"``, ``"loo_unstable_cases"`` (cases whose verdict changes
    when one seed is left out)``}``."""
    out: dict = {"per_case": {}}
    methods = ("plain", "fdgen", "fairgen-post", "random-graph")
    for case in sorted({r["case"] for r in rows}, key=lambda c: (not c.startswith("sbm"), c)):
        vals = {m: {r["seed"]: float(r["value"]) for r in rows if r["case"] == case and r["method"] == m
                    and r["metric"] == metric} for m in methods}
        vals = {m: v for m, v in vals.items() if v or m != "fairgen-post"}
        means = {m.replace("-", "_"): float(np.nanmean(list(v.values()))) if v else float("nan")
                 for m, v in vals.items()}
        cell = _structure_cell(vals, share, test, alpha)
        seeds = sorted(set.intersection(*(set(vals[m]) for m in ("plain", "fdgen", "random-graph"))))
        loo = [_structure_cell({m: {k: x for k, x in v.items() if k != left} for m, v in vals.items()},
                               share, test, alpha) for left in seeds] if len(seeds) > 1 else []
        d_fd = np.array([vals["fdgen"][k] - vals["plain"][k] for k in seeds])
        d_ctl = np.array([vals["random-graph"][k] - vals["plain"][k] for k in seeds])
        contrast = d_fd - share * d_ctl
        loo_d = [float(np.nanmean(np.delete(d_fd, i))) for i in range(len(seeds))] if len(seeds) > 1 else []

        def needed(x):  # Wilcoxon pairs for power 0.8 in the direction the mean of x (a contrast to 0) points
            x = x[np.isfinite(x)]
            if x.size < 2:
                return float("nan")
            est = evidence.power_from_pilot(-x if x.mean() < 0 else x, test="wilcoxon")
            return float("nan") if est["pairs_needed"] is None else float(est["pairs_needed"])

        gap_fd, gap_ctl = (float(np.nanmean(d)) if seeds else float("nan") for d in (d_fd, d_ctl))
        verdicts = sorted({c["verdict"] for c in loo})
        out["per_case"][case] = {
            **means, "fdgen_minus_plain": gap_fd, "control_minus_plain": gap_ctl,
            "margin": share * gap_ctl, "contrast": float(np.nanmean(contrast)) if seeds else float("nan"),
            "share_of_control_gap": gap_fd / gap_ctl if gap_ctl > 0 else float("nan"), **cell,
            "counted": float(cell["verdict"] != "not discriminating"),
            "fdgen_within": float(cell["verdict"] == "holds"),
            "control_within": float(cell["p_control_within"] < alpha),
            "post_within": float(cell["p_post_within"] < alpha),
            "loo_verdicts": " / ".join(verdicts), "loo_stable": float(verdicts == [cell["verdict"]]),
            "loo_fdgen_minus_plain_min": min(loo_d, default=float("nan")),
            "loo_fdgen_minus_plain_max": max(loo_d, default=float("nan")),
            "loo_p_fdgen_within_min": min((c["p_fdgen_within"] for c in loo), default=float("nan")),
            "loo_p_fdgen_within_max": max((c["p_fdgen_within"] for c in loo), default=float("nan")),
            "loo_p_control_beyond_max": max((c["p_control_beyond"] for c in loo), default=float("nan")),
            "fdgen_pairs_needed": needed(contrast), "control_pairs_needed": needed(d_ctl)}
    pc = out["per_case"]
    counted = [c for c, v in pc.items() if v["counted"]]
    share_of = (lambda key: float(np.mean([pc[c][key] for c in counted])) if counted else float("nan"))
    out.update({"cases": len(pc), "counted_cases": len(counted),
                "discriminating_cases": int(sum(v["p_control_beyond"] < alpha for v in pc.values())),
                "within_share": share_of("fdgen_within"), "control_within_share": share_of("control_within"),
                "post_within_share": share_of("post_within"),
                "loo_unstable_cases": int(sum(not v["loo_stable"] for v in pc.values()))})
    return out


MMD_STATISTICS = ("degree_mmd", "clustering_mmd", "spectral_mmd")  # the paper's three structure MMDs


def structure_summary(rows: list[dict], share: float = STRUCTURE_SHARE, test: str = STRUCTURE_TEST,
                      alpha: float = STRUCTURE_ALPHA) -> tuple[dict, list[dict]]:
    """The structure claims' numbers (``metrics.structure``) and the ``structure`` table from the runs' rows.

    ``mmd``: decided per (case, statistic) cell, each of degree, clustering and spectral MMD on its own
    (session 10, R5: on karate the mean of the three held, p = 0.017, while clustering alone was not shown
    within the margin, p = 0.48, nor spectral, p = 0.054: a mean lets a close statistic carry a far one).
    Each cell is ``structure_verdicts``' seed-level test of that statistic in that case, at a margin of
    ``share`` of the control's gap there (session 12, R7); a cell counts when the random-graph control is
    shown farther than plain there, or when FDGen is shown farther than both (a failure), and the claim's
    ``within_share`` is FDGen's share of the counted cells (every one must hold: an intersection-union test,
    so no multiplicity correction; ``counted_cells`` is its gate, ``discriminating_cells`` the cells where the
    control is shown farther). ``per_statistic`` keeps each statistic's summary, ``failing`` names the counted
    cells that do not hold. ``mmd_mean``: the mean MMD decided per case as before, kept for reference (no
    claim reads it). ``community``: the community statistic per case (the same rule). Table rows:
    ``{statistic, case, claim: mmd | community | none, ...the cell}``."""
    per = {m: structure_verdicts(rows, m, share, test, alpha) for m in MMD_STATISTICS}
    cells = [(m, c, v) for m, sv in per.items() for c, v in sv["per_case"].items()]
    counted = [(m, c, v) for m, c, v in cells if v["counted"]]

    def share_of(key):
        return float(np.mean([v[key] for _, _, v in counted])) if counted else float("nan")

    mmd = {"cells": len(cells), "counted_cells": len(counted),
           "discriminating_cells": int(sum(v["p_control_beyond"] < alpha for _, _, v in cells)),
           "within_share": share_of("fdgen_within"),
           "control_within_share": share_of("control_within"), "post_within_share": share_of("post_within"),
           "loo_unstable_cells": int(sum(not v["loo_stable"] for _, _, v in cells)),
           "failing": ", ".join(f"{c} {m}" for m, c, v in counted if v["verdict"] != "holds"),
           # power (session 12): counted cells whose FDGen test is undecided (neither within nor beyond) and whose
           # power-0.8 Wilcoxon pairs, from this run's contrasts, exceed the seeds they had
           "power_short": ", ".join(f"{c} {m} ({v['seeds']} of {v['fdgen_pairs_needed']:.0f})" for m, c, v in counted
                                    if v["verdict"] == "fails (not shown within)"
                                    and not v["fdgen_pairs_needed"] <= v["seeds"]),
           "per_statistic": {m: {k: v for k, v in sv.items() if k != "per_case"} for m, sv in per.items()}}
    mean = structure_verdicts(rows, "mmd_mean", share, test, alpha)
    community = structure_verdicts(rows, "community_gap", share, test, alpha)
    metrics = {"mmd": mmd, "mmd_mean": {k: v for k, v in mean.items() if k != "per_case"},
               "community": {k: v for k, v in community.items() if k != "per_case"}}
    table = [{"statistic": m, "claim": "mmd", "case": c, **v} for m, c, v in cells]
    table += [{"statistic": "mmd_mean", "claim": "none", "case": c, **v} for c, v in mean["per_case"].items()]
    table += [{"statistic": "community", "claim": "community", "case": c, **v}
              for c, v in community["per_case"].items()]
    return metrics, table


def run_task(item: tuple, config: Mapping[str, Any]) -> list[dict]:
    """One (case, seed): the real-graph reference, ER, and every method's generated graphs judged."""
    import torch

    from rayml.graphs import fdgen as fd
    from rayml.graphs import fdgen_eval as ev

    case, seed_idx, seed, strengths = item
    g_seed, split_seed, gen_seed, gnn_seed, _ = runtime.seeds(seed, 5)
    g = real_graph(case, config, g_seed)
    n = g["y"].size
    split = _split(np.random.default_rng(split_seed), n)
    gnn_epochs = int(config["gnn_epochs"])
    A_real = torch.zeros(n, n)
    A_real[g["edges"][0], g["edges"][1]] = 1.0
    A_real = A_real + A_real.T
    rows = []

    core = int(seed_idx < int(config["seeds"]))  # 0: an extra structure seed of a small graph (nx_seeds)

    def add(method, res, extra):
        for k, v in {**res, **extra}.items():
            rows.append({"case": case, "seed": seed_idx, "core": core, "method": method, "metric": k,
                         "value": float(v)})

    real_res = _judge(g["x"], g["edges"], g, split, gnn_seed, gnn_epochs)
    real_bias = {"feature_bias": float(fd.feature_bias(torch.as_tensor(g["x"]), g["s"])),
                 "structural_bias": float(fd.structural_bias(A_real, g["s"])),
                 "intra_fraction": fd.intra_group_fraction(g["edges"], g["s"]),
                 "edges": float(g["edges"].shape[1]),
                 "degree_mmd": 0.0, "clustering_mmd": 0.0, "spectral_mmd": 0.0, "mmd_mean": 0.0,
                 "dsp_cut": 0.0, "deo_cut": 0.0}
    bh_real = bethe_l2(g["edges"], n)
    real_bias["bethe_l2"], real_bias["community_gap"] = bh_real, 0.0
    add("real", real_res, real_bias)

    def community(edge_sets):  # the community statistic of each sample, and its mean distance to the real graph's
        ls = [bethe_l2(e, n) for e in edge_sets]
        return {"bethe_l2": float(np.mean(ls)), "community_gap": float(np.mean([abs(v - bh_real) for v in ls]))}

    plain = _generate(g, config, 0.0, gen_seed)
    # the structure control: uniform random graphs with the plain samples' edge counts (an MMD that this
    # reference also keeps within the margin cannot tell a structure-preserving generator from noise)
    er = [_random_graph(np.random.default_rng([gen_seed, k]), n, s_["edges"].shape[1]) for k, s_ in enumerate(plain)]
    mm_er = ev.structure_mmd(er, g["edges"], n)
    add("random-graph", {}, {**mm_er, "mmd_mean": float(np.mean(list(mm_er.values()))), **community(er)})
    for method in METHODS:
        smps = {"fdgen": lambda: _generate(g, config, strengths["fdgen"], gen_seed), "plain": lambda: plain,
                "fairgen-post": lambda: _post(plain, g, strengths["fairgen-post"])}[method]()
        judged = _mean_dicts([_judge(s_["x"], s_["edges"], g, split, gnn_seed, gnn_epochs) for s_ in smps])
        mm = ev.structure_mmd([s_["edges"] for s_ in smps], g["edges"], n)
        bias = []
        for s_ in smps:
            A = torch.zeros(n, n)
            A[s_["edges"][0], s_["edges"][1]] = 1.0
            A = A + A.T
            bias.append({"feature_bias": float(fd.feature_bias(torch.as_tensor(s_["x"]), g["s"])),
                         "structural_bias": float(fd.structural_bias(A, g["s"])),
                         "intra_fraction": fd.intra_group_fraction(s_["edges"], g["s"]),
                         "edges": float(s_["edges"].shape[1])})
        extra = {**_mean_dicts(bias), **mm, "mmd_mean": float(np.mean(list(mm.values()))),
                 **community([s_["edges"] for s_ in smps]),
                 "dsp_cut": real_res["dsp"] - judged["dsp"], "deo_cut": real_res["deo"] - judged["deo"]}
        add(method, judged, extra)
    return rows


def run(config: Mapping[str, Any], seed: int) -> Outcome:
    """Tune each fair method's strength (tuning seeds), then every (case, seed) as one task."""
    _check(config)
    cs = cases(config)
    tune_root, test_root = runtime.seeds(seed, 2)
    tseeds = runtime.seeds(tune_root, len(cs) * int(config["tune_seeds"]))
    tune_items = [(c, k, tseeds[i * int(config["tune_seeds"]) + k]) for i, c in enumerate(cs)
                  for k in range(int(config["tune_seeds"]))]
    tuned_rows: list[dict] = []

    def evaluate(batch):  # one round of evidence.tune: every new grid value on every tuning graph
        settings = [(m, float(st["lambda" if m == "fdgen" else "strength"])) for m, st in batch]
        items = [(c, k, sd, settings, not tuned_rows) for c, k, sd in tune_items]
        tuned_rows.extend(r for rs in runtime.pmap(tune_task, items, shared=dict(config), chunk_size=1,
                                                   desc="fdgen tuning") for r in rs)
        return [tuning_score(tuned_rows, m, v, MATCH_MARGIN) for m, v in settings]

    # the same rule for both fair methods (the fairest value within 0.05 accuracy of plain), each grid
    # extended past an edge that holds the choice (twice at most; the post-processing's strength stops at 1)
    choices = evidence.tune(evaluate, {"fdgen": {"lambda": list(config["lambda_grid"])},
                                       "fairgen-post": {"strength": list(config["post_grid"])}},
                            paper={"fdgen": {"lambda": PAPER_LAMBDA}, "fairgen-post": {"strength": 1.0}},
                            extend=EXTEND, limits={"lambda": (1e-3, 1e3), "strength": (1e-3, 1.0)},
                            tie_break="first")
    strengths = {m: float(next(iter(ch.setting.values()))) for m, ch in choices.items()}
    front = matched_front(tuned_rows)
    n_seeds, n_nx = int(config["seeds"]), int(config["nx_seeds"])
    nx_cases = [c for c in cs if not c.startswith("sbm")]
    # the first ``seeds`` of every case as before (the same seeds); then the small graphs' extra structure seeds
    sseeds = runtime.seeds(test_root, len(cs) * n_seeds + len(nx_cases) * (n_nx - n_seeds))
    items = [(c, k, sseeds[i * n_seeds + k], strengths) for i, c in enumerate(cs) for k in range(n_seeds)]
    items += [(c, k, sseeds[len(cs) * n_seeds + j * (n_nx - n_seeds) + k - n_seeds], strengths)
              for j, c in enumerate(nx_cases) for k in range(n_seeds, n_nx)]
    all_rows = [r for rs in runtime.pmap(run_task, items, shared=dict(config), chunk_size=1, desc="fdgen runs")
                for r in rs]
    rows = [r for r in all_rows if r["core"]]  # the fairness numbers: the same seeds in every case

    def summary(method):
        block = {}
        for metric in sorted({r["metric"] for r in rows if r["method"] == method}):
            vals = [r["value"] for r in rows if r["method"] == method and r["metric"] == metric]
            block[metric] = float(np.nanmean(vals))
        block["per_case"] = {c: {m: float(np.nanmean([r["value"] for r in rows if r["method"] == method
                                                      and r["case"] == c and r["metric"] == m]))
                                 for m in ("acc", "dsp", "deo", "mmd_mean") if any(
                                     r["metric"] == m for r in rows if r["method"] == method)}
                             for c in cs}
        return block

    metrics = summary("fdgen")
    for method, block in (("fdgen", metrics), ("fairgen-post", None)):
        vals = {m: float(np.nanmean([r["value"] for r in front if r["method"] == method and r["metric"] == m]))
                for m in ("dsp_matched", "deo_matched")}
        if block is not None:
            block["front"] = vals
        else:
            front_post = vals
    metrics["lambda"] = strengths["fdgen"]
    metrics["real_dsp"] = summary("real")["dsp"]
    baselines = {"plain": summary("plain"), "fairgen_post": {**summary("fairgen-post"), "front": front_post,
                                                             "strength": strengths["fairgen-post"]},
                 "real": summary("real"), "random_graph": summary("random-graph")}
    wins = {}
    for metric in ("dsp", "deo"):
        for base in ("plain", "fairgen-post"):
            per = {}
            for c in cs:
                a = {r["seed"]: r["value"] for r in rows if r["case"] == c and r["method"] == "fdgen" and r["metric"] == metric}
                b = {r["seed"]: r["value"] for r in rows if r["case"] == c and r["method"] == base and r["metric"] == metric}
                per[c] = int(sum(a[k] < b[k] for k in a if k in b))
            wins[f"{metric}_vs_{base.replace('-', '_')}"] = per
    metrics["wins_per_case"] = wins
    # the structure claims: MMD per (case, statistic) cell (session 10, R5), community per case; each cell with
    # its random-graph control (session 9)
    metrics["structure"], structure_table = structure_summary(all_rows)
    budget = {"generator": f"VGAE, latent {config['latent']}, hidden {config['hidden']}, {config['epochs']} epochs "
                           "(the same for every method)",
              "samples": int(config["samples"]), "gnn": f"2-layer GCN x 16, {config['gnn_epochs']} epochs",
              "tuning": f"fdgen lambda on {list(config['lambda_grid'])}, fairgen-post strength on "
                        f"{list(config['post_grid'])} (rayml.evidence.tune, each extended past an edge that holds "
                        f"the choice, {EXTEND} times at most): the lowest held-out Delta_SP + Delta_EO with accuracy "
                        f"within 0.05 of plain's, on {config['tune_seeds']} tuning seed(s) per case kept apart from "
                        "the test seeds",
              "tuned": strengths, "tuning_choices": {m: ch.summary() for m, ch in choices.items()},
              "test_seeds": {c: n_seeds if c.startswith("sbm") else n_nx for c in cs},
              "structure_test": f"{STRUCTURE_TEST}, one-sided, alpha {STRUCTURE_ALPHA}, margin {STRUCTURE_SHARE} of the "
                                "random graphs' gap over plain in each cell (rayml.evidence.margin_p on per-seed "
                                "contrasts), per case; fairness claims on the first "
                                f"{n_seeds} seeds of every case",
              "evidence_problems": evidence_problems(config)}
    return Outcome(metrics=metrics, baselines=baselines,
                   tables={"runs": all_rows, "tuning": tuned_rows, "front": front, "structure": structure_table},
                   budget=budget)


_SRC_FAIR = ("abstract: 'Experimental results on four real-world datasets demonstrate that FDGen outperforms "
             "state-of-the-art methods, achieving notable improvements in fairness'")
_SRC_UTIL = "abstract: 'achieving notable improvements in fairness while maintaining competitive generation performance'"
_PAIR = ("case", "seed")


def _cut(metric, label):
    return Claim(text=f"a GCN trained on FDGen graphs has a lower {label} than the same GCN trained on the "
                      "real graph (mean cut over case x seed; wilcoxon over (case, seed)); the generator without the "
                      "fairness terms and FairGen-style post-processing are the controls",
                 metric=f"metrics.{metric}_cut", compare=0.0, op=">", test="wilcoxon signed-rank over seeds",
                 table="runs", a={"method": "fdgen", "metric": f"{metric}_cut", "core": 1},
                 b={"method": "real", "metric": f"{metric}_cut", "core": 1}, pair_on=_PAIR, kind="paper",
                 source=_SRC_FAIR,
                 controls=(Control("plain", f"baselines.plain.{metric}_cut",
                                   a={"method": "plain", "metric": f"{metric}_cut", "core": 1}),
                           # the state-of-the-art baseline the paper compares against: a cut it also makes is
                           # no evidence for FDGen (the comparison itself is the _front claims)
                           Control("fairgen-post", f"baselines.fairgen_post.{metric}_cut",
                                   a={"method": "fairgen-post", "metric": f"{metric}_cut", "core": 1})))


def _front(metric, label):
    return Claim(text=f"at matched accuracy, FDGen's {label} is below structure-only (FairGen-style) "
                      "post-processing's: each method's lowest held-out gap over its strength sweep among the values "
                      f"within {MATCH_MARGIN} accuracy of the plain generator (the Pareto fronts read at one accuracy "
                      "budget; paired wilcoxon over (case, sweep seed))",
                 metric=f"metrics.front.{metric}_matched", compare=f"baselines.fairgen_post.front.{metric}_matched",
                 op="<", test="wilcoxon signed-rank over seeds", table="front",
                 a={"method": "fdgen", "metric": f"{metric}_matched"},
                 b={"method": "fairgen-post", "metric": f"{metric}_matched"}, pair_on=_PAIR, kind="paper",
                 source=_SRC_FAIR, tie=1e-9)


def _structure(stat: str, what: str, claim: str, unit: str = "case") -> tuple[Claim, Claim]:
    """The gate (the claim can be decided in some ``unit``) and the structure claim on ``stat``, decided per
    ``unit``: a case (the community statistic) or a (case, statistic) cell (the MMDs, session 10 R5). Session 12
    (R7): the margin is a share of the random graphs' gap over plain in that unit (scale-free), and a unit where
    FDGen is shown farther than both plain and the random graphs counts as a failure."""
    path = f"metrics.structure.{stat}"
    count = "counted_cases" if unit == "case" else "counted_cells"
    where = "case" if unit == "case" else "(case, statistic) cell"
    share = f"{STRUCTURE_SHARE:g}"
    return evidence.gate(
        Claim(text=f"sanity (gate): the structure claim on {what} can be decided somewhere: in at least one {where} "
                   "uniform random graphs with plain's edge counts are shown farther from the real graph than the "
                   "generator without the fairness terms, or FDGen is shown farther than both (one-sided paired "
                   f"Wilcoxon over the case's seeds, p < {STRUCTURE_ALPHA})",
              metric=f"{path}.{count}", compare=1, op=">=", kind="sanity"),
        Claim(text=f"{claim}, FDGen is shown to give up less than {share} of the plain generator's advantage over "
                   "uniform random graphs with plain's edge counts (per seed, (FDGen - plain) - "
                   f"{share} x (random - plain) < 0: a margin of {share} of the control's gap, scale-free per "
                   f"statistic) (share of the {unit}s that count: those where the random graphs are shown farther "
                   "than plain, and those where FDGen is shown farther than both, which fail; seed-level tests: "
                   f"one-sided paired Wilcoxon over the case's seeds at {STRUCTURE_ALPHA}, the control through the "
                   "same test)",
              metric=f"{path}.within_share", compare=1.0, op=">=", kind="paper", source=_SRC_UTIL,
              controls=(Control(f"random_graph (per {unit})", f"{path}.control_within_share"),)))


_BIASED = "sanity: the real graphs are biased (a GCN trained on them has Delta_SP > 0.1)"

CLAIMS = (
    # the paper's precondition here: the data carry the bias FDGen removes (else no fairness claim can show)
    *evidence.gate(
        Claim(text=_BIASED, metric="metrics.real_dsp", compare=0.1, op=">", kind="sanity"),
        _cut("dsp", "demographic-parity gap (Delta_SP)"),
        _cut("deo", "equal-opportunity gap (Delta_EO)"),
        _front("dsp", "Delta_SP"),
        _front("deo", "Delta_EO"),
    ),
    # the tuning rule (select_strength) admits only strengths whose accuracy is within 0.05 of plain's on the
    # tuning graphs, so this is the selection constraint carrying over to the test seeds, not evidence: sanity
    Claim(text="sanity (enforced by the tuning rule): the GCN's test accuracy on FDGen graphs is within 0.05 of its "
               "accuracy on graphs of the same generator without the fairness terms",
          metric="metrics.acc", compare="baselines.plain.acc", op=">", margin=-0.05, kind="sanity"),
    # session 9 (outside review R2): pooled over cases the MMD claim mixed 1000-node SBMs, where uniform random
    # graphs are within the margin too (not discriminating), with the small networkx graphs, where they are not
    # and FDGen was not either. Decided per case now, the control per case; and a community statistic (the
    # Bethe Hessian's second eigenvalue) that tells a detectable SBM from G(n, m)
    # session 10 (outside review R5): the mean of the three MMDs held on karate while clustering alone did not
    # (p = 0.48) nor spectral (p = 0.054): one claim (one paper sentence), decided in every (case, statistic) cell
    # session 12 (outside review R7): one absolute 0.05 left every SBM cell out by scale (plain's clustering MMD
    # 0.0006-0.0008), and a cell where FDGen was farther than random graphs vanished: the margin is now a share of
    # the control's gap per cell, and such a cell fails
    *_structure("mmd", "a structure MMD (degree, clustering or spectral, each on its own)",
                "comparable structure, decided per (case, statistic), degree, clustering and spectral MMD each on "
                "its own: in every cell that counts", unit="cell"),
    *_structure("community", "the community statistic (Bethe Hessian second eigenvalue; the distance to the real "
                "graph's)",
                "comparable community structure (ours: a statistic the paper does not name, for the SBMs where the "
                "MMD cannot tell structure from noise), decided per case on the Bethe Hessian's second eigenvalue: "
                "in every case that counts"),
)


def plots(record: Mapping) -> dict:
    """Headline: Delta_SP / Delta_EO / accuracy per method and case (mean and min-max band over seeds); structure MMDs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = record["tables"]["runs"]
    cs = sorted({r["case"] for r in rows}, key=lambda c: (not c.startswith("sbm"), c))
    methods = ("real", "plain", "fairgen-post", "fdgen")
    figs = {}
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    xs = np.arange(len(cs))
    for ax, metric, label in ((axes[0], "dsp", "Delta_SP (lower is fairer)"), (axes[1], "deo", "Delta_EO"),
                              (axes[2], "acc", "GCN test accuracy")):
        for j, m in enumerate(methods):
            vals = [[r["value"] for r in rows if r["method"] == m and r["case"] == c and r["metric"] == metric]
                    for c in cs]
            mean = [np.nanmean(v) for v in vals]
            lo, hi = [np.nanmin(v) for v in vals], [np.nanmax(v) for v in vals]
            off = (j - 1.5) * 0.18
            ax.errorbar(xs + off, mean, yerr=[np.subtract(mean, lo), np.subtract(hi, mean)], fmt="o", capsize=3,
                        label=m)
        ax.set_xticks(xs, cs, rotation=20)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.suptitle("GCN trained on each graph: fairness gaps and accuracy (mean, min-max over seeds)")
    fig.tight_layout()
    figs["fairness_gaps"] = fig
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    for ax, metric in zip(axes, ("degree_mmd", "clustering_mmd", "spectral_mmd")):
        for j, m in enumerate(("plain", "fairgen-post", "fdgen")):
            vals = [[r["value"] for r in rows if r["method"] == m and r["case"] == c and r["metric"] == metric]
                    for c in cs]
            mean = [np.mean(v) for v in vals]
            ax.errorbar(xs + (j - 1.5) * 0.18, mean,
                        yerr=[np.subtract(mean, [np.min(v) for v in vals]), np.subtract([np.max(v) for v in vals], mean)],
                        fmt="o", capsize=3, label=m)
        ax.set_xticks(xs, cs, rotation=20)
        ax.set_ylabel(f"{metric} against the real graph")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    figs["structure_mmd"] = fig
    tune = record["tables"].get("tuning", [])
    if tune:  # the fairness-utility trade-off each grid value gave on the tuning graphs
        fig, ax = plt.subplots(figsize=(5.5, 4))
        for m, marker in (("plain", "s"), ("fairgen-post", "^"), ("fdgen", "o")):
            vals = sorted({r["strength"] for r in tune if r["method"] == m})
            acc = [np.mean([r["val_acc"] for r in tune if r["method"] == m and r["strength"] == v]) for v in vals]
            gap = [np.nanmean([r["val_dsp"] for r in tune if r["method"] == m and r["strength"] == v]) for v in vals]
            ax.plot(acc, gap, marker=marker, label=m)
            for a, g_, v in zip(acc, gap, vals):
                if m != "plain":
                    ax.annotate(f"{v:g}", (a, g_), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("held-out accuracy (tuning graphs)")
        ax.set_ylabel("held-out Delta_SP (tuning graphs)")
        ax.set_title("trade-off over each method's grid (labels: lambda / strength)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        figs["tuning_tradeoff"] = fig
    return figs


EXPERIMENT = Experiment(
    name=NAME, paper=PAPER,
    ray="tuning (case x tuning seed) and test runs (case x seed: real-graph GCN, ER, and every method's generator, "
        "samples and GCNs) as pmap tasks",
    checked_against="the abstract and the paper's first page (PMLR 267; the full text was not reachable, and there is "
                    "no public code); bias definitions follow EDITS (attribute bias as per-dimension Wasserstein-1 "
                    "between groups), the base generator is a VGAE, the baseline reduces FairGen's parity constraint "
                    "to structure-only post-processing: all assumed and stated in rayml.graphs.fdgen; W1 is checked "
                    "against scipy.stats.wasserstein_distance in the tests",
    sizes=SIZES, run=run, check=_check, claims=CLAIMS, plots=plots,
)
