"""Shared fixtures: one local Ray for the whole session (``ray.init`` costs seconds here).

Tests that need another topology (a multi-node ``Cluster``, a ``ray start`` head for job
submission, Serve over HTTP) use ``isolated_ray``: it shuts the shared instance down first and
the next test that asks for ``ray_session`` starts it again.
"""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TQDM_DISABLE", "1")

SHARED_RAY = dict(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False)


@pytest.fixture(scope="session")
def ray_kwargs():
    """The ``ray.init`` settings of the shared local Ray (for module-scoped fixtures)."""
    return dict(SHARED_RAY)


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


def pytest_collection_modifyitems(session, config, items):
    """Ship test-module functions to Ray workers by value: workers cannot import test modules."""
    from ray import cloudpickle

    for module in {item.module for item in items if getattr(item, "module", None) is not None}:
        try:
            cloudpickle.register_pickle_by_value(module)
        except ValueError:
            pass  # already registered


def free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def serve_app(ray_kwargs):
    """``with serve_app(app, name, route) as base_url:`` runs a Serve app on the shared Ray over
    real HTTP on a free loopback port, and shuts Serve down afterwards."""
    import contextlib

    @contextlib.contextmanager
    def run(app, name: str, route_prefix: str):
        from ray import serve

        from rayml import runtime

        runtime.connect(**ray_kwargs)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app, name=name, route_prefix=route_prefix)
        try:
            yield f"http://127.0.0.1:{port}{route_prefix}"
        finally:
            serve.shutdown()

    return run


# --- tests/experiments: every experiment's claims are wired to measured numbers -------------------

def _measured(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


@pytest.fixture
def unmeasured_claims(ray_session):
    """``f(name)``: the claim paths of experiment ``name`` that its ``tiny`` run leaves without a
    number (a claim on such a path can never hold), plus the paired tests whose table is missing."""

    from rayml import experiments, registry, results

    def check(name: str) -> list[str]:
        record = experiments.run(name, size="tiny", seed=1)
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
