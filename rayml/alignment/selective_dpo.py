"""Selective DPO: difficulty as the learning order, then DPO on the easiest examples, easy to hard.

Gao et al., "Principled Data Selection for Alignment: The Hidden Risks of Difficult Examples"
(ICML 2025; code: glorgao/SelectiveDPO). The principle: preference examples vary in difficulty,
and examples beyond the model's capacity hurt alignment. The algorithm (paper Sec. 4, the
authors' ``curriculum-lens`` scripts):

1. **Difficulty = validation loss** (``reference_run``): split the preference data into two
   random halves; DPO-train a *reference model* (not DPO's reference policy) on one half and
   record the DPO loss of every held-out example of the other half at ``evals`` points during
   training; swap the halves; repeat for several seeds. The authors use 3 seeds x 2 halves x 5
   evaluations.
2. **Learning order** (``learning_order``): the mean of an example's held-out losses over all
   runs and evaluations (``make_curricula.py`` averages the 15 columns per example). The learning
   orders of different runs agree (their Spearman correlations; the paper's finding 1:
   ``order_agreement``).
3. **Selection and curriculum** (``select_easiest``, ``selective_dpo``): sort ascending, keep the
   easiest fraction (50% in the released script, a tunable hyperparameter that grows with model
   capacity: finding 3), and DPO-train on it in that order (their trainer swaps the random
   sampler for a sequential one), easy to hard.

``difficulty_weights`` is the reweighting baseline of the issue (a variant that down-weights
hard examples instead of dropping them): ``w_i = softmax(-z_i / tau) * n`` with ``z`` the
standardised learning order (assumed: this rayml baseline is not in the paper, whose DPO variants
are other losses).

Assumed (the released code instantiates an undefined trainer class, so these are read from the
paper and README): the reference models start from the same SFT policy as the final run and use
the same DPO settings; the evaluation points are evenly spaced over training; with more steps
than one pass over the kept examples the curriculum is repeated (each pass easy to hard).

Examples:
    >>> import numpy as np
    >>> select_easiest(np.array([0.9, 0.1, 0.5, 0.3]), 0.5).tolist()   # easiest half, easy first
    [1, 3]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from rayml.alignment.dpo import DPOConfig, DPOResult, TokenPair, per_example_loss, train_dpo
from rayml.llm.model import TransformerLM

__all__ = ["split_halves", "reference_run", "learning_order", "order_agreement", "select_easiest",
           "random_subset", "selective_dpo", "difficulty_weights", "ReferenceRun"]


@dataclass(frozen=True)
class ReferenceRun:
    """Held-out losses of one reference model.

    Attributes:
        held_out: indices of the examples it did not train on.
        losses: (evals, len(held_out)) DPO loss of each held-out example at each evaluation.
        steps: the training step of each evaluation.
    """

    held_out: np.ndarray
    losses: np.ndarray
    steps: tuple


def split_halves(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint random halves of ``range(n)`` (sizes ``n // 2`` and ``n - n // 2``), each sorted."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    perm = np.random.default_rng(seed).permutation(int(n))
    return np.sort(perm[: n // 2]), np.sort(perm[n // 2:])


def reference_run(policy: TransformerLM, pairs: Sequence[TokenPair], train_idx: Sequence[int],
                  held_idx: Sequence[int], config: DPOConfig, *, evals: int = 5, seed: int = 0,
                  pad_id: int = 0) -> ReferenceRun:
    """Step 1: DPO-train a copy of ``policy`` on ``train_idx`` and record the held-out DPO loss of
    every example of ``held_idx`` at ``evals`` evenly spaced points (the last at the end)."""
    if isinstance(evals, bool) or not isinstance(evals, int) or evals < 1:
        raise ValueError(f"evals must be a positive integer, got {evals!r}")
    if evals > config.steps:
        raise ValueError(f"evals ({evals}) must be <= config.steps ({config.steps})")
    train_idx, held_idx = np.asarray(train_idx, dtype=int), np.asarray(held_idx, dtype=int)
    if len(train_idx) == 0 or len(held_idx) == 0:
        raise ValueError("train_idx and held_idx must not be empty")
    if np.intersect1d(train_idx, held_idx).size:
        raise ValueError("train_idx and held_idx must be disjoint")
    at = {int(round(config.steps * (k + 1) / evals)) for k in range(evals)}
    held = [pairs[i] for i in held_idx]
    records, steps = [], []

    def evaluate(model, reference, step):
        if step in at:
            records.append(per_example_loss(model, reference, held, beta=config.beta,
                                            label_smoothing=config.label_smoothing, pad_id=pad_id))
            steps.append(step)

    train_dpo(policy, [pairs[i] for i in train_idx], config, seed=seed, pad_id=pad_id, eval_every=1,
              evaluate=evaluate)
    return ReferenceRun(held_idx, np.stack(records), tuple(steps))


def learning_order(runs: Sequence[ReferenceRun], n: int) -> np.ndarray:
    """Step 2: each example's mean held-out loss over every run and evaluation that held it out
    (higher = learned later = harder). Every example must be held out by at least one run."""
    total, count = np.zeros(n), np.zeros(n)
    for r in runs:
        total[r.held_out] += r.losses.sum(0)
        count[r.held_out] += r.losses.shape[0]
    if np.any(count == 0):
        raise ValueError(f"{int((count == 0).sum())} examples were never held out: run both halves of each split")
    return total / count


def order_agreement(orders: Sequence[np.ndarray]) -> np.ndarray:
    """Finding 1: the Spearman correlation matrix between learning orders of independent runs."""
    from scipy.stats import spearmanr

    orders = [np.asarray(o, dtype=float) for o in orders]
    if len(orders) < 2 or len({o.shape for o in orders}) != 1:
        raise ValueError("orders must hold at least two learning orders of equal length")
    k = len(orders)
    out = np.eye(k)
    for i in range(k):
        for j in range(i + 1, k):
            out[i, j] = out[j, i] = spearmanr(orders[i], orders[j]).statistic
    return out


def _check_fraction(fraction) -> float:
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return float(fraction)


def select_easiest(order: np.ndarray, fraction: float) -> np.ndarray:
    """Step 3: indices of the easiest ``ceil(fraction * n)`` examples, sorted easy to hard (ties by index)."""
    fraction = _check_fraction(fraction)
    order = np.asarray(order, dtype=float)
    k = max(1, int(np.ceil(fraction * len(order) - 1e-9)))
    return np.argsort(order, kind="stable")[:k]


def random_subset(n: int, fraction: float, seed: int) -> np.ndarray:
    """The random-selection baseline: ``ceil(fraction * n)`` indices drawn without replacement."""
    fraction = _check_fraction(fraction)
    k = max(1, int(np.ceil(fraction * n - 1e-9)))
    return np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))


def difficulty_weights(order: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Reweighting baseline: ``n * softmax(-z / temperature)``, ``z`` the standardised learning order
    (mean weight 1; hard examples count less instead of being dropped)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    order = np.asarray(order, dtype=float)
    z = (order - order.mean()) / (order.std() + 1e-12)
    w = np.exp(-(z - z.min()) / temperature)
    return w * len(w) / w.sum()


def selective_dpo(policy: TransformerLM, pairs: Sequence[TokenPair], order: np.ndarray, fraction: float,
                  config: DPOConfig, *, seed: int = 0, pad_id: int = 0) -> DPOResult:
    """Selective DPO: DPO on the easiest ``fraction`` of ``pairs`` by ``order``, sequentially easy to hard."""
    if len(order) != len(pairs):
        raise ValueError(f"order has {len(order)} entries for {len(pairs)} pairs")
    keep = select_easiest(order, fraction)
    cfg = DPOConfig(**{**config.to_dict(), "order": "sequential"})
    return train_dpo(policy, [pairs[i] for i in keep], cfg, seed=seed, pad_id=pad_id)
