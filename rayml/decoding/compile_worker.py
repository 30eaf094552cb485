"""Grammar compilation in child processes, so that a pathological grammar cannot hang the caller, kill
it, or grow its memory: ``IsolatedCompiler.compile(spec, limits)`` sends the spec to one of a small
pool of persistent children (``python -m rayml.decoding.compile_worker``), which builds the
``Grammar`` under an address-space limit and answers it pickled.

* Past ``limits.compile_timeout_s`` the child is killed (a fresh one replaces it) and
  ``GrammarCompileFailed`` (a ``GrammarTooComplex``) is raised; so it is after a ``MemoryError`` or
  a crash of the child (the child is restarted: a heap that once hit the cap is not reused), and when
  the queue is full. These failures depend on the load and on the child's state, not on the grammar
  alone, so caches must not keep them (``GrammarCache`` does not).
* ``workers`` children compile in parallel (default 2), so one expensive grammar does not hold up
  the others. Besides them an *express* child takes a request when every worker is busy, with a
  short budget (``express_timeout_s``): a small grammar is answered at once even while every worker
  is busy with big ones; a grammar that outlasts the budget is moved to the workers' queue (its own
  time limit starts there) and the express child is restarted.
* At most ``max_queue`` calls wait for a worker; more are refused at once (``GrammarCompileFailed``).
* A child whose resident memory grew past ``recycle_rss_mb`` after a compilation is restarted
  (Python keeps freed memory in its heap, so a child that once built a large DFA stays large).

Regex determinisation is exponential in the worst case (``(a|b)*a(a|b){30}``), and a Python thread
cannot be interrupted, which is why this runs in processes rather than threads.

Protocol: frames of an 8-byte big-endian length and a pickle, over the child's stdin / stdout;
request ``(spec, limits)``, answer ``("ok", grammar)``, ``("MemoryError", message)`` (the child then
exits) or ``(error class name, message)``.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time

__all__ = ["IsolatedCompiler"]

_HEADER = struct.Struct(">Q")


def _write_frame(f, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(_HEADER.pack(len(data)))
    f.write(data)
    f.flush()


def _read_exact(f, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            raise EOFError("the compiler process closed its pipe")
        out += chunk
    return bytes(out)


def _read_frame(f):
    (n,) = _HEADER.unpack(_read_exact(f, _HEADER.size))
    return pickle.loads(_read_exact(f, n))


class _Child:
    """One compiling child process (started lazily; killed and forgotten on any failure)."""

    startup_timeout_s = 120.0

    def __init__(self, name: str):
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.compiles = 0

    def start(self) -> subprocess.Popen:
        """The running child, started if needed; returns once it has imported the front-ends (its
        start-up is not counted in any compile time limit)."""
        if self.proc is None or self.proc.poll() is not None:
            env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
            proc = subprocess.Popen([sys.executable, "-m", "rayml.decoding.compile_worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            ready, _, _ = select.select([proc.stdout], [], [], self.startup_timeout_s)
            try:
                if not ready or _read_frame(proc.stdout) != "ready":
                    raise EOFError
            except (EOFError, pickle.UnpicklingError, struct.error):
                proc.kill()
                proc.wait()
                raise RuntimeError("the grammar compiler process did not start") from None
            self.proc = proc
        return self.proc

    def kill(self) -> None:
        if self.proc is not None:
            try:
                self.proc.kill()
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.proc = None
            self.restarts += 1

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                self.kill()
            self.proc = None

    def rss_mb(self) -> float:
        """Resident memory of the child (0 when unknown: no ``/proc``)."""
        try:
            with open(f"/proc/{self.proc.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError, IndexError, AttributeError):
            return 0.0

    def run(self, spec, limits, timeout_s: float):
        """``(status, payload)`` of compiling ``spec``, or ``("timeout", None)`` past ``timeout_s``
        (the child is then killed), ``("crashed", None)`` when it died."""
        proc = self.start()
        try:
            _write_frame(proc.stdin, (spec, limits))
        except (BrokenPipeError, OSError):
            self.kill()
            proc = self.start()
            _write_frame(proc.stdin, (spec, limits))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return "timeout", None
            ready, _, _ = select.select([proc.stdout], [], [], left)
            if ready:
                break
        try:
            status, payload = _read_frame(proc.stdout)
        except (EOFError, pickle.UnpicklingError, struct.error):
            self.kill()
            return "crashed", None
        self.compiles += 1
        if status == "MemoryError":
            self.kill()  # the child exits after a MemoryError; never reuse a heap that hit the cap
        return status, payload

    def __del__(self):  # pragma: no cover - best effort
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
        except Exception:  # noqa: BLE001
            pass


class IsolatedCompiler:
    """A pool of persistent child processes that build grammars with a time and memory limit.

    Thread-safe: up to ``workers`` compilations run at once, plus one on the express child (module
    docstring); a waiting call's own time limit starts when a worker takes it.

    Args:
        workers: compiling children (>= 1).
        max_queue: calls that may wait for a worker; more are refused at once.
        express: keep the express child (a lane for small grammars while every worker is busy).
        express_timeout_s: the express child's budget per grammar.
        recycle_rss_mb: restart a child whose resident memory exceeds this after a compilation
            (``None``: half of the request's ``compile_memory_mb``).
    """

    startup_timeout_s = 120.0

    def __init__(self, workers: int = 2, *, max_queue: int = 32, express: bool = True,
                 express_timeout_s: float = 0.5, recycle_rss_mb: float | None = None):
        for name, v in (("workers", workers), ("max_queue", max_queue)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "workers" else 0):
                raise ValueError(f"{name} must be an int >= {1 if name == 'workers' else 0}, got {v!r}")
        if not (isinstance(express_timeout_s, (int, float)) and express_timeout_s > 0):
            raise ValueError(f"express_timeout_s must be a number > 0, got {express_timeout_s!r}")
        if recycle_rss_mb is not None and not (isinstance(recycle_rss_mb, (int, float)) and recycle_rss_mb > 0):
            raise ValueError(f"recycle_rss_mb must be a number > 0 or None, got {recycle_rss_mb!r}")
        self.workers = [_Child(f"worker-{i}") for i in range(workers)]
        self.express = _Child("express") if express else None
        self.max_queue, self.express_timeout_s, self.recycle_rss_mb = max_queue, float(express_timeout_s), recycle_rss_mb
        self._cond = threading.Condition()
        self._idle = list(self.workers)
        self._express_state = "idle" if express else "none"
        self._waiting = 0
        self.stats = {"compiled": 0, "express": 0, "express_overflows": 0, "timeouts": 0, "memory_errors": 0,
                      "crashes": 0, "recycled": 0, "refused": 0}

    @property
    def restarts(self) -> int:
        """Children killed and replaced (timeouts, memory errors, crashes, recycling)."""
        return sum(c.restarts for c in self._children())

    def _children(self):
        return self.workers + ([self.express] if self.express is not None else [])

    def start(self) -> None:
        """Start the children now (e.g. when a server starts), not at the first compilation."""
        with self._cond:
            for c in self._children():
                c.start()

    def _finish(self, child: _Child, status: str, limits) -> None:
        """Book-keeping after a run: counters, and the recycling of a child grown too large."""
        key = {"timeout": "timeouts", "MemoryError": "memory_errors", "crashed": "crashes"}.get(status)
        if key:
            self.stats[key] += 1
        elif child.proc is not None:
            cap = self.recycle_rss_mb if self.recycle_rss_mb is not None else limits.compile_memory_mb / 2
            if child.rss_mb() > cap:
                child.kill()
                self.stats["recycled"] += 1

    def _answer(self, spec, limits, status, payload):
        from rayml.decoding.spec import (GrammarCompileFailed, GrammarCompileLimitExceeded, GrammarError,
                                         GrammarTooComplex)

        if status == "ok":
            self.stats["compiled"] += 1
            return payload
        if status == "GrammarError":
            raise GrammarError(payload)
        if status == "GrammarTooComplex":
            raise GrammarTooComplex(payload)
        if status == "timeout":
            raise GrammarCompileLimitExceeded(f"compiling the {spec.kind} took longer than the compile time limit "
                                              f"({limits.compile_timeout_s:g} s)")
        if status == "MemoryError":
            raise GrammarCompileLimitExceeded(payload)
        raise GrammarCompileFailed(f"compiling the {spec.kind} exceeded the compiler's memory limit "
                                   f"({limits.compile_memory_mb} MB) or crashed it")

    def _acquire(self, allow_express: bool):
        """An idle worker, or the express child (``allow_express``), waiting for one (bounded)."""
        from rayml.decoding.spec import GrammarCompileFailed

        with self._cond:
            ready = self._idle or (allow_express and self._express_state == "idle")
            if not ready and self._waiting >= self.max_queue:
                self.stats["refused"] += 1
                raise GrammarCompileFailed(f"the grammar compiler is busy ({len(self.workers)} compiling, "
                                           f"{self._waiting} waiting); retry later")
            self._waiting += 1
            try:
                while True:
                    if self._idle:
                        return self._idle.pop()
                    if allow_express and self._express_state == "idle":
                        self._express_state = "busy"
                        return self.express
                    self._cond.wait()
            finally:
                self._waiting -= 1

    def compile(self, spec, limits):
        """The ``Grammar`` of ``spec`` (a ``GrammarSpec``), or the front-end's error re-raised as
        ``GrammarError`` / ``GrammarTooComplex``; ``GrammarCompileFailed`` for a time limit, a memory
        limit, a crash or a full queue."""
        child = self._acquire(allow_express=self.express is not None)
        if child is self.express:
            budget = min(self.express_timeout_s, limits.compile_timeout_s)
            overflow = False
            try:
                status, payload = self.express.run(spec, limits, budget)
                overflow = status == "timeout" and budget < limits.compile_timeout_s
                if not overflow:
                    self._finish(self.express, status, limits)
            finally:
                with self._cond:
                    self._express_state = "starting" if overflow else "idle"
                    self._cond.notify_all()
            self.stats["express"] += 1
            if not overflow:
                return self._answer(spec, limits, status, payload)
            # not a failure of the grammar: it moves to the workers' queue (its own time limit starts
            # there); the express child was killed, its replacement starts off this thread
            self.stats["express_overflows"] += 1
            threading.Thread(target=self._restart_express, daemon=True).start()
            child = self._acquire(allow_express=False)
        try:
            status, payload = child.run(spec, limits, limits.compile_timeout_s)
            self._finish(child, status, limits)
        except BaseException:
            child.kill()
            raise
        finally:
            with self._cond:
                self._idle.append(child)
                self._cond.notify_all()
        return self._answer(spec, limits, status, payload)

    def _restart_express(self) -> None:
        try:
            self.express.start()
        except RuntimeError:
            pass
        finally:
            with self._cond:
                self._express_state = "idle"
                self._cond.notify_all()

    def close(self) -> None:
        """Stop the child processes."""
        with self._cond:
            for c in self._children():
                c.close()

    def __del__(self):  # pragma: no cover - best effort
        try:
            for c in self._children():
                c.__del__()
        except Exception:  # noqa: BLE001
            pass


def _serve() -> None:  # pragma: no cover - runs in the child
    import resource

    from rayml.decoding.spec import GrammarError, GrammarTooComplex, build_grammar

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    _write_frame(out, "ready")
    limited = False
    while True:
        try:
            spec, limits = _read_frame(inp)
        except EOFError:
            return
        if not limited:
            cap = int(limits.compile_memory_mb) * 1024 * 1024
            try:
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            except (ValueError, OSError):
                pass
            limited = True
        ballast = bytearray(16 * 2**20)  # freed on a MemoryError, so that the answer can be written
        oom = False
        try:
            answer = ("ok", build_grammar(spec, limits))
        except GrammarTooComplex as exc:
            answer = ("GrammarTooComplex", str(exc))
        except MemoryError:
            oom = True
        except RecursionError:
            answer = ("GrammarTooComplex", f"the {spec.kind} is nested too deeply")
        except GrammarError as exc:
            answer = ("GrammarError", str(exc))
        if not oom:
            try:
                _write_frame(out, answer)
            except MemoryError:  # pickling a large grammar under the cap; nothing was written yet
                oom = True
        if oom:
            # answer (outside the handler: the failed frames are gone) and exit; the parent starts a
            # fresh child, since a heap that hit the cap once is fragmented
            answer = None
            del ballast
            _write_frame(out, ("MemoryError", f"compiling the {spec.kind} exceeded the compiler's memory limit "
                                              f"({limits.compile_memory_mb} MB)"))
            return
        del ballast

if __name__ == "__main__":  # pragma: no cover
    _serve()
