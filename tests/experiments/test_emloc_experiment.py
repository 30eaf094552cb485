"""rayml.experiments.emloc: every declared claim is wired to a number its run measures; tasks and
settings are validated before any work."""

import pytest


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("emloc") == []


@pytest.mark.parametrize("key,value,match", [
    ("tasks", ["nope"], "tasks"),
    ("n_demos", [1], "n_demos"),
    ("emloc_pools", [4], "emloc_pools"),
    ("h2o_recent", [1.5], "h2o_recent"),
    ("delta", -0.1, "delta"),
    ("queries", 0, "queries"),
    ("model", "no-such-model", "model"),
    ("delta_sweep", [-1.0], "delta_sweep"),
    ("fixed_ratios", [0.5], "fixed_ratios"),       # 1.0 (full context) must be in the control's sweep
    ("fixed_ratios", [0.0, 1.0], "fixed_ratios"),
])
def test_bad_settings_are_rejected_before_work(key, value, match):
    from rayml.experiments import emloc

    config = dict(emloc.SIZES["tiny"], **{key: value})
    with pytest.raises(ValueError, match=match):
        emloc.run(config, 0)


def test_tasks_are_seeded_and_well_formed():
    import rayml.llm
    from rayml.experiments import emloc

    tok = rayml.llm.pretrained("base").tokenizer
    for task in ("retrieve", "classify", "iris"):
        d1, q1 = emloc.make_task(task, 6, 3, 7, tok)
        d2, q2 = emloc.make_task(task, 6, 3, 7, tok)
        assert [d.ids for d in d1] == [d.ids for d in d2] and q1 == q2
        assert len(d1) == 6 and len(q1) == 3
    d, q = emloc.make_task("classify", 30, 5, 1, tok)
    assert len({tuple(x.answer) for x in d}) <= 4           # 4 class codes
    d, q = emloc.make_task("retrieve", 8, 4, 2, tok)
    answers = {tuple(x.answer) for x in d}
    assert all(tuple(a) in answers for _, a in q)            # every query is answered by a demonstration
    with pytest.raises(ValueError, match="task"):
        emloc.make_task("nope", 4, 2, 0, tok)


def test_grids_hold_the_paper_setting_inside_not_on_an_edge():
    from rayml.experiments import emloc

    q = emloc.SIZES["quick"]
    for grid, paper in ((q["emloc_pools"], emloc.PAPER_POOL), (q["snapkv_windows"], 32), (q["h2o_recent"], 0.5),
                        (q["streaming_sinks"], 4)):
        assert min(grid) < paper < max(grid) and len(grid) >= 4
