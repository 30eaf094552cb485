"""EarlyStopping: the best score and weights, patience, restore, bad input."""

import math

import pytest
import torch

from rayml.training import EarlyStopping


def _set(model, v):
    with torch.no_grad():
        model.weight.fill_(v)


def test_keeps_best_weights_and_stops_after_patience():
    model = torch.nn.Linear(1, 1)
    stopper = EarlyStopping(model, patience=2)
    seen = []
    for epoch, score in enumerate([3.0, 1.0, 1.0, 2.0, 0.5]):
        _set(model, float(epoch))
        seen.append(stopper.step(score, model))
        if seen[-1]:
            break
    # epoch 1 is the best; epochs 2 (a tie is no improvement) and 3 without a new best: stop at 3
    assert seen == [False, False, False, True]
    assert stopper.best == 1.0
    stopper.restore(model)
    assert float(model.weight) == 1.0


def test_nan_counts_as_no_improvement():
    model = torch.nn.Linear(1, 1)
    stopper = EarlyStopping(model, patience=1)
    assert not stopper.step(1.0, model)
    assert stopper.step(math.nan, model)
    assert stopper.best == 1.0


def test_initial_weights_kept_or_not():
    model = torch.nn.Linear(1, 1)
    _set(model, 7.0)
    kept, not_kept = EarlyStopping(model, 3), EarlyStopping(model, 3, keep_initial=False)
    _set(model, -1.0)
    assert float(kept.restore(model).weight) == 7.0
    _set(model, -1.0)
    assert float(not_kept.restore(model).weight) == -1.0  # nothing kept: the model is left as it is


def test_the_kept_state_is_a_copy():
    model = torch.nn.Linear(1, 1)
    _set(model, 2.0)
    stopper = EarlyStopping(model, 1, keep_initial=False)
    stopper.step(0.0, model)
    _set(model, 5.0)
    assert float(stopper.restore(model).weight) == 2.0


@pytest.mark.parametrize("patience", [0, -1, 1.5, True])
def test_bad_patience(patience):
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(torch.nn.Linear(1, 1), patience)


def test_bad_model():
    with pytest.raises(TypeError, match="model"):
        EarlyStopping(object(), 1)
