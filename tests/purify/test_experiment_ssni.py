"""The SSNI experiment's bookkeeping: the worst case, the curve's upper envelope (cross-fitted), the per-image gap,
config checks."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.experiments import ssni as E

CONFIG = {**E.SIZES["tiny"], "t_grid": [50.0, 150.0], "schedule": [[1, 1], [2, 1]], "min_steps": 2, "patience": 1}


def _fake_parts(clean, robust_by_attack, reps=1):
    """Two chunks of 2 images; ``clean[name]`` / ``robust_by_attack[name][attack]``: per-image 0/1 (or per
    replicate rows); every defence of both radii gets the same numbers."""
    def arr(v, start):
        a = np.array(v, bool)
        a = a[None] if a.ndim == 1 else a
        return np.repeat(a[:, start:start + 2], reps, axis=0) if a.shape[0] == 1 else a[:, start:start + 2]

    parts = []
    for start in (0, 2):
        correct, levels, norm_levels = {}, {}, {}
        for lab in E.LABELS:
            for a in ("clean", "pgd", "random"):
                correct[(lab, "classifier", a)] = np.ones((1, 2), bool)
            for name in E.defences(CONFIG):
                correct[(lab, name, "clean")] = arr(clean[name], start)
                correct[(lab, name, "clean_extra")] = np.zeros((reps, 0), bool)
                for attack, v in robust_by_attack[name].items():
                    correct[(lab, name, attack)] = arr(v, start)
                if "_ssni_" in name:
                    for key in ("clean", "pgd", "adaptive_1", "fixed_t"):
                        levels[(lab, name, key)] = np.array([10.0, 20.0])
            for inp in ("clean", "pgd", "random"):
                norm_levels[(lab, inp)] = np.array([50.0, 60.0])
        norms = {("all", "clean"): np.array([1.0, 2.0]), ("all", "clean_redraw"): np.array([1.5, 1.5]),
                 **{(lab, k): np.array([3.0, 4.0]) for lab in E.LABELS for k in ("pgd", "random")}}
        parts.append({"chunk": start // 2, "seed": start, "start": start, "n": 2, "correct": correct,
                      "levels": levels, "norms": norms, "norm_levels": norm_levels})
    return parts


def _attacks(pgd, a0, a1, bpda, fixed_t=None):
    d = {"pgd": pgd, "adaptive_0": a0, "adaptive_1": a1, "bpda": bpda}
    if fixed_t is not None:
        d["fixed_t"] = fixed_t
    return d


def _all(v):
    return {n: v for n in E.defences(CONFIG)}


def test_robust_is_the_per_image_worst_case_including_the_attack_through_t():
    ones = [1, 1, 1, 1]
    attacks = _all(_attacks([1, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]))
    # for SSNI the schedule is the attack through t(x); "fixed_t" holds t(x) fixed
    attacks["diffpure_ssni_n"] = _attacks(ones, [0, 1, 1, 1], ones, ones, fixed_t=ones)
    attacks["diffpure_ssni_l"] = _attacks(ones, ones, [1, 1, 1, 0], ones, fixed_t=[1, 0, 1, 1])
    metrics, baselines, tables = E._summarise(_fake_parts(_all(ones), attacks), CONFIG)
    lab = E.LABELS[0]
    assert baselines[lab]["diffpure_t50"]["robust"] == 0.5
    assert metrics[lab]["diffpure_ssni_n"]["robust"] == 0.75  # only the attack through t(x) finds image 0
    assert metrics[lab]["diffpure_ssni_l"]["robust"] == 0.5
    assert metrics[lab]["diffpure_ssni_l"]["schedule"] == [1.0, 0.75]
    assert metrics[lab]["diffpure_ssni_l"]["schedule_change"] == -0.25
    assert metrics[lab]["diffpure_ssni_n"]["t_clean"] == 15.0


def test_convergence_is_two_sided():
    ones = [1, 1, 1, 1]
    attacks = _all(_attacks(ones, [1, 0, 0, 0], ones, ones, fixed_t=ones))  # the last step RISES by 0.75
    metrics, baselines, _ = E._summarise(_fake_parts(_all(ones), attacks), CONFIG)
    lab = E.LABELS[1]
    d = metrics[lab]["diffpure_ssni_n"]
    assert d["schedule_change"] == 0.75 and d["recent_range"] == 0.75 and not d["converged"]
    assert metrics[lab]["attack"]["converged_defences"] == 0
    assert metrics[lab]["attack"]["schedule_iterations_eot"] == [[1, 1], [2, 1]]


def test_envelope_takes_the_best_robust_accuracy_at_or_above_the_clean_target():
    clean = np.array([1.0, 1.0, 0.9, 0.5])
    robust = np.array([[[0.1, 0.1]], [[0.3, 0.3]], [[0.5, 0.5]], [[0.9, 0.9]]])
    # the reviewer's case: two grid points at the ceiling; the first bracket (0.1) is not the envelope (0.3)
    env, info = E._envelope(clean, robust, 1.0)
    assert np.allclose(env, 0.3) and info["points"] == [1] and not info["outside"]
    # between 1.0 and 0.9: the best mixture reaching 0.95 is half t1, half t2 (0.4)
    env, info = E._envelope(clean, robust, 0.95)
    assert np.allclose(env, 0.4) and info["points"] == [1, 2] and info["weight"] == pytest.approx(0.5)
    # at 0.9 the point itself (0.5) beats every mixture with the cleaner points
    env, info = E._envelope(clean, robust, 0.9)
    assert np.allclose(env, 0.5) and info["points"] == [2]
    # at 0.7: mixing t2 (0.9, 0.5) and t3 (0.5, 0.9) half-half gives 0.7
    env, info = E._envelope(clean, robust, 0.7)
    assert np.allclose(env, 0.7) and info["points"] == [2, 3]
    env, info = E._envelope(clean, robust, 1.01)
    assert info["outside"] and np.allclose(env, 0.1)


def test_the_envelope_dominates_every_grid_point_and_mixture_by_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(50):
        g = rng.integers(2, 6)
        clean = np.sort(rng.uniform(0.4, 1.0, g))[::-1]
        robust = rng.uniform(0, 1, (g, 1, 3))
        target = rng.uniform(clean.min(), clean.max())
        env, _ = E._envelope(clean, robust, target)
        ws = np.linspace(0, 1, 201)
        best = max(w * robust[j].mean() + (1 - w) * robust[k].mean()
                   for j in range(g) for k in range(g) for w in ws
                   if w * clean[j] + (1 - w) * clean[k] >= target - 1e-12)
        assert env.mean() == pytest.approx(best, abs=0.01) and env.mean() >= best - 1e-9


def test_crossfit_envelope_chooses_each_folds_candidate_on_the_other_fold():
    # two grid points at the ceiling: t0 robust on images 0 and 2 (fold 0), t1 on image 1 (fold 1)
    clean = np.array([1.0, 1.0])
    robust = np.array([[[1.0, 0.0, 1.0, 0.0]], [[0.0, 1.0, 0.0, 0.0]]])
    env_in, info_in = E._envelope(clean, robust, 1.0)
    assert info_in["points"] == [0] and env_in.mean() == pytest.approx(0.5)  # the in-sample maximum
    env, infos = E._crossfit_envelope(clean, robust, 1.0)
    # fold 0 takes fold 1's best (t1), fold 1 takes fold 0's best (t0): both are 0 on the held-out images
    assert [i["points"] for i in infos] == [[1], [0]]
    assert np.allclose(env, 0.0)


def test_crossfit_envelope_matches_a_brute_force_held_out_choice():
    rng = np.random.default_rng(1)
    for _ in range(30):
        g, n = rng.integers(2, 6), rng.integers(2, 9)
        clean = np.sort(rng.uniform(0.4, 1.0, g))[::-1]
        robust = rng.uniform(0, 1, (g, 2, n))
        target = rng.uniform(clean.min(), clean.max())
        env, _ = E._crossfit_envelope(clean, robust, target)
        for f in range(2):
            held, train = np.arange(n) % 2 == f, np.arange(n) % 2 != f
            cands = [robust[j] for j in range(g) if clean[j] >= target]
            cands += [w * robust[j] + (1 - w) * robust[k] for j in range(g) for k in range(g)
                      if clean[j] >= target > clean[k] for w in [(target - clean[k]) / (clean[j] - clean[k])]]
            best = max(cands, key=lambda c: c[:, train].mean())
            assert np.allclose(env[:, held], best[:, held])
    with pytest.raises(ValueError, match="at least 2 images"):
        E._crossfit_envelope(np.array([1.0, 0.5]), np.zeros((2, 1, 1)), 0.7)


def test_equal_clean_gap_uses_the_cross_fitted_envelope_not_the_in_sample_maximum():
    ones = [1, 1, 1, 1]
    clean = {**_all(ones)}
    r = lambda v: _attacks(v, v, v, v)  # noqa: E731
    attacks = {**{n: r([0, 0, 0, 0]) for n in E.defences(CONFIG)},
               "diffpure_t50": r([1, 0, 1, 0]), "diffpure_t150": r([0, 1, 0, 0]),
               "diffpure_ssni_n": {**r([0, 0, 0, 0]), "fixed_t": [0, 0, 0, 0]},
               "diffpure_ssni_l": {**r([0, 0, 0, 0]), "fixed_t": [0, 0, 0, 0]}}
    metrics, _, tables = E._summarise(_fake_parts(clean, attacks), CONFIG)
    d = metrics[E.LABELS[0]]["diffpure_ssni_n"]
    assert d["envelope_robust_insample"] == pytest.approx(0.5) and d["gap_at_equal_clean_insample"] == pytest.approx(-0.5)
    assert d["envelope_robust"] == pytest.approx(0.0) and d["gap_at_equal_clean"] == pytest.approx(0.0)
    assert d["envelope"]["insample"]["levels"] == ["diffpure_t50"]
    assert [f["levels"] for f in d["envelope"]["folds"]] == [["diffpure_t150"], ["diffpure_t50"]]


def test_equal_clean_gap_is_one_value_per_image_averaged_over_draws():
    # 2 replicates: DiffPure t50 clean 1.0 robust 0.25; t150 clean 0.5 robust 0.75; SSNI and the control at clean 0.75
    clean = {"diffpure_t50": [1, 1, 1, 1], "diffpure_t150": [1, 1, 0, 0], E.CONTROL: [1, 1, 1, 0],
             "gdmp_t50": [1, 1, 1, 1], "gdmp_t150": [1, 1, 0, 0],
             "diffpure_ssni_n": [1, 1, 1, 0], "diffpure_ssni_l": [1, 1, 1, 0]}
    r = lambda v: _attacks(v, v, v, v)  # noqa: E731
    attacks = {"diffpure_t50": r([1, 0, 0, 0]), "diffpure_t150": r([1, 1, 1, 0]), E.CONTROL: r([1, 1, 0, 0]),
               "gdmp_t50": r([0, 0, 0, 0]), "gdmp_t150": r([0, 0, 0, 0]),
               "diffpure_ssni_n": {**r([[1, 1, 1, 1], [1, 1, 0, 1]]), "fixed_t": [1, 1, 1, 1]},
               "diffpure_ssni_l": {**r([1, 0, 0, 0]), "fixed_t": [1, 0, 0, 0]}}
    metrics, baselines, tables = E._summarise(_fake_parts(clean, attacks, reps=2), CONFIG)
    lab = E.LABELS[1]
    assert baselines[lab][E.CONTROL]["gap_at_equal_clean"] == pytest.approx(0.0)
    assert metrics[lab]["diffpure_ssni_n"]["envelope_robust"] == pytest.approx(0.5)
    assert metrics[lab]["diffpure_ssni_n"]["gap_at_equal_clean"] == pytest.approx(0.875 - 0.5)
    assert metrics[lab]["diffpure_ssni_l"]["gap_at_equal_clean"] == pytest.approx(-0.25)
    assert metrics[lab]["diffpure_ssni_n"]["gap_at_equal_clean_gdmp"] == pytest.approx(0.875)
    gaps = {x["image"]: x["value"] for x in tables["equal_clean"] if x["radius"] == lab and x["defence"] == "diffpure_ssni_n"}
    # one row per image (4), never per (image, draw); image 2 is robust in one of two draws
    assert sorted(gaps) == [0, 1, 2, 3] and gaps[2] == pytest.approx(0.5 - 0.5)
    assert {x["defence"] for x in tables["curve"]} == set(E.defences(CONFIG))
    assert {x["input"] for x in tables["score_norms"]} == {"clean", "pgd", "random", "clean_redraw"}
    shift = {x["image"]: x["value"] for x in tables["level_shift"] if x["radius"] == lab and x["defence"] == "ssni_n"}
    assert shift == {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0}  # the fake levels are equal for PGD and clean inputs
    assert metrics[lab]["ssni_n_level_shift"] == 0.0 and baselines[lab]["diffpure_constant"]["level_shift"] == 0.0


SCHED3 = {**CONFIG, "schedule": [[1, 1], [2, 1], [4, 2]], "min_steps": 2, "patience": 1}


def _sched_parts(steps_by_name, extra=()):
    """Fake parts whose adaptive steps (per defence, the same at both radii) hold the given accuracies
    (4 images, 1 draw, over 2 chunks); ``extra``: further attack keys present on every defence."""
    parts = []
    for start in (0, 2):
        correct = {}
        for lab in E.LABELS:
            for name in E.defences(SCHED3):
                for k, acc in enumerate(steps_by_name.get(name, [1.0, 1.0])):
                    row = np.array([j < round(acc * 4) for j in range(4)], bool)[None, start:start + 2]
                    correct[(lab, name, f"adaptive_{k}")] = row
                for key in extra:
                    correct[(lab, name, key)] = np.ones((1, 2), bool)
        parts.append({"chunk": start // 2, "start": start, "n": 2, "correct": correct, "levels": {}})
    return parts


def test_the_schedule_continues_while_the_last_step_moves_the_accuracy_by_the_tolerance():
    tol = SCHED3["tolerance"]
    assert tol == 0.05
    # diffpure_t50 fell by 0.25 (continues); gdmp_t50 ROSE by 0.25 (two-sided: continues); the rest are flat
    parts = _sched_parts({"diffpure_t50": [0.75, 0.5], "gdmp_t50": [0.25, 0.5]})
    jobs = E.next_jobs(parts, SCHED3)
    assert sorted(jobs) == sorted((float(r), n, "adaptive", 2) for r in SCHED3["radii"]
                                  for n in ("diffpure_t50", "gdmp_t50"))


def test_with_patience_2_one_small_change_does_not_stop_the_schedule():
    cfg = {**SCHED3, "schedule": [[1, 1], [2, 1], [4, 2], [8, 4]], "patience": 2}
    # two steps: no defence has two changes yet, so all continue (a flat start is not convergence)
    jobs = E.next_jobs(_sched_parts({}), cfg)
    assert len(jobs) == len(cfg["radii"]) * len(E.defences(cfg)) and all(j[2:] == ("adaptive", 2) for j in jobs)
    # diffpure_t50: +0.0 then -0.5 (continues); gdmp_t50: -0.5 then 0.0 (one small change: continues);
    # every other defence: two flat steps (stops, so the BPDA round waits for the continuing ones)
    parts = _sched_parts({"diffpure_t50": [1.0, 1.0, 0.5], "gdmp_t50": [1.0, 0.5, 0.5],
                          **{n: [1.0, 1.0, 1.0] for n in E.defences(cfg) if n not in ("diffpure_t50", "gdmp_t50")}})
    jobs = E.next_jobs(parts, cfg)
    assert sorted(jobs) == sorted((float(r), n, "adaptive", 3) for r in cfg["radii"] for n in ("diffpure_t50", "gdmp_t50"))
    assert E._recent_change([1.0, 0.5, 0.5], 2) == 0.5 and E._recent_change([1.0, 0.5, 0.5], 1) == 0.0
    assert E._recent_change([1.0, 0.5], 2) == float("inf")


def test_bpda_and_fixed_t_run_at_each_defences_reached_step_once_nothing_continues():
    # diffpure_t50 ran 3 steps (the cap) without converging; every other defence stopped after 2
    parts = _sched_parts({"diffpure_t50": [1.0, 0.75, 0.25]})
    jobs = E.next_jobs(parts, SCHED3)
    r0 = float(SCHED3["radii"][0])
    assert (r0, "diffpure_t50", "bpda", 2) in jobs and (r0, "diffpure_t150", "bpda", 1) in jobs
    assert (r0, "diffpure_ssni_n", "fixed_t", 1) in jobs and (r0, "diffpure_ssni_l", "fixed_t", 1) in jobs
    assert (r0, "diffpure_ssni_n", "norm_penalty", 1) in jobs and (r0, "diffpure_ssni_l", "norm_penalty", 1) in jobs
    assert not any(a in ("fixed_t", "norm_penalty") for _, n, a, _ in jobs if "_ssni_" not in n)
    assert len(jobs) == len(SCHED3["radii"]) * (len(E.defences(SCHED3)) + 4)
    assert E.next_jobs(_sched_parts({"diffpure_t50": [1.0, 0.75, 0.25]}, extra=("bpda",)), SCHED3) == []
    # the capped defence is reported as such; the converged ones are not
    ssni_parts = _fake_parts(_all([1, 1, 1, 1]), _all(_attacks([1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1],
                                                                fixed_t=[1, 1, 1, 1])))
    metrics, baselines, _ = E._summarise(ssni_parts, CONFIG)
    d = metrics[E.LABELS[1]]["diffpure_ssni_n"]
    assert d["steps"] == 2 and d["schedule_reached"] == [2, 1] and d["capped"] and not d["converged"]
    assert metrics[E.LABELS[1]]["attack"]["capped_defences"] == len(E.defences(CONFIG))


def test_seeds_are_keyed_not_drawn_in_order():
    a = E._seed(7, E._K_STEP, 1, 3, 2)
    assert a == E._seed(7, E._K_STEP, 1, 3, 2) and 0 <= a < 2 ** 63
    others = {E._seed(7, E._K_STEP, 1, 3, 1), E._seed(7, E._K_STEP, 0, 3, 2), E._seed(7, E._K_BPDA, 1, 3),
              E._seed(8, E._K_STEP, 1, 3, 2)}
    assert a not in others and len(others) == 4


@pytest.mark.parametrize(
    "override, match",
    [({"n_test": 0}, "n_test"), ({"n_test": 1}, "n_test"), ({"chunk": 0}, "chunk"), ({"n_clean": 2}, "n_clean"), ({"radii": [0.1]}, "radii"),
     ({"t_grid": [50.0]}, "t_grid"), ({"t_grid": [50.0, E.CONTROL_T]}, "control_t"), ({"schedule": [[4, 2], [2, 2]]}, "schedule"),
     ({"schedule": [[4, 2]]}, "schedule"), ({"schedule": [[4, 1], [2, 4]]}, "schedule"),
     ({"min_steps": 1}, "min_steps"), ({"min_steps": 4}, "min_steps"), ({"patience": 0}, "patience"),
     ({"patience": 3}, "patience"),
     ({"replicates": 0}, "replicates"), ({"tolerance": 0.0}, "tolerance"),
     ({"gdmp_scale": -1.0}, "gdmp_scale")],
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


def test_tuned_tau_keeps_attacked_levels_off_the_ceiling():
    """Issue 40: at tau = 1 reference sd the PGD inputs' norms (z about 23-27 on digits) put every
    attacked t(x) at the ceiling t* + b (a two-level detector, the gradient through t(x) masked); the
    tuned tau is the smallest of the grid leaving at most CEILING_SHARE of them within 5% of it."""
    rng = np.random.default_rng(0)
    z = {"eps100": rng.normal(23.0, 1.6, 200), "eps200": rng.normal(27.4, 2.2, 200)}
    assert E.ceiling_share(z["eps200"], 1.0) == 1.0  # the old setting: saturated
    taus, rows = E.choose_tau(z)
    for lab, tau in taus.items():
        assert E.ceiling_share(z[lab], tau) <= E.CEILING_SHARE
        smaller = [t for t in E.TAU_GRID if t < tau]
        assert all(E.ceiling_share(z[lab], t) > E.CEILING_SHARE for t in smaller) and smaller
    assert {r["radius"] for r in rows} == set(z) and any(r["chosen"] for r in rows)
    with pytest.raises(ValueError, match="tau"):
        E._check({**E.SIZES["tiny"], "tau": 0})
    with pytest.raises(ValueError, match="tau_by_radius"):
        E.tau_of({"tau": "tuned"}, 0.1)
