"""Purification on a ResilientActorPool: the same results as chunk by chunk in-process."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from rayml import runtime
from rayml.purify import diffusion as D
from rayml.purify import ssni as S
from rayml.purify.pool import load_models, make_pool, purify_chunk, purify_on_pool


def test_pool_results_match_in_process_purification(ray_session):
    import torch

    _, _, xte, _ = D.digits_split()
    images = xte[:24].numpy()
    pool = make_pool(actors=2, reference_size=64)
    try:
        out = purify_on_pool(pool, images, stride=50.0, ssni="N", chunk=8, seed=7)
        pids = set(pool.call_all("ping"))
    finally:
        pool.shutdown()
    assert len(pids) == 2
    assert out["images"].shape == images.shape and out["t"].shape == (24,) and out["labels"].shape == (24,)
    # each chunk carries its own seed, so 1 actor, 2 actors or none give the same numbers
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        models = load_models(reference_size=64)
        pcfg = asdict(S.PurifyConfig(stride=50.0))
        scfg = asdict(S.SSNIConfig("N"))
        for k, seed in enumerate(runtime.seeds(7, 3)):
            local = purify_chunk(models, {"images": images[8 * k:8 * k + 8], "purify": pcfg, "ssni": scfg, "seed": seed})
            for key in ("images", "t", "labels"):
                assert np.array_equal(local[key], out[key][8 * k:8 * k + 8])
    finally:
        torch.set_num_threads(old)


def test_bad_chunk_is_rejected():
    with pytest.raises(ValueError, match="chunk"):
        purify_on_pool(None, np.zeros((2, 1, 8, 8)), chunk=0)
