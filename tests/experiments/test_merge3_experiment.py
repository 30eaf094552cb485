"""rayml.experiments.merge3: every declared claim is wired to a number its run measures, and a run
whose endpoints miss the gate decides no paper claim."""

from rayml.experiments import merge3 as exp


def test_tiny_run_fails_the_gate_loudly_and_decides_nothing(unmeasured_claims):
    # at tiny size the endpoints get 2 fine-tuning steps, so they miss the gate (>= 0.8 on their own
    # task): every number a paper claim reads must then be missing, and only those
    missing = unmeasured_claims("merge3")
    paper_paths = []
    for c in exp.CLAIMS:
        if c.kind == "paper":
            paper_paths += [c.metric] + ([c.compare] if isinstance(c.compare, str) else [])
            paper_paths += [ctl.metric for ctl in c.controls]
    assert missing == paper_paths
    assert all(p.startswith("metrics.decided.") for p in paper_paths)
    # the sanity claims (the gate itself, the budget bookkeeping) are measured
    assert not any(c.metric in missing for c in exp.CLAIMS if c.kind == "sanity")


def test_gated_values_are_none_when_the_gate_fails():
    vals = {"test": {"merge3": 0.9, "base": 0.0}, "winners_curse": {"merge3": 0.05}}
    assert exp._gated(vals, True) == vals
    assert exp._gated(vals, False) == {"test": {"merge3": None, "base": None}, "winners_curse": {"merge3": None}}


def test_claims_name_their_controls_and_sources():
    paper = [c for c in exp.CLAIMS if c.kind == "paper"]
    assert len(paper) == 8 and all(c.source for c in paper)
    assert exp.GATE == {"endpoint_min": 0.8, "base_max": 0.2}
    assert exp.SIZES["quick"]["test_items"] >= 500 and exp.SIZES["quick"]["gate_items"] >= 500
