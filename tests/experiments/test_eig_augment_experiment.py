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
    """A record whose per-regime rows give each instance the rounding's extra share over a same-size
    random subset in and out of the regime, that subset's own shares, and the controls' extra shares: a
    second same-size draw's and a random k-subset's (0.01 in and out on alternate instances: nothing)."""
    rows = []
    for i, (ein, eout) in enumerate(zip(excess_in, excess_out)):
        for regime, e, rnd in (("in", ein, random_in), ("out", eout, random_out)):
            rows += [{"instance": i, "regime": regime, "method": "rounding_excess", "value": e},
                     {"instance": i, "regime": regime, "method": "rounding_mean", "value": rnd + e},
                     {"instance": i, "regime": regime, "method": "samesize_mean", "value": rnd},
                     {"instance": i, "regime": regime, "method": "samesize2_excess",
                      "value": 0.01 * ((i + (regime == "in")) % 2)},
                     {"instance": i, "regime": regime, "method": "random_excess",
                      "value": 0.1 + 0.01 * ((i + (regime == "out")) % 2)}]
    mean = lambda method, regime: sum(r["value"] for r in rows if r["method"] == method and r["regime"] == regime) / len(excess_in)  # noqa: E731
    metrics = {"rounding_excess_in_regime": mean("rounding_excess", "in"),
               "rounding_excess_out_of_regime": mean("rounding_excess", "out"),
               "fraction_mean_rounding_in_regime": mean("rounding_mean", "in"),
               "fraction_mean_rounding_out_of_regime": mean("rounding_mean", "out"),
               "max_condition": 3.0, "min_condition": 0.1, "out_of_regime_edge": 0.48, "min_bound_minus_opt": 0.0,
               "fraction_best_rounding_in_regime": 0.9}
    baselines = {"samesize2_mean": {"excess_in_regime": mean("samesize2_excess", "in"),
                                    "excess_out_of_regime": mean("samesize2_excess", "out")},
                 "random_mean": {"excess_in_regime": mean("random_excess", "in"),
                                 "excess_out_of_regime": mean("random_excess", "out")},
                 "greedy": {"fraction_in_regime": 0.8}, "random_best": {"fraction_in_regime": 0.85}}
    return {"metrics": metrics, "baselines": baselines, "tables": {"per_regime": rows}}


def test_regime_claim_is_the_difference_in_differences_against_a_random_subset():
    """Session 10, R6: one rounding rose from out of the regime to in it (0.518 -> 0.554) as much as one
    random subset did (0.656 -> 0.694), so the rise was the instances'. The regime claim subtracts the
    random subset (since session 14 one of the rounding's size, draw by draw) per instance: a rounding
    that only rides the instances' rise fails it (while its own in-vs-out rise is large), one whose extra
    share grows in the regime holds it, and the controls (a second same-size draw and a random k-subset
    in the rounding's place) fail, so the claim discriminates."""
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
    assert [c["holds"] for c in out[text]["controls"]] == [False, False] and out[text]["status"] == "holds"
    # a random k-subset whose extra share over the same-size subset grows in the regime as much passes its
    # control, and the claim is then not discriminating
    for r in rising["tables"]["per_regime"]:
        if r["method"] == "random_excess":
            r["value"] = next(q["value"] for q in rising["tables"]["per_regime"] if q["method"] == "rounding_excess"
                              and q["instance"] == r["instance"] and q["regime"] == r["regime"]) + 0.001
    for regime, key in (("in", "excess_in_regime"), ("out", "excess_out_of_regime")):
        rising["baselines"]["random_mean"][key] = sum(
            r["value"] for r in rising["tables"]["per_regime"]
            if r["method"] == "random_excess" and r["regime"] == regime) / n
    out = {c["text"]: c for c in evaluate_claims(rising, E.CLAIMS)}
    assert out[text]["holds"] is True and out[text]["controls"][1]["holds"] is True
    assert out[text]["status"] == "not discriminating"


def test_the_added_draws_leave_the_first_draws_unchanged():
    """The same-size draws are the third and fourth spawned children: the roundings and the random
    k-subsets keep the seeds they had with two children (records before and after agree on them)."""
    import numpy as np

    two = np.random.SeedSequence([7, 3]).spawn(2)
    four = np.random.SeedSequence([7, 3]).spawn(4)
    for a, b in zip(two, four):
        assert np.array_equal(a.generate_state(4), b.generate_state(4))


def test_per_level_table_pairs_the_rounding_with_the_same_size_subset(tiny_record):
    record = tiny_record("eig-augment")
    runs, levels = record["tables"]["runs"], record["tables"]["per_level"]
    instances = len({r["instance"] for r in runs})
    assert sorted(r["share"] for r in levels) == sorted(record["config"]["shares"])
    val = {(r["instance"], r["share"], r["method"]): r["value"] for r in runs}
    for row in levels:
        assert row["wins"] + row["losses"] + row["ties"] == row["pairs"] == instances
        diffs = [val[(i, row["share"], "rounding_mean")] - val[(i, row["share"], "samesize_mean")]
                 for i in range(instances)]
        assert row["wins"] == sum(d > 0 for d in diffs) and abs(row["rounding_excess"] - sum(diffs) / instances) < 1e-12
        assert all(abs(val[(i, row["share"], "rounding_excess")] - d) < 1e-12 for i, d in enumerate(diffs))
        diffs_k = [val[(i, row["share"], "rounding_mean")] - val[(i, row["share"], "random_mean")]
                   for i in range(instances)]
        assert row["k_subset_wins"] == sum(d > 0 for d in diffs_k)
        assert abs(row["rounding_excess_k"] - sum(diffs_k) / instances) < 1e-12


def test_same_size_baselines_match_the_roundings_distinct_counts(tiny_record):
    """Per instance and level, both same-size draws keep on average exactly as many distinct indices as
    the rounding's draws did (draw by draw in the core; here their means), and with k = 4 of m = 10 the
    i.i.d. rounding keeps fewer than k on average (what makes the k-subset an unfair baseline)."""
    record = tiny_record("eig-augment")
    k = record["config"]["k"]
    val = {(r["instance"], r["share"], r["method"]): r["value"] for r in record["tables"]["runs"]}
    keys = {(i, s) for i, s, _ in val}
    for i, s in keys:
        size = val[(i, s, "rounding_size")]
        assert 1 <= size <= k
        assert val[(i, s, "samesize_size")] == size and val[(i, s, "samesize2_size")] == size
    assert record["metrics"]["rounding_distinct_mean"] < k
