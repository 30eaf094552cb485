"""rayml.experiments.merge3: every declared claim is wired to a number its run measures, and a run
whose endpoints miss the gate decides no paper claim."""

import numpy as np
import pytest

from rayml.experiments import merge3 as exp


def test_tiny_run_fails_the_gate_loudly_and_decides_nothing(unmeasured_claims):
    # at tiny size the endpoints get 2 fine-tuning steps, so they miss the gate (>= 0.8 on their own
    # task): every number a paper claim reads must then be missing, and only those
    missing = unmeasured_claims("merge3")
    paper_paths = []
    for c in exp.CLAIMS:
        if c.kind == "paper":
            paper_paths += [c.metric] + ([c.compare] if isinstance(c.compare, str) else [])
            paper_paths += [ctl.metric for ctl in c.controls]
    assert missing == paper_paths
    assert all(p.startswith("metrics.decided.") for p in paper_paths)
    # the sanity claims (the gate itself, the budget bookkeeping) are measured
    assert not any(c.metric in missing for c in exp.CLAIMS if c.kind == "sanity")


def test_gated_values_are_none_when_the_gate_fails():
    vals = {"test": {"merge3": 0.9, "base": 0.0}, "estimation": {"mean_mae": 0.05}}
    assert exp.nulled(vals, True) == vals
    assert exp.nulled(vals, False) == {"test": {"merge3": None, "base": None}, "estimation": {"mean_mae": None}}


def test_claims_name_their_controls_and_sources():
    paper = [c for c in exp.CLAIMS if c.kind == "paper"]
    assert len(paper) == 6 and all(c.source for c in paper)
    assert exp.GATE == {"endpoint_min": 0.8, "base_max": 0.2, "target_min": 0.05, "disagree_min": 0.1}
    # issue 40: the winner's-curse claim is not the paper's; every paper claim sits behind both gates
    assert not any("winner" in c.text for c in exp.CLAIMS)
    gates = {exp.GATE_ENDPOINTS.text, exp.GATE_TARGET.text}
    assert all(set(c.gates) == gates for c in paper)
    assert all(c.test == exp.WILCOXON for c in paper)


def test_vs_claims_pair_over_independent_repeats_with_an_unevolved_control():
    vs = [c for c in exp.CLAIMS if c.test is not None and c.table == "repeats"]
    assert len(vs) == 4
    for c in vs:
        assert c.pair_on == ("repeat",) and c.a == {"model": "merge3"}
        controls = [ctl.name for ctl in c.controls]
        assert "random_merge" in controls or c.b == {"model": "random_merge"}
    # the comparison with unevolved random merges is a claim of its own, with a margin (issue 40)
    rand = [c for c in vs if c.b == {"model": "random_merge"}]
    assert len(rand) == 1 and rand[0].margin > 0
    # a one-sided Wilcoxon over R repeats reaches p < 0.05 only when 0.5 ** R < 0.05; full has >= 24 repeats
    assert 0.5 ** exp.SIZES["quick"]["repeats"] < 0.05 and exp.SIZES["quick"]["random_merges"] >= 2
    assert exp.SIZES["full"]["repeats"] >= 24
    for size in exp.SIZES.values():
        assert 1.0 in size["ta_grid"] and min(size["ta_grid"]) < 1.0 < max(size["ta_grid"])


def test_a_target_both_endpoints_score_zero_on_fails_the_gate():
    # issue 40: on the cross task alone the base and both endpoints scored 0, their abilities were identical
    # and random merges "passed"; such a target must now fail the gate (and leave every paper claim undecided)
    own = [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    dead = exp.gate_numbers(own, np.zeros((3, 40)))
    assert dead["endpoints_passed"] == 1.0 and dead["target_passed"] == 0.0 and dead["passed"] == 0.0
    y = np.zeros((3, 40))
    y[1, :12], y[2, 12:20] = 1, 1  # A answers 0.3 of the target, B 0.2, on different items
    live = exp.gate_numbers(own, y)
    assert live["target_passed"] == 1.0 and live["passed"] == 1.0
    assert live["endpoints_disagree_on_target"] == 0.5
    same = y.copy()
    same[2] = y[1]  # non-zero but identical patterns: nothing to tell the abilities apart
    assert exp.gate_numbers(own, same)["target_passed"] == 0.0


def test_the_default_target_mixes_the_cross_task_with_each_endpoints_own_task():
    from rayml.llm import tasks

    assert set(exp.TARGET) == {"add_long_letters", "add_long", "add_letters"}
    items, parts = exp.target_items(exp.TARGET, 400, np.random.default_rng(0), tasks.make_items)
    again, _ = exp.target_items(exp.TARGET, 400, np.random.default_rng(0), tasks.make_items)
    assert [it.prompt for it in items] == [it.prompt for it in again]
    assert [it.task for it in items] == parts
    share = {p: parts.count(p) / len(parts) for p in exp.TARGET}
    assert all(abs(share[p] - exp.TARGET[p]) < 0.08 for p in exp.TARGET)
    one, names = exp.target_items("add_long", 3, np.random.default_rng(0), tasks.make_items)
    assert names == ["add_long"] * 3 and len(one) == 3


def test_a_bad_target_is_refused_naming_it():
    with pytest.raises(ValueError, match="target"):
        exp._check(dict(exp.SIZES["tiny"], target={"add_long": 0.0}))
    with pytest.raises(ValueError, match="target"):
        exp._check(dict(exp.SIZES["tiny"], target={"nope": 1.0}))
    with pytest.raises(ValueError, match="target"):
        exp._check(dict(exp.SIZES["tiny"], target=3))


def test_the_evaluator_pool_is_capped_at_the_cpus_ray_has(ray_session):
    import ray

    cpus = int(ray.cluster_resources()["CPU"])
    assert exp._worker_cap(8) == min(8, cpus) and exp._worker_cap(1) == 1


def test_task_arithmetic_grid_must_hold_the_usual_lambda():
    with pytest.raises(ValueError, match="ta_grid"):
        exp._check(dict(exp.SIZES["tiny"], ta_grid=[0.5, 0.75]))
    with pytest.raises(ValueError, match="random_merges"):
        exp._check(dict(exp.SIZES["tiny"], random_merges=0))


@pytest.mark.slow
def test_a_local_hf_directory_runs_the_whole_experiment_with_lora_endpoints(ray_session, tmp_path):
    # the Hugging Face path end to end at its smallest: a tiny random Llama as an HF directory, two LoRA
    # endpoints fine-tuned as pmap tasks, the gate, population, searches and test answers on evaluator actors
    import torch

    from rayml.llm import training
    from rayml.llm.hf import export_hf_dir
    from rayml.llm.model import TransformerLM

    cfg = training.CONFIGS["tiny"]
    tok = training.build_tokenizer(cfg)
    m = TransformerLM(cfg.model_config(tok.vocab_size))
    m.reset_parameters(torch.Generator().manual_seed(0))
    d = export_hf_dir(m, tok, tmp_path / "hf")
    config = dict(exp.SIZES["tiny"], model=d, actors=2)
    config["real"] = dict(config["real"], finetune_items=4, repeats=1, stop_on_failed_gate=False)
    out = exp.run(config, seed=0)
    m_ = out.metrics
    assert m_["model"] == "local Hugging Face directory" and m_["tasks"]["target"] == "add2_letters"
    assert all(e["rank"] == 8 and e["steps"] == 2 for e in m_["endpoints"])
    assert m_["gate"]["passed"] == 0.0 and m_["ungated"]["test"]["merge3"] is not None
    assert {r["repeat"] for r in out.tables["repeats"]} == {0}


def test_a_run_stopped_at_the_gate_records_it_and_decides_nothing():
    from rayml import results

    S = {"endpoints": [None, None], "pool": None, "stopped": True,
         "gate": exp.gate_numbers([0.0, 0.0, 0.1, 0.0, 0.0, 0.0], np.zeros((3, 8)))}
    config = exp._effective(dict(exp.SIZES["quick"], model="smollm2-135m"))
    out = exp.stopped_outcome(S, config, {"start": 0.0, "setup": 1.0})
    record = {"metrics": out.metrics, "tables": out.tables, "baselines": out.baselines}
    evaluated = results.evaluate_claims(record, exp.CLAIMS)
    # nothing decided, no claim holds: every paper claim has nothing to measure (incomplete)
    assert not any(c["holds"] for c in evaluated)
    assert all(c["status"] == "incomplete" for c in evaluated if c["kind"] == "paper")
    assert all(c["status"] in ("fails", "incomplete") for c in evaluated)
    assert exp.plots(record)["merge3"] is not None


def _base_sha(cfg) -> str:
    from rayml.llm.checkpoint import file_sha256

    return file_sha256(exp.base_dir(str(cfg["base"])) / "model.safetensors")


@pytest.mark.parametrize("size", ["quick", "full"])
def test_the_quick_and_full_endpoints_ship_with_a_card_that_matches_their_weights(size):
    import json

    from rayml.llm.checkpoint import file_sha256

    cfg = exp.SIZES[size]
    base_sha = _base_sha(cfg)
    for task in (cfg["task_a"], cfg["task_b"]):
        d = exp.shipped_endpoint_dir(base_sha, task, cfg)
        assert d is not None, f"no shipped endpoint for {size}/{task}: run scripts/ship_checkpoints.py"
        card = json.loads((d / "card.json").read_text())
        assert card["sha256"]["model.safetensors"] == file_sha256(d / "model.safetensors")
        assert card["base_sha256"] == base_sha and card["task"] == task
        assert card["recipe"] == {k: cfg[k] for k in exp._FT}
        assert {"command", "seed", "data", "training_seconds", "scores"} <= set(card)


def test_a_shipped_endpoint_is_used_without_training_and_a_changed_recipe_is_not(tmp_path, monkeypatch):
    from rayml.llm.checkpoint import read_blob

    monkeypatch.setenv("RAYML_CACHE", str(tmp_path))  # an empty cache: only the shipped file can answer
    cfg = exp.SIZES["quick"]
    base_sha = _base_sha(cfg)
    base = read_blob(exp.base_dir(str(cfg["base"])))
    shared = {**{k: cfg[k] for k in exp._FT}, "base": base}
    blob = exp.finetune_endpoint(cfg["task_a"], shared)
    assert blob.digest == read_blob(exp.shipped_endpoint_dir(base_sha, cfg["task_a"], cfg)).digest
    assert not any(tmp_path.iterdir())  # nothing was trained or cached
    assert exp.shipped_endpoint_dir(base_sha, cfg["task_a"], dict(cfg, finetune_steps=cfg["finetune_steps"] + 1)) is None
    assert exp.shipped_endpoint_dir("0" * 64, cfg["task_a"], cfg) is None


def test_per_task_grid_must_hold_the_usual_lambda_and_two_values():
    with pytest.raises(ValueError, match="ta_pt_grid"):
        exp._check(dict(exp.SIZES["tiny"], ta_pt_grid=[0.5, 0.75]))
    with pytest.raises(ValueError, match="ta_pt_grid"):
        exp._check(dict(exp.SIZES["tiny"], ta_pt_grid=[1.0]))
    for size in exp.SIZES.values():
        assert min(size["ta_pt_grid"]) < 1.0 < max(size["ta_pt_grid"])


class _Pool:
    """A stand-in for the evaluator pool's ``map`` on a known search-accuracy surface (the tuning logic
    only: the merges themselves are exercised by the tiny run)."""

    def __init__(self, surface, n):
        self.surface, self.n, self.asked = surface, n, []

    def map(self, method, jobs):
        out = []
        for kind, x, set_name in jobs:
            assert (method, kind, set_name) == ("answer", "task_arithmetic", "search")
            self.asked.append(tuple(float(v) for v in x))
            k = int(round(self.surface(*x) * self.n))
            out.append(np.array([1.0] * k + [0.0] * (self.n - k)))
        return out


def test_per_task_task_arithmetic_extends_off_an_edge_within_merge3s_budget():
    # the review's full-size surface: best at lam_B below the grid's lower edge
    surface = lambda a, b: max(0.0, 0.6 - 0.2 * abs(a - 1.0) - 0.4 * abs(b - 0.35))  # noqa: E731
    N, cfg = 100, {"ta_pt_grid": [0.5, 1.0, 1.5]}
    pool = _Pool(surface, N)
    choice, spent = exp.tune_per_task(pool, cfg, N, budget=100 * N)
    # (1, 0.5) on the lower edge -> 0.25 (better) -> 0.125 (worse): the choice is off the edge
    assert choice.setting == {"lam_a": 1.0, "lam_b": 0.25} and choice.extended == {"lam_b": [0.25, 0.125]}
    assert choice.edges == {} and choice.paper_inside
    assert spent == len(pool.asked) == len(set(pool.asked))
    # a budget of 10 merges: the 9-point grid, then one of the 3 extension points; the rest is never chosen
    pool = _Pool(surface, N)
    choice, spent = exp.tune_per_task(pool, cfg, N, budget=10 * N + N - 1)
    assert spent == 10 and len(pool.asked) == 10
    assert sum(not np.isfinite(v) for _, v in choice.scores) >= 2 and np.isfinite(choice.score)


def test_estimator_controls_use_only_the_population_and_the_anchors():
    rng = np.random.default_rng(0)
    acc = np.r_[0.0, 0.3, 0.2, rng.uniform(0.05, 0.4, 20)]  # base, endpoints, random merges
    Y = (rng.random((23, 40)) < acc[:, None]).astype(float)
    idx, w = np.arange(5), np.full(5, 0.2)
    out = exp.control_estimates(0.8, Y, idx, w)
    const = Y[3:].mean()
    assert out["constant"] == pytest.approx(const)
    assert out["shrunk_mean"] == pytest.approx(exp.SHRINK * 0.8 + (1 - exp.SHRINK) * const)
    x, t = Y[:, idx] @ w, Y.mean(1)
    slope, icpt = np.polyfit(x, t, 1)
    assert out["calibrated_mean"] == pytest.approx(np.clip(slope * 0.8 + icpt, 0, 1))
    # a population whose anchor means are all equal: the calibration falls back to the population's level
    assert exp.control_estimates(0.8, np.ones((5, 6)), idx, w)["calibrated_mean"] == 1.0


def test_controls_of_the_review():
    paper = {c.b.get("model") or c.a.get("estimator"): c for c in exp.CLAIMS if c.kind == "paper"}
    # the strongest fair standard merge is the comparison; SLERP and the shared lambda are controls
    std = paper["task_arithmetic_per_task"]
    assert {"slerp_half", "task_arithmetic"} <= {ctl.name for ctl in std.controls}
    assert "random_anchor_search" in {ctl.name for ctl in paper["random_merge"].controls}
    assert "merge3_mean" in {ctl.name for ctl in paper["full_data"].controls}
    for e in ("gmp_irt", "mp_irt"):  # session 7: the calibrated mean is the baseline, the plain mean a control
        assert paper[e].b == {"estimator": exp.ESTIMATOR_BASELINE} == {"estimator": "calibrated_mean"}
        assert paper[e].compare == "metrics.decided.estimation.calibrated_mean_mae"
        assert [ctl.name for ctl in paper[e].controls] == ["mean", "constant", "shrunk_mean"]
        assert paper[e].pair_on == ("setup_seed", "model")
    assert any(c.metric.endswith("passes_vs_merge3.task_arithmetic_per_task") for c in exp.CLAIMS)


def test_beats_the_better_endpoint_has_selection_and_tuned_merging_as_controls():
    # the session-6 review: random search over the anchors (no evolution) and tuned task arithmetic pass
    # "beats the better endpoint" at full size; as controls they make the claim "not discriminating"
    claim = next(c for c in exp.CLAIMS if c.kind == "paper" and c.b == {"model": "better_endpoint"})
    names = {ctl.name for ctl in claim.controls}
    assert {"random_anchor_search", "task_arithmetic", "task_arithmetic_per_task"} <= names
    assert any(c.metric.endswith("passes_vs_merge3.task_arithmetic") for c in exp.CLAIMS if c.kind == "sanity")


def test_the_estimator_claims_pool_several_setup_seeds():
    # the session-6 review: the estimator verdicts depend on the setup seed; quick and full pair over several
    assert exp.SIZES["quick"]["estimation_seeds"] >= 2
    assert exp.SIZES["full"]["estimation_seeds"] * exp.SIZES["full"]["holdout_models"] >= 300
    with pytest.raises(ValueError, match="estimation_seeds"):
        exp._check(dict(exp.SIZES["tiny"], estimation_seeds=0))
    with pytest.raises(ValueError, match="estimation_seeds"):
        exp._check(dict(exp.SIZES["tiny"], model="smollm2-135m",
                        real=dict(exp.SIZES["tiny"]["real"], estimation_seeds=2)))


def _fake_setup(seed, N=30, H=6, d=2):
    rng = np.random.default_rng(seed)
    A, b = rng.normal(size=(N, d)), rng.normal(size=N)
    thetas = rng.normal(size=(3, d))
    pop = (rng.random((8, N)) < rng.uniform(0.1, 0.6, 8)[:, None]).astype(float)
    hold = (rng.random((H, N)) < rng.uniform(0.1, 0.6, H)[:, None]).astype(float)
    fit = type("Fit", (), {"A": A, "b": b})()
    return dict(seed=seed, sets={"search": list(range(N))}, Y_fit=pop, Y_hold=hold, fit=fit, thetas=thetas,
                holdout=[("slerp" if i % 2 == 0 else "dare_ties", None) for i in range(H)],
                hold_seeds=list(range(100 * seed, 100 * seed + H)))


def test_estimation_error_pairs_over_setup_seed_and_held_out_merge():
    setups = [_fake_setup(0), _fake_setup(1)]
    out, rows = exp.estimation_error(setups, {"anchors": 5})
    assert {r["setup_seed"] for r in rows} == {0, 1} and out["pairs"] == 12 and out["setup_seeds"] == [0, 1]
    # each setup's rows are its own: the same as the setup alone
    alone = exp.estimation_rows(setups[1], {"anchors": 5}, 1)
    assert [r for r in rows if r["setup_seed"] == 1] == alone
    for m in ("mean", "gmp_irt", "calibrated_mean"):
        assert out[f"{m}_mae"] == pytest.approx(np.mean([r["value"] for r in rows if r["estimator"] == m]))
        assert [b[f"{m}_mae"] for b in out["by_seed"]] == pytest.approx(
            [np.mean([r["value"] for r in rows if r["estimator"] == m and r["setup_seed"] == k]) for k in (0, 1)])
    assert out["irt_vs_controls"]["gmp_irt_vs_calibrated_mean"]["pairs"] == 12
    assert out["by_seed"][0]["p_one_sided"]["gmp_irt_vs_mean"] is not None
