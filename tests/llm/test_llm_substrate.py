"""The llm-substrate experiment: its per-task scores equal a direct serial evaluation."""

import numpy as np
import pytest

from rayml.experiments import llm_substrate as exp


def test_scores_equal_serial_evaluation(ray_session):
    import rayml.llm
    from rayml.llm import tasks

    cfg = dict(exp.SIZES["tiny"], items=6, chunk=4)
    out = exp.run(cfg, seed=3)
    lm = rayml.llm.pretrained("base", train_if_missing=False)
    for t in cfg["tasks"]:
        items = tasks.make_items(t, 6, np.random.default_rng([3, exp.TASK_NAMES.index(t)]), split="test")
        expected = float(tasks.evaluate([lm], items).mean())
        assert out.metrics["exact_match"][t] == pytest.approx(expected)
    assert {r["task"] for r in out.tables["scores"]} == set(cfg["tasks"])
    assert len(out.tables["items"]) == 6 * len(cfg["tasks"])
    assert out.metrics["card"]["training_seconds"] > 0


def test_unknown_task_is_rejected(ray_session):
    with pytest.raises(ValueError, match="tasks"):
        exp.run(dict(exp.SIZES["tiny"], tasks=["add", "nope"]), seed=0)
