"""rayml.experiments.inrflow: claims wired to measured numbers; the tested claims pair every (class, seed,
draw); bad settings rejected before work."""

import numpy as np
import pytest

from rayml import experiments


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("inrflow") == []


def test_tested_claims_pair_every_shape_class_seed_and_draw(tiny_record, tmp_path):
    from rayml import results
    from rayml.experiments import inrflow as E

    record = tiny_record("inrflow")  # the session's shared tiny run; tiny's curve is [6, 12]
    assert record["config"]["curve"] == [6, 12]
    cfg = record["config"]
    rows = record["tables"]["draws"]
    n_classes = 4  # sphere, torus, box, chair
    for claim, c in zip(record["claims"], E.CLAIMS):
        if c.table != "draws":
            continue
        pairs = cfg["seeds"] * cfg["draws"] * (n_classes if c.a["level"] == "class" else 1)
        assert f"over {pairs} pairs of ({', '.join(c.pair_on)})" in claim["measured"], claim["measured"]
    # the per-class rows average back to the whole-set rows, and the claims' means are the set rows' means
    for method in ("inrflow", "pointtf", "data"):
        for metric in ("mmd_cd", "cov_cd", "mmd_emd", "cov_emd"):
            sel = [r for r in rows if r["modality"] == "points" and r["method"] == method and r["metric"] == metric]
            for seed in range(cfg["seeds"]):
                for d in range(cfg["draws"]):
                    cls = [r["value"] for r in sel if r["seed"] == seed and r["draw"] == d and r["level"] == "class"]
                    whole = [r["value"] for r in sel if r["seed"] == seed and r["draw"] == d and r["level"] == "set"]
                    assert len(cls) == n_classes and len(whole) == 1
                    assert np.mean(cls) == pytest.approx(whole[0], abs=1e-9)  # 12 clouds: 3 per class
            if method == "inrflow":
                assert record["metrics"][metric] == pytest.approx(
                    np.mean([r["value"] for r in sel if r["level"] == "set"]), abs=1e-9)
    wins = record["metrics"]["case_wins"]["points/pointtf/cov_cd"]
    assert sum(wins.values()) == cfg["seeds"] * cfg["draws"] * n_classes
    # the training curve's last point (the EMA snapshot at the last step) is the draw-0 score of the final model
    curve = record["tables"]["curve"]
    untrained = ("data", *E.TRIVIAL["image"], *E.TRIVIAL["points"])  # no training curve
    for r in (r for r in rows if r["draw"] == 0 and r["level"] == "set" and r["method"] not in untrained
              and r["metric"] in ("fid", "mmd_cd", "cov_cd")):
        last = [c["value"] for c in curve if c["step"] == 12 and c["metric"] == r["metric"]
                and c["method"] == r["method"] and c["seed"] == r["seed"]]
        assert last == [pytest.approx(r["value"], abs=1e-9)]
    assert {c["step"] for c in curve} == {6, 12}
    # the list: equal-size baselines, generation at an unseen resolution (INRFlow only), samples as PNG
    assert record["metrics"]["param_gap"] <= 0.1
    # the trivial baselines are scored on every draw and gate every paper claim of their modality
    assert np.isfinite(record["baselines"]["gaussian"]["fid"]) and np.isfinite(record["metrics"]["trivial_mmd_cd"])
    for method in ("gaussian", "blob", "sphere"):
        assert any(r["method"] == method for r in rows)
    gates = {c.text for c in E.CLAIMS if c.kind == "sanity" and c.text.startswith(("images:", "point clouds:"))}
    assert len(gates) == 2 and all(c.gates and set(c.gates) <= gates for c in E.CLAIMS if c.kind == "paper")
    # the pixel-space resolution test: one row per (resolution, seed, digit, decoding)
    cond = record["tables"]["resolution"]
    assert len(cond) == len(cfg["cond_res"]) * cfg["seeds"] * cfg["n_cond"] * 3
    written = {str(p).rsplit("/", 1)[-1] for p in results.write_outputs(record, tmp_path, E.plots(record))}
    for name in ("distances", "digit_samples", "cloud_samples", "resolutions", "point_classes", "loss"):
        assert f"{name}.png" in written and (tmp_path / f"{name}.png").stat().st_size > 1000
    # the image draws are scored against disjoint held-out slices, so they differ
    fids = [r["value"] for r in rows if r["modality"] == "image" and r["method"] == "inrflow"]
    assert len(fids) == cfg["seeds"] * cfg["draws"] and len(set(fids)) == len(fids)


@pytest.mark.parametrize("override", [{"lr_grid": []}, {"cond_res": [16]}, {"cond_res": 28}, {"n_cond": 0}, {"lr_extend": -1}, {"seeds": 0}, {"hidden": 18},
                                      {"query_fraction": 1.5}, {"n_eval": 4}, {"draws": 0},
                                      {"n_eval": 200, "draws": 3}, {"curve": [0]}, {"curve": [13]}, {"show_res": 64}, {"show_res": [1]}])
def test_bad_settings_are_rejected_before_work(override):
    with pytest.raises(ValueError):
        experiments.run("inrflow", size="tiny", overrides=override)
