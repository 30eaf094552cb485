"""Set functions for partition-constrained subset selection, evaluated on batches of sets.

A set ``S`` of a ground set ``{0, ..., n-1}`` is a 0/1 mask of length ``n``; every objective here
maps a batch of masks ``(b, n)`` to ``(b,)`` values, is monotone, and is normalised so that
``f(empty set) = 0``. These are the objective families of the Multinoulli-SCG paper's experiments
(Zhang et al., ICML 2025): coverage maximisation, Bayesian A-optimal design and video
summarisation. Assumed: the exact instances of the paper are not known to us, so each family is
its textbook form on generated data:

- ``WeightedCoverage``: ``f(S) = sum_u w_u [u covered by some i in S]`` (monotone submodular).
- ``BayesianAOptimal``: ``f(S) = tr(Lambda^-1) - tr((Lambda + sigma^-2 X_S^T X_S)^-1)`` with
  ``Lambda = prior_precision I`` (monotone, gamma-weakly submodular).
- ``LogDetSummary``: the DPP log-determinant ``f(S) = log det(I + L_S)`` of a frame-similarity
  kernel ``L`` (monotone submodular), used for video summarisation; frames are generated as a
  feature random walk with scene cuts and partitioned into consecutive time segments.

Examples:
    >>> import numpy as np
    >>> from rayml.optim.subset_objectives import WeightedCoverage
    >>> f = WeightedCoverage(np.array([[1, 1, 0], [0, 1, 1]], bool), np.array([1.0, 2.0, 3.0]))
    >>> f(np.array([[1, 0], [1, 1], [0, 0]])).tolist()
    [3.0, 6.0, 0.0]
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "WeightedCoverage",
    "BayesianAOptimal",
    "LogDetSummary",
    "as_masks",
    "coverage_instance",
    "a_optimal_instance",
    "video_summary_instance",
    "greedy_trap_instance",
    "every_order_trap_instance",
    "make_instance",
    "OBJECTIVES",
]

OBJECTIVES = ("coverage", "a-optimal", "video")


def as_masks(masks, n: int) -> np.ndarray:
    """``masks`` as a boolean ``(b, n)`` array (one set per row; a single mask becomes one row)."""
    m = np.asarray(masks)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[1] != n:
        raise ValueError(f"masks must have shape (b, {n}), got {np.shape(masks)}")
    return m > 0.5


class WeightedCoverage:
    """``f(S) = sum_u w_u * [some i in S covers u]``; ``cover`` is ``(n, U)`` boolean, ``w >= 0``."""

    def __init__(self, cover: np.ndarray, weights: np.ndarray):
        self.cover = np.asarray(cover, dtype=bool)
        self.weights = np.asarray(weights, dtype=float)
        if self.cover.ndim != 2 or self.weights.shape != (self.cover.shape[1],):
            raise ValueError("cover must be (n, U) and weights (U,)")
        if np.any(self.weights < 0):
            raise ValueError("weights must be >= 0 (coverage is monotone only then)")
        self.n = self.cover.shape[0]

    def __call__(self, masks) -> np.ndarray:
        m = as_masks(masks, self.n).astype(np.float64)
        return ((m @ self.cover) > 0) @ self.weights


class BayesianAOptimal:
    """Bayesian A-optimality: the reduction of the posterior covariance's trace by the rows ``X_S``.

    ``f(S) = tr(Lambda^-1) - tr((Lambda + sigma^-2 sum_{i in S} x_i x_i^T)^-1)``,
    ``Lambda = prior_precision * I``.
    """

    def __init__(self, X: np.ndarray, noise_sigma: float = 1.0, prior_precision: float = 1.0):
        self.X = np.asarray(X, dtype=float)
        if self.X.ndim != 2:
            raise ValueError("X must be a 2-d array (n, d)")
        if noise_sigma <= 0 or prior_precision <= 0:
            raise ValueError("noise_sigma and prior_precision must be > 0")
        self.noise_sigma, self.prior_precision = float(noise_sigma), float(prior_precision)
        self.n, self.d = self.X.shape

    def __call__(self, masks) -> np.ndarray:
        m = as_masks(masks, self.n).astype(np.float64)
        outer = np.einsum("bi,id,ie->bde", m, self.X, self.X) / self.noise_sigma**2
        post = outer + self.prior_precision * np.eye(self.d)
        return self.d / self.prior_precision - np.trace(np.linalg.inv(post), axis1=1, axis2=2)


class LogDetSummary:
    """``f(S) = log det(I + L_S)`` for a PSD kernel ``L`` (``= log det(I + D_S L D_S)``)."""

    def __init__(self, L: np.ndarray):
        self.L = np.asarray(L, dtype=float)
        if self.L.ndim != 2 or self.L.shape[0] != self.L.shape[1]:
            raise ValueError("L must be a square matrix")
        if not np.allclose(self.L, self.L.T) or np.linalg.eigvalsh(self.L)[0] < -1e-9:
            raise ValueError("L must be symmetric positive semidefinite")
        self.n = self.L.shape[0]

    def __call__(self, masks) -> np.ndarray:
        m = as_masks(masks, self.n).astype(np.float64)
        mats = m[:, :, None] * self.L[None] * m[:, None, :] + np.eye(self.n)[None]
        return np.linalg.slogdet(mats)[1]


def _segments(n: int, parts: int) -> np.ndarray:
    """Labels of ``n`` items cut into ``parts`` consecutive, near-equal segments."""
    return np.repeat(np.arange(parts), np.diff(np.linspace(0, n, parts + 1).round().astype(int)))


def coverage_instance(n: int, parts: int, rng: np.random.Generator, universe: int | None = None):
    """A random weighted coverage instance: each item covers about 15% of the universe."""
    universe = universe or 3 * n
    cover = rng.random((n, universe)) < 0.15
    weights = rng.uniform(0.5, 1.5, universe)
    return WeightedCoverage(cover, weights), _segments(n, parts)


def a_optimal_instance(n: int, parts: int, rng: np.random.Generator, dim: int = 6):
    """Random Gaussian design rows with varying norms; parts are groups of candidate experiments."""
    X = rng.standard_normal((n, dim)) * rng.uniform(0.3, 1.5, (n, 1))
    return BayesianAOptimal(X, noise_sigma=1.0, prior_precision=1.0), _segments(n, parts)


def video_summary_instance(n: int, parts: int, rng: np.random.Generator, dim: int = 8):
    """Generated frame features (a random walk with scene cuts) and an RBF frame-similarity kernel.

    Frames ``0..n-1`` are partitioned into ``parts`` consecutive time segments.
    """
    feats = np.empty((n, dim))
    centre = rng.standard_normal(dim)
    for i in range(n):
        if rng.random() < 0.2:  # scene cut
            centre = rng.standard_normal(dim) * 1.5
        centre = centre + 0.15 * rng.standard_normal(dim)
        feats[i] = centre + 0.1 * rng.standard_normal(dim)
    sq = np.sum((feats[:, None, :] - feats[None, :, :]) ** 2, axis=-1)
    L = np.exp(-sq / (2.0 * np.median(sq[sq > 0])))
    return LogDetSummary(L), _segments(n, parts)


def _shuffled_coverage(elems: list, weights: np.ndarray, rng: np.random.Generator):
    """``(WeightedCoverage, labels, opt_mask)`` from ``(part, covered items, planted)`` elements, rows shuffled."""
    order = rng.permutation(len(elems))
    cover = np.zeros((len(elems), len(weights)), dtype=bool)
    labels = np.empty(len(elems), dtype=int)
    opt = np.zeros(len(elems), dtype=bool)
    for row, e in enumerate(order):
        part, covered, planted = elems[e]
        labels[row], opt[row] = part, planted
        cover[row, covered] = True
    return WeightedCoverage(cover, weights), labels, opt


def greedy_trap_instance(n: int, parts: int, budget: int, rng: np.random.Generator, bonus: float = 0.1):
    """A weighted coverage instance on which partition greedy reaches about half of OPT.

    Parts come in pairs ``(2p, 2p+1)``; per pair and slot ``j < budget``: an *honest* element of
    part ``2p`` covers a private item (weight ``U(0.9, 1)``), a *victim* element of part ``2p+1``
    covers an item of weight 1, and a *bait* element of part ``2p`` covers the victim's item plus a
    bonus item of weight ``bonus``. Greedy takes every bait first (``1 + bonus`` beats every other
    gain), which leaves the victims worthless: ``(1 + bonus) / (w_honest + 1)``, about 0.56 of OPT.
    The other elements (fillers) each cover a private item of weight ``U(0, 0.01)``, so the planted
    *honest + victims* is the optimum (a slot of part ``2p`` given to a bait or a filler loses an
    honest item of weight >= 0.9 for at most ``bonus``; a victim slot given to a filler loses 1 for
    at most 0.01) and is the only near-optimal basis: a random search has to find it element by
    element. Element indices are shuffled.

    Returns:
        ``(WeightedCoverage, labels, opt_mask)``.
    """
    if parts < 2 or parts % 2:
        raise ValueError(f"parts must be an even number >= 2, got {parts}")
    pairs = parts // 2
    if n < pairs * (3 * budget + 1) + 1:
        raise ValueError(f"n = {n} is too small for {parts} parts with budget {budget}: need n >= "
                         f"{pairs * (3 * budget + 1) + 1}")
    planted_items = pairs * budget * 3  # honest, victim, bonus items per (pair, slot)
    items = planted_items + n - 3 * pairs * budget  # and one private item per filler
    weights = np.empty(items)
    elems: list[tuple[int, list[int], bool]] = []  # (part, covered items, planted)

    def item(p, j, kind):
        return (p * budget + j) * 3 + kind

    for p in range(pairs):
        for j in range(budget):
            weights[item(p, j, 0)] = rng.uniform(0.9, 1.0)
            weights[item(p, j, 1)] = 1.0
            weights[item(p, j, 2)] = bonus
            elems.append((2 * p, [item(p, j, 0)], True))
            elems.append((2 * p, [item(p, j, 1), item(p, j, 2)], False))
            elems.append((2 * p + 1, [item(p, j, 1)], True))
    for e in range(n - len(elems)):
        part = int(rng.integers(parts)) if e >= parts else e
        weights[planted_items + e] = rng.uniform(0.0, 0.01)
        elems.append((part, [planted_items + e], False))
    return _shuffled_coverage(elems, weights, rng)


def every_order_trap_instance(n: int, parts: int, budget: int, rng: np.random.Generator, bonus: float = 0.01):
    """A weighted coverage instance on which greedy reaches ``1 - (1 - 1/k)^k`` of OPT in every part order.

    Each part is its own copy of the classic tight instance of greedy under a cardinality constraint
    (Nemhauser, Wolsey & Fisher 1978), ``k = budget``, on items no other part touches, so the order
    in which the parts are filled cannot matter. Part ``p`` (scale ``s_p ~ U(0.5, 1.5)``) has ``k``
    *column* elements and ``k`` *row* elements over a ``k x k`` grid: cell ``(i, j)`` weighs
    ``s_p (1/k) (1 - 1/k)^i`` and is covered by row ``i`` and column ``j``; column ``j`` also covers a
    private tail item of weight ``s_p (1 - 1/k)^k`` (a column is worth ``s_p``), row ``i`` a private
    bonus item of weight ``s_p * bonus * (1 - 1/k)^i``. After rows ``0 .. i-1`` every column has
    ``s_p (1 - 1/k)^i`` left, exactly row ``i``'s grid weight, so its bonus makes greedy take the rows
    in turn: ``s_p (k (1 - (1 - 1/k)^k) + bonus terms)`` against the columns' ``s_p k``. The other
    elements (fillers) each cover a private item of weight ``s_p U(0, 0.01)``. The planted columns are
    the optimum: a basis that gives a column's slot to a row or a filler loses that column's tail
    (``>= s_p / 4`` for ``k >= 2``) for at most ``s_p max(bonus, 0.01)``. Element indices are shuffled.

    Returns:
        ``(WeightedCoverage, labels, opt_mask)``.
    """
    k = int(budget)
    if parts < 1 or k < 2:
        raise ValueError(f"need parts >= 1 and budget >= 2, got parts={parts}, budget={budget}")
    if not 0 < bonus < 0.2:
        raise ValueError(f"bonus must be in (0, 0.2), got {bonus}")
    if n < 2 * k * parts:
        raise ValueError(f"n = {n} is too small for {parts} parts with budget {budget}: need n >= {2 * k * parts}")
    per_part = k * k + 2 * k  # grid cells, column tails, row bonuses
    fillers = n - 2 * k * parts
    weights = np.empty(parts * per_part + fillers)
    elems: list[tuple[int, list[int], bool]] = []  # (part, covered items, planted)
    decay = (1.0 - 1.0 / k) ** np.arange(k + 1)
    scale = rng.uniform(0.5, 1.5, parts)
    for p in range(parts):
        base = p * per_part
        for i in range(k):
            weights[base + i * k: base + (i + 1) * k] = scale[p] * decay[i] / k
            weights[base + k * k + i] = scale[p] * decay[k]
            weights[base + k * k + k + i] = scale[p] * bonus * decay[i]
        for i in range(k):
            elems.append((p, [base + i * k + j for j in range(k)] + [base + k * k + k + i], False))  # row i
        for j in range(k):
            elems.append((p, [base + i * k + j for i in range(k)] + [base + k * k + j], True))  # column j
    filler_parts = rng.integers(parts, size=fillers)
    for e in range(fillers):
        weights[parts * per_part + e] = scale[filler_parts[e]] * rng.uniform(0.0, 0.01)
        elems.append((int(filler_parts[e]), [parts * per_part + e], False))
    return _shuffled_coverage(elems, weights, rng)


def make_instance(kind: str, n: int, parts: int, seed: int, budget: int = 2):
    """``(objective, labels)`` for objective family ``kind`` (one of ``OBJECTIVES``); ``budget`` is
    used by ``greedy-trap`` only."""
    rng = np.random.default_rng(seed)
    if kind == "greedy-trap":
        return greedy_trap_instance(n, parts, budget, rng)[:2]
    if kind == "coverage":
        return coverage_instance(n, parts, rng)
    if kind == "a-optimal":
        return a_optimal_instance(n, parts, rng)
    if kind == "video":
        return video_summary_instance(n, parts, rng)
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {kind!r}")
