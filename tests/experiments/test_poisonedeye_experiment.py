"""rayml.experiments.poisonedeye: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("poisonedeye") == []
