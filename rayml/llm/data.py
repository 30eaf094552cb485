"""Training batches for the embedded LM: task items packed into fixed-length rows.

Each item becomes ``<bos> prompt answer <eos> [question answer <eos>]...``; prompt and answer
are tokenized separately (as at inference time, where the answer is generated after the encoded
prompt). Items are packed one after another into rows of ``row_len + 1`` tokens with plain causal
attention across them (positions run over the whole row), and only answer tokens and their
``<eos>`` carry loss (targets elsewhere are ``-100``). A step's batch depends only on
``(seed, step)``, so training resumes exactly from a checkpoint.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from rayml.llm import tasks as _tasks
from rayml.llm.tokenizer import Tokenizer

__all__ = ["item_tokens", "pack_batch", "IGNORE"]

IGNORE = -100


def item_tokens(tok: Tokenizer, item: _tasks.Item) -> tuple[list[int], list[int]]:
    """``(ids, targets)`` of one training item: targets are the next-token labels (IGNORE off-answer)."""
    ids = [tok.bos_id] + tok.encode(item.prompt)
    loss = [False] * len(ids)
    segs = [(item.answer, True)]
    for q, a in item.extra:
        segs += [(q, False), (a, True)]
    for text, is_answer in segs:
        piece = tok.encode(text) + ([tok.eos_id] if is_answer else [])
        ids += piece
        loss += [is_answer] * len(piece)
    # label of position i is token i+1 when that token is an answer token
    targets = [ids[i + 1] if loss[i + 1] else IGNORE for i in range(len(ids) - 1)] + [IGNORE]
    return ids, targets


def pack_batch(tok: Tokenizer, *, seed: int, step: int, rows: int, row_len: int,
               weights: Mapping[str, float], max_tries: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, targets)`` of shape (rows, row_len) for training step ``step``.

    Items are drawn from the task mixture ``weights`` (task -> share) with the generator
    ``default_rng([seed, step])``; an item that does not fit a row's remaining room is redrawn (at
    most ``max_tries`` times), then the row is padded (no loss on padding).
    """
    rng = np.random.default_rng([int(seed), int(step)])
    names = sorted(weights)
    p = np.array([weights[n] for n in names], dtype=float)
    p = p / p.sum()
    inp = np.full((rows, row_len), tok.pad_id, dtype=np.int64)
    tgt = np.full((rows, row_len), IGNORE, dtype=np.int64)
    for r in range(rows):
        pos, tries = 0, 0
        while pos < row_len and tries < max_tries:
            name = names[int(rng.choice(len(names), p=p))]
            item = _tasks.make_items(name, 1, rng, split="train")[0]
            ids, targets = item_tokens(tok, item)
            if len(ids) > row_len - pos:
                tries += 1
                continue
            inp[r, pos:pos + len(ids)] = ids
            tgt[r, pos:pos + len(ids)] = targets
            pos += len(ids)
    return torch.from_numpy(inp), torch.from_numpy(tgt)
