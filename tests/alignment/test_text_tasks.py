"""rayml.alignment.text_tasks: verifiable plain-text questions for a pretrained chat model (the
SmolLM2 path of selective-dpo): the verifier, near misses, the held-out split, noise, determinism,
the chat prompt, bad input; and the experiment's model / task settings."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.alignment import text_tasks as tt


@pytest.mark.parametrize("kind", tt.KINDS)
def test_chosen_is_verified_and_the_near_miss_is_wrong(kind):
    rng = np.random.default_rng(0)
    for level in tt.LEVELS[kind]:
        for _ in range(50):
            it = tt.make_item(kind, level, rng, "train")
            miss = tt.near_miss(it, rng)
            assert tt.score(it, it.answer) == 1.0 and tt.score(it, miss) == 0.0
            assert miss.isdigit() and not (len(miss) > 1 and miss[0] == "0")


def test_answers_are_right_by_an_independent_computation():
    rng = np.random.default_rng(1)
    for level in (1, 2, 3):
        it = tt.make_item("add", level, rng, "test")
        a, b = it.question.removeprefix("What is ").removesuffix("?").split("+")
        assert int(it.answer) == int(a) + int(b) and len(a) == len(b) == level
    it = tt.make_item("lookup", 4, rng, "train")
    facts = dict(f.split("=") for f in it.question.split(". ")[0].removeprefix("Facts: ").split(", "))
    assert facts[it.question.rsplit(" ", 1)[1].rstrip("?")] == it.answer and len(facts) == 4


def test_the_verifier_reads_the_first_integer():
    it = tt.TextItem("What is 2+3?", "5", "add", 1)
    assert tt.score(it, " 5") == tt.score(it, "The answer is 5.") == 1.0
    assert tt.score(it, "55") == tt.score(it, "2+3=5") == tt.score(it, "") == 0.0


def test_evaluation_questions_never_appear_in_training_pairs():
    ev = {e.question for e in tt.eval_items(40, seed=0)} | {e.question for e in tt.eval_items(20, kind="lookup")}
    tr = {p.prompt for p in tt.make_pairs(600, seed=0)} | {p.prompt for p in tt.make_pairs(200, kind="lookup")}
    assert ev and tr and not ev & tr


def test_noise_flips_exactly_the_declared_share_and_is_seeded():
    pairs = tt.make_pairs(40, noise=0.25, seed=3)
    assert sum(p.noisy for p in pairs) == 10
    for p in pairs:
        assert tt.score(p.item, p.chosen) == (0.0 if p.noisy else 1.0)
    again = tt.make_pairs(40, noise=0.25, seed=3)
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [(p.prompt, p.chosen, p.rejected) for p in again]


def test_the_prompt_is_one_user_turn_without_a_system_turn_and_leads_to_the_answer():
    assert tt.chat_prompt("What is 1+1?") == "<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n"
    it = tt.make_item("add", 2, np.random.default_rng(0), "train")
    assert tt.prompt_text(it) == tt.chat_prompt(it.question) + it.question[8:-1] + "="
    it = tt.make_item("lookup", 2, np.random.default_rng(0), "train")
    assert tt.prompt_text(it).endswith("assistant\n" + it.question.rsplit(" ", 1)[1].rstrip("?") + "=")


@pytest.mark.parametrize("call, match", [
    (lambda: tt.make_item("mul", 1, np.random.default_rng(0), "train"), "kind"),
    (lambda: tt.make_item("add", 0, np.random.default_rng(0), "train"), "level"),
    (lambda: tt.make_item("add", 1, np.random.default_rng(0), "dev"), "split"),
    (lambda: tt.make_pairs(0), "n"),
    (lambda: tt.make_pairs(4, noise=0.5), "noise"),
    (lambda: tt.make_pairs(4, kind="mul"), "kind"),
])
def test_bad_input_is_rejected(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("key, value, match", [("model", "gpt-9", "model"), ("task", "mul", "task"),
                                               ("real", {"no_such_key": 1}, "real"),
                                               ("lora_layers", -1, "lora_layers"), ("lora_layers", "4", "lora_layers"),
                                               ("lora_layers", 999, "exceeds")])
def test_the_experiment_rejects_unknown_models_and_tasks_before_work(key, value, match):
    from rayml.experiments import selective_dpo

    with pytest.raises(ValueError, match=match):
        selective_dpo.run(dict(selective_dpo.SIZES["tiny"], **{key: value}), 0)


def test_the_smollm2_setting_takes_its_own_sizes():
    from rayml.experiments import selective_dpo

    cfg = selective_dpo._effective(dict(selective_dpo.SIZES["quick"], model="smollm2-135m"))
    assert cfg["levels"] == [2, 4, 8] and cfg["task"] == "lookup" and all(c.startswith("lora") for c in cfg["capacities"]) and "real" not in cfg
    assert selective_dpo._effective(selective_dpo.SIZES["quick"])["capacities"] == ["lora2", "full"]
    add = selective_dpo._effective(dict(selective_dpo.SIZES["quick"], model="smollm2-135m", task="add"))
    assert add["task"] == "add" and add["levels"] == [1, 2, 3]
