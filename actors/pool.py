"""A resilient pool of stateful Ray actors (model holders, evaluators).

``ray.util.ActorPool`` does not survive an actor's death. ``ResilientActorPool`` does, building on
Ray's own fault tolerance where it does the job:

* Actors are created with ``max_restarts``: when one dies, Ray restarts it in place (a new worker
  process, the constructor re-run with the same arguments, the same actor handle). The pool sees
  the death as the lost results of the items the actor held, waits for the restart (a
  ``__ray_ready__`` probe, without holding up the other slots) and resubmits those items.
* Only when Ray's restart budget is spent (the probe finds the actor dead for good) does the pool
  build a new actor in the slot from the same class and arguments.
* Items run with ``max_task_retries=0``: the pool resubmits them itself, so it counts each item's
  attempts (an item that kills every actor it meets fails after ``max_attempts`` instead of using
  up every restart) and knows of every death (``replaced``). ``call_all`` (a broadcast with no
  order to keep) uses Ray's ``max_task_retries`` directly.

Every item's result is returned exactly once, in order (a resubmitted duplicate never overwrites).
Waits are bounded: if no item finishes and no restart completes for ``wait_timeout_s`` the map
raises ``TimeoutError``.

Examples:
    >>> import ray
    >>> from rayml.actors.pool import ResilientActorPool
    >>> class Square:
    ...     def apply(self, x):
    ...         return x * x
    >>> pool = ResilientActorPool(Square, size=2)          # doctest: +SKIP
    >>> pool.map("apply", [1, 2, 3])                       # doctest: +SKIP
    [1, 4, 9]
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterable, Sequence

from rayml import runtime

__all__ = ["ResilientActorPool", "PoolItemError"]


class PoolItemError(RuntimeError):
    """The actor's method raised on one item; ``index`` names it, ``error`` is what it raised."""

    def __init__(self, index: int, error: BaseException):
        super().__init__(f"pool: item {index} raised {type(error).__name__}: {error}")
        self.index = index
        self.error = error


def _actor_lost_errors() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex

    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError",
             "NodeDiedError", "ObjectLostError", "OwnerDiedError",
             "OutOfMemoryError")  # the memory monitor killed the actor's worker: requeue as for a death
    return tuple(getattr(rex, n) for n in names if hasattr(rex, n))


class ResilientActorPool:
    """``size`` actors of ``actor_cls`` that survive deaths while mapping over items.

    Args:
        actor_cls: a plain class (wrapped with ``ray.remote`` here) or a Ray actor class.
        size: number of actors.
        args, kwargs: constructor arguments, reused for restarts and replacements.
        num_cpus, num_gpus: resources per actor.
        max_attempts: times one item may be lost to dead actors before the map gives up.
        wait_timeout_s: the longest the map waits without any item finishing.
        max_restarts: Ray's in-place restarts per actor (``-1``: unlimited); past them the pool
            builds a new actor in the slot (with a fresh budget).

    Attributes:
        replaced: deaths recovered over the pool's life (restarted in place or rebuilt).
        rebuilt: of those, actors built anew because Ray's restart budget was spent.
    """

    def __init__(self, actor_cls, size: int, *, args: Sequence = (), kwargs: dict | None = None,
                 num_cpus: float = 1, num_gpus: float = 0, max_attempts: int = 3,
                 wait_timeout_s: float = 300.0, max_restarts: int = 3):
        import ray

        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(f"max_restarts must be an integer >= -1, got {max_restarts!r}")
        if wait_timeout_s <= 0:
            raise ValueError(f"wait_timeout_s must be > 0, got {wait_timeout_s!r}")
        runtime.connect()
        remote_cls = actor_cls if hasattr(actor_cls, "remote") else ray.remote(actor_cls)
        self._cls = remote_cls.options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=max_restarts,
                                       max_task_retries=0)
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        self.max_attempts = max_attempts
        self.max_restarts = max_restarts
        self.wait_timeout_s = float(wait_timeout_s)
        self.replaced = 0  # deaths recovered, over the pool's life
        self.rebuilt = 0  # actors built anew (Ray's restart budget spent)
        self._actors = [self._new_actor() for _ in range(size)]

    def _new_actor(self):
        return self._cls.remote(*self._args, **self._kwargs)

    @property
    def actors(self) -> list:
        """The live actor handles, one per slot."""
        return list(self._actors)

    @property
    def size(self) -> int:
        """Number of actor slots."""
        return len(self._actors)

    def _replace(self, slot: int) -> None:
        """Build a new actor in ``slot`` (the old one is dead for good)."""
        import ray

        try:
            ray.kill(self._actors[slot], no_restart=True)
        except Exception:  # noqa: BLE001 - it is already gone
            pass
        self._actors[slot] = self._new_actor()
        self.rebuilt += 1

    def _probe(self, slot: int):
        """A ref that resolves once the actor in ``slot`` is alive again (Ray restarting it in
        place), or fails if it is dead for good."""
        return self._actors[slot].__ray_ready__.remote()

    def map(self, method: str, items: Iterable[Any], *, per_actor: int = 1) -> list:
        """Call ``actor.method(item)`` for every item; results in item order, each exactly once.

        Args:
            method: the actor method's name.
            items: the work items (only these travel; actors keep their state).
            per_actor: items queued on one actor at once (>1 hides scheduling latency).

        Raises:
            PoolItemError: the method raised on an item.
            RuntimeError: an item was lost to dead actors ``max_attempts`` times.
            TimeoutError: nothing finished for ``wait_timeout_s``.
        """
        import ray

        if not isinstance(method, str) or not method:
            raise ValueError(f"method must be a method name, got {method!r}")
        if isinstance(per_actor, bool) or not isinstance(per_actor, int) or per_actor < 1:
            raise ValueError(f"per_actor must be a positive integer, got {per_actor!r}")
        items = list(items)
        queue = deque((i, 0) for i in range(len(items)))  # (index, attempts so far)
        results: dict[int, Any] = {}
        in_flight: dict = {}  # ref -> (slot, index, attempts)
        probes: dict = {}  # ref -> slot: slots waiting for Ray to restart their actor
        load = [0] * self.size
        lost = _actor_lost_errors()
        unavailable = getattr(ray.exceptions, "ActorUnavailableError", ())

        def submit():
            recovering = set(probes.values())
            while queue:
                live = [s for s in range(self.size) if s not in recovering]
                if not live:
                    return
                slot = min(live, key=load.__getitem__)
                if load[slot] >= per_actor:
                    return
                index, attempts = queue.popleft()
                ref = getattr(self._actors[slot], method).remote(items[index])
                in_flight[ref] = (slot, index, attempts)
                load[slot] += 1

        submit()
        while in_flight or probes:
            done, _ = ray.wait(list(in_flight) + list(probes), num_returns=1, timeout=self.wait_timeout_s)
            if not done:
                raise TimeoutError(f"pool: no item finished within wait_timeout_s={self.wait_timeout_s}")
            ref = done[0]
            if ref in probes:
                slot = probes.pop(ref)
                try:
                    ray.get(ref)  # restarted in place by Ray: same handle, constructor re-run
                except unavailable:
                    # not yet known to be restarting: ask again (each probe is bounded by the wait)
                    time.sleep(0.05)
                    probes[self._probe(slot)] = slot
                    continue
                except lost:
                    self._replace(slot)  # Ray's restart budget is spent: a new actor in the slot
                submit()
                continue
            slot, index, attempts = in_flight.pop(ref)
            load[slot] -= 1
            try:
                value = ray.get(ref)
            except lost:
                # The actor in this slot died: requeue everything it held, and wait for Ray to
                # restart it (or rebuild it) before giving it more.
                if attempts + 1 >= self.max_attempts:
                    raise RuntimeError(f"pool: item {index} was lost to dead actors {attempts + 1} times") from None
                held = [(r, v) for r, v in in_flight.items() if v[0] == slot]
                for r, (_, idx, att) in held:
                    in_flight.pop(r)
                    queue.appendleft((idx, att + 1))
                load[slot] = 0
                queue.appendleft((index, attempts + 1))
                self.replaced += 1
                probes[self._probe(slot)] = slot
            except ray.exceptions.RayTaskError as exc:
                raise PoolItemError(index, exc.as_instanceof_cause()) from None
            else:
                if index not in results:  # a resubmitted duplicate never overwrites
                    results[index] = value
            submit()
        return [results[i] for i in range(len(items))]

    def call_all(self, method: str, *args: Any) -> list:
        """Call ``method(*args)`` on every actor (e.g. to load new state); returns their results.

        Ray retries a call whose actor dies and is restarted in place (``max_task_retries``); an
        actor dead for good is rebuilt in its slot and called once more."""
        import ray

        retries = -1 if self.max_restarts == -1 else self.max_restarts
        refs = [getattr(a, method).options(max_task_retries=retries).remote(*args) for a in self._actors]
        out = []
        for slot, ref in enumerate(refs):
            try:
                out.append(ray.get(ref, timeout=self.wait_timeout_s))
            except _actor_lost_errors():
                self._replace(slot)
                self.replaced += 1
                out.append(ray.get(getattr(self._actors[slot], method).remote(*args), timeout=self.wait_timeout_s))
        return out

    def shutdown(self) -> None:
        """Kill every actor of the pool."""
        import ray

        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []
