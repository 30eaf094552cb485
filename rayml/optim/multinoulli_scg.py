"""Multinoulli Extension and Multinoulli-SCG for subset selection under a partition constraint.

Qixin Zhang, Wei Huang, Can Jin, Puning Zhao, Yao Shu, Li Shen, Dacheng Tao, "Multinoulli
Extension: A Lossless Yet Effective Probabilistic Framework for Subset Selection over Partition
Constraints", ICML 2025 (extended version arXiv 2603.21492).

Problem: maximise a monotone set function ``f`` over ``S`` with ``|S cap V_k| <= B_k`` for the parts
``V_1 .. V_K`` of the ground set. Only the abstracts were available to us (no full text, no code);
what they state: the Multinoulli Extension (ME) turns the problem into learning one multinoulli
(categorical) prior per part, admits a lossless rounding for any set function, and Multinoulli-SCG
is parameter-free and reaches ``(1 - e^-alpha) OPT - eps`` for alpha-weakly DR-submodular ``f``.

Assumed (a reconstruction, every line): part ``k`` is ``B_k`` slots; slot ``s`` holds a
sub-probability vector ``x_s`` over ``V_{k(s)}`` (``x_s >= 0``, ``sum x_s <= 1``, the rest is "pick
nothing"). The ME is ``F(x) = E f(S)``, ``S`` the union of independent draws of every slot
(``multinoulli_value``). ``F`` is affine in each slot, so ``dF/dx_{s,v} = E[f(S_-s + v) - f(S_-s)]``
(``sampled_gradient`` estimates it from draws of ``S``). Multinoulli-SCG is stochastic continuous
greedy (Mokhtari, Hassani, Karbasi 2018, Algorithm 1) on ``F``: ``x_0 = 0``, ``d_t = (1 - rho_t)
d_{t-1} + rho_t g_t`` with ``rho_t = 4 / (t + 8)^(2/3)`` (``momentum_weight``), per-slot linear
maximisation (mass 1 on the best element if its estimate is > 0) and ``x_t = x_{t-1} + v_t / T``.
The rounding (``round_multinoulli``) draws every slot once and, for monotone ``f``, fills each part
up to ``B_k`` with its unused elements of largest mass, so ``E f(S) >= F(x)`` (lossless).
Assumed: ``samples`` draws of ``S`` per gradient and the best of ``roundings`` rounded sets.

The set evaluations of one gradient are one batch handed to an ``evaluator``: pass
``rayml.runtime.batch_evaluator(f)`` to spread them over Ray tasks.

Examples:
    >>> import numpy as np
    >>> from rayml.optim.subset_objectives import WeightedCoverage
    >>> from rayml.optim.multinoulli_scg import Partition, SCGConfig, multinoulli_scg
    >>> f = WeightedCoverage(np.eye(4, dtype=bool), np.array([1.0, 2.0, 3.0, 4.0]))
    >>> res = multinoulli_scg(f, Partition([0, 0, 1, 1], [1, 1]), SCGConfig(iterations=10), seed=0)
    >>> res.selected.tolist(), res.value
    ([1, 3], 6.0)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = [
    "Partition",
    "SCGConfig",
    "SubsetResult",
    "CountingEvaluator",
    "momentum_weight",
    "sample_slots",
    "picks_to_mask",
    "multinoulli_value",
    "multinoulli_value_exact",
    "sampled_gradient",
    "path_difference",
    "exact_gradient",
    "linear_maximizer",
    "round_multinoulli",
    "multinoulli_scg",
]

SetEvaluator = Callable[[np.ndarray], np.ndarray]
ESTIMATORS = ("path-integrated", "momentum")


class Partition:
    """The partition constraint ``|S cap V_k| <= B_k``.

    Args:
        labels: ``labels[i]`` is the part of element ``i``; the parts must be ``0 .. K-1``, each
            non-empty.
        budgets: ``B_k`` for each part, with ``1 <= B_k <= |V_k|``.

    Attributes:
        n, parts (index arrays ``V_k``), budgets, rank (``sum B_k``), slot_part (part of each slot).
    """

    def __init__(self, labels, budgets):
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size == 0 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be a non-empty 1-d integer array, got {labels!r}")
        K = int(labels.max()) + 1
        if labels.min() < 0 or len(np.unique(labels)) != K:
            raise ValueError(f"labels must use every part 0..K-1 (empty parts are infeasible), got {np.unique(labels)}")
        budgets = np.asarray(budgets)
        if budgets.shape != (K,) or not np.issubdtype(budgets.dtype, np.integer):
            raise ValueError(f"budgets must be {K} integers (one per part), got {budgets!r}")
        self.n = int(labels.size)
        self.labels = labels.astype(int)
        self.parts = [np.flatnonzero(self.labels == k) for k in range(K)]
        sizes = np.array([len(p) for p in self.parts])
        if np.any(budgets < 1) or np.any(budgets > sizes):
            raise ValueError(f"budgets must satisfy 1 <= B_k <= |V_k| = {sizes.tolist()}, got {budgets.tolist()}")
        self.budgets = budgets.astype(int)
        self.rank = int(self.budgets.sum())
        self.slot_part = np.repeat(np.arange(K), self.budgets)
        self.allowed = self.labels[None, :] == self.slot_part[:, None]  # (rank, n)

    def is_feasible(self, mask) -> bool:
        """Whether the set ``mask`` satisfies every part's budget."""
        mask = np.asarray(mask) > 0.5
        return bool(all(mask[p].sum() <= b for p, b in zip(self.parts, self.budgets)))

    def __repr__(self):
        return f"Partition(n={self.n}, sizes={[len(p) for p in self.parts]}, budgets={self.budgets.tolist()})"


@dataclass(frozen=True)
class SCGConfig:
    """Hyperparameters of Multinoulli-SCG.

    Attributes:
        iterations: ``T``, the number of continuous-greedy steps (step size ``1/T``).
        samples: draws of ``S`` per stochastic gradient (momentum; Mokhtari et al. use 1) and for
            the initial gradient of the path-integrated estimator.
        roundings: rounded sets drawn from ``x_T``; the best is returned (Assumed).
        fill: fill every part up to ``B_k`` after the draw (lossless for monotone ``f``).
        estimator: ``"path-integrated"`` (variance reduced, the default) or ``"momentum"``.
        batch: draws per path difference (``None``: ``T``).
    """

    iterations: int = 50
    samples: int = 1
    roundings: int = 1
    fill: bool = True
    estimator: str = "path-integrated"
    batch: int | None = None

    def __post_init__(self):
        for name in ("iterations", "samples", "roundings"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.batch is not None and (isinstance(self.batch, bool) or not isinstance(self.batch, (int, np.integer))
                                       or self.batch < 1):
            raise ValueError(f"batch must be None or an integer >= 1, got {self.batch!r}")


@dataclass(frozen=True)
class SubsetResult:
    """A selected set and what it cost.

    Attributes:
        selected: sorted indices of ``S``.
        value: ``f(S)``.
        evals: sets evaluated by the method (``f`` calls on single sets).
        x: the final fractional point ``(rank, n)`` (Multinoulli-SCG), else ``None``.
    """

    selected: np.ndarray
    value: float
    evals: int
    x: np.ndarray | None = field(default=None, repr=False)


class CountingEvaluator:
    """Evaluate ``f`` on batches of masks (in-process, or through ``evaluator``) and count the sets."""

    def __init__(self, f: Callable, evaluator: SetEvaluator | None = None):
        if not callable(f):
            raise TypeError("f must be callable on a batch of masks (b, n)")
        self.f, self.evaluator, self.evals = f, evaluator, 0

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        masks = np.asarray(masks, dtype=float)
        if masks.shape[0] == 0:
            return np.zeros(0)
        values = self.evaluator(masks) if self.evaluator is not None else self.f(masks)
        values = np.asarray(values, dtype=float).reshape(-1)
        if values.shape != (masks.shape[0],):
            raise ValueError(f"f returned {values.shape} values for {masks.shape[0]} sets")
        self.evals += masks.shape[0]
        return values


def momentum_weight(t: int) -> float:
    """``rho_t = 4 / (t + 8)^(2/3)``, the momentum schedule of stochastic continuous greedy."""
    return 4.0 / (t + 8) ** (2.0 / 3.0)


def _check_x(x: np.ndarray, partition: Partition) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.shape != (partition.rank, partition.n):
        raise ValueError(f"x must have shape (rank, n) = {(partition.rank, partition.n)}, got {x.shape}")
    if np.any(x < -1e-12) or np.any(x[~partition.allowed] != 0) or np.any(x.sum(axis=1) > 1 + 1e-9):
        raise ValueError("x must be >= 0, zero outside each slot's part, with slot sums <= 1")
    return x


def _picks(x: np.ndarray, u: np.ndarray) -> np.ndarray:
    # slot s picks the first element whose cumulative mass exceeds its uniform u[:, s] (-1: none)
    hit = u[:, :, None] < np.cumsum(x, axis=1)[None]  # (draws, rank, n)
    return np.where(hit.any(axis=2), hit.argmax(axis=2), -1)


def sample_slots(x: np.ndarray, rng: np.random.Generator, draws: int) -> np.ndarray:
    """``draws`` independent draws of every slot: ``(draws, rank)`` element indices, ``-1`` = none."""
    return _picks(x, rng.random((draws, x.shape[0])))


def picks_to_mask(picks: np.ndarray, n: int) -> np.ndarray:
    """Masks ``(..., n)`` of the union of the picked elements (``-1`` picks nothing)."""
    picks = np.asarray(picks)
    flat = picks.reshape(-1, picks.shape[-1])
    mask = np.zeros((flat.shape[0], n + 1), dtype=bool)
    np.put_along_axis(mask, np.where(flat < 0, n, flat), True, axis=1)
    return mask[:, :n].reshape(*picks.shape[:-1], n)


def multinoulli_value(f: Callable, x, partition: Partition, samples: int, seed=0) -> float:
    """Monte Carlo estimate of the ME ``F(x) = E f(S)`` from ``samples`` draws."""
    x = _check_x(x, partition)
    rng = np.random.default_rng(seed)
    masks = picks_to_mask(sample_slots(x, rng, samples), partition.n)
    return float(np.mean(f(masks)))


def _slot_outcomes(x: np.ndarray, partition: Partition):
    # every joint outcome of the slots with its probability (only for tiny instances)
    choices = []
    for s in range(partition.rank):
        idx = np.flatnonzero(partition.allowed[s])
        choices.append([(-1, 1.0 - x[s].sum())] + [(int(v), x[s, v]) for v in idx])
    for combo in itertools.product(*choices):
        yield np.array([c[0] for c in combo]), float(np.prod([c[1] for c in combo]))


def multinoulli_value_exact(f: Callable, x, partition: Partition) -> float:
    """``F(x)`` by enumerating every slot outcome (exponential: tiny instances and tests only)."""
    x = _check_x(x, partition)
    outcomes = list(_slot_outcomes(x, partition))
    masks = picks_to_mask(np.array([o[0] for o in outcomes]), partition.n)
    return float(np.dot([o[1] for o in outcomes], f(masks)))


def exact_gradient(f: Callable, x, partition: Partition) -> np.ndarray:
    """``dF/dx_{s,v} = E[f(S_-s + v) - f(S_-s)]`` by enumeration (tiny instances and tests only)."""
    x = _check_x(x, partition)
    grad = np.zeros_like(x)
    for s in range(partition.rank):
        others = x.copy()
        others[s] = 0.0
        base = multinoulli_value_exact(f, others, partition)
        for v in np.flatnonzero(partition.allowed[s]):
            point = others.copy()
            point[s, v] = 1.0
            grad[s, v] = multinoulli_value_exact(f, point, partition) - base
    return grad


def sampled_gradient(evaluate: Callable, x: np.ndarray, partition: Partition, rng: np.random.Generator,
                     samples: int) -> np.ndarray:
    """Unbiased estimate of ``grad F(x)``: for each draw ``S`` and slot ``s``, the marginal gains
    ``f(S_-s + v) - f(S_-s)`` of every ``v`` in the slot's part, averaged over ``samples`` draws.

    All ``samples * sum_s (|V_k(s)| + 1)`` sets go to ``evaluate`` as one batch.
    """
    return _gains(evaluate, [sample_slots(x, rng, samples)], partition)[0] / samples


def _gains(evaluate: Callable, pick_sets: list[np.ndarray], partition: Partition) -> list[np.ndarray]:
    # per pick array (draws, rank): the summed marginal gains f(S_-s + v) - f(S_-s) of every slot
    # and element of its part, all sets of every array evaluated as one batch
    n, rank = partition.n, partition.rank
    masks, index = [], []
    for which, picks in enumerate(pick_sets):
        for j in range(picks.shape[0]):
            for s in range(rank):
                others = picks[j].copy()
                others[s] = -1
                base = picks_to_mask(others, n)
                elems = np.flatnonzero(partition.allowed[s])
                added = np.repeat(base[None], len(elems), axis=0)
                added[np.arange(len(elems)), elems] = True
                masks.append(base[None])
                masks.append(added)
                index.append((which, s, elems))
    grads = [np.zeros((rank, n)) for _ in pick_sets]
    if not masks:
        return grads
    values = evaluate(np.concatenate(masks).astype(float))
    pos = 0
    for which, s, elems in index:
        grads[which][s, elems] += values[pos + 1 : pos + 1 + len(elems)] - values[pos]
        pos += 1 + len(elems)
    return grads


def path_difference(evaluate: Callable, x_new: np.ndarray, x_old: np.ndarray, partition: Partition,
                    rng: np.random.Generator, batch: int) -> np.ndarray:
    """Unbiased estimate of ``grad F(x_new) - grad F(x_old)`` from ``batch`` draws with common
    random numbers: the same uniforms pick every slot at both points, and only the draws whose
    picks differ are evaluated (the others contribute exactly zero)."""
    u = rng.random((int(batch), partition.rank))
    new, old = _picks(x_new, u), _picks(x_old, u)
    moved = np.flatnonzero((new != old).any(axis=1))
    g_new, g_old = _gains(evaluate, [new[moved], old[moved]], partition)
    return (g_new - g_old) / int(batch)


def linear_maximizer(d: np.ndarray, partition: Partition) -> np.ndarray:
    """``argmax <d, v>`` over the product of slot simplices: per slot, mass 1 on the element with the
    largest ``d`` in its part if that value is > 0, else no mass."""
    scores = np.where(partition.allowed, d, -np.inf)
    best = scores.argmax(axis=1)
    v = np.zeros_like(d)
    rows = np.arange(d.shape[0])
    v[rows, best] = (scores[rows, best] > 0).astype(float)
    return v


def _fill_by_gain(mask: np.ndarray, partition: Partition, evaluate: Callable) -> None:
    # greedy completion: while a part has room, add the unused element of largest marginal gain
    for part, budget in zip(partition.parts, partition.budgets):
        for _ in range(int(budget - mask[part].sum())):
            unused = part[~mask[part]]
            trial = np.repeat(mask[None], len(unused), axis=0)
            trial[np.arange(len(unused)), unused] = True
            mask[unused[int(np.argmax(evaluate(trial.astype(float))))]] = True


def round_multinoulli(x, partition: Partition, rng: np.random.Generator, draws: int = 1,
                      fill: bool = True, f: Callable | None = None) -> np.ndarray:
    """The rounding: ``draws`` independent draws of every slot, each part then filled up to ``B_k``.

    With ``f`` (a batch set function or a ``CountingEvaluator``) the fill is greedy by marginal
    gain: while a part has room, add its unused element with the largest ``f(S + v) - f(S)``
    (ties by index). Without ``f`` it takes the part's unused elements in decreasing order of their
    summed mass ``sum_{s in k} x_s`` (ties by index, which is what decides when the mass is zero).
    Without the fill ``E f(S) = F(x)``; with it ``E f(S) >= F(x)`` for monotone ``f``. Every
    returned mask is feasible. Returns ``(draws, n)`` masks.
    """
    x = _check_x(x, partition)
    masks = picks_to_mask(sample_slots(x, rng, draws), partition.n)
    if fill and f is not None:
        for mask in masks:
            _fill_by_gain(mask, partition, f)
    elif fill:
        mass = x.sum(axis=0)  # x is zero outside each slot's part
        for mask in masks:
            for part, budget in zip(partition.parts, partition.budgets):
                short = budget - int(mask[part].sum())
                if short > 0:
                    unused = part[~mask[part]]
                    order = unused[np.lexsort((unused, -mass[unused]))]
                    mask[order[:short]] = True
    return masks


def multinoulli_scg(
    f: Callable,
    partition: Partition,
    config: SCGConfig = SCGConfig(),
    *,
    seed: int | np.random.Generator = 0,
    evaluator: SetEvaluator | None = None,
) -> SubsetResult:
    """Maximise the monotone set function ``f`` under ``partition`` with Multinoulli-SCG.

    Continuous greedy on the Multinoulli Extension with the path-integrated (default) or momentum
    gradient estimate (module docstring), then the lossless rounding with the marginal-gain fill;
    returns the best of ``config.roundings`` rounded sets.

    Args:
        f: maps masks ``(b, n)`` to values ``(b,)``.
        partition: the constraint.
        config: ``SCGConfig``.
        seed: seed or numpy Generator (all randomness).
        evaluator: evaluates a batch of masks in place of ``f`` (e.g. ``rayml.runtime.batch_evaluator(f)``).

    Returns:
        ``SubsetResult`` with the final ``x``.
    """
    if not isinstance(partition, Partition):
        raise TypeError(f"partition must be a Partition, got {type(partition).__name__}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    evaluate = CountingEvaluator(f, evaluator)
    T = int(config.iterations)
    x = np.zeros((partition.rank, partition.n))
    d = np.zeros_like(x)
    path = config.estimator == "path-integrated"
    batch = int(config.batch) if config.batch is not None else T
    if path:
        d = sampled_gradient(evaluate, x, partition, rng, config.samples)
    for t in range(1, T + 1):
        if not path:
            rho = momentum_weight(t)
            d = (1.0 - rho) * d + rho * sampled_gradient(evaluate, x, partition, rng, config.samples)
        x_new = np.minimum(x + linear_maximizer(d, partition) / T, 1.0)
        if path and t < T:
            d = d + path_difference(evaluate, x_new, x, partition, rng, batch)
        x = x_new
    x = x / np.maximum(1.0, x.sum(axis=1, keepdims=True))  # guard float drift past the simplex
    masks = round_multinoulli(x, partition, rng, draws=config.roundings, fill=config.fill, f=evaluate)
    values = evaluate(masks)
    best = int(np.argmax(values))
    return SubsetResult(np.flatnonzero(masks[best]), float(values[best]), evaluate.evals, x)
