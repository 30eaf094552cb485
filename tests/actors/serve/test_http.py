"""actors/serve/http.py: one poison request never fails the requests batched with it."""

from __future__ import annotations

import asyncio

from rayml.actors.serve.http import generate_grouped


def _generate(group):
    if any(r["prompt"] == "poison" for r in group):
        raise RuntimeError("cannot generate this")
    return [r["prompt"].upper() for r in group]


def test_a_poison_request_fails_alone_in_its_batch():
    reqs = [{"prompt": p, "temperature": 0.0, "top_p": 1.0, "seed": None}
            for p in ["a", "b", "poison", "c", "d"]]
    out = asyncio.run(generate_grouped(reqs, _generate))
    assert out[:2] == ["A", "B"] and out[3:] == ["C", "D"]
    assert isinstance(out[2], RuntimeError)


def test_without_catch_the_error_propagates():
    import pytest

    with pytest.raises(RuntimeError):
        asyncio.run(generate_grouped([{"prompt": "poison", "temperature": 0.0, "top_p": 1.0, "seed": None}],
                                     _generate, catch=False))


def test_every_deployment_stops_an_idle_replica_without_serves_two_second_poll():
    """Serve's default ``graceful_shutdown_wait_loop_s`` (2 s) made every replica stop take about 3 s when idle;
    every rayml deployment polls its in-flight requests every ``SHUTDOWN_POLL_S`` instead."""
    from ray.serve.deployment import Deployment

    from rayml.actors.serve import constrained, emloc, epic, generate, optimize, purify, refine
    from rayml.actors.serve.http import SHUTDOWN_POLL_S

    found = [obj for mod in (constrained, emloc, epic, generate, optimize, purify, refine)
             for obj in vars(mod).values() if isinstance(obj, Deployment)]
    assert len({d.name for d in found}) >= 9
    for d in found:
        assert d._deployment_config.graceful_shutdown_wait_loop_s == SHUTDOWN_POLL_S, d.name
