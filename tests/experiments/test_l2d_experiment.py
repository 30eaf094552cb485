"""rayml.experiments.l2d: every declared claim is wired to a number its run measures; a finetuning
run's result depends on its work item only, not on what its worker process ran before."""

import numpy as np
import torch

from rayml import runtime
from rayml.experiments import l2d as E


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("l2d") == []


def _tiny_shared():
    config = dict(E.SIZES["tiny"])
    s_train, s_held = runtime.seeds(1, 2)
    return {"config": config, "train": E._items(config, s_train, 16, "train"),
            "heldout": E._items(config, s_held, 8, "train"), "test": []}


def test_a_finetuning_run_does_not_depend_on_what_its_process_ran_before():
    """Found by the scale-out test (issue 17): the first LoRA run of each worker process loaded a base
    to count the L2D budget between ``torch.manual_seed`` and the LoRA's initialisation, so the LoRA
    started from other weights there than in later runs of the same process. Here one process runs
    the same item first, then after other work (an L2D run, bases loaded, draws from the global
    stream), and must return the same adapters and held-out loss."""
    torch.set_num_threads(1)
    shared = _tiny_shared()
    shared["config"] = dict(shared["config"], steps=2, batch=4)
    seed = runtime.seeds(2, 1)[0]
    first = E.train_task(("tune", "lora", 1e-3, 0, seed), shared)
    E.train_task(("tune", "l2d", 1e-3, 0, seed + 1), shared)
    E._base()
    torch.manual_seed(123)
    torch.randn(17)
    again = E.train_task(("tune", "lora", 1e-3, 0, seed), shared)
    assert again["heldout_loss"] == first["heldout_loss"]
    assert again["state"].keys() == first["state"].keys()
    assert all(np.array_equal(again["state"][k], first["state"][k]) for k in first["state"])


def test_bad_model_options_are_rejected_before_any_work():
    import pytest

    tiny = dict(E.SIZES["tiny"])
    E._check(dict(tiny, model="smollm2-135m"))
    for bad, name in ((dict(model="gpt2"), "model"), (dict(real={"nope": 1}), "real"), (dict(real={"model": "base"}), "real"),
                      (dict(task="sum"), "task"), (dict(levels=[0]), "levels"), (dict(levels=2), "levels"),
                      (dict(model="smollm2-135m", real=dict(tiny["real"], eval_items=1)), "eval_items")):
        with pytest.raises(ValueError, match=name):
            E._check(dict(tiny, **bad))


def test_real_model_items_are_plain_text_questions_split_and_interleaved_by_level():
    from rayml.alignment import text_tasks as tt

    config = E._effective(dict(E.SIZES["quick"], model="smollm2-135m"))
    test = E._items(config, 3, 8, "test")
    assert [it.level for it in test] == [1, 2] * 4  # the adaptive solver's first items cover every level
    assert all(tt._split_of(it.question) == "test" for it in test)
    train = E._items(config, 3, 40, "train")
    assert {it.level for it in train} == {1, 2} and all(tt._split_of(it.question) == "train" for it in train)
    assert E._items(config, 3, 40, "train") == train
    assert E._effective(dict(E.SIZES["quick"]))["steps"] == E.SIZES["quick"]["steps"]  # base: real block unused


def test_smollm2_untrained_flow_generates_the_base_answers_and_training_is_deterministic():
    """On SmolLM2-135M: a flow path at its initialisation (zero-initialised modulation head) leaves the
    model equal to the base at every t, so its ODE generation reproduces the base's greedy answers
    token for token; a finetuning run is a function of its item (run twice, same adapters)."""
    import pytest

    from rayml.llm import smollm2
    from rayml.registry import MissingExtra

    torch.set_num_threads(1)
    try:
        smollm2.require_hf()
        smollm2.ensure()
    except (MissingExtra, smollm2.ModelUnavailable) as e:
        pytest.skip(f"SmolLM2-135M is not available here: {e}")
    config = E._effective(dict(E.SIZES["tiny"], model="smollm2-135m"))
    base, tok = E._base("smollm2-135m")
    items = E._items(config, 5, 2, "test")
    prompts = [E._encode(tok, it, True)[0] for it in items]
    n = E._max_new(config)
    with torch.no_grad():
        ref, _ = E._by_length(lambda p: E._generate_base(base, p, n), prompts, n)
        torch.manual_seed(0)
        flow = E._build("l2d", config, base)
        gen = torch.Generator().manual_seed(1)
        out, evals = E._by_length(lambda p: E._generate_l2d(flow, p, n, "euler", 2, gen, 0.05), prompts, n)
    assert torch.equal(out, ref) and evals.tolist() == [2 * n] * len(items)
    shared = {"config": config, "train": E._items(config, 1, 8, "train"), "heldout": E._items(config, 2, 2, "train")}
    a = E.train_task(("tune", "l2d", 1e-3, 0, 9), shared)
    b = E.train_task(("tune", "l2d", 1e-3, 0, 9), shared)
    assert a["heldout_loss"] == b["heldout_loss"] and a["curve"] == b["curve"]
    assert all(np.array_equal(a["state"][k], b["state"][k]) for k in a["state"])


def test_a_zero_over_zero_ratio_is_incomplete_and_a_failed_gate_makes_the_step_claims_incomplete():
    """Issue 42: L2D and its 1-step solve both at 0% made the adaptive ratio 0 / 1e-12 = 0, a failing
    verdict on nothing. The ratio of two zero accuracies is NaN (incomplete), and L2D's top-steps
    accuracy under the gate makes the step-count claims incomplete whatever they measured."""
    from rayml.results import evaluate_claims

    assert np.isnan(E.ratio(0.0, 0.0)) and E.ratio(0.3, 0.6) == 0.5
    rows = [{"method": "l2d-euler", "seed": 0, "item": i, "level": lv, "steps": st, "metric": "correct", "value": v}
            for i in range(8) for lv, st, v in (("top", 4, float(i < 1)), ("first", 1, 0.0))]
    rows += [{"method": "lora", "seed": 0, "item": i, "steps": 0, "level": "top", "metric": "correct", "value": 0.0}
             for i in range(8)]
    # the base answers the same item L2D does (the full record's case: 0.502 vs the base's 0.500)
    rows += [{"method": "base", "seed": 0, "item": i, "steps": 0, "level": "top", "metric": "correct",
              "value": float(i < 1)} for i in range(8)]
    record = {"name": "l2d", "tables": {"accuracy": rows},
              "metrics": {"accuracy": 0.125, "accuracy_1_step": 0.0, "accuracy_base": 0.125,
                          "accuracy_ratio_1_step_on_adaptive_items": 0.0,
                          "adaptive": {"accuracy_ratio_to_top_steps": E.ratio(0.0, 0.0)}},
              "baselines": {"lora": {"accuracy": 0.0}, "base": {"accuracy": 0.125}}}
    out = {e["text"]: e for e in evaluate_claims(record, E.CLAIMS)}
    gate = next(c for c in E.CLAIMS if c.kind == "sanity")
    assert out[gate.text]["holds"] is False
    gated = [c for c in E.CLAIMS if c.gates]
    assert len(gated) == 2 and all(out[c.text]["status"] == "incomplete" for c in gated)


def test_the_gate_holds_only_when_l2d_answers_more_than_its_frozen_base():
    from rayml.results import evaluate_claims

    gate = next(c for c in E.CLAIMS if c.kind == "sanity")

    def verdict(l2d_right: int, base_right: int) -> bool:
        rows = [{"method": "l2d-euler", "seed": s, "item": i, "level": "top", "steps": 4, "metric": "correct",
                 "value": float(i < l2d_right)} for s in range(2) for i in range(12)]
        rows += [{"method": "base", "seed": s, "item": i, "level": "top", "steps": 0, "metric": "correct",
                  "value": float(i < base_right)} for s in range(2) for i in range(12)]
        record = {"name": "l2d", "tables": {"accuracy": rows},
                  "metrics": {"accuracy": l2d_right / 12, "accuracy_base": base_right / 12}}
        return evaluate_claims(record, (gate,))[0]["holds"]

    assert verdict(12, 4) is True   # 16 paired wins, no loss
    assert verdict(6, 6) is False    # the same items: no flow-path gain


def test_substrate_items_mix_the_digit_counts_half_each():
    config = dict(E.SIZES["quick"])
    items = E._items(config, 5, 10, "test")
    assert [len(str(it.meta["a"])) for it in items] == [3, 4] * 5
