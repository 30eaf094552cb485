"""Active-learning baselines the DIRECT paper compares with (as implemented in LabelBench).

- ``random``: uniform over the unlabelled pool.
- ``confidence``: lowest top-class probability (least confidence).
- ``margin``: smallest gap between the two most probable classes.
- ``entropy``: highest predictive entropy.
- ``coreset``: greedy k-centre on the embeddings (Sener & Savarese, ICLR 2018): repeatedly the
  unlabelled example farthest from every labelled or chosen one.
- ``badge``: k-means++ seeding on gradient embeddings ``(onehot(argmax p) - p) (x) emb``
  (Ash et al., ICLR 2020); the first centre is the largest-norm embedding, as in LabelBench.
- ``galaxy``: graph-based active learning for imbalance (Zhang et al., ICML 2022): per query a
  class ``k`` at random, the pool on a line sorted by class ``k``'s margin; the shortest run of
  unlabelled examples between two labelled ones of different labels (class ``k`` or not) is
  bisected (its middle example is queried, and its label is seen before the next query). With no
  such run, the unlabelled example nearest a cut edge (adjacent labelled examples of different
  labels) is queried, else a random one.

Details taken from LabelBench (``strategy_impl/*.py``); assumed: exact ties in the top-k scores are
broken at random (a head that has seen one class gives every example the same score; a trained
network's softmax would not tie); GALAXY's fallback is "nearest to any cut edge" (the authors' scan
takes the nearest unlabelled neighbour of a 0-1 or 1-0 edge, ties left to right).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["BASELINES", "uncertainty_scores", "top_uncertain", "coreset", "badge", "galaxy", "select_baseline"]

BASELINES = ("random", "confidence", "margin", "entropy", "coreset", "badge", "galaxy")


def uncertainty_scores(probs, kind: str) -> np.ndarray:
    """Higher is more uncertain: ``1 - max p`` (confidence), ``-(p1 - p2)`` (margin), entropy."""
    p = np.asarray(probs, dtype=float)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"probs must have shape (n, C >= 2), got {p.shape}")
    if kind == "confidence":
        return 1.0 - p.max(1)
    if kind == "margin":
        top2 = np.sort(p, axis=1)[:, -2:]
        return -(top2[:, 1] - top2[:, 0])
    if kind == "entropy":
        return -(p * np.log(np.clip(p, 1e-12, None))).sum(1)
    raise ValueError(f"kind must be 'confidence', 'margin' or 'entropy', got {kind!r}")


def top_uncertain(scores: np.ndarray, unlabeled: np.ndarray, budget: int,
                  rng: np.random.Generator | None = None) -> np.ndarray:
    """The ``budget`` unlabelled indices of largest score; exact ties by index, or in a random order
    when ``rng`` is given (a head that has seen one class scores every example the same: by index it
    would query one end of the pool, round after round)."""
    unlabeled = np.asarray(unlabeled)
    if rng is not None:
        unlabeled = unlabeled[rng.permutation(unlabeled.size)]
    order = unlabeled[np.argsort(-scores[unlabeled], kind="stable")]
    return order[:budget]


def coreset(emb: np.ndarray, labeled: np.ndarray, budget: int) -> np.ndarray:
    """Greedy k-centre: ``budget`` times the example farthest from the labelled and chosen ones."""
    emb = np.asarray(emb, dtype=float)
    n = emb.shape[0]
    sq = (emb ** 2).sum(1)
    centres = np.flatnonzero(labeled)
    if centres.size:
        d = np.full(n, np.inf)
        for start in range(0, centres.size, 256):
            c = emb[centres[start:start + 256]]
            d = np.minimum(d, (sq[:, None] + (c ** 2).sum(1)[None] - 2 * emb @ c.T).min(1))
    else:
        d = np.full(n, np.inf)
    d[labeled] = -np.inf
    out = []
    for _ in range(min(budget, int((~labeled).sum()))):
        i = int(np.argmax(d))
        out.append(i)
        d = np.minimum(d, sq + sq[i] - 2 * emb @ emb[i])
        d[i] = -np.inf
        d[labeled] = -np.inf
    return np.asarray(out, dtype=np.int64)


def badge(probs: np.ndarray, emb: np.ndarray, labeled: np.ndarray, budget: int,
          rng: np.random.Generator) -> np.ndarray:
    """k-means++ seeding on gradient embeddings ``g = (onehot(argmax p) - p) (x) emb``."""
    p = np.asarray(probs, dtype=float)
    unl = np.flatnonzero(~labeled)
    g = (np.eye(p.shape[1])[p.argmax(1)] - p)[unl]
    e = np.asarray(emb, dtype=float)[unl]
    # ||g_a (x) e_a - g_b (x) e_b||^2 = |g_a|^2|e_a|^2 + |g_b|^2|e_b|^2 - 2 (g_a.g_b)(e_a.e_b)
    gn, en = (g ** 2).sum(1), (e ** 2).sum(1)
    norms = gn * en
    budget = min(budget, unl.size)
    chosen = [int(np.argmax(norms))]
    d2 = np.clip(norms + norms[chosen[0]] - 2 * (g @ g[chosen[0]]) * (e @ e[chosen[0]]), 0, None)
    d2[chosen[0]] = 0
    while len(chosen) < budget:
        if d2.sum() <= 0:
            rest = np.setdiff1d(np.arange(unl.size), chosen)
            nxt = int(rng.choice(rest))
        else:
            nxt = int(rng.choice(unl.size, p=d2 / d2.sum()))
        chosen.append(nxt)
        d2 = np.minimum(d2, np.clip(norms + norms[nxt] - 2 * (g @ g[nxt]) * (e @ e[nxt]), 0, None))
        d2[chosen] = 0
    return unl[np.asarray(chosen, dtype=np.int64)]


def _galaxy_pick(order: np.ndarray, observed: np.ndarray, taken: np.ndarray, k: int,
                 rng: np.random.Generator) -> int:
    lab = taken[order]
    obs = observed[order]
    known = np.flatnonzero(lab & (obs >= 0))
    y = (obs[known] == k)
    cut = np.flatnonzero(y[1:] != y[:-1])  # consecutive known labels that differ
    best, best_len = None, None
    for c in cut:
        a, b = known[c], known[c + 1]
        gap = np.flatnonzero(~lab[a + 1:b])
        if gap.size and (best_len is None or gap.size < best_len):
            run = a + 1 + gap
            best, best_len = int(run[(run.size - 1) // 2]), gap.size
    if best is not None:
        return int(order[best])
    unl = np.flatnonzero(~lab)
    if cut.size and unl.size:
        edges = np.concatenate([known[cut], known[cut + 1]])
        dist = np.abs(unl[:, None] - edges[None]).min(1)
        return int(order[unl[int(np.argmin(dist))]])
    return int(order[rng.choice(unl)])


def galaxy(probs: np.ndarray, observed: np.ndarray, taken: np.ndarray, budget: int,
           annotate: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """GALAXY's sequential graph bisection; ``observed[i]`` is ``-1`` until ``i``'s label is seen."""
    from rayml.data.direct import margin_scores

    p = np.asarray(probs, dtype=float)
    C = p.shape[1]
    margins = margin_scores(p)
    orders = [np.argsort(-margins[:, k], kind="stable") for k in range(C)]
    observed, taken = observed.copy(), taken.copy()
    out = []
    for _ in range(min(budget, int((~taken).sum()))):
        k = int(rng.integers(C))
        i = _galaxy_pick(orders[k], observed, taken, k, rng)
        taken[i] = True
        observed[i] = int(np.asarray(annotate(np.array([i])))[0])
        out.append(i)
    return np.asarray(out, dtype=np.int64)


def select_baseline(name: str, probs: np.ndarray, emb: np.ndarray, labeled_idx: np.ndarray,
                    observed_labels: np.ndarray, budget: int, annotate, rng: np.random.Generator) -> np.ndarray:
    """One batch of ``budget`` pool indices from baseline ``name`` (one of ``BASELINES``)."""
    if name not in BASELINES:
        raise ValueError(f"name must be one of {BASELINES}, got {name!r}")
    n = probs.shape[0]
    taken = np.zeros(n, dtype=bool)
    taken[labeled_idx] = True
    unl = np.flatnonzero(~taken)
    budget = min(int(budget), unl.size)
    if name == "random":
        return rng.choice(unl, size=budget, replace=False)
    if name in ("confidence", "margin", "entropy"):
        return top_uncertain(uncertainty_scores(probs, name), unl, budget, rng)
    if name == "coreset":
        return coreset(emb, taken, budget)
    if name == "badge":
        return badge(probs, emb, taken, budget, rng)
    observed = np.full(n, -1, dtype=np.int64)
    observed[labeled_idx] = observed_labels
    return galaxy(probs, observed, taken, budget, annotate, rng)
