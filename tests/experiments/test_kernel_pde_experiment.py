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
    assert [c.a["method"] for c in slope.controls] == [kp.DENSE]
    assert len(slope.gates) == 2
    # a slope per pass is the least-squares slope of that pass's times: t = N^1.5 gives 1.5
    assert abs(kp._slope([16, 20, 24, 28], [(n * n) ** 1.5 for n in (16, 20, 24, 28)]) - 1.5) < 1e-12
    for size in ("quick", "full"):  # the sign test over passes can reach p < 0.05
        assert kp.SIZES[size]["timing_repeats"] - 1 >= 5, size
