"""EPIC's chunk KV store as a Ray actor, and the client that rebuilds what the store lost.

``KVStore`` (a Ray actor) maps a chunk key (``rayml.kvcache.epic.chunk_key``: SHA-256 of the model id
and the chunk's token ids) to a Ray object ref of the chunk's compiled KV (the numpy arrays of
``rayml.kvcache.epic.cache_to_arrays``), with an LRU byte budget: storing past the budget evicts the
least recently used entries (an entry larger than the whole budget is not stored). The objects
are owned by the store actor, so every replica on the cluster that holds the key
can fetch them, and they live as long as the store keeps them (the actor puts them itself, so it owns them).

The store is only a cache. ``KVStoreClient.get_or_build`` asks the store, and on a miss, an
evicted or lost object, or a dead / restarting store, compiles the chunk itself (``build``) and
offers it back (best effort). The actor is created with ``max_restarts=-1``: a killed store comes
back empty, and requests keep answering correctly, only slower until the cache warms again.

Examples:
    >>> store = get_or_create_store("epic-kv", budget_bytes=256 << 20)          # doctest: +SKIP
    >>> client = KVStoreClient(store, model_id="f00d")                           # doctest: +SKIP
    >>> arrays = client.get_or_build([5, 6, 7], lambda ids: compile_fn(ids))     # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Callable, Sequence

__all__ = ["KVStore", "KVStoreClient", "get_or_create_store", "payload_nbytes", "DEFAULT_NAME", "NAMESPACE"]

DEFAULT_NAME = "rayml-epic-kvstore"
NAMESPACE = "rayml"


def payload_nbytes(payload: Any) -> int:
    """Bytes of the numpy arrays in a (possibly nested) dict/list payload."""
    import numpy as np

    if isinstance(payload, np.ndarray):
        return int(payload.nbytes)
    if isinstance(payload, dict):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_nbytes(v) for v in payload)
    return 0


class KVStore:
    """The store's state (run as a Ray actor; usable in-process for tests of the LRU policy).

    Args:
        budget_bytes: the most bytes of entries held at once (> 0).

    Entries are ``key -> (ref, nbytes)`` in LRU order. ``get`` returns ``[ref]`` (wrapped so that
    Ray passes the ref itself, not its value) or ``None``.
    """

    def __init__(self, budget_bytes: int):
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be a positive integer, got {budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict = OrderedDict()
        self._bytes = 0
        self._docs: dict = {}
        self.hits = self.misses = self.evictions = self.rejected = 0
        self.started = time.time()

    def get(self, key: str):
        """``[ref]`` of ``key`` (marking it most recently used), or ``None``."""
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return [entry[0]]

    def put(self, key: str, ref_box: list, nbytes: int) -> bool:
        """Store ``ref_box[0]`` (an object ref) under ``key``; evict LRU entries to fit the budget.

        Returns False (and stores nothing) when ``nbytes`` alone exceeds the budget.
        """
        if not isinstance(ref_box, list) or len(ref_box) != 1:
            raise ValueError("ref_box must be a one-element list holding an object ref")
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if nbytes > self.budget_bytes:
            self.rejected += 1
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        while self._entries and self._bytes + nbytes > self.budget_bytes:
            _, (_, b) = self._entries.popitem(last=False)
            self._bytes -= b
            self.evictions += 1
        self._entries[key] = (ref_box[0], nbytes)
        self._bytes += nbytes
        return True

    def put_value(self, key: str, payload: Any) -> bool:
        """Store a payload given by value (the actor puts it in the object store itself)."""
        import ray

        return self.put(key, [ray.put(payload)], payload_nbytes(payload))

    def contains(self, key: str) -> bool:
        """Whether ``key`` is held (no LRU or counter update)."""
        return key in self._entries

    def delete(self, key: str) -> bool:
        """Drop ``key``; True if it was there."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return False
        self._bytes -= entry[1]
        return True

    def keys(self) -> list[str]:
        """Keys from least to most recently used."""
        return list(self._entries)

    def stats(self) -> dict:
        """Entries, bytes, budget and hit / miss / eviction counters."""
        return {"entries": len(self._entries), "bytes": self._bytes, "budget_bytes": self.budget_bytes,
                "hits": self.hits, "misses": self.misses, "evictions": self.evictions, "rejected": self.rejected,
                "started": self.started}

    # registered documents (the Serve app's id -> text); small, kept for other replicas
    def put_doc(self, doc_id: str, text: str) -> None:
        """Remember a registered document's text under its id."""
        self._docs[doc_id] = text

    def get_doc(self, doc_id: str):
        """A registered document's text, or None."""
        return self._docs.get(doc_id)

    def ping(self) -> bool:
        """Liveness check."""
        return True


def get_or_create_store(name: str = DEFAULT_NAME, *, budget_bytes: int = 512 << 20, num_cpus: float = 0,
                        namespace: str = NAMESPACE, detached: bool = False):
    """The named store actor, created if it does not exist yet (``max_restarts=-1``: restarted
    empty after a crash). ``detached``: outlive the creating process (Serve replicas use it)."""
    import ray

    from rayml import runtime

    runtime.connect()
    actor_cls = ray.remote(KVStore)
    return actor_cls.options(name=name, namespace=namespace, get_if_exists=True, max_restarts=-1,
                             max_task_retries=0, num_cpus=num_cpus,
                             lifetime="detached" if detached else None).remote(budget_bytes)


class KVStoreClient:
    """Get-or-build access to a ``KVStore`` actor for one model.

    Args:
        store: the actor handle (``get_or_create_store``), or None for a local-only client.
        model_id: the model part of every key (``rayml.kvcache.epic.model_fingerprint``).
        timeout_s: the longest one store call may take before it counts as a miss.

    Counters: ``hits``, ``misses`` (absent keys), ``lost`` (entries whose object or store was
    gone), ``builds``.
    """

    def __init__(self, store, model_id: str, *, timeout_s: float = 10.0):
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id must be a non-empty string, got {model_id!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.store = store
        self.model_id = model_id
        self.timeout_s = float(timeout_s)
        self.hits = self.misses = self.lost = self.builds = 0

    def key(self, ids: Sequence[int]) -> str:
        """The store key of a chunk of token ids."""
        from rayml.kvcache.epic import chunk_key

        return chunk_key(self.model_id, ids)

    def _call(self, method: str, *args):
        import ray

        return ray.get(getattr(self.store, method).remote(*args), timeout=self.timeout_s)

    def get(self, ids: Sequence[int]):
        """The stored payload of a chunk, or None (absent, evicted, lost, or the store is down)."""
        return self.get_key(self.key(ids))

    def get_key(self, key: str):
        """``get`` by store key."""
        import ray

        if self.store is None:
            return None
        try:
            box = self._call("get", key)
        except Exception:  # noqa: BLE001 - a dead/restarting/slow store is a miss, never an error
            self.lost += 1
            return None
        if box is None:
            self.misses += 1
            return None
        try:
            payload = ray.get(box[0], timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 - the object was lost with its owner
            self.lost += 1
            return None
        self.hits += 1
        return payload

    def contains_key(self, key: str) -> bool:
        """Whether the store holds ``key`` (False when it is down); the value is not fetched."""
        if self.store is None:
            return False
        try:
            return self._call("get", key) is not None
        except Exception:  # noqa: BLE001
            return False

    def put(self, ids: Sequence[int], payload: Any) -> bool:
        """Offer a payload to the store; False if it was not stored.

        The payload goes to the actor by value and the actor puts it in the object store, so the
        store owns the object (Ray >= 2.56 has no ``ray.put(_owner=...)``): it outlives this
        client, and dies only with the store.
        """
        return self.put_key(self.key(ids), payload)

    def put_key(self, key: str, payload: Any) -> bool:
        """``put`` by store key."""
        if self.store is None:
            return False
        try:
            return bool(self._call("put_value", key, payload))
        except Exception:  # noqa: BLE001 - best effort: the caller already has the payload
            return False

    def get_or_build(self, ids: Sequence[int], build: Callable[[list[int]], Any]) -> Any:
        """The chunk's payload from the store, else ``build(ids)`` (then offered to the store)."""
        ids = [int(i) for i in ids]
        payload = self.get(ids)
        if payload is not None:
            return payload
        payload = build(ids)
        self.builds += 1
        self.put(ids, payload)
        return payload

    def stats(self) -> dict:
        """This client's counters."""
        return {"hits": self.hits, "misses": self.misses, "lost": self.lost, "builds": self.builds}
