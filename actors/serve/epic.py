"""Ray Serve app: position-independent context caching (EPIC / LegoLink) over HTTP.

``serve run rayml.actors.serve.epic:app`` serves the shipped ``base`` checkpoint. Two routes
(JSON bodies, POST):

* ``<route>/documents`` ``{"text": "[bako:123;tuli:456]\\n"}`` -> ``{"id": "doc-...",
  "n_tokens": 14}``: registers an immutable document (its id is a hash of its text, so
  registering twice gives the same id) and compiles its KV into the shared store.
* ``<route>/ask`` ``{"documents": ["doc-...", ...], "query": "?tuli:", "max_tokens": 8,
  "method": "legolink", "k": 16}`` -> ``{"text", "method", "n_prompt_tokens",
  "recomputed_tokens", "cache": {...}}``: links the documents' cached KV in the given order,
  recomputes with ``method`` (``rayml.kvcache.epic.METHODS``; default LegoLink with the app's ``k``;
  ``prefix`` uses the replica's own exact-prefix cache) and decodes greedily.

Chunk KV lives in the app's own store, ``EpicKVStore`` (a Serve deployment of
``rayml.actors.kvstore.KVStore``, bound into this app: it starts and is deleted with the app and is
not a cluster-wide named actor; keys: content hash + model fingerprint), so every replica reuses
what any replica compiled; a lost or restarted store only costs recompilation. Each replica
registers its model's KV layout with the store, which then refuses payloads of other models or
of the wrong shape, dtype or positions (``check_epic_payload``) and serves an entry only to the
model that stored it. Errors (a FastAPI ingress; OpenAPI schema at ``/openapi.json``): a body that
fails its request model (``DocumentRequest``, ``AskRequest``) -> 422 naming the field, unknown
document ids -> 404 listing them, a document or prompt over the context length or a body over
256 KiB -> 413, other methods than POST -> 405; texts are tokenized off the event loop; the replica
stays up. Registered texts are kept by the replica (the most recent ``max_registered``, so the
registry is bounded) and mirrored in the store under its own byte budget (for other replicas);
Assumed: a document
registry that must survive the loss of every replica and of the store belongs in a database.
"""

# No ``from __future__ import annotations``: FastAPI must see the route's types, not strings.
import asyncio
import hashlib
import threading
from collections import OrderedDict
from typing import Any, Optional

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator
from ray import serve

from rayml.actors.kvstore import KVStore
from rayml.actors.serve.generate import longest_token_bytes, scalar_values
from rayml.actors.serve.http import SHUTDOWN_POLL_S, make_api

__all__ = ["EpicServer", "EpicKVStore", "app", "api", "build", "parse_ask", "parse_document", "HTTPError", "DocumentRequest",
           "AskRequest", "MAX_TOKENS", "MAX_DOCUMENTS"]

MAX_TOKENS = 256
MAX_DOCUMENTS = 256
MAX_BODY = 256 * 1024


class DocumentRequest(BaseModel):
    """An immutable document to register and compile."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr = Field(min_length=1)

    @field_validator("text")
    @classmethod
    def _text(cls, v):
        return scalar_values(v, "text")


def _methods() -> tuple:
    from rayml.kvcache.epic import METHODS

    return tuple(METHODS)


class AskRequest(BaseModel):
    """A query over registered documents, linked in the given order."""

    model_config = ConfigDict(extra="forbid")
    documents: list[StrictStr] = Field(min_length=1, max_length=MAX_DOCUMENTS)
    query: StrictStr = Field(min_length=1)
    max_tokens: StrictInt = Field(8, ge=1, le=MAX_TOKENS)
    method: StrictStr = "legolink"
    k: Optional[StrictInt] = Field(None, ge=0, le=1 << 20, description="LegoLink's k (default: the app's)")

    @field_validator("query")
    @classmethod
    def _query(cls, v):
        return scalar_values(v, "query")

    @field_validator("method")
    @classmethod
    def _method(cls, v):
        if v not in _methods():
            raise ValueError(f"must be one of {list(_methods())}")
        return v


class HTTPError(ValueError):
    """A request error with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def doc_id(text: str) -> str:
    """The id of a document: ``doc-`` and 16 hex digits of the SHA-256 of its text."""
    return "doc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _validated(model, body: Any) -> dict:
    if not isinstance(body, dict):
        raise HTTPError(422, "the body must be a JSON object")
    try:
        return model.model_validate(body).model_dump()
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HTTPError(422, f"'{'.'.join(str(p) for p in err['loc']) or 'body'}': {err['msg']}") from None


def tokenize_document(text: str, tokenizer, max_seq_len: int) -> list[int]:
    """The token ids of a document, or ``HTTPError`` (400 none, 413 over the context length; a text
    too long in bytes to fit is refused before the tokenizer, which holds the GIL, runs)."""
    limit = max_seq_len * longest_token_bytes(tokenizer)
    if len(text.encode("utf-8")) > limit:
        raise HTTPError(413, f"'text' is over {limit} bytes; it cannot fit the context length {max_seq_len}")
    ids = tokenizer.encode(text)
    if not ids:
        raise HTTPError(400, "'text' encodes to no tokens")
    if len(ids) + 2 > max_seq_len:
        raise HTTPError(413, f"'text' has {len(ids)} tokens; the context length is {max_seq_len}")
    return ids


def parse_document(body: Any, tokenizer, max_seq_len: int) -> tuple[str, list[int]]:
    """Validate a ``/documents`` body; returns ``(text, ids)`` or raises ``HTTPError``."""
    text = _validated(DocumentRequest, body)["text"]
    return text, tokenize_document(text, tokenizer, max_seq_len)


def parse_ask(body: Any, default_k: int) -> dict:
    """Validate an ``/ask`` body (types and ranges; ids and lengths are checked against the
    registry and the model later); raises ``HTTPError`` 422 naming the field."""
    req = _validated(AskRequest, body)
    return {**req, "k": default_k if req["k"] is None else req["k"]}


api = make_api("rayml epic: position-independent context caching (LegoLink)", max_body_bytes=MAX_BODY)


@serve.deployment(num_replicas=1, max_ongoing_requests=256, ray_actor_options={"num_cpus": 0},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
class EpicKVStore(KVStore):
    """The app's chunk-KV store: ``rayml.actors.kvstore.KVStore`` as a Serve deployment with no
    route (reached only through the handle the app binds into ``EpicServer``). Serve restarts a
    crashed replica, empty."""


@serve.deployment(max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.5},
                  graceful_shutdown_wait_loop_s=SHUTDOWN_POLL_S)
@serve.ingress(api)
class EpicServer:
    """The deployment: a document registry, the KV store client and the LegoLink engine.

    Args:
        checkpoint: a checkpoint name (shipped / cached) or directory.
        k: LegoLink's default ``k``.
        store: the handle of the app's ``EpicKVStore`` deployment (``build`` binds it), or None
            for a replica-local cache only.
        max_registered: documents this replica keeps (least recently used go first; the store's
            mirror and a re-registration bring them back).
    """

    def __init__(self, checkpoint: str = "base", k: int = 16, store=None, max_registered: int = 4096):
        import torch

        import rayml.llm
        from rayml.actors.kvstore import KVStoreClient, epic_layout
        from rayml.kvcache.epic import PrefixCache, model_fingerprint

        torch.set_num_threads(1)
        self.name = str(checkpoint)
        self.k = int(k)
        self.lm = rayml.llm.pretrained(checkpoint, train_if_missing=False)
        self.model_id = model_fingerprint(self.lm.model)
        self.store = store
        self.client = KVStoreClient(store, self.model_id, layout=epic_layout(self.lm.model))
        self.max_registered = int(max_registered)
        self.docs: OrderedDict[str, list[int]] = OrderedDict()  # bounded LRU of registered documents
        self.prefix_cache = PrefixCache(max_entries=64)  # for method "prefix" (exact-prefix caching)
        self.lock = threading.Lock()  # the model and the store client
        self.registry_lock = threading.Lock()

    # -- blocking work (run in a thread) --
    def _remember(self, did: str, ids: list[int]) -> None:
        with self.registry_lock:
            self.docs[did] = ids
            self.docs.move_to_end(did)
            while len(self.docs) > self.max_registered:
                self.docs.popitem(last=False)

    def _register(self, text: str) -> dict:
        ids = tokenize_document(text, self.lm.tokenizer, self.lm.max_seq_len)
        did = doc_id(text)
        self._remember(did, ids)
        self.client.put_doc(did, text)
        with self.lock:
            self.client.get_or_build(ids, self._compile)
        return {"id": did, "n_tokens": len(ids)}

    def _compile(self, ids: list[int]) -> dict:
        from rayml.kvcache.epic import cache_to_arrays, precompute_chunk

        return cache_to_arrays(precompute_chunk(self.lm.model, ids))

    def _lookup(self, did: str) -> Optional[list[int]]:
        with self.registry_lock:
            if did in self.docs:
                self.docs.move_to_end(did)
                return self.docs[did]
        text = self.client.get_doc(did)
        if text is None or doc_id(text) != did:
            return None
        ids = self.lm.tokenizer.encode(text)
        self._remember(did, ids)
        return ids

    def _ask(self, req: dict) -> dict:
        from rayml.kvcache.epic import answer, cache_from_arrays

        missing = []
        chunk_ids = []
        for did in req["documents"]:
            ids = self._lookup(did)
            if ids is None:
                missing.append(did)
            else:
                chunk_ids.append(ids)
        if missing:
            raise HTTPError(404, f"unknown document ids {missing}")
        tok = self.lm.tokenizer
        query = tok.encode(req["query"])
        if not query:
            raise HTTPError(400, "'query' encodes to no tokens")
        n_prompt = 1 + sum(len(c) for c in chunk_ids) + len(query)
        if n_prompt + req["max_tokens"] > self.lm.max_seq_len:
            raise HTTPError(413, f"the prompt has {n_prompt} tokens; with max_tokens {req['max_tokens']} it exceeds "
                                 f"the context length {self.lm.max_seq_len}")
        with self.lock:
            before = self.client.stats()
            chunks = None
            if req["method"] not in ("full", "prefix"):
                chunks = [cache_from_arrays(self.client.get_or_build(c, self._compile)) for c in chunk_ids]
            out = answer(self.lm.model, chunk_ids, query, method=req["method"], k=req["k"], chunks=chunks,
                         bos_id=tok.bos_id, eos_id=tok.eos_id, max_new_tokens=req["max_tokens"],
                         prefix_cache=self.prefix_cache)
            after = self.client.stats()
        return {"text": tok.decode(out.tokens), "method": req["method"], "k": req["k"],
                "n_prompt_tokens": out.n_prompt, "recomputed_tokens": out.recomputed,
                "cache": {key: after[key] - before[key] for key in after}}

    async def _run(self, fn, *args) -> dict:
        try:
            return await asyncio.to_thread(fn, *args)
        except HTTPError as exc:
            raise HTTPException(status_code=exc.status, detail=str(exc)) from None

    @api.post("/documents")
    async def documents(self, request: DocumentRequest) -> dict:
        return await self._run(self._register, request.text)

    @api.post("/ask")
    async def ask(self, request: AskRequest) -> dict:
        req = request.model_dump()
        return await self._run(self._ask, {**req, "k": self.k if req["k"] is None else req["k"]})


def build(checkpoint: str = "base", k: int = 16, budget_bytes: int = 512 << 20, max_registered: int = 4096,
          doc_budget_bytes: Optional[int] = None):
    """The app serving ``checkpoint`` with LegoLink's default ``k``, its own KV store deployment
    (``budget_bytes`` of chunk KV, ``doc_budget_bytes`` of mirrored document texts) and a bounded
    document registry per replica."""
    return EpicServer.bind(checkpoint, k, EpicKVStore.bind(budget_bytes, doc_budget_bytes), max_registered)


app = build()
