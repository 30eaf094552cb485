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


def test_smollm2_runs_the_quick_size_real_block_on_iris():
    """``--set model=smollm2-135m`` (session 10): the quick size's ``real`` block replaces the substrate's
    settings, is checked as the run would use it, and can show its claims; the substrate is unaffected."""
    from rayml.experiments import emloc

    quick = emloc.SIZES["quick"]
    base = emloc._effective(quick)
    assert base["tasks"] == ["redundant"] and base["n_demos"] == quick["n_demos"] and "real" not in base
    real = emloc._effective(dict(quick, model="smollm2-135m"))
    assert real["tasks"] == ["iris"] and real["model"] == "smollm2-135m" and "real" not in real
    assert max(real["n_demos"]) + real["queries"] <= 150
    assert emloc.evidence_problems(dict(quick, model="smollm2-135m")) == []
    for grid, paper in ((real["emloc_pools"], emloc.PAPER_POOL), (real["snapkv_windows"], 32),
                        (real["h2o_recent"], 0.5), (real["streaming_sinks"], 4)):
        assert min(grid) < paper < max(grid)
    emloc._check_config(dict(quick, model="smollm2-135m"))
    with pytest.raises(ValueError, match="real"):
        emloc._check_config(dict(quick, real={"no_such_setting": 1}))
    with pytest.raises(ValueError, match="queries"):  # the block is validated as the run uses it
        emloc._check_config(dict(quick, model="smollm2-135m", real=dict(quick["real"], queries=0)))
    emloc._check_config(dict(quick, real=dict(quick["real"], queries=0)))  # the substrate does not use it


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
    gates = (emloc.GATE.text, emloc.GATE_MAJORITY.text, emloc.GATE_SHUFFLED.text)
    assert paper and all(c.gates == gates for c in paper)


def test_pick_prefers_top1_then_lower_kl_then_grid_order():
    from rayml.experiments import emloc

    def rows(p, top1, kl):
        return [dict(method="emloc", param=p, split="tune", metric="top1", value=top1),
                dict(method="emloc", param=p, split="tune", metric="kl", value=kl)]

    r = rows("pool3", 0.9, 0.2) + rows("pool5", 0.9, 0.1) + rows("pool9", 0.8, 0.0)
    assert emloc._pick(r, "emloc", ["pool3", "pool5", "pool9"]) == "pool5"
    r = rows("pool3", 0.9, 0.1) + rows("pool5", 0.9, 0.1)
    assert emloc._pick(r, "emloc", ["pool3", "pool5"]) == "pool3"


# ------------------------------------------------------------------------------------------
# session 9 (outside review R2): the label-prior gate, the controls, the non-inferiority test


def _demos(answers, prompts=None):
    from rayml.kvcache.emloc import Demo

    prompts = prompts or [[10 + i] for i in range(len(answers))]
    return [Demo(p, a, [2]) for p, a in zip(prompts, answers)]


def test_majority_accuracy_answers_with_the_most_frequent_demonstration_label():
    from rayml.experiments import emloc

    demos = _demos([[5], [6], [5], [7], [5, 1]])
    queries = [([1], [5]), ([1], [6]), ([1], [5]), ([1], [5, 1])]
    assert emloc.majority_accuracy(demos, queries) == 0.5       # label (5,) wins 2 of 5 demos; 2 of 4 queries
    assert emloc.majority_accuracy(_demos([[6], [5]]), [([1], [6])]) == 1.0   # a tie: the one shown first


def test_shuffled_labels_keeps_prompts_and_label_counts_and_is_seeded():
    from rayml.experiments import emloc

    demos = _demos([[i % 3 + 5] for i in range(12)])
    a, b, c = emloc.shuffled_labels(demos, 3), emloc.shuffled_labels(demos, 3), emloc.shuffled_labels(demos, 4)
    assert [d.prompt for d in a] == [d.prompt for d in demos] and [d.end for d in a] == [d.end for d in demos]
    assert sorted(d.answer for d in a) == sorted(d.answer for d in demos)
    assert [d.answer for d in a] == [d.answer for d in b] and [d.answer for d in a] != [d.answer for d in c]
    assert [d.answer for d in a] != [d.answer for d in demos]


def test_random_prune_keeps_a_random_subset_at_the_budget_per_layer_and_head():
    import numpy as np
    import torch

    import rayml.llm
    from rayml.experiments import emloc
    from rayml.kvcache.emloc import context_ids, full_memory

    lm = rayml.llm.pretrained("base")
    demos, _ = emloc.make_task("retrieve", 6, 2, 0, lm.tokenizer)
    ids, _ = context_ids(demos, lm.tokenizer.bos_id)
    full = full_memory(lm.model, ids)
    mem = emloc.random_prune(full, 9, np.random.default_rng(0))
    assert mem.tokens_per_layer() == [9] * len(full.keys) and mem.n_tokens == full.n_tokens
    for layer in range(len(full.keys)):
        pos = mem.positions[layer]
        assert torch.all(pos[:, 1:] > pos[:, :-1])                                # distinct, in order
        for h in range(pos.shape[0]):                                             # the full memory's own rows
            rows = full.positions[layer][h].tolist()
            at = torch.tensor([rows.index(int(p)) for p in pos[h]])
            assert torch.equal(mem.keys[layer][h], full.keys[layer][h][at])
    other = emloc.random_prune(full, 9, np.random.default_rng(1))
    assert any(not torch.equal(a, b) for a, b in zip(mem.positions, other.positions))


def _record(full, emloc_acc, majority, shuffled, random=None, two=None, streaming=None):
    """A record with per-item accuracies, shaped as emloc.run writes it (only what the on-par claim reads)."""
    import numpy as np

    per = {"full": full, "emloc": emloc_acc, "majority": majority, "shuffled": shuffled,
           "random": random or [0.0] * len(full), "two_demos": two or [0.0] * len(full),
           "streaming": streaming or [0.0] * len(full)}
    test = [dict(task="iris", n_demos=16, item=i, method=m, metric="accuracy", value=v)
            for m, vs in per.items() for i, v in enumerate(vs)]
    mean = {m: float(np.mean(v)) for m, v in per.items()}
    return {"metrics": {"emloc": {"accuracy": mean["emloc"]}},
            "baselines": {m: {"accuracy": mean[m]} for m in per if m != "emloc"},
            "tables": {"test": test}}


def _on_par(record):
    from rayml.experiments import emloc
    from rayml.results import evaluate_claims

    claim = next(c for c in emloc.CLAIMS if c.metric == "metrics.emloc.accuracy" and c.kind == "paper")
    out = {e["text"]: e for e in evaluate_claims(record, [emloc.GATE, emloc.GATE_MAJORITY, emloc.GATE_SHUFFLED,
                                                          claim])}
    return out[claim.text], out[emloc.GATE_MAJORITY.text], out[emloc.GATE_SHUFFLED.text]


def test_full_context_at_the_label_prior_floor_leaves_the_paper_claim_incomplete():
    """The reviewed setting: full context 4 points above the majority label; the rule passes "on par"."""
    full = [0.3125, 0.3125, 0.0, 0.4375, 0.375, 0.6875, 0.25, 0.5, 0.5, 0.3125, 0.4375, 0.5625]
    maj = [0.3125, 0.375, 0.3125, 0.375, 0.375, 0.1875, 0.4375, 0.4375, 0.375, 0.3125, 0.3125, 0.375]
    em = [0.5625, 0.3125, 0.3125, 0.375, 0.375, 0.25, 0.1875, 0.3125, 0.5, 0.5625, 0.3125, 0.5]
    sh = [0.375, 0.3125, 0.4375, 0.375, 0.375, 0.3125, 0.1875, 0.25, 0.4375, 0.3125, 0.3125, 0.25]
    claim, g_maj, g_sh = _on_par(_record(full, em, maj, sh, two=[0.2] * 12))
    assert not g_maj["holds"] and not g_sh["holds"]
    assert claim["status"] == "incomplete" and emloc_gates_named(claim)
    # with the non-inferiority test neither EMLoC nor the majority rule is shown on par on these 12 items
    ctl = {c["name"]: c for c in claim["controls"]}
    print(claim["measured"], ctl["majority label (no model)"]["measured"])
    assert not claim["holds"] and not ctl["majority label (no model)"]["holds"]


def emloc_gates_named(claim):
    from rayml.experiments import emloc

    return set(claim["gated_by"]) == {emloc.GATE_MAJORITY.text, emloc.GATE_SHUFFLED.text}


def test_in_context_learning_gates_pass_and_the_majority_rule_fails_on_par():
    full = [0.9, 0.8, 1.0, 0.9, 0.85, 0.95, 0.9, 0.8]
    claim, g_maj, g_sh = _on_par(_record(full, list(full), [0.35] * 8, [0.4] * 8, random=[0.3] * 8))
    assert g_maj["holds"] and g_sh["holds"] and claim["status"] == "holds"
    ctl = {c["name"]: c["holds"] for c in claim["controls"]}
    assert not ctl["majority label (no model)"] and not ctl["label-shuffled context"]
    assert not ctl["random tokens at EMLoC's budget"]


def test_on_par_is_a_paired_non_inferiority_test_not_only_a_mean():
    """Within 5 points on the mean, but worse on 10 of 12 items: the shifted paired test does not hold it."""
    full = [0.875] * 12
    em = [0.8125] * 10 + [0.9375] * 2
    claim, g_maj, _ = _on_par(_record(full, em, [0.3] * 12, [0.3] * 12))
    assert g_maj["holds"] and claim["measured"].startswith("0.8333")
    assert claim["status"] == "fails" and claim["p_value"] > 0.05
    claim2, _, _ = _on_par(_record(full, list(full), [0.3] * 12, [0.3] * 12))
    assert claim2["status"] == "holds" and claim2["p_value"] < 0.05


def test_kl_and_random_claims_are_ours():
    from rayml.experiments import emloc

    ours = [c for c in emloc.CLAIMS if "random" in str(c.compare)]
    assert len(ours) == 1 and ours[0].kind == "sanity" and ours[0].text.startswith("ours")
    assert ours[0].test and ours[0].table == "test"


def test_a_gate_margin_is_tested_pair_by_pair_not_only_on_the_mean():
    """Session 10 review (R5): full context 6 points above the label prior on the mean, decided by two
    items, with most items within the margin: the mean clears 5 points, the paired test against 5 does not."""
    full = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.9]
    maj = [0.48, 0.47, 0.48, 0.49, 0.47, 0.48, 0.48, 0.47, 0.49, 0.48, 0.5, 0.5]
    claim, g_maj, _ = _on_par(_record(full, full, maj, [0.0] * 12, two=[0.0] * 12))
    assert sum(full) / 12 - sum(maj) / 12 > 0.05
    assert not g_maj["holds"] and claim["status"] == "incomplete"


def test_fixed_ratio_control_keeps_at_most_its_ratio_and_reaches_below_half():
    """Session 11 (outside review R5): ratio 0.5 rounded odd contexts up (195 of 389 tokens, 0.501 > 0.5), and
    the SmolLM2 grid {0.5, 1.0} could not show where SnapKV stops being on par; every size now sweeps 0.3 / 0.4
    / 0.5 and a ratio keeps at most its share of the context."""
    from rayml.experiments import emloc

    assert emloc.fixed_keep(0.5, 389) == 194 and emloc.fixed_keep(0.5, 388) == 194
    for n in range(1, 1200, 7):
        for r in (0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0):
            k = emloc.fixed_keep(r, n)
            assert 1 <= k <= n and (k <= r * n + 1e-9 or k == 1) and k > r * n - 1
    assert emloc.fixed_keep(1.0, 389) == 389
    for bad in ((0.0, 10), (1.5, 10), (0.5, 0)):
        with pytest.raises(ValueError):
            emloc.fixed_keep(*bad)
    for cfg in (emloc.SIZES["quick"], emloc._effective(dict(emloc.SIZES["quick"], model="smollm2-135m")),
                emloc.SIZES["full"]):
        assert {0.3, 0.4, 0.5, 1.0} <= set(cfg["fixed_ratios"])


def test_power_estimates_carry_the_claims_margin():
    """R5: the on-par test's differences are EMLoC + 0.05 - full (mean -0.023 -> +0.027 with the margin), not
    EMLoC - full, which shows no effect in the claim's direction; a gate's are full - reference - 0.05."""
    import numpy as np

    from rayml import evidence
    from rayml.experiments import emloc

    rng = np.random.default_rng(3)
    full = list(np.round(rng.uniform(0.3, 0.7, 16) * 24) / 24)
    em = [f + d for f, d in zip(full, [-0.125, 0.125, 0.0, -0.25, 0.083, -0.042, 0.0, 0.167,
                                       -0.167, 0.042, -0.083, 0.125, -0.042, 0.0, -0.125, 0.0])]
    maj = [f - 0.1 for f in full]
    rec = _record(full, em, maj, [f - 0.2 for f in full])
    got = emloc.power_estimates(rec["tables"]["test"])
    d = np.array(em) - np.array(full)
    assert d.mean() < 0 and evidence.power_from_pilot(d, test="wilcoxon")["pairs_needed"] is None
    want = evidence.power_from_pilot(d + emloc.PAR_MARGIN, test="wilcoxon")
    assert got["on_par"]["pairs_needed"] == want["pairs_needed"] is not None
    assert abs(got["on_par"]["mean_difference_with_margin"] - (d.mean() + 0.05)) < 1e-12
    # every pair is 10 points above the majority rule: 5 past the gate's margin
    assert abs(got["gate_majority"]["mean_difference_with_margin"] - 0.05) < 1e-9
    assert got["gate_shuffled"]["mean_difference_with_margin"] > got["gate_majority"]["mean_difference_with_margin"]


def test_on_par_controls_pair_on_accuracy_rows_not_on_the_last_metric():
    """Session 11: a control's filter replaces the claim's ``a``; without ``metric`` random tokens and StreamingLLM
    (which have kl / top1 / kept_fraction / query_flops rows in ``test``) were paired on query FLOPs and passed."""
    from rayml.experiments import emloc

    full = [0.9, 0.8, 1.0, 0.9, 0.85, 0.95, 0.9, 0.8]
    rec = _record(full, list(full), [0.35] * 8, [0.4] * 8, random=[0.3] * 8, streaming=[0.2] * 8)
    rec["tables"]["test"] += [dict(task="iris", n_demos=16, item=i, method=m, metric=k, value=v)
                              for m in ("full", "emloc", "random", "streaming") for i in range(8)
                              for k, v in (("kl", 0.1), ("query_flops", 1e7 if m != "full" else 2e7))]
    claim, _, _ = _on_par(rec)
    ctl = {c["name"]: c for c in claim["controls"]}
    assert claim["status"] == "holds"
    for name in ("random tokens at EMLoC's budget", "streaming"):
        assert not ctl[name]["holds"] and ctl[name]["p_value"] > 0.5
    for c in emloc.CLAIMS:
        for k in c.controls:
            assert c.test is None or k.a is None or "metric" in k.a
