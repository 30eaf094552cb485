"""rayml.experiments.ssni: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("ssni") == []


def test_robustness_claims_are_incomplete_where_an_attack_did_not_converge():
    """Issue 40 audit: the full record's two holds at l_inf 0.2 stood on adaptive attacks still moving at
    the schedule's cap. Each radius's SSNI-vs-DiffPure claims are gated on every defence's attack having
    converged at that radius (and on the attack working), so the same record with one radius unconverged
    makes exactly that radius's claims incomplete."""
    import copy
    import pathlib

    from rayml import records
    from rayml.experiments import ssni
    from rayml.results import evaluate_claims

    path = pathlib.Path(__file__).resolve().parents[2] / "docs" / "records" / "ssni@full.json"
    record = copy.deepcopy(records.load_record(path))
    record["metrics"]["eps100"]["attack"]["max_abs_schedule_change"] = 0.0       # converged
    record["metrics"]["eps200"]["attack"]["max_abs_schedule_change"] = 2 * ssni.TOLERANCE  # still moving
    out = {c["text"]: c for c in evaluate_claims(record, ssni.CLAIMS)}
    robust = {lab: [t for t in out if t.startswith("SSNI-") and "DiffPure's curve" in t and f"l_inf {lab};" in t]
              for lab in ("eps100", "eps200")}
    assert all(len(v) == 2 for v in robust.values())
    for text in robust["eps200"]:
        assert out[text]["status"] == "incomplete"
        assert out[text]["gated_by"] == [ssni._converged_every("eps200").text]
    for text in robust["eps100"]:
        assert "gated_by" not in out[text] and out[text]["status"] != "incomplete"
        assert ssni._converged_every("eps100").text in out[text]["gates"]
