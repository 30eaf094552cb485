"""GM Matching: robust k-subset selection by herding towards the geometric median.

Anish Acharya, Sujay Sanghavi, Alexandros G. Dimakis, Inderjit S. Dhillon, "Geometric Median
(GM) Matching for Robust k-Subset Selection from Noisy Data", ICML 2025.

1. The geometric median ``mu_GM = argmin_z sum_i ||x_i - z||`` (the paper's robust target,
   breakdown point 1/2), computed by Weiszfeld's iteration
   ``z <- sum_i (x_i / d_i) / sum_i (1 / d_i)``, ``d_i = ||x_i - z||`` (``weiszfeld``).
2. GM Matching (the paper's Algorithm 1): herding towards ``mu_GM``. With a direction
   ``theta_0``, for ``t = 1..k`` pick the unselected point ``x_t = argmax <theta_{t-1}, x>`` and set
   ``theta_t = theta_{t-1} + mu_GM - x_t`` (``gm_matching``). When ``mu_GM`` lies in the interior
   of the convex hull of the points, ``||mean(S_k) - mu_GM|| = O(1/k)``, against ``O(1/sqrt k)`` for
   a random subset.
3. Selection is done per class with the budget split evenly between classes (the authors' code),
   ``GMMatching.fit(X, y)`` returns the selected ``indices_``.

Two variants for data too large for one pass (issue 37 names them as the authors'; session 7):
``gm-matching-subsampled`` computes the geometric median on a uniform random share ``gamma`` of the
points (``geometric_median_subsampled``; still robust, since a random share keeps the corrupted
fraction in expectation) and herds over all points; ``gm-matching-batched`` herds towards the
geometric median of all points within each of ``n_batches`` random batches of the points, with the
budget split over batches in proportion to their sizes (``batched_herding``; the authors' code
carries a commented-out version that herds consecutive batches with ``ceil`` budgets). Assumed
(not read in the paper): ``gamma = 0.5`` and ``n_batches = 4``, random rather than consecutive
batches, and budgets that sum exactly to ``k`` (largest remainders).

Baselines (``select`` with ``method=``): ``random``; ``easy`` (closest to the class centre);
``hard`` (farthest); ``moderate`` (the band around the median distance, Xia et al., ICLR 2023);
``herding`` (the same herding towards the class mean); ``k-center`` (greedy farthest-first
traversal, the k-center coreset of Sener & Savarese, ICLR 2018, started at the point nearest the
class mean).

Details taken from the authors' code (anishacharya/GM-Matching): Weiszfeld starts at the mean,
zero distances are replaced by ``1e-8``, it stops when the step is at most ``1e-5`` or after
5000 iterations; herding starts from a random data point; the centre of easy / hard / moderate is
the class mean. The authors herd on the unit sphere (points and target L2-normalised, "cosine"),
which suits embeddings away from the origin but is undefined for centred data (a geometric median
near 0 has no direction); so ``normalize`` defaults to False here (Euclidean herding, where the
O(1/k) guarantee is stated) and ``normalize=True`` raises a ``ValueError`` when the target's norm
is below 1e-3 of the points' median norm.
Assumed: when ``k`` is not a multiple of the number of classes the remainder goes to the largest
classes (the authors' code drops it); a class smaller than its share gives all its points and
the rest is spread over the other classes.

Examples:
    >>> import numpy as np
    >>> from rayml.data.gm_matching import GMMatching
    >>> X = np.random.default_rng(0).standard_normal((200, 5))
    >>> sel = GMMatching(k=20, normalize=False, random_state=0).fit(X)
    >>> sel.indices_.shape
    (20,)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "METHODS",
    "WeiszfeldResult",
    "weiszfeld",
    "geometric_median",
    "herding",
    "gm_matching",
    "select",
    "select_per_class",
    "k_center",
    "gm_filter_random",
    "geometric_median_subsampled",
    "batched_herding",
    "VARIANTS",
    "GMMatching",
]

METHODS = ("gm-matching", "herding", "random", "easy", "hard", "moderate", "k-center", "gm-filter-random")
KEEP = 0.5   # gm-filter-random's default keep share: the geometric median's breakdown point
VARIANTS = ("gm-matching-subsampled", "gm-matching-batched")   # the authors' scalable variants (not baselines)
GAMMA = 0.5      # assumed: the share of points the subsampled geometric median is computed on
N_BATCHES = 4    # assumed: the number of random batches of batched herding


def _check_points(X, name: str = "X") -> np.ndarray:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty 2-D array (n_samples, n_features), got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return X


def _check_k(k, n: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    if not 1 <= int(k) <= n:
        raise ValueError(f"k must be in [1, n_samples={n}], got {k}")
    return int(k)


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


@dataclass(frozen=True)
class WeiszfeldResult:
    """The geometric median, the iterations used and whether the step tolerance was met."""

    median: np.ndarray
    iterations: int
    converged: bool


def weiszfeld(X, *, tol: float = 1e-5, max_iter: int = 5000, eps: float = 1e-8) -> WeiszfeldResult:
    """Weiszfeld's iteration for the geometric median of the rows of ``X``.

    Starts at the mean; ``z <- sum_i w_i x_i / sum_i w_i`` with ``w_i = 1 / max(||x_i - z||, eps)``;
    stops when ``||z_new - z|| <= tol`` or after ``max_iter`` iterations.
    """
    X = _check_points(X)
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    z = X.mean(axis=0)
    for it in range(1, int(max_iter) + 1):
        d = np.linalg.norm(X - z, axis=1)
        w = 1.0 / np.maximum(d, eps)
        z_new = (w @ X) / w.sum()
        step = float(np.linalg.norm(z_new - z))
        z = z_new
        if step <= tol:
            return WeiszfeldResult(z, it, True)
    return WeiszfeldResult(z, int(max_iter), False)


def geometric_median(X, **kwargs) -> np.ndarray:
    """The geometric median of the rows of ``X`` (``weiszfeld(X, **kwargs).median``)."""
    return weiszfeld(X, **kwargs).median


def _unit(X: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(X, axis=-1, keepdims=True)
    return X / np.maximum(norms, 1e-12)


def herding(X, k: int, target, *, normalize: bool = False, init: str = "random", seed=None) -> np.ndarray:
    """Herding towards ``target`` (the moment-matching greedy of GM Matching's Algorithm 1).

    ``theta <- theta + target - x_t`` after picking ``x_t = argmax_{x unselected} <theta, x>``.

    Args:
        X: points ``(n, d)``.
        k: how many to pick, ``1 <= k <= n``.
        target: the moment to match, ``(d,)``.
        normalize: herd on the unit sphere (points and target L2-normalised; the authors' choice for
            embeddings). Default False: Euclidean herding (see the module docstring).
        init: ``"random"`` (a random data point, the authors' default), ``"target"`` or ``"mean"``.
        seed: seed or Generator for ``init="random"``.

    Returns:
        The ``k`` selected row indices, in the order they were picked.
    """
    X = _check_points(X)
    n, d = X.shape
    k = _check_k(k, n)
    target = np.asarray(target, dtype=float)
    if target.shape != (d,) or not np.all(np.isfinite(target)):
        raise ValueError(f"target must be a finite vector of shape ({d},), got shape {target.shape}")
    if init not in ("random", "target", "mean"):
        raise ValueError(f"init must be 'random', 'target' or 'mean', got {init!r}")
    if normalize:
        scale = float(np.median(np.linalg.norm(X, axis=1)))
        if np.linalg.norm(target) < 1e-3 * max(scale, 1e-300):
            raise ValueError("normalize=True: the target is at the origin (centred data), so it has no direction "
                             "on the unit sphere; use normalize=False or uncentred embeddings")
        X, target = _unit(X), _unit(target)
    if init == "random":
        theta = X[_rng(seed).integers(n)].copy()
    elif init == "target":
        theta = target.copy()
    else:
        theta = X.mean(axis=0)
    available = np.ones(n, dtype=bool)
    chosen = np.empty(k, dtype=np.int64)
    for t in range(k):
        scores = np.where(available, X @ theta, -np.inf)
        j = int(np.argmax(scores))
        chosen[t] = j
        available[j] = False
        theta += target - X[j]
    return chosen


def gm_matching(X, k: int, *, normalize: bool = False, init: str = "random", seed=None,
                tol: float = 1e-5, max_iter: int = 5000) -> np.ndarray:
    """GM Matching (Algorithm 1): herding towards the geometric median of ``X``; ``k`` indices."""
    X = _check_points(X)
    _check_k(k, X.shape[0])
    return herding(X, k, geometric_median(X, tol=tol, max_iter=max_iter), normalize=normalize, init=init, seed=seed)


def geometric_median_subsampled(X, gamma: float = GAMMA, *, seed=None, **kwargs) -> np.ndarray:
    """The geometric median (``weiszfeld``) of ``max(1, ceil(gamma n))`` rows of ``X`` drawn uniformly
    without replacement: the subsampled target of ``gm-matching-subsampled``."""
    X = _check_points(X)
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 < gamma <= 1:
        raise ValueError(f"gamma must be a share in (0, 1], got {gamma!r}")
    m = max(1, int(np.ceil(gamma * X.shape[0] - 1e-9)))
    return geometric_median(X[_rng(seed).permutation(X.shape[0])[:m]], **kwargs)


def _proportional_budgets(sizes: np.ndarray, k: int) -> np.ndarray:
    """``k`` split over parts in proportion to ``sizes`` (floors, then the largest remainders; sums to ``k``)."""
    exact = k * sizes / sizes.sum()
    budget = np.floor(exact).astype(int)
    budget[np.argsort(-(exact - budget), kind="stable")[: k - budget.sum()]] += 1
    return budget


def batched_herding(X, k: int, target, *, n_batches: int = N_BATCHES, normalize: bool = False,
                    seed=None) -> np.ndarray:
    """Herding towards ``target`` within each of ``n_batches`` random batches of the rows of ``X``, the
    budget ``k`` split over batches in proportion to their sizes (``gm-matching-batched`` when ``target``
    is the geometric median of all of ``X``); ``k`` indices, batch by batch."""
    X = _check_points(X)
    n = X.shape[0]
    k = _check_k(k, n)
    if isinstance(n_batches, bool) or not isinstance(n_batches, (int, np.integer)) or n_batches < 1:
        raise ValueError(f"n_batches must be an integer >= 1, got {n_batches!r}")
    rng = _rng(seed)
    batches = np.array_split(rng.permutation(n), min(int(n_batches), n))
    budgets = _proportional_budgets(np.array([b.size for b in batches], dtype=float), k)
    out = [b[herding(X[b], int(kb), target, normalize=normalize, seed=rng)] for b, kb in zip(batches, budgets) if kb]
    return np.concatenate(out)


def _check_keep(keep) -> float:
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0 < keep <= 1:
        raise ValueError(f"keep must be a share in (0, 1], got {keep!r}")
    return float(keep)


def gm_filter_random(X, k: int, *, keep: float = KEEP, seed=None) -> np.ndarray:
    """``k`` rows drawn uniformly at random among the ``ceil(keep n)`` rows nearest the geometric
    median of ``X`` (at least ``k`` of them): a robust filter without the matching (an outside
    review's baseline, not from the paper). ``keep = 0.5`` (the median's breakdown point) needs no
    knowledge of the corrupted share; ``keep = 1 - level`` is told it."""
    X = _check_points(X)
    n = X.shape[0]
    k = _check_k(k, n)
    keep = _check_keep(keep)
    order = np.argsort(np.linalg.norm(X - geometric_median(X), axis=1), kind="stable")
    pool = order[:max(k, int(np.ceil(keep * n - 1e-9)))]
    return _rng(seed).permutation(pool)[:k]


def select(X, k: int, method: str = "gm-matching", *, normalize: bool = False, seed=None,
           keep: float = KEEP) -> np.ndarray:
    """``k`` row indices of ``X`` chosen by ``method`` (one of ``METHODS`` or ``VARIANTS``), without class labels;
    ``keep`` is ``gm-filter-random``'s share of rows nearest the geometric median."""
    X = _check_points(X)
    n = X.shape[0]
    k = _check_k(k, n)
    if method not in METHODS + VARIANTS:
        raise ValueError(f"method must be one of {METHODS + VARIANTS}, got {method!r}")
    rng = _rng(seed)
    if method == "gm-matching-subsampled":
        return herding(X, k, geometric_median_subsampled(X, seed=rng), normalize=normalize, seed=rng)
    if method == "gm-matching-batched":
        return batched_herding(X, k, geometric_median(X), normalize=normalize, seed=rng)
    if method == "gm-filter-random":
        return gm_filter_random(X, k, keep=keep, seed=rng)
    if method == "gm-matching":
        return gm_matching(X, k, normalize=normalize, seed=rng)
    if method == "herding":
        return herding(X, k, X.mean(axis=0), normalize=normalize, seed=rng)
    if method == "random":
        return rng.permutation(n)[:k]
    if method == "k-center":
        return k_center(X, k)
    order = np.argsort(np.linalg.norm(X - X.mean(axis=0), axis=1), kind="stable")
    if method == "easy":
        return order[:k]
    if method == "hard":
        return order[::-1][:k]
    low = min(max(int(round(0.5 * n - k / 2)), 0), n - k)  # moderate: the band around the median
    return order[low : low + k]


def k_center(X, k: int) -> np.ndarray:
    """Greedy k-center (farthest-first traversal): start at the point nearest the mean, then add the
    point farthest from the chosen set; ``k`` indices in the order picked."""
    X = _check_points(X)
    k = _check_k(k, X.shape[0])
    first = int(np.argmin(np.linalg.norm(X - X.mean(axis=0), axis=1)))
    chosen = [first]
    dist = np.linalg.norm(X - X[first], axis=1)
    for _ in range(k - 1):
        j = int(np.argmax(dist))
        chosen.append(j)
        dist = np.minimum(dist, np.linalg.norm(X - X[j], axis=1))
    return np.array(chosen, dtype=np.int64)


def _class_budgets(counts: np.ndarray, k: int) -> np.ndarray:
    """Split ``k`` evenly over classes; remainder to the largest classes; capped by class size."""
    c = len(counts)
    budget = np.full(c, k // c)
    by_size = np.argsort(-counts, kind="stable")
    budget[by_size[: k - budget.sum()]] += 1
    while np.any(budget > counts):
        excess = int(np.sum(np.maximum(budget - counts, 0)))
        budget = np.minimum(budget, counts)
        room = np.flatnonzero(budget < counts)
        room = room[np.argsort(-(counts[room] - budget[room]), kind="stable")]
        for j in range(excess):
            budget[room[j % len(room)]] += 1
    return budget


def select_per_class(X, y, k: int, method: str = "gm-matching", *, normalize: bool = False, seed=None,
                     keep: float = KEEP) -> np.ndarray:
    """``select`` within each class of ``y`` with ``k`` split evenly over classes; sorted indices."""
    X = _check_points(X)
    y = np.asarray(y)
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
    k = _check_k(k, X.shape[0])
    classes, inverse, counts = np.unique(y, return_inverse=True, return_counts=True)
    if k < len(classes):
        raise ValueError(f"k must be at least the number of classes ({len(classes)}), got {k}")
    rng = _rng(seed)
    budgets = _class_budgets(counts, k)
    out = []
    for c in range(len(classes)):
        rows = np.flatnonzero(inverse == c)
        out.append(rows[select(X[rows], int(budgets[c]), method, normalize=normalize, seed=rng, keep=keep)])
    return np.sort(np.concatenate(out))


class GMMatching:
    """Scikit-learn-style selector: ``GMMatching(k=...).fit(X, y).indices_``.

    Args:
        k: subset size (an integer), or ``None`` to use ``fraction``.
        fraction: subset size as a fraction of ``n_samples`` in ``(0, 1]`` (used when ``k`` is None).
        method: ``"gm-matching"``, one of the baselines in ``METHODS`` or of the ``VARIANTS``.
        normalize: herd on the unit sphere (the authors' choice for embeddings; default False).
        random_state: seed for the random start of herding / random selection.

    Attributes (after ``fit``):
        indices_: the selected row indices (sorted).
        centers_: ``{class: geometric median}`` (``{None: ...}`` without labels); gm-matching only.
        n_selected_: ``len(indices_)``.
    """

    def __init__(self, k: int | None = None, *, fraction: float | None = None, method: str = "gm-matching",
                 normalize: bool = False, random_state=None):
        self.k = k
        self.fraction = fraction
        self.method = method
        self.normalize = normalize
        self.random_state = random_state

    def get_params(self, deep: bool = True) -> dict:
        """The constructor's arguments (scikit-learn convention)."""
        return {"k": self.k, "fraction": self.fraction, "method": self.method,
                "normalize": self.normalize, "random_state": self.random_state}

    def set_params(self, **params) -> "GMMatching":
        """Set constructor arguments (scikit-learn convention)."""
        for key, value in params.items():
            if key not in self.get_params():
                raise ValueError(f"unknown parameter {key!r}")
            setattr(self, key, value)
        return self

    def _resolve_k(self, n: int) -> int:
        if self.k is not None:
            if self.fraction is not None:
                raise ValueError("give k or fraction, not both")
            return _check_k(self.k, n)
        if self.fraction is None:
            raise ValueError("one of k or fraction is required")
        if not isinstance(self.fraction, (int, float)) or not 0 < self.fraction <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction!r}")
        return max(1, int(round(self.fraction * n)))

    def fit(self, X, y=None) -> "GMMatching":
        """Select the subset of ``X`` (per class of ``y`` when given)."""
        X = _check_points(X)
        if self.method not in METHODS + VARIANTS:
            raise ValueError(f"method must be one of {METHODS + VARIANTS}, got {self.method!r}")
        k = self._resolve_k(X.shape[0])
        rng = np.random.default_rng(self.random_state)
        if y is None:
            self.indices_ = np.sort(select(X, k, self.method, normalize=self.normalize, seed=rng))
            groups = {None: X}
        else:
            self.indices_ = select_per_class(X, y, k, self.method, normalize=self.normalize, seed=rng)
            y = np.asarray(y)
            groups = {c: X[y == c] for c in np.unique(y)}
        self.centers_ = ({c: geometric_median(g) for c, g in groups.items()}
                         if self.method == "gm-matching" else {})
        self.n_selected_ = int(len(self.indices_))
        return self

    def transform(self, X) -> np.ndarray:
        """The selected rows of ``X`` (``X[indices_]``)."""
        if not hasattr(self, "indices_"):
            raise ValueError("call fit before transform")
        return np.asarray(X)[self.indices_]
