"""rayml.experiments.hybridgs: every declared claim is wired to a number its run measures; bad settings."""

import pytest

from rayml import experiments


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("hybridgs") == []


@pytest.mark.parametrize("overrides, match", [
    ({"kinds": ["teapots"]}, "kinds"),
    ({"targets": [1.5]}, "targets"),
    ({"feature_bits": 17}, "bits"),
    ({"position_bits": 24}, "position_bits"),
    ({"steps": 5}, "steps"),
])
def test_bad_settings_are_refused_before_any_work(ray_session, overrides, match):
    with pytest.raises(ValueError, match=match):
        experiments.run("hybridgs", size="tiny", overrides=overrides)
