"""rayml.experiments.qp_gnn: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("qp-gnn") == []


def test_paired_claims_pair_trained_models_and_feasibility_has_the_q_blind_control():
    from rayml.experiments import qp_gnn as exp

    on_errors = [c for c in exp.CLAIMS if c.test and c.table == "errors"]
    assert on_errors and all(c.pair_on == ("seed",) for c in on_errors)  # one mean error per trained model
    assert exp.SIZES["quick"]["seeds"] >= 5  # fewer pairs cannot reach p < 0.05 one-sided
    feas = [c for c in exp.CLAIMS if c.kind == "paper" and c.metric == "metrics.feasibility.train_emb_max"]
    assert len(feas) == 1 and "lp_gnn" in {ctl.name for ctl in feas[0].controls}
    assert all(c.kind == "sanity" for c in exp.CLAIMS if c.metric == "metrics.separation.qp_gnn_mi_max")


def test_twin_and_width_claims_are_paired_over_seeds_with_a_q_blind_control():
    from rayml.experiments import qp_gnn as exp

    twin = [c for c in exp.CLAIMS if c.metric.startswith("metrics.twin.")]
    assert len(twin) == 2
    for c in twin:
        assert c.test and c.pair_on == ("seed",) and c.b["method"] == "q-blind-floor"
        assert [k.a["method"] for k in c.controls] == ["lp-gnn"]
    width = [c for c in exp.CLAIMS if c.metric == "metrics.mi_objective.width_gain"]
    assert len(width) == 1 and width[0].test and width[0].table == "width_gain"
    assert [k.a["method"] for k in width[0].controls] == ["lp-gnn-mi"]
    assert "twin_seeds" not in exp.SIZES["quick"]  # the twins train one model per seed, like the main runs
