"""Shared fixtures: one local Ray for the whole session (``ray.init`` costs seconds here).

Tests that need another topology (a multi-node ``Cluster``, a ``ray start`` head for job
submission, Serve over HTTP) use ``isolated_ray``: it shuts the shared instance down first and
the next test that asks for ``ray_session`` starts it again.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TQDM_DISABLE", "1")

SHARED_RAY = dict(num_cpus=2, object_store_memory=200 * 1024 * 1024, include_dashboard=False)


@pytest.fixture(scope="session")
def ray_kwargs():
    """The ``ray.init`` settings of the shared local Ray (for module-scoped fixtures)."""
    return dict(SHARED_RAY)


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
