"""Ray evaluation of one adaptive round of gradient queries, and chains spread over Ray tasks.

``RayGradient`` is an ``evaluator`` for the samplers of ``rayml.sampling.parallel``: the gradient
is put in the object store once, on the first round; each call (one round) splits the ``(K, d)`` batch into ``blocks`` row blocks and evaluates them as Ray tasks
through ``rayml.runtime.pmap``. The split depends only on ``blocks``, never on how many workers
run it, so results are identical for any number of workers.

Examples:
    >>> import numpy as np
    >>> from rayml.sampling.distributed import RayGradient
    >>> from rayml.sampling.parallel import ParallelPicardConfig, parallel_picard
    >>> grad = RayGradient(lambda x: -x, blocks=2)                         # doctest: +SKIP
    >>> algo = parallel_picard(lambda x: -x, ParallelPicardConfig(0.5, 4, 4, 6), evaluator=grad)
    >>> state, info = algo.step(0, algo.init(np.zeros((8, 3))))          # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from rayml import runtime

__all__ = ["RayGradient"]


def _gradient_block(block: np.ndarray, grad) -> np.ndarray:
    import ray

    if isinstance(grad, list):  # [ref]: the gradient, put in the object store once
        grad = ray.get(grad[0])
    return np.asarray(grad(block), dtype=float)


class RayGradient:
    """Evaluate ``grad`` on a batch ``(K, d)`` as ``blocks`` Ray tasks (one ``pmap`` per round).

    Args:
        grad: the row-vectorised gradient ``(k, d) -> (k, d)``; it must be picklable.
        blocks: row blocks (Ray tasks) per round.
    """

    def __init__(self, grad: Callable, *, blocks: int = 2):
        if not callable(grad):
            raise TypeError("grad must be callable")
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"blocks must be an integer >= 1, got {blocks!r}")
        self.grad = grad
        self.blocks = blocks
        self._ref = None

    def grad_ref(self):
        """The gradient's object-store reference, put there on the first round only."""
        import ray

        if self._ref is None:
            runtime.connect()
            self._ref = ray.put(self.grad)
        return self._ref

    def __call__(self, points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        parts = [p for p in np.array_split(points, min(self.blocks, max(1, points.shape[0]))) if len(p)]
        # each round ships only the reference (a few bytes; Ray refuses to put a bare ObjectRef)
        out = runtime.pmap(_gradient_block, parts, shared=[self.grad_ref()], chunk_size=1, progress=False,
                           desc="gradient round")
        return np.concatenate(out, axis=0)
