"""rayml.experiments.l2d: every declared claim is wired to a number its run measures; a finetuning
run's result depends on its work item only, not on what its worker process ran before."""

import numpy as np
import torch

from rayml import runtime
from rayml.experiments import l2d as E


def test_every_claim_is_measured_at_tiny_size(unmeasured_claims):
    assert unmeasured_claims("l2d") == []


def _tiny_shared():
    config = dict(E.SIZES["tiny"])
    s_train, s_held = runtime.seeds(1, 2)
    return {"config": config, "train": E._items(config, s_train, 16, "train"),
            "heldout": E._items(config, s_held, 8, "train"), "test": []}


def test_a_finetuning_run_does_not_depend_on_what_its_process_ran_before():
    """Found by the scale-out test (issue 17): the first LoRA run of each worker process loaded a base
    to count the L2D budget between ``torch.manual_seed`` and the LoRA's initialisation, so the LoRA
    started from other weights there than in later runs of the same process. Here one process runs
    the same item first, then after other work (an L2D run, bases loaded, draws from the global
    stream), and must return the same adapters and held-out loss."""
    torch.set_num_threads(1)
    shared = _tiny_shared()
    shared["config"] = dict(shared["config"], steps=2, batch=4)
    seed = runtime.seeds(2, 1)[0]
    first = E.train_task(("tune", "lora", 1e-3, 0, seed), shared)
    E.train_task(("tune", "l2d", 1e-3, 0, seed + 1), shared)
    E._base()
    torch.manual_seed(123)
    torch.randn(17)
    again = E.train_task(("tune", "lora", 1e-3, 0, seed), shared)
    assert again["heldout_loss"] == first["heldout_loss"]
    assert again["state"].keys() == first["state"].keys()
    assert all(np.array_equal(again["state"][k], first["state"][k]) for k in first["state"])
