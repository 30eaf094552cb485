"""rayml.experiments.cur_mgae: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("cur-mgae") == []


def test_quick_levels_are_all_away_from_chance_and_ceiling():
    from rayml.experiments import cur_mgae as exp

    hs = exp.SIZES["quick"]["homophily"]
    # with 10 classes a random graph's homophily is 0.1 (no structure to find); 0.9 puts node accuracy at ceiling
    assert all(1 / exp.SIZES["quick"]["classes"] + 0.1 <= h <= 0.8 for h in hs) and len(hs) >= 3
    assert exp.SIZES["quick"]["seeds"] >= 6  # a one-sided per-level Wilcoxon can reach p < 0.05
    texts = [c.text for c in exp.CLAIMS if c.kind == "sanity"]
    assert any("chance" in t for t in texts) and any("ceiling" in t for t in texts)


def test_tuning_graphs_setting_is_validated():
    import pytest

    from rayml import experiments
    from rayml.experiments import cur_mgae as exp

    config = experiments.resolve_config(exp.SIZES, "tiny", {"tuning_graphs": 0})
    with pytest.raises(ValueError, match="tuning_graphs"):
        exp.run(config, 0)
