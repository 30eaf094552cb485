"""The optimize Serve app over real HTTP: answers, concurrency, 4xx for bad input, replica survives."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from rayml.actors.serve import optimize



@pytest.fixture(scope="module")
def url(serve_app):
    with serve_app(optimize.app, "optimize", "/optimize") as base:
        yield base


def test_parse_request_defaults_and_bounds():
    req = optimize.parse_request({"function": "ackley", "dim": 3})
    assert req["method"] == "gs-poweropt" and len(req["x0"]) == 3
    with pytest.raises(optimize.BadRequest, match="'dim'"):
        optimize.parse_request({"function": "ackley", "dim": 0})
    with pytest.raises(optimize.BadRequest, match="iterations \\* \\(samples \\+ 1\\)"):
        optimize.parse_request({"function": "ackley", "dim": 2, "iterations": 100_000, "samples": 100})


def test_answers_a_request(url):
    r = requests.post(url, json={"function": "ackley", "dim": 2, "iterations": 150, "samples": 30,
                                 "x0": [2.0, -2.0], "seed": 1}, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["evals"] == 150 * 31 + 1
    assert np.max(np.abs(body["x"])) < 0.5 and body["gap"] == pytest.approx(body["fun"])


def test_concurrent_requests_complete(url):
    payloads = [{"function": "rastrigin", "dim": 2, "iterations": 40, "samples": 10, "seed": s,
                 "method": m} for s, m in enumerate(optimize.METHODS * 2)]
    with ThreadPoolExecutor(max_workers=len(payloads)) as ex:
        codes = list(ex.map(lambda p: requests.post(url, json=p, timeout=120).status_code, payloads))
    assert codes == [200] * len(payloads)


@pytest.mark.parametrize(
    "payload, needle",
    [
        ({"dim": 2}, "'function' is required"),
        ({"function": "ackley"}, "'dim' is required"),
        ({"function": "nope", "dim": 2}, "'function' must be one of"),
        ({"function": "ackley", "dim": "2"}, "'dim' must be an integer"),
        ({"function": "ackley", "dim": 2, "sigma": -1}, "'sigma' must be in"),
        ({"function": "ackley", "dim": 2, "x0": [1.0]}, "'x0' must be a list of 2"),
        ({"function": "ackley", "dim": 2, "method": "sgd"}, "'method' must be one of"),
        ({"function": "ackley", "dim": 2, "iterations": 10**5, "samples": 1000}, "must be <="),
        ({"function": "ackley", "dim": 2, "extra": 1}, "unknown fields"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_requests_get_400_and_the_replica_survives(url, payload, needle):
    r = requests.post(url, json=payload, timeout=30)
    assert r.status_code == 400 and needle in r.json()["error"], r.text
    ok = requests.post(url, json={"function": "ackley", "dim": 2, "iterations": 5, "samples": 4}, timeout=30)
    assert ok.status_code == 200


def test_malformed_json_and_wrong_method(url):
    assert requests.post(url, data=b"{not json", timeout=30).status_code == 400
    assert requests.get(url, timeout=30).status_code == 405
