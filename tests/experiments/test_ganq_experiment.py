"""rayml.experiments.ganq: every declared claim is wired to a number its run measures; settings."""

import pytest


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("ganq") == []


def test_claims_are_paired_at_equal_bits_with_controls():
    from rayml.experiments import ganq as E

    assert len(E.CLAIMS) == 6
    for c in E.CLAIMS:
        assert c.kind == "paper" and c.source.startswith("abstract:")
        assert c.test and c.a["method"] == E.METHOD and c.b["method"] == E.COMPARATOR == "gptq-grouped"
        assert set(c.pair_on) in ({"seed", "layer"}, {"seed", "text"})
        assert [ctl.name for ctl in c.controls] == list(E.CONTROLS)
        assert all(ctl.a["method"] == ctl.name and ctl.a["bits"] == c.a["bits"] for ctl in c.controls)


def test_real_model_takes_its_own_settings_and_bad_input_is_rejected():
    from rayml.experiments import ganq as E

    quick = E.SIZES["quick"]
    real = E._effective({**quick, "model": "smollm2-135m"})
    assert real["blocks"] == [14, 15] and real["heldout_texts"] == 24 and real["iterations"] == 10
    assert E._effective(quick)["blocks"] == [0, 1, 2, 3]
    assert E._effective(E.SIZES["full"] | {"model": "smollm2-135m"})["blocks"] == list(range(30))
    for bad, match in (({"model": "gpt2"}, "model"), ({"blocks": []}, "blocks"), ({"bits": [3, 9]}, "bits"),
                       ({"iterations": 0}, "iterations"), ({"variants": ["nope"]}, "variants")):
        with pytest.raises(ValueError, match=match):
            E.run({**E.SIZES["tiny"], **bad}, 0)
    with pytest.raises(ValueError, match="blocks"):  # the substrate has 4 blocks
        E.run({**E.SIZES["tiny"], "blocks": [7]}, 0)
