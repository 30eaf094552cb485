"""rayml.experiments.fedag: claims wired to measured numbers, the
communication accounting, bad settings rejected before any work."""

from __future__ import annotations

import pytest

from rayml import experiments, runtime


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("fedag") == []


def test_communication_is_counted(tiny_record):
    # the session's shared tiny run (one held-out domain, 2 rounds, the lr tuned on a 2-point grid: its
    # tuning-phase messages must not enter the counts); worker-count invariance is the cluster test's
    # (tests/test_scaleout_cache.py)
    one = tiny_record("fedag")
    assert one["env"]["tasks"] >= 2
    m, b = one["metrics"], one["baselines"]
    silos, rounds = 2, 2  # tiny: 3 domains, one held out
    n_ad, n_cl, n_syn = m["params"]["adapter"], m["params"]["client_model"], one["config"]["syn_per_domain"]
    # FedAvg / FedProx: the global adapter down and each silo's adapter up, every round
    assert b["fedavg"]["floats_per_round"] == b["fedprox"]["floats_per_round"] == 2 * silos * n_ad
    # FedAG: client model + quality scores up every round, the server's client model down from round 1
    want = silos * (n_cl + n_syn) + silos * n_cl * (rounds - 1) / rounds
    assert m["floats_per_round"] == pytest.approx(want)
    assert m["bytes_per_round"] == pytest.approx(4 * want)
    rows = [r for r in one["tables"]["acc"] if r["phase"] == "test" and r["metric"] == "accuracy"]
    assert {r["method"] for r in rows} == {"fedag", "fedag-noq", "fedag-noreg", "fedavg", "fedprox", "zero-shot",
                                           "strongest", "other"}
    # the comparison is one of the federated baselines, the control the other
    assert {b["strongest"]["name"], b["other"]["name"]} == {"fedavg", "fedprox"}
    assert b["strongest"]["in_domain_acc"] == b[b["strongest"]["name"]]["in_domain_acc"]
    assert b["fedag_noq"]["floats_per_round"] == b["fedag_noreg"]["floats_per_round"] == m["floats_per_round"]
    assert all(0.0 <= r["value"] <= 1.0 for r in rows)
    chosen = one["config"]["budget"]["tuning"]["chosen"]
    assert set(chosen) == {"fedag", "fedavg", "fedprox"} and set(chosen.values()) <= set(one["config"]["lr_grid"])
    assert m["lr"] == chosen["fedag"] and all(b[k]["lr"] == chosen[k] for k in ("fedavg", "fedprox"))
    # only the test phase is counted, and the ablations ran at FedAG's chosen learning rate
    comm = one["tables"]["communication"]
    assert comm and {c["phase"] for c in comm} == {"test"}
    assert {c["lr"] for c in comm if c["method"] in ("fedag-noq", "fedag-noreg")} == {chosen["fedag"]}


@pytest.mark.parametrize("overrides, match", [
    ({"heldout": ["sepia"]}, "heldout"),
    ({"heldout": ["shifted"]}, "heldout"),  # not one of tiny's domains
    ({"domains": ["rotated", "noised"]}, "domains"),
    ({"lr_grid": [1e-3, 1e-2]}, "lr_grid"),
    ({"syn_per_domain": 5}, "syn_per_domain"),
    ({"momentum": 2.0}, "momentum"),
])
def test_bad_settings_are_rejected_before_any_work(overrides, match):
    runtime.reset_stats()
    with pytest.raises(ValueError, match=match):
        experiments.run("fedag", size="tiny", overrides=overrides)
    assert runtime.stats()["tasks"] == 0
