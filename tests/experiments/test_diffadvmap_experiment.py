"""rayml.experiments.diffadvmap: claims wired to measured numbers; bad settings rejected."""

import pytest

from rayml import experiments


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("diffadvmap") == []


@pytest.mark.parametrize("override", [{"knob_grid": []}, {"pgd_eps": 2.0}, {"n_test": 600}, {"map_inner": 99},
                                      {"knob_extend": -1}])
def test_bad_settings_are_rejected_before_work(override):
    with pytest.raises(ValueError):
        experiments.run("diffadvmap", size="tiny", overrides=override)
