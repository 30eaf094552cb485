"""rayml.experiments.manifold_diffusion: claims wired to measured numbers; bad settings rejected."""

import pytest

from rayml import experiments


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("manifold-diffusion") == []


@pytest.mark.parametrize("override", [{"lr_grid": []}, {"timing_so": [1]}, {"sphere_d": 1}, {"seeds": 0}])
def test_bad_settings_are_rejected_before_work(override):
    with pytest.raises(ValueError):
        experiments.run("manifold-diffusion", size="tiny", overrides=override)
