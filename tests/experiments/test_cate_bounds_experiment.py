"""rayml.experiments.cate_bounds: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("cate-bounds") == []


def test_the_tightness_claim_is_made_per_dataset_of_the_core():
    from rayml.causal.cate_bounds import DATASETS
    from rayml.experiments import cate_bounds as E

    assert E.TIGHT_DATASETS == DATASETS
    tight = [c for c in E.CLAIMS if "k-means partition" in c.text and c.kind != "sanity"]
    assert [c.a["dataset"] for c in tight] == list(DATASETS) and all(c.pair_on == ("K", "seed") for c in tight)
