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
