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
