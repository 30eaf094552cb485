"""rayml.experiments.ganq: every declared claim is wired to a number its run measures; settings."""

import pytest


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("ganq") == []


def test_claims_are_paired_at_equal_bits_with_controls():
    from rayml.experiments import ganq as E

    paper = [c for c in E.CLAIMS if c.kind == "paper"]
    gates = [c for c in E.CLAIMS if c.kind == "sanity"]
    assert len(paper) == 8 and len(gates) == 4
    kmeans = [c for c in paper if c.b["method"] == "kmeans"]
    assert [c.a["bits"] for c in kmeans] == [3, 4] and all(c.a["metric"] == "nll_gap" for c in kmeans)
    for c in paper:
        assert c.source.startswith("abstract:")
        # the GPTQ claims wait for the comparator to work and for the paper's setting (cheap tables)
        assert len(c.gates) == (0 if c in kmeans else 2)
        if c in kmeans:
            continue
        assert c.test and c.a["method"] == E.METHOD and c.b["method"] == E.COMPARATOR == "gptq-grouped"
        assert set(c.pair_on) in ({"seed", "layer"}, {"seed", "text"})
        assert [ctl.name for ctl in c.controls] == list(E.CONTROLS)
        assert all(ctl.a["method"] == ctl.name and ctl.a["bits"] == c.a["bits"] for ctl in c.controls)


def test_real_model_takes_its_own_settings_and_bad_input_is_rejected():
    from rayml.experiments import ganq as E

    quick = E.SIZES["quick"]
    real = E._effective({**quick, "model": "smollm2-135m"})
    assert real["blocks"] == [14, 15] and real["heldout_texts"] == 144 and real["iterations"] == 10
    assert E._effective(quick)["blocks"] == [2, 3]
    assert E._effective(E.SIZES["full"] | {"model": "smollm2-135m"})["blocks"] == list(range(30))
    for bad, match in (({"model": "gpt2"}, "model"), ({"blocks": []}, "blocks"), ({"bits": [3, 9]}, "bits"),
                       ({"iterations": 0}, "iterations"), ({"variants": ["nope"]}, "variants")):
        with pytest.raises(ValueError, match=match):
            E.run({**E.SIZES["tiny"], **bad}, 0)
    with pytest.raises(ValueError, match="blocks"):  # the substrate has 4 blocks
        E.run({**E.SIZES["tiny"], "blocks": [7]}, 0)


def test_ganq_damps_only_an_ill_conditioned_hessian():
    import torch

    from rayml.experiments import ganq as E

    torch.manual_seed(0)
    W = torch.randn(4, 3, dtype=torch.float64)
    cfg = {"iterations": 2}
    for H, damped in ((torch.diag(torch.tensor([1.0, 1.0, 1e-8], dtype=torch.float64)), True),
                      (torch.eye(3, dtype=torch.float64), False)):
        history: dict = {}
        E._quantizer(E.METHOD, 2, cfg, history)("layer", W, H)
        assert (history["_damped"]["layer"]["percdamp"] > 0) == damped
        assert (E.condition_number(H) > E.COND_LIMIT) == damped


def test_the_substrate_is_not_the_papers_setting_and_smollm2_is():
    """A per-row table costs 16 2^N / n bits a weight: 1.0 / 2.0 on the substrate's 128-wide rows (its GPTQ
    claims are gated off), 0.22 / 0.44 on SmolLM2's 576-wide ones (under the 0.5-bit limit)."""
    from rayml.experiments import ganq as E

    for b, base, smol in ((3, 1.0, 16 * 8 / 576), (4, 2.0, 16 * 16 / 576)):
        assert E.bits_per_weight(E.METHOD, b, 128) - b == pytest.approx(base)
        assert E.bits_per_weight(E.METHOD, b, 576) - b == pytest.approx(smol)
        assert base >= E.TABLE_OVERHEAD_LIMIT > smol


def test_keep_sink_intact_runs_the_first_token_at_full_precision():
    """IntactKV-style protection: with every linear layer of a block replaced by a crude quantization, the
    first token's output equals the fp32 block's exactly (so its keys and values do too), and the later
    tokens still see the quantized weights; with 0 positions nothing changes."""
    import torch

    import rayml.llm
    from rayml.experiments import ganq as E

    lm = rayml.llm.pretrained("base")
    mcfg = lm.model.config.to_dict()
    names = E._layer_names([0])
    state = {k: v.detach().clone() for k, v in lm.model.state_dict().items()}
    blocks, _, _ = E._suffix_from({"model_config": mcfg, "start": 0, "state": state})
    x = torch.randn(2, 9, mcfg["d_model"], generator=torch.Generator().manual_seed(0))
    rope: dict = {}
    with torch.no_grad():
        ref = E._run_block(blocks[0], x, rope, mcfg)
        for name in names:
            w = blocks[0].get_submodule(name.split(".", 2)[2]).weight
            w.copy_(torch.round(w * 4) / 4)  # a coarse grid: every token's output moves
        plain = E._run_block(blocks[0], x, rope, mcfg)
        handles = E.keep_sink_intact(blocks, names, state, 1)
        kept = E._run_block(blocks[0], x, rope, mcfg)
    for h in handles:
        h.remove()
    assert E.keep_sink_intact(blocks, names, state, 0) == []
    assert not torch.allclose(plain[:, 0], ref[:, 0], atol=1e-4)
    assert torch.allclose(kept[:, 0], ref[:, 0], atol=1e-5)
    assert torch.allclose(kept[:, 1:], plain[:, 1:], atol=1e-1) and not torch.allclose(kept[:, 1:], ref[:, 1:], atol=1e-4)


def test_the_record_carries_a_power_estimate_per_paired_paper_claim(tiny_record):
    """metrics.power: the run as the pilot of each paired paper claim (rayml.evidence.claim_power), with
    the pilot's size equal to the claim's own pairs."""
    from rayml.experiments import ganq as E
    from rayml.results import evaluate_claims

    record = tiny_record("ganq")
    power = record["metrics"]["power"]
    paired = [c for c in E.CLAIMS if c.kind == "paper" and c.test]
    assert set(power) == {c.text for c in paired}
    evaluated = {c["text"]: c for c in evaluate_claims(record, E.CLAIMS)}
    for c in paired:
        est = power[c.text]
        assert est is not None and est["test"] == "wilcoxon" and est["power"] == 0.8
        assert f"over {est['pilot_pairs']} pairs" in evaluated[c.text]["measured"]


def test_the_pre_run_check_takes_a_real_models_own_settings():
    """`rayml run ganq --quick --set model=smollm2-135m` was refused before Ray started ("heldout_texts
    must be an integer >= 1, got None"): the registry's check saw the size's substrate settings, not the
    `real` entry run() uses. The check takes the effective config, as run() does."""
    from rayml.experiments import ganq as E

    for size in ("quick", "full"):
        E.EXPERIMENT.check({**E.SIZES[size], "model": "smollm2-135m"})
        E.EXPERIMENT.check({**E.SIZES[size], "model": "base"})
    with pytest.raises(ValueError, match="heldout_texts"):
        E.EXPERIMENT.check({**E.SIZES["quick"], "model": "smollm2-135m",
                            "real": {**E.SIZES["quick"]["real"], "heldout_texts": 0}})


def test_set_real_replaces_the_whole_entry_and_a_partial_one_is_refused():
    """`--set` replaces a top-level entry whole: `--set 'real={"heldout_texts": 144}'` used to run SmolLM2
    with the substrate's blocks [2, 3] and 4 calibration rows (only a missing text_len stopped it). A
    `real` entry must now give every real setting; a complete one reaches the run's config."""
    from rayml import experiments as X
    from rayml.experiments import ganq as E

    with pytest.raises(ValueError, match="unknown setting"):  # no dotted keys: the whole entry or nothing
        X.resolve_config(E.SIZES, "quick", {"model": "smollm2-135m", "real.heldout_texts": 144})
    for real, match in (({"heldout_texts": 144, "text_len": 128}, "real: missing blocks, calib_rows, row_len"),
                        ({**E.REAL_QUICK, "heldout_text": 144}, "real: unknown heldout_text"),
                        (None, "real must be a dict")):
        config = X.resolve_config(E.SIZES, "quick", {"model": "smollm2-135m", "real": real})
        with pytest.raises(ValueError, match=match):
            E.EXPERIMENT.check(config)
    config = X.resolve_config(E.SIZES, "quick", {"model": "smollm2-135m", "real": {**E.REAL_QUICK, "heldout_texts": 7}})
    E.EXPERIMENT.check(config)
    assert E._effective(config)["heldout_texts"] == 7 and E._effective(config)["blocks"] == E.REAL_QUICK["blocks"]
    E.EXPERIMENT.check({**E.SIZES["quick"], "real": None})  # the substrate ignores the entry
