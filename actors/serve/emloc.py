"""Ray Serve app: EMLoC compressed demonstration memories, cached in a Ray KV store and reused.

``serve run rayml.actors.serve.emloc:app`` serves the shipped ``base`` checkpoint. EMLoC (Ma et al.,
ICML 2025; ``rayml.kvcache.emloc``) condenses a long many-shot context once per task into a pruned KV
memory (chunk-wise compression, layer-wise adaptive pruning under a Jensen-Shannon budget) that
every later query of the task reuses. Two routes (JSON bodies, POST):

* ``<route>/memories`` ``{"demonstrations": [{"prompt": "[bako:", "answer": "123", "end": "]\\n"},
  ...], "delta": 0.005, "pool": 5, "chunk_size": 4}`` -> ``{"id": "<64 hex>", "n_tokens",
  "kept_fraction", "tokens_per_layer", "cache": {...}}``: the memory of these demonstrations
  under these settings, compressed (``rayml.kvcache.emloc.compress``) on a store miss, fetched
  from the store on a hit. Its id is its store key (SHA-256 of the model fingerprint, the
  demonstrations' token ids and the settings: ``memory_key``), so the same task posted again,
  by any client to any replica, is a cache hit.
* ``<route>/ask`` ``{"memory": "<id>", "queries": ["?bako:", ...], "max_tokens": 8}`` ->
  ``{"answers": [...], "cache": {...}}``: greedy answers of each query on the stored memory
  (``rayml.kvcache.emloc.answer``; queries run at positions after the whole context).

The memories live in the app's own store, ``EmlocKVStore``: a Serve deployment of EPIC's
``rayml.actors.kvstore.KVStore`` (byte-budgeted LRU; objects owned by the store), bound into this
app the way the EPIC app binds its store, so every replica reuses what any replica compressed.
A memory is ragged over layers (each layer keeps its own count), so the store holds it as plain
data (``check_plain_payload``), not as an EPIC chunk; a replica uses a fetched payload only if it
has its model's layers, heads and head size (else it is a miss). The store is only a cache: an
``/ask`` for an evicted or lost memory is a 404 that says to post the demonstrations again.

Errors (a FastAPI ingress; OpenAPI at ``/openapi.json``): a body that fails its request model
(``MemoryRequest``, ``AskRequest``) -> 422 naming the field; demonstrations or an answer that
encode to no tokens -> 400; a context, or a query plus ``max_tokens`` after it, over the context
length, or a body over 1 MiB -> 413; an unknown memory id -> 404; other methods than POST -> 405.
Work runs off the event loop; the replica stays up.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import threading
from typing import Optional

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator
from ray import serve

from rayml.actors.kvstore import KVStore
from rayml.actors.serve.generate import scalar_values
from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api

__all__ = ["EmlocServer", "EmlocKVStore", "app", "api", "build", "Demonstration", "MemoryRequest", "AskRequest",
           "HTTPError", "MAX_TOKENS", "MAX_DEMOS", "MAX_QUERIES"]

MAX_TOKENS = 256
MAX_DEMOS = 1024
MAX_QUERIES = 64
MAX_BODY = 1 << 20
ID_PATTERN = r"^[0-9a-f]{64}$"


def _text(v: str, field: str) -> str:
    return scalar_values(v, field)


class Demonstration(BaseModel):
    """One demonstration: ``prompt + answer + end`` (EMLoC's answer rows: the last prompt token,
    the answer, the first token of ``end``)."""

    model_config = ConfigDict(extra="forbid")
    prompt: StrictStr = ""
    answer: StrictStr = Field(min_length=1)
    end: StrictStr = ""

    @field_validator("prompt", "answer", "end")
    @classmethod
    def _scalars(cls, v, info):
        return _text(v, info.field_name)


class MemoryRequest(BaseModel):
    """Demonstrations to compress (or fetch compressed) and EMLoC's settings."""

    model_config = ConfigDict(extra="forbid")
    demonstrations: list[Demonstration] = Field(min_length=1, max_length=MAX_DEMOS)
    delta: float = Field(0.005, ge=0.0, le=1.0, allow_inf_nan=False, description="JS budget per layer decision")
    pool: StrictInt = Field(5, ge=1, le=63, description="importance pooling width (odd)")
    chunk_size: StrictInt = Field(4, ge=1, le=256, description="demonstrations per chunk")

    @field_validator("pool")
    @classmethod
    def _odd(cls, v):
        if v % 2 == 0:
            raise ValueError("must be odd")
        return v


class AskRequest(BaseModel):
    """Queries answered on a stored memory."""

    model_config = ConfigDict(extra="forbid")
    memory: StrictStr = Field(pattern=ID_PATTERN, description="an id returned by /memories")
    queries: list[StrictStr] = Field(min_length=1, max_length=MAX_QUERIES)
    max_tokens: StrictInt = Field(8, ge=1, le=MAX_TOKENS)

    @field_validator("queries")
    @classmethod
    def _queries(cls, v):
        for q in v:
            if not q:
                raise ValueError("queries must not be empty strings")
            _text(q, "queries")
        return v


class HTTPError(ValueError):
    """A request error with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


api = make_api("rayml emloc: compressed many-shot memories (EMLoC) cached in a Ray KV store",
               max_body_bytes=MAX_BODY)


@serve.deployment(num_replicas=1, max_ongoing_requests=256, ray_actor_options={"num_cpus": 0},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
class EmlocKVStore(KVStore):
    """The app's memory store: ``rayml.actors.kvstore.KVStore`` as a Serve deployment with no route
    (reached through the handle the app binds into ``EmlocServer``). Serve restarts a crashed
    replica, empty."""


@serve.deployment(max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class EmlocServer:
    """The deployment: tokenization, EMLoC compression and answering, and the store client.

    Args:
        checkpoint: a checkpoint name (shipped / cached) or directory.
        store: the handle of the app's ``EmlocKVStore`` deployment (``build`` binds it), or None
            for no cache (every ``/ask`` is then a 404).
    """

    def __init__(self, checkpoint: str = "base", store=None):
        import torch

        import rayml.llm
        from rayml.actors.kvstore import KVStoreClient
        from rayml.kvcache.epic import model_fingerprint

        torch.set_num_threads(1)
        self.lm = rayml.llm.pretrained(checkpoint, train_if_missing=False)
        self.model_id = model_fingerprint(self.lm.model)
        self.client = KVStoreClient(store, self.model_id)
        self.lock = threading.Lock()  # the model and the client's counters

    # -- blocking work (run in a thread) --
    def _demos(self, req: dict) -> list:
        from rayml.kvcache.emloc import Demo

        tok = self.lm.tokenizer
        demos = []
        for i, d in enumerate(req["demonstrations"]):
            ans = tok.encode(d["answer"])
            if not ans:
                raise HTTPError(400, f"'demonstrations.{i}.answer' encodes to no tokens")
            demos.append(Demo(tok.encode(d["prompt"]) if d["prompt"] else [], ans,
                              tok.encode(d["end"]) if d["end"] else []))
        n = 1 + sum(len(d.ids) for d in demos)
        if n >= self.lm.max_seq_len:
            raise HTTPError(413, f"the demonstrations span {n} tokens; the context length is {self.lm.max_seq_len} "
                                 f"(and queries go after them)")
        return demos

    def _valid(self, payload) -> bool:
        cfg = self.lm.model.config
        try:
            keys = payload["keys"]
            return (len(keys) == cfg.n_layers and len(payload["values"]) == cfg.n_layers
                    and all(k.ndim == 3 and k.shape[0] == cfg.n_kv_heads and k.shape[2] == cfg.head_dim for k in keys))
        except (KeyError, TypeError, AttributeError):
            return False

    def _fetch(self, key: str):
        payload = self.client.get_key(key)
        return payload if payload is not None and self._valid(payload) else None

    def _memory(self, req: dict) -> dict:
        from rayml.kvcache.emloc import EMLoCConfig, compress, memory_from_arrays, memory_key, memory_to_arrays

        demos = self._demos(req)
        cfg = EMLoCConfig(delta=float(req["delta"]), pool=int(req["pool"]), chunk_size=int(req["chunk_size"]))
        bos = self.lm.tokenizer.bos_id
        key = self.client.key(memory_key(self.model_id, demos, cfg, bos))
        with self.lock:
            before = self.client.stats()
            payload = self._fetch(key)
            if payload is None:
                payload = memory_to_arrays(compress(self.lm.model, demos, cfg, bos_id=bos).memory)
                self.client.builds += 1
                self.client.put_key(key, payload)
            after = self.client.stats()
        mem = memory_from_arrays(payload)
        return {"id": key, "n_tokens": mem.n_tokens, "kept_fraction": mem.kept_fraction(),
                "tokens_per_layer": mem.tokens_per_layer(), "cache": {k: after[k] - before[k] for k in after}}

    def _ask(self, req: dict) -> dict:
        from rayml.kvcache.emloc import answer, memory_from_arrays

        tok = self.lm.tokenizer
        queries = [tok.encode(q) for q in req["queries"]]
        if not all(queries):
            raise HTTPError(400, "'queries': a query encodes to no tokens")
        with self.lock:
            before = self.client.stats()
            payload = self._fetch(req["memory"])
            after = self.client.stats()
        if payload is None:
            raise HTTPError(404, f"unknown memory {req['memory']!r} (never built, or evicted): post its "
                                 f"demonstrations to /memories again")
        mem = memory_from_arrays(payload)
        longest = max(len(q) for q in queries)
        if mem.next_position + longest + req["max_tokens"] > self.lm.max_seq_len:
            raise HTTPError(413, f"the context has {mem.next_position} tokens; a query of {longest} tokens and "
                                 f"max_tokens {req['max_tokens']} after it exceed the context length "
                                 f"{self.lm.max_seq_len}")
        with self.lock:
            outs = [answer(self.lm.model, mem, q, max_new_tokens=req["max_tokens"], eos_id=tok.eos_id)
                    for q in queries]
        return {"answers": [tok.decode(o) for o in outs], "memory": req["memory"],
                "cache": {k: after[k] - before[k] for k in after}}

    async def _run(self, fn, *args) -> dict:
        try:
            return await asyncio.to_thread(fn, *args)
        except HTTPError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from None

    @api.post("/memories")
    async def memories(self, request: MemoryRequest) -> dict:
        return await self._run(self._memory, request.model_dump())

    @api.post("/ask")
    async def ask(self, request: AskRequest) -> dict:
        return await self._run(self._ask, request.model_dump())


def build(checkpoint: str = "base", budget_bytes: int = 512 << 20, store: Optional[bool] = True):
    """The app serving ``checkpoint`` with its own memory store deployment (``budget_bytes`` of
    compressed memories; ``store=False``: no store, nothing is reused)."""
    return EmlocServer.bind(checkpoint, EmlocKVStore.bind(budget_bytes) if store else None)


app = build()
