"""rayml.actors.pool: a stateful pool that survives actors dying mid-map."""

from __future__ import annotations

import os
import time

import pytest

from rayml.actors.pool import PoolItemError, ResilientActorPool


class Holder:
    """Holds 'a model' (an offset) loaded once; dies once on a chosen item."""

    def __init__(self, offset, marker=None, die_on=None):
        self.offset, self.marker, self.die_on = offset, marker, die_on
        self.calls = 0

    def apply(self, x):
        self.calls += 1
        if x == self.die_on and self.marker and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        if x == -1:
            raise ValueError("negative item")
        time.sleep(0.01)
        return x + self.offset

    def pid(self):
        return os.getpid()


def test_map_returns_ordered_results(ray_session):
    pool = ResilientActorPool(Holder, size=2, args=(100,), num_cpus=0.5)
    try:
        assert pool.map("apply", range(10)) == [100 + x for x in range(10)]
        assert pool.map("apply", range(10), per_actor=3) == [100 + x for x in range(10)]
        assert len(set(pool.call_all("pid"))) == 2
    finally:
        pool.shutdown()


def test_an_actor_dying_mid_map_loses_nothing(ray_session, tmp_path):
    marker = str(tmp_path / "died")
    pool = ResilientActorPool(Holder, size=2, args=(1000,), kwargs={"marker": marker, "die_on": 7}, num_cpus=0.5)
    try:
        before = set(pool.call_all("pid"))
        out = pool.map("apply", range(20), per_actor=2)
        assert out == [1000 + x for x in range(20)]  # every item exactly once, in order
        assert os.path.exists(marker) and pool.replaced == 1
        assert set(pool.call_all("pid")) != before  # the dead actor was replaced
    finally:
        pool.shutdown()


def test_an_item_that_always_kills_its_actor_fails_clearly(ray_session, tmp_path):
    class Killer:
        def apply(self, x):
            if x == 2:
                os._exit(1)
            return x

    pool = ResilientActorPool(Killer, size=1, num_cpus=0.5, max_attempts=2)
    try:
        with pytest.raises(RuntimeError, match="item 2 was lost"):
            pool.map("apply", range(4))
    finally:
        pool.shutdown()


def test_errors_raised_by_the_method_name_the_item(ray_session):
    pool = ResilientActorPool(Holder, size=1, args=(0,), num_cpus=0.5)
    try:
        with pytest.raises(PoolItemError) as info:
            pool.map("apply", [1, -1, 2])
        assert info.value.index == 1 and isinstance(info.value.error, ValueError)
    finally:
        pool.shutdown()


def test_waits_are_bounded(ray_session):
    class Stuck:
        def apply(self, x):
            time.sleep(30)

    pool = ResilientActorPool(Stuck, size=1, num_cpus=0.5, wait_timeout_s=0.5)
    try:
        with pytest.raises(TimeoutError, match="wait_timeout_s"):
            pool.map("apply", [1])
    finally:
        pool.shutdown()


class Counted(Holder):
    """A Holder that appends its pid to ``births`` each time its constructor runs."""

    def __init__(self, offset, births, marker=None, die_on=None):
        super().__init__(offset, marker, die_on)
        with open(births, "a") as f:
            f.write(f"{os.getpid()}\n")


def test_the_actor_handle_survives_a_death_ray_restarts_it_in_place(ray_session, tmp_path):
    births, marker = str(tmp_path / "births"), str(tmp_path / "died")
    pool = ResilientActorPool(Counted, size=1, args=(10, births), kwargs={"marker": marker, "die_on": 3},
                              num_cpus=0.5)
    try:
        handle = pool.actors[0]
        first = pool.call_all("pid")[0]
        assert pool.map("apply", range(8), per_actor=3) == [10 + x for x in range(8)]
        assert pool.actors[0] is handle  # the same handle: Ray restarted the actor in place
        assert os.path.exists(marker) and pool.replaced == 1 and pool.rebuilt == 0
        with open(births) as f:
            pids = [int(line) for line in f]
        assert len(pids) == 2 and pids[0] == first  # the constructor ran again, in a new process
        assert pool.call_all("pid") == [pids[1]] != [first]
    finally:
        pool.shutdown()


def test_past_rays_restart_budget_a_new_actor_is_built_in_the_slot(ray_session, tmp_path):
    births, marker = str(tmp_path / "births"), str(tmp_path / "died")
    pool = ResilientActorPool(Counted, size=1, args=(10, births), kwargs={"marker": marker, "die_on": 3},
                              num_cpus=0.5, max_restarts=0)
    try:
        handle = pool.actors[0]
        assert pool.map("apply", range(8), per_actor=2) == [10 + x for x in range(8)]
        assert pool.replaced == 1 and pool.rebuilt == 1 and pool.actors[0] is not handle
        with open(births) as f:
            assert len(f.read().split()) == 2
    finally:
        pool.shutdown()


def test_bad_arguments():
    with pytest.raises(ValueError, match="size"):
        ResilientActorPool(Holder, size=0)
    with pytest.raises(ValueError, match="max_attempts"):
        ResilientActorPool(Holder, size=1, max_attempts=0)
    with pytest.raises(ValueError, match="max_restarts"):
        ResilientActorPool(Holder, size=1, max_restarts=-2)
