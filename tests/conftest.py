"""Shared fixtures: one local Ray for the whole session (``ray.init`` costs seconds here).

Tests that need another topology (a multi-node ``Cluster``, a ``ray start`` head for job
submission) use ``isolated_ray`` (or carry the ``own_ray`` mark): it shuts the shared instance
down first. They are run after every other test, so the shared Ray starts once per test run.

Time limits: every test's pytest-timeout limit (the ini's ``timeout`` or its ``timeout`` mark) is
scaled to the machine's load when the test starts (``_timing.scale``; ``RAYML_TEST_TIME_SCALE``
overrides it), and so are the waits inside tests. A limit that fires fails that one test: the
method is ``signal`` (pytest-timeout's ``thread`` method would end the whole process).
"""

from __future__ import annotations

import math
import os

import pytest

from _timing import scale as time_scale
from _watchdog import Watchdog

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TQDM_DISABLE", "1")


def _ray_health_limits(factor: float) -> None:
    """On a machine that is busy when the run starts, give Ray's own liveness checks the same
    headroom as the tests' limits (read by every Ray process started from here). A GCS that
    misses a busy raylet's health checks marks its node dead; a driver whose raylet or GCS is
    gone is ended by Ray or hangs in native code (seen here: a futex wait that ignores signals)."""
    if factor <= 1:
        return  # Ray's defaults on an idle machine: node-death detection stays as fast as it is
    defaults = {"RAY_health_check_timeout_ms": 10_000, "RAY_health_check_failure_threshold": 5,
                "RAY_gcs_rpc_server_reconnect_timeout_s": 60, "RAY_worker_register_timeout_seconds": 60,
                # Serve's controller kills an HTTP proxy not ready in 5 s (seen under stress-ng: the
                # serve.start of tests/actors/serve/test_reliability.py failed so, erroring 4 tests)
                "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": 5, "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": 10,
                "RAY_SERVE_PROXY_GRACEFUL_SHUTDOWN_TIMEOUT_S": 5}
    for key, value in defaults.items():
        os.environ.setdefault(key, str(int(math.ceil(value * factor))))


_ray_health_limits(time_scale())

SHARED_RAY = dict(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False)


@pytest.fixture(scope="session")
def ray_kwargs():
    """The ``ray.init`` settings of the shared local Ray (for module-scoped fixtures)."""
    return dict(SHARED_RAY)


# A slice of the standard library with every docstring family (50+ texts each, about 1540 in all): its MiniLM
# embeddings take about 20 s of CPU once per cache, where the whole standard library's (about 6400) take 85 s.
STDLIB_SLICE = ("turtle", "pkgutil", "venv", "site", "sysconfig", "zipimport", "runpy", "threading", "queue",
                "concurrent", "urllib", "smtplib", "imaplib", "inspect", "tarfile", "doctest", "bdb", "statistics",
                "numbers", "random", "codecs", "difflib", "logging", "xml")


@pytest.fixture(scope="session")
def stdlib_slice(tmp_path_factory):
    """A copy of ``STDLIB_SLICE`` of the running Python's standard library (test suites left out): the same
    files every session, so its embeddings' cache entry is shared by the tests that use it."""
    import shutil
    import sysconfig
    from pathlib import Path

    src, dst = Path(sysconfig.get_paths()["stdlib"]), tmp_path_factory.mktemp("stdlib-slice")
    for name in STDLIB_SLICE:
        for p in (src / name, src / f"{name}.py"):
            if p.is_dir():
                shutil.copytree(p, dst / name, ignore=shutil.ignore_patterns("test", "tests", "__pycache__"))
            elif p.is_file():
                shutil.copy(p, dst / p.name)
    return str(dst)


def record_numbers(record) -> dict:
    """What must not depend on the number of workers or nodes: everything but wall-clock numbers
    (``timings`` keys and tables whose names start with ``timing``; see ``Outcome``)."""

    def strip(obj):
        return {k: strip(v) for k, v in obj.items() if k != "timings"} if isinstance(obj, dict) else obj

    return {"metrics": strip(record["metrics"]), "baselines": strip(record["baselines"]),
            "tables": {k: v for k, v in record["tables"].items() if not k.startswith("timing")}}


@pytest.fixture
def ray_session():
    """The shared local Ray (2 CPUs), started on first use and reused."""
    from rayml import runtime

    runtime.connect(**SHARED_RAY)
    yield runtime.cluster_info()


@pytest.fixture
def isolated_ray():
    """Shut the shared Ray down so the test can build its own topology; clean up after."""
    import ray

    from rayml import runtime

    runtime.shutdown()
    if ray.is_initialized():
        ray.shutdown()
    yield
    if ray.is_initialized():
        ray.shutdown()
    runtime.shutdown()


def _own_ray(item) -> bool:
    return "isolated_ray" in getattr(item, "fixturenames", ()) or item.get_closest_marker("own_ray") is not None


def pytest_collection_modifyitems(session, config, items):
    """Ship test-module functions to Ray workers by value (workers cannot import test modules),
    and run the tests that stop the shared Ray last, in their order (one shared Ray per run)."""
    from ray import cloudpickle

    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        try:
            cloudpickle.register_pickle_by_value(module)
        except ValueError:
            pass  # already registered
    items[:] = [i for i in items if not _own_ray(i)] + [i for i in items if _own_ray(i)]


def _base_timeout(item) -> float | None:
    """The item's unscaled limit: its ``timeout`` mark, else ``--timeout`` / ini ``timeout``."""
    import pytest_timeout

    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        if value is not None:
            return float(value)
    return pytest_timeout.get_env_settings(item.config).timeout


def pytest_configure(config):
    """Start the watchdog for tests stuck where pytest-timeout's signal cannot reach (not under pdb)."""
    if not (config.getoption("usepdb", False) or config.getoption("trace", False)):
        config._rayml_watchdog = Watchdog(config)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Scale the item's pytest-timeout limit to the load at its start (before pytest-timeout reads
    it); the watchdog ends the run, summary printed, if the test outlives that limit by far."""
    if not hasattr(item, "_rayml_base_timeout"):
        item._rayml_base_timeout = _base_timeout(item)
    base = item._rayml_base_timeout
    watchdog = getattr(item.config, "_rayml_watchdog", None)
    if base:
        limit_s = base * time_scale()
        item.add_marker(pytest.mark.timeout(limit_s, method="signal"), append=False)
        if watchdog is not None:
            watchdog.arm(item, limit_s, grace_s=max(60.0, 0.5 * limit_s))
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.disarm()


def pytest_report_header(config):
    """Say which time scale the run starts with."""
    return f"rayml test time scale: {time_scale():.2g} (RAYML_TEST_TIME_SCALE overrides; see tests/_timing.py)"


def start_cluster(head: dict, workers: list[dict]):
    """A ``ray.cluster_utils.Cluster`` with a head (``head``: its node arguments) and one worker node
    per dict in ``workers``; returns ``(cluster, worker_nodes)``. The nodes start without Ray's fixed
    30 s per-node wait and are awaited together under a scaled limit; a start that fails or times
    out shuts down what it started (nothing is left running into the next test)."""
    from ray.cluster_utils import Cluster

    from _timing import limit

    cluster = Cluster()
    try:
        cluster.add_node(wait=False, **head)  # the first node added is the head
        nodes = [cluster.add_node(wait=False, **args) for args in workers]
        cluster.wait_for_nodes(timeout=limit(60))
    except BaseException:
        cluster.shutdown()
        raise
    return cluster, nodes


def free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    from rayml.actors.serve.http import free_port as free

    return free()


@pytest.fixture(scope="session")
def serve_app(ray_kwargs):
    """``with serve_app(app, name, route) as base_url:`` runs a Serve app on the shared Ray over
    real HTTP on a loopback port, and deletes it (and any app it deployed) afterwards.

    Serve itself (controller and HTTP proxy) starts once and stays up between test modules:
    starting and shutting it down cost seconds per module. It is shut down at the session's end."""
    import contextlib

    @contextlib.contextmanager
    def run(app, name: str, route_prefix: str):
        from ray import serve

        from rayml import runtime
        from rayml.actors.serve.http import serve_port

        runtime.connect(**ray_kwargs)
        port = serve_port()
        before = set(serve.status().applications)
        serve.run(app, name=name, route_prefix=route_prefix)
        try:
            yield f"http://127.0.0.1:{port}{route_prefix}"
        finally:
            left = sorted(set(serve.status().applications) - before)
            if left:  # deleted together: one wait instead of one per app
                from ray.serve.context import _get_global_client

                _get_global_client().delete_apps(left, blocking=True)

    yield run
    import ray

    if ray.is_initialized():
        from ray import serve

        serve.shutdown()


# --- tests/experiments: every experiment's claims are wired to measured numbers -------------------

def _measured(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


_TINY_RECORDS: dict = {}


@pytest.fixture
def tiny_record(ray_session):
    """``f(name)``: the record of ``name``'s tiny run (seed 1, one Ray task at a time), run once per
    test session: the registry contract, the cluster test's one-node side and the claim-wiring tests of
    ``tests/experiments`` share it instead of running the same tiny experiment twice."""
    import copy

    from rayml import experiments

    def get(name: str) -> dict:
        if name not in _TINY_RECORDS:
            _TINY_RECORDS[name] = experiments.run(name, size="tiny", seed=1, workers=1)
        return copy.deepcopy(_TINY_RECORDS[name])

    return get


@pytest.fixture
def unmeasured_claims(tiny_record):
    """``f(name)``: the claim paths of experiment ``name`` that its ``tiny`` run leaves without a
    number (a claim on such a path can never hold), plus the paired tests whose table is missing."""

    from rayml import registry, results

    def check(name: str) -> list[str]:
        record = tiny_record(name)
        missing = []
        for claim in registry.get(name).load_experiment().claims:
            paths = [claim.metric] + ([claim.compare] if isinstance(claim.compare, str) else [])
            paths += [control.metric for control in claim.controls]
            for path in paths:
                try:
                    value = results.lookup(record, path)
                except KeyError:
                    value = None
                if not _measured(value):
                    missing.append(path)
            if claim.test and claim.table not in record["tables"]:
                missing.append(f"tables.{claim.table}")
        return missing

    return check
