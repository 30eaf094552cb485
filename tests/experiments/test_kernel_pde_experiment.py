"""rayml.experiments.kernel_pde: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("kernel-pde") == []


def test_every_solver_gets_the_same_gauss_newton_budget():
    from rayml.experiments import kernel_pde as kp

    for size, cfg in kp.SIZES.items():
        assert "daks_iterations" not in cfg, size  # one cap, gn_iterations, for Kronecker and DAKS alike
        assert cfg["timing_repeats"] >= (3 if cfg["timing"] else 1), size


def test_timing_repeats_and_gn_iterations_are_checked():
    import pytest

    from rayml.experiments import kernel_pde as kp

    for key, bad in (("timing_repeats", 0), ("timing_repeats", 1.5), ("gn_iterations", 0)):
        with pytest.raises(ValueError, match=key):
            kp._check_config({**kp.SIZES["tiny"], key: bad})


def test_timed_solve_reports_the_minimum_cpu_time_of_its_untraced_repeats_and_every_pass(monkeypatch):
    import types

    from rayml.experiments import kernel_pde as kp
    from rayml.pde.problems import NonlinearElliptic

    # three solves: the traced first 0.5 s (not used when there are repeats), then 2 s and 1 s
    clock = iter([0.0, 0.5, 10.0, 12.0, 20.0, 21.0])
    monkeypatch.setattr(kp, "time", types.SimpleNamespace(process_time=lambda: next(clock)))
    cfg = {**kp.SIZES["tiny"], "timing": True, "timing_repeats": 3}
    res, seconds, peak, passes = kp._measured("fd", NonlinearElliptic(), (8, 8), (0.3, 0.3), 0.0, cfg)
    assert seconds == 1.0 and passes == [2.0, 1.0] and peak > 0 and res.rmse > 0
    clock = iter([0.0, 0.5])
    _, seconds, _, passes = kp._measured("fd", NonlinearElliptic(), (8, 8), (0.3, 0.3), 0.0,
                                         {**cfg, "timing_repeats": 1})
    assert seconds == 0.5 and passes == []


def test_the_slope_claim_is_a_paired_test_over_timing_passes_behind_two_gates():
    from rayml.experiments import kernel_pde as kp

    slope = next(c for c in kp.CLAIMS if c.metric == "metrics.timings.time_slope")
    assert slope.test and slope.table == "timing_slopes" and slope.pair_on == ("pass",)
    assert [c.a["method"] for c in slope.controls] == [kp.DENSE, kp.REPLICA]   # session 8: DAKS against DAKS
    assert len(slope.gates) == 2
    # a slope per pass is the least-squares slope of that pass's times: t = N^1.5 gives 1.5
    assert abs(kp._slope([16, 20, 24, 28], [(n * n) ** 1.5 for n in (16, 20, 24, 28)]) - 1.5) < 1e-12
    for size in ("quick", "full"):  # the sign test over passes can reach p < 0.05
        assert kp.SIZES[size]["timing_repeats"] - 1 >= 5, size


def test_timing_passes_run_round_robin_pass_p_of_every_cell_in_round_p_shuffled_per_round():
    """Session 8: the passes paired by the slope claim are timed together (one round per pass), not back to
    back inside each cell's task; cells past DAKS's reach take part in fewer rounds."""
    from rayml.experiments import kernel_pde as kp

    cells = [(n, m) for n in (16, 20, 24, 28) for m in (*kp.SCALE_METHODS, kp.REPLICA)] + [(64, kp.OURS)]
    rounds_of = {c: (2 if c[0] == 64 else 5) for c in cells}
    calls = []

    def fake(items):
        calls.append(items)
        return [100.0 * p + 1.0 * n + len(m) for n, m, p in items]

    passes, rows = kp.timing_rounds(cells, rounds_of, 0, {}, run_pass=fake)
    assert len(calls) == 5
    for p, items in enumerate(calls):
        assert {it[2] for it in items} == {p}
        assert sorted(it[:2] for it in items) == sorted(c for c in cells if rounds_of[c] > p)
    assert len({tuple(it[:2] for it in items) for items in calls[2:]}) > 1   # the order is reshuffled per round
    for (n, m), ts in passes.items():
        assert ts == [100.0 * p + n + len(m) for p in range(rounds_of[(n, m)])]
    assert {(r["round"], r["order"]) for r in rows if r["round"] == 0} == {(0, j) for j in range(len(cells))}


def test_one_convergence_rule_for_both_solvers_the_relative_change_of_u_in_the_last_step():
    """Session 8: the gate and the tuning read the same quantity for the matrix-free solver and DAKS (their own
    stopping rules differ: loss decrease vs iterate change); checked against two solves one step apart."""
    import types

    import numpy as np

    from rayml.experiments import kernel_pde as kp
    from rayml.pde.problems import NonlinearElliptic

    cfg = dict(kp.SIZES["tiny"])
    for method in (kp.OURS, kp.DENSE, "daks"):
        one, two = (kp._solve(method, NonlinearElliptic(), (10, 10), (0.3, 0.3), 1e-8, {**cfg, "gn_iterations": k})
                    for k in (1, 2))
        assert two.iterations == 2
        expected = np.linalg.norm(two.U - one.U) / np.linalg.norm(two.U)
        assert np.isclose(kp._u_change(method, two), expected, rtol=1e-6, atol=1e-14), method
    ours = types.SimpleNamespace(info={"last_change": 1e-5})
    daks = types.SimpleNamespace(last_u_change=1e-5)
    assert kp._converged(kp.OURS, ours) is kp._converged("daks", daks) is False   # the same number, the same verdict
    assert kp._converged("daks", types.SimpleNamespace(last_u_change=0.5 * kp.CONVERGED_CHANGE)) is True


def test_quick_slope_grids_are_the_daks_grids_under_its_cap_at_least_four():
    """Session 9: quick caps DAKS's Gram (48 MiB) so the slope runs on 16-28; the gate's four grids must fit."""
    from rayml.experiments import kernel_pde as kp

    for size in ("quick", "full"):
        cfg = kp.SIZES[size]
        daks = [n for n in cfg["scaling_grids"] if kp._needed_mib("daks", n) <= cfg["max_gram_mib"]]
        assert len(daks) >= 4, size
    quick = kp.SIZES["quick"]
    assert [n for n in quick["scaling_grids"] if kp._needed_mib("daks", n) <= quick["max_gram_mib"]] == [16, 20, 24, 28]
    for case in quick["cases"]:   # every accuracy case still runs DAKS under the quick cap
        name, params, grid, _ = kp.CASES[case]
        from rayml.pde.baselines import daks_memory_bytes
        from rayml.pde.problems import make_problem
        assert daks_memory_bytes(make_problem(name, **params), grid) <= quick["max_gram_mib"] * 2**20, case


def test_accuracy_repeats_and_rounds_past_daks_are_checked_and_full_keeps_its_design():
    import pytest

    from rayml.experiments import kernel_pde as kp

    for key, bad in (("accuracy_repeats", 0), ("accuracy_repeats", 1.5), ("rounds_past_daks", -1),
                     ("rounds_past_daks", True)):
        with pytest.raises(ValueError, match=key):
            kp._check_config({**kp.SIZES["tiny"], key: bad})
    assert kp.SIZES["full"]["accuracy_repeats"] == kp.SIZES["full"]["timing_repeats"] == 6
    assert kp.SIZES["full"]["rounds_past_daks"] == 2


def test_the_tuning_instance_keeps_the_test_grids_points_per_lengthscale_on_a_coarser_grid():
    """Session 9: the tuning grid is coarser than the test grid (never the test grid), its lengthscales scaled by
    the spacing ratio, so a nugget acts on a Gram of the same conditioning regime (DAKS on Burgers 32 x 10 at the
    case's own lengthscales met the convergence rule at no nugget of the grid)."""
    from rayml.experiments import kernel_pde as kp

    for size in ("quick", "full"):
        cfg = kp.SIZES[size]
        for case in cfg["cases"]:
            _, _, grid, ls = kp.CASES[case]
            small, tls = kp.tuning_instance(case, cfg)
            assert all(m < n for m, n in zip(small, grid)), case
            for l, t, n, m in zip(ls, tls, grid, small):
                assert abs(t * (m - 1) - l * (n - 1)) < 1e-12 and t > l, case   # lengthscale / spacing kept
    assert kp.tuning_instance("burgers-0.02-42x14", {**kp.SIZES["quick"], "tune_scale_lengthscale": False}) \
        == ((32, 10), (0.05, 0.3))


def test_accuracy_value_at_fixed_daks_nuggets_by_hand():
    import math

    from rayml.experiments import kernel_pde as kp

    cases = ["a", "b"]
    rmse = {("a", kp.OURS): 1e-2, ("b", kp.OURS): 1e-4}
    daks_at = {("a", 1e-4): {"rmse": 1e-3, "converged": False}, ("b", 1e-4): {"rmse": 1e-4, "converged": True},
               ("a", 1e-3): {"rmse": 1e-2, "converged": True}, ("b", 1e-3): {"rmse": 1e-3, "converged": True}}
    out = kp.fixed_nugget_values(rmse, daks_at, cases)
    assert set(out) == {"0.0001", "0.001"}
    assert math.isclose(out["0.0001"]["log10_rmse_ratio_vs_daks"], 0.5)  # (1 + 0) / 2: not below the limit
    assert out["0.0001"]["below_limit"] is False and out["0.0001"]["daks_converged_share"] == 0.5
    assert math.isclose(out["0.001"]["log10_rmse_ratio_vs_daks"], -0.5) and out["0.001"]["below_limit"] is True
    assert math.isclose(out["0.001"]["per_case"]["b"], -1.0)


def test_hard_cases_adam_gets_the_gauss_newton_mode_products_and_dense_respects_the_cap():
    import pytest

    from rayml.experiments import kernel_pde as kp

    cfg = {**kp.SIZES["tiny"], "max_gram_mib": 1.0}
    case = "allen-cahn-15-25x25"
    gn = kp.hard_cell((case, kp.OURS, 0), cfg)
    adam = kp.hard_cell((case, "adam", gn["mode_products"]), cfg)
    per = kp.adam_step_products(kp.make_problem("allen-cahn", a=15.0))
    assert gn["mode_products"] > 0 and adam["adam_steps"] == (gn["mode_products"] - 6) // per   # 6: the final loss
    assert gn["mode_products"] - per < adam["mode_products"] <= gn["mode_products"]
    assert adam["lr"] == 1e-4   # the authors' Allen-Cahn learning rate
    dense = kp.hard_cell((case, kp.DENSE, 0), cfg)   # 4 N^2 doubles = 11.9 MiB > 1 MiB
    assert dense["ran"] is False and dense["needed_mib"] > 1.0
    with pytest.raises(ValueError, match="hard_cases"):
        kp._check_config({**kp.SIZES["tiny"], "hard_cases": ["allen-cahn-15-1x1"]})
    for size in ("quick", "full"):   # every size has two Allen-Cahn a = 15 grids and a Burgers nu = 0.001 case
        hard = kp.SIZES[size]["hard_cases"]
        assert sum(kp.HARD_CASES[c][1].get("a") == 15.0 for c in hard) >= 2
        assert any(kp.HARD_CASES[c][1].get("nu") == 0.001 for c in hard)


def test_hard_summary_by_hand():
    import math

    from rayml.experiments import kernel_pde as kp

    def row(case, rmse, rel):
        return {"case": case, "method": kp.OURS, "rmse": rmse, "rel_l2": rel, "mode_products": 10, "gn_iterations": 3,
                "last_u_change": 0.0, "cg_steps": 5, "cg_capped": 0, "cg_max_residual": 1e-9, "points": kp.HARD_CASES[case][2][0] ** 2,
                "ran": True, "converged": 1.0}

    rows = [row("allen-cahn-15-70x70", 0.01, 0.1), row("allen-cahn-15-49x49", 0.1, 0.5),
            row("allen-cahn-20-49x49", 1.0, 0.9), row("burgers-0.001-60x20", 0.2, 0.3)]
    out = kp.hard_summary(rows, kp.OURS)
    assert math.isclose(out["allen_cahn_geo_mean_rmse"], 0.1)   # (0.01 * 0.1 * 1) ** (1/3)
    assert math.isclose(out["burgers_geo_mean_rmse"], 0.2)
    assert out["allen_cahn_15_rel_l2_smallest_grid"] == 0.5 and out["allen_cahn_15_rel_l2_largest_grid"] == 0.1
    assert math.isnan(kp.hard_summary(rows[1:], kp.OURS)["allen_cahn_15_rel_l2_largest_grid"])   # one a = 15 grid


def test_hard_allen_cahn_gate_wins_and_fixed_lengthscale_by_hand():
    import math

    from rayml.experiments import kernel_pde as kp

    cases = ["allen-cahn-15-49x49", "allen-cahn-15-90x90", "allen-cahn-20-49x49", "burgers-0.001-60x20"]
    rmse = {kp.OURS: [0.1, 0.03, 3.0, 0.1], "fd": [0.07, 0.008, 0.2, 0.02], "fd2": [0.19, 0.05, 0.4, 0.02]}
    conv = {kp.OURS: [1.0, 1.0, 0.0, 1.0], "fd": [1.0] * 4, "fd2": [1.0] * 4}
    rows = [{"case": c, "method": m, "rmse": rmse[m][i], "rel_l2": rmse[m][i], "converged": conv[m][i], "ran": True,
             "points": kp.HARD_CASES[c][2][0] * kp.HARD_CASES[c][2][1]} for m in rmse for i, c in enumerate(cases)]
    fixed = {"case": "allen-cahn-15-90x90", "rel_l2": 0.05, "rmse": 0.04, "converged": 1.0}
    out = kp.hard_allen_cahn_summary(rows, cases, fixed)
    assert math.isclose(out["allen_cahn_pooled_converged_share"], 2 / 3)   # a = 20 did not converge: the gate fails
    assert out["allen_cahn_cases"] == 3 and out["allen_cahn_cases_more_accurate_than_fd"] == 0
    assert out["allen_cahn_cases_more_accurate_than_fd2"] == 2
    assert out["allen_cahn_15_rel_l2_largest_grid_fixed_lengthscale"] == 0.05
    assert out["allen_cahn_15_fixed_lengthscale"]["lengthscale"] == [0.04, 0.04]   # the 49^2 grid's
    conv["fd"][0] = 0.0   # an FD Newton solve at its cap fails the gate too
    rows = [{**r, "converged": conv[r["method"]][cases.index(r["case"])]} for r in rows]
    assert math.isclose(kp.hard_allen_cahn_summary(rows, cases, None)["allen_cahn_pooled_converged_share"], 1 / 3)
    assert math.isnan(kp.hard_allen_cahn_summary(rows, cases, None)["allen_cahn_15_rel_l2_largest_grid_fixed_lengthscale"])


def test_hard_allen_cahn_claim_reads_the_strongest_fd_with_second_order_as_control_and_its_text_follows_sizes():
    from rayml.experiments import kernel_pde as kp
    from rayml.pde.problems import make_problem

    assert kp.fd_order("fd", make_problem("allen-cahn", a=15.0)) == 4 and kp.fd_order("fd2", make_problem("elliptic")) == 2
    assert kp.fd_order("fd", make_problem("burgers", nu=0.001)) == 2   # Burgers has one scheme (Godunov, CN)
    declared = {c.text: c for c in kp.CLAIMS}
    claim = declared[kp.HARD_AC.text]
    assert claim.compare == "baselines.fd.hard.allen_cahn_geo_mean_rmse"
    assert [c.name for c in claim.controls] == ["fd2"] and claim.gates == (kp._HARD_AC_GATE.text,)
    assert declared[kp.HARD_AC_GRID.text].gates == (kp._HARD_AC_GRID_GATE.text,)
    text = kp.hard_ac_text()
    quick = text.split("quick: ")[1].split(";")[0]
    full = text.split("full: ")[1]
    assert quick == "a = 15 at 49^2 / 70^2" and "a = 20 at 49^2 / 70^2" in full   # quick runs a = 15 only
    assert kp.hard_ac_text({"x": {"hard_cases": ["allen-cahn-20-70x70"]}}) == "x: a = 20 at 70^2"
    assert quick in claim.text and full in claim.text


def test_fixed_lengthscale_cell_solves_the_largest_grid_at_the_smallest_grids_lengthscale(monkeypatch):
    from rayml.experiments import kernel_pde as kp

    seen = {}

    def fake_solve(method, problem, grid, ls, reg, config):
        from types import SimpleNamespace

        seen.update(method=method, grid=grid, ls=ls)
        return SimpleNamespace(rmse=0.1, rel_l2=0.2, iterations=4, info={"last_change": 1e-9, "cg_steps": [10]})

    monkeypatch.setattr(kp, "_solve", fake_solve)
    cfg = {**kp.SIZES["full"]}
    row = kp.hard_cell(("allen-cahn-15-90x90", kp.FIXED_LS, 0), cfg)
    assert seen == {"method": kp.OURS, "grid": (90, 90), "ls": (0.04, 0.04)}   # 90^2 at 49^2's lengthscale
    assert row["lengthscale"] == [0.04, 0.04] and row["converged"] == 1.0


def test_per_equation_easy_claims_pair_over_cases_with_ties_behind_two_gates():
    # session 15 (after R13): one claim per equation, a one-sided sign test over its cases (ties within 10% dropped),
    # gated on >= 5 cases and on every pooled solve having converged; the old all-cases geometric mean is no claim
    from rayml.experiments import kernel_pde as kp

    declared = {c.text: c for c in kp.CLAIMS}
    easy = [c for c in kp.EASY_CLAIMS if c.kind == "paper"]
    assert [c.a["equation"] for c in easy] == list(kp.EQUATIONS)
    for c in easy:
        assert c.test == "paired sign test over seeds" and c.pair_on == ("case",) and c.tie == kp.EASY_TIE
        assert c.table == "accuracy" and c.a["method"] == kp.OURS and c.b == {**c.a, "method": "fd"}
        assert len(c.gates) == 2 and all(declared[g].kind == "sanity" for g in c.gates)
        assert c.source.startswith(kp.ABSTRACT_RESULTS)
    assert [ctl.name for ctl in easy[0].controls] == ["fd2"] and easy[2].controls == ()   # Burgers: FD2 is FD
    assert not any(c.metric == "metrics.geo_mean_rmse" for c in kp.CLAIMS)
    # every size with the claim's gate satisfiable has >= 5 cases per equation (full: all three; quick: not Burgers)
    for size, eqs in (("full", kp.EQUATIONS), ("quick", ("elliptic", "allen-cahn"))):
        for eq in eqs:
            assert sum(kp.CASES[c][0] == eq for c in kp.SIZES[size]["cases"]) >= kp.EASY_MIN_CASES, (size, eq)


def _easy_record(eq, cases, ours, fd2):
    """A synthetic record of the per-equation claims of ``eq``: the matrix-free RMSEs ``ours`` per case, FD 1.0,
    FD2 ``fd2``, every solve converged."""
    from rayml.experiments import kernel_pde as kp

    rmse = {}
    for c, o in zip(cases, ours):
        rmse.update({(c, kp.OURS): o, (c, "fd"): 1.0, (c, "fd2"): fd2})
    conv = {k: True for k in rmse}
    rows = [{"case": c, "equation": eq, "method": m, "metric": "rmse", "value": rmse[(c, m)]}
            for c in cases for m in (kp.OURS, "fd", "fd2")]
    return {"metrics": {"easy": kp.easy_summary(rmse, conv, cases, kp.OURS)},
            "baselines": {m: {"easy": kp.easy_summary(rmse, conv, cases, m)} for m in ("fd", "fd2")},
            "tables": {"accuracy": rows}}


def test_per_equation_claim_fails_when_most_cases_lose_and_holds_when_all_win():
    from rayml import results
    from rayml.experiments import kernel_pde as kp

    cases = [f"elliptic-{n}x{n}" for n in (12, 14, 16, 18, 20, 24)]
    claim = next(c for c in kp.EASY_CLAIMS if c.kind == "paper" and c.a["equation"] == "elliptic")

    def record(ours):
        return _easy_record("elliptic", cases, ours, fd2=2.0)

    gates = [c for c in kp.EASY_CLAIMS if c.text in claim.gates]
    # one case 1000x better, five 2x worse: the geometric mean wins, the per-case claim fails
    rec = record([1e-3, 2.0, 2.0, 2.0, 2.0, 2.0])
    assert rec["metrics"]["easy"]["elliptic"]["geo_mean_rmse"] < 1.0
    out = {e["text"]: e for e in results.evaluate_claims(rec, [*gates, claim])}
    assert out[claim.text]["status"] == "fails" and out[claim.text]["pairs"] == {"wins": 1, "losses": 5, "ties": 0}
    assert rec["metrics"]["easy"]["elliptic"]["vs_fd"] == {"wins": 1, "losses": 5, "ties": 0}
    out = {e["text"]: e for e in results.evaluate_claims(record([0.5] * 6), [*gates, claim])}
    assert out[claim.text]["status"] == "holds"
    # a tie (within 10%) is dropped: five wins and a tie cannot reach p < 0.05 with five pairs? 2^-5 = 0.031: holds
    out = {e["text"]: e for e in results.evaluate_claims(record([0.5] * 5 + [0.95]), [*gates, claim])}
    assert out[claim.text]["pairs"]["ties"] == 1 and out[claim.text]["status"] == "holds"
    # session 16 (R15): four untied wins and two ties cannot reach p < 0.05 (1/16): the pairs gate (untied pairs >= 5)
    # makes the claim incomplete; before, it counted cases and the claim read "fails"
    out = {e["text"]: e for e in results.evaluate_claims(record([0.5] * 4 + [0.95, 0.95]), [*gates, claim])}
    assert out[claim.text]["status"] == "incomplete"


def test_per_equation_pairs_gate_counts_untied_pairs_not_cases():
    """R15: a synthetic Burgers record with 4 wins, 0 losses and 1 tie (5 cases) passed the case-count gate and read
    "fails" at p = 0.0625; the gate counts wins + losses, so it reads incomplete (the gate fails), and 5 untied wins
    hold."""
    from rayml import results
    from rayml.experiments import kernel_pde as kp

    cases = kp.EASY_BURGERS
    claim = next(c for c in kp.EASY_CLAIMS if c.kind == "paper" and c.a["equation"] == "burgers")
    gates = [c for c in kp.EASY_CLAIMS if c.text in claim.gates]
    pairs_gate = next(g for g in gates if g.metric.endswith("untied_pairs"))

    def record(ours):
        return _easy_record("burgers", cases, ours, fd2=1.0)

    rec = record([0.5, 0.5, 0.5, 0.5, 0.95])
    easy = rec["metrics"]["easy"]["burgers"]
    assert easy["cases"] == 5 and easy["vs_fd"] == {"wins": 4, "losses": 0, "ties": 1} and easy["untied_pairs"] == 4
    out = {e["text"]: e for e in results.evaluate_claims(rec, [*gates, claim])}
    assert out[pairs_gate.text]["status"] == "fails" and out[claim.text]["status"] == "incomplete"
    out = {e["text"]: e for e in results.evaluate_claims(record([0.5] * 5), [*gates, claim])}
    assert out[pairs_gate.text]["status"] == "holds" and out[claim.text]["status"] == "holds"
    # a loss counts as a pair: 4 wins and a loss pass the gate, and the test decides (p = 3/16: fails)
    out = {e["text"]: e for e in results.evaluate_claims(record([0.5] * 4 + [2.0]), [*gates, claim])}
    assert out[pairs_gate.text]["status"] == "holds" and out[claim.text]["status"] == "fails"


def test_a_scaling_solve_with_a_capped_cg_step_does_not_reach_the_target(monkeypatch):
    """R15: the "reaches target" sanity check requires no Gauss-Newton step whose CG stopped at its cap."""
    import types

    from rayml.experiments import kernel_pde as kp

    cfg = {**kp.SIZES["tiny"], "timing": False}

    def fake(cg_steps):
        res = types.SimpleNamespace(rel_l2=1e-4, iterations=len(cg_steps),
                                    info={"cg_steps": cg_steps, "cg_residuals": [1e-9] * len(cg_steps)})
        return lambda *a, **k: res

    cap = int(cfg["cg_iterations"])
    monkeypatch.setattr(kp, "_solve", fake([10, cap - 1]))
    row = kp.scaling_one((8, kp.OURS), cfg)
    assert row["reached"] is True and row["cg_capped"] == 0
    monkeypatch.setattr(kp, "_solve", fake([10, cap]))
    row = kp.scaling_one((8, kp.OURS), cfg)
    assert row["reached"] is False and row["cg_capped"] == 1 and row["rel_l2"] <= cfg["target_rel_l2"]


def test_lengthscale_factor_is_tuned_for_both_kernel_solvers_on_the_tuning_instance(tiny_record):
    """Session 16 (R15): the lengthscale factor is a tuning axis crossed with the regulariser, for the matrix-free
    solver and DAKS alike, evaluated on the tuning instance only; the accuracy solves use the case's lengthscales times
    the chosen factor; quick and full hold factor 1 strictly inside their grid."""
    from rayml import evidence
    from rayml.experiments import kernel_pde as kp

    for size in ("quick", "full"):
        assert evidence.paper_not_inside("ls_factors", kp.SIZES[size].get("ls_factors", kp.LS_FACTORS), 1.0) is None
    rec = tiny_record("kernel-pde")
    cfg = kp.SIZES["tiny"]
    rows = [r for r in rec["tables"]["tuning"] if r["metric"] == "tuning_rmse"]
    for c in cfg["cases"]:
        for m in (kp.OURS, "daks"):
            mine = [r for r in rows if r["case"] == c and r["method"] == m]
            assert {(r["ls_factor"], r["regulariser"]) for r in mine} == \
                {(f, g) for f in cfg["ls_factors"] for g in cfg["regularisers"]}, (c, m)
            f = rec["metrics"]["tuned_lengthscale_factor"][f"{c}/{m}"]
            assert [r["ls_factor"] for r in mine if r["chosen"] == 1.0] == [f]
            assert rec["metrics"]["lengthscale"][f"{c}/{m}"] == [f * l for l in kp.CASES[c][3]]
    with __import__("pytest").raises(ValueError, match="ls_factors"):
        kp._check_config({**cfg, "ls_factors": (0.0, 1.0)})


def test_accuracy_and_tuning_cells_solve_at_the_lengthscale_times_the_factor(monkeypatch):
    from rayml.experiments import kernel_pde as kp

    seen = []

    def fake(method, problem, grid, ls, reg, config):
        seen.append((method, grid, ls, reg))
        import types
        return types.SimpleNamespace(rmse=1.0, rel_l2=1.0, iterations=1, info={"last_change": 0.0}, last_change=0.0)

    monkeypatch.setattr(kp, "_solve", fake)
    cfg = {**kp.SIZES["tiny"], "timing": False}
    kp.accuracy_one(("elliptic-12x12", kp.OURS, 1e-8, 2.0), cfg)
    kp.tune_one(("elliptic-12x12", "daks", 1e-6, 1.5), cfg)
    small, tls = kp.tuning_instance("elliptic-12x12", cfg)
    assert seen[0] == (kp.OURS, (12, 12), (0.5, 0.5), 1e-8)
    assert seen[1][:2] == ("daks", small) and seen[1][3] == 1e-6
    assert all(abs(a - 1.5 * b) < 1e-15 for a, b in zip(seen[1][2], tls)) and small != (12, 12)


def test_scaled_lengthscale_keeps_points_per_lengthscale_and_cases_use_it():
    from rayml.experiments import kernel_pde as kp

    assert kp.scaled_lengthscale((18, 18), (18, 18), (0.2, 0.2)) == (0.2, 0.2)
    assert kp.scaled_lengthscale((35, 12), (69, 23), (0.05, 0.3)) == (0.1, 0.6)
    assert kp.CASES["elliptic-24x24"][3] == kp.scaled_lengthscale((24, 24), (18, 18), (0.2, 0.2))
    assert kp.CASES["burgers-0.01-42x14"][3] == kp.scaled_lengthscale((42, 14), (60, 20), (0.04, 0.25))
