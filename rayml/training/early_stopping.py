"""Early stopping on a validation score: keep the best epoch's weights, stop after ``patience``
epochs without a strict improvement, and restore the best weights at the end.

Used by ``rayml.causal.cate_bounds`` (nuisances and the representation) and ``rayml.graphs.stop``.

Examples:
    >>> import torch
    >>> model = torch.nn.Linear(1, 1)
    >>> stopper = EarlyStopping(model, patience=2)
    >>> [stopper.step(v, model) for v in (3.0, 2.0, 2.5, 2.0)]   # stop after 2 epochs without a new best
    [False, False, False, True]
    >>> stopper.best
    2.0
"""

from __future__ import annotations

import copy
import math

from torch import nn

__all__ = ["EarlyStopping"]


class EarlyStopping:
    """Track the best (lowest) validation score and the model's weights at it.

    Args:
        model: the module whose ``state_dict`` is kept.
        patience: epochs without a strict improvement after which ``step`` says stop (>= 1).
        keep_initial: keep the initial weights as the best so far (``restore`` then always loads a
            state); with ``False`` nothing is kept until the first ``step`` and ``restore`` before
            it leaves the model as it is.

    A score that is not smaller than the best (``nan`` included) counts as an epoch without
    improvement.
    """

    def __init__(self, model: nn.Module, patience: int, *, keep_initial: bool = True):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience must be a positive integer, got {patience!r}")
        self.patience = patience
        self.best = math.inf
        self.best_state = copy.deepcopy(model.state_dict()) if keep_initial else None
        self.bad = 0

    def step(self, value: float, model: nn.Module) -> bool:
        """Record one epoch's validation score ``value``; ``True`` when training should stop."""
        if value < self.best:
            self.best, self.best_state, self.bad = value, copy.deepcopy(model.state_dict()), 0
            return False
        self.bad += 1
        return self.bad >= self.patience

    def restore(self, model: nn.Module) -> nn.Module:
        """Load the best weights into ``model`` (if any were kept) and return it."""
        if self.best_state is not None:
            model.load_state_dict(self.best_state)
        return model
