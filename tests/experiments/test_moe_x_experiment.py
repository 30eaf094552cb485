"""rayml.experiments.moe_x: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("moe-x") == []


def test_sae_l1_is_chosen_under_the_sparsity_cap():
    from rayml.experiments.moe_x import choose_sae_l1

    cov = {1e-3: 0.50, 1e-2: 0.48, 1e-1: 0.45, 3e-1: 0.40}
    l0 = {1e-3: 0.60, 1e-2: 0.36, 1e-1: 0.07, 3e-1: 0.02}
    assert choose_sae_l1(cov, l0, cap=0.076) == (1e-1, True)   # best coverage among the sparse enough
    assert choose_sae_l1(cov, l0, cap=1.0) == (1e-3, True)     # no cap binds: best coverage
    assert choose_sae_l1(cov, l0, cap=0.01) == (3e-1, False)   # none sparse enough: the sparsest, flagged


def test_coverage_claims_have_the_untrained_model_as_control():
    from rayml.experiments.moe_x import CLAIMS

    paper = [c for c in CLAIMS if c.kind == "paper" and c.table == "per_model"]
    assert paper and all(any(k.name == "untrained" for k in c.controls) for c in paper)
    assert any(c.kind == "sanity" and c.b == {"method": "untrained", "metric": "coverage"} for c in CLAIMS)
