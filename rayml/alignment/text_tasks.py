"""Verifiable questions in plain text for a pretrained chat LM (SmolLM2-135M), graded in difficulty.

The substrate's tasks (``rayml.llm.tasks``) use formats the substrate was trained on (sums written
least significant digit first); a real pretrained model needs questions in its own language. Two
kinds, both built in code from a seed and checked by a verifier, not a model:

* ``add``: ``What is 23+45?`` -> ``68``; the level is the operand length in digits (longer operands,
  more carries: harder). The rejected answer is a near miss (every carry dropped, else one digit
  changed), as ``rayml.alignment.preference.near_miss`` does for the substrate.
* ``lookup``: ``Facts: bako=123, tuli=456. What is tuli?`` -> ``456``; the level is the number of
  facts (more distractors: harder). The rejected answer is another fact's value (a retrieval
  near miss).

Held-out split: an item is ``test`` when the SHA-256 of its question is 0 mod 5, else ``train``
(``make_item`` redraws until the split matches), so evaluation questions never appear in
training pairs. Prompts are the model's chat format for one user turn with no system turn
(``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``: SmolLM2's own template without its
default system prompt, to keep prompts short on CPU), followed by the start of the reply that the
answer completes (``23+45=``, ``tuli=``): asked plainly, SmolLM2-135M restates the question
("To find 6+...") instead of answering, so the reply is led to the answer. Responses end with the
end-of-turn token. The verifier (``score``) reads the first integer of the output and compares it
with the answer.

Examples:
    >>> import numpy as np
    >>> it = make_item("add", 2, np.random.default_rng(0), "train")
    >>> score(it, it.answer), score(it, "The answer is " + it.answer + "."), score(it, near_miss(it, np.random.default_rng(0)))
    (1.0, 1.0, 0.0)
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["KINDS", "TextItem", "make_item", "near_miss", "score", "make_pairs", "eval_items", "chat_prompt",
           "prompt_text", "encode_pairs", "LEVELS"]

KINDS = ("add", "lookup")
LEVELS = {"add": (1, 2, 3), "lookup": (2, 4, 8)}   # the default levels of each kind
_INT = re.compile(r"-?\d+")


@dataclass(frozen=True)
class TextItem:
    """A question, its verified answer, its kind and level, the start of the assistant's reply that
    the answer completes (``lead``: ``23+45=`` or ``tuli=``), and (``lookup``) the other facts' values."""

    question: str
    answer: str
    kind: str
    level: int
    distractors: tuple = ()
    lead: str = ""


def _split_of(question: str) -> str:
    return "test" if int(hashlib.sha256(question.encode()).hexdigest(), 16) % 5 == 0 else "train"


def _words(rng: np.random.Generator, n: int) -> list[str]:
    from rayml.llm.tasks import KEY_WORDS

    return [KEY_WORDS[i] for i in rng.choice(len(KEY_WORDS), size=n, replace=False)]


def make_item(kind: str, level: int, rng: np.random.Generator, split: str) -> TextItem:
    """One item of ``kind`` at ``level`` from the given ``split`` (``"train"`` or ``"test"``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 1 <= level <= 9:
        raise ValueError(f"level must be an integer in 1..9, got {level!r}")
    for _ in range(10_000):
        if kind == "add":
            lo = 0 if level == 1 else 10 ** (level - 1)
            a, b = (int(x) for x in rng.integers(lo, 10 ** level, size=2))
            item = TextItem(f"What is {a}+{b}?", str(a + b), kind, int(level), lead=f"{a}+{b}=")
        else:
            keys = _words(rng, int(level))
            vals = [str(int(v)) for v in rng.choice(np.arange(100, 1000), size=int(level), replace=False)]
            ask = int(rng.integers(level))
            facts = ", ".join(f"{k}={v}" for k, v in zip(keys, vals))
            item = TextItem(f"Facts: {facts}. What is {keys[ask]}?", vals[ask], kind, int(level),
                            tuple(v for i, v in enumerate(vals) if i != ask), lead=f"{keys[ask]}=")
        if _split_of(item.question) == split:
            return item
    raise RuntimeError("no item of the requested split was drawn")  # pragma: no cover - 1 in 5 per draw


def near_miss(item: TextItem, rng: np.random.Generator) -> str:
    """A wrong answer a small model makes: carries dropped (else one digit changed) for ``add``,
    another fact's value for ``lookup`` (one digit changed when there is no other fact)."""
    if item.kind == "lookup" and item.distractors:
        return str(item.distractors[int(rng.integers(len(item.distractors)))])
    if item.kind == "add":
        a, b = (int(x) for x in item.question[len("What is "):-1].split("+"))
        w = max(len(str(a)), len(str(b)))
        da, db = str(a).zfill(w), str(b).zfill(w)
        no_carry = str(int("".join(str((int(x) + int(y)) % 10) for x, y in zip(da, db))))
        if no_carry != item.answer:
            return no_carry
    while True:  # one digit changed, no leading zero
        pos = int(rng.integers(len(item.answer)))
        digit = (int(item.answer[pos]) + int(rng.integers(1, 10))) % 10
        out = item.answer[:pos] + str(digit) + item.answer[pos + 1:]
        if not (len(out) > 1 and out[0] == "0"):
            return out


def score(item: TextItem, output: str) -> float:
    """The verifier: 1.0 when the first integer in ``output`` is the answer, else 0.0."""
    m = _INT.search(output)
    return float(m is not None and m.group(0) == item.answer)


def make_pairs(n: int, *, kind: str = "add", levels: Sequence[int] | None = None, noise: float = 0.1,
               seed: int | np.random.Generator = 0) -> list:
    """``n`` ``PreferencePair``s (``rayml.alignment.preference``) of ``kind``, levels drawn uniformly,
    exactly ``round(noise * n)`` of them label-flipped; ``prompt`` holds the question."""
    from rayml.alignment.preference import noisy_pairs

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    levels = tuple(LEVELS.get(kind, ()) if levels is None else levels)
    if not levels:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

    def draw(d, rng):
        item = make_item(kind, d, rng, "train")
        return item, item.question, near_miss(item, rng)

    return noisy_pairs(n, levels, noise, seed, draw)


def eval_items(n_per_level: int, *, kind: str = "add", levels: Sequence[int] | None = None,
               seed: int = 0) -> list[TextItem]:
    """Held-out (test split) items, ``n_per_level`` per level."""
    levels = tuple(LEVELS.get(kind, ()) if levels is None else levels)
    rng = np.random.default_rng(seed)
    return [make_item(kind, int(d), rng, "test") for d in levels for _ in range(int(n_per_level))]


def chat_prompt(question: str) -> str:
    """One user turn in SmolLM2's chat format, no system turn, ending with the assistant prompt."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def prompt_text(item: TextItem) -> str:
    """The prompt of an item: the chat turn of its question, and the reply's lead the answer completes."""
    return chat_prompt(item.question) + item.lead


def encode_pairs(pairs, tokenizer) -> list:
    """``TokenPair``s: the prompt (``prompt_text``, starting with BOS) and ``response <end of turn>``."""
    from rayml.alignment.dpo import TokenPair

    tok = tokenizer
    return [TokenPair(tok.encode(prompt_text(p.item), bos=True), tok.encode(p.chosen) + [tok.eos_id],
                      tok.encode(p.rejected) + [tok.eos_id]) for p in pairs]
