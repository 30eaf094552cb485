"""The SSNI experiment's bookkeeping: worst-case robust accuracy, config checks."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.experiments import ssni as E


def _part(chunk, correct, levels):
    return {"chunk": chunk, "seed": chunk, "n": 2, "correct": correct, "levels": levels, "norms": {}}


def test_robust_is_the_per_image_worst_case_over_the_common_attacks():
    ones, zeros = np.array([1, 1], bool), np.array([0, 0], bool)
    correct = {}
    for name in E.DEFENCES:
        correct[(name, "clean")] = ones
        correct[(name, "pgd")] = np.array([1, 0], bool)
        if name != "classifier":
            correct[(name, "adaptive")] = np.array([0, 1], bool)
            if "_ssni_" in name:
                correct[(name, "adaptive_t")] = zeros
    levels = {(n, k): np.array([10.0, 20.0]) for n in E.OURS for k in ("clean", "pgd", "adaptive", "adaptive_t")}
    s = E._summarise([_part(0, correct, levels), _part(1, correct, levels)], ["pgd", "adaptive", "adaptive_t"])
    assert s["diffpure"]["pgd"] == 0.5 and s["diffpure"]["adaptive"] == 0.5 and s["diffpure"]["robust"] == 0.0
    assert s["classifier"]["robust"] == 0.5 and "adaptive" not in s["classifier"]
    assert s["gdmp_ssni_n"]["robust"] == 0.0 and s["gdmp_ssni_n"]["robust_with_t"] == 0.0
    assert s["gdmp_ssni_n"]["t_clean"] == 15.0 and "t_clean" not in s["gdmp"]


@pytest.mark.parametrize(
    "override, match",
    [({"attacks": ["adaptive"]}, "attacks"), ({"attacks": ["pgd", "cw"]}, "attacks"), ({"n_test": 0}, "n_test"),
     ({"chunk": 0}, "chunk")],
)
def test_bad_configs_are_rejected(override, match):
    config = {**E.SIZES["tiny"], **override}
    with pytest.raises(ValueError, match=match):
        E.run(config, 0)


def test_every_size_declares_the_same_settings():
    keys = set(E.SIZES["tiny"])
    assert all(set(c) == keys for c in E.SIZES.values())
    assert all(set(c) == set(E.BENCH_SIZES["tiny"]) for c in E.BENCH_SIZES.values())
