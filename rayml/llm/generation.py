"""Batched generation with the KV cache: greedy, temperature and top-p sampling, logits hooks.

``generate(model, prompts_ids, ...)`` left-pads the prompts, prefills them into one ``KVCache``
(padding entries are marked invalid and positions restart at 0 for every prompt, so a padded
prompt gives the same logits as alone), then decodes one token per step for all sequences.
``logits_processors`` are called every step as ``fn(tokens, logits) -> logits`` with
``tokens`` (batch, generated so far) and ``logits`` (batch, vocab): constrained decoding
(ZapFormat) masks there. ``generate_recompute`` is the reference without a cache (the whole
prefix is recomputed every step).

Examples:
    >>> out = generate(model, [[1, 5, 6], [1, 7]], max_new_tokens=4, eos_id=2)   # doctest: +SKIP
    >>> out.tokens          # list of generated id lists (stopped at eos, eos excluded)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from rayml.llm.model import KVCache, TransformerLM

__all__ = ["GenerationResult", "generate", "generate_recompute", "sample_next", "LogitsProcessor"]

LogitsProcessor = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class GenerationResult:
    """Output of ``generate``.

    Attributes:
        tokens: generated ids per sequence (stopped before ``eos_id``).
        finished: whether each sequence emitted ``eos_id``.
        cache: the KV cache after the last step (prompt + generated tokens).
    """

    tokens: list[list[int]]
    finished: list[bool]
    cache: KVCache | None = None


def _check(max_new_tokens, temperature, top_p):
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def sample_next(logits: torch.Tensor, *, temperature: float = 0.0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Next token per row of ``logits`` (batch, vocab): argmax when ``temperature == 0``, else a draw
    from ``softmax(logits / temperature)`` restricted to the smallest top-p nucleus."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sp, idx = probs.sort(dim=-1, descending=True)
        keep = sp.cumsum(-1) - sp < top_p  # tokens whose preceding mass is below top_p
        keep[:, 0] = True
        sp = sp * keep
        choice = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=generator)
        return idx.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(model: TransformerLM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 32,
             eos_id: int | None = None, pad_id: int = 0, temperature: float = 0.0, top_p: float = 1.0,
             seed: int | None = None, logits_processors: Sequence[LogitsProcessor] = (),
             cache: KVCache | None = None, return_cache: bool = False) -> GenerationResult:
    """Generate continuations of ``prompts`` (lists of ids) with the KV cache.

    Args:
        model: the embedded LM.
        prompts: token id lists (any lengths >= 1).
        max_new_tokens: tokens to generate at most.
        eos_id: stop a sequence when it emits this id.
        pad_id: id used for left padding (never attended to).
        temperature: 0 is greedy.
        top_p: nucleus sampling mass.
        seed: seeds the sampling generator (sampling is then reproducible).
        logits_processors: ``fn(tokens, logits) -> logits`` applied in order every step.
        cache: a prefilled cache to continue from (then ``prompts`` are appended after it; every
            sequence of the batch must already be in it).
        return_cache: keep the final cache in the result.
    """
    _check(max_new_tokens, temperature, top_p)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty id lists")
    gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    b = len(prompts)
    device = model.embed_tokens.weight.device
    width = max(len(p) for p in prompts)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    valid = torch.zeros((b, width), dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        valid[i, width - len(p):] = True
    ids, valid = ids.to(device), valid.to(device)
    if cache is None:
        cache = model.new_cache(b, capacity=width + max_new_tokens)
        start = torch.zeros(b, 1, dtype=torch.long, device=device)
    else:
        if cache.batch != b:
            raise ValueError(f"cache holds {cache.batch} sequences, prompts {b}")
        cache.ensure_capacity(cache.length + width + max_new_tokens)
        start = cache.next_positions()[:, None]
    positions = start + (valid.long().cumsum(1) - 1).clamp(min=0)
    logits = model(ids, positions, cache=cache, valid=valid, last_only=True)[:, -1]
    next_pos = positions[:, -1] + 1
    out = torch.zeros((b, 0), dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        for proc in logits_processors:
            logits = proc(out, logits)
        tok = sample_next(logits, temperature=temperature, top_p=top_p, generator=gen)
        if eos_id is not None:
            tok = torch.where(done, torch.full_like(tok, eos_id), tok)
        out = torch.cat([out, tok[:, None]], dim=1)
        if eos_id is not None:
            done = done | (tok == eos_id)
            if bool(done.all()):
                break
        if step + 1 < max_new_tokens:
            logits = model(tok[:, None], next_pos[:, None], cache=cache)[:, -1]
            next_pos = next_pos + 1
    return _result(out, eos_id, cache if return_cache else None)


def _result(out: torch.Tensor, eos_id, cache) -> GenerationResult:
    tokens, finished = [], []
    for row in out.tolist():
        if eos_id is not None and eos_id in row:
            tokens.append(row[: row.index(eos_id)])
            finished.append(True)
        else:
            tokens.append(row)
            finished.append(False)
    return GenerationResult(tokens, finished, cache)


@torch.no_grad()
def generate_recompute(model: TransformerLM, prompts: Sequence[Sequence[int]], *, max_new_tokens: int = 32,
                       eos_id: int | None = None, temperature: float = 0.0, top_p: float = 1.0,
                       seed: int | None = None, logits_processors: Sequence[LogitsProcessor] = ()) -> GenerationResult:
    """Reference generation without a cache: each prompt alone, full prefix recomputed every step."""
    _check(max_new_tokens, temperature, top_p)
    gen = torch.Generator().manual_seed(int(seed)) if seed is not None else None
    rows = []
    device = model.embed_tokens.weight.device
    for p in prompts:
        seq = torch.as_tensor([list(p)], dtype=torch.long, device=device)
        out = torch.zeros((1, 0), dtype=torch.long, device=device)
        for _ in range(max_new_tokens):
            logits = model(seq)[:, -1]
            for proc in logits_processors:
                logits = proc(out, logits)
            tok = sample_next(logits, temperature=temperature, top_p=top_p, generator=gen)
            out = torch.cat([out, tok[:, None]], dim=1)
            seq = torch.cat([seq, tok[:, None]], dim=1)
            if eos_id is not None and int(tok) == eos_id:
                break
        rows.append(out[0])
    width = max(len(r) for r in rows)
    fill = eos_id if eos_id is not None else 0
    out = torch.stack([torch.cat([r, torch.full((width - len(r),), fill, dtype=torch.long, device=device)]) for r in rows])
    return _result(out, eos_id, None)
