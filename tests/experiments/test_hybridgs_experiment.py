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


def test_hybridgs_trains_at_the_papers_step_ratio_with_estimated_L():
    """The paper trains HybridGS 70 000 iterations against vanilla 3DGS's 30 000 (7:3), and its rate
    control needs the codec's own L (Draco's is not G-PCC's 1.3)."""
    from rayml.experiments import hybridgs as exp

    for size in ("quick", "full"):
        cfg = exp.SIZES[size]
        assert exp.hybrid_steps(cfg) == round(7 / 3 * cfg["steps"]) and cfg["estimate_L"] is True
        assert exp._hybrid_config(cfg).schedule()["scale_point"] == cfg["steps"]
    assert exp.hybrid_steps({**exp.SIZES["quick"], "step_ratio": 1.0}) == exp.SIZES["quick"]["steps"]


@pytest.mark.parametrize("overrides, match", [({"step_ratio": 0}, "step_ratio"), ({"estimate_L": "yes"}, "estimate_L"),
                                              ({"scale_point": "late"}, "scale_point")])
def test_bad_budget_settings_are_refused(overrides, match):
    from rayml.experiments import hybridgs as exp

    with pytest.raises(ValueError, match=match):
        exp._check({**exp.SIZES["tiny"], **overrides})
