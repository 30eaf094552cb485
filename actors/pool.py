"""A resilient pool of stateful Ray actors (model holders, evaluators).

``ray.util.ActorPool`` does not survive an actor's death. ``ResilientActorPool`` does: when an
actor dies mid-map, a fresh one is built in its slot from the same class and arguments, the
items it held are resubmitted, and every item's result is returned exactly once, in order.
Waits are bounded: if no item finishes for ``wait_timeout_s`` the map raises ``TimeoutError``.

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
             "NodeDiedError", "ObjectLostError", "OwnerDiedError")
    return tuple(getattr(rex, n) for n in names if hasattr(rex, n))


class ResilientActorPool:
    """``size`` actors of ``actor_cls`` that survive deaths while mapping over items.

    Args:
        actor_cls: a plain class (wrapped with ``ray.remote`` here) or a Ray actor class.
        size: number of actors.
        args, kwargs: constructor arguments, reused for replacements.
        num_cpus, num_gpus: resources per actor.
        max_attempts: times one item may be lost to dead actors before the map gives up.
        wait_timeout_s: the longest the map waits without any item finishing.
    """

    def __init__(self, actor_cls, size: int, *, args: Sequence = (), kwargs: dict | None = None,
                 num_cpus: float = 1, num_gpus: float = 0, max_attempts: int = 3,
                 wait_timeout_s: float = 300.0):
        import ray

        if not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}")
        if wait_timeout_s <= 0:
            raise ValueError(f"wait_timeout_s must be > 0, got {wait_timeout_s!r}")
        runtime.connect()
        remote_cls = actor_cls if hasattr(actor_cls, "remote") else ray.remote(actor_cls)
        self._cls = remote_cls.options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)
        self._args, self._kwargs = tuple(args), dict(kwargs or {})
        self.max_attempts = max_attempts
        self.wait_timeout_s = float(wait_timeout_s)
        self.replaced = 0  # actors rebuilt after a death, over the pool's life
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
        import ray

        try:
            ray.kill(self._actors[slot], no_restart=True)
        except Exception:  # noqa: BLE001 - it is already gone
            pass
        self._actors[slot] = self._new_actor()
        self.replaced += 1

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
        if not isinstance(per_actor, int) or per_actor < 1:
            raise ValueError(f"per_actor must be a positive integer, got {per_actor!r}")
        items = list(items)
        queue = deque((i, 0) for i in range(len(items)))  # (index, attempts so far)
        results: dict[int, Any] = {}
        in_flight: dict = {}  # ref -> (slot, index, attempts)
        load = [0] * self.size
        lost = _actor_lost_errors()

        def submit():
            while queue:
                slot = min(range(self.size), key=load.__getitem__)
                if load[slot] >= per_actor:
                    return
                index, attempts = queue.popleft()
                ref = getattr(self._actors[slot], method).remote(items[index])
                in_flight[ref] = (slot, index, attempts)
                load[slot] += 1

        submit()
        while in_flight:
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=self.wait_timeout_s)
            if not done:
                raise TimeoutError(f"pool: no item finished within wait_timeout_s={self.wait_timeout_s}")
            ref = done[0]
            slot, index, attempts = in_flight.pop(ref)
            load[slot] -= 1
            try:
                value = ray.get(ref)
            except lost:
                # The actor in this slot is gone: rebuild it (once) and requeue everything it held.
                if attempts + 1 >= self.max_attempts:
                    raise RuntimeError(f"pool: item {index} was lost to dead actors {attempts + 1} times") from None
                held = [(r, v) for r, v in in_flight.items() if v[0] == slot]
                for r, (_, idx, att) in held:
                    in_flight.pop(r)
                    queue.appendleft((idx, att + 1))
                load[slot] = 0
                queue.appendleft((index, attempts + 1))
                self._replace(slot)
            except ray.exceptions.RayTaskError as exc:
                raise PoolItemError(index, exc.as_instanceof_cause()) from None
            else:
                if index not in results:  # a resubmitted duplicate never overwrites
                    results[index] = value
            submit()
        return [results[i] for i in range(len(items))]

    def call_all(self, method: str, *args: Any) -> list:
        """Call ``method(*args)`` on every actor (e.g. to load new state); returns their results."""
        import ray

        return ray.get([getattr(a, method).remote(*args) for a in self._actors])

    def shutdown(self) -> None:
        """Kill every actor of the pool."""
        import ray

        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []
