"""The pool-based active-learning loop DIRECT and its baselines run in, and its data.

- ``imbalanced_digits``: scikit-learn's ``load_digits`` (8x8 images), each training image also
  shifted by one pixel in the four directions (5x the pool, the "nudged digits" of scikit-learn's
  RBM example), made imbalanced (``n_majority`` majority classes keep every example, the other
  classes keep ``minority_fraction`` of theirs), with a fixed noisy label per pool example
  (``noise``: the label is replaced by a uniformly drawn *other* class). The test set is the
  held-out original images, balanced and clean.
- ``fit_head``: the model retrained every round, a multinomial logistic-regression head on the
  frozen features (class-balanced weights by default; ``class_weight=None`` is the unweighted
  loss of the authors' LabelBench probe configurations), returning probabilities over all classes.
- ``al_round``: one labelling round of one run: retrain, score (balanced accuracy on the test
  set, minority labels collected), choose the next batch with the run's strategy, annotate it.
- ``oracle_balanced``: a reference, not a method: it reads the pool's true labels and labels ``batch / C``
  unlabelled examples of each class per round (at random within the class; a class that runs out gives
  its share to the others, so the batch is spent), the class balance a minority-seeking strategy aims at.
- ``ActiveLearningClassifier``: the loop as a scikit-learn classifier; ``fit(X, y)`` treats
  ``y`` as the annotator (a label is read only when its example is queried).

Assumed: the 1-pixel nudging, the class-balanced logistic head and the uniform other-class flip
are this reproduction's choices (the paper uses image/text datasets with a fine-tuned or frozen
backbone); every strategy runs under the same head, budget and initial labelled set.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from rayml.data.active_baselines import BASELINES, select_baseline
from rayml.data.direct import B1_DEFAULT, MIN_BUDGET_PER_CLASS_DEFAULT, direct_select

__all__ = [
    "STRATEGIES",
    "ORACLE",
    "MAX_ITER",
    "oracle_balanced",
    "CLASS_WEIGHTS",
    "ActiveData",
    "RunState",
    "imbalanced_digits",
    "fit_head",
    "predict_proba",
    "al_round",
    "initial_state",
    "ActiveLearningClassifier",
]

ORACLE = "oracle-balanced"  # reads the pool's true labels: a gate of the setting, not a method
STRATEGIES = ("direct",) + BASELINES + (ORACLE,)
MAX_ITER = 300  # lbfgs iterations of the head; al_round records each fit's count (``head_iterations``)


@dataclass(frozen=True)
class ActiveData:
    """A pool (features, true and noisy labels) and a clean test set."""

    X_pool: np.ndarray
    y_true: np.ndarray
    y_noisy: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    minority: tuple[int, ...]


@dataclass(frozen=True)
class RunState:
    """One active-learning run between rounds (small: it travels between Ray tasks)."""

    strategy: str
    seed: int
    C: float
    labeled: tuple[int, ...]
    observed: tuple[int, ...]
    curve: tuple[dict, ...] = field(default_factory=tuple)


@functools.lru_cache(maxsize=1)
def _nudged_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images.astype(np.float64) / 16.0, d.target.astype(np.int64)


def _shift(images: np.ndarray, dy: int, dx: int) -> np.ndarray:
    out = np.zeros_like(images)
    h, w = images.shape[1:]
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        images[:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return out


def imbalanced_digits(seed: int, *, n_majority: int = 2, minority_fraction: float = 0.05, noise: float = 0.0,
                      test_fraction: float = 0.3, nudge: bool = True) -> ActiveData:
    """The imbalanced, noisy digits pool of this reproduction (see the module docstring)."""
    if not isinstance(n_majority, int) or not 1 <= n_majority <= 9:
        raise ValueError(f"n_majority must be an integer in [1, 9], got {n_majority!r}")
    if not 0 < minority_fraction <= 1:
        raise ValueError(f"minority_fraction must be in (0, 1], got {minority_fraction!r}")
    if not 0 <= noise < 0.9:
        raise ValueError(f"noise must be in [0, 0.9), got {noise!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    rng = np.random.default_rng(seed)
    images, y = _nudged_digits()
    C = 10
    perm = rng.permutation(y.size)
    n_test = int(round(test_fraction * y.size))
    test, train = perm[:n_test], perm[n_test:]
    majority = np.sort(rng.choice(C, size=n_majority, replace=False))
    keep = []
    for c in range(C):
        idx = train[y[train] == c]
        if c not in majority:
            idx = rng.choice(idx, size=max(1, int(round(minority_fraction * idx.size))), replace=False)
        keep.append(idx)
    keep = np.sort(np.concatenate(keep))
    shifts = [(0, 0)] + ([(1, 0), (-1, 0), (0, 1), (0, -1)] if nudge else [])
    X_pool = np.concatenate([_shift(images[keep], dy, dx) for dy, dx in shifts]).reshape(-1, 64)
    y_pool = np.tile(y[keep], len(shifts))
    flip = rng.random(y_pool.size) < noise
    other = (y_pool + rng.integers(1, C, size=y_pool.size)) % C
    y_noisy = np.where(flip, other, y_pool)
    return ActiveData(X_pool=X_pool, y_true=y_pool, y_noisy=y_noisy, X_test=images[test].reshape(-1, 64),
                      y_test=y[test], n_classes=C, minority=tuple(int(c) for c in range(C) if c not in majority))


CLASS_WEIGHTS = ("balanced", None)


def fit_head(X: np.ndarray, y: np.ndarray, C: float, n_classes: int, class_weight: str | None = "balanced"):
    """A multinomial logistic head (``class_weight``: ``"balanced"``, scikit-learn's inverse class
    frequencies, or ``None``, unweighted); ``("constant", label)`` when ``y`` has a single class."""
    from sklearn.linear_model import LogisticRegression

    if class_weight not in CLASS_WEIGHTS:
        raise ValueError(f"class_weight must be one of {CLASS_WEIGHTS}, got {class_weight!r}")
    if np.unique(y).size < 2:
        return ("constant", int(y[0]))
    model = LogisticRegression(C=C, max_iter=MAX_ITER, class_weight=class_weight)
    model.fit(X, y)
    return model


def oracle_balanced(y_pool: np.ndarray, labeled: np.ndarray, budget: int, n_classes: int,
                    rng: np.random.Generator) -> np.ndarray:
    """``budget`` unlabelled pool indices, as evenly over the true classes ``y_pool`` as the pool allows.

    Each class gets ``budget // n_classes`` (the remainder to classes drawn at random); a class with
    fewer unlabelled examples gives all it has and its shortfall is shared among the others the same
    way, until the budget is spent or the pool is empty. Within a class the examples are drawn at
    random. An oracle: it reads labels a strategy could not see before querying them.
    """
    y_pool = np.asarray(y_pool)
    taken = np.zeros(y_pool.size, dtype=bool)
    taken[np.asarray(labeled, dtype=np.int64)] = True
    free = [np.flatnonzero(~taken & (y_pool == k)) for k in range(n_classes)]
    avail = np.array([f.size for f in free])
    counts = np.zeros(n_classes, dtype=np.int64)
    left = min(int(budget), int(avail.sum()))
    while left > 0:
        active = np.flatnonzero(counts < avail)
        share = left // active.size
        if share == 0:  # fewer labels left than classes with room: one each to classes drawn at random
            counts[rng.choice(active, size=left, replace=False)] += 1
            break
        give = np.minimum(share, avail[active] - counts[active])
        counts[active] += give
        left -= int(give.sum())
    return np.concatenate([rng.choice(f, size=int(n), replace=False) for f, n in zip(free, counts)]).astype(np.int64)


def predict_proba(model, X: np.ndarray, n_classes: int) -> np.ndarray:
    """Probabilities over all ``n_classes`` (zero for classes the head never saw)."""
    out = np.zeros((X.shape[0], n_classes))
    if isinstance(model, tuple):
        out[:, model[1]] = 1.0
        return out
    out[:, model.classes_] = model.predict_proba(X)
    return out


def _balanced_accuracy(y: np.ndarray, pred: np.ndarray, n_classes: int) -> float:
    recalls = [np.mean(pred[y == c] == c) for c in range(n_classes) if np.any(y == c)]
    return float(np.mean(recalls))


def _mean_recall(y: np.ndarray, pred: np.ndarray, classes) -> float | None:
    """The mean recall over those of ``classes`` present in ``y`` (``None`` if none is)."""
    recalls = [np.mean(pred[y == c] == c) for c in classes if np.any(y == c)]
    return float(np.mean(recalls)) if recalls else None


def al_round(state: RunState, data: ActiveData, *, round_index: int, batch: int, select: bool,
             n_annotators: int = B1_DEFAULT, min_budget_per_class: int = MIN_BUDGET_PER_CLASS_DEFAULT,
             class_weight: str | None = "balanced") -> RunState:
    """Retrain on the labelled set, score, and (if ``select``) label the next batch.

    Each round's curve point holds the labels used, the balanced accuracy on the test set, the
    minority labels collected, the head's lbfgs iterations (``head_iterations``; 0 for a
    single-class head, ``MAX_ITER`` when the solver stopped unconverged), and the head's mean recall over the minority classes and over the
    other classes (``minority_recall`` / ``majority_recall``, where the test set has them).

    Randomness comes from ``SeedSequence([state.seed, round_index])`` only, so a run gives the same
    result wherever and in whatever order its rounds run.
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # multi-threaded BLAS is 10x slower on these small fits
        return _al_round(state, data, round_index=round_index, batch=batch, select=select,
                         n_annotators=n_annotators, min_budget_per_class=min_budget_per_class,
                         class_weight=class_weight)


def _al_round(state, data, *, round_index, batch, select, n_annotators, min_budget_per_class, class_weight):
    labeled = np.asarray(state.labeled, dtype=np.int64)
    observed = np.asarray(state.observed, dtype=np.int64)
    model = fit_head(data.X_pool[labeled], observed, state.C, data.n_classes, class_weight=class_weight)
    pred = predict_proba(model, data.X_test, data.n_classes).argmax(1)
    minority = int(np.isin(data.y_true[labeled], data.minority).sum())
    point = {"labels": int(labeled.size), "balanced_accuracy": _balanced_accuracy(data.y_test, pred, data.n_classes),
             "minority_labels": minority,
             "head_iterations": 0 if isinstance(model, tuple) else int(np.max(model.n_iter_))}
    if data.minority:
        point["minority_recall"] = _mean_recall(data.y_test, pred, data.minority)
        point["majority_recall"] = _mean_recall(data.y_test, pred, [c for c in range(data.n_classes)
                                                                   if c not in data.minority])
    curve = state.curve + (point,)
    if not select:
        return replace(state, curve=curve)
    rng = np.random.default_rng(np.random.SeedSequence([int(state.seed), int(round_index)]))
    probs = predict_proba(model, data.X_pool, data.n_classes)

    def annotate(idx):
        return data.y_noisy[np.asarray(idx, dtype=np.int64)]

    if state.strategy == ORACLE:
        query = oracle_balanced(data.y_true, labeled, batch, data.n_classes, rng)
    elif state.strategy == "direct":
        query, _ = direct_select(probs, labeled, observed, batch, annotate, n_annotators=n_annotators,
                                 min_budget_per_class=min_budget_per_class, rng=rng)
    else:
        query = select_baseline(state.strategy, probs, data.X_pool, labeled, observed, batch, annotate, rng)
    query = np.asarray(query, dtype=np.int64)
    if np.intersect1d(query, labeled).size or np.unique(query).size != query.size:
        raise RuntimeError(f"strategy {state.strategy!r} queried an example twice")
    return replace(state, labeled=state.labeled + tuple(int(i) for i in query),
                   observed=state.observed + tuple(int(v) for v in annotate(query)), curve=curve)


def initial_state(strategy: str, data: ActiveData, *, initial: int, seed: int, C: float) -> RunState:
    """A run's start: ``initial`` pool examples drawn uniformly (the same for every strategy)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 10**6]))
    idx = rng.choice(data.y_true.size, size=initial, replace=False)
    return RunState(strategy=strategy, seed=int(seed), C=float(C), labeled=tuple(int(i) for i in idx),
                    observed=tuple(int(v) for v in data.y_noisy[idx]))


class ActiveLearningClassifier(ClassifierMixin, BaseEstimator):
    """Pool-based active learning as a scikit-learn classifier (``fit`` / ``predict``).

    ``fit(X, y)`` starts from ``initial`` random examples, then runs ``rounds`` labelling rounds of
    ``batch`` queries with ``strategy`` (``"direct"`` or a baseline), reading ``y[i]`` only when
    example ``i`` is queried, and keeps the logistic head trained on the labels collected.

    Args:
        strategy: ``"direct"`` or one of ``BASELINES``.
        initial, batch, rounds: the labelling budget (``initial + batch * rounds`` labels).
        C: inverse L2 strength of the logistic head.
        n_annotators: DIRECT's ``B1``.
        min_budget_per_class: DIRECT's largest per-class interval-search budget.
        random_state: seed.

    Attributes:
        classes_, labeled_indices_, n_features_in_.

    Examples:
        >>> from sklearn.datasets import load_digits
        >>> X, y = load_digits(return_X_y=True)
        >>> clf = ActiveLearningClassifier(batch=20, rounds=2, random_state=0).fit(X / 16, y)
        >>> len(clf.labeled_indices_)
        60
    """

    def __init__(self, strategy: str = "direct", *, initial: int = 20, batch: int = 20, rounds: int = 5,
                 C: float = 1.0, n_annotators: int = B1_DEFAULT,
                 min_budget_per_class: int = MIN_BUDGET_PER_CLASS_DEFAULT, random_state=None):
        self.strategy = strategy
        self.initial = initial
        self.batch = batch
        self.rounds = rounds
        self.C = C
        self.n_annotators = n_annotators
        self.min_budget_per_class = min_budget_per_class
        self.random_state = random_state

    def _validate(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        for name in ("initial", "batch", "n_annotators", "min_budget_per_class"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(self.rounds, bool) or not isinstance(self.rounds, (int, np.integer)) or self.rounds < 0:
            raise ValueError(f"rounds must be an integer >= 0, got {self.rounds!r}")
        if not isinstance(self.C, (int, float)) or not self.C > 0:
            raise ValueError(f"C must be a positive number, got {self.C!r}")

    def fit(self, X, y):
        from sklearn.utils.multiclass import check_classification_targets
        from sklearn.utils.validation import validate_data

        self._validate()
        X, y = validate_data(self, X, y)
        check_classification_targets(y)
        self.classes_, y_enc = np.unique(y, return_inverse=True)
        seed = np.random.SeedSequence(self.random_state if isinstance(self.random_state, (int, np.integer))
                                      else None).generate_state(1)[0]
        data = ActiveData(X_pool=X, y_true=y_enc, y_noisy=y_enc, X_test=X[:1], y_test=y_enc[:1],
                          n_classes=max(2, self.classes_.size), minority=())
        state = initial_state(self.strategy, data, initial=min(int(self.initial), y.size), seed=int(seed), C=float(self.C))
        for r in range(int(self.rounds)):
            room = y.size - len(state.labeled)
            if room <= 0:
                break
            state = al_round(state, data, round_index=r, batch=min(int(self.batch), room), select=True,
                             n_annotators=int(self.n_annotators), min_budget_per_class=int(self.min_budget_per_class))
        self.labeled_indices_ = np.asarray(state.labeled, dtype=np.int64)
        self.model_ = fit_head(X[self.labeled_indices_], y_enc[self.labeled_indices_], float(self.C), data.n_classes)
        return self

    def predict_proba(self, X):
        from sklearn.utils.validation import check_is_fitted, validate_data

        check_is_fitted(self, "model_")
        X = validate_data(self, X, reset=False)
        return predict_proba(self.model_, X, max(2, self.classes_.size))[:, :self.classes_.size]

    def predict(self, X):
        """The most probable class of each row of ``X``."""
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]
