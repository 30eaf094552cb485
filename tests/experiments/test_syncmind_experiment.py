"""rayml.experiments.syncmind: every declared claim is wired to a number its run measures."""

import pytest

PHI = "baselines.lm.pooled.asked_success_phi"


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    missing = unmeasured_claims("syncmind")
    # the language-model agent's phi (asked vs recovered) is undefined, not unwired, when one of the
    # two is constant over its few tiny episodes (the uniform picker recovers every collaborative one)
    assert set(missing) <= {PHI}
    if missing:
        from rayml import experiments

        pooled = experiments.run("syncmind", size="tiny", seed=1)["baselines"]["lm"]["pooled"]
        assert pooled["sr"] in (0.0, 1.0) or pooled["ask_episode_rate"] in (0.0, 1.0)


def test_bad_settings_are_refused_before_any_work():
    from rayml.experiments import syncmind as exp

    for key, value in (("model", "gpt-4o"), ("lm_scenarios", 0), ("p_ask", 1.5), ("gen_repos", 0)):
        with pytest.raises(ValueError, match=key):
            exp.run({**exp.SIZES["tiny"], key: value}, 0)
