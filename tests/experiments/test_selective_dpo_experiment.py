"""rayml.experiments.selective_dpo: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("selective-dpo") == []


def test_agreement_beyond_the_planted_structure_can_fail_and_can_hold():
    """Orders that are the planted strata plus run-specific noise agree less than the structure-only
    order does (the claim fails); a consistent per-pair difficulty inside the strata makes it hold."""
    import numpy as np

    from rayml.experiments.selective_dpo import _agreement

    rng = np.random.default_rng(0)
    n = 240
    level = rng.choice([3, 4, 5], size=n)
    noisy = rng.random(n) < 0.1
    planted = level + 2.0 * noisy
    length = level * 4.0 + rng.integers(0, 3, size=n)
    rand = rng.random(n)
    only_structure = [planted + rng.normal(0, 1.0, n) for _ in range(3)]
    a = _agreement(only_structure, level, noisy, length, rand, np.random.default_rng(1))
    assert a["spearman_mean"] < a["structure_only"] and abs(a["within_stratum"]) < 0.2
    consistent = rng.normal(0, 1.0, n)
    beyond = [planted + consistent + rng.normal(0, 0.2, n) for _ in range(3)]
    b = _agreement(beyond, level, noisy, length, rand, np.random.default_rng(1))
    assert b["spearman_mean"] > b["structure_only"] and b["within_stratum"] > 0.8
    # the controls: a random order agrees with nothing, token length only through the level
    assert abs(b["random_scorer"]) < 0.2 and b["length_scorer"] < b["structure_only"]
    # identical for the same draws
    assert _agreement(beyond, level, noisy, length, rand, np.random.default_rng(1)) == b


def test_the_tie_rule_prefers_the_paper_beta_and_the_default_learning_rate_on_flat_scores():
    from rayml.experiments.selective_dpo import SIZES, _choose

    flat = {(b, g): 0.35 for b in (0.003, 0.01, 0.1) for g in (0.1, 0.3, 1.0, 3.0)}
    assert _choose(flat) == (0.01, 1.0)
    assert _choose({**flat, (0.1, 0.3): 0.36}) == (0.1, 0.3)          # a better score wins
    assert _choose({(0.01, 0.3): 0.2, (0.01, 3.0): 0.2}) == (0.01, 3.0)  # 3 is nearer 1 than 0.3 (log scale)
    assert _choose({(0.003, 1.0): 0.2, (0.1, 1.0): 0.2}) == (0.003, 1.0)  # 0.003 is nearer 0.01 than 0.1
    quick = SIZES["quick"]
    assert 1 in quick["lr_scale_grid"] and min(quick["lr_scale_grid"]) < 0.3 and 0.01 in quick["beta_grid"]
    assert 0.01 in quick["real"]["beta_grid"]
