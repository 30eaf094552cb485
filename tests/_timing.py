"""Time limits scaled to the machine: a test's timeout guards against a hang, never measures speed.

Every wall-clock limit in the tests (pytest-timeout's per-test limit, ``requests`` timeouts,
subprocess timeouts, waits on a condition) is written as its value on an idle machine and passed
through :func:`limit`, which multiplies it by :func:`scale`:

* ``RAYML_TEST_TIME_SCALE`` (a positive number) when set: the factor, as given;
* otherwise the machine's load per usable CPU (the larger of the 1- and 5-minute load averages
  over the CPUs this process may use, cgroup quota included), at least 1 and at most ``CAP``.

The factor is read afresh at each call, so a limit taken when a test starts follows the load of
that moment. Waits that would race a wall clock (``sleep(1)`` and hope) use :func:`wait_for`: it
polls the condition itself and gives up only after a scaled limit.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

ENV = "RAYML_TEST_TIME_SCALE"
CAP = 10.0


def usable_cpus() -> float:
    """CPUs this process may run on: its affinity mask, lowered by a cgroup v2 CPU quota if any."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = float(os.cpu_count() or 1)
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()[:2]
        if quota != "max":
            cpus = min(cpus, float(quota) / float(period))
    except (OSError, ValueError):
        pass
    return max(cpus, 1.0)


def scale() -> float:
    """The factor every test time limit is multiplied by (see the module docstring)."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{ENV} must be a positive number, got {raw!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{ENV} must be a positive number, got {raw!r}")
        return value
    try:
        load = max(os.getloadavg()[:2])
    except (AttributeError, OSError):
        return 1.0
    return min(CAP, max(1.0, load / usable_cpus()))


def limit(seconds: float) -> float:
    """``seconds`` (the limit on an idle machine) scaled to the machine's present load."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    return float(seconds) * scale()


def wait_for(condition: Callable[[], Any], seconds: float, *, what: str, interval: float = 0.2) -> Any:
    """Poll ``condition()`` until it returns something truthy and return that; raise ``TimeoutError``
    naming ``what`` once ``limit(seconds)`` has passed. Exceptions from ``condition`` propagate."""
    budget = limit(seconds)
    deadline = time.monotonic() + budget
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {budget:.0f} s ({seconds} s scaled by {budget / seconds:.2g})")
        time.sleep(interval)
