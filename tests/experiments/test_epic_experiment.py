"""rayml.experiments.epic: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("epic") == []


def test_the_model_key_is_validated_and_a_real_model_takes_its_own_item_settings():
    import pytest

    from rayml.experiments import epic

    quick = dict(epic.SIZES["quick"])
    for bad in ("gpt2", 3, "smollm2"):
        with pytest.raises(ValueError, match="model"):
            epic.run(dict(quick, model=bad), 0)
    with pytest.raises(ValueError, match="layouts"):
        epic.run(dict(quick, layouts=["bosdrop"]), 0)
    with pytest.raises(ValueError, match="n_docs"):
        epic.run(dict(quick, model="smollm2-135m", real=dict(quick["real"], n_docs=[40])), 0)
    assert epic.SIZES["quick"]["model"] == "base"  # the substrate stays the default
    real = epic._effective(dict(quick, model="smollm2-135m"))
    assert real["n_docs"] == quick["real"]["n_docs"] and real["items"] == quick["real"]["items"]
    assert real["prefix"] is False and epic._effective(quick)["n_docs"] == quick["n_docs"]
    with pytest.raises(ValueError, match="model"):
        epic.bench(dict(epic.BENCH_SIZES["tiny"], model="gpt2"), 0)
