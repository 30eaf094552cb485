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

Chunk KV lives in the ``KVStore`` actor (``rayml.actors.kvstore``; keys: content hash + model
fingerprint), so every replica reuses what any replica compiled; a lost or restarted store only
costs recompilation. Errors: malformed JSON or fields -> 400 naming the field, unknown document
ids -> 404 listing them, a document or prompt over the context length -> 413, other methods than
POST -> 405; the replica stays up. Registered texts are kept by the replica and mirrored in the
store actor (for other replicas); Assumed: a document registry that must survive the loss of
every replica and of the store belongs in a database, not here.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from typing import Any

from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

from rayml.actors.serve.http import json_body

__all__ = ["EpicServer", "app", "build", "parse_ask", "parse_document", "HTTPError", "MAX_TOKENS", "MAX_DOCUMENTS"]

MAX_TOKENS = 256
MAX_DOCUMENTS = 256
_ASK_FIELDS = {"documents", "query", "max_tokens", "method", "k"}


class HTTPError(ValueError):
    """A request error with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def doc_id(text: str) -> str:
    """The id of a document: ``doc-`` and 16 hex digits of the SHA-256 of its text."""
    return "doc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def parse_document(body: Any, tokenizer, max_seq_len: int) -> tuple[str, list[int]]:
    """Validate a ``/documents`` body; returns ``(text, ids)`` or raises ``HTTPError``."""
    if not isinstance(body, dict):
        raise HTTPError(400, "the body must be a JSON object")
    unknown = set(body) - {"text"}
    if unknown:
        raise HTTPError(400, f"unknown fields {sorted(unknown)}")
    text = body.get("text")
    if not isinstance(text, str) or not text:
        raise HTTPError(400, "'text' must be a non-empty string")
    ids = tokenizer.encode(text)
    if not ids:
        raise HTTPError(400, "'text' encodes to no tokens")
    if len(ids) + 2 > max_seq_len:
        raise HTTPError(413, f"'text' has {len(ids)} tokens; the context length is {max_seq_len}")
    return text, ids


def parse_ask(body: Any, default_k: int) -> dict:
    """Validate an ``/ask`` body (types and ranges; ids and lengths are checked against the
    registry and the model later); raises ``HTTPError`` 400 naming the field."""
    from rayml.kvcache.epic import METHODS

    if not isinstance(body, dict):
        raise HTTPError(400, "the body must be a JSON object")
    unknown = set(body) - _ASK_FIELDS
    if unknown:
        raise HTTPError(400, f"unknown fields {sorted(unknown)}")
    docs = body.get("documents")
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise HTTPError(400, "'documents' must be a non-empty list of document ids")
    if len(docs) > MAX_DOCUMENTS:
        raise HTTPError(400, f"'documents' may hold at most {MAX_DOCUMENTS} ids, got {len(docs)}")
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise HTTPError(400, "'query' must be a non-empty string")
    max_tokens = body.get("max_tokens", 8)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
        raise HTTPError(400, f"'max_tokens' must be an integer in [1, {MAX_TOKENS}], got {max_tokens!r}")
    method = body.get("method", "legolink")
    if method not in METHODS:
        raise HTTPError(400, f"'method' must be one of {list(METHODS)}, got {method!r}")
    k = body.get("k", default_k)
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise HTTPError(400, f"'k' must be an integer >= 0, got {k!r}")
    return {"documents": docs, "query": query, "max_tokens": max_tokens, "method": method, "k": k}


@serve.deployment(max_ongoing_requests=16, ray_actor_options={"num_cpus": 0.5})
class EpicServer:
    """The deployment: a document registry, the KV store client and the LegoLink engine.

    Args:
        checkpoint: a checkpoint name (shipped / cached) or directory.
        k: LegoLink's default ``k``.
        store_name: the name of the ``KVStore`` actor (shared by every replica).
        budget_bytes: the store's byte budget (when this replica creates it).
    """

    def __init__(self, checkpoint: str = "base", k: int = 16, store_name: str = "rayml-epic-kvstore",
                 budget_bytes: int = 512 << 20):
        import torch

        import rayml.llm
        from rayml.actors.kvstore import KVStoreClient, get_or_create_store
        from rayml.kvcache.epic import PrefixCache, model_fingerprint

        torch.set_num_threads(1)
        self.name = str(checkpoint)
        self.k = int(k)
        self.lm = rayml.llm.pretrained(checkpoint, train_if_missing=False)
        self.model_id = model_fingerprint(self.lm.model)
        self.store = get_or_create_store(store_name, budget_bytes=budget_bytes, detached=True)
        self.client = KVStoreClient(self.store, self.model_id)
        self.docs: dict[str, list[int]] = {}
        self.texts: dict[str, str] = {}
        self.prefix_cache = PrefixCache(max_entries=64)  # for method "prefix" (exact-prefix caching)
        self.lock = threading.Lock()

    # -- blocking work (run in a thread) --
    def _register(self, text: str, ids: list[int]) -> dict:
        did = doc_id(text)
        self.docs[did], self.texts[did] = ids, text
        try:
            self.store.put_doc.remote(did, text)
        except Exception:  # noqa: BLE001 - the store is only a cache/mirror
            pass
        with self.lock:
            self.client.get_or_build(ids, self._compile)
        return {"id": did, "n_tokens": len(ids)}

    def _compile(self, ids: list[int]) -> dict:
        from rayml.kvcache.epic import cache_to_arrays, precompute_chunk

        return cache_to_arrays(precompute_chunk(self.lm.model, ids))

    def _lookup(self, did: str) -> list[int] | None:
        if did in self.docs:
            return self.docs[did]
        import ray

        try:
            text = ray.get(self.store.get_doc.remote(did), timeout=10)
        except Exception:  # noqa: BLE001
            text = None
        if text is None or doc_id(text) != did:
            return None
        self.texts[did], self.docs[did] = text, self.lm.tokenizer.encode(text)
        return self.docs[did]

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

    async def __call__(self, request: Request) -> JSONResponse:
        path = request.url.path.rstrip("/")
        route = "documents" if path.endswith("/documents") else "ask" if path.endswith("/ask") else None
        if route is None:
            return JSONResponse({"error": "not found: use POST /documents or POST /ask"}, status_code=404)
        body, error = await json_body(request)
        if error is not None:
            return error
        try:
            if route == "documents":
                text, ids = parse_document(body, self.lm.tokenizer, self.lm.max_seq_len)
                return JSONResponse(await asyncio.to_thread(self._register, text, ids))
            req = parse_ask(body, self.k)
            return JSONResponse(await asyncio.to_thread(self._ask, req))
        except HTTPError as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.status)


def build(checkpoint: str = "base", k: int = 16, store_name: str = "rayml-epic-kvstore", budget_bytes: int = 512 << 20):
    """The app serving ``checkpoint`` with LegoLink's default ``k`` and the named store."""
    return EpicServer.bind(checkpoint, k, store_name, budget_bytes)


app = build()
