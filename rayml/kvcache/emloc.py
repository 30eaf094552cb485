"""EMLoC: chunk-wise compression of in-context demonstrations with layer-wise adaptive pruning.

Paper: Ma, Zhang, Wei, Tian, "Efficient Multi-modal Long Context Learning for Training-free
Adaptation" (EMLoC), ICML 2025 (arXiv 2505.19812; authors' code: Zehong-Ma/EMLoC, a patched
``modeling_qwen2_vl.py``, ``context_organize_pre``). Text path only: no small vision-language model
ships here, so demonstrations are text (prompt, answer) pairs on the embedded ``TransformerLM``
(the substrate, or SmolLM2-135M loaded into it).

The objective (paper Sec. 3): a compressed memory ``M^ subset of M`` (the full KV cache of the
demonstration context) of least size with ``D_JS(P(Y | M^, X), P(Y | M, X)) <= delta``. It is
approximated chunk by chunk and layer by layer (``compress``):

1. *Chunk-wise compression.* The demonstrations are split into chunks of ``chunk_size``. Chunk
   ``k`` is prefilled against the compressed memory ``M_{k-1}`` of the chunks before it, its
   positions continuing after the last position of the uncompressed context so far
   (``prefill_chunk``). Its KV ``M_k`` is pruned (steps 2-4) and appended to the memory.
2. *Observation pass.* Each demonstration of the chunk is replayed on its own (a batch, right
   padded) after ``[M_{k-1}; M_k]``; the outputs at its answer rows give the teacher
   distributions, and
   the attention of those rows gives the importance of every chunk token. The answer rows are
   the authors' label positions: the token before the answer (whose output predicts the first
   answer token), the answer, and the token that ends it.
3. *Importance* (``importance``): per layer, attention probabilities from the observation rows,
   softmax over the current chunk and the replayed tokens only (previous memory excluded, as in
   the authors' attention), summed over rows and over the query heads sharing a KV head,
   smoothed by a width-``pool`` average pool (zero padded), plus ``answer_bonus`` (100) on the
   chunk's own answer rows, which are therefore kept first.
4. *Layer-wise adaptive pruning* (``compress_chunk``): from the top layer down, keep the top
   ``int(ratio * C)`` chunk tokens per KV head for the smallest ``ratio`` of ``ratios``
   (10 %, 20 %, 50 %) whose Jensen-Shannon divergence to the teacher, re-running the replayed
   demonstrations from that layer's (unchanged) input hidden states with every higher layer
   already pruned, is at most ``delta`` (0.005); if none is, the layer keeps the whole chunk.
   Top-down order is what makes the re-run cheap: pruning layer ``l`` does not change the
   hidden states entering it.

The memory is then reused for every query of the task (``answer``): queries attend to it at
positions after the whole context (pruned tokens keep their original RoPE positions).

JS divergence: ``0.5 KL(P || M) + 0.5 KL(Q || M)``, ``M = (P + Q) / 2``, natural log, averaged
over the observed answer positions (the authors' ``batchmean``). Computed in float64 per vocab
entry as ``p log(2p/(p+q)) + q log(2q/(p+q))``, each term clipped at 0 (it is >= 0 exactly;
the clip removes float rounding only).

Baselines (one prefill of the full context, then a fixed number of tokens per layer and KV head,
the same for every layer; ``prune_full``):

* ``snapkv``: SnapKV (Li et al., NeurIPS 2024): the last ``window`` context tokens vote with their
  attention (summed over the window and the head group, average-pooled, kernel 5); the window is
  always kept. The memory is built before any query, so the window is the end of the
  demonstrations (as kvpress's ``SnapKVPress`` uses the end of the context).
* ``h2o``: H2O (Zhang et al., NeurIPS 2023) applied once at the end of prefill: heavy hitters by
  attention accumulated over every query of the context, plus the most recent tokens
  (``recent`` share of the budget).
* ``streaming``: StreamingLLM (Xiao et al., ICLR 2024): ``sink`` first tokens + the most recent.

Assumed (not in the abstract; read in the authors' code): the candidate ratios, ``delta``, the
pool width, the +100 answer bonus, the chunk of 4 demonstrations (their non-ImageNet setting),
and that ratios are fractions of the chunk's length. Assumed (ours): demonstrations are replayed
without a BOS token; the first chunk starts with BOS (the authors' first chunk holds the system
prompt and may prune it); attention is computed explicitly in float32 (SDPA is not used, so the
probabilities the pruning reads are those of the forward it prunes).

Examples:
    >>> from rayml.llm.model import ModelConfig, TransformerLM
    >>> model = TransformerLM(ModelConfig(vocab_size=32, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64))
    >>> demos = [Demo([5, 6], [7], [8]) for _ in range(6)]
    >>> res = compress(model, demos, EMLoCConfig(chunk_size=3), bos_id=1)
    >>> res.memory.n_tokens
    25
    >>> len(res.memory.tokens_per_layer()) == 4
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rayml.llm.model import TransformerLM, apply_rope, rope_cos_sin

__all__ = ["EMLoCConfig", "Demo", "Memory", "ChunkTrace", "CompressResult", "FlopCounter", "js_divergence",
           "kl_divergence", "context_ids", "prefill_chunk", "full_memory", "importance", "compress_chunk",
           "compress", "prune_full", "BASELINES", "query_logits", "queries_logits", "answer", "memory_to_arrays",
           "memory_from_arrays", "memory_key"]

BASELINES = ("snapkv", "h2o", "streaming")


def _check_ids(name: str, ids, *, allow_empty: bool = False) -> list[int]:
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise TypeError(f"{name} must be a sequence of token ids, got {type(ids).__name__}")
    out = []
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
            raise ValueError(f"{name} must hold non-negative integer token ids, got {i!r}")
        out.append(int(i))
    if not out and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return out


@dataclass(frozen=True)
class EMLoCConfig:
    """EMLoC's settings (defaults: the authors' code).

    Attributes:
        delta: the JS-divergence tolerance per layer decision (``delta_L_max = 0.005``); ``>= 0``.
        ratios: candidate retention ratios of a chunk, tried smallest first (``1/10, 1/5, 1/2``).
        pool: width of the average pool smoothing the importance (odd, >= 1; 5).
        chunk_size: demonstrations per chunk (4).
        answer_bonus: added to the importance of the chunk's answer tokens (100).
    """

    delta: float = 0.005
    ratios: tuple = (0.1, 0.2, 0.5)
    pool: int = 5
    chunk_size: int = 4
    answer_bonus: float = 100.0

    def __post_init__(self):
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not self.delta >= 0 \
                or math.isnan(self.delta):
            raise ValueError(f"delta must be a number >= 0, got {self.delta!r}")
        if not isinstance(self.ratios, tuple) or not self.ratios or \
                not all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < 1 for r in self.ratios):
            raise ValueError(f"ratios must be a non-empty tuple of numbers in (0, 1), got {self.ratios!r}")
        if tuple(sorted(self.ratios)) != self.ratios:
            raise ValueError(f"ratios must be increasing, got {self.ratios!r}")
        if isinstance(self.pool, bool) or not isinstance(self.pool, int) or self.pool < 1 or self.pool % 2 == 0:
            raise ValueError(f"pool must be an odd integer >= 1, got {self.pool!r}")
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {self.chunk_size!r}")
        if not isinstance(self.answer_bonus, (int, float)) or isinstance(self.answer_bonus, bool):
            raise ValueError(f"answer_bonus must be a number, got {self.answer_bonus!r}")


@dataclass(frozen=True)
class Demo:
    """One demonstration: ``prompt + answer + end`` token ids.

    The label tokens are the last prompt token (its output predicts the first answer token), the
    answer, and the first token of ``end`` (the end of the turn): the authors label from the
    token after ``assistant`` (the newline before the answer) to ``<|im_end|>``. ``end`` may hold
    more tokens (a separator), never labelled.
    """

    prompt: Sequence[int]
    answer: Sequence[int]
    end: Sequence[int] = ()

    def __post_init__(self):
        object.__setattr__(self, "prompt", tuple(_check_ids("prompt", self.prompt, allow_empty=True)))
        object.__setattr__(self, "answer", tuple(_check_ids("answer", self.answer)))
        object.__setattr__(self, "end", tuple(_check_ids("end", self.end, allow_empty=True)))

    @property
    def ids(self) -> list[int]:
        """All token ids of the demonstration."""
        return list(self.prompt) + list(self.answer) + list(self.end)

    @property
    def label_mask(self) -> list[bool]:
        """True at the last prompt token, the answer tokens and the first end token."""
        lead = 1 if self.prompt else 0
        n_lab = lead + len(self.answer) + (1 if self.end else 0)
        return [False] * (len(self.prompt) - lead) + [True] * n_lab + [False] * (len(self.end) - (1 if self.end else 0))


@dataclass
class Memory:
    """A (possibly pruned) KV memory, batch 1, ragged over layers.

    Attributes:
        keys, values: per layer, (n_kv_heads, T_l, head_dim); keys after RoPE.
        positions: per layer, (n_kv_heads, T_l) original positions of the kept tokens.
        next_position: the position after the whole (uncompressed) context.
        n_tokens: number of context tokens before pruning.
    """

    keys: list
    values: list
    positions: list
    next_position: int
    n_tokens: int

    def tokens_per_layer(self) -> list[int]:
        """Kept tokens per layer (per KV head; equal across the heads of a layer)."""
        return [int(k.shape[1]) for k in self.keys]

    def kept_fraction(self) -> float:
        """Kept KV entries over the full context's."""
        return float(sum(self.tokens_per_layer())) / float(max(1, self.n_tokens * len(self.keys)))

    def nbytes(self) -> int:
        """Bytes of keys and values."""
        return int(sum(k.numel() * k.element_size() + v.numel() * v.element_size()
                       for k, v in zip(self.keys, self.values)))

    def append(self, keys, values, positions, n_new: int) -> None:
        """Append per-layer rows (previous rows kept)."""
        for i in range(len(self.keys)):
            self.keys[i] = torch.cat([self.keys[i], keys[i]], dim=1)
            self.values[i] = torch.cat([self.values[i], values[i]], dim=1)
            self.positions[i] = torch.cat([self.positions[i], positions[i]], dim=1)
        self.next_position += int(n_new)
        self.n_tokens += int(n_new)

    @classmethod
    def empty(cls, model: TransformerLM) -> "Memory":
        """No tokens yet."""
        cfg = model.config
        dt = model.embed_tokens.weight.dtype
        dev = model.embed_tokens.weight.device
        z = [torch.zeros(cfg.n_kv_heads, 0, cfg.head_dim, dtype=dt, device=dev) for _ in range(cfg.n_layers)]
        return cls(z, [t.clone() for t in z],
                   [torch.zeros(cfg.n_kv_heads, 0, dtype=torch.long, device=dev) for _ in range(cfg.n_layers)], 0, 0)

    def clone(self) -> "Memory":
        """A deep copy."""
        return Memory([k.clone() for k in self.keys], [v.clone() for v in self.values],
                      [p.clone() for p in self.positions], self.next_position, self.n_tokens)


class FlopCounter:
    """Analytic multiply-add FLOPs (x2) of the forwards run: projections, MLP, attention scores and
    mixing, the LM head; and the largest attention score matrix materialised (entries)."""

    def __init__(self):
        self.flops = 0.0
        self.peak_scores = 0

    def layer(self, cfg, n_rows: int, n_keys: int, batch: int = 1) -> None:
        d, hd = cfg.d_model, cfg.head_dim
        lin = 2 * d * (cfg.n_heads * hd) * 2 + 2 * d * (cfg.n_kv_heads * hd) * 2 + 3 * 2 * d * cfg.d_ff
        attn = 2 * 2 * cfg.n_heads * hd * n_keys
        self.flops += float(batch * n_rows * (lin + attn))
        self.peak_scores = max(self.peak_scores, int(batch * cfg.n_heads * n_rows * n_keys))

    def head(self, cfg, n_rows: int) -> None:
        self.flops += float(2 * cfg.d_model * cfg.vocab_size * n_rows)


# ------------------------------------------------------------------------------------------
# the forward over a ragged memory


def _block(model: TransformerLM, layer: int, x, cos, sin, ctx_k, ctx_v, own_mask, *, capture_from: int | None = None,
           flops: FlopCounter | None = None):
    """One transformer block over ``x`` (B, S, d) attending to shared context KV (kv, T, hd) and to
    itself under ``own_mask`` (B, S, S). Returns ``(x_out, k, v, probs)``; ``probs`` (B, H, S,
    T - capture_from + S) is the softmax over context columns ``capture_from:`` and the own columns
    only (the authors' importance attention), or None."""
    cfg = model.config
    blk = model.layers[layer]
    att = blk.self_attn
    b, s, _ = x.shape
    hd, h, kvh = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    hn = blk.input_layernorm(x)
    q = att.q_proj(hn).view(b, s, h, hd).transpose(1, 2)
    k = att.k_proj(hn).view(b, s, kvh, hd).transpose(1, 2)
    v = att.v_proj(hn).view(b, s, kvh, hd).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    t = ctx_k.shape[1]
    keys = torch.cat([ctx_k[None].expand(b, -1, -1, -1), k], dim=2)
    vals = torch.cat([ctx_v[None].expand(b, -1, -1, -1), v], dim=2)
    rep = h // kvh
    keys_h = keys.repeat_interleave(rep, dim=1)
    vals_h = vals.repeat_interleave(rep, dim=1)
    scores = (q.float() @ keys_h.float().transpose(-1, -2)) / math.sqrt(hd)  # (B, H, S, T+S)
    mask = torch.cat([torch.ones(b, s, t, dtype=torch.bool, device=x.device), own_mask], dim=2)[:, None]
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = (probs @ vals_h.float()).to(x.dtype)
    x = x + att.o_proj(out.transpose(1, 2).reshape(b, s, h * hd))
    x = x + blk.mlp(blk.post_attention_layernorm(x))
    if flops is not None:
        flops.layer(cfg, s, t + s, b)
    cap = None
    if capture_from is not None:
        cap = torch.softmax(scores[..., capture_from:], dim=-1)
    return x, k, v, cap


def _own_mask(valid: torch.Tensor) -> torch.Tensor:
    """(B, S, S) causal mask over own tokens, padding keys hidden, every query sees itself."""
    b, s = valid.shape
    causal = torch.ones(s, s, dtype=torch.bool, device=valid.device).tril()
    m = causal[None] & valid[:, None, :]
    return m | torch.eye(s, dtype=torch.bool, device=valid.device)[None]


def _run(model: TransformerLM, x, positions, valid, ctx, *, start_layer: int = 0, capture: Sequence[int] | None = None,
         keep_hidden: bool = False, flops: FlopCounter | None = None):
    """Layers ``start_layer ..`` over hidden ``x``; ``ctx`` per layer ``(k, v)`` (kv, T_l, hd).

    Returns ``(final_hidden_normed, new_kv per layer, captured probs per layer, layer inputs)``.
    """
    cfg = model.config
    cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, x.dtype)
    own = _own_mask(valid)
    new_kv, caps, inputs = {}, {}, {}
    for layer in range(start_layer, cfg.n_layers):
        if keep_hidden:
            inputs[layer] = x
        ck, cv = ctx[layer]
        cf = None if capture is None else int(capture[layer])
        x, k, v, cap = _block(model, layer, x, cos, sin, ck, cv, own, capture_from=cf, flops=flops)
        new_kv[layer] = (k, v)
        if cap is not None:
            caps[layer] = cap
    return model.norm(x), new_kv, caps, inputs


def _embed(model: TransformerLM, ids: torch.Tensor) -> torch.Tensor:
    return model.embed_tokens(ids)


def _device(model):
    return model.embed_tokens.weight.device


def context_ids(demos: Sequence[Demo], bos_id: int | None) -> tuple[list[int], list[bool]]:
    """The demonstration context ``[BOS] + demo_1 + ... + demo_N`` and its label mask."""
    ids = [] if bos_id is None else [int(bos_id)]
    lab = [] if bos_id is None else [False]
    for d in demos:
        ids += d.ids
        lab += d.label_mask
    return ids, lab


@torch.no_grad()
def prefill_chunk(model: TransformerLM, memory: Memory, ids: Sequence[int], *, capture: bool = False,
                  flops: FlopCounter | None = None):
    """Run ``ids`` after ``memory`` (positions continue at ``memory.next_position``).

    Returns ``(keys, values, positions, probs)``: per layer (kv, C, hd) chunk KV and (kv, C)
    positions; ``probs`` per layer (1, H, C, C) attention over the chunk itself when ``capture``.
    """
    ids = _check_ids("ids", ids)
    dev = _device(model)
    c = len(ids)
    pos = (memory.next_position + torch.arange(c, device=dev))[None]
    x = _embed(model, torch.as_tensor([ids], dtype=torch.long, device=dev))
    ctx = list(zip(memory.keys, memory.values))
    cap = [k.shape[1] for k in memory.keys] if capture else None
    _, new_kv, caps, _ = _run(model, x, pos, torch.ones(1, c, dtype=torch.bool, device=dev), ctx, capture=cap,
                              flops=flops)
    keys = [new_kv[i][0][0] for i in range(model.config.n_layers)]
    vals = [new_kv[i][1][0] for i in range(model.config.n_layers)]
    p = pos[0][None].expand(model.config.n_kv_heads, -1).clone()
    return keys, vals, [p.clone() for _ in keys], ([caps[i] for i in range(model.config.n_layers)] if capture else None)


def full_memory(model: TransformerLM, ids: Sequence[int], *, capture: bool = False,
                flops: FlopCounter | None = None):
    """The unpruned memory of a whole context in one prefill (the full-context reference), and the
    per-layer attention probabilities (1, H, T, T) when ``capture``."""
    mem = Memory.empty(model)
    k, v, p, probs = prefill_chunk(model, mem, ids, capture=capture, flops=flops)
    mem.append(k, v, p, len(ids))
    return (mem, probs) if capture else mem


# ------------------------------------------------------------------------------------------
# divergences


def js_divergence(logits_p: torch.Tensor, logits_q: torch.Tensor) -> float:
    """Jensen-Shannon divergence (nats) between the softmaxes of two (n, vocab) logit arrays,
    averaged over the ``n`` rows (paper's constraint; the authors' ``batchmean``)."""
    if logits_p.shape != logits_q.shape or logits_p.dim() != 2:
        raise ValueError(f"logits must be two (n, vocab) arrays of one shape, got {tuple(logits_p.shape)} "
                         f"and {tuple(logits_q.shape)}")
    p = torch.softmax(logits_p.double(), -1)
    q = torch.softmax(logits_q.double(), -1)
    m = p + q
    term = torch.special.xlogy(p, 2 * p / m) + torch.special.xlogy(q, 2 * q / m)
    term = torch.nan_to_num(term, nan=0.0).clamp_min(0.0)
    return float(0.5 * term.sum() / p.shape[0])


def kl_divergence(logits_ref: torch.Tensor, logits: torch.Tensor) -> float:
    """KL(ref || other) in nats averaged over rows."""
    lp = torch.log_softmax(logits_ref.double(), -1)
    lq = torch.log_softmax(logits.double(), -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


# ------------------------------------------------------------------------------------------
# EMLoC


@dataclass
class ChunkTrace:
    """What ``compress_chunk`` decided: per layer the kept count, the accepted ratio (1.0: whole
    chunk) and the JS divergence of every candidate tried (top layer first in ``tried``)."""

    length: int
    kept: list
    ratio: list
    tried: dict = field(default_factory=dict)


def _observation_batch(model, demos: Sequence[Demo], start: int):
    dev = _device(model)
    seqs = [d.ids for d in demos]
    s = max(len(x) for x in seqs)
    ids = torch.zeros(len(seqs), s, dtype=torch.long, device=dev)
    valid = torch.zeros(len(seqs), s, dtype=torch.bool, device=dev)
    lab = torch.zeros(len(seqs), s, dtype=torch.bool, device=dev)
    for i, d in enumerate(demos):
        n = len(d.ids)
        ids[i, :n] = torch.as_tensor(d.ids)
        valid[i, :n] = True
        lab[i, :n] = torch.as_tensor(d.label_mask)
    pos = start + torch.arange(s, device=dev)[None].expand(len(seqs), -1)
    return ids, pos, valid, lab


def importance(probs: torch.Tensor, rows: torch.Tensor, n_chunk: int, n_kv_heads: int, pool: int,
               chunk_labels: torch.Tensor, bonus: float) -> torch.Tensor:
    """EMLoC's token importance (kv, C) of one layer.

    Args:
        probs: (B, H, S, C + S) attention of the replayed demonstrations over the chunk and
            themselves (softmax over those columns only).
        rows: (B, S) bool, the observed (answer) rows.
        n_chunk: C.
        n_kv_heads: KV heads (query heads of a group are summed).
        pool: average-pool width (zero padded, stride 1).
        chunk_labels: (C,) bool, the chunk's own answer tokens (get ``bonus``).
        bonus: the answer bonus.
    """
    a = probs[..., :n_chunk].permute(0, 2, 1, 3)[rows]           # (n_rows, H, C)
    a = a.sum(0)                                                # (H, C)
    a = a.reshape(n_kv_heads, -1, n_chunk).sum(1)               # (kv, C)
    if pool > 1:
        a = F.avg_pool1d(a[None], kernel_size=pool, stride=1, padding=pool // 2)[0]
    return a + bonus * chunk_labels.to(a.dtype)[None]


def _top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """(kv, k) indices of the k largest scores per row, in increasing index order (stable ties)."""
    idx = torch.argsort(scores, dim=-1, descending=True, stable=True)[:, :k]
    return torch.sort(idx, dim=-1).values


def _gather(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    if t.dim() == 3:
        return torch.gather(t, 1, idx[..., None].expand(-1, -1, t.shape[-1]))
    return torch.gather(t, 1, idx)


@torch.no_grad()
def compress_chunk(model: TransformerLM, memory: Memory, chunk_ids: Sequence[int], chunk_labels: Sequence[bool],
                   demos: Sequence[Demo], config: EMLoCConfig, *, flops: FlopCounter | None = None) -> ChunkTrace:
    """Prefill one chunk after ``memory``, prune its KV layer by layer (top-down) under the JS
    constraint, and append the kept rows to ``memory`` (in place). Paper Sec. 3 / the authors'
    ``context_organize_pre``."""
    cfg = model.config
    n_layers = cfg.n_layers
    c = len(chunk_ids)
    pre = [k.shape[1] for k in memory.keys]
    ck, cv, cp, _ = prefill_chunk(model, memory, chunk_ids, flops=flops)
    start = memory.next_position + c
    ids, pos, valid, lab = _observation_batch(model, demos, start)
    ctx = [(torch.cat([memory.keys[i], ck[i]], 1), torch.cat([memory.values[i], cv[i]], 1)) for i in range(n_layers)]
    x0 = _embed(model, ids)
    hid, _, caps, inputs = _run(model, x0, pos, valid, ctx, capture=pre, keep_hidden=True, flops=flops)
    teacher = model.lm_head(hid[lab])
    if flops is not None:
        flops.head(cfg, int(lab.sum()))
    labels = torch.as_tensor(list(chunk_labels), dtype=torch.bool, device=ids.device)
    kept, ratios, tried = [c] * n_layers, [1.0] * n_layers, {}
    for layer in range(n_layers - 1, -1, -1):
        score = importance(caps[layer], lab, c, cfg.n_kv_heads, config.pool, labels, config.answer_bonus)
        full_k, full_v = ctx[layer]
        tried[layer] = []
        for r in config.ratios:
            k = int(c * r)
            if k < 1:
                tried[layer].append((r, float("nan")))
                continue
            idx = _top(score, k)
            ctx[layer] = (torch.cat([memory.keys[layer], _gather(ck[layer], idx)], 1),
                          torch.cat([memory.values[layer], _gather(cv[layer], idx)], 1))
            h2, _, _, _ = _run(model, inputs[layer], pos, valid, ctx, start_layer=layer, flops=flops)
            student = model.lm_head(h2[lab])
            if flops is not None:
                flops.head(cfg, int(lab.sum()))
            js = js_divergence(student, teacher)
            tried[layer].append((r, js))
            if js <= config.delta:
                kept[layer], ratios[layer] = k, r
                ck[layer], cv[layer] = _gather(ck[layer], idx), _gather(cv[layer], idx)
                cp[layer] = _gather(cp[layer], idx)
                break
        else:
            ctx[layer] = (full_k, full_v)
    memory.append(ck, cv, cp, c)
    return ChunkTrace(length=c, kept=kept, ratio=ratios, tried=tried)


@dataclass
class CompressResult:
    """``compress``'s output: the memory, one trace per chunk, and the analytic FLOPs / peak score
    entries of building it."""

    memory: Memory
    traces: list
    flops: float
    peak_scores: int


def _check_demos(demos) -> list[Demo]:
    if isinstance(demos, (str, bytes)) or not hasattr(demos, "__len__"):
        raise TypeError(f"demos must be a sequence of Demo, got {type(demos).__name__}")
    demos = list(demos)
    if not demos:
        raise ValueError("demos must not be empty")
    if not all(isinstance(d, Demo) for d in demos):
        raise TypeError("demos must hold Demo instances")
    return demos


@torch.no_grad()
def compress(model: TransformerLM, demos: Sequence[Demo], config: EMLoCConfig = EMLoCConfig(), *,
             bos_id: int | None = None) -> CompressResult:
    """EMLoC (paper Sec. 3, Eq. of the JS-constrained memory): chunk-wise compression of the
    demonstration context ``[BOS] + demos`` into a pruned memory."""
    if not isinstance(model, TransformerLM):
        raise TypeError(f"model must be a TransformerLM, got {type(model).__name__}")
    if not isinstance(config, EMLoCConfig):
        raise TypeError(f"config must be an EMLoCConfig, got {type(config).__name__}")
    demos = _check_demos(demos)
    if bos_id is not None:
        _check_ids("bos_id", [bos_id])
    total = len(context_ids(demos, bos_id)[0])
    if total > model.config.max_seq_len:
        raise ValueError(f"demos span {total} tokens, more than the context length {model.config.max_seq_len}")
    mem, flops, traces = Memory.empty(model), FlopCounter(), []
    for start in range(0, len(demos), config.chunk_size):
        part = demos[start:start + config.chunk_size]
        ids, lab = context_ids(part, bos_id if start == 0 else None)
        traces.append(compress_chunk(model, mem, ids, lab, part, config, flops=flops))
    return CompressResult(mem, traces, flops.flops, flops.peak_scores)


# ------------------------------------------------------------------------------------------
# fixed-ratio baselines on the full-context prefill


def _pool(a: torch.Tensor, kernel: int) -> torch.Tensor:
    if kernel <= 1:
        return a
    return F.avg_pool1d(a[None], kernel_size=kernel, stride=1, padding=kernel // 2)[0]


def prune_full(memory: Memory, probs: Sequence[torch.Tensor], method: str, keep: int, *, window: int = 16,
               kernel: int = 5, recent: float = 0.5, sink: int = 4) -> Memory:
    """A fixed-budget pruned copy of an unpruned single-prefill ``memory`` (``full_memory`` with
    ``capture=True`` gives ``probs``): ``keep`` tokens per layer and KV head for every layer.

    Args:
        method: ``"snapkv"``, ``"h2o"`` or ``"streaming"`` (module docstring).
        keep: tokens kept per layer and KV head (clipped to the context length).
        window, kernel: SnapKV's observation window and pooling width.
        recent: H2O's share of the budget given to the most recent tokens.
        sink: StreamingLLM's initial (sink) tokens.
    """
    if method not in BASELINES:
        raise ValueError(f"method must be one of {BASELINES}, got {method!r}")
    if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if not 0.0 <= float(recent) <= 1.0:
        raise ValueError(f"recent must be in [0, 1], got {recent!r}")
    if isinstance(sink, bool) or not isinstance(sink, int) or sink < 0:
        raise ValueError(f"sink must be an integer >= 0, got {sink!r}")
    n = memory.n_tokens
    if any(k.shape[1] != n for k in memory.keys):
        raise ValueError("memory must be unpruned (every layer holds every context token)")
    keep = int(min(keep, n))
    kvh = memory.keys[0].shape[0]
    out = Memory([], [], [], memory.next_position, n)
    for layer in range(len(memory.keys)):
        if method == "streaming":
            s = min(sink, keep)
            idx = torch.cat([torch.arange(s), torch.arange(n - (keep - s), n)]) if keep > s else torch.arange(s)
            idx = torch.unique(idx)[None].expand(kvh, -1)
        else:
            p = probs[layer][0]                                   # (H, T, T)
            if method == "snapkv":
                w = min(window, keep, n)
                votes = p[:, n - w:, : n - w].sum(1)              # (H, T - w)
                votes = votes.reshape(kvh, -1, n - w).sum(1)
                votes = _pool(votes, kernel)
                chosen = _top(votes, keep - w) if keep > w else torch.zeros(kvh, 0, dtype=torch.long)
                idx = torch.cat([chosen, torch.arange(n - w, n)[None].expand(kvh, -1)], 1)
            else:  # h2o
                r = min(int(round(recent * keep)), keep)
                acc = p.sum(1).reshape(kvh, -1, n).sum(1)[:, : n - r]   # accumulated attention
                heavy = _top(acc, keep - r) if keep > r else torch.zeros(kvh, 0, dtype=torch.long)
                idx = torch.cat([heavy, torch.arange(n - r, n)[None].expand(kvh, -1)], 1)
        out.keys.append(_gather(memory.keys[layer], idx))
        out.values.append(_gather(memory.values[layer], idx))
        out.positions.append(_gather(memory.positions[layer], idx))
    return out


# ------------------------------------------------------------------------------------------
# inference on a memory


@torch.no_grad()
def query_logits(model: TransformerLM, memory: Memory, ids: Sequence[int], *, flops: FlopCounter | None = None):
    """Logits (len(ids), vocab) of ``ids`` run after ``memory`` (positions after the context)."""
    ids = _check_ids("ids", ids)
    dev = _device(model)
    pos = (memory.next_position + torch.arange(len(ids), device=dev))[None]
    x = _embed(model, torch.as_tensor([ids], dtype=torch.long, device=dev))
    hid, _, _, _ = _run(model, x, pos, torch.ones(1, len(ids), dtype=torch.bool, device=dev),
                        list(zip(memory.keys, memory.values)), flops=flops)
    if flops is not None:
        flops.head(model.config, len(ids))
    return model.lm_head(hid[0])


@torch.no_grad()
def queries_logits(model: TransformerLM, memory: Memory, queries: Sequence[Sequence[int]], *,
                   flops: FlopCounter | None = None) -> list:
    """``[query_logits(model, memory, ids) for ids in queries]`` in one right-padded batch (session 10:
    a query's forward is mostly per-layer overhead on CPU). Attention is causal, so no real token sees
    the padding after it, and each row equals its own run up to float rounding. FLOPs are counted per
    query exactly as ``query_logits`` counts them (padding excluded)."""
    qs = [_check_ids("ids", q) for q in queries]
    if not qs:
        return []
    dev = _device(model)
    s = max(len(q) for q in qs)
    ids = torch.zeros(len(qs), s, dtype=torch.long, device=dev)
    valid = torch.zeros(len(qs), s, dtype=torch.bool, device=dev)
    for i, q in enumerate(qs):
        ids[i, :len(q)] = torch.as_tensor(q, dtype=torch.long, device=dev)
        valid[i, :len(q)] = True
    pos = (memory.next_position + torch.arange(s, device=dev))[None].expand(len(qs), -1)
    hid, _, _, _ = _run(model, _embed(model, ids), pos, valid, list(zip(memory.keys, memory.values)))
    if flops is not None:
        for q in qs:
            for k in memory.keys:
                flops.layer(model.config, len(q), k.shape[1] + len(q))
            flops.head(model.config, len(q))
    logits = model.lm_head(hid)
    return [logits[i, :len(q)] for i, q in enumerate(qs)]


@torch.no_grad()
def answer(model: TransformerLM, memory: Memory, query: Sequence[int], *, max_new_tokens: int = 8,
           eos_id: int | None = None, stop: Sequence[int] = ()) -> list[int]:
    """Greedy answer of ``query`` on ``memory`` (the query's own tokens are recomputed each step;
    queries are short). Stops at ``eos_id`` or a token in ``stop`` (not returned)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    seq = _check_ids("query", query)
    out: list[int] = []
    stops = set(int(s) for s in stop) | ({int(eos_id)} if eos_id is not None else set())
    for _ in range(max_new_tokens):
        nxt = int(query_logits(model, memory, seq)[-1].argmax())
        if nxt in stops:
            break
        out.append(nxt)
        seq = seq + [nxt]
    return out


# ------------------------------------------------------------------------------------------
# store payloads (rayml.actors.kvstore)


def memory_to_arrays(memory: Memory) -> dict:
    """Plain numpy arrays (object-store friendly) of a memory."""
    return {"keys": [k.detach().cpu().numpy() for k in memory.keys],
            "values": [v.detach().cpu().numpy() for v in memory.values],
            "positions": [p.detach().cpu().numpy() for p in memory.positions],
            "next_position": np.asarray(memory.next_position), "n_tokens": np.asarray(memory.n_tokens)}


def memory_from_arrays(arrays: dict) -> Memory:
    """Inverse of ``memory_to_arrays`` (copies: read-only buffers are fine)."""
    keys = [torch.tensor(np.array(k)) for k in arrays["keys"]]
    if len(keys) != len(arrays["values"]) or len(keys) != len(arrays["positions"]):
        raise ValueError("arrays must hold keys, values and positions for the same layers")
    return Memory(keys, [torch.tensor(np.array(v)) for v in arrays["values"]],
                  [torch.tensor(np.array(p)) for p in arrays["positions"]],
                  int(arrays["next_position"]), int(arrays["n_tokens"]))


def memory_key(model_id: str, demos: Sequence[Demo], config: EMLoCConfig, bos_id: int | None) -> list[int]:
    """Token-id list identifying a compressed memory for ``KVStoreClient`` (its key hashes the
    model id with these ids): the context ids, then the config encoded as integers."""
    ids, _ = context_ids(_check_demos(demos), bos_id)
    cfg = [int(round(config.delta * 1e9)), config.pool, config.chunk_size, int(round(config.answer_bonus * 1e3))]
    cfg += [int(round(r * 1e6)) for r in config.ratios]
    return ids + [2 ** 31 - 1] + cfg + [len(demos)]
