"""rayml.experiments.design_dsl: every declared claim is wired to a number its run measures, and
bad settings are refused before any work."""

import pytest

from rayml.experiments import design_dsl as exp


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("design-dsl") == []


@pytest.mark.parametrize("key,value,match", [("models", ["gpt"], "models"), ("domains", ["boat"], "domains"),
                                             ("kinds", ["rotate"], "kinds"), ("per_cell", 0, "per_cell"),
                                             ("corpus_variants", 2, "corpus_variants"),
                                             ("model", "gpt-4o", "model"), ("shots_grid", [9], "shots_grid"),
                                             ("max_new_tokens", 0, "max_new_tokens")])
def test_bad_settings_are_refused(key, value, match):
    with pytest.raises(ValueError, match=match):
        exp.run({**exp.SIZES["tiny"], key: value}, 0)
