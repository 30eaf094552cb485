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
    for task in ("retrieve", "classify", "redundant", "iris"):
        d1, q1 = emloc.make_task(task, 6, 3, 7, tok)
        d2, q2 = emloc.make_task(task, 6, 3, 7, tok)
        assert [d.ids for d in d1] == [d.ids for d in d2] and q1 == q2
        assert len(d1) == 6 and len(q1) == (min(3, 6 // emloc.REPEATS) if task == "redundant" else 3)
    d, q = emloc.make_task("classify", 30, 5, 1, tok)
    assert len({tuple(x.answer) for x in d}) <= 4           # 4 class codes
    d, q = emloc.make_task("retrieve", 8, 4, 2, tok)
    answers = {tuple(x.answer) for x in d}
    assert all(tuple(a) in answers for _, a in q)            # every query is answered by a demonstration
    with pytest.raises(ValueError, match="task"):
        emloc.make_task("nope", 4, 2, 0, tok)


def test_grids_hold_the_paper_setting_inside_not_on_an_edge():
    from rayml.experiments import emloc

    for size, n in (("quick", 3), ("full", 3)):
        q = emloc.SIZES[size]
        for grid, paper in ((q["emloc_pools"], emloc.PAPER_POOL), (q["snapkv_windows"], 32), (q["h2o_recent"], 0.5),
                            (q["streaming_sinks"], 4)):
            assert min(grid) < paper < max(grid) and len(grid) >= n


def test_quick_and_full_sizes_can_show_their_claims():
    """>= 5 pairs for the paired tests, the paper's settings inside every grid, the JS claim's delta, a
    fixed-ratio control that can keep half the context; a size that lacks them is named."""
    from rayml.experiments import emloc

    for size in ("quick", "full"):
        assert emloc.evidence_problems(emloc.SIZES[size]) == []
    full = emloc.SIZES["full"]
    assert max(full["n_demos"]) + full["queries"] <= 150 and "iris" in full["tasks"]
    bad = dict(full, test_seeds=2, n_demos=[16], delta=0.01, snapkv_windows=[32, 64], fixed_ratios=[0.7, 1.0])
    got = " ".join(emloc.evidence_problems(bad))
    assert "2 < 5 pairs" in got and "snapkv_windows" in got and "delta 0.01" in got and "half" in got


def test_redundant_task_repeats_each_pair_and_asks_shown_keys():
    import rayml.llm
    from rayml.experiments import emloc

    tok = rayml.llm.pretrained("base").tokenizer
    d, q = emloc.make_task("redundant", 16, 6, 3, tok)
    pairs = [(tuple(x.prompt), tuple(x.answer)) for x in d]
    assert len(set(pairs)) == 16 // emloc.REPEATS and all(pairs.count(p) == emloc.REPEATS for p in set(pairs))
    answers = {a for _, a in pairs}
    assert len(q) == 16 // emloc.REPEATS and all(tuple(a) in answers for _, a in q)
    # a query is asked in the demonstrations' own format: its prompt is the prompt of the demonstrations
    # that answer it (issue 42: ``?key:`` queries read rows the replayed demonstrations never weigh)
    shown = dict(pairs)
    assert all(shown[tuple(p)] == tuple(a) for p, a in q)


def test_kl_claims_are_ours_and_the_paper_claims_are_gated():
    from rayml.experiments import emloc

    kl = [c for c in emloc.CLAIMS if c.metric == "metrics.emloc.kl"]
    assert len(kl) == 2 and all(c.kind == "sanity" and c.text.startswith("ours") for c in kl)
    paper = [c for c in emloc.CLAIMS if c.kind == "paper"]
    assert paper and all(c.gates == (emloc.GATE.text,) for c in paper)


def test_pick_prefers_top1_then_lower_kl_then_grid_order():
    from rayml.experiments import emloc

    def rows(p, top1, kl):
        return [dict(method="emloc", param=p, split="tune", metric="top1", value=top1),
                dict(method="emloc", param=p, split="tune", metric="kl", value=kl)]

    r = rows("pool3", 0.9, 0.2) + rows("pool5", 0.9, 0.1) + rows("pool9", 0.8, 0.0)
    assert emloc._pick(r, "emloc", ["pool3", "pool5", "pool9"]) == "pool5"
    r = rows("pool3", 0.9, 0.1) + rows("pool5", 0.9, 0.1)
    assert emloc._pick(r, "emloc", ["pool3", "pool5"]) == "pool3"
