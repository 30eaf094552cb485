"""The verifiable synthetic task suite the embedded LM is trained and evaluated on.

Every task makes ``Item``s from a numpy ``Generator`` (so a seed fixes them), each with a
``prompt`` and the exact ``answer`` the model must generate after it; ``score(item, output)`` is
1.0 for an exact match and 0.0 otherwise. ``evaluate(models, items)`` returns the per-item
correctness matrix (models x items) that item-response-theory methods (MERGE^3) need.

Formats are compact so that sequences stay short for CPU training (the tokenizer splits digits
into single tokens):

* ``add``       ``"317+845="`` -> ``"2611"``: multi-digit addition, the sum written least
  significant digit first (Assumed: the reversed-answer format of Lee et al. 2023, "Teaching
  arithmetic to small transformers", which small models learn far faster than the plain one).
  Held-out items: operand pairs with ``hash % 10 == 0`` are never trained on.
* ``copy``      ``"copy:58213="`` -> ``"58213"``.
* ``reverse``   ``"rev:58213="`` -> ``"31285"``.
* ``sort``      ``"sort:58213="`` -> ``"12358"``.
* ``retrieve``  several documents ``"[bako:123;tuli:456]"`` (one per line) then ``"?tuli:"`` ->
  ``"456"``: key-value retrieval across documents, the RAG shape EPIC needs. Documents are
  separate strings in ``item.meta["documents"]`` so chunked prefill can process them one by one.
  Training items have 1 to 16 documents, the count drawn log-uniformly so that about a quarter
  of them hold at most two documents: a small model escapes the long loss plateau of
  associative recall only when some items have few candidate keys (measured: a 2-layer model
  trained on 1-2 documents left chance after ~700 steps; on 8-16 documents it stayed at chance
  for 2000 steps), and the many-document items teach it to generalise to the 8-document test.
* ``json``      ``"rec:age=42;name=bako;ok=y>"`` -> ``'{"name":"bako","age":42,"ok":true}'``: a
  record that follows a fixed schema (field order, integer and boolean types).

Variants (``VARIANTS``, MERGE^3's specialist endpoints and cross task; kept out of ``TASKS`` so the
base's mixture, tokenizer corpus and task cards are unchanged; ``make_items`` and ``fine_tune`` take
their names like any task's):

* ``add_long``          4- and 5-digit addition (``"31742+84511="`` -> the reversed sum), a skill
  the shipped base lacks (it scores 0.0: it was trained on 3-digit sums only).
* ``add_letters``       3-digit addition asked in a "language" whose digits are the letters
  ``LETTER_DIGITS`` (digit ``d`` of the operands written ``LETTER_DIGITS[d]``; the sum is answered
  in digits, as a math question asked in another language is answered with a number): a task the
  base can do (in digits) in a format it has never seen (uppercase letters occur nowhere in its
  corpus).
* ``add_long_letters``  4- and 5-digit addition in the letter language: the cross task of the two.

Held-out items of every variant use the same operand-pair hash rule as ``add``.

Training sequences may carry extra question/answer turns (``item.extra``): the retrieval task
asks several questions about the same documents, so one long context gives several targets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

__all__ = ["Item", "TASKS", "VARIANTS", "LETTER_DIGITS", "get_task", "to_letters", "Task", "make_items", "score",
           "evaluate", "KEY_SYLLABLES", "KEY_WORDS", "JSON_SCHEMA", "corpus", "HELD_OUT_MOD"]

CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
KEY_SYLLABLES = tuple(c + v for c in CONSONANTS for v in VOWELS)  # 70 syllables
# 256 keys of two syllables, fixed (the tokenizer's corpus holds each often, so BPE makes most one token)
KEY_WORDS = tuple(sorted({KEY_SYLLABLES[i] + KEY_SYLLABLES[j] for i, j in
                          np.random.default_rng(20250701).integers(0, len(KEY_SYLLABLES), size=(400, 2))}))[:256]
HELD_OUT_MOD = 10  # addition operand pairs with hash % HELD_OUT_MOD == 0 are held out
JSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["name", "age", "ok"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Item:
    """One task instance.

    Attributes:
        task: the task's name.
        prompt: the text given to the model.
        answer: the exact continuation that counts as correct (the model should stop after it).
        extra: further ``(question, answer)`` turns appended after ``answer`` in training only.
        meta: task-specific data (operands, documents, ...).
    """

    task: str
    prompt: str
    answer: str
    extra: tuple = ()
    meta: Mapping[str, Any] = field(default_factory=dict)


def _pair_held_out(a: int, b: int) -> bool:
    return ((a * 7919 + b * 104729) * 2654435761 >> 7) % HELD_OUT_MOD == 0


def _add(rng: np.random.Generator, *, split: str = "train", digits: int | None = None) -> Item:
    while True:
        da = db = 3 if digits is None else digits
        a = int(rng.integers(10 ** (da - 1) if da > 1 else 0, 10 ** da))
        b = int(rng.integers(10 ** (db - 1) if db > 1 else 0, 10 ** db))
        if _pair_held_out(a, b) == (split == "test"):
            break
    return Item("add", f"{a}+{b}=", str(a + b)[::-1], meta={"a": a, "b": b})


def _digit_string(rng, lo=3, hi=10) -> str:
    n = int(rng.integers(lo, hi + 1))
    return "".join(str(d) for d in rng.integers(0, 10, size=n))


def _copy(rng, **_) -> Item:
    s = _digit_string(rng)
    return Item("copy", f"copy:{s}=", s)


def _reverse(rng, **_) -> Item:
    s = _digit_string(rng)
    return Item("reverse", f"rev:{s}=", s[::-1])


def _sort(rng, **_) -> Item:
    s = _digit_string(rng)
    return Item("sort", f"sort:{s}=", "".join(sorted(s)))


def _key(rng) -> str:
    return KEY_WORDS[int(rng.integers(0, len(KEY_WORDS)))]


def _retrieve(rng, *, split: str = "train", n_docs: int | None = None, pairs_per_doc: int | None = None,
              n_questions: int | None = None) -> Item:
    if n_docs is None:
        n_docs = min(16, int(np.exp(rng.uniform(0.0, np.log(17.0))))) if split == "train" else 8
    if pairs_per_doc is None:
        pairs_per_doc = int(rng.integers(1, 4)) if split == "train" else 3
    if n_questions is None:
        n_questions = 8 if split == "train" else 1
    n = n_docs * pairs_per_doc
    keys: list[str] = []
    seen = set()
    while len(keys) < n:
        k = _key(rng)
        if k not in seen:
            seen.add(k)
            keys.append(k)
    values = [f"{int(v):03d}" for v in rng.integers(0, 1000, size=n)]
    docs = []
    for d in range(n_docs):
        pairs = [f"{keys[i]}:{values[i]}" for i in range(d * pairs_per_doc, (d + 1) * pairs_per_doc)]
        docs.append("[" + ";".join(pairs) + "]\n")
    asked = [int(i) for i in rng.choice(n, size=min(n_questions, n), replace=False)]
    q = [(f"?{keys[i]}:", values[i]) for i in asked]
    return Item("retrieve", "".join(docs) + q[0][0], q[0][1], extra=tuple((f"\n{p}", a) for p, a in q[1:]),
                meta={"documents": docs, "question": q[0][0], "key": keys[asked[0]], "n_docs": n_docs,
                      "doc_index": asked[0] // pairs_per_doc})


def _json(rng, **_) -> Item:
    name = _key(rng)
    age = int(rng.integers(0, 100))
    ok = bool(rng.integers(0, 2))
    fields = [f"age={age}", f"name={name}", f"ok={'y' if ok else 'n'}"]
    order = rng.permutation(3)
    prompt = "rec:" + ";".join(fields[i] for i in order) + ">"
    answer = json.dumps({"name": name, "age": age, "ok": ok}, separators=(",", ":"))
    return Item("json", prompt, answer, meta={"record": {"name": name, "age": age, "ok": ok}})


@dataclass(frozen=True)
class Task:
    """A task: its item maker and its share of the training mixture."""

    name: str
    make: Callable[..., Item]
    weight: float
    description: str


TASKS: dict[str, Task] = {
    "add": Task("add", _add, 0.35, "3-digit addition, sum written least-significant digit first"),
    "copy": Task("copy", _copy, 0.04, "copy a digit string"),
    "reverse": Task("reverse", _reverse, 0.04, "reverse a digit string"),
    "sort": Task("sort", _sort, 0.06, "sort the digits of a string"),
    "retrieve": Task("retrieve", _retrieve, 0.45, "key-value retrieval over several documents"),
    "json": Task("json", _json, 0.06, "a JSON record following a fixed schema"),
}


LETTER_DIGITS = "KQXZJVWYHU"  # digit d -> LETTER_DIGITS[d]; uppercase occurs nowhere in the base's corpus


def to_letters(text: str) -> str:
    """Write every digit of ``text`` as its letter of ``LETTER_DIGITS``."""
    return text.translate(str.maketrans("0123456789", LETTER_DIGITS))


def _add_variant(rng: np.random.Generator, *, split: str = "train", name: str, digits: tuple, letters: bool) -> Item:
    while True:
        d = int(digits[int(rng.integers(0, len(digits)))]) if len(digits) > 1 else int(digits[0])
        a = int(rng.integers(10 ** (d - 1), 10 ** d))
        b = int(rng.integers(10 ** (d - 1), 10 ** d))
        if _pair_held_out(a, b) == (split == "test"):
            break
    prompt, answer = f"{a}+{b}=", str(a + b)[::-1]
    if letters:
        prompt = to_letters(prompt)
    return Item(name, prompt, answer, meta={"a": a, "b": b, "digits": d})


def _variant(name: str, digits: tuple, letters: bool) -> Callable[..., Item]:
    def make(rng, *, split: str = "train") -> Item:
        return _add_variant(rng, split=split, name=name, digits=digits, letters=letters)
    return make


VARIANTS: dict[str, Task] = {
    "add_long": Task("add_long", _variant("add_long", (4,), False), 0.0,
                     "4- and 5-digit addition, sum written least-significant digit first"),
    "add_letters": Task("add_letters", _variant("add_letters", (3,), True), 0.0,
                        "3-digit addition with digits written as the letters " + LETTER_DIGITS),
    "add_long_letters": Task("add_long_letters", _variant("add_long_letters", (4,), True), 0.0,
                             "4- and 5-digit addition with digits written as the letters " + LETTER_DIGITS),
}


def get_task(name: str) -> Task:
    """The task or variant called ``name``."""
    if name in TASKS:
        return TASKS[name]
    if name in VARIANTS:
        return VARIANTS[name]
    raise ValueError(f"task must be one of {sorted(TASKS) + sorted(VARIANTS)}, got {name!r}")


def make_items(task: str, n: int, seed: int | np.random.Generator, *, split: str = "test", **kwargs) -> list[Item]:
    """``n`` items of ``task`` drawn from ``seed``.

    Args:
        task: a key of ``TASKS`` or ``VARIANTS``.
        n: number of items.
        seed: an integer seed or a numpy ``Generator``.
        split: ``"test"`` (held-out evaluation items: 3-digit addition from the held-out pairs,
            retrieval over 8 documents of 3 pairs with one question) or ``"train"``.
        **kwargs: task options (``digits`` for add; ``n_docs``, ``pairs_per_doc``,
            ``n_questions`` for retrieve).
    """
    if task not in TASKS and task not in VARIANTS:
        raise ValueError(f"task must be one of {sorted(TASKS) + sorted(VARIANTS)}, got {task!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    make = get_task(task).make
    if task == "add":
        kwargs.setdefault("digits", 3 if split == "test" else None)
    if task in ("add", "retrieve") or task in VARIANTS:
        kwargs["split"] = split
    return [make(rng, **kwargs) for _ in range(n)]


def score(item: Item, output: str) -> float:
    """1.0 when ``output`` (generation, stopped at end of text) equals ``item.answer``; for ``json``
    the output must also parse and follow ``JSON_SCHEMA``."""
    out = output.strip("\n")
    if item.task == "json":
        try:
            rec = json.loads(out)
        except ValueError:
            return 0.0
        props = JSON_SCHEMA["properties"]
        if not isinstance(rec, dict) or set(rec) != set(props):
            return 0.0
        types = {"string": str, "integer": int, "boolean": bool}
        for k, spec in props.items():
            v = rec[k]
            if spec["type"] == "integer" and isinstance(v, bool):
                return 0.0
            if not isinstance(v, types[spec["type"]]):
                return 0.0
    return float(out == item.answer)


def evaluate(models: Mapping[str, Any] | Sequence[Any], items: Sequence[Item], *, batch_size: int = 32) -> np.ndarray:
    """Per-item correctness matrix (models x items) of greedy generations.

    ``models``: a sequence (or name -> model mapping) of objects with
    ``generate(prompts, max_new_tokens=..., temperature=0) -> list[str]`` (the ``rayml.llm.LM``
    interface).
    """
    ms = list(models.values()) if isinstance(models, Mapping) else list(models)
    out = np.zeros((len(ms), len(items)))
    max_new = max((len(it.answer) for it in items), default=1) + 2
    for m, model in enumerate(ms):
        for start in range(0, len(items), batch_size):
            chunk = items[start:start + batch_size]
            gens = model.generate([it.prompt for it in chunk], max_new_tokens=max_new, temperature=0.0)
            out[m, start:start + len(chunk)] = [score(it, g) for it, g in zip(chunk, gens)]
    return out


def corpus(n_per_task: int = 300, seed: int = 0) -> list[str]:
    """Texts of every task (training split) for fitting the tokenizer."""
    rng = np.random.default_rng(seed)
    texts = []
    for name, task in TASKS.items():
        for it in make_items(name, n_per_task, rng, split="train"):
            texts.append(it.prompt + it.answer + "".join(p + a for p, a in it.extra))
    return texts
