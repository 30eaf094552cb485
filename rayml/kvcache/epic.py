"""EPIC: position-independent context caching with LegoLink, and its baselines, on the embedded LM.

Paper: Hu et al., "EPIC: Efficient Position-Independent Caching for Serving Large Language
Models", ICML 2025 (arXiv 2410.15332; authors' demo: DerekHJH/epic, a vLLM fork).

Position-independent caching (PIC) splits a prompt into immutable chunks (a system prompt,
documents) and a new query. Each chunk is *compiled* once, alone, from position 0
(``precompute_chunk``); at request time the cached chunks are *linked* in the request's order
(``link``: concatenated, keys re-rotated to their new positions) and a few tokens are recomputed
against the linked cache before decoding. The recompute policies (``prefill``'s ``method``):

* ``"full"``: every token recomputed (the reference; no reuse).
* ``"prefix"``: exact-prefix caching (``PrefixCache``): reuse the cache of the longest
  chunk-aligned prefix of token ids seen before, compute the rest normally. Exact, but hits only
  when the request starts with the same chunks in the same order.
* ``"naive"``: link and reuse every chunk's KV untouched; only the query is computed
  (LegoLink with ``k = 0``).
* ``"legolink"``: LegoLink (paper Sec. 4, the algorithm "LegoLink"): recompute the first ``k``
  tokens of every chunk except the first (compiled alone, they act as spurious attention sinks)
  and the whole query; every recomputed token runs through all layers, attends to all linked KV
  at positions <= its own, and overwrites its KV rows (the paper's recompute: embed the selected
  tokens, compute their Q/K/V per layer, expand K/V with the cached rows of the unselected
  tokens, attend, write back). Cost O(k * chunks) tokens.
* ``"random"`` / ``"last"``: equal-budget controls of LegoLink (not in the paper): recompute ``k``
  tokens of every chunk after the first, as LegoLink does, but ``k`` drawn at random in each chunk
  (``LinkSpec.seed``) or the chunk's ``k`` last tokens, plus the query. Same cost as LegoLink-k;
  if the first tokens matter because they are spurious attention sinks, LegoLink beats both.
* ``"cacheblend"``: CacheBlend-r (Yao et al., EuroSys 2025, as run by the EPIC authors): layers
  below ``check_layer`` are recomputed for all tokens; at ``check_layer`` every token's new value
  vectors are compared with the linked ones, the ``r`` share of cached tokens with the largest
  ``sum (V_new - V_old)^2`` (plus the query) is kept, and only those continue through the
  remaining layers, overwriting their KV.

Keys are cached AFTER RoPE (the substrate ``KVCache`` layout) and moved with
``KVCache.rerotate``: RoPE is a rotation per frequency pair, ``R(p') = R(p' - p) R(p)``, so
rotating a key compiled at ``p`` by ``p' - p`` equals the key at ``p'`` up to float rounding (the
tests check it against keys computed at the target positions). The paper caches keys before RoPE;
the two are equivalent for linking; post-RoPE storage lets the substrate's forward be reused
unchanged.

Chunk layout. The first chunk is ``[BOS]`` (an empty system prompt: a true prefix, reused, never
recomputed), so LegoLink recomputes the first ``k`` tokens of every document, as in the authors'
demo, where the system prompt is the first chunk and every document after it is recomputed.
``chunk_bos=False`` (default): documents are compiled WITHOUT a BOS token (their first token is
then their attention sink), and the linked prompt ``[BOS] + doc_1 + ... + query`` is exactly the
prompt the model was trained on, so ``full`` is the model's own answer. ``chunk_bos=True``: the
authors' demo layout, every document is compiled with its own BOS (kept in the cache), and
``full`` recomputes that same token sequence (several BOS), as their full-recompute baseline does.
A third layout compiles each document after a BOS and drops that row at link time
(``precompute_chunk(model, [bos] + doc, drop=1)``, passed as ``chunks`` with ``chunk_bos=False``):
the linked tokens are the model's own prompt, but every document token's KV was computed after a
real sink (``rayml.experiments.epic`` runs all three and measures the sinks, ``epic_sink``).
Assumed: the query (new content, never cached) is always computed by every method; ``naive``
is LegoLink with ``k = 0`` (the authors' naive recomputes only the last token, which exists in
their setup as part of a cached query chunk).
Assumed (CacheBlend): ``check_layer = 1`` (layer 0 fully recomputed), the selection is
``floor(r * n_cached)`` cached tokens plus the query tokens, and at the check layer every
token's new KV is written (as in the authors' code, where the check layer keeps the fresh KV).

Examples:
    >>> model = TransformerLM(ModelConfig(vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64))
    >>> docs = [[5, 6, 7, 8], [9, 10, 11]]
    >>> chunks = [precompute_chunk(model, d) for d in docs]          # compile once, cache
    >>> out = answer(model, docs, [12, 13], chunks=chunks, method="legolink", k=2, bos_id=1,
    ...              max_new_tokens=3)
    >>> len(out.tokens) <= 3
    True
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from rayml.llm.model import KVCache, ModelConfig, TransformerLM, apply_rope  # noqa: F401 (ModelConfig: doctest)

__all__ = ["METHODS", "LinkSpec", "LinkResult", "Answer", "precompute_chunk", "link", "prefill", "answer",
           "PrefixCache", "cache_to_arrays", "cache_from_arrays", "model_fingerprint", "chunk_key",
           "first_token_metrics", "first_tokens_agreement", "method_name"]

METHODS = ("full", "prefix", "naive", "legolink", "cacheblend", "random", "last")


def _check_ids(name: str, ids) -> list[int]:
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise ValueError(f"{name} must be a sequence of token ids, got {type(ids).__name__}")
    out = [int(i) for i in ids]
    if not out:
        raise ValueError(f"{name} must not be empty")
    return out


@dataclass(frozen=True)
class LinkSpec:
    """What to recompute when linking (validated).

    Attributes:
        method: one of ``METHODS``.
        k: LegoLink's number of initial tokens recomputed per chunk (after the first); ``>= 0``.
        r: CacheBlend's share of cached tokens recomputed, in ``[0, 1]``.
        check_layer: CacheBlend's selection layer (``0 <= check_layer < n_layers``, checked at use).
        seed: the draw of the ``"random"`` control's recomputed tokens.
    """

    method: str = "legolink"
    k: int = 16
    r: float = 0.15
    check_layer: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValueError(f"k must be an integer >= 0, got {self.k!r}")
        if isinstance(self.r, bool) or not isinstance(self.r, (int, float)) or not 0.0 <= self.r <= 1.0:
            raise ValueError(f"r must be a number in [0, 1], got {self.r!r}")
        if isinstance(self.check_layer, bool) or not isinstance(self.check_layer, int) or self.check_layer < 0:
            raise ValueError(f"check_layer must be an integer >= 0, got {self.check_layer!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


def method_name(spec: LinkSpec) -> str:
    """A short label: ``full``, ``prefix``, ``naive``, ``legolink-k4``, ``cacheblend-r15``, ``random-k4``,
    ``last-k4``."""
    if spec.method == "legolink":
        return f"legolink-k{spec.k}"
    if spec.method == "cacheblend":
        return f"cacheblend-r{round(100 * spec.r)}"
    if spec.method in ("random", "last"):
        return f"{spec.method}-k{spec.k}"
    return spec.method


# ------------------------------------------------------------------------------------------
# compile (chunk precompute)


@torch.no_grad()
def precompute_chunk(model: TransformerLM, ids: Sequence[int], *, drop: int = 0) -> KVCache:
    """Compile one chunk: prefill ``ids`` alone from position 0 (EPIC's compile step).

    Returns a batch-1 ``KVCache`` of exactly ``len(ids)`` rows at positions ``0 .. len-1`` (keys
    after RoPE, values), ready to be stored and linked anywhere. ``drop > 0`` compiles ``ids`` but
    keeps only rows ``drop ..`` (e.g. a chunk compiled after a BOS that is dropped at link time:
    its tokens saw the BOS, the linked prompt does not hold it; ``link`` re-rotates the kept rows).
    """
    ids = _check_ids("ids", ids)
    if isinstance(drop, bool) or not isinstance(drop, int) or not 0 <= drop < len(ids):
        raise ValueError(f"drop must be an integer in [0, len(ids)), got {drop!r}")
    if len(ids) > model.config.max_seq_len:
        raise ValueError(f"ids has {len(ids)} tokens, more than the context length {model.config.max_seq_len}")
    cache = model.new_cache(1, capacity=len(ids))
    model(torch.as_tensor([ids], dtype=torch.long, device=model.embed_tokens.weight.device),
          torch.arange(len(ids)), cache=cache, last_only=True)
    return cache.slice(drop, len(ids)) if drop else cache


def cache_to_arrays(cache: KVCache) -> dict:
    """A batch-1 cache as plain numpy arrays (for the object store): ``keys``/``values`` of shape
    (n_layers, n_kv_heads, length, head_dim), ``positions`` (length,)."""
    if cache.batch != 1:
        raise ValueError(f"cache must hold one sequence, got {cache.batch}")
    n = cache.length
    return {
        "keys": np.stack([k[0, :, :n].detach().cpu().numpy() for k in cache.keys]),
        "values": np.stack([v[0, :, :n].detach().cpu().numpy() for v in cache.values]),
        "positions": cache.positions[0, :n].cpu().numpy().copy(),
        "rope_theta": float(cache.rope_theta),
    }


def cache_from_arrays(arrays: dict) -> KVCache:
    """Inverse of ``cache_to_arrays`` (copies, so read-only object-store buffers are fine)."""
    keys, values = np.asarray(arrays["keys"]), np.asarray(arrays["values"])
    if keys.ndim != 4 or keys.shape != values.shape:
        raise ValueError(f"keys and values must have the same 4-d shape, got {keys.shape}, {values.shape}")
    n = keys.shape[2]
    pos = torch.as_tensor(np.array(arrays["positions"]), dtype=torch.long)[None]
    return KVCache([torch.tensor(keys[layer])[None] for layer in range(keys.shape[0])],
                   [torch.tensor(values[layer])[None] for layer in range(values.shape[0])],
                   pos, torch.ones(1, n, dtype=torch.bool), n, float(arrays["rope_theta"]))


def model_fingerprint(model: TransformerLM) -> str:
    """SHA-256 (16 hex digits) of the model's config and parameters: the model part of a cache key."""
    h = hashlib.sha256(repr(sorted(model.config.to_dict().items())).encode())
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def chunk_key(model_id: str, ids: Sequence[int]) -> str:
    """The store key of a chunk: SHA-256 of the model id and the chunk's token ids."""
    h = hashlib.sha256(str(model_id).encode() + b"\0")
    h.update(np.asarray(list(ids), dtype=np.int64).tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------
# link


def link(chunks: Sequence[KVCache], *, capacity: int | None = None) -> tuple[KVCache, list[int]]:
    """Concatenate compiled chunks in order and re-rotate their keys to consecutive positions.

    Returns the linked cache (positions ``0 .. total-1``) and the start row of every chunk.
    """
    if not chunks:
        raise ValueError("chunks must not be empty")
    starts, total = [], 0
    for c in chunks:
        if c.batch != 1:
            raise ValueError("every chunk cache must hold one sequence")
        starts.append(total)
        total += c.length
    linked = KVCache.concat(list(chunks), capacity=capacity)
    linked.rerotate(torch.arange(total))
    return linked, starts


@dataclass
class LinkResult:
    """What ``prefill`` produced.

    Attributes:
        logits: (vocab,) next-token logits after the last query token.
        cache: the cache of the whole prompt (for decoding).
        recomputed: number of prompt tokens run through the model at request time (for
            CacheBlend: counted at the layers after the check layer, plus the full first layers
            pro rata).
        n_prompt: prompt length.
    """

    logits: torch.Tensor
    cache: KVCache
    recomputed: float
    n_prompt: int


def _layout(chunk_ids: Sequence[Sequence[int]], query: Sequence[int], bos_id: int | None, chunk_bos: bool):
    """The linked prompt's chunks: the ``[BOS]`` prefix chunk (when ``bos_id`` is given), then the
    documents (each with its own BOS when ``chunk_bos``)."""
    chunks = [_check_ids(f"chunk_ids[{i}]", c) for i, c in enumerate(chunk_ids)]
    query = _check_ids("query", query)
    if chunk_bos:
        if bos_id is None:
            raise ValueError("bos_id is required when chunk_bos is True")
        chunks = [[int(bos_id)] + c for c in chunks]
    if bos_id is not None:
        chunks = [[int(bos_id)]] + chunks
    if not chunks:
        raise ValueError("chunk_ids must not be empty")
    return chunks, query


class PrefixCache:
    """Exact-prefix caching at chunk granularity (the baseline of vLLM / SGLang style systems).

    ``lookup(chunks)`` returns the cache of the longest stored chunk-aligned prefix of token ids
    (a copy) and how many chunks it covers; ``store(chunks, cache)`` keeps the cache of every
    chunk-aligned prefix of a computed prompt. LRU over ``max_entries`` prefixes.
    """

    def __init__(self, max_entries: int = 256):
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be an integer >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self._entries: OrderedDict = OrderedDict()
        self.hits = 0
        self.lookups = 0

    def copy(self) -> "PrefixCache":
        """A shallow copy (same cached tensors, independent LRU order and entries)."""
        other = PrefixCache(self.max_entries)
        other._entries = OrderedDict(self._entries)
        return other

    @staticmethod
    def _key(chunks) -> tuple:
        return tuple(tuple(c) for c in chunks)

    def lookup(self, chunks: Sequence[Sequence[int]]) -> tuple[KVCache | None, int]:
        """(cache copy, number of chunks covered) of the longest cached prefix, or (None, 0)."""
        self.lookups += 1
        for n in range(len(chunks), 0, -1):
            key = self._key(chunks[:n])
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                stored, end = self._entries[key]
                return stored.slice(0, end), n
        return None, 0

    def store(self, chunks: Sequence[Sequence[int]], cache: KVCache) -> None:
        """Keep ``cache`` (one copy of its rows; consecutive rows, chunk by chunk) for every
        chunk-aligned prefix of ``chunks``."""
        stored = cache.slice(0, min(cache.length, sum(len(c) for c in chunks)))
        end = 0
        for n in range(1, len(chunks) + 1):
            end += len(chunks[n - 1])
            key = self._key(chunks[:n])
            if key not in self._entries:
                self._entries[key] = (stored, end)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


@torch.no_grad()
def prefill(model: TransformerLM, chunk_ids: Sequence[Sequence[int]], query: Sequence[int], *,
            spec: LinkSpec = LinkSpec(), chunks: Sequence[KVCache] | None = None, bos_id: int | None = None,
            chunk_bos: bool = False, prefix_cache: PrefixCache | None = None,
            extra_capacity: int = 0) -> LinkResult:
    """Prefill a request ``chunks..., query`` with one of the methods (module docstring).

    Args:
        model: the embedded LM (eval mode).
        chunk_ids: the immutable chunks' token ids, in request order (without BOS).
        query: the new tokens after them.
        spec: the method and its parameters.
        chunks: the compiled caches of ``chunk_ids`` (``precompute_chunk`` of each document's ids
            as laid out: with its BOS when ``chunk_bos``), without the ``[BOS]`` prefix chunk
            (compiled here, one token); all compiled here when None. Unused by ``full`` and
            ``prefix``.
        bos_id: the BOS token: ``[BOS]`` is the first chunk (None: no BOS anywhere, the first
            document is then the reused prefix).
        chunk_bos: compile every chunk with its own BOS (the authors' layout).
        prefix_cache: the store of ``prefix`` (a fresh one when None: no hit).
        extra_capacity: rows to reserve for decoding.
    """
    layout, query = _layout(chunk_ids, query, bos_id, chunk_bos)
    flat = [t for c in layout for t in c]
    n_ctx, n = len(flat), len(flat) + len(query)
    cfg = model.config
    if n > cfg.max_seq_len:
        raise ValueError(f"the prompt has {n} tokens, more than the context length {cfg.max_seq_len}")
    device = model.embed_tokens.weight.device
    all_ids = torch.as_tensor([flat + query], dtype=torch.long, device=device)
    capacity = n + max(0, int(extra_capacity))

    if spec.method in ("full", "prefix"):
        cache, done = None, 0
        if spec.method == "prefix":
            prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
            cache, n_hit = prefix_cache.lookup(layout)
            done = sum(len(c) for c in layout[:n_hit])
        if cache is None:
            cache = model.new_cache(1, capacity=capacity)
            logits = _causal_prefill(model, all_ids, cache)
        else:
            cache.ensure_capacity(capacity)
            logits = model(all_ids[:, done:], torch.arange(done, n), cache=cache, last_only=True)[0, -1]
        if spec.method == "prefix":
            prefix_cache.store(layout, cache)
        return LinkResult(logits, cache, float(n - done), n)

    # position-independent methods: link compiled chunks
    if chunks is None:
        chunks = [precompute_chunk(model, c) for c in layout]
    elif bos_id is None:
        chunks = list(chunks)
    else:
        chunks = [precompute_chunk(model, layout[0])] + list(chunks)  # the [BOS] prefix chunk
    if len(chunks) != len(layout) or any(c.length != len(ids) for c, ids in zip(chunks, layout)):
        raise ValueError("chunks must be the compiled caches of chunk_ids (one per chunk, same lengths)")
    linked, starts = link(chunks, capacity=capacity)
    q_rows = torch.arange(n_ctx, n, device=device)

    if spec.method in ("naive", "legolink", "random", "last"):
        rows = _recompute_rows(spec, starts[1:], [len(c) for c in layout[1:]])
        sel = torch.cat([torch.as_tensor(rows, dtype=torch.long, device=device), q_rows])
        logits = model(all_ids[:, sel], sel, cache=linked, slots=sel)[0, -1]
        return LinkResult(logits, linked, float(sel.numel()), n)

    return _cacheblend(model, linked, all_ids, n_ctx, spec)


def _recompute_rows(spec: LinkSpec, starts: Sequence[int], lengths: Sequence[int]) -> list[int]:
    """The cached rows LegoLink (or an equal-budget control) recomputes: ``min(k, len)`` rows of every
    chunk given (the chunks after the first), the first ones, the last ones or a random draw."""
    k = 0 if spec.method == "naive" else spec.k
    rng = np.random.default_rng(spec.seed) if spec.method == "random" else None
    rows = []
    for s, n in zip(starts, lengths):
        m = min(k, n)
        if spec.method == "last":
            rows += range(s + n - m, s + n)
        elif rng is not None:
            rows += sorted(int(s + i) for i in rng.choice(n, m, replace=False))
        else:
            rows += range(s, s + m)
    return rows


def _causal_prefill(model: TransformerLM, ids: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """A cold prefill of ``ids`` into an empty ``cache`` with plain causal attention (SDPA's
    ``is_causal`` path, no explicit mask: the fastest full prefill of the substrate, the same
    numbers as ``model(ids, cache=cache)``); returns the last position's logits."""
    n = ids.shape[1]
    rows = torch.arange(n, device=ids.device)
    cache.ensure_capacity(n)
    cache.positions[:, :n] = rows
    cache.valid[:, :n] = True
    cache.length = n
    x = model.embed_tokens(ids)
    cos, sin = _rope(model, rows, x.dtype)
    for layer in model.layers:
        x = layer(x, cos, sin, cache, rows, None)  # queries == keys == rows 0..n-1: causal
    return model.lm_head(model.norm(x[:, -1:]))[0, -1]


def _cacheblend(model: TransformerLM, cache: KVCache, all_ids: torch.Tensor, n_ctx: int, spec: LinkSpec) -> LinkResult:
    """CacheBlend-r on a linked cache (module docstring): full first layers, selection by value
    deviation at ``check_layer``, the selected tokens through the remaining layers."""
    cfg = model.config
    if spec.check_layer >= cfg.n_layers:
        raise ValueError(f"check_layer must be < n_layers ({cfg.n_layers}), got {spec.check_layer}")
    device = all_ids.device
    n = all_ids.shape[1]
    rows = torch.arange(n, device=device)
    cache.ensure_capacity(n)
    cache.positions[:, n_ctx:n] = rows[n_ctx:]
    cache.valid[:, n_ctx:n] = True
    cache.length = max(cache.length, n)
    x = model.embed_tokens(all_ids)
    cos, sin = _rope(model, rows, x.dtype)

    def mask_for(sel):
        kpos, kval = cache.positions[:, : cache.length], cache.valid[:, : cache.length]
        return TransformerLM._cache_mask(kpos, kval, sel[None], sel, None, cache.length)

    full_mask = mask_for(rows)
    for layer in model.layers[: spec.check_layer]:
        x = layer(x, cos, sin, cache, rows, full_mask)
    block = model.layers[spec.check_layer]
    attn = block.self_attn
    h = block.input_layernorm(x)
    hd = cfg.head_dim
    k_new = attn.k_proj(h).view(1, n, cfg.n_kv_heads, hd).transpose(1, 2)
    v_new = attn.v_proj(h).view(1, n, cfg.n_kv_heads, hd).transpose(1, 2)
    v_old = cache.values[spec.check_layer][:, :, :n_ctx]
    dev = ((v_new[:, :, :n_ctx] - v_old) ** 2).sum(dim=(0, 1, 3))  # (n_ctx,)
    n_pick = int(math.floor(spec.r * n_ctx))
    top = torch.topk(dev, n_pick).indices.sort().values if n_pick > 0 else rows[:0]
    sel = torch.cat([top, rows[n_ctx:]])
    cache.write(spec.check_layer, rows, apply_rope(k_new, cos, sin), v_new)  # fresh KV of all tokens
    x, cos_s, sin_s = x[:, sel], cos[:, sel], sin[:, sel]
    sel_mask = mask_for(sel)
    for layer in model.layers[spec.check_layer:]:
        x = layer(x, cos_s, sin_s, cache, sel, sel_mask)
    logits = model.lm_head(model.norm(x[:, -1:]))[0, -1]
    recomputed = (spec.check_layer * n + (cfg.n_layers - spec.check_layer) * sel.numel()) / cfg.n_layers
    return LinkResult(logits, cache, float(recomputed), n)


def _rope(model: TransformerLM, positions: torch.Tensor, dtype):
    from rayml.llm.model import rope_cos_sin

    return rope_cos_sin(positions[None], model.config.head_dim, model.config.rope_theta, dtype)


# ------------------------------------------------------------------------------------------
# decode and compare


@dataclass
class Answer:
    """A request's outcome: ``tokens`` generated greedily (stopped before EOS), the first
    token's ``logits``, the prompt length and how many prompt tokens were recomputed."""

    tokens: list[int]
    logits: torch.Tensor
    n_prompt: int
    recomputed: float
    extras: dict = field(default_factory=dict)


@torch.no_grad()
def answer(model: TransformerLM, chunk_ids: Sequence[Sequence[int]], query: Sequence[int], *,
           method: str = "legolink", k: int = 16, r: float = 0.15, check_layer: int = 1, seed: int = 0,
           chunks: Sequence[KVCache] | None = None, bos_id: int | None = None, eos_id: int | None = None,
           chunk_bos: bool = False, prefix_cache: PrefixCache | None = None, max_new_tokens: int = 8) -> Answer:
    """Prefill with ``method`` (``prefill``) then decode greedily with the KV cache.

    Decoding appends each generated token after the prompt (it attends to every row, the
    recomputed ones included), stopping at ``eos_id`` or after ``max_new_tokens``.
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    spec = LinkSpec(method, k, r, check_layer, seed)
    res = prefill(model, chunk_ids, query, spec=spec, chunks=chunks, bos_id=bos_id, chunk_bos=chunk_bos,
                  prefix_cache=prefix_cache, extra_capacity=max_new_tokens)
    if res.n_prompt + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"prompt ({res.n_prompt} tokens) plus max_new_tokens ({max_new_tokens}) exceeds the "
                         f"context length {model.config.max_seq_len}")
    cache, logits, pos = res.cache, res.logits, res.n_prompt
    device = model.embed_tokens.weight.device
    out: list[int] = []
    for step in range(max_new_tokens):
        tok = int(logits.argmax())
        if eos_id is not None and tok == eos_id:
            break
        out.append(tok)
        if step + 1 < max_new_tokens:
            logits = model(torch.tensor([[tok]], device=device), torch.tensor([pos], device=device), cache=cache)[0, -1]
            pos += 1
    return Answer(out, res.logits, res.n_prompt, res.recomputed)


def first_tokens_agreement(reference: Sequence[int], other: Sequence[int]) -> float:
    """The share of the reference's generated tokens that ``other`` reproduces before its first
    difference (1.0: the same greedy answer; an empty reference counts as 1.0 when other is empty)."""
    reference, other = list(reference), list(other)
    if not reference:
        return float(not other)
    n = 0
    for a, b in zip(reference, other):
        if a != b:
            break
        n += 1
    return n / len(reference)


def first_token_metrics(reference: torch.Tensor, other: torch.Tensor) -> dict:
    """Top-1 agreement and ``KL(p_reference || p_other)`` (nats) of two next-token logit vectors."""
    lp = torch.log_softmax(reference.double(), -1)
    lq = torch.log_softmax(other.double(), -1)
    kl = float((lp.exp() * (lp - lq)).sum())
    return {"top1_agreement": float(int(reference.argmax()) == int(other.argmax())), "kl": max(kl, 0.0)}
