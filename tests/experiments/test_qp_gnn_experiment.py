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
