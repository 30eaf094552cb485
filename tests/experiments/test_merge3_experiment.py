"""rayml.experiments.merge3: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    # at tiny size the endpoints are untrained models that answer every test item wrong, so the
    # full-data merge scores 0 and the retained share (a ratio to it) is undefined
    assert unmeasured_claims("merge3") == ["metrics.evolution.quality_retained"]
