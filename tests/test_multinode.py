"""Scale-out on a real multi-node Ray (``ray.cluster_utils.Cluster`` on this machine).

The head has 0 CPUs and three worker nodes have 1 CPU each, so every task runs on a worker node.
``pmap`` work lands on every node; a worker node removed mid-run loses and duplicates nothing, and
the results equal the single-node run's.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import pytest

from _timing import limit, wait_for
from conftest import start_cluster
from rayml import runtime

pytestmark = pytest.mark.slow


def _value(seed):
    return float(np.random.default_rng(seed).standard_normal())


def _work(seed):
    # Deterministic per item (``_value``); long enough that a node can be removed while tasks run.
    deadline = time.perf_counter() + 0.2
    acc = 0.0
    while time.perf_counter() < deadline:
        acc += float(np.sum(np.sin(np.arange(2000.0))))
    return _value(seed) + 0.0 * acc


@pytest.fixture
def three_node_cluster(isolated_ray):
    # health checks every 0.5 s (Ray's default waits ~15 s before it marks a removed node dead)
    cluster, workers = start_cluster(
        {"num_cpus": 0, "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}},
        [{"num_cpus": 1}] * 3)
    try:
        runtime.connect(address=cluster.address)
        yield cluster, workers
    finally:
        runtime.shutdown()
        cluster.shutdown()


def test_pmap_lands_on_every_node_and_survives_a_node_removed_mid_run(three_node_cluster):
    cluster, workers = three_node_cluster
    assert runtime.cluster_info() == {"ray_nodes": 4, "cpus": 3, "gpus": 0}
    items = runtime.seeds(7, 24)
    expected = [_value(s) for s in items]  # the single-process (single-node) answer

    runtime.reset_stats()
    assert runtime.pmap(_work, items, chunk_size=1, progress=False) == expected
    assert runtime.stats()["nodes_used"] == 3, "tasks ran on every worker node"

    runtime.reset_stats()
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("r", runtime.pmap(_work, items, chunk_size=1, max_retries=5, progress=False))
    )
    thread.start()
    # remove a node once tasks have come back from all three (so tasks run on every node), not after
    # a fixed sleep that a busy machine can outrun or fall short of
    wait_for(lambda: runtime.stats()["nodes_used"] == 3 or not thread.is_alive(), 120,
             what="tasks back from all three nodes", interval=0.05)
    cluster.remove_node(workers[0], allow_graceful=False)
    thread.join(timeout=limit(240))
    assert not thread.is_alive()
    assert out["r"] == expected  # nothing lost, nothing duplicated, same numbers
    assert len(out["r"]) == len(items)
    # the head marks the removed node dead after its health checks fail
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: runtime.cluster_info()["ray_nodes"] == 3, 60, what="removed node marked dead", interval=0.5)
    assert runtime.cluster_info()["ray_nodes"] == 3
