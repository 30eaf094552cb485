"""rayml.experiments.poisonedeye: every declared claim is wired to a number its run measures; the tuning's
edge flags and probe radii; the pixel-space check of a poison image."""

import numpy as np
import pytest

from rayml.experiments import poisonedeye as X


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("poisonedeye") == []


def _tuned(top1_by_eps, margin_by_eps=None):
    """Synthetic tuning outputs: one trial per radius, the same statistics for every objective; ASR
    flat at 1.0 (the ceiling the review found at k = 3)."""
    img = {"own_class_1nn": 1.0, "closer_than_other_class": 0.0}
    margin = margin_by_eps or {e: 0.0 for e in top1_by_eps}
    stats = lambda e: {"asr": 1.0, "top1": top1_by_eps[e], "margin": margin[e]}  # noqa: E731
    return [{"eps": (e, e, e), "stats": {n: stats(e) for n in ("poisonedeye", "poisonedeye@class", "poisonedeye-class")},
             "image": {"poisonedeye": img, "poisonedeye-class": img}} for e in top1_by_eps]


def test_tune_flags_a_choice_on_the_upper_edge_and_never_chooses_a_probe_radius():
    grid, probe = [1.0, 2.0, 4.0], [8.0]
    chosen, rows, where = X._tune(_tuned({1.0: 0.2, 2.0: 0.5, 4.0: 0.7, 8.0: 0.9}), grid, probe)
    assert chosen["poisonedeye-class"] == 4.0  # the probe's 0.9 is measured, not chosen
    assert where["poisonedeye-class"] == {"at_edge": True, "at_upper_edge": True, "flat_grid": False}
    probe_rows = [r for r in rows if r["eps"] == 8.0]
    assert probe_rows and not any(r["in_grid"] for r in probe_rows)
    assert {r["metric"] for r in probe_rows} == {"tuning_top1", "tuning_margin", "tuning_asr", "own_class_1nn",
                                                  "closer_than_other_class"}


def test_tune_on_top1_rate_then_margin_not_on_a_flat_asr():
    """Issue 43: ASR at k = 3 is flat at 1.0, so the smallest radius won every tie; the top-1 rate and
    then the retrieval margin decide instead."""
    grid = [1.0, 2.0, 4.0]
    chosen, _, where = X._tune(_tuned({1.0: 0.2, 2.0: 0.9, 4.0: 0.5}), grid)
    assert chosen["poisonedeye"] == 2.0 and where["poisonedeye"]["at_edge"] is False
    chosen, _, where = X._tune(_tuned({1.0: 1.0, 2.0: 1.0, 4.0: 1.0}, {1.0: 0.01, 2.0: 0.05, 4.0: 0.03}), grid)
    assert chosen["poisonedeye"] == 2.0  # top-1 flat: the larger margin
    assert where["poisonedeye"] == {"at_edge": False, "at_upper_edge": False, "flat_grid": True}


def test_image_check_in_pixel_space():
    xtr, ytr, xq, yq, *_ = X._pools()
    x, y = xq[0], int(yq[0])
    assert X._image_check(x, x, y) == {"own_class_1nn": 1.0, "closer_than_other_class": 1.0}
    other = xtr[ytr != y][0]  # an image of another class: its own nearest neighbour is itself
    far = X._image_check(other, x, y)
    assert far["own_class_1nn"] == 0.0
    d_other = np.linalg.norm(xtr[ytr != y] - x, axis=1).min()
    assert far["closer_than_other_class"] == float(np.linalg.norm(other - x) < d_other) == 0.0


@pytest.mark.parametrize("probe", [None, [0.0], [1.5], [True], [X.PAPER_EPS]])
def test_bad_eps_probe(probe):
    config = dict(X.SIZES["tiny"], eps_probe=probe)
    with pytest.raises(ValueError, match="eps_probe"):
        X._check(config)


def test_retriever_trials_run_on_their_own_encoder_and_stay_out_of_the_test_trials():
    """The other retrievers' items are phase 'retriever' (a first version sent them as test trials)."""
    from rayml.data import image_text as it

    config = dict(X.SIZES["tiny"], retrievers=[0, 1])
    enc = it.load_or_train(0)
    shared = {"encoders": {0: enc, 1: enc}, "config": config}
    out = X.run_trial(("retriever", 0, 0, 123, 9, (X.PAPER_EPS,) * 3, 1), shared)
    assert out["phase"] == "retriever" and out["retriever"] == 1
    assert set(out["single"]) == {"poisonedeye", "text-only", "clean"}
    items = [("test", 0, t, 100 + t, 9, (1.0, 2.0, 3.0)) for t in range(3)]
    extra = X.retriever_items(items, 0.5, [0, 1, 2], 2)
    assert [x[0] for x in extra] == ["retriever"] * 4 and [x[-1] for x in extra] == [1, 1, 2, 2]
    assert extra[0][1:5] == items[0][1:5] and extra[0][5] == (0.5, 0.5, 0.5)
