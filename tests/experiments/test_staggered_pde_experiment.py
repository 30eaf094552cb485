"""rayml.experiments.staggered_pde: every claim is wired to a measured number at tiny size; the
solver tasks reproduce a local run; bad settings are rejected before any work."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.experiments import staggered_pde as exp
from rayml.pde import shallow_water as swe


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("staggered-pde") == []


def test_solver_tasks_on_ray_equal_a_local_simulation(ray_session):
    from rayml import runtime

    config = dict(exp.SIZES["tiny"])
    items = [("test", i, kind, 3, s) for i, (kind, s) in enumerate([("bumps", 11), ("plateau", 12)])]
    remote = runtime.pmap(exp.simulate_task, items, shared=config, chunk_size=1, progress=False)
    cfg = exp._swe_config(config)
    for (_, _, kind, frames, seed), got in zip(items, remote):
        local = swe.simulate(swe.initial_state(cfg, np.random.default_rng(seed), kind), cfg, frames)
        assert np.array_equal(got, local.astype(np.float32))


def test_turbulence_tasks_give_divergence_free_coarse_states():
    from rayml.pde import turbulence as turb

    traj = exp.ins_task(("test", 0, 2.0, 3, 7), dict(exp.SIZES["tiny"]))
    assert traj.shape == (4, 3, 8, 8) and np.all(traj[:, 0] == 0)
    assert np.abs(turb.divergence(traj.astype(np.float64))).max() < 1e-5 * np.abs(traj[:, 1:]).mean()
    assert [exp._cell_name(c, "ins") for c in exp._ins_cells()] == [
        "ins_p1_none", "ins_p1_divfree", "ins_p4m_none", "ins_p4m_divfree"]


def test_the_grid_holds_the_twelve_ablation_cells_and_the_three_alternatives():
    names = [exp._cell_name(c) for c in exp._cells(exp.SIZES["full"])]
    assert len(names) == 15 and len(set(names)) == 15
    assert {"p1_none", "p4_mass", "p4m_momentum", "p4m_both", "p1_none_aug", "p1_none_pf", "p4m_both_pf"} <= set(names)


@pytest.mark.parametrize("override,match", [
    (dict(boundary="closed"), "momentum"), (dict(lrs=[0.003]), "0.001"), (dict(lrs=[]), "lrs"),
    (dict(frames=2), "frames"), (dict(frames=4, test_frames=3), "test_frames"), (dict(n=7), "n must"),
    (dict(seeds=0), "seeds"), (dict(dt=0.5), "unstable"), (dict(ins_frames=2), "ins_frames"),
    (dict(ins_n_fine=12), "divide"), (dict(tune_seeds=0), "tune_seeds"), (dict(cells=["p4m_both", "nope"]), "cells"),
    (dict(cells=["p4m_both"]), "p1_none"), (dict(extend=-1), "extend"),
])
def test_bad_settings_are_rejected(override, match):
    with pytest.raises(ValueError, match=match):
        exp._validate({**exp.SIZES["tiny"], **override})


def test_trajectories_are_stored_as_parquet_with_their_parameters(ray_session, tmp_path):
    config = {**exp.SIZES["tiny"], "data_dir": str(tmp_path), "train_trajectories": 2, "val_trajectories": 1,
              "test_trajectories": 1, "ins_trajectories": 3}
    data, items, _ = exp._generate(config, 3)
    ins, ins_items = exp._generate_ins(config, 3)
    trajs, params = swe.read_trajectories_parquet(tmp_path / "shallow_water.parquet")
    assert len(trajs) == len(items) == 5 and {p["split"] for p in params} == {"train", "val", "test", "ood"}
    assert params[0]["boundary"] == "periodic" and params[0]["n"] == 8
    assert np.array_equal(trajs[0].astype(np.float32), data["train"][0])
    iturbs, iparams = swe.read_trajectories_parquet(tmp_path / "turbulence.parquet")
    assert len(iturbs) == len(ins_items) and iparams[-1]["k0_initial"] == config["ins_k0_ood"]
    assert np.array_equal(iturbs[0].astype(np.float32), ins["train"][0])


def test_full_size_trains_long_enough_with_two_tuning_seeds_and_the_closed_basin():
    # issue 41: 200 steps left most differences at noise; p4m's rate must be tuned on >= 2 seeds
    # session-6 review: the unit is the training seed, so full needs >= 5 seeds for any p < 0.05
    full = exp.SIZES["full"]
    assert full["steps"] >= 1000 and full["tune_seeds"] >= 2 and full["seeds"] >= 6 and full["extend"] >= 1
    assert full["closed"] and full["turbulence"] and full["alternatives"]
    names = [exp._cell_name(c, t) for t, c in exp._jobs(full)]
    assert {"closed_p1_none", "closed_p1_mass", "closed_p4m_none", "closed_p4m_mass"} <= set(names)
    assert not any(n.startswith("closed_") and ("momentum" in n or "both" in n) for n in names)
    # every cell a claim reads is trained at full (only the closed basin's p4 pair is left out)
    read = {f[k] for c in exp.CLAIMS if c.test for f in (c.a, c.b) for k in ("cell",)} - {"gain_p1_none_over_p4m_both"}
    assert read <= set(names) and len(names) == len(exp._all_jobs(full)) - 2


def test_quick_trains_only_the_selected_cells():
    names = [exp._cell_name(c, t) for t, c in exp._jobs(exp.SIZES["quick"])]
    assert names == exp.QUICK_CELLS


def test_symmetry_versus_physics_claims_are_judged_in_the_closed_basin_and_paired_with_ties():
    # issue 41: the rank claim on periodic water was not the paper's setting
    rank = [c for c in exp.CLAIMS if "more effective than physical" in c.text]
    assert len(rank) == 1 and rank[0].a["cell"] == "closed_p4m_none" and rank[0].b["cell"] == "closed_p1_mass"
    paper = [c for c in exp.CLAIMS if c.kind == "paper"]
    assert all(c.gates for c in paper)
    for c in paper:
        if c.test:  # session-6 review: the paired unit is the training seed, not (initial condition, seed)
            assert c.tie is not None and c.pair_on == ("seed",) and c.table == "seeds"
            assert exp.SEED_GATE.text in c.gates
    grows = next(c for c in exp.CLAIMS if "grows with rollout" in c.text)
    assert grows.test and grows.a["metric"] == "log_gain_final" and grows.b["metric"] == "log_gain_first"
    divfree = next(c for c in exp.CLAIMS if "keeps the rollouts divergence-free" in c.text)
    assert divfree.kind == "sanity"   # holds by construction


def test_gain_rows_pair_the_log_ratios_per_case_and_seed():
    rows = [{"cell": cell, "split": "test", "case": b, "seed": 0, "metric": m, "value": v}
            for cell, vals in (("p1_none", (0.2, 2.0)), (exp.MAIN, (0.1, 0.5)))
            for b in range(2) for m, v in zip(("nrmse_first_step", "nrmse_final"), vals)]
    out = exp._gain_rows(rows, 3)
    first = [r["value"] for r in out if r["metric"] == "log_gain_first"]
    final = [r["value"] for r in out if r["metric"] == "log_gain_final"]
    assert np.allclose(first, np.log(2.0)) and np.allclose(final, np.log(4.0)) and len(out) == 4


def test_persistence_scores_the_no_change_prediction():
    ref = np.zeros((1, 3, 3, 4, 4))
    ref[:, 0, 0] = 1.0
    ref[:, 1, 0] = 2.0
    assert exp._persistence({"test": ref}, "swe") == pytest.approx(0.5)


def test_closed_basin_trajectories_have_walls():
    traj = exp.simulate_task(("test", 0, "bumps", 2, 5, "closed"), dict(exp.SIZES["tiny"]))
    assert traj.shape == (3, 3, 8, 8)
    assert np.all(traj[:, 1, :, -1] == 0) and np.all(traj[:, 2, -1] == 0)


def test_the_closed_basin_is_scored_on_eta_like_the_periodic_setting():
    # the first full run scored (and tuned) the closed basin on the transport NRMSE: persistence read 1.0
    assert exp._score_key("closed") == exp._score_key("swe") == "nrmse_eta" and exp._score_key("ins") == "nrmse_vel"
    traj = np.stack([exp.simulate_task(("test", i, "bumps", 1, 5 + i, "closed"), dict(exp.SIZES["tiny"]))
                     for i in range(2)])
    assert 0 < exp._persistence({"test": traj}, "closed") < 1


def test_seed_rows_average_log_nrmse_over_the_initial_conditions_of_each_seed():
    # the claims' unit: one value per trained model (seed), the mean of log NRMSE over its test ICs
    per_case = {"nrmse_mean": np.array([[0.1, 1.0], [2.0, 2.0]]), "nrmse_final": np.array([[1.0, 1.0], [1e-3, 1e3]])}
    out = exp._seed_log_means(per_case)
    assert np.allclose(out["log_nrmse_mean"], [np.log(0.1) / 2, np.log(2.0)])
    assert np.allclose(out["log_nrmse_final"], [0.0, 0.0])
    gains = [{"cell": "g", "split": "test", "case": b, "seed": s, "metric": "log_gain_final", "value": v}
             for s, vals in ((0, (1.0, 3.0)), (1, (-1.0, 0.0))) for b, v in enumerate(vals)]
    assert [r["value"] for r in exp._seed_gain_rows(gains)] == [2.0, -0.5]


def test_a_seed_level_claim_fails_when_one_seed_reverses_however_many_pairs_agree():
    # the review's case: 3 seeds x 10 ICs in the claimed direction, one seed reversed far; counted over
    # (IC, seed) pairs that was 30 / 10 wins, over seeds one reversal in 5 seeds fails (p = 6/32; with 4 seeds
    # the test could not decide at all: incomplete, contract 2.4)
    from dataclasses import replace

    from rayml.results import evaluate_claims

    head = next(c for c in exp.CLAIMS if c.a.get("cell") == exp.MAIN and c.b.get("cell") == "p1_none"
                and c.a.get("split") == "test" and c.a.get("metric") == "log_nrmse_mean")
    assert exp.SEED_GATE.text in head.gates
    head = replace(head, gates=())   # the test itself; the gates are checked elsewhere
    rows = [{"cell": cell, "split": "test", "seed": s, "metric": "log_nrmse_mean", "value": v}
            for cell, vals in ((exp.MAIN, (-1.0, -1.0, -1.0, -1.0, 1.0)), ("p1_none", (0.0,) * 5))
            for s, v in enumerate(vals)]
    record = {"tables": {"seeds": rows}, "metrics": {"test": {"nrmse_mean_gmean": 0.5}, "seed_test_min_p": 0.0625},
              "baselines": {"p1_none": {"test": {"nrmse_mean_gmean": 1.0}}}}
    out = evaluate_claims(record, [head])[0]
    assert out["p_value"] > 0.05 and out["status"] == "fails" and "over 5 paired seeds" in out["measured"]
    rows[4]["value"] = -1.0   # every seed in the claimed direction, and 6 of them: p = 1/64
    rows += [{"cell": cell, "split": "test", "seed": s, "metric": "log_nrmse_mean", "value": v}
             for cell, v in ((exp.MAIN, -1.0), ("p1_none", 0.0)) for s in (5,)]
    out = evaluate_claims(record, [head])[0]
    assert out["status"] == "holds" and out["p_value"] < 0.05 and "over 6 paired seeds" in out["measured"]
