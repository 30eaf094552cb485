"""rayml.experiments.merge3: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    # at tiny size the endpoints are untrained models that answer every test item wrong, so the
    # full-data merge scores 0 and the retained share (a ratio to it) is undefined, for the merge and for
    # the unevolved models that are its controls
    assert unmeasured_claims("merge3") == ["metrics.evolution.quality_retained"] + [
        f"metrics.evolution.controls.quality_retained.{m}" for m in ("base", "endpoint_a", "endpoint_b")]
