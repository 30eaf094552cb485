"""rayml.experiments.gs_poweropt: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("gs-poweropt") == []


def _runs(pairs, case="two-peak-2", key="best_gap"):
    return [{"case": case, "method": m, "seed": s, key: v} for s, (a, b) in enumerate(pairs)
            for m, v in (("gs-poweropt", a), ("homotopy", b))]


def test_gaps_inside_one_basin_are_ties_not_losses():
    # the review's two-peak finding: 0.494306 vs 0.494304 is the same local peak, not a loss
    from rayml.experiments import gs_poweropt as E

    runs = _runs([(0.494306, 0.494304)] * 6 + [(0.001, 0.494304)] * 4)
    assert E._paired(runs, "two-peak-2", E.METHOD, "homotopy", "best_gap") == (4, 0, 6)
    # a real difference in the same basin stays a loss
    assert E._paired(_runs([(0.52, 0.494304)]), "two-peak-2", E.METHOD, "homotopy", "best_gap") == (0, 1, 0)


def test_the_claims_drop_ties_and_the_gates_come_first():
    from rayml.experiments import gs_poweropt as E

    paired = [c for c in E.CLAIMS if c.test is not None and c.kind == "paper"]
    assert paired and all(c.tie is not None for c in paired)
    texts = [c.text for c in E.CLAIMS]
    for c in E.CLAIMS:
        for g in c.gates:
            assert texts.index(g) < texts.index(c.text)
    assert all(c.gates for c in E.CLAIMS if c.kind == "paper")
    final = [c for c in E.CLAIMS if "final" in c.metric]
    assert final and all(c.kind == "sanity" and "not the paper's" in c.text for c in final)


def test_the_grid_reaches_the_regime_where_the_power_matters():
    from rayml.experiments import gs_poweropt as E

    ax = E.AXES[E.METHOD]
    assert set(ax["sigma"]) == {0.25, 0.5, 1.0} and set(ax["power"]) == {1.0, 2.0, 3.0, 10.0, 30.0, 100.0}
    sizes = {m: len(E._axes(E.SIZES["full"])[m]["sigma"]) * len(E._axes(E.SIZES["full"])[m]["lr"])
             * len(next(v for k, v in E._axes(E.SIZES["full"])[m].items() if k not in ("sigma", "lr")))
             for m in (E.METHOD, *E.SMOOTHING)}
    assert len(set(sizes.values())) == 1  # the same grid size for every smoothing method
    for size in ("quick", "full"):
        assert E.SIZES[size]["case_seeds"].get("two-peak-2", E.SIZES[size]["seeds"]) >= 30
    assert "two-peak-5" in E.SIZES["full"]["cases"] and E.SIZES["full"]["table2_seeds"] == 100


def test_a_sigma_extended_below_a_homotopys_sigma_min_is_not_run():
    from rayml.experiments import gs_poweropt as gp

    assert gp.feasible({"sigma": 0.125, "lr": 0.1, "sigma_min": 0.1})
    assert not gp.feasible({"sigma": 0.0625, "lr": 0.1, "sigma_min": 0.1})  # the full run's crash (session 10)
    assert gp.feasible({"sigma": 0.0625, "lr": 0.1, "power": 3.0})  # no sigma_min: any sigma
