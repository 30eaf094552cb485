"""rayml.experiments.eig_augment: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("eig-augment") == []


def test_power_estimates_by_hand():
    from rayml.experiments.eig_augment import power_estimates

    rows = []
    for i in range(6):  # the rounding gains in the regime on 5 of 6 instances; greedy beats best-of-R on all
        rows += [{"instance": i, "regime": "in", "method": "rounding_mean", "value": 0.6 if i else 0.4},
                 {"instance": i, "regime": "out", "method": "rounding_mean", "value": 0.5},
                 {"instance": i, "regime": "in", "method": "rounding_best", "value": 0.8},
                 {"instance": i, "regime": "in", "method": "greedy", "value": 0.9}]
    power = power_estimates(rows)
    assert power["rounding_in_vs_out"]["pilot_wins"] == 5 and power["rounding_in_vs_out"]["pilot_losses"] == 1
    assert power["rounding_in_vs_out"]["pairs_needed"] is not None
    assert power["best_of_r_vs_greedy_in_regime"]["pairs_needed"] is None  # no effect in the claim's direction
    assert power["random_subset_in_vs_out"] is None  # no random-subset rows
