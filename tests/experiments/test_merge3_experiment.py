"""rayml.experiments.merge3: every declared claim is wired to a number its run measures, and a run
whose endpoints miss the gate decides no paper claim."""

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
    vals = {"test": {"merge3": 0.9, "base": 0.0}, "winners_curse": {"merge3": 0.05}}
    assert exp.nulled(vals, True) == vals
    assert exp.nulled(vals, False) == {"test": {"merge3": None, "base": None}, "winners_curse": {"merge3": None}}


def test_claims_name_their_controls_and_sources():
    paper = [c for c in exp.CLAIMS if c.kind == "paper"]
    assert len(paper) == 8 and all(c.source for c in paper)
    assert exp.GATE == {"endpoint_min": 0.8, "base_max": 0.2}
    assert exp.SIZES["quick"]["test_items"] >= 500 and exp.SIZES["quick"]["gate_items"] >= 500


def test_vs_claims_pair_over_independent_repeats_with_an_unevolved_control():
    vs = [c for c in exp.CLAIMS if c.test is not None and c.table == "repeats"]
    assert len(vs) == 5
    for c in vs:
        assert c.pair_on == ("repeat",) and c.a == {"model": "merge3"}
        assert "random_merge" in [ctl.name for ctl in c.controls]
    # a one-sided sign test over R repeats reaches p < 0.05 only when 0.5 ** R < 0.05
    assert 0.5 ** exp.SIZES["quick"]["repeats"] < 0.05 and exp.SIZES["quick"]["random_merges"] >= 2
    for size in exp.SIZES.values():
        assert 1.0 in size["ta_grid"] and min(size["ta_grid"]) < 1.0 < max(size["ta_grid"])


def test_task_arithmetic_grid_must_hold_the_usual_lambda():
    import pytest

    with pytest.raises(ValueError, match="ta_grid"):
        exp._check(dict(exp.SIZES["tiny"], ta_grid=[0.5, 0.75]))
    with pytest.raises(ValueError, match="random_merges"):
        exp._check(dict(exp.SIZES["tiny"], random_merges=0))


import pytest  # noqa: E402


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
         "gate": {"base_on_a": 0.0, "base_on_b": 0.0, "endpoint_a_on_a": 0.1, "endpoint_b_on_b": 0.0,
                  "endpoint_a_on_b": 0.0, "endpoint_b_on_a": 0.0, "threshold_endpoint_min": 0.8,
                  "threshold_base_max": 0.2, "passed": 0.0}}
    config = exp._effective(dict(exp.SIZES["quick"], model="smollm2-135m"))
    out = exp.stopped_outcome(S, config, {"start": 0.0, "setup": 1.0})
    record = {"metrics": out.metrics, "tables": out.tables, "baselines": out.baselines}
    evaluated = results.evaluate_claims(record, exp.CLAIMS)
    # nothing decided, no claim holds: every paper claim has nothing to measure (incomplete)
    assert not any(c["holds"] for c in evaluated)
    assert all(c["status"] == "incomplete" for c in evaluated if c["kind"] == "paper")
    assert all(c["status"] in ("fails", "incomplete") for c in evaluated)
    assert exp.plots(record)["merge3"] is not None
