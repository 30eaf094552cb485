"""Alignment and reasoning methods on the embedded LM (rayml.llm).

Modules:
    dpo: the DPO loss (beta, conservative label smoothing), a frozen reference, the trainer
        (random / length-grouped / sequential batches, per-pair weights, LoRA adapters) and the
        supervised warm-up.
    preference: preference pairs from the substrate's verifiable tasks, graded in difficulty,
        some label-flipped.
    text_tasks: verifiable plain-text questions (additions, fact lookup) for a pretrained chat model
        (SmolLM2-135M), graded in difficulty, with a held-out split.
    selective_dpo: Selective DPO (Gao et al., ICML 2025): learning orders from reference models on
        random halves, the easiest fraction trained easy to hard.
    dpsdp: DPSDP (Yuan & Xie, ICML 2025): actor-critic multi-turn refinement trained by per-turn
        DPO on pairs labelled by Monte-Carlo Q estimates.
    frozen_prefix: DPO on the top blocks of a pretrained LM, its frozen bottom blocks' hidden states
        computed once per sequence (the same numbers as the whole model, a fraction of the work).

Importing ``rayml.alignment`` does not import torch; the submodules do.
"""

from __future__ import annotations

import importlib

__all__ = ["dpo", "preference", "text_tasks", "selective_dpo", "dpsdp", "frozen_prefix"]


def __getattr__(name):
    if name in __all__:
        return importlib.import_module(f"rayml.alignment.{name}")
    raise AttributeError(f"module 'rayml.alignment' has no attribute {name!r}")
