"""The optimize Serve app over real HTTP: answers, concurrency, 4xx for bad input, replica survives."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from _timing import limit
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
                                 "x0": [2.0, -2.0], "seed": 1}, timeout=limit(60))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["evals"] == 150 * 31 + 1
    assert np.max(np.abs(body["x"])) < 0.5 and body["gap"] == pytest.approx(body["fun"])


def test_concurrent_requests_complete(url):
    payloads = [{"function": "rastrigin", "dim": 2, "iterations": 40, "samples": 10, "seed": s,
                 "method": m} for s, m in enumerate(optimize.METHODS * 2)]
    with ThreadPoolExecutor(max_workers=len(payloads)) as ex:
        codes = list(ex.map(lambda p: requests.post(url, json=p, timeout=limit(120)).status_code, payloads))
    assert codes == [200] * len(payloads)


@pytest.mark.parametrize(
    "payload, needle",
    [
        ({"dim": 2}, "'function': Field required"),
        ({"function": "ackley"}, "'dim': Field required"),
        ({"function": "nope", "dim": 2}, "'function': Value error, must be one of"),
        ({"function": "ackley", "dim": "2"}, "'dim': Input should be a valid integer"),
        ({"function": "ackley", "dim": 2, "sigma": -1}, "'sigma': Input should be greater than or equal"),
        ({"function": "ackley", "dim": 2, "x0": [1.0]}, "'x0' must be a list of 2"),
        ({"function": "ackley", "dim": 2, "method": "sgd"}, "'method': Value error, must be one of"),
        ({"function": "ackley", "dim": 2, "iterations": 10**5, "samples": 1000}, "must be <="),
        ({"function": "ackley", "dim": 2, "extra": 1}, "'extra': Extra inputs are not permitted"),
        ([1, 2], "'body'"),
        # the reproducers of the hardening issue: a 401-digit integer, seeds past int64
        ({"function": "ackley", "dim": 2, "sigma": 10**400}, "'sigma': Input should be a valid number"),
        ({"function": "ackley", "dim": 2, "seed": 2**64}, "'seed': Input should be less than or equal"),
        ({"function": "ackley", "dim": 10**400}, "'dim': Input should be less than or equal"),
    ],
)
def test_bad_requests_get_422_naming_the_field_and_the_replica_survives(url, payload, needle):
    r = requests.post(url, json=payload, timeout=limit(30))
    assert r.status_code == 422 and needle in r.json()["error"], r.text
    ok = requests.post(url, json={"function": "ackley", "dim": 2, "iterations": 5, "samples": 4}, timeout=limit(30))
    assert ok.status_code == 200


def test_malformed_json_wrong_method_and_a_huge_body(url):
    bad = requests.post(url, data=b"{not json", headers={"content-type": "application/json"}, timeout=limit(30))
    assert bad.status_code == 422 and "error" in bad.json()
    assert requests.get(url, timeout=limit(30)).status_code == 405
    huge = requests.post(url, data=b"[" + b"1," * 100_000 + b"1]", headers={"content-type": "application/json"},
                         timeout=limit(30))
    assert huge.status_code == 413 and "bytes" in huge.json()["error"]
    nested = requests.post(url, data=b"[" * 30000 + b"]" * 30000, headers={"content-type": "application/json"},
                           timeout=limit(30))
    assert 400 <= nested.status_code < 500


def test_the_app_publishes_its_openapi_schema(url):
    schema = requests.get(url.rstrip("/") + "/openapi.json", timeout=limit(30)).json()
    assert schema["info"]["title"].startswith("rayml optimize")
    assert "OptimizeRequest" in schema["components"]["schemas"]
    assert requests.get(url.rstrip("/") + "/docs", timeout=limit(30)).status_code == 200
