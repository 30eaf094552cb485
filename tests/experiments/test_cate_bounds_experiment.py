"""rayml.experiments.cate_bounds: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("cate-bounds") == []


def test_the_tightness_claim_is_made_per_dataset_of_the_core_behind_its_validity_gate():
    from rayml.causal.cate_bounds import DATASETS
    from rayml.experiments import cate_bounds as E

    assert E.TIGHT_DATASETS == DATASETS and set(E.COMPARISON) == set(DATASETS)
    tight = [c for c in E.CLAIMS if c.kind == "paper"]
    assert [c.a["dataset"] for c in tight] == list(DATASETS) and all(c.pair_on == ("K", "seed") for c in tight)
    sanity = {c.text: c for c in E.CLAIMS if c.kind == "sanity"}
    for c in tight:
        ds = c.a["dataset"]
        # compared with the stronger fixed partition of its instrument; the other fixed one and random are controls
        assert c.b["method"] == E.COMPARISON[ds]
        assert {k.name for k in c.controls} == {"random", *({"plugin", "kmeans_agg"} - {E.COMPARISON[ds]})}
        # gated on the effect being reachable and on its own instrument's validity (session-6 review)
        valid = [sanity[g] for g in c.gates if g.startswith("validity")]
        assert len(c.gates) == 2 and len(valid) == 1 and valid[0].metric == f"metrics.by_dataset.{ds}.min_coverage"
