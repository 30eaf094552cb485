"""The embedded decoder-only transformer and its KV cache.

A Llama-shaped causal LM in plain torch: RMSNorm (pre-norm), rotary position embeddings (RoPE)
applied with explicit position ids, grouped-query attention through
``torch.nn.functional.scaled_dot_product_attention``, a SwiGLU MLP, no biases. Parameter names
and the RoPE convention (rotate-half) follow Hugging Face ``LlamaForCausalLM`` so weights copy
one to one (``rayml.llm.hf``). Every projection is an ordinary ``nn.Linear``, so quantizers and
mergers can walk ``model.named_modules()``.

The KV cache (``KVCache``) stores, per layer, keys AFTER RoPE and values, plus the position of
every entry and whether it is valid (left padding). Its entries can be read, written, re-rotated
to new positions (``KVCache.rerotate``: RoPE rotations compose, ``R(p') = R(p' - p) R(p)``) and
recomputed per token (``TransformerLM.forward`` with ``slots``: the given tokens are run through
every layer, overwrite their cache rows and attend to every valid entry at a position <= theirs)
- the operations EPIC's LegoLink needs.

Examples:
    >>> cfg = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64)
    >>> model = TransformerLM(cfg)
    >>> logits = model(torch.tensor([[1, 2, 3]]))          # (batch, seq, vocab)
    >>> cache = model.new_cache(batch=1, capacity=16)
    >>> _ = model(torch.tensor([[1, 2]]), cache=cache)     # prefill: cache.length == 2
    >>> _ = model(torch.tensor([[3]]), cache=cache)        # one decode step
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ModelConfig", "TransformerLM", "KVCache", "RMSNorm", "rope_cos_sin", "apply_rope"]


def check_int_fields(obj, names, *, minimum: int = 1) -> None:
    """Raise ``ValueError`` naming the first attribute of ``names`` that is not an int >= ``minimum``."""
    for name in names:
        v = getattr(obj, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise ValueError(f"{name} must be {what}, got {v!r}")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the embedded transformer.

    Attributes:
        vocab_size: number of token ids.
        d_model: hidden width.
        n_layers: transformer blocks.
        n_heads: query heads; ``d_model`` must be divisible by it.
        n_kv_heads: key/value heads (grouped-query attention); divides ``n_heads``.
        d_ff: hidden width of the SwiGLU MLP.
        max_seq_len: the context length (positions ``0 .. max_seq_len - 1``).
        rope_theta: RoPE base.
        norm_eps: RMSNorm epsilon.
        tie_embeddings: share the input embedding and the output head.
    """

    vocab_size: int
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    d_ff: int = 384
    max_seq_len: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    def __post_init__(self):
        check_int_fields(self, ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len"))
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head dim d_model/n_heads must be even for RoPE, got {self.d_model // self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps!r}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        """Plain dict (JSON-able)."""
        return asdict(self)

    def n_params(self) -> int:
        """Number of parameters of a model of this shape."""
        d, hd = self.d_model, self.head_dim
        attn = d * d * 2 + 2 * d * self.n_kv_heads * hd
        block = attn + 3 * d * self.d_ff + 2 * d
        emb = self.vocab_size * d * (1 if self.tie_embeddings else 2)
        return self.n_layers * block + emb + d


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` (Zhang & Sennrich 2019), computed in float32 like Llama."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


_INV_FREQ: dict = {}


def _inv_freq(head_dim: int, theta: float, device) -> torch.Tensor:
    key = (head_dim, float(theta), str(device))
    inv = _INV_FREQ.get(key)
    if inv is None:
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float32) / head_dim))
        _INV_FREQ[key] = inv
    return inv


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float, dtype=torch.float32):
    """RoPE ``cos`` and ``sin`` of shape ``positions.shape + (head_dim,)`` (rotate-half layout).

    Angles are ``p * theta^(-2i/head_dim)`` for ``i < head_dim/2``, repeated over both halves, as in
    Hugging Face Llama. ``positions`` may be any integer or float tensor (negative deltas rotate
    back).
    """
    inv = _inv_freq(head_dim, theta, positions.device)
    ang = positions.to(torch.float32)[..., None] * inv
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (batch, heads, seq, head_dim) by angles ``cos``/``sin`` (batch, seq, head_dim)."""
    cos, sin = cos[:, None], sin[:, None]
    return x * cos + _rotate_half(x) * sin


class KVCache:
    """Per-layer keys (after RoPE) and values with the position and validity of each entry.

    Tensors: ``keys[l]``, ``values[l]`` of shape (batch, n_kv_heads, capacity, head_dim);
    ``positions`` (batch, capacity) long; ``valid`` (batch, capacity) bool. Entries
    ``0 .. length-1`` are in use. Operations used by the methods (EPIC and the like):

    * ``read(layer)`` / ``write(layer, slots, k, v)``: direct access to the rows of one layer.
    * ``rerotate(new_positions)``: rotate every key from its stored position to a new one.
    * ``slice(start, end)``, ``concat(caches)``: cut chunks and link them.
    * ``TransformerLM.forward(ids, positions, cache=cache, slots=...)``: recompute given rows.
    """

    def __init__(self, keys, values, positions, valid, length: int, rope_theta: float):
        self.keys = keys
        self.values = values
        self.positions = positions
        self.valid = valid
        self.length = int(length)
        self.rope_theta = float(rope_theta)

    @classmethod
    def empty(cls, config: ModelConfig, batch: int, capacity: int, *, dtype=torch.float32, device="cpu"):
        """An empty cache for ``batch`` sequences of up to ``capacity`` tokens."""
        if batch < 1 or capacity < 1:
            raise ValueError(f"batch and capacity must be >= 1, got {batch}, {capacity}")
        shape = (batch, config.n_kv_heads, capacity, config.head_dim)
        keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layers)]
        values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layers)]
        pos = torch.zeros(batch, capacity, dtype=torch.long, device=device)
        valid = torch.zeros(batch, capacity, dtype=torch.bool, device=device)
        return cls(keys, values, pos, valid, 0, config.rope_theta)

    @property
    def batch(self) -> int:
        """Number of sequences."""
        return self.positions.shape[0]

    @property
    def capacity(self) -> int:
        """Number of rows allocated."""
        return self.positions.shape[1]

    @property
    def n_layers(self) -> int:
        """Number of layers."""
        return len(self.keys)

    def read(self, layer: int):
        """``(keys, values)`` of ``layer`` for the used rows (views, not copies)."""
        return self.keys[layer][:, :, : self.length], self.values[layer][:, :, : self.length]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Overwrite rows ``slots`` (1-D long) of ``layer`` with ``k``, ``v`` (batch, kv_heads, len(slots), hd)."""
        self.keys[layer][:, :, slots] = k.to(self.keys[layer].dtype)
        self.values[layer][:, :, slots] = v.to(self.values[layer].dtype)

    def ensure_capacity(self, capacity: int) -> None:
        """Grow the allocation to at least ``capacity`` rows (doubling)."""
        if capacity <= self.capacity:
            return
        new = max(capacity, 2 * self.capacity)
        pad = new - self.capacity
        self.keys = [F.pad(k, (0, 0, 0, pad)) for k in self.keys]
        self.values = [F.pad(v, (0, 0, 0, pad)) for v in self.values]
        self.positions = F.pad(self.positions, (0, pad))
        self.valid = F.pad(self.valid, (0, pad))

    def rerotate(self, new_positions: torch.Tensor, rows: slice | torch.Tensor | None = None) -> None:
        """Rotate the keys of ``rows`` (default: all used rows) to ``new_positions``, in place.

        ``new_positions`` has shape (batch, n_rows) or (n_rows,). Because RoPE is a rotation per
        frequency, rotating a key computed at position ``p`` by ``p' - p`` gives exactly the key of
        the same token at ``p'`` (up to float rounding). Values carry no position.
        """
        if rows is None:
            rows = torch.arange(self.length, device=self.positions.device)
        elif isinstance(rows, slice):
            rows = torch.arange(self.capacity, device=self.positions.device)[rows]
        new_positions = torch.as_tensor(new_positions, dtype=torch.long, device=self.positions.device)
        if new_positions.dim() == 1:
            new_positions = new_positions[None].expand(self.batch, -1)
        if new_positions.shape != (self.batch, rows.numel()):
            raise ValueError(f"new_positions must have shape ({self.batch}, {rows.numel()}), "
                             f"got {tuple(new_positions.shape)}")
        delta = new_positions - self.positions[:, rows]
        hd = self.keys[0].shape[-1]
        cos, sin = rope_cos_sin(delta, hd, self.rope_theta)
        for layer in range(self.n_layers):
            k = self.keys[layer][:, :, rows].float()
            self.keys[layer][:, :, rows] = apply_rope(k, cos, sin).to(self.keys[layer].dtype)
        self.positions[:, rows] = new_positions

    def slice(self, start: int, end: int) -> "KVCache":
        """A copy holding rows ``start .. end-1``."""
        if not 0 <= start <= end <= self.length:
            raise ValueError(f"slice [{start}, {end}) out of range [0, {self.length}]")
        return KVCache([k[:, :, start:end].clone() for k in self.keys],
                       [v[:, :, start:end].clone() for v in self.values],
                       self.positions[:, start:end].clone(), self.valid[:, start:end].clone(),
                       end - start, self.rope_theta)

    @staticmethod
    def concat(caches: "list[KVCache]", capacity: int | None = None) -> "KVCache":
        """Link caches one after another (positions are kept; ``rerotate`` to renumber them)."""
        if not caches:
            raise ValueError("caches must not be empty")
        used = [c.slice(0, c.length) for c in caches]
        total = sum(c.length for c in used)
        cat = KVCache([torch.cat(ks, dim=2) for ks in zip(*[c.keys for c in used])],
                      [torch.cat(vs, dim=2) for vs in zip(*[c.values for c in used])],
                      torch.cat([c.positions for c in used], dim=1), torch.cat([c.valid for c in used], dim=1),
                      total, caches[0].rope_theta)
        if capacity is not None:
            cat.ensure_capacity(capacity)
        return cat

    def select(self, index: torch.Tensor) -> "KVCache":
        """The cache of the sequences ``index`` (e.g. to repeat one prompt's cache for a batch)."""
        index = torch.as_tensor(index, dtype=torch.long)
        return KVCache([k[index] for k in self.keys], [v[index] for v in self.values],
                       self.positions[index], self.valid[index], self.length, self.rope_theta)

    def clone(self) -> "KVCache":
        """A deep copy."""
        return self.select(torch.arange(self.batch))

    def next_positions(self) -> torch.Tensor:
        """(batch,) the position after each sequence's last valid entry."""
        if self.length == 0:
            return torch.zeros(self.batch, dtype=torch.long, device=self.positions.device)
        p = torch.where(self.valid[:, : self.length], self.positions[:, : self.length], -1)
        return p.max(dim=1).values + 1


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE and an optional KV cache."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * hd, cfg.d_model, bias=False)

    def forward(self, x, cos, sin, cache: KVCache | None, slots, mask):
        b, s, _ = x.shape
        cfg, hd = self.cfg, self.cfg.head_dim
        q = self.q_proj(x).view(b, s, cfg.n_heads, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, cfg.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, cfg.n_kv_heads, hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            cache.write(self.layer, slots, k, v)
            k, v = cache.read(self.layer)
        rep = cfg.n_heads // cfg.n_kv_heads
        if mask is None:  # plain causal self-attention, no cache
            out = F.scaled_dot_product_attention(q, k, v, is_causal=s > 1, enable_gqa=rep > 1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=rep > 1)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, cfg.n_heads * hd))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))`` (Shazeer 2020)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm transformer block."""

    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache, slots, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, slots, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class TransformerLM(nn.Module):
    """The embedded causal LM (Llama layout: ``embed_tokens``, ``layers``, ``norm``, ``lm_head``)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList([Block(config, i) for i in range(config.n_layers)])
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.hooks: list = []  # callables(hidden (b, s, d)) -> None, called on the final hidden states
        self.reset_parameters()

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        """Normal(0, 0.02) weights, residual outputs scaled by ``1/sqrt(2 n_layers)`` (GPT-2)."""
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if "norm" in name else nn.init.zeros_(p)
                continue
            s = std / math.sqrt(2 * self.config.n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=generator) * s)

    def new_cache(self, batch: int, capacity: int | None = None, dtype=None) -> KVCache:
        """An empty ``KVCache`` for this model (default capacity: the context length)."""
        dtype = dtype or self.embed_tokens.weight.dtype
        return KVCache.empty(self.config, batch, capacity or self.config.max_seq_len, dtype=dtype,
                             device=self.embed_tokens.weight.device)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None, *,
                cache: KVCache | None = None, slots: torch.Tensor | None = None,
                valid: torch.Tensor | None = None, return_hidden: bool = False,
                last_only: bool = False) -> torch.Tensor:
        """Logits (batch, seq, vocab) of ``input_ids`` (batch, seq).

        Args:
            input_ids: token ids.
            positions: (batch, seq) or (seq,) position ids; default: continue after the cache's
                last valid entry (``0 .. seq-1`` without a cache).
            cache: a ``KVCache``; the tokens' keys/values are written to it at ``slots`` and the
                tokens attend to every valid cache entry at a position <= theirs.
            slots: (seq,) cache rows to write; default: append after ``cache.length``. Rows below
                ``cache.length`` recompute those entries in place (EPIC's per-token recompute).
            valid: (batch, seq) bool, False marks padding (never attended to).
            return_hidden: return the final hidden states (after the last norm) instead.
            last_only: only for the last position (logits or hidden of shape (batch, 1, ...)).
        """
        b, s = input_ids.shape
        device = input_ids.device
        if positions is None:
            start = cache.next_positions()[:, None] if cache is not None else torch.zeros(b, 1, dtype=torch.long, device=device)
            positions = start + torch.arange(s, device=device)[None]
        positions = torch.as_tensor(positions, dtype=torch.long, device=device)
        if positions.dim() == 1:
            positions = positions[None].expand(b, -1)
        if positions.shape != (b, s):
            raise ValueError(f"positions must have shape {(b, s)}, got {tuple(positions.shape)}")
        x = self.embed_tokens(input_ids)
        cos, sin = rope_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        mask = None
        if cache is not None:
            if slots is None:
                slots = torch.arange(cache.length, cache.length + s, device=device)
            slots = torch.as_tensor(slots, dtype=torch.long, device=device)
            if slots.shape != (s,):
                raise ValueError(f"slots must have shape ({s},), got {tuple(slots.shape)}")
            end = int(slots.max()) + 1
            fresh_prefill = (cache.length == 0 and valid is None and s > 1 and end == s
                             and bool((slots == torch.arange(s, device=device)).all())
                             and bool((positions[:, 1:] > positions[:, :-1]).all()))
            cache.ensure_capacity(end)
            cache.positions[:, slots] = positions
            cache.valid[:, slots] = True if valid is None else valid.to(torch.bool)
            cache.length = max(cache.length, end)
            kpos, kval = cache.positions[:, : cache.length], cache.valid[:, : cache.length]
            # query i sees key j iff j is valid and pos_j <= pos_i (for ties, only rows up to its own)
            if s == 1 and valid is None and int(slots[0]) == cache.length - 1 and bool(kval.all()) \
                    and bool((kpos.max(dim=1).values <= positions[:, 0]).all()):
                mask = None  # one new token after a fully valid cache: it sees every entry
            elif fresh_prefill:
                mask = None  # an empty cache filled in order: plain causal attention (SDPA's is_causal)
            else:
                mask = self._cache_mask(kpos, kval, positions, slots, valid, cache.length)
        elif valid is not None:
            causal = torch.ones(s, s, dtype=torch.bool, device=device).tril()
            mask = (causal[None] & valid[:, None, :].to(torch.bool)) | torch.eye(s, dtype=torch.bool, device=device)[None]
            mask = mask[:, None]
        for layer in self.layers:
            x = layer(x, cos, sin, cache, slots, mask)
        if last_only:
            x = x[:, -1:]
        x = self.norm(x)
        for hook in self.hooks:
            hook(x)
        if return_hidden:
            return x
        return self.lm_head(x)

    @staticmethod
    def _cache_mask(kpos, kval, positions, slots, valid, length):
        """(b, 1, s, T) bool: valid keys at positions <= the query's (ties: rows up to its own)."""
        device = kpos.device
        s = positions.shape[1]
        mask = kval[:, None, :] & (kpos[:, None, :] <= positions[:, :, None])
        same = kpos[:, None, :] == positions[:, :, None]
        later = torch.arange(length, device=device)[None, None, :] > slots[None, :, None]
        mask = (mask & ~(same & later))[:, None]  # (b, 1, s, T)
        # a padded query attends nowhere otherwise; let it see itself to avoid NaN
        if valid is not None:
            own = torch.zeros_like(mask)
            own[:, 0, torch.arange(s, device=device), slots] = True
            mask = mask | own
        return mask

    def num_parameters(self) -> int:
        """Number of distinct parameters."""
        return sum(p.numel() for p in {id(p): p for p in self.parameters()}.values())
