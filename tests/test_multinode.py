"""Scale-out on a real multi-node Ray (``ray.cluster_utils.Cluster`` on this machine).

The head has 0 CPUs and three worker nodes have 1 CPU each, so every task runs on a worker node.
``pmap`` work lands on every node; a worker node removed mid-run loses and duplicates nothing, and
the results equal the single-node run's.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from rayml import runtime

pytestmark = pytest.mark.slow


def _work(seed):
    # Deterministic per item; long enough that a node can be removed while tasks run.
    rng = np.random.default_rng(seed)
    deadline = time.perf_counter() + 0.25
    acc = 0.0
    while time.perf_counter() < deadline:
        acc += float(np.sum(np.sin(np.arange(2000.0))))
    return float(rng.standard_normal()) + 0.0 * acc


@pytest.fixture
def three_node_cluster(isolated_ray):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    workers = [cluster.add_node(num_cpus=1) for _ in range(3)]
    cluster.wait_for_nodes()
    runtime.connect(address=cluster.address)
    yield cluster, workers
    runtime.shutdown()
    cluster.shutdown()


def test_pmap_lands_on_every_node_and_survives_a_node_removed_mid_run(three_node_cluster):
    cluster, workers = three_node_cluster
    assert runtime.cluster_info() == {"ray_nodes": 4, "cpus": 3, "gpus": 0}
    items = runtime.seeds(7, 36)
    expected = [_work(s) for s in items]  # the single-process (single-node) answer

    runtime.reset_stats()
    assert runtime.pmap(_work, items, chunk_size=1, progress=False) == expected
    assert runtime.stats()["nodes_used"] == 3, "tasks ran on every worker node"

    runtime.reset_stats()
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.setdefault("r", runtime.pmap(_work, items, chunk_size=1, max_retries=5, progress=False))
    )
    thread.start()
    time.sleep(1.0)  # a few rounds of tasks are running on all three nodes
    cluster.remove_node(workers[0], allow_graceful=False)
    thread.join(timeout=240)
    assert not thread.is_alive()
    assert out["r"] == expected  # nothing lost, nothing duplicated, same numbers
    assert len(out["r"]) == len(items)
    deadline = time.monotonic() + 60  # the head marks the removed node dead after a health check
    while runtime.cluster_info()["ray_nodes"] != 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runtime.cluster_info()["ray_nodes"] == 3
