"""Every implemented method's tiny run on a multi-node cluster whose nodes share no disk.

Each ``ray.cluster_utils.Cluster`` node gets its own ``RAYML_CACHE`` (as on KubeRay without a
shared volume), and so does the driver: a method that passes a path in one node's cache to a task
or actor on another node fails here: the nodes share this machine's disk, so every worker process
gets an audit hook that refuses to open a file under another node's (or the driver's) cache, as
if that disk were not there. The records must equal a single-node run's: the one-node tiny record the
contract suite made on the shared Ray in this session (``tiny_record`` in conftest), or, for a
method whose contract test did not run, one made here on a fresh local Ray with a fresh cache.
The cluster's two worker nodes run every method on at least two worker processes while the one-node
record ran on one, so the comparison is also the registry contract's worker-count invariance.
A record that depends on what earlier experiments left in a worker or the driver differs here:
that is a finding (two were found and fixed this way, see below), not noise to isolate away.
"""

from __future__ import annotations

import contextlib
import os

import pytest

from conftest import _TINY_RECORDS, SHARED_RAY, record_numbers, start_cluster
from rayml import experiments, registry, runtime

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]

NAMES = [m.name for m in registry.runnable()]

# One-node records (numbers only) compared by the cluster tests further down: the contract suite's
# shared-Ray tiny records where this session made them, else made by ``test_tiny_run_on_one_node``
# (each method under its own time limit, not every method inside one fixture's set-up).
_ONE_NODE: dict = {}


def _selected(request, test: str) -> list[str]:
    return [item.callspec.params["name"] for item in request.session.items
            if item.module is request.module and getattr(item, "originalname", None) == test
            and hasattr(item, "callspec") and "name" in item.callspec.params]


def _stop_ray() -> None:
    import ray

    runtime.shutdown()
    if ray.is_initialized():
        ray.shutdown()


@contextlib.contextmanager
def _fresh_one_node_ray(cache):
    """A fresh one-node Ray with a fresh cache of its own."""
    _stop_ray()
    old = os.environ.get("RAYML_CACHE")
    os.environ["RAYML_CACHE"] = str(cache)
    try:
        runtime.connect(**SHARED_RAY)
        yield
    finally:
        _stop_ray()
        _restore("RAYML_CACHE", old)


@pytest.fixture(scope="module")
def one_node_ray(tmp_path_factory):
    with _fresh_one_node_ray(tmp_path_factory.mktemp("single-node-cache")):
        yield


@pytest.fixture(scope="module")
def single_node(request, tmp_path_factory):
    """``{name: record numbers}`` of the one-node tiny runs; those that neither the contract suite
    nor ``test_tiny_run_on_one_node`` made in this run are made here, on a fresh one-node Ray,
    before the cluster starts."""
    ran = set(_selected(request, "test_tiny_run_on_one_node"))
    missing = [n for n in _selected(request, "test_tiny_run_on_nodes_with_their_own_caches_equals_one_node")
               if n not in ran and n not in _ONE_NODE and n not in _TINY_RECORDS]
    if missing:
        with _fresh_one_node_ray(tmp_path_factory.mktemp("single-node-cache")):
            for name in missing:
                _ONE_NODE[name] = record_numbers(experiments.run(name, size="tiny", seed=1))
    return {**{n: record_numbers(r) for n, r in _TINY_RECORDS.items()}, **_ONE_NODE}


def _restore(key: str, old) -> None:
    if old is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = old


@pytest.fixture(scope="module")
def cluster_without_shared_disk(single_node, tmp_path_factory):
    _stop_ray()  # the one-node Ray of test_tiny_run_on_one_node
    old = os.environ.get("RAYML_CACHE")
    driver, head = tmp_path_factory.mktemp("driver-cache"), tmp_path_factory.mktemp("head-cache")
    caches = [tmp_path_factory.mktemp(f"node{i}-cache") for i in range(2)]
    every = os.pathsep.join(str(p) for p in (driver, head, *caches))
    os.environ["RAYML_CACHE"] = str(driver)
    cluster = None
    try:  # a set-up that fails or times out half-way must not leave a cluster running
        cluster, _ = start_cluster(
            {"num_cpus": 0, "env_vars": {"RAYML_CACHE": str(head), "RAYML_TEST_CACHES": every}},
            [{"num_cpus": 1, "object_store_memory": 200 * 1024 * 1024,
              "env_vars": {"RAYML_CACHE": str(cache), "RAYML_TEST_CACHES": every}} for cache in caches])
        runtime.connect(address=cluster.address, runtime_env={"worker_process_setup_hook": _refuse_other_caches})
        yield caches
    finally:
        _stop_ray()
        if cluster is not None:
            cluster.shutdown()
        _restore("RAYML_CACHE", old)


@pytest.mark.parametrize("name", NAMES)
def test_tiny_run_on_one_node(name, request):
    if name in _TINY_RECORDS:
        record = _TINY_RECORDS[name]  # the contract suite's run on the shared one-node Ray
    else:
        request.getfixturevalue("one_node_ray")
        record = experiments.run(name, size="tiny", seed=1)
    assert record["env"]["ray_nodes"] == 1
    _ONE_NODE[name] = record_numbers(record)


def _refuse_other_caches() -> None:
    """Worker setup hook: opening a file under a cache that is not this node's raises."""
    import os
    import sys

    own = os.environ.get("RAYML_CACHE", "")
    others = tuple(r for r in os.environ.get("RAYML_TEST_CACHES", "").split(os.pathsep) if r and r != own)

    def hook(event, args):
        if event == "open" and args and isinstance(args[0], (str, bytes)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(others):
                raise PermissionError(f"{path}: a node-local path of another node reached this one")

    if others:
        sys.addaudithook(hook)


def test_each_node_really_has_its_own_cache(cluster_without_shared_disk):
    caches = runtime.pmap(_cache_of, list(range(8)), chunk_size=1, progress=False)
    assert set(caches) == {str(c) for c in cluster_without_shared_disk}


def test_a_path_from_the_drivers_cache_cannot_be_read_on_a_node(cluster_without_shared_disk):
    path = runtime.cache_root() / "driver-only.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    with pytest.raises(runtime.PmapItemError, match="another node"):
        runtime.pmap(_read, [str(path)], progress=False)


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read()


def _cache_of(_item: int) -> str:
    import time

    time.sleep(0.2)  # long enough that both nodes take tasks
    return str(runtime.cache_root())


# Found by this test (both fixed): run after the other experiments of this module, two methods gave
# cluster records that differed from the one-node records because of per-process state. diffadvmap's
# per-process transfer MLP and feature net took their initial weights from the worker's global torch
# RNG, which earlier tasks in that worker had moved (now seeded). l2d counted its LoRA budget through
# a per-process cache filled by loading a base model between ``torch.manual_seed`` and the LoRA's
# initialisation, in the first LoRA run of each worker only (now counted on the meta device).
@pytest.mark.parametrize("name", NAMES)
def test_tiny_run_on_nodes_with_their_own_caches_equals_one_node(name, single_node, cluster_without_shared_disk):
    record = experiments.run(name, size="tiny", seed=1)
    for _ in range(4):  # one worker can take every short task (busy machine, or an idle one: gdro-sparsity's
        if record["env"]["worker_pids"] >= 2:  # 17 sub-second tasks in session 11's idle CI): run it again
            break
        record = experiments.run(name, size="tiny", seed=1)
    assert record["env"]["ray_nodes"] == 3
    assert record["env"]["worker_pids"] >= 2, "the work never reached a second Ray worker process in 5 runs"
    assert name in single_node, f"{name}: no one-node record (its test_tiny_run_on_one_node failed in this run)"
    assert record_numbers(record) == single_node[name]
