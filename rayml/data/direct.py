"""DIRECT: deep active learning under class imbalance and label noise via optimal separation.

Shyam Nuggehalli, Jifan Zhang, Lalit Jain, Robert Nowak, "Improved Algorithm for Deep Active
Learning under Imbalance via Optimal Separation", ICML 2025 (arXiv 2312.09196).

The reduction (the paper's Section 3, the authors' ``strategy/direct.py`` in LabelBench):

1. **1-D reduction per class** (``margin_scores``, ``class_order``). For class ``k`` every pool
   example gets the one-vs-rest margin ``p_k(x) - max_j p_j(x)``; sorting the pool by it in
   decreasing order turns "where does class k end" into learning a threshold on a line.
2. **Threshold score** (``threshold_scores``). With labelled weights ``w_i = +1`` (class ``k``),
   ``-1`` (another class), ``0`` (unlabelled) in sorted order, the threshold before position ``j``
   scores ``acc[j] = sum_{i<j} w_i - sum_{i>=j} w_i`` (twice the labelled examples it classifies
   correctly, less their number); the optimal separation threshold is ``argmax_j acc[j]``.
3. **Agnostic, noise-tolerant interval search with B parallel annotators**
   (``initial_interval``, ``interval_search``; the paper's Algorithm 1 / the authors'
   ``version_space_reduction``): keep an uncertainty interval ``[I, J]`` of candidate
   thresholds; each round the ``B1`` annotators label ``min(B1, B2)`` examples drawn uniformly
   without replacement from the unlabelled ones inside the interval (one batch), then the
   interval shrinks by a factor ``c = diam ** (1 / (B2 // B1))`` (so it reaches one example in the
   rounds left) by repeatedly moving inward whichever end has the *lower* threshold score
   (ties broken by a fair coin). Moving by comparing noisy counts instead of trusting single
   labels is what makes the search tolerant to label noise.
4. **Second phase** (``query_around_threshold``): the rest of the batch is spent labelling the
   unlabelled examples closest to each class's best threshold, alternately left and right.
5. ``direct_select`` puts it together for one batch: half the batch on the interval search of the
   rarest classes (``B2 = budget // C // 2`` per class, or ``min_budget_per_class`` for the
   ``budget // (2 min_budget_per_class)`` rarest classes when the batch is large), the other half
   on the second phase, split evenly over the classes in a random order.

Details taken from the authors' code: the margin gets a ``1e-8 * max_j p_j`` tie-breaker
(``1e-8 * p_0`` for two classes); the threshold index ``j`` runs over ``0..n`` and the interval
ends are compared by ``acc[I]`` and ``acc[J]``; the initial interval ends at the last labelled
example of the leading run of labelled class-``k`` examples (``I``) and at the first labelled
example of the trailing run of labelled other-class examples (``J``); classes are ranked by their
labelled counts (the rarest first get the interval search); the per-class ``B2`` is capped by the
number of unlabelled examples; the second phase takes the first maximiser of ``acc`` and starts to
its left; defaults ``B1 = 20`` parallel annotators and ``min_budget_per_class = 60``
(``configs/strategy/direct_sampling.json``).

Assumed (differs from the authors' simulator): labels of the second phase's picks are not read
while the batch is being chosen (the authors' simulator reads every picked example's label at once,
so a later class's threshold already sees an earlier class's second-phase picks); here they count as
queried but unseen until the batch is annotated. Ties between classes of equal labelled count are
broken by class index (stable sort).

Examples:
    >>> import numpy as np
    >>> threshold_scores(np.array([1, 1, -1, 0, -1]))
    array([0, 2, 4, 2, 2, 0])
    >>> best_threshold(np.array([1, 1, -1, 0, -1]))
    2
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

__all__ = [
    "B1_DEFAULT",
    "MIN_BUDGET_PER_CLASS_DEFAULT",
    "margin_scores",
    "class_order",
    "threshold_scores",
    "best_threshold",
    "initial_interval",
    "interval_search",
    "query_around_threshold",
    "direct_select",
]

B1_DEFAULT = 20
MIN_BUDGET_PER_CLASS_DEFAULT = 60

Annotator = Callable[[np.ndarray], np.ndarray]


def _check_probs(probs) -> np.ndarray:
    p = np.asarray(probs, dtype=float)
    if p.ndim != 2 or p.shape[1] < 2 or p.shape[0] < 1:
        raise ValueError(f"probs must have shape (n_examples, n_classes >= 2), got {p.shape}")
    if not np.all(np.isfinite(p)):
        raise ValueError("probs must be finite")
    return p


def _check_weights(w) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 1:
        raise ValueError(f"w must be 1-D, got shape {w.shape}")
    if not np.all(np.isin(w, (-1, 0, 1))):
        raise ValueError("w must hold only -1 (other class), 0 (unlabelled) and +1 (the class)")
    return w.astype(np.int64)


def margin_scores(probs) -> np.ndarray:
    """One-vs-rest margins ``p_k(x) - max_j p_j(x)`` (the paper's 1-D reduction), shape ``(n, C)``.

    A tie-breaker ``1e-8 * max_j p_j(x)`` (``1e-8 * p_0(x)`` with two classes) is added, as in the
    authors' code, so examples predicted as ``k`` with equal margin 0 keep a confidence order.
    """
    p = _check_probs(probs)
    top = p.max(axis=1, keepdims=True)
    tie = top if p.shape[1] > 2 else p[:, :1]
    return p - top + 1e-8 * tie


def class_order(probs, k: int) -> np.ndarray:
    """Pool indices sorted by class ``k``'s margin, most class-``k``-like first (stable)."""
    m = margin_scores(probs)
    if not (isinstance(k, (int, np.integer)) and 0 <= k < m.shape[1]):
        raise ValueError(f"k must be a class index in [0, {m.shape[1]}), got {k!r}")
    return np.argsort(-m[:, k], kind="stable")


def threshold_scores(w) -> np.ndarray:
    """``acc[j] = sum_{i<j} w_i - sum_{i>=j} w_i`` for ``j = 0..n`` (length ``n + 1``).

    ``acc[j]`` is ``2 * correct - labelled`` for the threshold that calls the first ``j`` examples
    class ``k``: the score the paper maximises to find the optimal separation threshold.
    """
    w = _check_weights(w)
    left = np.concatenate([[0], np.cumsum(w)])
    right = np.concatenate([np.cumsum(w[::-1])[::-1], [0]])
    return left - right


def best_threshold(w) -> int:
    """The optimal separation threshold ``argmax_j acc[j]`` (the first maximiser)."""
    return int(np.argmax(threshold_scores(w)))


def initial_interval(w) -> tuple[int, int]:
    """The uncertainty interval ``[I, J]`` before any new label (positions in sorted order).

    ``I`` is the last labelled position of the leading run of labelled class-``k`` examples
    (``0`` if the first labelled example is of another class); ``J`` the first labelled position
    of the trailing run of labelled other-class examples (``n - 1`` if the last labelled example is
    of class ``k``).
    """
    w = _check_weights(w)
    n = w.size
    I = 0
    for pos in np.flatnonzero(w != 0):
        if w[pos] != 1:
            break
        I = int(pos)
    J = n - 1
    for pos in np.flatnonzero(w != 0)[::-1]:
        if w[pos] == 1:
            break
        J = int(pos)
    return I, J


def interval_search(w, labeled, I: int, J: int, *, n_annotators: int, budget: int,
                    annotate: Annotator, rng: np.random.Generator) -> tuple[list[int], tuple[int, int]]:
    """The agnostic, noise-tolerant 1-D interval search with batch labelling (Algorithm 1).

    Args:
        w: int array of labelled weights in sorted order (``+1``/``-1``/``0``); updated in place.
        labeled: bool array, ``True`` where an example is labelled or already queried; updated.
        I, J: the uncertainty interval (positions, inclusive).
        n_annotators: ``B1``, examples labelled in parallel per round (one batch per round).
        budget: ``B2``, labels this search may spend.
        annotate: ``positions -> +1/-1`` labels for class ``k`` (one call per round).
        rng: the source of the uniform draws and tie-breaking coins.

    Returns:
        ``(queried, (I, J))``: the positions queried, in order, and the final interval.
    """
    if not isinstance(n_annotators, (int, np.integer)) or n_annotators < 1:
        raise ValueError(f"n_annotators must be a positive integer, got {n_annotators!r}")
    if not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be an integer >= 0, got {budget!r}")
    n = w.size
    if labeled.shape != (n,):
        raise ValueError(f"labeled must have shape ({n},), got {labeled.shape}")
    if not (0 <= I <= J < n):
        raise ValueError(f"need 0 <= I <= J < n, got I={I}, J={J}, n={n}")
    B1, B2 = int(n_annotators), int(budget)
    queried: list[int] = []
    while B2 > 0:
        per_round = min(B1, B2)
        inside = I + np.flatnonzero(~labeled[I:J + 1])
        if inside.size == 0:
            break
        picks = rng.choice(inside, size=min(per_round, inside.size), replace=False)
        labels = np.asarray(annotate(picks))
        if labels.shape != picks.shape or not np.all(np.isin(labels, (-1, 1))):
            raise ValueError("annotate must return one +1/-1 label per position")
        labeled[picks] = True
        w[picks] = labels
        queried.extend(int(p) for p in picks)
        diam = int(np.count_nonzero(~labeled[I:J + 1]))
        if diam > 0:
            rounds_left = B2 // B1
            shrink = diam ** (1.0 / rounds_left) if rounds_left > 1 else 1.0
            target = math.ceil(diam / shrink)
            acc = threshold_scores(w)
            while diam > target:
                move_left = acc[I] < acc[J] or (acc[I] == acc[J] and rng.integers(2) == 0)
                if move_left:
                    diam -= int(not labeled[I])
                    I += 1
                else:
                    diam -= int(not labeled[J])
                    J -= 1
        B2 -= per_round
    return queried, (I, J)


def query_around_threshold(labeled, best: int, budget: int) -> list[int]:
    """Second phase: the ``budget`` unlabelled positions nearest threshold ``best``, alternating
    left (``best - 1, best - 2, ...``) and right (``best, best + 1, ...``), left first; marks them in
    ``labeled``."""
    n = labeled.size
    left, right, go_left = best - 1, best, True
    out: list[int] = []
    while len(out) < budget and (left >= 0 or right < n):
        if go_left and left >= 0:
            if not labeled[left]:
                labeled[left] = True
                out.append(left)
            left -= 1
        elif not go_left and right < n:
            if not labeled[right]:
                labeled[right] = True
                out.append(right)
            right += 1
        go_left = not go_left
    return out


def direct_select(probs, labeled_idx, labels, budget: int, annotate: Annotator, *,
                  n_annotators: int = B1_DEFAULT, min_budget_per_class: int = MIN_BUDGET_PER_CLASS_DEFAULT,
                  rng: np.random.Generator | int | None = None) -> tuple[np.ndarray, dict[int, int]]:
    """One DIRECT batch: interval search on the rarest classes, then labels around each threshold.

    Args:
        probs: ``(n, C)`` predicted class probabilities on the whole pool.
        labeled_idx: pool indices already labelled (at least one).
        labels: their observed (possibly noisy) labels, same length.
        budget: examples to label in this batch.
        annotate: ``pool indices -> class labels``; called once per interval-search round (the
            ``n_annotators`` labels of a round are one batch).
        n_annotators: ``B1``, parallel annotators.
        min_budget_per_class: the largest per-class interval-search budget.
        rng: a ``numpy.random.Generator`` or a seed.

    Returns:
        ``(query, seen)``: the pool indices chosen (at most ``budget``, in order) and the labels
        already obtained for the interval search's picks ``{index: label}``; the second phase's
        picks still need annotating.
    """
    p = _check_probs(probs)
    n, C = p.shape
    labeled_idx = np.asarray(labeled_idx, dtype=np.int64).ravel()
    labels = np.asarray(labels).ravel()
    if labeled_idx.size == 0:
        raise ValueError("labeled_idx must hold at least one labelled example")
    if labels.shape != labeled_idx.shape:
        raise ValueError(f"labels must match labeled_idx in length, got {labels.shape} and {labeled_idx.shape}")
    if labeled_idx.min() < 0 or labeled_idx.max() >= n or np.unique(labeled_idx).size != labeled_idx.size:
        raise ValueError("labeled_idx must be distinct pool indices in [0, n)")
    if not np.all((labels >= 0) & (labels < C)):
        raise ValueError(f"labels must be class indices in [0, {C})")
    if not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be an integer >= 0, got {budget!r}")
    if not isinstance(min_budget_per_class, (int, np.integer)) or min_budget_per_class < 1:
        raise ValueError(f"min_budget_per_class must be a positive integer, got {min_budget_per_class!r}")
    if not isinstance(n_annotators, (int, np.integer)) or n_annotators < 1:
        raise ValueError(f"n_annotators must be a positive integer, got {n_annotators!r}")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    observed = np.full(n, -1, dtype=np.int64)  # -1: no label seen
    observed[labeled_idx] = labels
    taken = np.zeros(n, dtype=bool)  # labelled or queried in this batch
    taken[labeled_idx] = True
    margins = margin_scores(p)
    # exact ties in the margins (a head that has seen one class) in a random order, not by pool index
    # (assumed; a trained network's margins do not tie): by index every class's line would start at one
    # end of the pool
    tie = rng.permutation(n)
    orders = [tie[np.argsort(-margins[tie, k], kind="stable")] for k in range(C)]
    freq = np.bincount(labels.astype(np.int64), minlength=C)
    rank = np.argsort(-freq, kind="stable")  # most frequent first

    if budget // C // 2 < min_budget_per_class:
        eff_classes, B2 = C, budget // C // 2
    else:
        eff_classes, B2 = budget // (2 * min_budget_per_class), min_budget_per_class
    query: list[int] = []
    seen: dict[int, int] = {}

    def weights(order: np.ndarray, k: int) -> np.ndarray:
        obs = observed[order]
        return np.where(obs < 0, 0, np.where(obs == k, 1, -1)).astype(np.int64)

    for k in rank[C - eff_classes:]:
        order = orders[k]
        w = weights(order, int(k))
        I, J = initial_interval(w)
        B2 = min(B2, int(np.count_nonzero(~taken)))
        lab_sorted = taken[order]

        def ask(positions, order=order, k=int(k)):
            idx = order[positions]
            got = np.asarray(annotate(idx)).astype(np.int64)
            observed[idx] = got
            for i, y in zip(idx, got):
                seen[int(i)] = int(y)
            return np.where(got == k, 1, -1)

        picked, _ = interval_search(w, lab_sorted, I, J, n_annotators=int(n_annotators), budget=B2,
                                 annotate=ask, rng=rng)
        taken[order[picked]] = True
        query.extend(int(i) for i in order[picked])

    remaining = int(budget) - len(query)
    for i, k in enumerate(rng.permutation(C)):
        order = orders[k]
        share = remaining * (i + 1) // C - remaining * i // C
        lab_sorted = taken[order]
        picked = query_around_threshold(lab_sorted, best_threshold(weights(order, int(k))), share)
        taken[order[picked]] = True
        query.extend(int(j) for j in order[picked])
    return np.asarray(query, dtype=np.int64), seen
