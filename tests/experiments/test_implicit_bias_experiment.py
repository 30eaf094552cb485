"""rayml.experiments.implicit_bias: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("implicit-bias") == []


def _monotone_claim():
    from rayml.experiments import implicit_bias as ib

    (claim,) = [c for c in ib.CLAIMS if c.source == ib.SOURCE_MONO]
    return claim


def test_monotonicity_is_paired_with_the_relu_reference_on_the_same_seed(tiny_record):
    # issue 38 / session 17: GD's discretisation makes even the homogeneous ReLU net's smoothed margin drop, so the
    # paper's monotonicity is judged against that reference on the same (network, seed), not against a fixed bar
    claim = _monotone_claim()
    assert claim.test and claim.op == "<=" and tuple(claim.pair_on) == ("network", "seed") and claim.tie
    assert claim.b == {"group": "near-homogeneous", "metric": "reference_induced_drop"}
    assert any("close to gradient flow" in g for g in claim.gates)
    rows = tiny_record("implicit-bias")["tables"]["runs"]
    relu = {r["seed"]: r["value"] for r in rows if r["network"] == "relu" and r["metric"] == "induced_drop"}
    refs = [r for r in rows if r["metric"] == "reference_induced_drop"]
    assert {r["network"] for r in refs} == {"silu", "residual-silu"} and len(refs) == 2 * len(relu)
    assert all(r["value"] == relu[r["seed"]] for r in refs)


def test_monotonicity_claim_fails_when_the_near_homogeneous_nets_drop_more():
    import dataclasses

    from rayml import results

    claim = dataclasses.replace(_monotone_claim(), gates=())  # the claim alone, its gates are judged elsewhere
    rows = [{"network": net, "group": "near-homogeneous", "seed": s, "metric": m, "value": v}
            for net in ("silu", "residual-silu") for s in range(8)
            for m, v in (("induced_drop", 0.004), ("reference_induced_drop", 0.002), ("smoothed_drop_1n", 0.0))]
    record = {"tables": {"runs": rows}, "metrics": {"median_induced_drop": 0.004, "median_reference_induced_drop": 0.002,
                                                   "median_smoothed_drop_1n": 0.0}}
    (e,) = results.evaluate_claims(record, [claim])
    assert e["status"] == "fails" and e["pairs"] == {"wins": 0, "losses": 16, "ties": 0}
    assert e["controls"][0]["holds"]  # the control (no drop at all) passes: the claim is told apart from it


def test_networks_without_the_relu_reference_are_refused():
    import pytest

    from rayml.experiments import implicit_bias as ib

    config = {**ib.SIZES["tiny"], "networks": ["silu", "residual-silu", "tanh"]}
    with pytest.raises(ValueError, match="networks must include 'relu'"):
        ib._validate(config)
