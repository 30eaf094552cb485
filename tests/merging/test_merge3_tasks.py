"""rayml.llm.tasks variants for MERGE^3's specialist endpoints: longer addition, addition asked in a
letter "language", and their cross task; they leave the base's task suite untouched and
``fine_tune`` takes them by name."""

from __future__ import annotations

import numpy as np
import pytest

from rayml.llm import tasks, training


def _digits(s: str) -> str:
    return s.translate(str.maketrans(tasks.LETTER_DIGITS, "0123456789"))


@pytest.mark.parametrize("name", sorted(tasks.VARIANTS))
def test_variant_items_are_correct_sums(name):
    for split in ("train", "test"):
        items = tasks.make_items(name, 50, 3, split=split)
        assert all(it.task == name for it in items)
        for it in items:
            a, b = it.meta["a"], it.meta["b"]
            assert it.answer == str(a + b)[::-1]  # answered in digits, least significant first
            prompt = _digits(it.prompt) if "letters" in name else it.prompt
            assert prompt == f"{a}+{b}="
            want_digits = 4 if "long" in name else 3
            assert len(str(a)) == len(str(b)) == want_digits
            assert tasks._pair_held_out(a, b) == (split == "test")  # the add task's held-out rule
        assert [it.prompt for it in tasks.make_items(name, 50, 3, split=split)] == [it.prompt for it in items]


def test_letter_prompts_use_letters_only():
    assert len(set(tasks.LETTER_DIGITS)) == 10 and tasks.LETTER_DIGITS.isupper()
    for it in tasks.make_items("add_long_letters", 30, 0):
        assert set(it.prompt) <= set(tasks.LETTER_DIGITS) | {"+", "="}
    assert tasks.to_letters("0123456789") == tasks.LETTER_DIGITS


def test_variants_leave_the_task_suite_unchanged():
    assert not set(tasks.VARIANTS) & set(tasks.TASKS)
    assert set(tasks.TASKS) == {"add", "copy", "reverse", "sort", "retrieve", "json"}
    assert all(not any(c.isupper() for c in text) for text in tasks.corpus(20, seed=0))
    assert tasks.get_task("add_long") is tasks.VARIANTS["add_long"] and tasks.get_task("add") is tasks.TASKS["add"]
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.get_task("add_longer")
    with pytest.raises(ValueError, match="task must be one of"):
        tasks.make_items("add_longer", 3, 0)


def test_fine_tune_takes_a_variant_by_name():
    import torch

    from rayml.llm.model import ModelConfig, TransformerLM
    from rayml.llm.tokenizer import BPETokenizer

    tok = BPETokenizer.train(tasks.corpus(10, seed=0), vocab_size=300)
    model = TransformerLM(ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1,
                                      d_ff=32, max_seq_len=128))
    model.reset_parameters(torch.Generator().manual_seed(0))
    res = training.fine_tune(model, tok, {"add_long_letters": 1.0}, steps=2, rows=2, row_len=64, warmup=1)
    assert len(res.losses) == 2 and np.isfinite(res.losses).all()
    with pytest.raises(ValueError, match="task_weights"):
        training.fine_tune(model, tok, {"add_longer": 1.0}, steps=1)
