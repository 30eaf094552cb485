"""rayml.experiments.gm_matching: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("gm-matching") == []


def test_convergence_controls_include_the_nearest_gm_subset_and_agree_on_the_full_set():
    import numpy as np

    from rayml.experiments import gm_matching as exp

    config = dict(n_points=60, dim=4, ks=[5, 60], levels=[0.4], conv_shift=10.0)
    rows = exp.convergence_one((0, 3), config)
    methods = {r["method"] for r in rows}
    assert methods == {"gm-matching", "herding", "random", "nearest-gm"}
    for setting in ("clean", "corrupted"):
        full = [r["value"] for r in rows if r["k"] == 60 and r["setting"] == setting]
        assert len(full) == 4 and np.allclose(full, full[0])  # every selector's k = n subset is the whole set
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
    assert all(c.b["method"] == exp.STRONGEST and {k.name for k in c.controls} == set(exp.BASELINES)
               for c in gated)
    assert all(c.gates == (exp.GATE.text,) for c in gated) and exp.GATE.kind == "sanity"
