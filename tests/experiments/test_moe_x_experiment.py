"""rayml.experiments.moe_x: every declared claim is wired to a number its run measures."""


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("moe-x") == []


def test_sae_l1_is_chosen_under_the_sparsity_cap():
    from rayml.experiments.moe_x import choose_sae_l1

    cov = {1e-3: 0.50, 1e-2: 0.48, 1e-1: 0.45, 3e-1: 0.40}
    l0 = {1e-3: 0.60, 1e-2: 0.36, 1e-1: 0.07, 3e-1: 0.02}
    assert choose_sae_l1(cov, l0, cap=0.076) == (1e-1, True)   # best coverage among the sparse enough
    assert choose_sae_l1(cov, l0, cap=1.0) == (1e-3, True)     # no cap binds: best coverage
    assert choose_sae_l1(cov, l0, cap=0.01) == (3e-1, False)   # none sparse enough: the sparsest, flagged


def test_interpretability_claims_are_gated_and_controlled():
    from rayml.experiments.moe_x import CLAIMS, GATE_MOVE_NUMBER, GATE_UNTRAINED

    paper = [c for c in CLAIMS if c.kind == "paper" and c.a.get("metric") in ("coverage", "reconstruction")]
    assert len(paper) == 5 and all({k.name for k in c.controls} == {"untrained", "move-number"} for c in paper)
    assert all(set(c.gates) == {GATE_UNTRAINED.text, GATE_MOVE_NUMBER.text} for c in paper)
    assert not any(c.b.get("method") == "switch" and c.a.get("metric") == "coverage" for c in paper)  # dropped
    val = [c for c in CLAIMS if c.metric == "metrics.val_loss_ratio_to_gelu"]
    assert len(val) == 1 and [k.name for k in val[0].controls] == ["dense-gelu-2", "untrained"]


def test_val_loss_claim_is_non_inferiority_per_seed_with_a_no_mlp_control():
    """Session-5 review: every seed's ratio against the 1% margin (a sign test), and a dense model with a
    2-unit MLP as the control that must fail it; the ratio of means alone passed with one bad seed."""
    from dataclasses import replace

    from rayml.experiments.moe_x import BAR, CLAIMS, GATE_SEEDS, NO_MLP, PAPER_VAL_GAP, SIZES, _ratio_rows
    from rayml.results import evaluate_claims

    assert all(SIZES[k]["control_hidden"] == 2 for k in SIZES)
    (gated,) = [c for c in CLAIMS if c.metric == "metrics.val_loss_ratio_to_gelu"]
    assert gated.gates == (GATE_SEEDS.text,)
    claim = replace(gated, gates=())
    assert claim.test == "paired sign test over seeds" and claim.b == {"method": BAR, "metric": "val_loss_ratio_to_gelu"}
    seeds = range(6)
    gelu = [1.10 + 0.01 * i for i in seeds]
    moe = [g * r for g, r in zip(gelu, (0.98, 0.99, 0.98, 1.03, 0.99, 0.98))]   # one seed 3% worse
    val = {("dense-gelu", i): gelu[i] for i in seeds}
    val.update({("moe-x", i): moe[i] for i in seeds})
    val.update({(NO_MLP, i): 1.06 * gelu[i] for i in seeds})
    val.update({("untrained", i): 2.7 * gelu[i] for i in seeds})
    rows = _ratio_rows(val, ["moe-x", "dense-gelu", NO_MLP, "untrained"], len(seeds))
    assert sum(r["method"] == BAR and r["value"] == 1 + PAPER_VAL_GAP for r in rows) == len(seeds)
    mean = lambda m: sum(val[(m, i)] for i in seeds) / sum(gelu)
    record = {"tables": {"per_model": rows}, "metrics": {"val_loss_ratio_to_gelu": mean("moe-x")},
              "baselines": {"dense_gelu_2": {"val_loss_ratio_to_gelu": mean(NO_MLP)},
                            "untrained": {"val_loss_ratio_to_gelu": mean("untrained")}}}
    out = evaluate_claims(record, [claim])[0]
    assert mean("moe-x") < 1 + PAPER_VAL_GAP          # the ratio of means alone would pass
    assert out["status"] == "fails" and out["p_value"] > 0.05   # 5 of 6 seeds: p = 0.11
    assert all(not k["holds"] for k in out["controls"])
    for r in rows:
        if r["method"] == "moe-x" and r["seed"] == 3:
            r["value"] = 0.99
    record["metrics"]["val_loss_ratio_to_gelu"] = 0.985
    out = evaluate_claims(record, [claim])[0]
    assert out["status"] == "holds" and out["p_value"] < 0.05 and out["discriminating"] is True
    record["metrics"]["seed_test_min_p"] = 0.5 ** 2   # 2 seeds (quick) cannot decide: the gate makes it incomplete
    assert evaluate_claims(record, [GATE_SEEDS, gated])[1]["status"] == "incomplete"


def test_a_failed_gate_makes_the_interpretability_claims_incomplete():
    from rayml.experiments.moe_x import CLAIMS, GATE_UNTRAINED
    from rayml.results import evaluate_claims

    seeds = range(6)
    vals = {"moe-x": 0.6, "dense-gelu": 0.5, "dense-relu": 0.5, "switch": 0.5, "sae": 0.5, "untrained": 0.7,
            "move-number": 0.2}
    rows = [{"method": m, "seed": i, "metric": k, "value": v + 0.001 * i} for m, v in vals.items() for i in seeds
            for k in ("coverage", "reconstruction")]
    rows += [{"method": m, "seed": i, "metric": "router_chosen_to_all_l0", "value": 0.5 + j}
             for j, m in enumerate(("moe-x", "switch")) for i in seeds]
    record = {"name": "moe-x", "tables": {"per_model": rows}}
    for c in CLAIMS:
        for path in [c.metric] + ([c.compare] if isinstance(c.compare, str) else []) + [k.metric for k in c.controls]:
            _set(record, path, 0.5)
    out = {e["text"]: e for e in evaluate_claims(record, CLAIMS)}
    assert out[GATE_UNTRAINED.text]["holds"] is False  # the untrained model covers the board better
    gated = [c for c in CLAIMS if GATE_UNTRAINED.text in c.gates]
    assert gated and all(out[c.text]["status"] == "incomplete" for c in gated)


def _set(record, path, value):
    node = record
    *head, last = path.split(".")
    for part in head:
        node = node.setdefault(part, {})
    node[last] = value


def test_paired_claims_pair_one_value_per_trained_model():
    """Every tested claim (and control) selects exactly one row per test seed from a table shaped like
    the run's ``per_model`` table, next to per-BSP rows that must not be picked up."""
    from rayml.experiments.moe_x import CLAIMS, METHOD
    from rayml.results import evaluate_claims

    seeds, methods = range(6), ("moe-x", "switch", "dense-gelu", "dense-relu", "sae", "untrained", "move-number")
    rows = [{"method": m, "seed": i, "metric": k, "value": 0.1 * i + 0.01 * j}
            for j, m in enumerate(methods) for i in seeds for k in ("coverage", "reconstruction")]
    rows += [{"method": m, "seed": i, "metric": "router_chosen_to_all_l0", "value": 0.5 + j}
             for j, m in enumerate(("moe-x", "switch")) for i in seeds]
    rows += [{"method": m, "seed": i, "metric": "val_loss_ratio_to_gelu", "value": 1.0 + 0.01 * j}
             for j, m in enumerate(("moe-x", "dense-gelu-2", "untrained", "dense-gelu x (1 + gap)")) for i in seeds]
    per_bsp = [{"method": m, "seed": i, "bsp": b, "metric": "coverage", "value": 0.3}
               for m in methods for i in seeds for b in range(20)]
    record = {"name": METHOD, "tables": {"per_model": rows, "coverage": per_bsp}}
    tested = [c for c in CLAIMS if c.test]
    assert tested and all(c.table == "per_model" and c.pair_on == ("seed",) for c in tested)
    for c in tested:
        for flt in [c.a, c.b] + [k.a for k in c.controls]:
            assert sum(all(r.get(k) == v for k, v in flt.items()) for r in rows) == len(seeds), (c.text, flt)
    for c in CLAIMS:
        for path in [c.metric] + ([c.compare] if isinstance(c.compare, str) else []) + [k.metric for k in c.controls]:
            _set(record, path, 0.5)
    texts = {c.text for c in tested}
    for out in (e for e in evaluate_claims(record, CLAIMS) if e["text"] in texts):
        assert f"over {len(seeds)} paired seeds" in out["measured"]
        assert all(f"over {len(seeds)} paired seeds" in k["measured"] for k in out["controls"])


def test_router_claim_is_paired_against_switch_and_sae_grid_matches_the_lr_grid():
    from rayml.experiments.moe_x import CLAIMS, SIZES

    router = [c for c in CLAIMS if c.metric == "metrics.router_chosen_to_all_l0"]
    assert len(router) == 1 and router[0].test and router[0].op == "<"
    assert router[0].b == {"method": "switch", "metric": "router_chosen_to_all_l0"}
    for size in ("quick", "full"):
        assert len(SIZES[size]["sae_l1_grid"]) >= len(SIZES[size]["lr_grid"])
