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
    assert rec["baselines"]["other_baseline"]["name"] in set(ex.BASELINES) - {strongest}
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
    """Sensors gone (drop_at_test of the training ones), new sensors present, and the two test graphs
    over the present sensors: the pre-shift road graph (stale) and the rewired one (true)."""
    c = _cfg(nodes=30, drop_at_test=0.2)
    d = ex._data(c, 7)
    n_train = len(d["train_nodes"])
    assert len(d["kept"]) == n_train - round(0.2 * n_train)
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
    outs = {m: ex.run_task(("main", m, 2e-3, 0, 11, 12), c) for m in ("stop", "gwnet-like")}
    for o in outs.values():
        assert o["ood"] == o[f"ood_{test_graph}"] and o["inductive"] == o[f"inductive_{test_graph}"]
    assert outs["stop"]["ood_stale"] == outs["stop"]["ood_true"]  # STOP takes no graph
    assert outs["gwnet-like"]["ood_stale"] != outs["gwnet-like"]["ood_true"]


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
])
def test_bad_settings_are_rejected_before_any_work(overrides, match):
    runtime.reset_stats()
    with pytest.raises(ValueError, match=match):
        experiments.run("stop", size="tiny", overrides=overrides)
    assert runtime.stats()["tasks"] == 0
