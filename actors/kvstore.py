"""EPIC's chunk KV store as a Ray actor, and the client that rebuilds what the store lost.

``KVStore`` (a Ray actor) maps a chunk key (``rayml.kvcache.epic.chunk_key``: SHA-256 of the model id
and the chunk's token ids) to a Ray object ref of the chunk's compiled KV (the numpy arrays of
``rayml.kvcache.epic.cache_to_arrays``), with an LRU byte budget: storing past the budget evicts the
least recently used entries (an entry larger than the whole budget is not stored). The objects
are owned by the store actor, so every replica on the cluster that holds the key
can fetch them, and they live as long as the store keeps them (the actor puts them itself, so it owns them).

Every payload is checked before it is stored: once a model is registered (``register_model``,
or a client that sends its model's layout with each put, as the Serve app's does), the store takes
only payloads of a registered model that match its layout (``check_epic_payload``: the arrays
of ``cache_to_arrays`` with the model's layers, KV heads, head size, dtype, positions
``0 .. n-1``, finite values), and every entry is
tagged with its model, so a ``get`` for another model misses; a store without layouts (the vLLM
connector's, whose engines find it by name) takes only plain data (dicts / lists of numpy arrays,
numbers and strings). Registered document texts are a second LRU under their own byte budget.

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

__all__ = ["KVStore", "KVStoreClient", "get_or_create_store", "payload_nbytes", "check_epic_payload", "check_plain_payload",
           "epic_layout", "DEFAULT_NAME", "NAMESPACE"]

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


def check_plain_payload(payload: Any, _depth: int = 0) -> None:
    """``ValueError`` unless ``payload`` is plain data: dicts with string keys, lists, numpy arrays
    of numbers, numbers, strings (what both payload formats are made of), nested at most 4 deep."""
    import numpy as np

    if _depth > 4:
        raise ValueError("payload is nested too deeply")
    if isinstance(payload, np.ndarray):
        if payload.dtype.kind not in "biuf":
            raise ValueError(f"payload arrays must be numeric, got dtype {payload.dtype}")
    elif isinstance(payload, dict):
        for k, v in payload.items():
            if not isinstance(k, str):
                raise ValueError(f"payload keys must be strings, got {type(k).__name__}")
            check_plain_payload(v, _depth + 1)
    elif isinstance(payload, (list, tuple)):
        for v in payload:
            check_plain_payload(v, _depth + 1)
    elif not isinstance(payload, (bool, int, float, str)):
        raise ValueError(f"payload holds a {type(payload).__name__}; only arrays, numbers and strings are stored")


def epic_layout(model) -> dict:
    """The layout ``check_epic_payload`` checks a chunk's KV against, from a ``TransformerLM``."""
    c = model.config
    return {"n_layers": int(c.n_layers), "n_kv_heads": int(c.n_kv_heads), "head_dim": int(c.head_dim),
            "max_len": int(c.max_seq_len), "rope_theta": float(c.rope_theta), "dtype": "float32"}


def check_epic_payload(payload: Any, layout: dict) -> None:
    """``ValueError`` naming what is wrong unless ``payload`` is a compiled chunk of the model of
    ``layout`` (``rayml.kvcache.epic.cache_to_arrays``: ``keys`` / ``values`` of shape
    (n_layers, n_kv_heads, n, head_dim) and the model's dtype, ``positions`` = 0 .. n-1,
    ``rope_theta``; 1 <= n <= max_len; every value finite)."""
    import numpy as np

    if not isinstance(payload, dict) or set(payload) != {"keys", "values", "positions", "rope_theta"}:
        raise ValueError("payload must be a dict with exactly 'keys', 'values', 'positions', 'rope_theta'")
    keys, values, pos = payload["keys"], payload["values"], payload["positions"]
    for name, a in (("keys", keys), ("values", values)):
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(layout["dtype"]) or a.ndim != 4:
            raise ValueError(f"payload {name!r} must be a 4-d {layout['dtype']} array")
        want = (layout["n_layers"], layout["n_kv_heads"], a.shape[2], layout["head_dim"])
        if a.shape != want or not 1 <= a.shape[2] <= layout["max_len"]:
            raise ValueError(f"payload {name!r} has shape {a.shape}; the model's chunks are "
                             f"(n_layers={want[0]}, n_kv_heads={want[1]}, 1..{layout['max_len']}, head_dim={want[3]})")
        if not np.isfinite(a).all():
            raise ValueError(f"payload {name!r} holds non-finite values")
    if keys.shape != values.shape:
        raise ValueError("payload 'keys' and 'values' differ in shape")
    n = keys.shape[2]
    if not isinstance(pos, np.ndarray) or pos.shape != (n,) or pos.dtype.kind not in "iu" or \
            not np.array_equal(pos, np.arange(n)):
        raise ValueError(f"payload 'positions' must be the integers 0 .. {n - 1}")
    if payload["rope_theta"] != layout["rope_theta"]:
        raise ValueError(f"payload 'rope_theta' {payload['rope_theta']!r} is not the model's {layout['rope_theta']}")


class _ByteLRU:
    """An LRU of ``key -> (value, nbytes, ...)`` tuples under a byte budget (``used`` bytes held)."""

    def __init__(self, budget: int):
        self.budget, self.items, self.used = budget, OrderedDict(), 0

    def pop(self, key):
        """Remove ``key``; its tuple, or None."""
        entry = self.items.pop(key, None)
        if entry is not None:
            self.used -= entry[1]
        return entry

    def put(self, key, entry: tuple) -> int:
        """Store ``entry`` (``entry[1]``: its bytes) as most recent, evicting the least recently
        used to fit; returns how many were evicted."""
        self.pop(key)
        evicted = 0
        while self.items and self.used + entry[1] > self.budget:
            _, old = self.items.popitem(last=False)
            self.used -= old[1]
            evicted += 1
        self.items[key] = entry
        self.used += entry[1]
        return evicted

    def touch(self, key):
        """``key``'s tuple marked most recently used, or None."""
        entry = self.items.get(key)
        if entry is not None:
            self.items.move_to_end(key)
        return entry


class KVStore:
    """The store's state (run as a Ray actor or a Serve deployment; usable in-process for tests of
    the LRU policy).

    Args:
        budget_bytes: the most bytes of entries held at once (> 0).
        doc_budget_bytes: the most bytes of registered document texts (default ``budget_bytes // 8``).

    Entries are ``key -> (ref, nbytes, model_id)`` in LRU order. ``get`` returns ``[ref]``
    (wrapped so that Ray passes the ref itself, not its value) or ``None``.
    """

    def __init__(self, budget_bytes: int, doc_budget_bytes: int | None = None):
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be a positive integer, got {budget_bytes!r}")
        if doc_budget_bytes is None:
            doc_budget_bytes = max(1, budget_bytes // 8)
        if isinstance(doc_budget_bytes, bool) or not isinstance(doc_budget_bytes, int) or doc_budget_bytes <= 0:
            raise ValueError(f"doc_budget_bytes must be a positive integer, got {doc_budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self.doc_budget_bytes = doc_budget_bytes
        self._entries = _ByteLRU(budget_bytes)
        self._docs = _ByteLRU(doc_budget_bytes)
        self._layouts: dict[str, dict] = {}
        self.hits = self.misses = self.evictions = self.rejected = self.invalid = 0
        self.started = time.time()

    def register_model(self, model_id: str, layout: dict) -> None:
        """Take payloads of ``model_id`` from now on, checked against ``layout`` (``epic_layout``).
        Once a model is registered, payloads of unregistered models are refused."""
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id must be a non-empty string, got {model_id!r}")
        need = {"n_layers", "n_kv_heads", "head_dim", "max_len", "rope_theta", "dtype"}
        if not isinstance(layout, dict) or set(layout) != need:
            raise ValueError(f"layout must be a dict with keys {sorted(need)}")
        old = self._layouts.get(model_id)
        if old is not None and old != layout:
            raise ValueError(f"model {model_id!r} is already registered with another layout")
        self._layouts[model_id] = dict(layout)

    def get(self, key: str, model_id: str | None = None):
        """``[ref]`` of ``key`` (marking it most recently used), or ``None`` (absent, or stored
        for another model)."""
        entry = self._entries.items.get(key)
        if entry is None or (model_id is not None and entry[2] is not None and entry[2] != model_id):
            self.misses += 1
            return None
        self._entries.touch(key)
        self.hits += 1
        return [entry[0]]

    def put(self, key: str, ref_box: list, nbytes: int, model_id: str | None = None) -> bool:
        """Store ``ref_box[0]`` (an object ref) under ``key``; evict LRU entries to fit the budget.
        In process only (the LRU policy): over Ray, payloads come by value (``put_value``), so
        that the store checks them and owns their objects.

        Returns False (and stores nothing) when ``nbytes`` alone exceeds the budget.
        """
        if not isinstance(key, str) or not key:
            raise ValueError(f"key must be a non-empty string, got {key!r}")
        if not isinstance(ref_box, list) or len(ref_box) != 1:
            raise ValueError("ref_box must be a one-element list holding an object ref")
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if nbytes > self.budget_bytes:
            self.rejected += 1
            return False
        self.evictions += self._entries.put(key, (ref_box[0], nbytes, model_id))
        return True

    def put_value(self, key: str, payload: Any, model_id: str | None = None, layout: dict | None = None) -> bool:
        """Store a payload given by value (the actor puts it in the object store itself) after
        checking it (module docstring); False, counted as ``invalid``, if the check fails. A
        ``layout`` registers ``model_id`` first (or must equal its registered layout), so a
        store that restarted empty learns its models again from their next put."""
        import ray

        try:
            if layout is not None:
                self.register_model(model_id, layout)
            if self._layouts:
                if model_id not in self._layouts:
                    raise ValueError(f"model {model_id!r} is not registered with this store")
                check_epic_payload(payload, self._layouts[model_id])
            else:
                check_plain_payload(payload)
            if not isinstance(key, str) or not 0 < len(key) <= 256:
                raise ValueError("key must be a string of 1 to 256 characters")
        except ValueError:
            self.invalid += 1
            return False
        return self.put(key, [ray.put(payload)], payload_nbytes(payload), model_id)

    def contains(self, key: str) -> bool:
        """Whether ``key`` is held (no LRU or counter update)."""
        return key in self._entries.items

    def delete(self, key: str) -> bool:
        """Drop ``key``; True if it was there."""
        return self._entries.pop(key) is not None

    def keys(self) -> list[str]:
        """Keys from least to most recently used."""
        return list(self._entries.items)

    def stats(self) -> dict:
        """Entries, bytes, budget and hit / miss / eviction counters."""
        return {"entries": len(self._entries.items), "bytes": self._entries.used, "budget_bytes": self.budget_bytes,
                "hits": self.hits, "misses": self.misses, "evictions": self.evictions, "rejected": self.rejected,
                "invalid": self.invalid, "docs": len(self._docs.items), "doc_bytes": self._docs.used,
                "models": sorted(self._layouts), "started": self.started}

    # registered documents (the Serve app's id -> text); small, kept for other replicas
    def put_doc(self, doc_id: str, text: str) -> bool:
        """Remember a registered document's text under its id (an LRU under ``doc_budget_bytes``;
        False if the text alone is over it)."""
        if not isinstance(doc_id, str) or not isinstance(text, str):
            raise ValueError("doc_id and text must be strings")
        nbytes = len(text.encode("utf-8", "surrogatepass"))
        if nbytes > self.doc_budget_bytes:
            return False
        self._docs.put(doc_id, (text, nbytes))
        return True

    def get_doc(self, doc_id: str):
        """A registered document's text (marking it recently used), or None."""
        entry = self._docs.touch(doc_id)
        return None if entry is None else entry[0]

    def ping(self) -> bool:
        """Liveness check."""
        return True


def get_or_create_store(name: str = DEFAULT_NAME, *, budget_bytes: int = 512 << 20, num_cpus: float = 0,
                        namespace: str = NAMESPACE, detached: bool = False):
    """The named store actor, created if it does not exist yet (``max_restarts=-1``: restarted
    empty after a crash). ``detached``: outlive the creating process (the vLLM connector's
    engines, which find it by name; the Serve app has its own store deployment instead)."""
    import ray

    from rayml import runtime

    runtime.connect()
    actor_cls = ray.remote(KVStore)
    return actor_cls.options(name=name, namespace=namespace, get_if_exists=True, max_restarts=-1,
                             max_task_retries=0, num_cpus=num_cpus,
                             lifetime="detached" if detached else None).remote(budget_bytes)


class KVStoreClient:
    """Get-or-build access to a ``KVStore`` for one model.

    Args:
        store: the actor handle (``get_or_create_store``), a Serve deployment handle of a
            ``KVStore`` deployment (the EPIC app's), or None for a local-only client.
        model_id: the model part of every key (``rayml.kvcache.epic.model_fingerprint``).
        layout: the model's KV layout (``epic_layout``), sent with every put so that the store
            checks this model's payloads against it (None: plain-data check only).
        timeout_s: the longest one store call may take before it counts as a miss.

    Counters: ``hits``, ``misses`` (absent keys), ``lost`` (entries whose object or store was
    gone), ``builds``.
    """

    def __init__(self, store, model_id: str, *, layout: dict | None = None, timeout_s: float = 10.0):
        if not isinstance(model_id, str) or not model_id:
            raise ValueError(f"model_id must be a non-empty string, got {model_id!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.store = store
        self.model_id = model_id
        self.layout = layout
        self.timeout_s = float(timeout_s)
        self.hits = self.misses = self.lost = self.builds = 0

    def key(self, ids: Sequence[int]) -> str:
        """The store key of a chunk of token ids."""
        from rayml.kvcache.epic import chunk_key

        return chunk_key(self.model_id, ids)

    def _call(self, method: str, *args):
        """Call the store (a Ray actor handle or a Serve deployment handle) with the timeout."""
        import ray

        call = getattr(self.store, method).remote(*args)
        if hasattr(call, "result"):  # a Serve DeploymentResponse
            return call.result(timeout_s=self.timeout_s)
        return ray.get(call, timeout=self.timeout_s)

    def put_doc(self, doc_id: str, text: str) -> bool:
        """Mirror a registered document's text in the store (best effort)."""
        if self.store is None:
            return False
        try:
            return bool(self._call("put_doc", doc_id, text))
        except Exception:  # noqa: BLE001 - the store is only a cache/mirror
            return False

    def get_doc(self, doc_id: str):
        """A mirrored document's text, or None (absent, evicted, or the store is down)."""
        if self.store is None:
            return None
        try:
            return self._call("get_doc", doc_id)
        except Exception:  # noqa: BLE001
            return None

    def get(self, ids: Sequence[int]):
        """The stored payload of a chunk, or None (absent, evicted, lost, or the store is down)."""
        return self.get_key(self.key(ids))

    def get_key(self, key: str):
        """``get`` by store key."""
        import ray

        if self.store is None:
            return None
        try:
            box = self._call("get", key, self.model_id)
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
            return self._call("get", key, self.model_id) is not None
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
            return bool(self._call("put_value", key, payload, self.model_id, self.layout))
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
