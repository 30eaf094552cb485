"""rayml.experiments.gm_matching: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("gm-matching") == []


def test_convergence_controls_include_the_nearest_gm_subset_and_agree_on_the_full_set():
    import numpy as np

    from rayml.experiments import gm_matching as exp

    config = dict(n_points=60, dim=4, ks=[5, 60], levels=[0.4], conv_shift=10.0, cauchy_scale=10.0)
    rows = exp.convergence_one((0, 3), config)
    methods = {r["method"] for r in rows}
    assert methods == {"gm-matching", "herding", "random", "nearest-gm", "uniform-inliers", "data", *exp.VARIANTS}
    radius = {r["setting"]: r["value"] for r in rows if r["metric"] == "radius"}
    assert radius["heavy-tailed"] > radius["corrupted"] > radius["clean"] > 0   # the constant herding's O(1/k) carries
    assert {r["setting"] for r in rows} == set(exp.SETTINGS)
    for setting in exp.SETTINGS:
        full = [r["value"] for r in rows if r["k"] == 60 and r["setting"] == setting and r["method"] != "uniform-inliers"]
        assert len(full) == 6 and np.allclose(full, full[0])  # every selector's k = n subset is the whole set
    # under the shifted cluster the k nearest the GM are inliers: their mean misses the noisy GM by less
    # than herding to the noisy mean does at small k
    small = {r["method"]: r["value"] for r in rows if r["k"] == 5 and r["setting"] == "corrupted"}
    assert small["nearest-gm"] < small["herding"]


def test_clean_centre_distance_is_zero_at_the_clean_means_and_scales_with_the_spread():
    import numpy as np
    import pytest

    from rayml.experiments.gm_matching import clean_centre_distance

    X = np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 10.0], [10.0, 12.0]])
    y = np.array([0, 0, 1, 1])
    centres = {0: np.array([1.0, 0.0]), 1: np.array([10.0, 11.0])}
    assert clean_centre_distance(X, y, centres, {0: 1.0, 1: 1.0}) == 0.0
    moved = X + np.array([3.0, 4.0])  # every class mean 5 away from its centre
    assert np.isclose(clean_centre_distance(moved, y, centres, {0: 1.0, 1: 2.0}), (5.0 + 2.5) / 2)
    with pytest.raises(ValueError, match="X_sel"):
        clean_centre_distance(X[:0], y[:0], centres, {0: 1.0, 1: 1.0})


def test_claims_are_one_per_corruption_kind_against_the_strongest_baseline_behind_a_gate():
    from rayml.experiments import gm_matching as exp

    gated = [c for c in exp.CLAIMS if c.gates]
    assert [c.a["corruption"] for c in gated] == list(exp.CORRUPTIONS)
    assert "gm-filter-random" in exp.BASELINES                  # the review's level-agnostic filter (keep 0.5)
    assert all(c.b["method"] == exp.STRONGEST and {k.name for k in c.controls} == {*exp.BASELINES, exp.LEVEL_AWARE}
               for c in gated)
    # each kind is gated on its own precondition (label noise no longer passes the gate for shift)
    assert all(c.gates == (exp.gate_of(c.a["corruption"]).text,) for c in gated)
    assert all(exp.gate_of(k).kind == "sanity" and exp.gate_of(k).a["corruption"] == k for k in exp.CORRUPTIONS)


def test_level_aware_filter_keeps_the_inlier_share_and_the_full_data_row_is_reported():
    import numpy as np

    from rayml.experiments import gm_matching as exp

    config = dict(exp.SIZES["tiny"], fractions=[0.3], embed_dim=4, max_iter=30)
    rows = exp.robustness_one(("shift", 0.4, 0, 5), config)
    acc = {r["method"]: r["value"] for r in rows if r["metric"] == "accuracy"}
    assert set(acc) == {*exp.METHODS, exp.LEVEL_AWARE, exp.FULL_DATA, *exp.VARIANTS}
    assert all(0.0 <= v <= 1.0 for v in acc.values())
    assert [r["fraction"] for r in rows if r["method"] == exp.FULL_DATA] == [1.0]
    assert np.isfinite([r["value"] for r in rows if r["metric"] == "centre_distance"]).all()


def test_heavy_tailed_outliers_fail_the_size_test_that_a_rate_alone_passes():
    """Cauchy outliers: herding to the GM keeps an O(1/k)-like slope, but its error at the largest k is far
    above uniform sampling of the inliers: the size test can fail where the slope test cannot."""
    import numpy as np

    from rayml.experiments import gm_matching as exp

    config = dict(n_points=300, dim=4, ks=[10, 30, 100], levels=[0.4], conv_shift=10.0, cauchy_scale=10.0)
    rows = exp.convergence_one((0, 7), config)
    err = {(r["method"], r["setting"], r["k"]): r["value"] for r in rows}
    assert err[("gm-matching", "heavy-tailed", 100)] > 10 * err[("uniform-inliers", "heavy-tailed", 100)]
    assert err[("gm-matching", "corrupted", 100)] < err[("uniform-inliers", "corrupted", 100)]
    assert np.isfinite(list(err.values())).all()


def test_rate_slope_reads_the_median_over_seeds_so_one_huge_seed_cannot_flatten_it():
    """Session 8: under Cauchy outliers one seed's error can be 1e4 times the others'; the slope of the
    mean over seeds then follows that seed (flat here), the slope of the median does not (-1)."""
    import numpy as np

    from rayml.experiments import gm_matching as exp

    ks = [10, 100, 1000]
    rows = [{"method": "m", "setting": "heavy-tailed", "metric": "mean_error", "seed": s, "k": k,
             "value": (1e4 if s == 0 else 1.0 / k)} for s in range(5) for k in ks]
    assert np.isclose(exp._slope(rows, "m", ks, "heavy-tailed"), -1.0)
    slopes = exp.per_seed_slopes(rows, "m", ks, "heavy-tailed")
    assert np.allclose(slopes, [0.0, -1.0, -1.0, -1.0, -1.0])


def test_quick_convergence_seeds_are_their_own_draw_not_full_s():
    import numpy as np
    import pytest

    from rayml import runtime
    from rayml.experiments import gm_matching as exp

    assert exp.SIZES["quick"]["conv_stream"] >= 2 and exp.SIZES["full"].get("conv_stream", 0) == 0
    full_ss = np.random.SeedSequence(0).spawn(2)[0]
    quick_ss = np.random.SeedSequence(0, spawn_key=(exp.SIZES["quick"]["conv_stream"],))
    assert set(runtime.seeds(full_ss, 20)).isdisjoint(runtime.seeds(quick_ss, 20))
    with pytest.raises(ValueError, match="conv_stream"):
        exp._check_config(dict(exp.SIZES["tiny"], conv_stream=1))   # child 1 is the robustness stream
