"""The Ray runtime: the only module in rayml that calls ``ray.init``.

``connect`` joins or starts Ray, ``pmap`` maps a function over items as Ray tasks (ordered,
chunked, bounded in flight, retried on system failures), ``seeds`` gives per-item seeds that do
not depend on how many workers run them, and ``stats`` counts the tasks and worker processes
that really ran the work (experiments put them in their result record).

Examples:
    >>> from rayml import runtime
    >>> runtime.connect()                                # doctest: +SKIP
    >>> runtime.pmap(lambda x: x * x, range(5), progress=False)  # doctest: +SKIP
    [0, 1, 4, 9, 16]
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "cache_root",
    "progress_bar",
    "worker_limit",
    "ConnectError",
    "PmapItemError",
    "connect",
    "shutdown",
    "is_connected",
    "cluster_info",
    "pmap",
    "seeds",
    "stats",
    "reset_stats",
    "max_workers",
    "resume_cache",
    "pin_threads",
    "BatchEvaluator",
    "batch_evaluator",
    "package_for_cluster",
    "doctor",
]

_OWNED = False  # True when connect() started or joined the Ray this process is connected to
_LOCK = threading.Lock()
_MAX_WORKERS: int | None = None
_RESUME_DIR: Path | None = None  # set by resume_cache(): pmap keeps each finished chunk's results here
_CODE_FINGERPRINT: str | None = None


class ConnectError(RuntimeError):
    """Ray could not be reached at the address given."""


class PmapItemError(RuntimeError):
    """The user's function raised on one item; ``index`` names the item, ``__cause__`` the error."""

    def __init__(self, index: int, error: BaseException, tb: str = ""):
        super().__init__(f"pmap: item {index} raised {type(error).__name__}: {error}\n{tb}".rstrip())
        self.index = index
        self.error = error
        self.tb = tb

    def __reduce__(self):
        return (PmapItemError, (self.index, self.error, self.tb))


@dataclass
class _Stats:
    tasks: int = 0
    resumed_items: int = 0
    worker_pids: set = field(default_factory=set)
    nodes: set = field(default_factory=set)


_STATS = _Stats()


def stats() -> dict:
    """Counts of Ray tasks, distinct worker processes and nodes used by ``pmap`` since the last reset."""
    return {
        "tasks": _STATS.tasks,
        "worker_pids": len(_STATS.worker_pids),
        "nodes_used": len(_STATS.nodes),
        "resumed_items": _STATS.resumed_items,
    }


def reset_stats() -> None:
    """Zero the counters that ``stats`` reports."""
    global _STATS
    _STATS = _Stats()


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast on an address nothing listens on, instead of letting ray.init wait a minute."""
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise ConnectError(f"address={address!r}: expected 'auto', 'host:port' or 'ray://host:port'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise ConnectError(f"address={address!r}: nothing answers there ({exc})") from None


def connect(address: str | None = None, **kwargs: Any) -> dict:
    """Join a running Ray or start an embedded one; idempotent.

    Args:
        address: ``None`` uses ``RAY_ADDRESS`` if set, else starts an embedded local Ray sized to
            the machine; ``"auto"`` joins the cluster this machine belongs to; ``"host:port"`` or
            ``"ray://host:port"`` joins that cluster.
        **kwargs: passed to ``ray.init`` when a new Ray is started (``num_cpus``,
            ``object_store_memory``, ``runtime_env`` ...).

    Returns:
        ``cluster_info()`` of the Ray now connected.

    Raises:
        ConnectError: the address cannot be reached.
    """
    global _OWNED
    import ray

    with _LOCK:
        if ray.is_initialized():
            return cluster_info()
        if address is None:
            address = os.environ.get("RAY_ADDRESS") or None
        if address is not None and address != "auto" and address != "local":
            _check_reachable(address)
        kwargs.setdefault("include_dashboard", False)
        kwargs.setdefault("logging_level", "WARNING")
        kwargs.setdefault("log_to_driver", True)
        try:
            if address is None or address == "local":
                # "local" always starts a new instance: without it ray.init() would join
                # whatever `ray start` cluster this machine last ran.
                ray.init(address="local", **kwargs)
            else:
                for key in ("num_cpus", "num_gpus", "object_store_memory", "include_dashboard"):
                    kwargs.pop(key, None)
                ray.init(address=address, **kwargs)
            _OWNED = True
        except ConnectionError as exc:
            raise ConnectError(f"address={address!r}: {exc}") from None
    return cluster_info()


def is_connected() -> bool:
    """Whether this process is connected to Ray."""
    import ray

    return ray.is_initialized()


def shutdown() -> None:
    """Undo ``connect``: stop the embedded Ray it started, or leave the cluster it joined.

    A Ray that this process joined (``address="auto"``) keeps running: ``ray.shutdown`` only
    disconnects the driver there. A Ray connected by someone else's ``ray.init`` is left alone.
    """
    global _OWNED
    import ray

    with _LOCK:
        if _OWNED and ray.is_initialized():
            ray.shutdown()
        _OWNED = False


def cluster_info() -> dict:
    """Nodes, CPUs and GPUs of the connected Ray (alive nodes only)."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    res = ray.cluster_resources()
    return {
        "ray_nodes": len(nodes),
        "cpus": int(res.get("CPU", 0)),
        "gpus": int(res.get("GPU", 0)),
    }


def cache_root() -> Path:
    """Where rayml caches what it trains or converts: ``$RAYML_CACHE`` or ``~/.cache/rayml``.

    Node-local: never pass a path under it to a task on another node (send the bytes).
    """
    return Path(os.environ.get("RAYML_CACHE") or Path.home() / ".cache" / "rayml")


class _LineProgress:
    """tqdm's ``update`` / ``set_postfix`` / ``close`` as plain lines on stderr, about every 10%."""

    def __init__(self, total: int, desc: str):
        self.total, self.desc, self.n, self._shown, self._postfix = max(int(total), 1), desc, 0, 0, ""
        self._t0 = time.monotonic()

    def update(self, k: int = 1) -> None:
        self.n += k
        decile = min(10, self.n * 10 // self.total)
        if decile > self._shown:
            self._shown = decile
            print(f"{self.desc}: {self.n}/{self.total} ({time.monotonic() - self._t0:.0f} s){self._postfix}",
                  file=sys.stderr, flush=True)

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self._postfix = " " + ", ".join(f"{k}={v}" for k, v in items.items()) if items else ""

    def close(self) -> None:
        pass


def progress_bar(total: int, desc: str, **kwargs: Any):
    """A tqdm bar on stderr when stderr is a terminal; otherwise plain lines (about every 10%),
    so job logs do not fill with carriage returns. ``TQDM_DISABLE=1`` silences both."""
    if os.environ.get("TQDM_DISABLE") == "1":
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, disable=True)
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, file=sys.stderr, **kwargs)
    return _LineProgress(total, desc)


def seeds(seed: int | np.random.SeedSequence, n: int) -> list[int]:
    """``n`` independent 63-bit seeds spawned from ``seed`` (numpy ``SeedSequence.spawn``).

    The i-th seed depends only on ``seed`` and ``i``, so work items seeded this way give the same
    results whatever the number of workers or the chunking.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(int(seed))
    return [int(c.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for c in ss.spawn(int(n))]


@contextlib.contextmanager
def max_workers(n: int | None):
    """Limit how many ``pmap`` tasks run at once inside the block (``None``: no limit).

    Used to show that results do not depend on the number of workers.
    """
    global _MAX_WORKERS
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"max_workers: n must be a positive integer or None, got {n!r}")
    old, _MAX_WORKERS = _MAX_WORKERS, n
    try:
        yield
    finally:
        _MAX_WORKERS = old


@contextlib.contextmanager
def resume_cache(directory: str | os.PathLike | None):
    """Keep every ``pmap`` chunk's results in ``directory`` inside the block, and reuse them.

    A long run killed part way (a timeout, a pre-empted node) and started again with the same code,
    inputs and seeds recomputes only the chunks it had not finished. A chunk is reused only when its
    key matches: the hash of rayml's whole source tree, the function's name, the chunk's items and
    the shared argument, so any edit to the code or the inputs recomputes everything. Only the
    driver reads and writes the directory (tasks return results, as always); each file is written
    whole (a temporary file, then a rename). ``stats()["resumed_items"]`` counts the items taken
    from it. ``None`` turns the cache off.
    """
    global _RESUME_DIR
    path = None if directory is None else Path(directory)
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
    old, _RESUME_DIR = _RESUME_DIR, path
    try:
        yield path
    finally:
        _RESUME_DIR = old


def code_fingerprint() -> str:
    """SHA-256 of every source file (``.py``, ``.c``, ``.pyx``) of the installed rayml package."""
    global _CODE_FINGERPRINT
    if _CODE_FINGERPRINT is None:
        import hashlib

        root = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for f in sorted(p for ext in ("*.py", "*.c", "*.pyx") for p in root.rglob(ext)):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _CODE_FINGERPRINT = h.hexdigest()
    return _CODE_FINGERPRINT


def _resume_keys(fn: Callable, chunks: list, shared: Any) -> list[str] | None:
    """One cache key per chunk (see ``resume_cache``), or None when something cannot be pickled."""
    import hashlib
    import pickle

    try:
        base = hashlib.sha256()
        base.update(code_fingerprint().encode())
        base.update(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}".encode())
        base.update(pickle.dumps(shared, protocol=5))
        return [_chunk_key(base.copy(), start, chunk) for start, chunk in chunks]
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


def _chunk_key(base, start: int, chunk: list) -> str:
    import pickle

    base.update(f"{start}:{len(chunk)}".encode())
    base.update(pickle.dumps(chunk, protocol=5))
    return base.hexdigest()


def _resume_load(key: str):
    import pickle

    path = _RESUME_DIR / f"{key}.pkl"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


def _resume_store(key: str, out: list) -> None:
    import pickle

    path = _RESUME_DIR / f"{key}.pkl"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            pickle.dump(out, f, protocol=5)
        os.replace(tmp, path)
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        with contextlib.suppress(OSError):
            tmp.unlink()


def worker_limit() -> int | None:
    """The limit set by the enclosing ``max_workers`` block (``None``: no limit).

    Code that sizes its own actor pools (rather than going through ``pmap``) reads it, so the
    1-vs-2-worker checks apply to it too.
    """
    return _MAX_WORKERS


def pin_threads(num_threads: int) -> None:
    """Pin torch's intra-op threads to the CPUs a task asked for (no-op if torch is not loaded)."""
    torch = sys.modules.get("torch")
    if torch is not None and num_threads >= 1:
        torch.set_num_threads(int(num_threads))


def _run_chunk(fn: Callable, items: Sequence, start: int, shared: Any, has_shared: bool, threads: int):
    import traceback

    import ray

    pin_threads(threads)
    out = []
    for offset, item in enumerate(items):
        try:
            out.append(fn(item, shared) if has_shared else fn(item))
        except Exception as exc:  # noqa: BLE001 - re-raised with the item's index
            raise PmapItemError(start + offset, exc, traceback.format_exc(limit=8)) from exc
    ctx = ray.get_runtime_context()
    return out, os.getpid(), ctx.get_node_id()


def _auto_chunk(n: int, slots: int) -> int:
    # About four chunks per slot balances load while keeping each task well past Ray's overhead.
    return max(1, math.ceil(n / max(1, 4 * slots)))


def pmap(
    fn: Callable,
    items: Iterable,
    *,
    shared: Any = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    chunk_size: int | str = "auto",
    max_retries: int = 3,
    max_in_flight: int | None = None,
    timeout_s: float | None = None,
    progress: bool = True,
    desc: str = "pmap",
) -> list:
    """Map ``fn`` over ``items`` as Ray tasks and return the results in order.

    Args:
        fn: a picklable function of one item (or of ``(item, shared)`` when ``shared`` is given).
        items: the work items; each should carry its own seed (see ``seeds``).
        shared: a large argument put in the object store once and passed to every call.
        num_cpus, num_gpus: resources each task asks for; torch threads are pinned to num_cpus.
        chunk_size: items per task, or ``"auto"`` (about four tasks per slot).
        max_retries: retries of a task lost to a system failure (a dead worker or node). Errors
            raised by ``fn`` are not retried.
        max_in_flight: tasks submitted at once (backpressure); default: the slots the cluster
            has for tasks of this size, capped by ``max_workers``.
        timeout_s: the longest one task may run; past it the map raises ``TimeoutError``.
        progress: show a progress bar (tqdm on stderr) when there are several tasks.
        desc: the progress bar's label.

    Returns:
        ``[fn(item) for item in items]``, computed on the cluster.

    Raises:
        PmapItemError: ``fn`` raised; ``.index`` is the failing item's index.
        TimeoutError: a task ran past ``timeout_s``.
    """
    import ray

    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    items = list(items)
    if num_cpus < 0 or num_gpus < 0:
        raise ValueError(f"num_cpus and num_gpus must be >= 0, got {num_cpus}, {num_gpus}")
    if not (chunk_size == "auto" or (isinstance(chunk_size, int) and chunk_size >= 1)):
        raise ValueError(f"chunk_size must be 'auto' or a positive integer, got {chunk_size!r}")
    if not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    if timeout_s is not None and timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 or None, got {timeout_s!r}")
    if not items:
        return []
    connect()

    info = cluster_info()
    slots = int(info["cpus"] // num_cpus) if num_cpus > 0 else max(1, info["cpus"])
    if num_gpus > 0:
        slots = min(slots, int(info["gpus"] // num_gpus))
    slots = max(1, slots)
    if _MAX_WORKERS is not None:
        slots = min(slots, _MAX_WORKERS)
    in_flight_cap = max_in_flight if max_in_flight is not None else slots
    if _MAX_WORKERS is not None:
        in_flight_cap = min(in_flight_cap, _MAX_WORKERS)
    size = _auto_chunk(len(items), slots) if chunk_size == "auto" else int(chunk_size)
    chunks = [(start, items[start : start + size]) for start in range(0, len(items), size)]

    remote = ray.remote(_run_chunk).options(
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        max_retries=max_retries,
        retry_exceptions=False,
    )
    fn_ref = ray.put(fn)
    shared_ref = ray.put(shared) if shared is not None else None
    threads = max(1, int(num_cpus)) if num_cpus else 1

    results: list = [None] * len(chunks)
    keys = _resume_keys(fn, chunks, shared) if _RESUME_DIR is not None else None
    todo = list(range(len(chunks)))
    if keys is not None:
        todo = []
        for idx, key in enumerate(keys):
            cached = _resume_load(key)
            if cached is None:
                todo.append(idx)
            else:
                results[idx] = cached
                _STATS.resumed_items += len(cached)
    pending: dict = {}  # ref -> (chunk index, submit time)
    next_todo = 0
    bar = None
    if progress and len(chunks) > 1:
        bar = progress_bar(len(items), desc, leave=False)
        bar.update(sum(len(r) for r in results if r is not None))  # taken from the resume cache
    try:
        while next_todo < len(todo) or pending:
            while next_todo < len(todo) and len(pending) < in_flight_cap:
                start, chunk = chunks[todo[next_todo]]
                ref = remote.remote(fn_ref, chunk, start, shared_ref, shared is not None, threads)
                pending[ref] = (todo[next_todo], time.monotonic())
                next_todo += 1
            wait_s = 1.0 if timeout_s is None else min(1.0, timeout_s)
            done, _ = ray.wait(list(pending), num_returns=1, timeout=wait_s)
            for ref in done:
                idx, _t = pending.pop(ref)
                try:
                    out, pid, node = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.as_instanceof_cause()
                    if isinstance(cause, PmapItemError):
                        raise PmapItemError(cause.index, cause.error, cause.tb) from None
                    raise
                results[idx] = out
                if keys is not None:
                    _resume_store(keys[idx], out)
                _STATS.tasks += 1
                _STATS.worker_pids.add((node, pid))
                _STATS.nodes.add(node)
                if bar is not None:
                    bar.update(len(out))
            if timeout_s is not None:
                now = time.monotonic()
                for ref, (idx, t0) in list(pending.items()):
                    if now - t0 > timeout_s:
                        for r in pending:
                            ray.cancel(r, force=True)
                        start = chunks[idx][0]
                        raise TimeoutError(
                            f"pmap: the task holding items {start}..{start + len(chunks[idx][1]) - 1}"
                            f" ran past timeout_s={timeout_s}"
                        )
    except BaseException:
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        raise
    finally:
        if bar is not None:
            bar.close()
    return [r for chunk_out in results for r in chunk_out]


def _evaluate_block(fn: Callable, block: np.ndarray, threads: int):
    import ray

    pin_threads(threads)
    try:
        values = np.asarray(fn(block), dtype=float)
        if values.ndim == 0 or values.shape[0] != block.shape[0]:
            raise ValueError
    except (ValueError, TypeError, IndexError):
        values = np.stack([np.asarray(fn(row), dtype=float) for row in block])
    return values, os.getpid(), ray.get_runtime_context().get_node_id()


class BatchEvaluator:
    """Evaluate ``f`` on a batch of points ``(K, d)`` by splitting the rows over Ray tasks.

    ``f`` is put in the object store once; each call submits one task per block of rows and
    returns the values in row order: ``(K,)`` for a scalar ``f``, ``(K, ...)`` for one that
    returns an array per point (a gradient, say). Use it as the ``evaluator`` of rayml's optimisers when
    ``f`` is an expensive black box.

    Args:
        f: the objective, vectorised over rows or not.
        blocks: tasks per batch; default: the slots the cluster has (capped by ``max_workers``).
        num_cpus: CPUs each task asks for.
        max_retries: retries of a block lost to a system failure.
    """

    def __init__(self, f: Callable, *, blocks: int | None = None, num_cpus: float = 1, max_retries: int = 3):
        import ray

        if not callable(f):
            raise TypeError("f must be callable")
        if blocks is not None and (not isinstance(blocks, int) or blocks < 1):
            raise ValueError(f"blocks must be a positive integer or None, got {blocks!r}")
        connect()
        self.blocks = blocks
        self.num_cpus = num_cpus
        self._f_ref = ray.put(f)
        self._remote = ray.remote(_evaluate_block).options(
            num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False
        )

    def _n_blocks(self, n: int) -> int:
        if self.blocks is not None:
            want = self.blocks
        else:
            want = max(1, int(cluster_info()["cpus"] // max(self.num_cpus, 1e-9)))
            self.blocks = want  # the cluster's size is read once
        if _MAX_WORKERS is not None:
            want = min(want, _MAX_WORKERS)
        return max(1, min(n, want))

    def __call__(self, points: np.ndarray) -> np.ndarray:
        import ray

        points = np.asarray(points, dtype=float)
        parts = np.array_split(points, self._n_blocks(points.shape[0]))
        threads = max(1, int(self.num_cpus))
        refs = [self._remote.remote(self._f_ref, part, threads) for part in parts if len(part)]
        out = []
        for values, pid, node in ray.get(refs):
            out.append(values)
            _STATS.tasks += 1
            _STATS.worker_pids.add((node, pid))
            _STATS.nodes.add(node)
        return np.concatenate(out)


def batch_evaluator(f: Callable, **kwargs: Any) -> BatchEvaluator:
    """A ``BatchEvaluator`` for ``f`` (see there)."""
    return BatchEvaluator(f, **kwargs)


PACKAGE_MARKER = ".rayml-package"


def package_for_cluster(dest: str | os.PathLike) -> str:
    """Assemble the installed rayml as one importable folder ``dest/rayml`` for Ray's ``py_modules``.

    ``rayml.actors`` and ``rayml.kernels`` come from the top-level ``actors/`` and ``kernels/``
    folders at install time, so a source checkout's ``rayml/`` alone lacks them (and a wheel in
    ``py_modules`` makes Ray ``pip install --target`` all of rayml's dependencies again). This
    copies the three parts, without caches, into ``dest/rayml`` and returns that path: pass it as
    ``{"py_modules": [path]}`` in a job's ``runtime_env``. An existing ``dest/rayml`` is replaced
    only if an earlier ``package_for_cluster`` made it (its marker file); anything else there is
    left alone and is a ``ValueError``.
    """
    import shutil
    import tempfile

    import rayml
    import rayml.actors
    import rayml.kernels

    dest = os.fspath(dest)
    target = os.path.join(dest, "rayml")
    marker = os.path.join(target, PACKAGE_MARKER)
    if os.path.lexists(target) and not os.path.isfile(marker):
        raise ValueError(f"dest {dest!r}: {target!r} exists and was not made by rayml package; "
                         "remove it yourself or choose another folder")
    os.makedirs(dest, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".rayml-pkg-", dir=dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    try:
        root = os.path.join(staging, "rayml")
        shutil.copytree(os.path.dirname(rayml.__file__), root, ignore=ignore)
        for sub, mod in (("actors", rayml.actors), ("kernels", rayml.kernels)):
            dst = os.path.join(root, sub)
            if os.path.realpath(os.path.dirname(mod.__file__)) != os.path.realpath(dst):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(os.path.dirname(mod.__file__), dst, ignore=ignore)
        with open(os.path.join(root, PACKAGE_MARKER), "w") as fh:
            fh.write("made by `rayml package`; it replaces this folder when run again\n")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(root, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _where_imported(_item: int) -> dict:
    import socket as _socket

    import rayml
    import rayml.actors
    import rayml.kernels

    return {"host": _socket.gethostname(), "pid": os.getpid(), "rayml": rayml.__file__,
            "actors": rayml.actors.__file__, "kernels": rayml.kernels.__file__}


def doctor(n_tasks: int = 4) -> dict:
    """Where the driver and the workers import rayml from, and the cluster's size."""
    info = connect()
    return {"cluster": info, "driver": _where_imported(0),
            "workers": pmap(_where_imported, range(n_tasks), chunk_size=1, progress=False)}
