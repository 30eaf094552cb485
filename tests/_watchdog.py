"""The last line of defence against a test that hangs where pytest-timeout cannot reach it.

pytest-timeout's ``signal`` method raises in the main thread, which works only while that thread
runs Python. A driver stuck in Ray's native code (seen here: its raylet gone, the main thread in a
futex wait that ignores signals) never sees the alarm, and the run would hang until something
outside kills it, with no summary. The watchdog is a daemon thread: once a test has run ``grace``
seconds past its own (scaled) limit it says which test hung, dumps every thread's stack, prints
the run's summary line so far, and ends the process with exit code 1.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time


class Watchdog:
    """One per run: ``arm(item, seconds)`` when a test starts, ``disarm()`` when it ends."""

    def __init__(self, config):
        self.config = config
        self._lock = threading.Lock()
        self._item = None
        self._deadline = None
        self._limit = 0.0
        self._thread = threading.Thread(target=self._watch, name="rayml-test-watchdog", daemon=True)
        self._thread.start()

    def arm(self, item, limit_s: float, grace_s: float) -> None:
        """Watch ``item``: end the run if it is still running ``limit_s + grace_s`` from now."""
        with self._lock:
            self._item, self._limit = item, limit_s
            self._deadline = time.monotonic() + limit_s + grace_s

    def disarm(self) -> None:
        """The watched test has ended."""
        with self._lock:
            self._item = self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                due = self._deadline is not None and time.monotonic() > self._deadline
                item, limit_s = self._item, self._limit
            if due:
                self._end(item, limit_s)

    def _end(self, item, limit_s: float) -> None:
        capman = self.config.pluginmanager.getplugin("capturemanager")
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        try:
            if capman is not None:
                capman.suspend_global_capture(in_=True)
            message = (f"{item.nodeid} is still running well past its time limit ({limit_s:.0f} s): it is stuck "
                       "where the timeout's signal cannot reach it (native code); ending the run")
            if reporter is not None:
                reporter.write_sep("!", message, red=True)
                sys.stderr.flush()
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                reporter.short_test_summary()
                reporter.write_line(f"HUNG {item.nodeid} (run ended by the test watchdog)")
                reporter.summary_stats()
            else:
                print(message, file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
