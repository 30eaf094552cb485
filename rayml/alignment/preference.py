"""Preference pairs from the substrate's verifiable tasks, graded in difficulty, some of them noisy.

The task is the substrate's addition (``rayml.llm.tasks``: ``"317+845="`` -> the sum written least
significant digit first) with operands of ``level`` digits: longer operands are harder (more
digits, more carries). A pair's chosen response is the verified answer; its rejected response is
a near miss a small model makes: the sum with every carry dropped (digit-wise sum mod 10) when
the operands carry at all, else the answer with one digit changed. A ``noise`` fraction of pairs
have chosen and rejected swapped (the noisy preference labels of real preference data); the
verifier (``rayml.llm.tasks.score``) says which is which, and the pair keeps ``noisy=True``.

Evaluation prompts come from the test split (operand pairs never used for training: the
substrate's held-out hash), so correctness is measured on unseen problems.

Examples:
    >>> pairs = make_pairs(4, levels=(1, 2), noise=0.0, seed=0)
    >>> all(score_answer(p.item, p.chosen) == 1.0 and score_answer(p.item, p.rejected) == 0.0 for p in pairs)
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from rayml.llm import tasks as _tasks

__all__ = ["PreferencePair", "make_pairs", "noisy_pairs", "near_miss", "eval_items", "encode_pairs", "load_tokenizer",
           "score_answer", "sft_data"]


@dataclass(frozen=True)
class PreferencePair:
    """One preference example.

    Attributes:
        prompt: the task prompt.
        chosen, rejected: the preferred and dispreferred responses (text).
        level: operand digits (the graded difficulty).
        noisy: True when the label was flipped (``chosen`` is the wrong answer).
        item: the substrate ``Item`` (its ``answer`` is the verified one).
    """

    prompt: str
    chosen: str
    rejected: str
    level: int
    noisy: bool
    item: _tasks.Item


def score_answer(item: _tasks.Item, output: str) -> float:
    """The substrate's verifier: 1.0 for the exact answer, else 0.0."""
    return _tasks.score(item, output)


def near_miss(item: _tasks.Item, rng: np.random.Generator) -> str:
    """A wrong answer a small model makes: carries dropped, else one digit changed."""
    a, b = int(item.meta["a"]), int(item.meta["b"])
    width = max(len(str(a)), len(str(b)))
    da, db = str(a).zfill(width)[::-1], str(b).zfill(width)[::-1]
    no_carry = "".join(str((int(x) + int(y)) % 10) for x, y in zip(da, db))
    if no_carry != item.answer:
        return no_carry
    pos = int(rng.integers(0, len(item.answer)))
    digit = (int(item.answer[pos]) + int(rng.integers(1, 10))) % 10
    return item.answer[:pos] + str(digit) + item.answer[pos + 1:]


def _check_levels(levels) -> tuple:
    levels = tuple(levels)
    if not levels or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or not 1 <= d <= 9
                         for d in levels):
        raise ValueError(f"levels must be a non-empty sequence of digit counts in 1..9, got {levels!r}")
    return tuple(int(d) for d in levels)


def make_pairs(n: int, *, levels: Sequence[int] = (1, 2, 3, 4), noise: float = 0.1,
               seed: int | np.random.Generator = 0) -> list[PreferencePair]:
    """``n`` pairs, levels drawn uniformly from ``levels``, a ``noise`` fraction label-flipped.

    Exactly ``round(noise * n)`` pairs are flipped (chosen at random), so the noise rate is fixed.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    levels = _check_levels(levels)

    def draw(d, rng):
        item = _tasks.make_items("add", 1, rng, split="train", digits=d)[0]
        return item, item.prompt, near_miss(item, rng)

    return noisy_pairs(n, levels, noise, seed, draw)


def noisy_pairs(n: int, levels: Sequence[int], noise: float, seed: int | np.random.Generator,
                draw) -> list[PreferencePair]:
    """``n`` pairs at levels drawn uniformly from ``levels``, exactly ``round(noise * n)`` of them
    (chosen at random) label-flipped; ``draw(level, rng) -> (item, prompt, wrong answer)``."""
    if not 0 <= noise < 0.5:
        raise ValueError(f"noise must be in [0, 0.5), got {noise!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    lv = rng.choice(levels, size=n)
    flipped = np.zeros(n, dtype=bool)
    flipped[rng.choice(n, size=int(round(noise * n)), replace=False)] = True
    out = []
    for d, flip in zip(lv, flipped):
        item, prompt, wrong = draw(int(d), rng)
        good, bad = (wrong, item.answer) if flip else (item.answer, wrong)
        out.append(PreferencePair(prompt, good, bad, int(d), bool(flip), item))
    return out


def eval_items(n_per_level: int, *, levels: Sequence[int] = (1, 2, 3, 4), seed: int = 0) -> list[_tasks.Item]:
    """Held-out test items (the substrate's test split), ``n_per_level`` per operand length."""
    levels = _check_levels(levels)
    rng = np.random.default_rng(seed)
    return [it for d in levels for it in _tasks.make_items("add", n_per_level, rng, split="test", digits=d)]


@lru_cache(maxsize=1)
def load_tokenizer():
    """The tokenizer of the shipped ``base`` checkpoint (digits are single tokens)."""
    from rayml.llm import WEIGHTS_DIR
    from rayml.llm.tokenizer import BPETokenizer

    return BPETokenizer.load(WEIGHTS_DIR / "base" / "tokenizer.json")


def encode_pairs(pairs: Sequence[PreferencePair], tokenizer=None) -> list:
    """``TokenPair``s: ``<bos> prompt`` and ``response <eos>``."""
    from rayml.alignment.dpo import TokenPair

    tok = tokenizer or load_tokenizer()
    return [TokenPair(tok.encode(p.prompt, bos=True), tok.encode(p.chosen) + [tok.eos_id],
                      tok.encode(p.rejected) + [tok.eos_id]) for p in pairs]


def sft_data(n: int, *, levels: Sequence[int] = (1, 2, 3, 4), seed: int = 0, tokenizer=None):
    """``(prompt ids, answer ids)`` of ``n`` training items with verified answers (the SFT warm-up)."""
    levels = _check_levels(levels)
    tok = tokenizer or load_tokenizer()
    rng = np.random.default_rng(seed)
    lv = rng.choice(levels, size=n)
    items = [_tasks.make_items("add", 1, rng, split="train", digits=int(d))[0] for d in lv]
    return ([tok.encode(it.prompt, bos=True) for it in items],
            [tok.encode(it.answer) + [tok.eos_id] for it in items])
