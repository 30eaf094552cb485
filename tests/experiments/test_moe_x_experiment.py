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


def test_coverage_claims_have_the_untrained_model_as_control():
    from rayml.experiments.moe_x import CLAIMS

    paper = [c for c in CLAIMS if c.kind == "paper" and c.a.get("metric") in ("coverage", "reconstruction")]
    assert len(paper) == 6 and all(any(k.name == "untrained" for k in c.controls) for c in paper)
    assert any(c.kind == "sanity" and c.b == {"method": "untrained", "metric": "coverage"} for c in CLAIMS)


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

    seeds, methods = range(6), ("moe-x", "switch", "dense-gelu", "dense-relu", "sae", "untrained")
    rows = [{"method": m, "seed": i, "metric": k, "value": 0.1 * i + 0.01 * j}
            for j, m in enumerate(methods) for i in seeds for k in ("coverage", "reconstruction")]
    rows += [{"method": m, "seed": i, "metric": "router_chosen_to_all_l0", "value": 0.5 + j}
             for j, m in enumerate(("moe-x", "switch")) for i in seeds]
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
    for out in evaluate_claims(record, tested):
        assert f"over {len(seeds)} paired seeds" in out["measured"]
        assert all(f"over {len(seeds)} paired seeds" in k["measured"] for k in out["controls"])


def test_router_claim_is_paired_against_switch_and_sae_grid_matches_the_lr_grid():
    from rayml.experiments.moe_x import CLAIMS, SIZES

    router = [c for c in CLAIMS if c.metric == "metrics.router_chosen_to_all_l0"]
    assert len(router) == 1 and router[0].test and router[0].op == "<"
    assert router[0].b == {"method": "switch", "metric": "router_chosen_to_all_l0"}
    for size in ("quick", "full"):
        assert len(SIZES[size]["sae_l1_grid"]) == len(SIZES[size]["lr_grid"])
