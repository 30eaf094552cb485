"""rayml.experiments.parallel_sampling: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("parallel-sampling") == []


def test_the_bench_runs_at_tiny_size_and_its_claims_resolve(ray_session):
    from rayml import experiments, registry, results

    rec = experiments.bench("parallel-sampling", size="tiny", seed=1)
    results.validate_record(rec)
    assert len(rec["claims"]) == len(registry.get("parallel-sampling").load_experiment().bench_claims)
    assert rec["metrics"]["identical_results"] is True and rec["metrics"]["grad_queries"] > 0
