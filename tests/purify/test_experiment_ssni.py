"""The SSNI experiment's bookkeeping: the worst case, the curve interpolation, the equal-clean gap, config checks."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.experiments import ssni as E

CONFIG = {**E.SIZES["tiny"], "t_grid": [50.0, 150.0]}


def _part(start, correct, levels, norms):
    return {"chunk": start, "seed": start, "start": start, "n": 2, "correct": correct, "levels": levels, "norms": norms}


def _fake_parts(clean, robust_by_attack):
    """Two chunks of 2 images, 1 replicate; ``clean[name]`` / ``robust_by_attack[name][attack]``: per-image 0/1."""
    parts = []
    for start in (0, 2):
        correct, levels = {}, {}
        for lab in E.LABELS:
            correct[(lab, "classifier", "clean")] = np.ones((1, 2), bool)
            correct[(lab, "classifier", "pgd")] = np.zeros((1, 2), bool)
            for name in E.defences(CONFIG):
                correct[(lab, name, "clean")] = np.array(clean[name][start:start + 2], bool)[None]
                for attack, v in robust_by_attack[name].items():
                    correct[(lab, name, attack)] = np.array(v[start:start + 2], bool)[None]
                if "_ssni_" in name:
                    for key in ("clean", "pgd", "adaptive_1", "adaptive_t"):
                        levels[(lab, name, key)] = np.array([10.0, 20.0])
        norms = {("all", "clean"): np.array([1.0, 2.0]), **{(lab, "pgd"): np.array([3.0, 4.0]) for lab in E.LABELS}}
        parts.append(_part(start, correct, levels, norms))
    return parts


def _attacks(pgd, a0, a1, bpda, through_t=None):
    d = {"pgd": pgd, "adaptive_0": a0, "adaptive_1": a1, "bpda": bpda}
    if through_t is not None:
        d["adaptive_t"] = through_t
    return d


def test_robust_is_the_per_image_worst_case_including_the_attack_through_t():
    ones = [1, 1, 1, 1]
    clean = {n: ones for n in E.defences(CONFIG)}
    attacks = {n: _attacks([1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]) for n in E.defences(CONFIG)}
    attacks["diffpure_ssni_n"] = _attacks(ones, ones, ones, ones, through_t=[0, 1, 1, 1])
    attacks["diffpure_ssni_l"] = _attacks(ones, ones, [1, 1, 1, 0], ones, through_t=ones)
    metrics, baselines, rows, _ = E._summarise(_fake_parts(clean, attacks), CONFIG)
    lab = E.LABELS[0]
    assert baselines[lab]["diffpure_t50"]["robust"] == 0.5
    assert metrics[lab]["diffpure_ssni_n"]["robust"] == 0.75  # only the attack through t(x) finds image 0
    assert metrics[lab]["diffpure_ssni_l"]["robust"] == 0.75
    assert metrics[lab]["diffpure_ssni_l"]["schedule"] == [1.0, 0.75]
    assert metrics[lab]["diffpure_ssni_l"]["schedule_drop"] == 0.25
    assert metrics[lab]["diffpure_ssni_n"]["t_clean"] == 15.0


def test_interpolation_brackets_the_target_clean_accuracy():
    clean = np.array([0.9, 0.7, 0.5])
    robust = np.array([[[0.0, 0.0]], [[1.0, 0.0]], [[1.0, 1.0]]])
    out, outside = E._interpolate(clean, robust, 0.8)
    assert not outside and np.allclose(out, [[0.5, 0.0]])
    out, outside = E._interpolate(clean, robust, 0.95)
    assert outside and np.allclose(out, robust[0])
    out, outside = E._interpolate(clean, robust, 0.5)
    assert not outside and np.allclose(out, robust[2])


def test_equal_clean_gap_is_zero_for_a_point_on_the_curve_and_positive_above_it():
    # DiffPure t50: clean 1.0, robust 0.25; t150: clean 0.5, robust 0.75; control t100 and SSNI at clean 0.75
    clean = {"diffpure_t50": [1, 1, 1, 1], "diffpure_t150": [1, 1, 0, 0], "diffpure_t100": [1, 1, 1, 0],
             "diffpure_ssni_n": [1, 1, 1, 0], "diffpure_ssni_l": [1, 1, 1, 0]}
    r = lambda v: _attacks(v, v, v, v)  # noqa: E731
    attacks = {"diffpure_t50": r([1, 0, 0, 0]), "diffpure_t150": r([1, 1, 1, 0]), "diffpure_t100": r([1, 1, 0, 0]),
               "diffpure_ssni_n": {**r([1, 1, 1, 1]), "adaptive_t": [1, 1, 1, 1]},
               "diffpure_ssni_l": {**r([1, 0, 0, 0]), "adaptive_t": [1, 0, 0, 0]}}
    metrics, baselines, rows, curve = E._summarise(_fake_parts(clean, attacks), CONFIG)
    lab = E.LABELS[1]
    assert baselines[lab]["diffpure_t100"]["gap_at_equal_clean"] == pytest.approx(0.0)
    assert metrics[lab]["diffpure_ssni_n"]["curve_robust_at_clean"] == pytest.approx(0.5)
    assert metrics[lab]["diffpure_ssni_n"]["gap_at_equal_clean"] == pytest.approx(0.5)
    assert metrics[lab]["diffpure_ssni_l"]["gap_at_equal_clean"] == pytest.approx(-0.25)
    gaps = [x["value"] for x in rows if x["radius"] == lab and x["defence"] == "diffpure_ssni_n"]
    assert len(gaps) == 4 and np.mean(gaps) == pytest.approx(0.5)
    assert {x["defence"] for x in curve} == set(E.defences(CONFIG))


@pytest.mark.parametrize(
    "override, match",
    [({"n_test": 0}, "n_test"), ({"chunk": 0}, "chunk"), ({"radii": [0.1]}, "radii"), ({"t_grid": [50.0]}, "t_grid"),
     ({"t_grid": [50.0, 100.0]}, "control_t"), ({"schedule": [[4, 2], [2, 2]]}, "schedule"),
     ({"replicates": 0}, "replicates")],
)
def test_bad_configs_are_rejected(override, match):
    config = {**E.SIZES["tiny"], **override}
    with pytest.raises(ValueError, match=match):
        E.run(config, 0)


def test_every_size_declares_the_same_settings():
    keys = set(E.SIZES["tiny"])
    assert all(set(c) == keys for c in E.SIZES.values())
    assert all(set(c) == set(E.BENCH_SIZES["tiny"]) for c in E.BENCH_SIZES.values())
    assert all(c["radii"] == list(E.RADII) for c in E.SIZES.values())
