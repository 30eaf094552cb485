"""rayml.experiments.multinoulli_scg: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("multinoulli-scg") == []


def test_dls_claim_is_a_tie_tolerant_sign_test_over_instances():
    from rayml.experiments import multinoulli_scg as ms

    claim = next(c for c in ms.CLAIMS if c.text.startswith("at no more evaluations"))
    assert claim.test == ms.SIGN and claim.tie == ms.TIE
    assert tuple(claim.pair_on) == ("objective", "instance")
    assert [c.name for c in claim.controls] == ["greedy"]


def test_power_and_per_objective_tables_by_hand():
    from rayml.experiments import multinoulli_scg as ms

    rows = []
    # coverage: SCG at the DLS level wins 0 and 1, ties 2 (within TIE), loses 3
    for i, (scg, dls) in enumerate([(0.99, 0.95), (1.0, 0.9), (0.9700, 0.9705), (0.90, 0.95)]):
        rows += [{"objective": "coverage", "instance": i, "method": "at_dls_evals", "metric": "ratio", "value": scg},
                 {"objective": "coverage", "instance": i, "method": ms.DLS, "metric": "ratio", "value": dls},
                 {"objective": "coverage", "instance": i, "method": ms.METHOD, "metric": "ratio", "value": 0.95},
                 {"objective": "coverage", "instance": i, "method": ms.MOMENTUM, "metric": "ratio", "value": 0.96},
                 {"objective": "coverage", "instance": i, "method": ms.METHOD, "metric": "evals", "value": 9.0}]
    power, cases = ms._power_and_cases(rows, ["coverage"], True)
    dls = [r for r in cases["rows"] if r["comparison"] == "scg at dls evals vs dls"]
    assert [(r["wins"], r["losses"], r["ties"]) for r in dls] == [(2, 1, 1)]
    mom = [r for r in cases["rows"] if r["comparison"] == "momentum vs path-integrated"]
    assert [(r["wins"], r["losses"], r["ties"]) for r in mom] == [(4, 0, 0)]
    assert power["at_dls_evals_vs_dls"]["pilot_wins"] == 2 and power["at_dls_evals_vs_dls"]["tie_share"] == 0.25
    assert power["trap_vs_random_search"] is None
    assert cases["dls_better_p"] == 0.875  # 1 DLS win of 3 non-tied pairs: P(Bin(3, 1/2) >= 1)
