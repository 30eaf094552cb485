"""rayml.experiments.stop: every declared claim is wired to a number its run measures; the paper's
test setting (the graph known at training time, sensors gone and new) beside the control setting (the
true rewired graph); the strongest baseline is never its own control; the power estimate."""

import numpy as np
import pytest

from rayml import evidence, experiments, runtime
from rayml.experiments import stop as ex


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("stop") == []


def _rows(rows, flt):
    return sorted((r["seed"], r["value"]) for r in rows if all(r.get(k) == v for k, v in flt.items()))


def test_the_strongest_baseline_is_never_its_own_control(tiny_record):
    """A claim against the strongest baseline whose controls include that baseline compares it with
    itself (the old records: 'gwnet-like: fails (0.2458 vs 0.2458)')."""
    rec = tiny_record("stop")
    strongest = rec["config"]["budget"]["strongest_baseline"]
    assert strongest in ex.BASELINES and rec["baselines"]["best_baseline"]["name"] == strongest
    others = [rec["baselines"][f"baseline_{k}"]["name"] for k in range(2, len(ex.BASELINES) + 1)]
    assert sorted(others) == sorted(set(ex.BASELINES) - {strongest})
    assert rec["config"]["budget"]["baselines_ranked"] == [strongest, *others]
    rows = rec["tables"]["per_model"]
    against_best = [c for c in ex.CLAIMS if c.b and c.b.get("method") == "best-baseline"]
    assert len(against_best) == 2
    for claim in against_best:
        best = _rows(rows, claim.b)
        assert best and claim.controls
        for control in claim.controls:
            assert strongest not in control.name and strongest.replace("-", "_") not in control.metric
            assert _rows(rows, control.a) != best, control.name  # a different model's numbers
    for claim in rec["claims"]:
        for control in claim.get("controls", []):
            assert control["name"] != strongest


def _cfg(**kw):
    return dict(ex.SIZES["tiny"]) | kw


def test_data_holds_the_papers_test_setting():
    """The authors' sensor split (N / 1.3 in training, 10% of those new at test, 10% gone), new sensors
    present, and the two test graphs over the present sensors: the pre-shift road graph (stale) and the
    rewired one (true)."""
    assert ex._split_sizes(_cfg(nodes=40)) == (30, 3, 3)  # int(40 / 1.3), int(30 x 0.1), int(30 x 0.1)
    assert ex._split_sizes(_cfg(nodes=80)) == (61, 6, 6)
    assert ex._split_sizes(_cfg(nodes=716)) == (550, 55, 55)  # LargeST SD: main.py's int() arithmetic
    c = _cfg(nodes=30, drop_at_test=0.2)
    d = ex._data(c, 7)
    n_train = len(d["train_nodes"])
    assert n_train == 23 and len(d["new_nodes"]) == 2 and not set(d["new_nodes"]) & set(d["train_nodes"])
    assert set(d["observed"]) == set(d["train_nodes"]) | set(d["new_nodes"])
    assert len(d["kept"]) == n_train - int(0.2 * n_train)
    assert set(d["kept"]) <= set(d["train_nodes"]) and not set(d["present"]) & (set(d["train_nodes"]) - set(d["kept"]))
    assert set(d["present"]) == set(d["kept"]) | set(d["new_nodes"])
    pres = d["present"]
    for name, full in (("stale", d["edges"]), ("true", d["after"])):
        want = {(int(i), int(j)) for i, j in full.T if i in pres and j in pres}
        got = {(int(pres[i]), int(pres[j])) for i, j in d["ood_graph"][name].T}
        assert got == want
    assert {tuple(e) for e in d["ood_graph"]["stale"].T} != {tuple(e) for e in d["ood_graph"]["true"].T}
    assert len(ex._data(_cfg(nodes=30, drop_at_test=0.0), 7)["kept"]) == n_train


@pytest.mark.parametrize("test_graph", ex.TEST_GRAPHS)
def test_only_graph_models_see_the_test_graph_and_the_claims_use_the_configured_one(test_graph):
    c = _cfg(test_graph=test_graph)
    outs = {m: ex.run_task(("main", m, 2e-3 if m in ex.LEARNED else 1.0, 0, 11, 12), c)
            for m in ("stop", "gwnet-like", "ridge", "ridge-graph")}
    for o in outs.values():
        assert o["ood"] == o[f"ood_{test_graph}"] and o["inductive"] == o[f"inductive_{test_graph}"]
    for m in set(outs) - set(ex.GRAPH_MODELS):  # no graph
        assert outs[m]["ood_stale"] == outs[m]["ood_true"], m
    for m in ex.GRAPH_MODELS:
        assert outs[m]["ood_stale"] != outs[m]["ood_true"], m


def test_the_gate_on_the_shift_size_reads_the_stale_cost(tiny_record):
    """The gate compares GWNet-like's stale-graph MAE with (1 + STALE_COST) x its true-graph MAE, seed by seed."""
    rec = tiny_record("stop")
    rows = rec["tables"]["per_model"]
    stale = dict(_rows(rows, {"method": "gwnet-like", "split": "ood_stale"}))
    true = dict(_rows(rows, {"method": "gwnet-like", "split": "ood_true"}))
    ref = dict(_rows(rows, {"method": "gwnet-like", "split": "ood_true_plus_gate"}))
    assert ref and set(ref) == set(true) == set(stale)
    for k in ref:
        assert ref[k] == pytest.approx((1 + ex.STALE_COST) * true[k])
    gate = [c for c in ex.CLAIMS if c.kind == "sanity" and c.b.get("split") == "ood_true_plus_gate"]
    assert len(gate) == 1 and all(gate[0].text in c.gates for c in ex.CLAIMS if c.b.get("method") == "best-baseline")
    gw = rec["baselines"]["gwnet_like"]
    assert gw["stale_graph_cost"] == pytest.approx(gw["ood_stale_mae"] / gw["ood_true_mae"] - 1)


def test_power_estimate_for_the_papers_effect():
    seeds = range(6)
    diffs = np.array([0.01, 0.03, -0.005, 0.02, 0.015, 0.0])
    base = np.array([0.30, 0.31, 0.29, 0.30, 0.32, 0.28])
    rows = []
    for k in seeds:
        for split in ("ood", "inductive"):
            rows += [{"method": "best-baseline", "seed": k, "split": split, "value": base[k]},
                     {"method": "stop", "seed": k, "split": split, "value": base[k] - diffs[k]}]
    p = ex._power(rows, {"seeds": 6})
    sd = float(diffs.std(ddof=1))
    want = evidence.power_from_pilot(effect=0.1701 * base.mean(), sd=sd, test="wilcoxon")
    assert p["ood"]["paper_effect"]["pairs_needed"] == want["pairs_needed"]
    assert p["ood"]["paired_difference_sd"] == pytest.approx(sd)
    assert p["inductive"]["paper_relative_effect"] == 0.1844
    assert p["ood"]["measured_relative_effect"] == pytest.approx(diffs.mean() / base.mean())
    assert p["ood"]["pilot"]["pilot_pairs"] == 6


@pytest.mark.parametrize("overrides, match", [
    ({"test_graph": "rewired"}, "test_graph"),
    ({"drop_at_test": 1.0}, "drop_at_test"),
    ({"drop_at_test": -0.1}, "drop_at_test"),
    ({"max_increase": 1.0}, "max_increase"),
    ({"add_at_test": 0.9, "max_increase": 0.05, "nodes": 20}, "add_at_test"),
])
def test_bad_settings_are_rejected_before_any_work(overrides, match):
    runtime.reset_stats()
    with pytest.raises(ValueError, match=match):
        experiments.run("stop", size="tiny", overrides=overrides)
    assert runtime.stats()["tasks"] == 0


def test_model_view_signal_gain_reads_the_ridges_on_the_training_sensors(tiny_record):
    """R12: the gate's quantity on what the models see is ridge-graph vs ridge on the training sensors (the
    record's ``id`` split), not on the new sensors (``inductive_id``) nor the oracle's all-node ridge."""
    outs = [{"method": m, "seed": k, "id": [a, a], "inductive_id": [9.0]} for k, (r, g) in enumerate([(1.0, 0.8),
                                                                                                     (2.0, 1.9)])
            for m, a in (("ridge", r), ("ridge-graph", g))]
    got = ex._model_view_gain(outs)
    assert got["neighbour_gain_model_view"] == pytest.approx(1 - 2.7 / 3.0)
    assert got["neighbour_gain_model_view_min_seed"] == pytest.approx(0.05)
    assert got["neighbour_gain_model_view_seeds_above_gate"] == 1 and got["neighbour_gain_seeds"] == 2
    rec = tiny_record("stop")
    m, b = rec["metrics"], rec["baselines"]
    assert m["neighbour_gain_model_view"] == pytest.approx(1 - b["ridge_graph"]["id_mae"] / b["ridge"]["id_mae"])
    for name in ex.PERNODE:  # the per-node reference rows: ID and OOD, not baselines or controls
        assert set(m["reference"][name]) == {"id", "ood"} and name not in b
    assert set(m["kept_epoch_mean"]) == set(ex.LEARNED)
    assert all(1 <= v <= rec["config"]["epochs"] for v in m["kept_epoch_mean"].values())


@pytest.mark.parametrize("size", ["quick"])
def test_validation_mixes_day_types_like_the_ood_days(size):
    """R12: quick validated on two weekend days; its validation window must hold weekdays and weekend days,
    as the OOD days do."""
    from rayml.graphs import stop_data as sd

    c = ex.SIZES[size]
    val = {sd.is_weekend(d) for d in range(c["train_days"], c["train_days"] + c["val_days"])}
    ood = {sd.is_weekend(d) for d in range(c["shift_day"], c["days"])}
    assert ood == {True, False} and val == {True, False}
