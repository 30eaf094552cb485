"""Baselines for partition-constrained subset selection: greedy, distorted local search, random,
and brute force (the reference OPT on instances small enough to enumerate).

The distorted local search is the competitor named by the Multinoulli-SCG paper (Zhang et al.,
ICML 2025). Its ``(gamma, beta)`` guarantee matches the distorted local search of Thiery & Ward,
"Two-sided weak submodularity for matroid constrained optimization and regression" (COLT 2022),
which generalises the non-oblivious local search of Filmus & Ward (SIAM J. Comput. 2014). Only
the latter's construction was available to us; Assumed, following it:

- the potential ``g(A) = sum_{B subset A} m_{|A|-1,|B|-1} f(B)`` with ``m_{a,b} = int_0^1 rho(p)
  p^b (1-p)^(a-b) dp`` equals ``int_0^1 rho(p) E[f(A(p))] / p dp`` (``A(p)`` keeps each element
  of ``A`` with probability ``p``); ``samples=None`` computes it exactly (every subset of ``A``,
  ``m`` by 64-point Gauss-Legendre quadrature, each distinct set evaluated once and cached),
  an integer estimates it from that many draws of ``(p, A(p))`` with common random numbers fixed
  for the whole search;
- the distortion density is ``rho(p) = phi e^(phi p) / (e^phi - 1)`` with ``phi = beta (1 - gamma)
  + gamma^2`` (``phi = 1`` for submodular ``f``: Filmus & Ward's ``1 - 1/e`` potential); it needs
  ``gamma`` and ``beta`` given, the structural knowledge the paper's method avoids;
- greedy on ``g``, then swaps inside a part accepted when ``g`` grows by a factor ``1 + eps / r``
  (``r = sum B_k``), until no swap improves or ``max_sweeps`` full sweeps are done.

Every function counts the sets it evaluates (``SubsetResult.evals``).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from rayml.optim.multinoulli_scg import CountingEvaluator, Partition, SubsetResult

__all__ = [
    "partition_greedy",
    "random_order_greedy",
    "potential_weights",
    "distorted_local_search",
    "random_feasible",
    "brute_force",
    "feasible_bases",
]


def _check_partition(partition) -> None:
    if not isinstance(partition, Partition):
        raise TypeError(f"partition must be a Partition, got {type(partition).__name__}")


def _open_candidates(mask: np.ndarray, partition: Partition) -> np.ndarray:
    out = []
    for part, budget in zip(partition.parts, partition.budgets):
        if mask[part].sum() < budget:
            out.extend(part[~mask[part]].tolist())
    return np.array(out, dtype=int)


def _greedy(score: Callable[[np.ndarray], np.ndarray], partition: Partition) -> np.ndarray:
    # add the feasible element of largest score until every part is full (score gets a mask batch)
    mask = np.zeros(partition.n, dtype=bool)
    for _ in range(partition.rank):
        cand = _open_candidates(mask, partition)
        trial = np.repeat(mask[None], len(cand), axis=0)
        trial[np.arange(len(cand)), cand] = True
        values = score(trial)
        mask[cand[int(np.argmax(values))]] = True
    return mask


def partition_greedy(f: Callable, partition: Partition, *, evaluator=None) -> SubsetResult:
    """The greedy algorithm under the partition matroid: add the element of largest marginal gain
    among the parts not yet full, ``r = sum B_k`` times (``1/2`` for monotone submodular ``f``)."""
    _check_partition(partition)
    evaluate = CountingEvaluator(f, evaluator)
    mask = _greedy(evaluate, partition)
    value = float(evaluate(mask[None].astype(float))[0])
    return SubsetResult(np.flatnonzero(mask), value, evaluate.evals)


def random_order_greedy(f: Callable, partition: Partition, *, orders: int = 8,
                        seed: int | np.random.Generator = 0, evaluator=None) -> SubsetResult:
    """Greedy that fills the parts one after another in a random part order (the element of largest
    marginal gain within the current part, given everything chosen so far), the best of ``orders``
    random orders. A cheap control, not from the paper: it escapes traps that catch greedy only
    through the order in which parts are filled (outside review R10)."""
    _check_partition(partition)
    if isinstance(orders, bool) or not isinstance(orders, (int, np.integer)) or orders < 1:
        raise ValueError(f"orders must be an integer >= 1, got {orders!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    evaluate = CountingEvaluator(f, evaluator)
    best_mask, best_value = None, -math.inf
    for _ in range(int(orders)):
        mask = np.zeros(partition.n, dtype=bool)
        for k in rng.permutation(len(partition.parts)):
            part = partition.parts[k]
            for _ in range(partition.budgets[k]):
                cand = part[~mask[part]]
                trial = np.repeat(mask[None], len(cand), axis=0)
                trial[np.arange(len(cand)), cand] = True
                mask[cand[int(np.argmax(evaluate(trial.astype(float))))]] = True
        value = float(evaluate(mask[None].astype(float))[0])
        if value > best_value:
            best_mask, best_value = mask, value
    return SubsetResult(np.flatnonzero(best_mask), best_value, evaluate.evals)


def _distortion_samples(phi: float, samples: int, n: int, rng: np.random.Generator):
    u = rng.random(samples)
    p = np.log1p(u * math.expm1(phi)) / phi  # inverse CDF of rho(p) = phi e^(phi p) / (e^phi - 1)
    keep = rng.random((samples, n)) < p[:, None]
    return p, keep


def potential_weights(phi: float, size: int) -> np.ndarray:
    """``m_{a,b}`` for ``a = size - 1``, ``b = 0 .. a``: ``int_0^1 rho(p) p^b (1-p)^(a-b) dp`` with
    ``rho(p) = phi e^(phi p) / (e^phi - 1)`` (Filmus & Ward's weights; 64-point Gauss-Legendre)."""
    nodes, weights = np.polynomial.legendre.leggauss(64)
    p, w = (nodes + 1) / 2, weights / 2
    rho = phi * np.exp(phi * p) / math.expm1(phi)
    a = size - 1
    b = np.arange(a + 1)
    return np.array([np.sum(w * rho * p**bb * (1 - p) ** (a - bb)) for bb in b])


class _ExactPotential:
    """``g(A)`` exactly: the sum over the non-empty subsets ``B`` of ``A`` of ``m_{|A|-1,|B|-1} f(B)``;
    ``f`` is evaluated once per distinct set (cache), through the counting evaluator."""

    def __init__(self, evaluate: CountingEvaluator, n: int, phi: float):
        self.evaluate, self.n, self.phi = evaluate, n, phi
        self.cache: dict[bytes, float] = {}
        self.weights: dict[int, np.ndarray] = {}

    def __call__(self, masks: np.ndarray) -> np.ndarray:
        subsets = []
        for mask in masks:
            idx = np.flatnonzero(mask)
            subs = []
            for r in range(1, len(idx) + 1):
                for comb in itertools.combinations(idx, r):
                    b = np.zeros(self.n, dtype=bool)
                    b[list(comb)] = True
                    subs.append(b)
            subsets.append(subs)
        new = {}
        for subs in subsets:
            for b in subs:
                key = b.tobytes()
                if key not in self.cache and key not in new:
                    new[key] = b
        if new:
            vals = self.evaluate(np.array(list(new.values())).astype(float))
            self.cache.update(zip(new.keys(), map(float, vals)))
        out = np.zeros(len(masks))
        for i, subs in enumerate(subsets):
            size = int(masks[i].sum())
            if size == 0:
                continue
            if size not in self.weights:
                self.weights[size] = potential_weights(self.phi, size)
            m = self.weights[size]
            out[i] = sum(m[int(b.sum()) - 1] * self.cache[b.tobytes()] for b in subs)
        return out


def distorted_local_search(
    f: Callable,
    partition: Partition,
    *,
    gamma: float = 1.0,
    beta: float = 1.0,
    samples: int | None = 32,
    epsilon: float = 0.1,
    max_sweeps: int = 10,
    seed: int | np.random.Generator = 0,
    evaluator=None,
) -> SubsetResult:
    """Distorted (non-oblivious) local search on the potential ``g`` (module docstring).

    Args:
        f: maps masks ``(b, n)`` to values ``(b,)``, with ``f(empty) = 0``.
        partition: the constraint.
        gamma, beta: the weak-submodularity parameters (``0 < gamma <= 1``, ``beta >= gamma``...);
            ``gamma = beta = 1`` for submodular ``f``.
        samples: Monte Carlo draws per estimate of ``g`` (each costs one evaluation of ``f``);
            ``None``: the exact potential (every subset, each distinct set evaluated once).
        epsilon: a swap must raise ``g`` by the factor ``1 + epsilon / r``.
        max_sweeps: at most this many passes over all swaps.
        seed: seed or numpy Generator.
    """
    _check_partition(partition)
    if not (0 < gamma <= 1) or beta <= 0:
        raise ValueError(f"gamma must be in (0, 1] and beta > 0, got gamma={gamma}, beta={beta}")
    for name, v in (("samples", 1 if samples is None else samples), ("max_sweeps", max_sweeps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    evaluate = CountingEvaluator(f, evaluator)
    phi = beta * (1.0 - gamma) + gamma**2
    if samples is None:
        potential = _ExactPotential(evaluate, partition.n, phi)
    else:
        p, keep = _distortion_samples(phi, int(samples), partition.n, rng)

        def potential(masks: np.ndarray) -> np.ndarray:
            sub = masks[:, None, :] & keep[None]  # (b, samples, n)
            vals = evaluate(sub.reshape(-1, partition.n).astype(float)).reshape(len(masks), -1)
            return (vals / p[None]).mean(axis=1)

    mask = _greedy(potential, partition)
    current = float(potential(mask[None])[0])
    threshold = 1.0 + epsilon / partition.rank
    for _ in range(int(max_sweeps)):
        improved = False
        for part in partition.parts:
            for a in part[mask[part]]:
                outs = part[~mask[part]]
                if len(outs) == 0:
                    continue
                trial = np.repeat(mask[None], len(outs), axis=0)
                trial[:, a] = False
                trial[np.arange(len(outs)), outs] = True
                values = potential(trial)
                j = int(np.argmax(values))
                if values[j] > threshold * current:
                    mask, current, improved = trial[j], float(values[j]), True
                    break
        if not improved:
            break
    value = float(evaluate(mask[None].astype(float))[0])
    return SubsetResult(np.flatnonzero(mask), value, evaluate.evals)


def random_feasible(f: Callable, partition: Partition, *, seed: int | np.random.Generator = 0) -> SubsetResult:
    """A uniformly random basis: ``B_k`` random elements of every part."""
    _check_partition(partition)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    mask = np.zeros(partition.n, dtype=bool)
    for part, budget in zip(partition.parts, partition.budgets):
        mask[rng.choice(part, size=budget, replace=False)] = True
    value = float(np.asarray(f(mask[None].astype(float))).reshape(-1)[0])
    return SubsetResult(np.flatnonzero(mask), value, 1)


def feasible_bases(partition: Partition, limit: int = 200_000) -> np.ndarray:
    """All sets with exactly ``B_k`` elements in every part, as masks; ``ValueError`` past ``limit``."""
    _check_partition(partition)
    count = math.prod(math.comb(len(p), int(b)) for p, b in zip(partition.parts, partition.budgets))
    if count > limit:
        raise ValueError(f"{count} feasible bases exceed limit={limit}; brute force is for small instances")
    per_part = [list(itertools.combinations(p.tolist(), int(b))) for p, b in zip(partition.parts, partition.budgets)]
    masks = np.zeros((count, partition.n), dtype=bool)
    for row, combo in enumerate(itertools.product(*per_part)):
        masks[row, [i for c in combo for i in c]] = True
    return masks


def brute_force(f: Callable, partition: Partition, *, limit: int = 200_000, batch: int = 4096) -> SubsetResult:
    """OPT by enumerating the bases (the optimum of a monotone ``f`` is attained at a basis)."""
    masks = feasible_bases(partition, limit)
    values = np.concatenate([np.asarray(f(masks[i : i + batch].astype(float)), dtype=float)
                             for i in range(0, len(masks), batch)])
    best = int(np.argmax(values))
    return SubsetResult(np.flatnonzero(masks[best]), float(values[best]), len(masks))
