"""Grammar compilation in a child process, so that a pathological grammar cannot hang or kill the
caller: ``IsolatedCompiler.compile(spec, limits)`` sends the spec to a persistent child
(``python -m rayml.decoding.compile_worker``), which builds the ``Grammar`` under an address-space
limit and answers it pickled; past ``limits.compile_timeout_s`` the child is killed (and restarted on
the next call) and ``GrammarTooComplex`` is raised.

Regex determinisation is exponential in the worst case (``(a|b)*a(a|b){30}``), and a Python thread
cannot be interrupted, which is why this runs in a process rather than a thread.

Protocol: frames of an 8-byte big-endian length and a pickle, over the child's stdin / stdout;
request ``(spec, limits)``, answer ``("ok", grammar)`` or ``(error class name, message)``.
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
    f.write(_HEADER.pack(len(data)) + data)
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


class IsolatedCompiler:
    """A persistent child process that builds grammars with a time and memory limit.

    Thread-safe: calls are serialised (one compilation at a time; a waiting call's own timeout
    starts when its turn comes).
    """

    startup_timeout_s = 120.0

    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> subprocess.Popen:
        """The running child, started if needed; returns once it has imported the front-ends (its
        start-up is not counted in any compile time limit)."""
        if self._proc is None or self._proc.poll() is not None:
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
            self._proc = proc
        return self._proc

    def start(self) -> None:
        """Start the child now (e.g. when a server starts), not at the first compilation."""
        with self._lock:
            self._start()

    def _kill(self) -> None:
        if self._proc is not None:
            try:
                self._proc.kill()
                self._proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._proc = None
            self.restarts += 1

    def compile(self, spec, limits):
        """The ``Grammar`` of ``spec`` (a ``GrammarSpec``), or the front-end's error re-raised as
        ``GrammarError`` / ``GrammarTooComplex``."""
        from rayml.decoding.spec import GrammarError, GrammarTooComplex

        with self._lock:
            proc = self._start()
            try:
                _write_frame(proc.stdin, (spec, limits))
            except (BrokenPipeError, OSError):
                self._kill()
                proc = self._start()
                _write_frame(proc.stdin, (spec, limits))
            deadline = time.monotonic() + limits.compile_timeout_s
            fd = proc.stdout
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._kill()
                    raise GrammarTooComplex(f"compiling the {spec.kind} took longer than the compile time limit "
                                            f"({limits.compile_timeout_s:g} s)")
                ready, _, _ = select.select([fd], [], [], left)
                if ready:
                    break
            try:
                status, payload = _read_frame(fd)
            except (EOFError, pickle.UnpicklingError, struct.error):
                self._kill()
                raise GrammarTooComplex(f"compiling the {spec.kind} exceeded the compiler's memory limit "
                                        f"({limits.compile_memory_mb} MB) or crashed it") from None
        if status == "ok":
            return payload
        if status == "GrammarError":
            raise GrammarError(payload)
        raise GrammarTooComplex(payload)

    def close(self) -> None:
        """Stop the child process."""
        with self._lock:
            if self._proc is not None:
                try:
                    self._proc.stdin.close()
                    self._proc.wait(timeout=5)
                except Exception:  # noqa: BLE001
                    self._kill()
                self._proc = None

    def __del__(self):  # pragma: no cover - best effort
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
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
        try:
            answer = ("ok", build_grammar(spec, limits))
        except GrammarTooComplex as exc:
            answer = ("GrammarTooComplex", str(exc))
        except MemoryError:
            answer = ("GrammarTooComplex", f"compiling the {spec.kind} exceeded the compiler's memory limit "
                                           f"({limits.compile_memory_mb} MB)")
        except RecursionError:
            answer = ("GrammarTooComplex", f"the {spec.kind} is nested too deeply")
        except GrammarError as exc:
            answer = ("GrammarError", str(exc))
        _write_frame(out, answer)


if __name__ == "__main__":  # pragma: no cover
    _serve()
