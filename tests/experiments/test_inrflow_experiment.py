"""rayml.experiments.inrflow: claims wired to measured numbers; bad settings rejected before work."""

import pytest

from rayml import experiments


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("inrflow") == []


@pytest.mark.parametrize("override", [{"lr_grid": []}, {"hi_res": 16}, {"seeds": 0}, {"hidden": 18},
                                      {"query_fraction": 1.5}, {"n_eval": 4},
                                      {"show_res": 64}, {"show_res": [1]}])
def test_bad_settings_are_rejected_before_work(override):
    with pytest.raises(ValueError):
        experiments.run("inrflow", size="tiny", overrides=override)
