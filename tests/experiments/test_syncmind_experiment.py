"""rayml.experiments.syncmind: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("syncmind") == []


def test_bad_settings_are_refused_before_any_work():
    import pytest

    from rayml.experiments import syncmind as exp

    for key, value in (("model", "gpt-4o"), ("lm_scenarios", 0), ("p_ask", 1.5), ("gen_repos", 0)):
        with pytest.raises(ValueError, match=key):
            exp.run({**exp.SIZES["tiny"], key: value}, 0)
