"""rayml.experiments.manifold_diffusion: claims wired to measured numbers; bad settings rejected;
the tuning grid holds the authors' rate; the dimension sweep's gap."""

import pytest

from rayml import experiments
from rayml.experiments import manifold_diffusion as E


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("manifold-diffusion") == []


@pytest.mark.parametrize("override", [{"lr_grid": []}, {"timing_so": [1]}, {"sphere_d": 1}, {"seeds": 0},
                                      {"tune_seeds": 0}, {"lr_extend": -1}, {"sweep_so": [1]},
                                      {"sweep_torus": "2"}, {"ism_max_d": 0}])
def test_bad_settings_are_rejected_before_work(override):
    with pytest.raises(ValueError):
        experiments.run("manifold-diffusion", size="tiny", overrides=override)


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_authors_rate_lies_inside_the_tuning_grid(size):
    # issue 41: every method on the same grid with the paper's value inside (quick left 5e-4 out before)
    grid = E.SIZES[size]["lr_grid"]
    assert min(grid) <= E.PAPER_LR <= max(grid) and E.SIZES[size]["lr_extend"] >= 1


def test_sweep_gap_pairs_the_smallest_and_largest_d_per_seed():
    res = [{"case": "torus", "size": n, "d": n, "method": m, "index": s, "mmd": v}
           for s in (0, 1) for n, vals in ((2, {"ours": 0.02, "rsgm": 0.01, "euclid": 0.03}),
                                            (4, {"ours": 0.5, "rsgm": 0.5, "euclid": 0.5}),
                                            (8, {"ours": 0.01, "rsgm": 0.03, "euclid": 0.02}))
           for m, v in vals.items()]
    rows, gaps = E._sweep_tables(res)
    assert len(rows) == 18
    by = {(g["seed"], g["end"]): g for g in gaps}
    assert set(by) == {(0, "min"), (0, "max"), (1, "min"), (1, "max")}
    assert by[(0, "min")]["d"] == 2 and by[(0, "max")]["d"] == 8
    assert by[(0, "min")]["value"] == pytest.approx((0.01 - 0.02) / 0.03)   # RSGM better at d = 2
    assert by[(0, "max")]["value"] == pytest.approx((0.03 - 0.01) / 0.04)   # ours better at d = 8
    assert all(g["baseline"] == "rsgm" for g in gaps)   # no SO(n) rows: one family only
