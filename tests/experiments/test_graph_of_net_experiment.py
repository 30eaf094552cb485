"""rayml.experiments.graph_of_net: every declared claim is wired to a number its run measures, and the
experiment rejects bad settings before any work."""

import pytest

from rayml.experiments import graph_of_net as exp


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("graph-of-net") == []


@pytest.mark.parametrize("key, value, match", [
    ("datasets", ["digits", "cifar"], "datasets"), ("datasets", [], "datasets"), ("degree", 0, "degree"), ("homophily", 1.5, "homophily"),
    ("n_graphs", 5000, "n_graphs"), ("lr_grid", [0.0], "lr_grid"), ("lam", -1.0, "lam"),
    ("labels_per_class", 10, "labels_per_class"), ("hidden", 1.5, "hidden"),
])
def test_bad_settings_are_rejected_before_any_work(key, value, match):
    config = {**exp.SIZES["tiny"], key: value}
    with pytest.raises(ValueError, match=match):
        exp.run(config, 0)


def test_paper_setting_is_inside_every_tuning_grid():
    for size in ("quick", "full"):
        assert exp.PAPER_LR in exp.SIZES[size]["lr_grid"]
        assert exp.PAPER_ALPHA in exp.SIZES[size]["alpha_grid"]
    assert all(c.source for c in exp.CLAIMS if c.kind == "paper")
