"""Purification of large batches on a pool of Ray actors that each hold the score model once.

``PurifierActor`` loads the score network and the classifier when it starts (shipped weights or
the cache) and purifies chunks of images; ``purify_on_pool`` cuts a batch into fixed chunks, each
with its own seed from ``rayml.runtime.seeds``, and maps them over a
``rayml.actors.pool.ResilientActorPool``: an actor that dies is restarted in place by Ray (a new
worker process re-runs the constructor, reloading the models) and the pool resubmits the chunks it
held; only once Ray's restart budget is spent does the pool build a new actor in that slot.
Results do not depend on the number of actors.

Examples:
    >>> from rayml.purify.pool import make_pool, purify_on_pool         # doctest: +SKIP
    >>> pool = make_pool(actors=2)                                       # doctest: +SKIP
    >>> out = purify_on_pool(pool, images, ssni="N", seed=0)             # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from rayml import runtime

__all__ = ["PurifierActor", "make_pool", "purify_on_pool", "purify_chunk"]


def purify_chunk(models: dict, item: dict) -> dict:
    """Purify one chunk ``item`` (images, method settings, seed) with loaded ``models``; numpy out."""
    import torch

    from rayml.purify import ssni as S

    images = torch.from_numpy(np.array(item["images"], dtype=np.float32))  # a writable copy of the object-store array
    pcfg = S.PurifyConfig(**item["purify"])
    scfg = S.SSNIConfig(**item["ssni"]) if item.get("ssni") else None
    with torch.no_grad():
        out, t = S.purify(models["score"], images, pcfg, ssni=scfg, ref=models["ref"], seed=int(item["seed"]))
        labels = models["classifier"](out).argmax(1)
    return {"images": out.numpy(), "t": t.numpy(), "labels": labels.numpy()}


class PurifierActor:
    """Holds the score model, the classifier and the clean reference statistics; purifies chunks."""

    def __init__(self, score_config: dict | None = None, classifier_config: dict | None = None,
                 eps_steps: int = 20, reference_size: int = 500, threads: int = 1):
        runtime.pin_threads(threads)
        self.models = load_models(score_config, classifier_config, eps_steps, reference_size)

    def purify(self, item: dict) -> dict:
        """Purify one chunk (see ``purify_chunk``)."""
        return purify_chunk(self.models, item)

    def ping(self) -> int:
        """Liveness check; returns the process id."""
        import os

        return os.getpid()


def load_models(score_config: dict | None = None, classifier_config: dict | None = None,
                eps_steps: int = 20, reference_size: int = 500) -> dict:
    """Score model, classifier and reference statistics (first ``reference_size`` training images)."""
    from rayml.purify import classifier as C
    from rayml.purify import diffusion as D
    from rayml.purify import ssni as S

    score = D.load_score_model(D.DiffusionConfig(**(score_config or {})))
    clf = C.load_classifier(C.ClassifierConfig(**(classifier_config or {})))
    xtr, _, _, _ = D.digits_split()
    ref = S.reference_stats(score, xtr[:reference_size], eps_steps=eps_steps, seed=12345)
    return {"score": score, "classifier": clf, "ref": ref}


def make_pool(actors: int = 2, *, score_config: dict | None = None, classifier_config: dict | None = None,
              eps_steps: int = 20, reference_size: int = 500, num_cpus: float = 1):
    """A ``ResilientActorPool`` of ``actors`` purifier actors (each pinned to ``num_cpus`` threads)."""
    from rayml.actors.pool import ResilientActorPool

    return ResilientActorPool(PurifierActor, size=actors, num_cpus=num_cpus,
                              kwargs=dict(score_config=score_config, classifier_config=classifier_config,
                                          eps_steps=eps_steps, reference_size=reference_size,
                                          threads=max(1, int(num_cpus))))


def purify_on_pool(pool, images: np.ndarray, *, method: str = "diffpure", t_star: float = 100.0,
                   stride: float = 1.0, ssni: str | None = None, ssni_kwargs: dict | None = None,
                   chunk: int = 64, seed: int = 0, per_actor: int = 2) -> dict[str, Any]:
    """Purify ``images`` (``(N, 1, 8, 8)`` in ``[0, 1]``) in chunks on ``pool``; concatenated numpy results."""
    from rayml.purify import ssni as S

    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    images = np.asarray(images, dtype=np.float32)
    pcfg = asdict(S.PurifyConfig(method=method, t_star=t_star, stride=stride))
    scfg = asdict(S.SSNIConfig(variant=ssni, t_star=t_star, **(ssni_kwargs or {}))) if ssni else None
    starts = list(range(0, images.shape[0], chunk))
    seeds = runtime.seeds(seed, len(starts))
    items = [{"images": images[s:s + chunk], "purify": pcfg, "ssni": scfg, "seed": sd} for s, sd in zip(starts, seeds)]
    parts = pool.map("purify", items, per_actor=per_actor)
    return {k: np.concatenate([p[k] for p in parts]) for k in ("images", "t", "labels")}
