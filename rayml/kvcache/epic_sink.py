"""Attention sinks at chunk beginnings: the measurement behind EPIC's LegoLink.

Hu et al. (EPIC, ICML 2025, Sec. 4 and its attention-sink figure) observe that a chunk compiled
alone puts a large share of its attention on its own first token (the "attention sink" of Xiao et
al., 2024, that every causal LM develops at position 0); linked into a longer prompt, those first
tokens keep KV that was computed as a sink, and the query is drawn to every chunk's beginning.
LegoLink recomputes exactly those tokens. This module measures the attention mass behind that
argument on any embedded model (the substrate or SmolLM2):

* ``attention_mass(model, ids, rows, cache)``: the head-averaged softmax attention of the tokens
  ``ids`` written at ``rows`` of ``cache`` (an empty cache: a plain causal prefill), one (n, T)
  matrix per layer; it re-derives the probabilities from each layer's queries and the cache's keys
  (the engine itself calls SDPA, which does not return them).
* ``first_token_mass(probs, spans)``: the mean attention that the tokens of each span (a chunk's
  rows) put on the span's first row, and on row 0 (the prompt's own first token), per layer.

Examples:
    >>> import torch
    >>> from rayml.llm.model import ModelConfig, TransformerLM
    >>> m = TransformerLM(ModelConfig(vocab_size=32, d_model=16, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=32)).eval()
    >>> probs = attention_mass(m, [1, 5, 6, 7])
    >>> len(probs), tuple(probs[0].shape)
    (2, (4, 4))
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from rayml.llm.model import KVCache, TransformerLM, apply_rope

__all__ = ["attention_mass", "first_token_mass"]


@torch.no_grad()
def attention_mass(model: TransformerLM, ids: Sequence[int], rows: Sequence[int] | None = None,
                   cache: KVCache | None = None) -> list[torch.Tensor]:
    """Per layer, the (len(ids), cache rows) attention probabilities, averaged over heads, of the
    tokens ``ids`` recomputed at ``rows`` (their positions) against ``cache`` (module docstring).

    With ``cache=None`` the tokens are a fresh causal prefill at rows ``0 .. len-1``. The cache
    is written as the engine's forward writes it (recomputing a request's query rows in a cache
    that already holds them leaves it unchanged).
    """
    ids = [int(t) for t in ids]
    if not ids:
        raise ValueError("ids must not be empty")
    if cache is None:
        if rows is not None and list(rows) != list(range(len(ids))):
            raise ValueError("rows must be 0 .. len(ids)-1 without a cache")
        cache = model.new_cache(1, capacity=len(ids))
        rows = list(range(len(ids)))
    rows = [int(r) for r in (rows if rows is not None else range(cache.length, cache.length + len(ids)))]
    if len(rows) != len(ids):
        raise ValueError(f"rows must have one entry per id, got {len(rows)} for {len(ids)}")
    cfg = model.config
    out: list[torch.Tensor] = []

    def hook(module, args, _output):
        x, cos, sin, kv, _slots, mask = args
        b, s, _ = x.shape
        q = module.q_proj(x).view(b, s, cfg.n_heads, cfg.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k, _ = kv.read(module.layer)
        k = k.repeat_interleave(cfg.n_heads // cfg.n_kv_heads, dim=1)
        scores = (q.double() @ k.double().transpose(-1, -2)) / cfg.head_dim ** 0.5
        if mask is None:  # the engine's plain causal path (fresh prefill) or one token seeing all
            t = k.shape[2]
            mask = (torch.arange(t)[None, :] <= torch.arange(t - s, t)[:, None])[None, None]
        scores = scores.masked_fill(~mask, float("-inf"))
        out.append(torch.softmax(scores, -1).mean(dim=1)[0].float())

    handles = [layer.self_attn.register_forward_hook(hook) for layer in model.layers]
    try:
        model(torch.tensor([ids]), torch.tensor(rows), cache=cache, slots=torch.tensor(rows), last_only=True)
    finally:
        for h in handles:
            h.remove()
    return out


def first_token_mass(probs: Sequence[torch.Tensor], query_rows: Sequence[int],
                     spans: Sequence[tuple[int, int]]) -> dict:
    """Attention of queries on chunk beginnings, per layer.

    Args:
        probs: ``attention_mass`` output (one (n_queries, T) matrix per layer).
        query_rows: the cache row of each query (the rows of ``probs``).
        spans: ``(start, end)`` cache rows of each chunk of interest.

    Returns ``{"chunk_first": (layers,), "prompt_first": (layers,)}``: for ``chunk_first``, the
    attention each span's own later tokens (query rows inside the span, after its first) put on
    the span's first row, averaged over those tokens and spans; when no query lies inside any span
    (a query after the documents), the attention the queries put on all spans' first rows summed
    over spans, averaged over queries. ``prompt_first``: the mean attention on row 0.
    """
    qr = np.asarray(list(query_rows))
    chunk, first = [], []
    for p in probs:
        p = p.double().numpy()
        inside = [(p[(qr > s) & (qr < e)][:, s]) for s, e in spans]
        inside = [v for v in inside if v.size]
        if inside:
            chunk.append(float(np.mean(np.concatenate(inside))))
        else:
            chunk.append(float(p[:, [s for s, _ in spans]].sum(axis=1).mean()))
        first.append(float(p[:, 0].mean()))
    return {"chunk_first": np.array(chunk), "prompt_first": np.array(first)}
