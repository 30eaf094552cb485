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


def test_tuning_ties_go_to_the_default_not_to_the_grid_edge():
    """Equal validation accuracies (steps of 1 / n_val) used to pick the grid's lowest value, an edge
    (quick's GCN: 0.975 at every lr, 0.003 chosen); now the tied setting nearest the default wins."""
    from rayml.evidence import tune
    from rayml.experiments import graph_of_net as exp

    grids = {"gcn": {"lr": [0.003, 0.01, 0.03]}, "logreg": {"C": [0.1, 1.0, 10.0]},
             "label-prop": {"alpha": [0.5, 0.9, 0.99]}}
    flat = tune(lambda items: [0.975] * len(items), grids, lower_is_better=False, tie=exp.TIE,
                tie_break=exp._nearest_default)
    assert flat["gcn"].setting == {"lr": 0.01} and not flat["gcn"].edges
    assert flat["logreg"].setting == {"C": 1.0} and flat["label-prop"].setting == {"alpha": 0.99}
    best = tune(lambda items: [1.0 if s.get("lr") == 0.03 else 0.9 for _, s in items], {"gcn": grids["gcn"]},
                lower_is_better=False, tie=exp.TIE, tie_break=exp._nearest_default)
    assert best["gcn"].setting == {"lr": 0.03}  # a strictly better score still wins
