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


def _regime_record(excess_in, excess_out, random_in=0.7, random_out=0.65):
    """A record whose per-regime rows give each instance the rounding's extra share over a random subset
    in and out of the regime, the random subset's own shares, and a second random draw's extra (0.01 in
    and out on alternate instances: nothing)."""
    rows = []
    for i, (ein, eout) in enumerate(zip(excess_in, excess_out)):
        for regime, e, rnd in (("in", ein, random_in), ("out", eout, random_out)):
            rows += [{"instance": i, "regime": regime, "method": "rounding_excess", "value": e},
                     {"instance": i, "regime": regime, "method": "rounding_mean", "value": rnd + e},
                     {"instance": i, "regime": regime, "method": "random_mean", "value": rnd},
                     {"instance": i, "regime": regime, "method": "random2_excess",
                      "value": 0.01 * ((i + (regime == "in")) % 2)}]
    mean = lambda method, regime: sum(r["value"] for r in rows if r["method"] == method and r["regime"] == regime) / len(excess_in)  # noqa: E731
    metrics = {"rounding_excess_in_regime": mean("rounding_excess", "in"),
               "rounding_excess_out_of_regime": mean("rounding_excess", "out"),
               "fraction_mean_rounding_in_regime": mean("rounding_mean", "in"),
               "fraction_mean_rounding_out_of_regime": mean("rounding_mean", "out"),
               "max_condition": 3.0, "min_condition": 0.1, "out_of_regime_edge": 0.48, "min_bound_minus_opt": 0.0,
               "fraction_best_rounding_in_regime": 0.9}
    baselines = {"random2_mean": {"excess_in_regime": mean("random2_excess", "in"),
                                  "excess_out_of_regime": mean("random2_excess", "out")},
                 "greedy": {"fraction_in_regime": 0.8}, "random_best": {"fraction_in_regime": 0.85}}
    return {"metrics": metrics, "baselines": baselines, "tables": {"per_regime": rows}}


def test_regime_claim_is_the_difference_in_differences_against_a_random_subset():
    """Session 10, R6: one rounding rose from out of the regime to in it (0.518 -> 0.554) as much as one
    random subset did (0.656 -> 0.694), so the rise was the instances'. The regime claim subtracts the
    random subset per instance: a rounding that only rides the instances' rise fails it (while its own
    in-vs-out rise is large), one whose extra share grows in the regime holds it, and the control (a second
    random draw in the rounding's place) fails, so the claim discriminates."""
    from rayml.experiments import eig_augment as E
    from rayml.results import evaluate_claims

    n = 12
    text = E._constant.text
    # R6's pattern: the same extra share (-0.14 +- noise) in and out, the plain shares rising by 0.05
    flat = _regime_record([-0.14 + 0.001 * (i % 3 - 1) for i in range(n)],
                          [-0.14 + 0.001 * ((i + 1) % 3 - 1) for i in range(n)])
    assert flat["metrics"]["fraction_mean_rounding_in_regime"] > flat["metrics"]["fraction_mean_rounding_out_of_regime"]
    out = {c["text"]: c for c in evaluate_claims(flat, E.CLAIMS)}
    assert out[text]["holds"] is False
    rising = _regime_record([0.05 + 0.001 * i for i in range(n)], [0.0] * n)
    out = {c["text"]: c for c in evaluate_claims(rising, E.CLAIMS)}
    assert out[text]["holds"] is True and out[text]["p_value"] == 2.0 ** -n
    assert out[text]["controls"][0]["holds"] is False and out[text]["status"] == "holds"


def test_the_second_random_draw_leaves_the_first_draws_unchanged():
    """The null control's draw is a third spawned child: the roundings and the random subsets keep the
    seeds they had with two children (records before and after it agree on them)."""
    import numpy as np

    two = np.random.SeedSequence([7, 3]).spawn(2)
    three = np.random.SeedSequence([7, 3]).spawn(3)
    for a, b in zip(two, three):
        assert np.array_equal(a.generate_state(4), b.generate_state(4))


def test_per_level_table_pairs_the_rounding_with_the_random_subset(tiny_record):
    record = tiny_record("eig-augment")
    runs, levels = record["tables"]["runs"], record["tables"]["per_level"]
    instances = len({r["instance"] for r in runs})
    assert sorted(r["share"] for r in levels) == sorted(record["config"]["shares"])
    val = {(r["instance"], r["share"], r["method"]): r["value"] for r in runs}
    for row in levels:
        assert row["wins"] + row["losses"] + row["ties"] == row["pairs"] == instances
        diffs = [val[(i, row["share"], "rounding_mean")] - val[(i, row["share"], "random_mean")]
                 for i in range(instances)]
        assert row["wins"] == sum(d > 0 for d in diffs) and abs(row["rounding_excess"] - sum(diffs) / instances) < 1e-12
        assert all(abs(val[(i, row["share"], "rounding_excess")] - d) < 1e-12 for i, d in enumerate(diffs))
