"""MERGE^3 on Hugging Face Llama-family models: checkpoints as bytes, LoRA specialist endpoints, and
plain-text cross tasks.

"MERGE^3: Efficient Evolutionary Merging on Consumer-grade GPUs" (Mencattini et al., ICML 2025)
merges pretrained LLM endpoints (e.g. a math model and a Japanese model, both fine-tunes of one
base) for the cross task (math in Japanese). This module carries that setting to any local Hugging
Face Llama-family directory (``rayml.llm.hf.load_embedded``: SmolLM2-135M from
``rayml.llm.pretrained("smollm2-135m")``, or a user's own) in the embedded engine, whose parameter
names are Llama's, so every merge operator of ``rayml.merging.operators`` applies unchanged:

* ``HFBlob``: a local HF directory's files as bytes (what travels to Ray tasks and actors on other
  nodes instead of a node-local path); ``load_model`` loads it (or a rayml ``CheckpointBlob``).
* ``LoraEndpoint``: a specialist fine-tuned from the base with LoRA (Hu et al., ICLR 2022, Eq. 3:
  ``W + (alpha / r) B A``, ``rayml.alignment.dpo.add_lora``); it keeps only the low-rank factors
  (``scale * B``, ``A``) per adapted weight and the base's digest, so an endpoint of a 135M model
  travels as a few MB; ``endpoint_state`` rebuilds ``W + scale B A`` on the worker that holds the
  base. ``lora_finetune`` trains one with ``rayml.alignment.dpo.sft`` (``-log p(answer <eot> |
  prompt)``) on text items.
* Text cross tasks (``TEXT_TASKS``), questions in the model's own chat format
  (``rayml.alignment.text_tasks``): ``add1`` / ``add2`` (``What is 23+45?`` -> ``68``), and
  ``add1_letters`` / ``add2_letters``, the same sums whose operands are written in the invented
  digit "language" ``rayml.llm.tasks.LETTER_DIGITS`` (``What is XZ+JV?`` -> ``68``): a math
  endpoint on ``add2``, a language endpoint on ``add1_letters``, the target ``add2_letters``.
  An item is in the test split when the SHA-256 of its question is 0 mod 5.

Assumed: the adapted projections are all of ``LORA_TARGETS`` (attention and MLP); the
fine-tuning prompt starts with BOS and the response is the answer and the end-of-turn token.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["TEXT_TASKS", "make_text_items", "is_text", "evaluate_items", "HFBlob", "read_hf_blob", "LoraEndpoint",
           "LoraState", "lora_finetune", "load_model", "endpoint_state", "n_layers", "digest"]

# name -> (operand digits, operands in letters)
TEXT_TASKS = {"add1": (1, False), "add2": (2, False), "add3": (3, False),
              "add1_letters": (1, True), "add2_letters": (2, True), "add3_letters": (3, True)}
_HF_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
             "special_tokens_map.json", "vocab.json", "merges.txt", "card.json")


# --- text tasks ------------------------------------------------------------------------------------

def make_text_items(task: str, n: int, rng: np.random.Generator, split: str = "test") -> list:
    """``n`` ``rayml.alignment.text_tasks.TextItem``s of ``task`` (``TEXT_TASKS``) from ``split``."""
    from rayml.alignment.text_tasks import TextItem
    from rayml.llm.tasks import to_letters

    if task not in TEXT_TASKS:
        raise ValueError(f"task must be one of {sorted(TEXT_TASKS)}, got {task!r}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    digits, letters = TEXT_TASKS[task]
    lo = 0 if digits == 1 else 10 ** (digits - 1)
    out = []
    while len(out) < n:
        a, b = (int(x) for x in rng.integers(lo, 10 ** digits, size=2))
        sa, sb = (to_letters(str(a)), to_letters(str(b))) if letters else (str(a), str(b))
        q = f"What is {sa}+{sb}?"
        in_test = int(hashlib.sha256(q.encode()).hexdigest(), 16) % 5 == 0
        if in_test == (split == "test"):
            out.append(TextItem(q, str(a + b), "add", int(digits), lead=f"{sa}+{sb}="))
    return out


def is_text(items: Sequence) -> bool:
    """Whether ``items`` are text items (``TextItem``) rather than the substrate's ``tasks.Item``."""
    return bool(items) and hasattr(items[0], "lead")


def evaluate_items(lm, items: Sequence, *, batch_size: int = 32) -> np.ndarray:
    """Greedy correctness of ``lm`` (an ``EmbeddedLM``) on ``items``: text items are asked in the chat
    format and graded by ``text_tasks.score``; substrate items go to ``rayml.llm.tasks.evaluate``."""
    from rayml.llm import tasks

    if not is_text(items):
        return tasks.evaluate([lm], list(items), batch_size=batch_size)[0]
    from rayml.alignment import text_tasks as tt

    max_new = max(len(it.answer) for it in items) + 2
    out = np.zeros(len(items))
    for s in range(0, len(items), batch_size):
        chunk = items[s:s + batch_size]
        gens = lm.generate([tt.prompt_text(it) for it in chunk], max_new_tokens=max_new, temperature=0.0)
        out[s:s + len(chunk)] = [tt.score(it, g) for it, g in zip(chunk, gens)]
    return out


# --- checkpoints as bytes --------------------------------------------------------------------------

@dataclass(frozen=True)
class HFBlob:
    """A local Hugging Face Llama-family directory as bytes (config, ``*.safetensors``, tokenizer
    files, card): sent to tasks and actors instead of the directory's node-local path."""

    files: Mapping[str, bytes]

    @property
    def digest(self) -> str:
        """Hex sha256 over the weight files (the same on every node)."""
        h = hashlib.sha256()
        for name in sorted(self.files):
            if name.endswith(".safetensors"):
                h.update(name.encode())
                h.update(self.files[name])
        return h.hexdigest()

    @property
    def config(self) -> dict:
        """The directory's ``config.json``."""
        return json.loads(self.files["config.json"])


def read_hf_blob(path: str | os.PathLike) -> HFBlob:
    """An ``HFBlob`` of a local HF directory (``ValueError`` unless it holds ``config.json`` and
    safetensors weights of a Llama the embedded engine computes: ``hf.check_llama_config``)."""
    from transformers import AutoConfig

    from rayml.llm import hf

    d = Path(path)
    if not (d / "config.json").is_file():
        raise ValueError(f"path must be a Hugging Face model directory with config.json, got {str(path)!r}")
    hf.check_llama_config(AutoConfig.from_pretrained(str(d), local_files_only=True))
    weights = sorted(p.name for p in d.glob("*.safetensors"))
    if not weights:
        raise ValueError(f"path {str(path)!r} holds no *.safetensors weights")
    files = {n: (d / n).read_bytes() for n in (*_HF_FILES, *weights, "model.safetensors.index.json")
             if (d / n).is_file()}
    return HFBlob(files)


def digest(ref) -> str:
    """The weights digest of a checkpoint reference (``CheckpointBlob``, ``HFBlob``, ``LoraEndpoint``)."""
    if not hasattr(ref, "digest"):
        raise TypeError(f"a model must be a CheckpointBlob, HFBlob or LoraEndpoint, got {type(ref).__name__}")
    return ref.digest


def load_model(ref, *, device: str = "cpu"):
    """``(TransformerLM in eval mode, tokenizer)`` of a base reference: an ``HFBlob``, a rayml
    ``CheckpointBlob`` or a checkpoint directory (node-local)."""
    from rayml.llm.checkpoint import load_checkpoint

    if isinstance(ref, HFBlob):
        from rayml.llm import hf

        with tempfile.TemporaryDirectory(prefix="rayml-hf-") as tmp:
            for name, data in ref.files.items():
                (Path(tmp) / name).write_bytes(data)
            lm = hf.load_embedded(tmp, device=device)
        return lm.model.eval(), lm.tokenizer
    model, tok, _ = load_checkpoint(ref, device=device)
    return model, tok


def n_layers(ref) -> int:
    """Decoder blocks of a base reference."""
    if isinstance(ref, HFBlob):
        return int(ref.config["num_hidden_layers"])
    return int(ref.card["model_config"]["n_layers"])


# --- LoRA endpoints --------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoraEndpoint:
    """A LoRA fine-tune of the base whose weights hash to ``base_digest``: per adapted weight name
    (``layers.3.mlp.up_proj.weight``), the factors ``(scale * B, A)`` of ``W + scale B A``."""

    base_digest: str
    factors: Mapping[str, tuple]
    card: dict = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Hex sha256 of the base digest and every factor."""
        h = hashlib.sha256(self.base_digest.encode())
        for k in sorted(self.factors):
            h.update(k.encode())
            for m in self.factors[k]:
                h.update(np.ascontiguousarray(m, dtype=np.float32).tobytes())
        return h.hexdigest()

    def to_bytes(self) -> bytes:
        """The endpoint as one ``.npz`` (for a cache file)."""
        buf = io.BytesIO()
        arrays = {f"{k}|{i}": np.asarray(m, np.float32) for k, pair in self.factors.items() for i, m in enumerate(pair)}
        np.savez(buf, __meta__=np.frombuffer(json.dumps({"base_digest": self.base_digest, "card": self.card}).encode(),
                                             np.uint8), **arrays)
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> "LoraEndpoint":
        """The inverse of ``to_bytes``."""
        z = np.load(io.BytesIO(data))
        meta = json.loads(z["__meta__"].tobytes().decode())
        f: dict = {}
        for key in z.files:
            if key == "__meta__":
                continue
            name, i = key.rsplit("|", 1)
            f.setdefault(name, [None, None])[int(i)] = z[key]
        return cls(meta["base_digest"], {k: tuple(v) for k, v in f.items()}, meta["card"])


def lora_finetune(model, tokenizer, items: Sequence, *, rank: int = 8, steps: int = 40, lr: float = 3e-3,
                  batch_size: int = 8, seed: int = 0, base_digest: str = "") -> LoraEndpoint:
    """A ``LoraEndpoint``: LoRA adapters of ``rank`` on every projection of ``model`` (left unchanged),
    trained with ``rayml.alignment.dpo.sft`` on ``items`` (text items: prompt ``text_tasks.prompt_text``
    with BOS, response ``answer <end of turn>``)."""
    import torch

    from rayml.alignment import dpo
    from rayml.alignment import text_tasks as tt

    if not is_text(items):
        raise ValueError("items must be non-empty text items (rayml.alignment.text_tasks.TextItem)")
    tuned = dpo.add_lora(model, int(rank), seed=int(seed))
    prompts = [tokenizer.encode(tt.prompt_text(it), bos=True) for it in items]
    responses = [tokenizer.encode(it.answer) + [tokenizer.eos_id] for it in items]
    torch.manual_seed(int(seed))
    dpo.sft(tuned, prompts, responses, steps=int(steps), batch_size=int(batch_size), lr=float(lr), seed=int(seed),
            pad_id=int(tokenizer.pad_id))
    factors = {}
    for name, mod in tuned.named_modules():
        if isinstance(mod, dpo.LoRALinear):
            factors[f"{name}.weight"] = ((mod.scale * mod.lora_B).detach().cpu().numpy().astype(np.float32),
                                         mod.lora_A.detach().cpu().numpy().astype(np.float32))
    return LoraEndpoint(base_digest, factors, {"rank": int(rank), "steps": int(steps), "lr": float(lr),
                                               "batch_size": int(batch_size), "seed": int(seed), "items": len(items)})


class LoraState(Mapping):
    """A read-only state dict ``base + scale B A`` computed per tensor when read: a LoRA endpoint of a
    135M model costs its factors, not another copy of the weights (the merge operators read one
    tensor at a time)."""

    def __init__(self, base_state: Mapping[str, Any], factors: Mapping[str, tuple]):
        self._base, self._factors = base_state, dict(factors)
        unknown = set(self._factors) - set(self._base)
        if unknown:
            raise ValueError(f"LoRA factors {sorted(unknown)[:3]} have no weight in the base")

    def __getitem__(self, key):
        w = self._base[key]
        if key not in self._factors:
            return w
        B, A = self._factors[key]
        return w + B @ A

    def __iter__(self):
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


def endpoint_state(ref, base_state: Mapping[str, Any], *, device: str = "cpu") -> Mapping:
    """The state dict of an endpoint: a ``LoraEndpoint`` on ``base_state`` (``W + scale B A``, a
    ``LoraState`` read tensor by tensor), or a full checkpoint (``CheckpointBlob`` / ``HFBlob``)
    loaded whole."""
    import torch

    if isinstance(ref, LoraEndpoint):
        dev = next(iter(base_state.values())).device
        return LoraState(base_state, {k: (torch.as_tensor(np.asarray(B), device=dev),
                                          torch.as_tensor(np.asarray(A), device=dev))
                                      for k, (B, A) in ref.factors.items()})
    model, _ = load_model(ref, device=device)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
