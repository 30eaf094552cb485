"""rayml.runtime: pmap, seeds, retries, errors, limits and the batch evaluator on the shared Ray."""

from __future__ import annotations

import os

import numpy as np
import pytest

from rayml import runtime


def _square(x):
    return x * x


def _add_shared(x, shared):
    return x + shared["offset"]


def _fail_on_five(x):
    if x == 5:
        raise KeyError("five")
    return x


def _draw(seed):
    return float(np.random.default_rng(seed).standard_normal())


def _die_once(args):
    value, marker = args
    if value == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)  # the worker process dies: a system failure, retried by Ray
    return value * 10


def _slow(x):
    import time

    time.sleep(5)
    return x


def test_pmap_returns_ordered_results(ray_session):
    assert runtime.pmap(_square, range(23), progress=False) == [x * x for x in range(23)]
    assert runtime.pmap(_square, [], progress=False) == []


def test_pmap_chunking_does_not_change_results(ray_session):
    ref = [x * x for x in range(17)]
    for chunk in (1, 4, 17, 100):
        assert runtime.pmap(_square, range(17), chunk_size=chunk, progress=False) == ref


def test_pmap_shared_argument_goes_to_every_call(ray_session):
    assert runtime.pmap(_add_shared, range(5), shared={"offset": 100}, progress=False) == list(range(100, 105))


def test_pmap_names_the_failing_item(ray_session):
    with pytest.raises(runtime.PmapItemError) as info:
        runtime.pmap(_fail_on_five, range(10), chunk_size=3, progress=False)
    assert info.value.index == 5
    assert isinstance(info.value.error, KeyError)


def test_results_do_not_depend_on_the_number_of_workers(ray_session):
    items = runtime.seeds(42, 30)
    with runtime.max_workers(1):
        runtime.reset_stats()
        one = runtime.pmap(_draw, items, chunk_size=2, progress=False)
        assert runtime.stats()["tasks"] == 15
    runtime.reset_stats()
    two = runtime.pmap(_draw, items, chunk_size=2, progress=False)
    assert one == two
    assert runtime.stats()["tasks"] == 15


def test_seeds_are_independent_and_reproducible():
    a = runtime.seeds(0, 5)
    assert a == runtime.seeds(0, 5)
    assert a[:3] == runtime.seeds(0, 3)  # the i-th seed does not depend on n
    assert len(set(a)) == 5
    assert runtime.seeds(1, 5) != a
    with pytest.raises(ValueError, match="n must be"):
        runtime.seeds(0, -1)


def test_a_task_whose_worker_dies_is_retried_with_the_same_result(ray_session, tmp_path):
    marker = str(tmp_path / "died")
    items = [(v, marker) for v in range(6)]
    out = runtime.pmap(_die_once, items, chunk_size=1, max_retries=3, progress=False)
    assert out == [v * 10 for v in range(6)]
    assert os.path.exists(marker)  # the worker really died once


def test_without_retries_a_dead_worker_fails_the_map(ray_session, tmp_path):
    import ray

    marker = str(tmp_path / "died")
    with pytest.raises(ray.exceptions.RayError):
        runtime.pmap(_die_once, [(3, marker)], max_retries=0, progress=False)


def test_pmap_timeout(ray_session):
    with pytest.raises(TimeoutError, match="timeout_s"):
        runtime.pmap(_slow, [1], timeout_s=0.5, progress=False)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(chunk_size=0), "chunk_size"),
        (dict(chunk_size="big"), "chunk_size"),
        (dict(max_retries=-1), "max_retries"),
        (dict(num_cpus=-1), "num_cpus"),
        (dict(timeout_s=0), "timeout_s"),
    ],
)
def test_pmap_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        runtime.pmap(_square, [1], **kwargs)


def test_pmap_rejects_a_non_callable():
    with pytest.raises(TypeError, match="fn must be callable"):
        runtime.pmap(3, [1])


def test_max_workers_validates():
    with pytest.raises(ValueError, match="max_workers"):
        with runtime.max_workers(0):
            pass


def test_batch_evaluator_splits_rows_and_keeps_order(ray_session):
    f = lambda x: np.sum(x, axis=1)  # noqa: E731
    pts = np.arange(21, dtype=float).reshape(7, 3)
    runtime.reset_stats()
    out = runtime.batch_evaluator(f, blocks=3)(pts)
    assert np.array_equal(out, pts.sum(axis=1))
    assert runtime.stats()["tasks"] == 3
    with pytest.raises(ValueError, match="blocks"):
        runtime.batch_evaluator(f, blocks=0)
    grads = runtime.batch_evaluator(lambda x: 2.0 * x, blocks=2)(pts)  # one vector per point
    assert np.array_equal(grads, 2.0 * pts)
    rowwise = runtime.batch_evaluator(lambda x: float(np.sum(np.asarray(x) ** 2)), blocks=2)(pts)
    assert np.allclose(rowwise, (pts**2).sum(axis=1))


def test_connect_is_idempotent_and_reports_the_cluster(ray_session):
    info = runtime.connect()
    assert info == runtime.connect()
    assert info["cpus"] >= 1 and info["ray_nodes"] >= 1


def test_unreachable_or_malformed_addresses_fail_fast():
    # connect() checks the address before ray.init; the CLI test covers it end to end.
    with pytest.raises(runtime.ConnectError, match="nothing answers"):
        runtime._check_reachable("127.0.0.1:1")
    with pytest.raises(runtime.ConnectError, match="nothing answers"):
        runtime._check_reachable("ray://127.0.0.1:1")
    with pytest.raises(runtime.ConnectError, match="expected 'auto'"):
        runtime._check_reachable("not-an-address")


def test_package_for_cluster_has_the_mapped_subpackages(tmp_path):
    path = runtime.package_for_cluster(tmp_path / "pkg")
    for sub in ("actors/pool.py", "actors/serve/optimize.py", "kernels/__init__.py", "runtime.py"):
        assert os.path.exists(os.path.join(path, sub)), sub
    assert not any("__pycache__" in d for d, _, _ in os.walk(path))
    assert runtime.package_for_cluster(tmp_path / "pkg") == path  # its own folder: replaced


def test_package_for_cluster_never_deletes_what_it_did_not_make(tmp_path):
    mine = tmp_path / "dest" / "rayml"
    mine.mkdir(parents=True)
    (mine / "precious.txt").write_text("keep me")
    with pytest.raises(ValueError, match="was not made by rayml package"):
        runtime.package_for_cluster(tmp_path / "dest")
    assert (mine / "precious.txt").read_text() == "keep me"


def test_worker_limit_reports_the_enclosing_max_workers_block():
    assert runtime.worker_limit() is None
    with runtime.max_workers(1):
        assert runtime.worker_limit() == 1
        with runtime.max_workers(2):
            assert runtime.worker_limit() == 2
        assert runtime.worker_limit() == 1
    assert runtime.worker_limit() is None


def _logged_square(args):
    x, log = args
    with open(log, "a") as f:
        f.write(f"{x}\n")
    return x * x


def _fail_once_at_four(args):
    x, marker = args
    if x == 4 and not os.path.exists(marker):
        open(marker, "w").close()
        raise KeyError("four, the first time")
    return x * x


def test_resume_cache_reuses_finished_chunks_and_recomputes_when_inputs_or_code_change(ray_session, tmp_path,
                                                                                      monkeypatch):
    log = str(tmp_path / "calls.txt")
    items = [(x, log) for x in range(6)]
    calls = lambda: len(open(log).read().split())  # noqa: E731
    with runtime.resume_cache(tmp_path / "cache"):
        runtime.reset_stats()
        first = runtime.pmap(_logged_square, items, chunk_size=2, progress=False)
        assert calls() == 6 and runtime.stats()["resumed_items"] == 0
        runtime.reset_stats()
        again = runtime.pmap(_logged_square, items, chunk_size=2, progress=False)
        assert again == first == [x * x for x in range(6)]
        assert calls() == 6 and runtime.stats()["resumed_items"] == 6 and runtime.stats()["tasks"] == 0
        runtime.pmap(_logged_square, items[:4] + [(9, log), (5, log)], chunk_size=2, progress=False)
        assert calls() == 8  # only the chunk whose items changed ran again
        monkeypatch.setattr(runtime, "_CODE_FINGERPRINT", "another version of rayml")
        runtime.pmap(_logged_square, items, chunk_size=2, progress=False)
        assert calls() == 14  # other code: nothing is reused
    runtime.reset_stats()
    runtime.pmap(_logged_square, items, chunk_size=2, progress=False)
    assert calls() == 20 and runtime.stats()["resumed_items"] == 0  # outside the block: no cache


def test_a_run_killed_part_way_resumes_from_its_finished_chunks(ray_session, tmp_path):
    marker = str(tmp_path / "failed")
    items = [(x, marker) for x in range(8)]
    with runtime.resume_cache(tmp_path / "cache") as where:
        with pytest.raises(runtime.PmapItemError):
            runtime.pmap(_fail_once_at_four, items, chunk_size=1, max_in_flight=1, progress=False)
        assert len(list(where.glob("*.pkl"))) == 4  # items 0-3 finished before item 4 failed
        runtime.reset_stats()
        out = runtime.pmap(_fail_once_at_four, items, chunk_size=1, max_in_flight=1, progress=False)
    assert out == [x * x for x in range(8)]
    assert runtime.stats()["resumed_items"] == 4 and runtime.stats()["tasks"] == 4
    assert not list(where.glob("*.tmp*"))  # every file was written whole
